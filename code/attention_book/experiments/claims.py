"""Claim checks: the sentences a chapter writes about a measured value, asserted on the reader's own run.

Training runs and timings end in different last digits on different CPUs, so a chapter prints them for the
reader and lets the notebook tests ignore the digits. What the prose says about them must still hold, on every
run: ``claim`` asserts it and prints one stable line, which is what the notebook tests compare.

    >>> claim(0.94 > 0.8, "a layer-1 head scores above 0.8 on induction", measured="best score 0.94")
    ✓ a layer-1 head scores above 0.8 on induction
"""


class ClaimFailed(AssertionError):
    """A sentence of the chapter does not hold on this run; the message says what was measured."""


def claim(holds, statement: str, measured: str = "") -> None:
    """Assert that ``statement`` (a sentence the prose makes) holds on this run, and print it after a ✓.

    ``holds`` is the condition (a bool, or a one-element tensor); ``measured`` says what was measured, shown only
    when the claim fails, so the printed line stays the same on every machine.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("statement must be a non-empty sentence, the claim as the prose makes it")
    if not bool(holds):
        detail = f" (measured: {measured})" if measured else ""
        raise ClaimFailed(f"the chapter claims that {statement}, but on this run it does not hold{detail}")
    print(f"✓ {statement}")
