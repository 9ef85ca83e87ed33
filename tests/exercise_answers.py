"""What the tests of the exercises share: a chapter's model solutions, and a check run on an answer."""
import contextlib
import io

import matplotlib

matplotlib.use("Agg")  # in this process only; nbval's kernels keep the inline backend
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pytest  # noqa: E402
from attention_book.checks import CheckFailed  # noqa: E402
from conftest import ROOT  # noqa: E402


def import_cell(nb):
    """The chapter's first code cell after the setup cell: its imports."""
    return [c for c in nb.cells if c.cell_type == "code" and "setup" not in c.metadata.get("tags", [])][0]


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
