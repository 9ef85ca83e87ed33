"""Exercises, run from the committed student versions (student/NN_*.ipynb, written by scripts/student.py).

Each student version runs in-process, top to bottom: every cell before the first exercise must run, and
every ``exercise-check`` cell must fail on the stub with a CheckFailed that says what to write. Then the
chapter's solutions are put back into the student version (cells matched by id) and every check must pass.
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
from student import student_path


def run_notebook(nb, name):
    """Run every code cell but the setup cell; return {check cell index: CheckFailed or None}."""
    namespace, results = {"__name__": "__chapter__"}, {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "setup" in cell.metadata.get("tags", []):
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(cell.source, f"{name}[{index}]", "exec"), namespace)
                error = None
            except CheckFailed as exc:
                error = exc
        plt.close("all")
        if "exercise-check" in cell.metadata.get("tags", []):
            results[index] = error
        elif error is not None:
            raise error
    return results


def with_solutions(student, chapter):
    """The student notebook with each stubbed cell's source replaced by the chapter's solution."""
    solutions = {cell.id: cell.source for cell in chapter.cells if has_solution(cell.source)}
    restored = nbformat.from_dict(student)
    for cell in restored.cells:
        cell.source = solutions.get(cell.id, cell.source)
    assert len([c for c in restored.cells if c.id in solutions]) == len(solutions), "a solution cell went missing"
    return restored


chapters_with_exercises = [p for p in chapter_paths()
                           if any(has_solution(c.source) for c in nbformat.read(p, as_version=4).cells)]


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_checks_fail_on_the_student_stubs_and_pass_on_the_solutions(path):
    chapter = nbformat.read(path, as_version=4)
    student = nbformat.read(student_path(path), as_version=4)
    stubbed = run_notebook(student, f"student/{path.name}")
    assert len(stubbed) >= 3, f"{path.name} needs at least 3 checked exercises, has {len(stubbed)}"
    for index, error in stubbed.items():
        assert isinstance(error, CheckFailed), f"student/{path.name} cell {index}: the check passed on the stub"
        message = str(error)
        assert "not written yet: " in message, message
        assert len(message.split("not written yet: ", 1)[1]) > 20, f"no instruction in: {message}"
    solved = run_notebook(with_solutions(student, chapter), f"{path.name} (solutions put back)")
    assert solved.keys() == stubbed.keys()
    assert {i: e for i, e in solved.items() if e is not None} == {}


def test_stub_replaces_only_the_solution_region():
    source = 'def f(x):\n    """doc"""\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n'
    stubbed = stub_solutions(source)
    assert stubbed == ('def f(x):\n    """doc"""\n    # YOUR CODE HERE\n    raise NotImplementedError('
                       '"write the body of f(); the check in the next cell tells you if it is right")\n')
    with pytest.raises(NotImplementedError, match="f()"):
        namespace = {}
        exec(stubbed, namespace)
        namespace["f"](1)


def test_markdown_solutions_become_your_answer_here():
    source = "Why?\n\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\n"
    assert stub_solutions(source, "markdown") == "Why?\n\nYOUR ANSWER HERE\n"
