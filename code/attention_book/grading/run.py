"""Grading one submission: the learner's answer cells run between the instructor's cells, in a fresh kernel, with
time limits; each exercise's outcome is read from what its check recorded (attention_book.grading.results).

The notebook that runs is built from the chapter's Assignment, not from the submission: the chapter's import cell
(never its setup cell, which installs the package), then for each exercise the learner's answer cell and the
instructor's check cell. A broken submission is graded, never crashed on: an answer that is missing, does not parse,
raises, loops forever or kills the kernel costs that exercise its point, with the reason, and grading goes on with
the next exercise (in a new kernel where the old one hung or died, the imports and the answers that ran rerun first).
"""
import contextlib
import dataclasses
import os
import subprocess
import tempfile
import time
from pathlib import Path

from . import results
from .assignment import load_assignments
from .results import (ERROR, KERNEL_DIED, MISSING, NOT_RUN, OTHER_CHAPTER, PASSED, RESULTS_VARIABLE, SYNTAX_ERROR,
                      TIME_LIMIT, VARIANT_VARIABLE)
from .submission import find_answers, other_chapter

IMPORT_SECONDS = 300.0  # the chapter's import cell (torch, matplotlib, the package) may take this long at most


def require_grading_packages():
    """Import what grading needs (nbformat, nbclient, ipykernel) or say which extra installs them."""
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as error:
        raise ImportError(f"grading needs {error.name}, which the package's grade extra installs: "
                          "pip install 'attention-book[grade]'") from error


@dataclasses.dataclass
class ExerciseGrade:
    """How one exercise of a submission went: its ``outcome`` (attention_book.grading.results' strings), the
    ``points`` it earned out of ``max_points``, the ``message`` its check gave (or the grader's reason), the
    ``seconds`` its check took, and ``detail``, what the CSV adds to the outcome ("line 3" for a syntax error, "60 s"
    for a time limit, the error's type)."""
    exercise: str
    check: str
    outcome: str
    message: str
    points: float = 0.0
    max_points: float = 1.0
    seconds: float = 0.0
    detail: str = ""

    @property
    def passed(self):
        return self.outcome == PASSED


@dataclasses.dataclass
class SubmissionGrade:
    """A submission's grade: its file name ``submission``, the ``chapter`` it was graded as, one ExerciseGrade per
    exercise in the chapter's order, and ``reason``: None, or why the whole submission earned nothing (another
    chapter's notebook, a file that is not a notebook)."""
    submission: str
    chapter: int
    exercises: list
    reason: str | None = None
    variant: int = 0

    @property
    def score(self):
        return sum(e.points for e in self.exercises)

    @property
    def max_score(self):
        return sum(e.max_points for e in self.exercises)


@dataclasses.dataclass(frozen=True)
class _Ran:
    """How a cell's run ended: status "ok", "error" (with the error's ``ename`` and ``evalue``), "timeout" or
    "died"."""
    status: str
    ename: str = ""
    evalue: str = ""


class _Kernel:
    """A kernel that runs one cell at a time, in the folder ``work`` with the environment ``env``, and can be
    replaced by a fresh one (after a timeout or a death), rerunning the cells ``replay`` lists."""

    def __init__(self, work, env, kernel_name):
        import nbformat
        from nbclient import NotebookClient

        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, kernel_name=kernel_name, allow_errors=False,
                                     interrupt_on_timeout=False, shutdown_kernel="immediate",
                                     resources={"metadata": {"path": str(work)}})
        self.env, self.replay, self._running = env, [], None

    def start(self):
        self._running = contextlib.ExitStack()
        self._running.enter_context(self.client.setup_kernel(env=self.env, stderr=subprocess.DEVNULL))
        for source, timeout in self.replay:
            self.run(source, timeout)

    def stop(self):
        if self._running is not None:
            with contextlib.suppress(Exception):
                self._running.close()
            self._running = None

    def restart(self):
        self.stop()
        self.client.km = self.client.kc = None
        self.start()

    def run(self, source, timeout):
        """Run ``source`` as one cell, for at most ``timeout`` seconds; a _Ran."""
        import nbformat
        from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)
        self.client.timeout = max(1, int(timeout + 0.5))
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1)
        except CellTimeoutError:
            return _Ran("timeout")
        except DeadKernelError:
            return _Ran("died")
        except CellExecutionError as error:
            return _Ran("error", error.ename, error.evalue)
        finally:
            cell.outputs = []  # nothing is kept: a learner's loop may print without end
        return _Ran("ok")


def _zero(assignment, outcome, message):
    return [ExerciseGrade(e.name, e.check, outcome, message) for e in assignment.exercises]


def _seconds(value):
    return f"{value:g} s"


