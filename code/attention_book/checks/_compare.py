"""What every exercise check shares: the failure type, the exercises' contracts and hints, calling the learner's
function, comparing."""
import torch


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says how."""

    def _render_traceback_(self):
        """IPython (Jupyter, Colab) shows these lines instead of a traceback: the message says it all."""
        return [f"\x1b[0;31mCheckFailed\x1b[0m: {line}" if i == 0 else line
                for i, line in enumerate(str(self).splitlines() or [""])]


# exercise name (the function the learner writes) -> (task, hint), filled by @_exercise on each check
EXERCISES = {}


def _exercise(name, task, hint):
    """Register the exercise whose function the learner names ``name``.

    ``task`` is its contract, shown when the function is still a stub: what it takes and must return, never how.
    ``hint`` is the method, shown only on request by ``hint(name)``.
    """
    def register(check):
        EXERCISES[name] = (task, hint)
        check.exercise = name
        return check
    return register


def hint(name):
    """Print the hint for an exercise: ``checks.hint("stable_softmax")``.

    ``name`` is the name of the function the exercise asks for (the function itself works too). An unknown name
    raises ValueError listing the exercises' names.
    """
    key = getattr(name, "__name__", name)
    if key not in EXERCISES:
        raise ValueError(f"no exercise is called {name!r}; the exercises are: {', '.join(sorted(EXERCISES))}")
    print(f"Hint for {key}: {EXERCISES[key][1]}")


def _see_hint(exercise):
    """What a wrong answer that matches no known mistake is told: where the method is, not the method itself."""
    if exercise not in EXERCISES:
        raise ValueError(f"no exercise is called {exercise!r}")
    return f'checks.hint("{exercise}") gives a hint'


def _describe(t):
    return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}" if isinstance(t, torch.Tensor) else repr(t)


def _size(*args):
    """How big an input is: the numbers in its tensors and in its modules' parameters (checks try small ones first)."""
    return sum(a.numel() if isinstance(a, torch.Tensor) else
               sum(p.numel() for p in a.parameters()) if isinstance(a, torch.nn.Module) else 0 for a in args)


def _call(fn, args, exercise):
    """Call the learner's ``fn(*args)``: a stub becomes CheckFailed saying what the function must return (the
    contract of the exercise registered as ``exercise``) and where its hint is; any other error keeps its traceback
    (it points into the learner's code) with a note of the input that caused it."""
    try:
        return fn(*args)
    except NotImplementedError:
        task = EXERCISES[exercise][0]
        raise CheckFailed(f"{fn.__name__} is not written yet: {task} ({_see_hint(exercise)})") from None
    except Exception as error:
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"(raised by {fn.__name__} on input: {', '.join(map(_describe, args))})")
        raise


def _worst(expected, got):
    """Where two tensors of the same shape differ most, and the two values there."""
    difference = (got - expected).abs().nan_to_num(nan=float("inf"))  # a NaN is the worst difference
    index = tuple(int(i) for i in torch.unravel_index(difference.flatten().argmax(), got.shape))
    return f"largest difference at index {index}: expected {expected[index].item():.6g}, got {got[index].item():.6g}"


def _same(a, b, atol=1e-5, equal_nan=False):
    """Whether tensor ``b`` equals ``a``: same shape and dtype, values within tolerance."""
    if not (isinstance(b, torch.Tensor) and b.shape == a.shape and b.dtype == a.dtype):
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.allclose(b, a, atol=atol, rtol=1e-4, equal_nan=equal_nan)


def _likely_mistake(expected, got, mistakes, atol):
    """The description of the first mistake that gives exactly ``got`` (NaN included) and not ``expected``."""
    for description, mistaken in mistakes:
        mistaken = mistaken()
        if _same(mistaken, got, atol, equal_nan=True) and not _same(expected, mistaken, atol, equal_nan=True):
            return description
    return None


def _compare(what, tried, expected, got, hint="", atol=1e-5, mistakes=()):
    """Raise CheckFailed unless ``got`` matches ``expected`` in type, shape, dtype and value.

    ``mistakes``: (description, function returning what that mistake gives on this input) pairs. A wrong result that
    equals one of them is reported as that likely mistake instead of the general ``hint``.
    """
    hint = f"\nHint: {hint}" if hint else ""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} on {tried}: expected a tensor of shape {tuple(expected.shape)}, "
                          f"got {_describe(got)}")
    if got.shape != expected.shape:
        raise CheckFailed(f"{what} on {tried}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}{hint}")
    if got.dtype != expected.dtype:
        raise CheckFailed(f"{what} on {tried}: expected dtype {expected.dtype}, got {got.dtype}")
    if _same(expected, got, atol):
        return
    likely = _likely_mistake(expected, got, mistakes, atol)
    if expected.dtype == torch.bool:
        shown = f"\nexpected\n{expected.int()}\ngot\n{got.int()}"
        raise CheckFailed(f"{what} on {tried}:{shown}" + (f"\nLikely mistake: {likely}" if likely else ""))
    if likely:
        raise CheckFailed(f"{what} on {tried}: values differ; {_worst(expected, got)}\nLikely mistake: {likely}")
    if torch.isnan(got).any():
        raise CheckFailed(f"{what} on {tried}: the result contains NaN{hint}")
    raise CheckFailed(f"{what} on {tried}: values differ; {_worst(expected, got)}\n"
                      f"expected\n{expected}\ngot\n{got}{hint}")
