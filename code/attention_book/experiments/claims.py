"""Claim checks: the sentences a chapter writes about a measured value, asserted on the reader's own run.

Training runs and timings end in different last digits on different CPUs, so a chapter prints them for the
reader and lets the notebook tests ignore the digits. What the prose says about them must still hold, on every
run: ``claim`` checks it and prints one stable line, which is what the notebook tests compare.

    >>> claim(0.94 > 0.8, "a layer-1 head scores above 0.8 on induction", measured="best score 0.94")
    ✓ a layer-1 head scores above 0.8 on induction

A claim that does not hold prints a ✗ line, what was measured and what to do, and the notebook goes on: a reader's
"Run all" is not stopped by a busy machine. What to do depends on the claim: a timing claim (``timing=True``: a
sentence about measured seconds, speeds, bandwidths or speedups) may fail because other work slowed the run,
so the reader is told to rerun the measurement, then the claim (``RERUN_TIMING``); any other claim that fails is a
mistake of the chapter on that machine, so the reader is told how to report it (``REPORT_FAILURE``).

The tests make claims strict (``STRICT``, set by tests/conftest.py): a claim that does not hold raises
``ClaimFailed``; and nbval, comparing the stored ✓ line, fails on a ✗ line anyway.
"""
import os

STRICT = "ATTENTION_BOOK_STRICT_CLAIMS"  # "1": a claim that does not hold raises ClaimFailed instead of printing ✗

# The book's repository: _config.yml's repository.url, written here by scripts/chapter_header.py (make chapter-headers;
# the package cannot read _config.yml in Colab).
REPOSITORY_URL = "https://github.com/attention-head-by-head/attention-book"

RERUN_TIMING = ("Timings vary with what else the machine is doing: rerun the cell above that measures, then this "
                "one. The rest of the notebook runs on.")
REPORT_FAILURE = ("This sentence of the chapter is wrong on your machine: please report it at "
                  f"{REPOSITORY_URL}/issues, with these lines, your CPU and torch.__version__. The rest of the "
                  "notebook runs on.")


class ClaimFailed(AssertionError):
    """A sentence of the chapter does not hold on this run (strict claims); the message says what was measured."""


def strict() -> bool:
    """Whether claims raise instead of printing ✗ (the environment variable ``STRICT`` set to anything but 0)."""
    return os.environ.get(STRICT, "") not in ("", "0")


def claim(holds, statement: str, measured: str = "", timing: bool = False) -> None:
    """Check that ``statement`` (a sentence the prose makes) holds on this run, and print it after a ✓.

    ``holds`` is the condition (a bool, or a one-element tensor); ``measured`` says what was measured, shown only
    when the claim does not hold, so the printed line stays the same on every machine; ``timing``: the sentence is
    about measured times or speeds, which a busy machine can make fail. A claim that does not hold prints ✗, the
    sentence, the measurement and what to do (``RERUN_TIMING`` for a timing claim, ``REPORT_FAILURE`` for any
    other), and returns (raises ``ClaimFailed`` when ``strict()``).
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("statement must be a non-empty sentence, the claim as the prose makes it")
    if bool(holds):
        print(f"✓ {statement}")
        return
    detail = f" (measured: {measured})" if measured else ""
    if strict():
        raise ClaimFailed(f"the chapter claims that {statement}, but on this run it does not hold{detail}")
    print(f"✗ {statement}\n  On this run it does not hold{detail}.\n  {RERUN_TIMING if timing else REPORT_FAILURE}")
