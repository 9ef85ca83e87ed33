"""What the tests of the exercises share: a chapter's model solutions (as a namespace, or as the answers a learner
would hand in), and a check run on an answer."""
import contextlib
import io
import re

import matplotlib

matplotlib.use("Agg")  # in this process only; nbval's kernels keep the inline backend
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pytest  # noqa: E402
from attention_book.checks import CheckFailed  # noqa: E402
from attention_book.grading import assignment  # noqa: E402
from conftest import ROOT  # noqa: E402

SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION\n", re.M)


def import_cell(nb):
    """The chapter's import cell: the first code cell that is not the setup cell (the grader's rule)."""
    return assignment.import_cell(nb.cells)


def _grade_id(cell):
    """The grade_id of an answer cell (nbgrader's "solution" cell), else None."""
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade_id") if meta.get("solution") else None


def model_answers(chapter):
    """{grade_id: the model solution's source, without the solution markers} of each answer cell of the chapter at
    ``chapter`` (a path in book/); a cell's grade_id is the function it defines (nbgrader's metadata)."""
    return {_grade_id(c): SOLUTION_MARKER.sub("", c.source) for c in nbformat.read(chapter, as_version=4).cells
            if _grade_id(c)}


def answered(notebook, chapter, answers=None):
    """The notebook at ``notebook`` (a student version, or nbgrader's released copy) as a learner hands it in, each
    answer cell holding answers[its grade_id], else the model solution of ``chapter`` (its path in book/)."""
    answers = {**model_answers(chapter), **(answers or {})}
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if _grade_id(cell):
            cell.source = answers[_grade_id(cell)]
    return nb


def solutions(nb, name):
    """Run the chapter's import cell and its exercise cells (the model solutions): their namespace."""
    namespace = {"__name__": "__chapter__"}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell is import_cell(nb) or "exercise" in cell.metadata.get("tags", [])):
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, f"{name}[{index}]", "exec"), namespace)
            plt.close("all")
    return namespace


def model_solutions(chapter):
    """The namespace of book/<chapter>'s model solutions; ``chapter`` with or without ".ipynb"."""
    name = chapter if chapter.endswith(".ipynb") else f"{chapter}.ipynb"
    return solutions(nbformat.read(ROOT / "book" / name, as_version=4), name)


def model_solution(chapter, name):
    """The model solution called ``name`` in book/<chapter>."""
    return model_solutions(chapter)[name]


def passes(check, answer):
    """What ``check(answer)`` prints; it must not raise."""
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        check(answer)
    return shown.getvalue()


def fails(check, answer, *fragments):
    """The message of the CheckFailed that ``check(answer)`` raises, having printed no ✓ line; it must hold every
    one of ``fragments``."""
    with contextlib.redirect_stdout(io.StringIO()) as shown, pytest.raises(CheckFailed) as failure:
        check(answer)
    assert "✓" not in shown.getvalue()
    message = str(failure.value)
    for fragment in fragments:
        assert fragment in message, message
    return message
