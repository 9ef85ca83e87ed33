"""Run only a chapter's exercises and store their outputs: the import cell, then every cell tagged ``exercise`` or
``exercise-check``, in a fresh kernel; the rest of the chapter keeps its stored outputs.

    python scripts/execute_exercises.py book/08_grouped_query.ipynb [...]

For editing exercises without re-running a chapter's trainings and timings (make execute runs everything). The
checks are self-contained (tests/test_exercises.py runs them the same way), so their outputs are the ones a run
from the top stores. Code cells are numbered again from 1, as a run from the top numbers them.
"""
import pathlib
import sys

import nbformat
from nbclient import NotebookClient

from execute_notebooks import merge_streams

EXERCISE_TAGS = {"exercise", "exercise-check"}


def exercise_cells(nb):
    """Indices of the cells to run: the first code cell after the setup cell (the imports), then the exercises."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "setup" not in c.metadata.get("tags", [])]
    return [code[0]] + [i for i in code[1:] if EXERCISE_TAGS & set(nb.cells[i].metadata.get("tags", []))]


def execute_exercises(path: pathlib.Path):
    nb = nbformat.read(path, as_version=4)
    indices = exercise_cells(nb)
    part = nbformat.v4.new_notebook(metadata=nb.metadata, cells=[nb.cells[i] for i in indices])
    NotebookClient(part, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    for i in indices:
        nb.cells[i].outputs = merge_streams(nb.cells[i].outputs)
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.execution_count = count
        for out in cell.outputs:
            if "execution_count" in out:
                out.execution_count = count
    nbformat.write(nb, path)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        execute_exercises(pathlib.Path(arg))
        print(f"{arg}: exercises executed", flush=True)
