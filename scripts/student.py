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
- a short note after the title says what to do and links the solved chapter (its Colab notebook, colab/NN_name.ipynb);
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

from book import ROOT, chapters
from chapter_header import EXERCISES_LINK, HEADER, block_pattern, exercises_block, header_block, solved_link
from colab import colab_version, notebook_text
from exercises import has_solution, stub_solutions

STUDENT = ROOT / "student"
SOLUTION_ONLY = "solution-only"
USES_EXERCISES = "uses-exercises"
CLEARED = {"exercise", "exercise-check", USES_EXERCISES}
RAISES = "raises-exception"
RAISING = {"exercise-check", USES_EXERCISES}  # cells that fail on a stub
NOTE_ID = "student-version-note"


def note_cell(chapter: pathlib.Path):
    text = ("**Student version.** The exercises at the end are yours to write: each `raise NotImplementedError` "
            "marks code to replace, and the check cell after it says whether your answer is right, on which input "
            "it went wrong, and what it expected; `checks.hint(\"name\")`, with the name of the function you are "
            f"writing, prints a hint. Run the setup cell first. The solved chapter: {solved_link(chapter.name)}.")
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
    meta = nb.metadata.get("attention_book", {})
    for cell in cells:  # the generated header and exercises link, as the student version says them (not itself)
        if cell.cell_type == "markdown" and "time_read_minutes" in meta:
            cell.source = block_pattern(HEADER).sub(lambda _: header_block(chapter.name, meta, student=True),
                                                    cell.source, count=1)
            cell.source = block_pattern(EXERCISES_LINK).sub(lambda _: exercises_block(chapter.name, student=True),
                                                            cell.source, count=1)
    title = 1 if cells and cells[0].cell_type == "markdown" else 0
    cells.insert(title, note_cell(chapter))
    nb.cells = cells
    return nb


def render(chapter: pathlib.Path) -> str:
    """student/NN_name.ipynb's text: the student version of book/NN_name.ipynb, rendered for Colab."""
    return notebook_text(colab_version(student_version(nbformat.read(chapter, as_version=4), chapter), chapter))


def student_path(chapter: pathlib.Path) -> pathlib.Path:
    return STUDENT / chapter.name


def main(argv) -> int:
    check = "--check" in argv
    only = [pathlib.Path(a).name for a in argv if a.endswith(".ipynb")]  # chapters named: only theirs, no orphans
    stale = []
    for chapter in [c for c in chapters() if not only or c.name in only]:
        path, text = student_path(chapter), render(chapter)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not check:
            STUDENT.mkdir(exist_ok=True)
            path.write_text(text)
    orphans = [] if only else sorted(set(STUDENT.glob("*.ipynb")) - {student_path(c) for c in chapters()})
    for path in orphans:
        if not check:
            path.unlink()
    for path in stale:
        print(f"{path.relative_to(ROOT)}: {'out of date' if check else 'written'}")
    for path in orphans:
        print(f"{path.relative_to(ROOT)}: {'has no chapter' if check else 'removed (no chapter)'}")
    return 1 if check and (stale or orphans) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
