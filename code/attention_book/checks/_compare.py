"""What every exercise check shares: the failure type, calling the learner's function, comparing."""
import torch


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says how."""

    def _render_traceback_(self):
        """IPython (Jupyter, Colab) shows these lines instead of a traceback: the message says it all."""
        return [f"\x1b[0;31mCheckFailed\x1b[0m: {line}" if i == 0 else line
                for i, line in enumerate(str(self).splitlines() or [""])]


def _describe(t):
    return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}" if isinstance(t, torch.Tensor) else repr(t)


def _call(fn, args, task):
    """Call the learner's ``fn(*args)``: a stub becomes CheckFailed saying what to write; any other error
    keeps its traceback (it points into the learner's code) with a note of the input that caused it."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise CheckFailed(f"{fn.__name__} is not written yet: {task}") from None
    except Exception as error:
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"(raised by {fn.__name__} on input: {', '.join(map(_describe, args))})")
        raise


def _worst(expected, got):
    """Where two tensors of the same shape differ most, and the two values there."""
    index = tuple(int(i) for i in torch.unravel_index((got - expected).abs().flatten().argmax(), got.shape))
    return f"largest difference at index {index}: expected {expected[index].item():.6g}, got {got[index].item():.6g}"


def _compare(what, tried, expected, got, hint="", atol=1e-5):
    """Raise CheckFailed unless ``got`` matches ``expected`` in type, shape, dtype and value."""
    hint = f"\nHint: {hint}" if hint else ""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} on {tried}: expected a tensor of shape {tuple(expected.shape)}, "
                          f"got {_describe(got)}")
    if got.shape != expected.shape:
        raise CheckFailed(f"{what} on {tried}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}{hint}")
    if got.dtype != expected.dtype:
        raise CheckFailed(f"{what} on {tried}: expected dtype {expected.dtype}, got {got.dtype}")
    if expected.dtype == torch.bool:
        if not torch.equal(got, expected):
            raise CheckFailed(f"{what} on {tried}:\nexpected\n{expected.int()}\ngot\n{got.int()}")
        return
    if torch.isnan(got).any():
        raise CheckFailed(f"{what} on {tried}: the result contains NaN{hint}")
    if not torch.allclose(got, expected, atol=atol, rtol=1e-4):
        raise CheckFailed(f"{what} on {tried}: values differ; {_worst(expected, got)}\n"
                          f"expected\n{expected}\ngot\n{got}{hint}")
