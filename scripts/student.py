"""Write the student version of every chapter: ``student/NN_name.ipynb`` from ``book/NN_name.ipynb``.

    python scripts/student.py          # (re)write student/*.ipynb   (make student)
    python scripts/student.py --check  # exit 1 and list the student versions that are out of date

In a student version:
- every region between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` is replaced by a stub that raises
  NotImplementedError with a hint (scripts/exercises.py, nbgrader's convention);
- cells tagged ``solution-only`` are removed;
- the outputs of the ``exercise`` and ``exercise-check`` cells are cleared, and each ``exercise-check`` cell is
  tagged ``raises-exception``: on the stub it fails, as it should, and nbval (and JupyterLab's "Run All") go on;
- a code cell tagged ``uses-exercises`` runs what the learner writes in the exercises, outside them (chapter 16's
  section 3 runs the learner's decoder, prints its answer, and makes claims about it): its outputs are cleared too,
  since the solved chapter's would show what the learner has not written yet, and it is tagged ``raises-exception``,
  since it fails as long as an exercise is a stub (nbval and "Run All" go on past it, as past a check cell);
- its header and exercises preamble say what it holds and how to run it, and link the solved chapter (its Colab
  notebook, colab/NN_name.ipynb), not itself (scripts/chapter_header.py); a short note after the title says what
  to write and to save a copy in Colab;
- everything else is kept, the setup cell included, so the notebook opens in Colab on its own;
- then, as for every notebook a Colab link opens, the site's MyST markup is rendered as plain Markdown and the claim
  cells become titled forms (scripts/colab.py, ``colab_version``).
The student versions are committed (Colab opens them from the repository); tests/test_student.py fails
when they are out of date.
"""
import copy
import pathlib
import sys

import nbformat

from book import ROOT, notebook_text, write_chapter_copies
from chapter_header import STUDENT as STUDENT_VERSION
from chapter_header import with_version_blocks
from colab import colab_version
from exercises import has_solution, stub_solutions

STUDENT = ROOT / "student"
SOLUTION_ONLY = "solution-only"
USES_EXERCISES = "uses-exercises"
CLEARED = {"exercise", "exercise-check", USES_EXERCISES}
RAISES = "raises-exception"
RAISING = {"exercise-check", USES_EXERCISES}  # cells that fail on a stub
NOTE_ID = "student-version-note"


def note_cell():
    """The note after the title: what the student version holds and the one thing to do before writing (the
    header above links the solved chapter; the Exercises section says how to run the exercises)."""
    text = ("**Student version.** The exercises (the \"Exercises\" section) are yours to write: each stub that "
            "raises `NotImplementedError` marks code to replace, and the check cell after it says whether your "
            "answer is right. Colab keeps what you write only in a copy of your own: choose File > Save a copy in "
            "Drive first. The Exercises section says how to run them.")
    cell = nbformat.v4.new_markdown_cell(text, metadata={"tags": ["student-note"]})
    cell.id = NOTE_ID
    return cell


def student_version(nb, chapter: pathlib.Path):
    """The student notebook for chapter ``nb``, before its markup is rendered for Colab (a new notebook; ``nb`` is
    not changed)."""
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if SOLUTION_ONLY in tags:
            continue
        if has_solution(cell.source):
            cell.source = stub_solutions(cell.source, cell.cell_type)
        if cell.cell_type == "code" and tags & CLEARED:
            cell.outputs = []
            cell.execution_count = None
        if cell.cell_type == "code" and tags & RAISING and RAISES not in tags:
            cell.metadata["tags"] = [*cell.metadata["tags"], RAISES]
        cells.append(cell)
    nb.cells = cells
    with_version_blocks(nb, chapter.name, STUDENT_VERSION)  # its header and exercises preamble, not linking itself
    title = 1 if cells and cells[0].cell_type == "markdown" else 0
    cells.insert(title, note_cell())
    return nb


def render(chapter: pathlib.Path) -> str:
    """student/NN_name.ipynb's text: the student version of book/NN_name.ipynb, rendered for Colab."""
    return notebook_text(colab_version(student_version(nbformat.read(chapter, as_version=4), chapter), chapter))


def student_path(chapter: pathlib.Path) -> pathlib.Path:
    return STUDENT / chapter.name


def main(argv) -> int:
    return write_chapter_copies(argv, STUDENT, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
