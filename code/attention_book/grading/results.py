"""What a check's run came to, as one JSON line: the grader reads these lines, never the tracebacks.

When the environment variable ``ATTENTION_BOOK_CHECK_RESULTS`` names a file, every exercise check (and chapter 16's
``checks.same_tokens_as_package``) appends one line to it each time it runs (attention_book.checks._compare's
``recorded`` writes it)::

    {"check": "check_stable_softmax", "exercise": "stable_softmax", "outcome": "passed",
     "message": "✓ stable_softmax matches torch.softmax on 5 inputs, ...", "seconds": 0.04, "variant": 0}

Without the variable a check prints and raises exactly as it always does. ``ATTENTION_BOOK_CHECK_VARIANT`` (a whole
number from 0 to MAX_VARIANT, 0 when unset) picks the checks' random inputs: 0 gives the public ones, the chapters'
stored outputs. This module imports nothing heavy: the checks use it inside the learner's kernel.
"""
import contextlib
import dataclasses
import json

RESULTS_VARIABLE = "ATTENTION_BOOK_CHECK_RESULTS"
VARIANT_VARIABLE = "ATTENTION_BOOK_CHECK_VARIANT"  # the checks' inputs: 0 (unset) the public ones, else others
MAX_VARIANT = 1_000_000  # a variant shifts each seed by variant * 1_000_003: this keeps seeds far inside 64 bits

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


def variant_number(text, name="--variant"):
    """The variant of the checks' inputs that ``text`` gives: a whole number from 0 to MAX_VARIANT; else
    ValueError naming ``name`` (the option or environment variable it came from) and the rule."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0 <= value <= MAX_VARIANT:
        raise ValueError(f"{name} must be a whole number from 0 to {MAX_VARIANT:,} (the variant of the checks' "
                         f"inputs; 0 gives the public ones), got {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One run of one check: ``check`` (its name, "check_stable_softmax"), ``exercise`` (the function the learner
    writes, "stable_softmax"), its ``outcome`` (one of the strings above), its ``message`` (the ✓ line,
    CheckFailed's text, or the type and text of another error), the ``seconds`` it took and the ``variant`` of the
    inputs it tried."""
    check: str
    exercise: str
    outcome: str
    message: str
    seconds: float
    variant: int = 0

    @property
    def passed(self):
        return self.outcome == PASSED


_FIELDS = tuple(field.name for field in dataclasses.fields(CheckResult))


def read_results(path):
    """The CheckResults recorded in the file ``path``, in order ([] if there is no such file). A line that is not
    a result (the learner's code may write anything to the file) is skipped."""
    results = []
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as file:
        for line in file:
            try:
                fields = json.loads(line)
                results.append(CheckResult(**{name: fields[name] for name in _FIELDS if name in fields}))
            except (ValueError, TypeError, AttributeError):
                continue
    return results
