"""What a check's run came to, as one JSON line: the grader reads these lines, never the tracebacks.

When the environment variable ``ATTENTION_BOOK_CHECK_RESULTS`` names a file, every exercise check (and chapter 16's
``checks.same_tokens_as_package``) appends one line to it each time it runs::

    {"check": "check_stable_softmax", "exercise": "stable_softmax", "passed": true, "outcome": "passed",
     "message": "✓ stable_softmax matches torch.softmax on 5 inputs, ...", "seconds": 0.04, "variant": 0}

Without the variable a check prints and raises exactly as it always does. ``ATTENTION_BOOK_CHECK_VARIANT`` (an
integer, 0 when unset) picks the checks' random inputs: 0 gives the public ones, the chapters' stored outputs.
This module imports nothing heavy: the checks use it inside the learner's kernel.
"""
import contextlib
import dataclasses
import functools
import io
import json
import os
import sys
import time

RESULTS_VARIABLE = "ATTENTION_BOOK_CHECK_RESULTS"
VARIANT_VARIABLE = "ATTENTION_BOOK_CHECK_VARIANT"  # the checks' inputs: 0 (unset) the public ones, else others

# What a check run came to (the check says so) ...
PASSED = "passed"
NOT_WRITTEN = "not written yet"
WRONG = "wrong answer"
REFUSED = "calls a function it may not"
ERROR = "error"
# ... and what the grader adds, where the check could not run or did not finish
SYNTAX_ERROR = "syntax error"
TIME_LIMIT = "time limit"
MISSING = "answer cell missing"
OTHER_CHAPTER = "another chapter's notebook"
KERNEL_DIED = "kernel died"
NOT_RUN = "not run"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One run of one check: ``check`` (its name, "check_stable_softmax"), ``exercise`` (the function the learner
    writes, "stable_softmax"), whether it ``passed``, its ``outcome`` (one of the strings above), its ``message``
    (the ✓ line, CheckFailed's text, or the type and text of another error), the ``seconds`` it took and the
    ``variant`` of the inputs it tried."""
    check: str
    exercise: str
    passed: bool
    outcome: str
    message: str
    seconds: float
    variant: int = 0


class _Tee(io.TextIOBase):
    """Writes to ``stream`` and keeps a copy: the check's ✓ line still shows where it always does."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def _is_check_failed(error):
    """Whether ``error`` is the checks' CheckFailed (known by name: importing the checks here would import torch)."""
    return type(error).__name__ == "CheckFailed"


def _outcome(error):
    """The outcome of a check that raised ``error``: a CheckFailed says its own (``kind``), else ERROR."""
    if _is_check_failed(error):
        return getattr(error, "kind", WRONG)
    return ERROR


def _message(error):
    return str(error) if _is_check_failed(error) else f"{type(error).__name__}: {error}"


def record(result, path=None):
    """Append ``result`` (a CheckResult) to the file named by ``path`` or by ``ATTENTION_BOOK_CHECK_RESULTS``."""
    path = path or os.environ[RESULTS_VARIABLE]
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(dataclasses.asdict(result), ensure_ascii=False) + "\n")


def recorded(check, exercise, variant=lambda: 0):
    """``check`` wrapped so that each call is recorded when ``ATTENTION_BOOK_CHECK_RESULTS`` is set (``variant()``
    gives the variant of its inputs); when it is not, the wrapper only calls ``check``."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        __tracebackhide__ = True  # noqa: F841 (IPython and pytest leave this frame out of a traceback)
        if not os.environ.get(RESULTS_VARIABLE):
            return check(*args, **kwargs)
        start, tee = time.perf_counter(), _Tee(sys.stdout)
        try:
            with contextlib.redirect_stdout(tee):
                value = check(*args, **kwargs)
        except Exception as error:
            record(CheckResult(check.__name__, exercise, False, _outcome(error), _message(error),
                               round(time.perf_counter() - start, 3), variant()))
            raise
        shown = [line for line in tee.copy.getvalue().splitlines() if line.startswith("✓")]
        record(CheckResult(check.__name__, exercise, True, PASSED, "\n".join(shown),
                           round(time.perf_counter() - start, 3), variant()))
        return value
    return run


def read_results(path):
    """The CheckResults recorded in the file ``path``, in order ([] if there is no such file). A line that is not
    a result (the learner's code may write anything to the file) is skipped."""
    results = []
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as file:
        for line in file:
            try:
                results.append(CheckResult(**json.loads(line)))
            except (ValueError, TypeError):
                continue
    return results