def grade_submission(path, assignment, *, variant=0, cell_timeout=60.0, total_timeout=900.0, kernel_name="python3"):
    """Grade the notebook at ``path`` as a submission for ``assignment`` (attention_book.grading.assignment's
    Assignment); a SubmissionGrade. ``variant``: the checks' inputs (0: the public ones). ``cell_timeout``: seconds
    one answer cell or one check may run; ``total_timeout``: seconds for the whole submission, after which the
    exercises left are not run. Never raises because of what the submission holds."""
    require_grading_packages()
    import nbformat

    name, assignments = Path(path).name, load_assignments()
    try:
        nb = nbformat.read(path, as_version=4)
        other = other_chapter(nb, assignment, assignments)
    except Exception as error:  # not JSON, not a notebook, cells without sources: the file, not the grader, is broken
        reason = f"{name} is not a notebook that can be read ({type(error).__name__}: {error})"
        return SubmissionGrade(name, assignment.chapter, _zero(assignment, ERROR, reason), reason, variant)
    if other is not None:
        title = f" ({assignments[other].title})" if other in assignments else ""
        reason = (f"this is chapter {other}'s notebook{title}, not chapter {assignment.chapter}'s: "
                  f"grade it with --chapter {other}")
        return SubmissionGrade(name, assignment.chapter, _zero(assignment, OTHER_CHAPTER, reason), reason, variant)
    with tempfile.TemporaryDirectory(prefix="attention-book-grade-") as work:
        return _run(name, nb, assignment, Path(work), variant, cell_timeout, total_timeout, kernel_name)


def _run(name, nb, assignment, work, variant, cell_timeout, total_timeout, kernel_name):
    """Run the answers of ``nb`` with the chapter's checks in a kernel working in ``work``; a SubmissionGrade."""
    recorded = work / "check-results.jsonl"
    env = {**os.environ, RESULTS_VARIABLE: str(recorded), VARIANT_VARIABLE: str(variant), "MPLBACKEND": "Agg"}
    deadline = time.monotonic() + total_timeout
    answers = find_answers(nb, assignment)
    kernel = _Kernel(work, env, kernel_name)
    grades = []
    try:
        try:
            kernel.start()
        except Exception as error:  # no kernel: the grading machine's problem, said in the CSV
            reason = f"no kernel could be started on the grading machine ({type(error).__name__}: {error})"
            return SubmissionGrade(name, assignment.chapter, _zero(assignment, ERROR, reason), reason, variant)
        ran = kernel.run(assignment.imports, min(max(cell_timeout, IMPORT_SECONDS), total_timeout))
        if ran.status != "ok":
            extras = f"[{','.join(assignment.pip_extras)}]" if assignment.pip_extras else ""
            reason = (f"the chapter's import cell failed ({ran.ename or ran.status}: {ran.evalue}); this is the "
                      f"grading machine's problem, not the learner's: is attention-book{extras} installed there"
                      + (f", and {', '.join(assignment.pip_no_deps)} (with --no-deps)?" if assignment.pip_no_deps
                         else "?"))
            return SubmissionGrade(name, assignment.chapter, _zero(assignment, ERROR, reason), reason, variant)
        kernel.replay.append((assignment.imports, IMPORT_SECONDS))
        for exercise in assignment.exercises:
            left = deadline - time.monotonic()
            if left <= 0:
                grades.append(ExerciseGrade(exercise.name, exercise.check, NOT_RUN,
                                            f"not run: the submission's time limit of {_seconds(total_timeout)} "
                                            "was used up before this exercise"))
                continue
            grades.append(_grade_exercise(kernel, exercise, answers[exercise.name], min(cell_timeout, left),
                                          recorded))
    finally:
        kernel.stop()
    return SubmissionGrade(name, assignment.chapter, grades, None, variant)


def _grade_exercise(kernel, exercise, answer, timeout, recorded):
    """Run ``answer`` (a submission.Answer or None) and then ``exercise``'s check cell in ``kernel``; an
    ExerciseGrade, from the check's record where it made one."""
    name = exercise.name

    def grade(outcome, message, seconds=0.0, detail=""):
        return ExerciseGrade(name, exercise.check, outcome, message, float(outcome == PASSED), 1.0, seconds, detail)

    if answer is None:
        return grade(MISSING, f"no code cell defines {name}: the cell that starts with `def {name}(` was deleted, "
                              "or its function renamed")
    if answer.syntax_error:
        return grade(SYNTAX_ERROR, f"your cell that defines {name} (cell {answer.cell + 1} of the notebook) has a "
                                   f"syntax error, {answer.syntax_error}; none of it ran",
                     detail=f"line {answer.line}" if answer.line else "")
    ran = kernel.run(answer.source, timeout)
    if ran.status == "timeout":
        kernel.restart()
        return grade(TIME_LIMIT, f"your cell that defines {name} did not finish within {_seconds(timeout)}: "
                                 "does it loop forever at its top level?", detail=_seconds(timeout))
    if ran.status == "died":
        kernel.restart()
        return grade(KERNEL_DIED, f"the kernel died while your cell that defines {name} ran (out of memory?)")
    if ran.status == "error":
        return grade(ERROR, f"your cell that defines {name} raised {ran.ename}: {ran.evalue}", detail=ran.ename)
    kernel.replay.append((answer.source, timeout))
    before = len(results.read_results(recorded))
    ran = kernel.run(exercise.check_cell, timeout)
    mine = [r for r in results.read_results(recorded)[before:] if r.exercise == name and r.check == exercise.check]
    if ran.status == "timeout":
        kernel.restart()
        return grade(TIME_LIMIT, f"the check did not finish within {_seconds(timeout)}: does {name} loop forever "
                                 "(or take far too long)?", timeout, _seconds(timeout))
    if ran.status == "died":
        kernel.restart()
        return grade(KERNEL_DIED, f"the kernel died while the check ran {name} (out of memory?)")
    if mine:
        return grade(mine[-1].outcome, mine[-1].message, mine[-1].seconds)
    return grade(ERROR, f"the check cell raised {ran.ename}: {ran.evalue}" if ran.status == "error" else
                 "the check recorded no result (did the answer cell replace the checks?)", detail=ran.ename)
