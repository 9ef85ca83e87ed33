"""Write nbgrader's cell metadata into every chapter, so that nbgrader grades the exercises with no cell marked by hand.

    python scripts/nbgrader_metadata.py          # rewrite the metadata in book/*.ipynb   (make nbgrader-metadata)
    python scripts/nbgrader_metadata.py --check  # exit 1 and list the chapters whose metadata is out of date

nbgrader (schema version 3) reads a cell's role from ``metadata.nbgrader``:
- an exercise cell (tag ``exercise``: its model solution between nbgrader's own solution markers) is an
  "autograded answer": ``solution`` true, ``grade`` false, not locked; its ``grade_id`` is the name of the function
  it defines (names joined by "-" where it defines several, as chapter 16's cache exercise does);
- a check cell (tag ``exercise-check``) is an "autograder tests" cell: ``grade`` true, locked, 1 point; its
  ``grade_id`` is ``check_`` and the exercise's ``grade_id``. nbgrader gives the point when the cell raises no error,
  which is when the check passes (a failed check raises CheckFailed);
- a cell tagged ``uses-exercises`` that calls a check (chapter 16's ``checks.same_tokens_as_package``, which runs the
  learner's whole decoder) is an autograder tests cell worth as many points as the chapter has exercises: the
  instructors' guide suggests scoring it so;
- every other cell carries no nbgrader metadata.
Only metadata changes: sources and outputs are left as they are, so no chapter needs to run again. The student
versions (scripts/student.py) copy the metadata, so a learner's student notebook can be autograded too.
tests/test_nbgrader.py fails when a chapter's metadata is out of date, and runs nbgrader on one chapter.
"""
import copy
import re
import sys

import nbformat

from book import chapters, notebook_text, write_generated

SCHEMA_VERSION = 3
EXERCISE, CHECK, USES_EXERCISES = "exercise", "exercise-check", "uses-exercises"
DEF = re.compile(r"^def (\w+)\(", re.M)  # the functions an exercise cell defines, at the top level
CALLS_CHECK = re.compile(r"\bchecks\.(\w+)\(")


def exercise_id(cell) -> str:
    """The grade_id of an exercise cell: the name of the function it defines ("a-b" for two)."""
    names = DEF.findall(cell.source)
    if not names:
        raise ValueError(f"exercise cell {cell.get('id')} defines no function at the top level; its grade_id is "
                         "the function's name")
    return "-".join(names)


def _cell_metadata(grade_id, *, solution, grade, locked, points=None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


def nbgrader_cells(nb) -> dict:
    """{cell id: the nbgrader metadata that cell must carry} for the chapter ``nb`` (cells not listed carry none)."""
    wanted, last_exercise = {}, None
    exercises = [c for c in nb.cells if EXERCISE in c.metadata.get("tags", [])]
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if EXERCISE in tags:
            last_exercise = exercise_id(cell)
            wanted[cell.id] = _cell_metadata(last_exercise, solution=True, grade=False, locked=False)
        elif CHECK in tags:
            if last_exercise is None:
                raise ValueError(f"check cell {cell.id} comes before any exercise cell")
            wanted[cell.id] = _cell_metadata(f"check_{last_exercise}", solution=False, grade=True, locked=True,
                                             points=1)
        elif USES_EXERCISES in tags and cell.cell_type == "code" and CALLS_CHECK.search(cell.source):
            name = CALLS_CHECK.search(cell.source).group(1)
            wanted[cell.id] = _cell_metadata(f"check_{name}", solution=False, grade=True, locked=True,
                                             points=len(exercises))
    ids = [meta["grade_id"] for meta in wanted.values()]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"grade_id used by more than one cell: {repeated}; nbgrader needs them unique")
    return wanted


def with_nbgrader_metadata(nb):
    """A copy of ``nb`` whose cells carry exactly the nbgrader metadata of nbgrader_cells(nb)."""
    new = copy.deepcopy(nb)
    wanted = nbgrader_cells(new)
    for cell in new.cells:
        if cell.id in wanted:
            cell.metadata["nbgrader"] = wanted[cell.id]
        else:
            cell.metadata.pop("nbgrader", None)
    return new


def main(argv) -> int:
    wanted = {path: notebook_text(with_nbgrader_metadata(nbformat.read(path, as_version=4))) for path in chapters()}
    return write_generated(wanted, None, check="--check" in argv, remedy="make nbgrader-metadata")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
