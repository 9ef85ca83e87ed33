"""What every exercise check shares: the failure type, the seeds of the random inputs (and their variant), the
exercises' contracts and hints, calling the learner's function (with the package's own solution of the step made to
refuse), comparing."""
import contextlib
import dataclasses
import functools
import importlib
import inspect
import io
import json
import numbers
import os
import sys
import time

import torch

from ..grading import results


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says how, and ``kind`` says which of the two (for the
    grader: attention_book.grading.results' outcomes; a wrong answer unless set)."""

    kind = results.WRONG

    def _render_traceback_(self):
        """IPython (Jupyter, Colab) shows these lines instead of a traceback: the message says it all."""
        return [f"\x1b[0;31mCheckFailed\x1b[0m: {line}" if i == 0 else line
                for i, line in enumerate(str(self).splitlines() or [""])]


def _failed(message, kind):
    """A CheckFailed of the given ``kind`` (attention_book.grading.results' NOT_WRITTEN or REFUSED)."""
    error = CheckFailed(message)
    error.kind = kind
    return error


# The variant of the checks' random inputs (ATTENTION_BOOK_CHECK_VARIANT): 0, the default, gives the inputs the
# chapters' stored outputs were made with; another number (``attention-book grade --variant SEED``) gives other
# inputs, so that an answer that looks up the public inputs' outputs fails.
_VARIANT_STRIDE = 1_000_003  # a prime above every seed a check uses, so that no two (seed, variant) pairs meet


def _variant():
    """The variant set by ATTENTION_BOOK_CHECK_VARIANT (a whole number from 0 to results.MAX_VARIANT; 0 when
    unset)."""
    return results.variant_number(os.environ.get(results.VARIANT_VARIABLE, "").strip() or "0",
                                  results.VARIANT_VARIABLE)


def _seed(seed):
    """The seed a check uses where its inputs are numbered ``seed``: ``seed`` itself in variant 0, another one in
    every other variant. Every seed in the checks goes through here."""
    return seed + _VARIANT_STRIDE * _variant()


def _generator(seed):
    """``torch.Generator().manual_seed(_seed(seed))``: a check's own generator, leaving the global one alone."""
    return torch.Generator().manual_seed(_seed(seed))


@contextlib.contextmanager
def _seeded(seed):
    """Inside, torch's global CPU generator is seeded with ``_seed(seed)`` (for what draws from it: a layer's
    initial weights, ``torch.randn`` without a generator); on leaving, it is back where the notebook had it. Only
    the CPU's generator is touched: forking CUDA's too would start CUDA on a machine with a GPU."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(_seed(seed))
        yield


class _Tee(io.TextIOBase):
    """Writes to ``stream`` and keeps a copy: the check's ✓ line still shows where it always does."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def _record(result):
    """Append ``result`` (a results.CheckResult) as one JSON line to the file ATTENTION_BOOK_CHECK_RESULTS names."""
    with open(os.environ[results.RESULTS_VARIABLE], "a", encoding="utf-8") as file:
        file.write(json.dumps(dataclasses.asdict(result), ensure_ascii=False) + "\n")


def recorded(check, exercise):
    """``check`` wrapped so that each call is recorded for the grader (a results.CheckResult, one JSON line) when
    ATTENTION_BOOK_CHECK_RESULTS names a file, under ``exercise``; when it does not, the wrapper only calls
    ``check``. A CheckFailed records its ``kind`` and message; any other error, results.ERROR and its type."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841 (IPython and pytest leave this frame out of a traceback)
        if not os.environ.get(results.RESULTS_VARIABLE):
            return check(*args, **kwargs)
        start, tee = time.perf_counter(), _Tee(sys.stdout)

        def record(outcome, message):
            _record(results.CheckResult(check.__name__, exercise, outcome, message,
                                        round(time.perf_counter() - start, 3), _variant()))
        try:
            with contextlib.redirect_stdout(tee):
                value = check(*args, **kwargs)
        except CheckFailed as error:
            record(error.kind, str(error))
            raise
        except Exception as error:
            record(results.ERROR, f"{type(error).__name__}: {error}")
            raise
        record(results.PASSED, "\n".join(line for line in tee.copy.getvalue().splitlines() if line.startswith("✓")))
        return value
    return run


# exercise name (the function the learner writes) -> (task, hint), filled by @_exercise on each check
EXERCISES = {}
# exercise name -> its idea: a first hint, in words, for the build exercises (whose full hint is the whole method)
IDEAS = {}


def _exercise(name, task, hint, idea=None):
    """Register the exercise whose function the learner names ``name``.

    ``task`` is its contract, shown when the function is still a stub: what it takes and must return, never how.
    ``hint`` is the method, shown only on request by ``hint(name)``; where an ``idea`` is given (the build
    exercises), ``hint(name)`` shows that first, in words, and ``hint(name, full=True)`` the method. Each run of the
    check is recorded for the grader when ATTENTION_BOOK_CHECK_RESULTS is set (``recorded``).
    """
    def register(check):
        EXERCISES[name] = (task, hint)
        if idea:
            IDEAS[name] = idea
        check = recorded(check, name)
        check.exercise = name
        return check
    return register


def hint(name, full=False):
    """Print the hint for an exercise: ``checks.hint("stable_softmax")``. For a build exercise it is the idea, in
    words; ``full=True`` prints the whole method.

    ``name`` is the name of the function the exercise asks for (the function itself works too). An unknown name
    raises ValueError listing the exercises' names.
    """
    key = getattr(name, "__name__", name)
    if key not in EXERCISES:
        raise ValueError(f"no exercise is called {name!r}; the exercises are: {', '.join(sorted(EXERCISES))}")
    if key in IDEAS and not full:
        print(f"Hint for {key}: {IDEAS[key]}\n(Still stuck? checks.hint(\"{key}\", full=True) gives the whole "
              "method.)")
    else:
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


def _resolve(dotted):
    """(owner, attribute name, object) for a dotted name: "attention_book.sdpa.scaled_dot_product_attention",
    "torch.Tensor.repeat_interleave", "attention_book.kv_cache.KVCache.append"."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1], getattr(owner, parts[-1])
    raise ValueError(f"cannot resolve {dotted!r}")


_INHERITED = object()  # a class attribute that only a base class defined: deleted again, not set


def _listed_copy(value, original):
    """Whether ``value`` is a chapter's copy of the function ``original``: a package-source cell defines the function
    in the notebook too, from the same source (same name, same bytecode), and the learner may call that copy."""
    code, own = getattr(value, "__code__", None), getattr(original, "__code__", None)
    return (code is not None and own is not None and getattr(value, "__name__", None) == original.__name__
            and code.co_code == own.co_code and code.co_names == own.co_names)


def _resolve_loaded(dotted):
    """``_resolve(dotted)``, or None for a name outside the package whose package is not loaded or, in the version
    loaded, does not have it (transformers' classes change from one version to the next)."""
    if dotted.startswith("attention_book."):
        return _resolve(dotted)
    if dotted.split(".")[0] not in sys.modules:
        return None
    try:
        return _resolve(dotted)
    except (AttributeError, ValueError):
        return None


def _entry(entry, why):
    """(dotted name, why, when) of one entry of ``refusing``'s names: a name, (name, why) or (name, why, when)."""
    entry = entry if isinstance(entry, tuple) else (entry,)
    return (*entry, why, None)[:3] if len(entry) == 1 else (*entry, None)[:3]


@contextlib.contextmanager
def refusing(names, answer, why="the package's own solution of this step"):
    """While active, calling any of ``names`` (dotted names of functions, methods or classes) raises CheckFailed,
    saying that ``answer`` (the learner's function) called it and ``why`` it may not. An entry is a name, a (name,
    why) pair, ("torch.Tensor.repeat_interleave", "which the exercise says not to call"), or a (name, why, when)
    triple: then only the calls for which ``when(*args, **kwargs)`` is true are refused, the others run as usual.

    Every binding of the same object is replaced: the attribute itself, the package's modules that imported it by
    name, and the learner's namespace (the globals of ``answer``, unwrapped), with a copy of the function that a
    listing cell defined there; so ``from attention_book.sdpa import scaled_dot_product_attention`` is caught too.
    A method is patched on its class. A name outside the package whose package is not loaded (transformers, gguf),
    or lacks it in the version loaded, is skipped: the answer cannot have called it. Every name is resolved before
    anything is patched, so their order does not matter. Compute the expected result before entering: the
    package's own functions refuse inside."""
    entries = [(dotted, because, when, *found) for dotted, because, when in map(lambda e: _entry(e, why), names)
               if (found := _resolve_loaded(dotted))]
    learners = getattr(inspect.unwrap(answer), "__globals__", {}) if callable(answer) else {}
    spaces = [vars(m) for n, m in list(sys.modules.items()) if n.startswith("attention_book") and m] + [learners]
    patched = []  # (namespace or owner, name, original), restored in reverse order

    def replace(owner, name, original, refusal):
        patched.append((owner, name, original))
        if isinstance(owner, dict):
            owner[name] = refusal
        else:
            setattr(owner, name, refusal)

    try:
        for dotted, because, when, owner, attribute, original in entries:
            def refusal(*args, _name=dotted, _why=because, _when=when, _original=original, **kwargs):
                if _when is not None and not _when(*args, **kwargs):
                    return _original(*args, **kwargs)
                raise _failed(f"{getattr(answer, '__name__', 'your answer')} calls {_name}, {_why}: "
                              "the exercise is to write that step yourself", results.REFUSED)
            if isinstance(owner, type):  # a method: patching the class is enough (one inherited is shadowed)
                replace(owner, attribute, owner.__dict__.get(attribute, _INHERITED), refusal)
                continue
            replace(owner, attribute, original, refusal)
            for space in spaces:
                for name, value in list(space.items()):
                    if value is original or space is learners and _listed_copy(value, original):
                        replace(space, name, value, refusal)
        yield
    finally:
        for owner, name, original in reversed(patched):
            if isinstance(owner, dict):
                owner[name] = original
            elif original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def _call(fn, args, exercise, refuse=()):
    """Call the learner's ``fn(*args)``: a stub becomes CheckFailed saying what the function must return (the
    contract of the exercise registered as ``exercise``) and where its hint is; any other error keeps its traceback
    (it points into the learner's code) with a note of the input that caused it.

    ``refuse``: dotted names of the package's (or torch's) functions that the answer must not call (its own solution
    of the step, or what the exercise says not to call); calling one fails the check (``refusing``)."""
    try:
        with refusing(refuse, fn):
            return fn(*args)
    except CheckFailed:
        raise
    except NotImplementedError:
        task = EXERCISES[exercise][0]
        raise _failed(f"{fn.__name__} is not written yet: {task} ({_see_hint(exercise)})",
                      results.NOT_WRITTEN) from None
    except Exception as error:
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"(raised by {fn.__name__} on input: {', '.join(map(_describe, args))})")
        raise


def _is_number(value, integer=False):
    """Whether value is a plain number (an integer, if ``integer``): not a bool, a tensor or a string."""
    kind = numbers.Integral if integer else numbers.Real
    return isinstance(value, kind) and not isinstance(value, bool)


def _require_number(fn, tried, got):
    """CheckFailed unless ``got`` is a plain number (a list, a tensor or a string is told so; a float goes on to the
    check's own message about whole numbers)."""
    if not _is_number(got):
        raise CheckFailed(f"{fn.__name__} on ({tried}): expected a number (an int), got {_describe(got)}")


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
    """The descriptions of the mistakes that give exactly ``got`` (NaN included) and not ``expected``, joined by
    "or" where two mistakes give the same result on this input; None if none does."""
    found = []
    for description, mistaken in mistakes:
        mistaken = mistaken()
        if (_same(mistaken, got, atol, equal_nan=True) and not _same(expected, mistaken, atol, equal_nan=True)
                and description not in found):
            found.append(description)
    return "\nor: ".join(found) or None


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
