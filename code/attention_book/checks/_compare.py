"""What every exercise check shares: the failure type, calling the learner's function, comparing."""
import torch


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says how."""


def _call(fn, args, task):
    try:
        return fn(*args)
    except NotImplementedError:
        raise CheckFailed(f"{fn.__name__} is not written yet: {task}") from None


def _describe(t):
    return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}" if isinstance(t, torch.Tensor) else repr(t)


def _compare(what, tried, expected, got, hint="", atol=1e-5):
    """Raise CheckFailed unless ``got`` matches ``expected`` in type, shape, dtype and value."""
    hint = f"\nHint: {hint}" if hint else ""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} on {tried}: expected a tensor, got {_describe(got)}")
    if got.shape != expected.shape:
        raise CheckFailed(f"{what} on {tried}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if got.dtype != expected.dtype:
        raise CheckFailed(f"{what} on {tried}: expected dtype {expected.dtype}, got {got.dtype}")
    if expected.dtype == torch.bool:
        if not torch.equal(got, expected):
            raise CheckFailed(f"{what} on {tried}:\nexpected\n{expected.int()}\ngot\n{got.int()}")
        return
    if torch.isnan(got).any():
        raise CheckFailed(f"{what} on {tried}: the result contains NaN{hint}")
    if not torch.allclose(got, expected, atol=atol, rtol=1e-4):
        worst = (got - expected).abs().max().item()
        raise CheckFailed(f"{what} on {tried}: values differ by up to {worst:.3g}\n"
                          f"expected\n{expected}\ngot\n{got}{hint}")
