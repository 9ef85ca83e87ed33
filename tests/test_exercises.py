"""Exercises: each check fails on the student's stub and passes on the stored solution.

The chapter runs in-process, top to bottom, once with solutions and once with every solution
region replaced by its stub (scripts/exercises.py); cells tagged ``exercise-check`` are recorded.
"""
import contextlib
import io

import matplotlib

matplotlib.use("Agg")  # in this process only; nbval's kernels keep the inline backend
import matplotlib.pyplot as plt  # noqa: E402
import nbformat
import pytest
from attention_book.checks import CheckFailed
from conftest import chapter_paths

from exercises import has_solution, stub_solutions


def run_chapter(path, stub):
    """Run every code cell but the setup cell; return {check cell index: exception or None}."""
    namespace, results = {"__name__": "__chapter__"}, {}
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code" or "setup" in cell.metadata.get("tags", []):
            continue
        source = stub_solutions(cell.source) if stub else cell.source
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(source, f"{path.name}[{index}]", "exec"), namespace)
                error = None
            except CheckFailed as exc:
                error = exc
        plt.close("all")
        if "exercise-check" in cell.metadata.get("tags", []):
            results[index] = error
        elif error is not None:
            raise error
    return results


chapters_with_exercises = [p for p in chapter_paths()
                           if any(has_solution(c.source) for c in nbformat.read(p, as_version=4).cells)]


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_checks_pass_on_solutions_and_fail_on_stubs(path):
    solved = run_chapter(path, stub=False)
    assert len(solved) >= 3, f"{path.name} needs at least 3 checked exercises, has {len(solved)}"
    assert {i: e for i, e in solved.items() if e is not None} == {}
    stubbed = run_chapter(path, stub=True)
    for index, error in stubbed.items():
        assert isinstance(error, CheckFailed), f"{path.name} cell {index}: the check passed on the stub"
        assert "not written yet" in str(error)


def test_stub_replaces_only_the_solution_region():
    source = 'def f(x):\n    """doc"""\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n'
    stubbed = stub_solutions(source)
    assert stubbed == 'def f(x):\n    """doc"""\n    raise NotImplementedError("write your answer here")\n'
