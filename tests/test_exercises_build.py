"""Exercises that build: every chapter has one whose model solution is at least MIN_BUILD_LINES lines of code, no
exercise's model solution can be copied from a code cell above it, and the checks refuse answers that call the
package's own solution of the step.

The refusals are tried with cheating answers: each tests/test_build_exercises_*.py file holds a dict ``CHEATS``,
check name -> an answer that calls the package's (or torch's) function for the step, and checks the rest of its
chapters' new exercises (wrong answers, copies, "do not call X").
"""
import contextlib
import importlib
import io
import re

import attention_book.checks as checks
import nbformat
import pytest
from attention_book.checks import CheckFailed
from conftest import ROOT, chapter_paths

from exercises import SOLUTION

MIN_BUILD_LINES = 8
COPIED = 0.5  # an exercise is copyable when more than this share of its solution's lines appear in a cell above


def code_lines(text):
    """The lines of code of a piece of source: stripped, blank lines, comment lines and inline comments left out."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()  # an inline comment (two spaces, #, space: PEP 8's form)
        if line and not line.startswith("#"):
            lines.append(" ".join(line.split()))
    return lines


def solution_lines(source):
    """The code lines of the solution regions of an exercise cell (markers excluded)."""
    return [line for m in SOLUTION.finditer(source) for line in code_lines(m.group(0))]  # the markers are comments


def exercises(nb):
    """(cell index, solution lines) of each code cell that holds a model solution."""
    return [(i, solution_lines(c.source)) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and SOLUTION.search(c.source)]


def shown_above(nb, index):
    """The code lines of the code cells above ``index`` that the reader sees in full: not the exercises (the
    learner writes those) and not the hidden claim and check cells."""
    seen = set()
    for cell in nb.cells[:index]:
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type == "code" and not tags & {"exercise", "exercise-check"}:
            seen.update(code_lines(cell.source))
    return seen


chapters_with_exercises = [p for p in chapter_paths()
                           if any(SOLUTION.search(c.source) for c in nbformat.read(p, as_version=4).cells)]


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_every_chapter_has_an_exercise_that_builds(path):
    nb = nbformat.read(path, as_version=4)
    longest = max(len(lines) for _, lines in exercises(nb))
    assert longest >= MIN_BUILD_LINES, (f"{path.name}: its longest model solution has {longest} lines of code; a "
                                        f"build exercise has at least {MIN_BUILD_LINES}")


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_no_exercise_can_be_copied_from_a_cell_above(path):
    nb = nbformat.read(path, as_version=4)
    for index, lines in exercises(nb):
        above = shown_above(nb, index)
        copied = [line for line in lines if line in above]
        assert len(copied) <= COPIED * len(lines), (
            f"{path.name} cell {index}: {len(copied)} of the model solution's {len(lines)} lines appear in a code "
            f"cell above it: {copied}")


def test_the_copy_test_catches_a_copy():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f(q, k):\n    s = q @ k.T  # scores\n    w = s.softmax(-1)\n    return w @ k\n"),
        nbformat.v4.new_code_cell("def g(q, k):\n    ### BEGIN SOLUTION\n    s = q @ k.T\n    w = s.softmax(-1)\n"
                                  "    return w @ k * 2\n    ### END SOLUTION\n", metadata={"tags": ["exercise"]})])
    (index, lines), = exercises(nb)
    assert lines == ["s = q @ k.T", "w = s.softmax(-1)", "return w @ k * 2"]
    assert sum(line in shown_above(nb, index) for line in lines) == 2  # more than half: copyable


def chapter_of_check():
    """check name -> the chapter whose exercise cells call it."""
    found = {}
    for path in chapter_paths():
        for cell in nbformat.read(path, as_version=4).cells:
            if "exercise-check" in cell.metadata.get("tags", []):
                for name in re.findall(r"checks\.(check_\w+)\(", cell.source):
                    found[name] = path.name
    return found


def all_cheats():
    """check name -> cheating answer, from every tests/test_build_exercises_*.py."""
    cheats = {}
    for file in sorted((ROOT / "tests").glob("test_build_exercises_*.py")):
        cheats.update(getattr(importlib.import_module(file.stem), "CHEATS", {}))  # the module pytest imports too
    return cheats


CHEATS = all_cheats()


@pytest.mark.parametrize("check", sorted(CHEATS))
def test_a_check_refuses_the_package_solution(check):
    with contextlib.redirect_stdout(io.StringIO()) as shown, pytest.raises(CheckFailed) as failure:
        getattr(checks, check)(CHEATS[check])
    assert "✓" not in shown.getvalue()
    assert "the exercise is to write that step yourself" in str(failure.value), str(failure.value)


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_every_chapter_has_a_check_that_refuses_the_package_solution(path):
    refused = {check for check, chapter in chapter_of_check().items() if chapter == path.name and check in CHEATS}
    assert refused, f"{path.name}: no check of its exercises is tried with an answer that calls the package's own"
