"""Grading one submission: the learner's answer cells run between the instructor's cells, in a fresh kernel, with
time limits; each exercise's outcome is read from what its check recorded (attention_book.grading.results).

The notebook that runs is built from the chapter's Assignment, not from the submission: the chapter's import cell
(never its setup cell, which installs the package), then for each exercise the learner's answer cell and the
instructor's check cell, and last, in chapter 16, the chapter's own cells that run the learner's whole decoder
(``Assignment.after_exercises``, graded by what ``checks.same_tokens_as_package`` recorded). A broken submission is
graded, never crashed on: an answer that is missing, does not parse, raises, loops forever or kills the kernel costs
that exercise its point, with the reason, and grading goes on with the next exercise (in a new kernel where the old
one hung or died, the imports and the answers that ran rerun first). Every cell, those rerun included, runs within
the submission's time limit: once it is spent, the exercises left are not run.

The kernel is the grader's own Python (``sys.executable``, ipykernel's built-in kernel spec), whatever kernel specs
are installed: that Python has the package and the chapter's extras.
"""
import contextlib
import dataclasses
import functools
import os
import subprocess
import tempfile
import time
from pathlib import Path

from . import results
from .assignment import load_assignments
from .options import CELL_TIMEOUT, TIMEOUT
from .results import (ERROR, KERNEL_DIED, MISSING, NOT_RUN, OTHER_CHAPTER, PASSED, RESULTS_VARIABLE, SYNTAX_ERROR,
                      TIME_LIMIT, VARIANT_VARIABLE)
from .submission import find_answers, other_chapter

IMPORT_SECONDS = 300.0  # the chapter's import cell (torch, matplotlib, the package) may take this long at most
STARTUP_SECONDS = 60.0  # a kernel may take this long to start (within the submission's time left)


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
    """How one graded item of a submission went: an exercise, or a check of the exercises together (chapter 16's
    ``same_tokens_as_package``, ``combined``). ``exercise`` names it, and its column in the CSV: the exercise's
    function ("stable_softmax"), or the combined check's name. ``check``: the check that graded it; ``outcome``:
    attention_book.grading.results' strings; ``message``: what the check said (or the grader's reason);
    ``seconds``: how long the check took; ``detail``: what the CSV adds to the outcome ("line 3" for a syntax error,
    "60 s" for a time limit, the error's type); ``weight``: the points it is worth (1 for an exercise)."""
    exercise: str
    check: str
    outcome: str
    message: str
    seconds: float = 0.0
    detail: str = ""
    weight: float = 1.0
    combined: bool = False

    @property
    def passed(self):
        return self.outcome == PASSED

    @property
    def points(self):
        """The points earned: all of ``weight`` when the check passed, else 0."""
        return self.weight if self.passed else 0.0

    @property
    def max_points(self):
        return self.weight


@dataclasses.dataclass
class SubmissionGrade:
    """A submission's grade: its name ``submission`` (the file's name, or its path from the folder of all the
    submissions graded together), the ``chapter`` it was graded as, one ExerciseGrade per exercise in the chapter's
    order (then one per combined check), ``reason``: None, or why the whole submission earned nothing (another
    chapter's notebook, a file that is not a notebook), and the ``variant`` of the checks' inputs."""
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
    "died". ``limit``: the seconds the cell was given; ``out_of_time``: the limit was the submission's time left,
    shorter than the cell's own."""
    status: str
    ename: str = ""
    evalue: str = ""
    limit: float = 0.0
    out_of_time: bool = False


@functools.cache
def _own_python_kernel():
    """A kernel manager class whose "python3" is ipykernel's built-in kernel spec, which runs ``sys.executable``:
    an installed kernel spec of that name (a user's, pointing at another Python) is never looked at."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class OwnPythonKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _no_installed_specs(self):
            return KernelSpecManager(kernel_dirs=[])

    return OwnPythonKernelManager


class _Kernel:
    """A kernel of the grader's Python that runs one cell at a time, in the folder ``work`` with the environment
    ``env``, never past ``deadline`` (time.monotonic()), and can be replaced by a fresh one (after a timeout or a
    death), rerunning the cells ``replay`` lists. ``broken``: None, or why a fresh one could not be made ready."""

    def __init__(self, work, env, deadline):
        import nbformat
        from nbclient import NotebookClient

        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(self.nb, kernel_name="python3", kernel_manager_class=_own_python_kernel(),
                                     allow_errors=False, interrupt_on_timeout=False, shutdown_kernel="immediate",
                                     resources={"metadata": {"path": str(work)}})
        self.env, self.deadline, self.replay, self.broken, self._running = env, deadline, [], None, None

    def left(self):
        """Seconds left before the deadline (0 or less: none)."""
        return self.deadline - time.monotonic()

    def start(self):
        """Start a kernel and rerun ``replay``, all within the time left; a _Ran: "ok", or how it failed ("error"
        where no kernel started)."""
        self.client.startup_timeout = max(1, int(min(STARTUP_SECONDS, self.left())))
        self._running = contextlib.ExitStack()
        try:
            self._running.enter_context(self.client.setup_kernel(env=self.env, stderr=subprocess.DEVNULL))
        except Exception as error:  # no kernel: the grading machine's problem
            return _Ran("error", type(error).__name__, str(error))
        for source, timeout in self.replay:
            ran = self.run(source, timeout)
            if ran.status != "ok":
                return ran
        return _Ran("ok")

    def stop(self):
        if self._running is not None:
            with contextlib.suppress(Exception):
                self._running.close()
            self._running = None

    def restart(self):
        """Replace the kernel by a fresh one with ``replay`` rerun, if time is left; where that fails (time left
        or not), ``broken`` says why."""
        self.stop()
        self.client.km = self.client.kc = None
        if self.left() <= 0:
            return
        ran = self.start()
        if ran.status != "ok" and self.left() > 0:
            self.broken = (f"a fresh kernel, started after a cell hung or the kernel died, could not rerun the imports "
                           f"and the answers before this one ({ran.ename or ran.status}"
                           + (f": {ran.evalue})" if ran.evalue else ")"))

    def run(self, source, timeout):
        """Run ``source`` as one cell, for at most ``timeout`` seconds and never past the deadline; a _Ran."""
        import nbformat
        from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

        left = self.left()
        limit = min(timeout, left)
        if limit <= 0:
            return _Ran("timeout", limit=0.0, out_of_time=True)
        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)
        self.client.timeout = max(1, int(limit + 0.5))
        try:
            self.client.execute_cell(cell, len(self.nb.cells) - 1)
        except CellTimeoutError:
            return _Ran("timeout", limit=limit, out_of_time=left < timeout)
        except DeadKernelError:
            return _Ran("died")
        except CellExecutionError as error:
            return _Ran("error", error.ename, error.evalue)
        finally:
            cell.outputs = []  # nothing is kept: a learner's loop may print without end
        return _Ran("ok")


def _items(assignment):
    """(column, check, weight, combined) of every item graded: the exercises, then the combined checks."""
    return ([(e.name, e.check, 1.0, False) for e in assignment.exercises]
            + [(c.check, c.check, c.points, True) for c in assignment.combined_checks])


def ungraded(assignment, outcome, message, detail=""):
    """One ExerciseGrade per item of ``assignment`` (its exercises, then its combined checks), each with no points,
    the same ``outcome`` and ``message`` (and ``detail``): a submission that was not graded, and why."""
    return [ExerciseGrade(name, check, outcome, message, detail=detail, weight=weight, combined=combined)
            for name, check, weight, combined in _items(assignment)]


def _seconds(value):
    return f"{value:g} s"


def _limit(ran, total_timeout):
    """The time limit that stopped a cell, for the CSV: "60 s" (the cell's), or "900 s in all" (the submission's)."""
    return f"{_seconds(total_timeout)} in all" if ran.out_of_time else _seconds(ran.limit)


def grade_submission(path, assignment, *, variant=0, cell_timeout=CELL_TIMEOUT, total_timeout=TIMEOUT, name=None):
    """Grade the notebook at ``path`` as a submission for ``assignment`` (attention_book.grading.assignment's
    Assignment); a SubmissionGrade named ``name`` (default: the file's name). ``variant``: the checks' inputs (0:
    the public ones). ``cell_timeout``: seconds one answer cell, one check or one of the chapter's cells may run;
    ``total_timeout``: seconds for the whole submission, every cell included (those rerun in a fresh kernel too),
    after which the exercises left are not run. Never raises because of what the submission holds."""
    require_grading_packages()
    import nbformat

    name, assignments = name or Path(path).name, load_assignments()
    try:
        nb = nbformat.read(path, as_version=4)
        answers = find_answers(nb, assignment)
        other = other_chapter(nb, assignment, assignments)
    except Exception as error:  # not JSON, not a notebook, cells that are not cells: the file is broken, not the grader
        reason = f"{Path(path).name} is not a notebook that can be read ({type(error).__name__}: {error})"
        return SubmissionGrade(name, assignment.chapter, ungraded(assignment, ERROR, reason), reason, variant)
    if other is not None:
        title = f" ({assignments[other].title})" if other in assignments else ""
        reason = (f"this is chapter {other}'s notebook{title}, not chapter {assignment.chapter}'s: "
                  f"grade it with --chapter {other}")
        return SubmissionGrade(name, assignment.chapter, ungraded(assignment, OTHER_CHAPTER, reason), reason, variant)
    with tempfile.TemporaryDirectory(prefix="attention-book-grade-") as work:
        return _run(name, answers, assignment, Path(work), variant, cell_timeout, total_timeout)


def _run(name, answers, assignment, work, variant, cell_timeout, total_timeout):
    """Run the submission's ``answers`` (submission.find_answers) with the chapter's checks in a kernel working in
    ``work``; a SubmissionGrade."""
    recorded = work / "check-results.jsonl"
    env = {**os.environ, RESULTS_VARIABLE: str(recorded), VARIANT_VARIABLE: str(variant), "MPLBACKEND": "Agg"}
    kernel = _Kernel(work, env, time.monotonic() + total_timeout)
    not_run = (f"not run: the submission's time limit of {_seconds(total_timeout)} was used up before it", "time limit")

    def whole(outcome, message, reason, detail=""):
        return SubmissionGrade(name, assignment.chapter, ungraded(assignment, outcome, message, detail), reason,
                               variant)

    out_of_time = (f"the submission's time limit of {_seconds(total_timeout)} ran out before the chapter's imports "
                   "had run: give it more time (--timeout)")
    try:
        ran = kernel.start()
        if ran.status != "ok" and kernel.left() <= 0:
            return whole(NOT_RUN, out_of_time, out_of_time, "time limit")
        if ran.status != "ok":
            reason = f"no kernel could be started on the grading machine ({ran.ename}: {ran.evalue})"
            return whole(ERROR, reason, reason)
        ran = kernel.run(assignment.imports, max(cell_timeout, IMPORT_SECONDS))
        if ran.status == "timeout" and ran.out_of_time:
            return whole(NOT_RUN, out_of_time, out_of_time, "time limit")
        if ran.status != "ok":
            extras = f"[{','.join(assignment.pip_extras)}]" if assignment.pip_extras else ""
            reason = (f"the chapter's import cell failed ({ran.ename or ran.status}: {ran.evalue}); this is the "
                      f"grading machine's problem, not the learner's: is attention-book{extras} installed there"
                      + (f", and {', '.join(assignment.pip_no_deps)} (with --no-deps)?" if assignment.pip_no_deps
                         else "?"))
            return whole(ERROR, reason, reason)
        kernel.replay.append((assignment.imports, max(cell_timeout, IMPORT_SECONDS)))
        grades = []
        for exercise in assignment.exercises:
            if kernel.left() <= 0:
                grades.append(ExerciseGrade(exercise.name, exercise.check, NOT_RUN, not_run[0], detail=not_run[1]))
            elif kernel.broken:
                grades.append(ExerciseGrade(exercise.name, exercise.check, ERROR, f"not run: {kernel.broken}"))
            else:
                grades.append(_grade_exercise(kernel, exercise, answers[exercise.name], cell_timeout, total_timeout,
                                              recorded))
        if assignment.combined_checks:
            grades += _grade_combined(kernel, assignment, cell_timeout, total_timeout, recorded, not_run)
    finally:
        kernel.stop()
    return SubmissionGrade(name, assignment.chapter, grades, None, variant)


def _grade_exercise(kernel, exercise, answer, cell_timeout, total_timeout, recorded):
    """Run ``answer`` (a submission.Answer or None) and then ``exercise``'s check cell in ``kernel``; an
    ExerciseGrade, from the check's record where it made one."""
    name = exercise.name

    def grade(outcome, message, seconds=0.0, detail=""):
        return ExerciseGrade(name, exercise.check, outcome, message, seconds, detail)

    if answer is None:
        return grade(MISSING, f"no code cell defines {name}: the cell that starts with `def {name}(` was deleted, "
                              "or its function renamed")
    if answer.syntax_error:
        return grade(SYNTAX_ERROR, f"your cell that defines {name} (cell {answer.cell + 1} of the notebook) has a "
                                   f"syntax error, {answer.syntax_error}; none of it ran",
                     detail=f"line {answer.line}" if answer.line else "")
    ran = kernel.run(answer.source, cell_timeout)
    if ran.status == "timeout":
        kernel.restart()
        if ran.out_of_time:
            return grade(TIME_LIMIT, f"the submission's time limit of {_seconds(total_timeout)} ran out while your "
                                     f"cell that defines {name} ran", detail=_limit(ran, total_timeout))
        return grade(TIME_LIMIT, f"your cell that defines {name} did not finish within {_seconds(ran.limit)}: "
                                 "does it loop forever at its top level?", detail=_limit(ran, total_timeout))
    if ran.status == "died":
        kernel.restart()
        return grade(KERNEL_DIED, f"the kernel died while your cell that defines {name} ran (out of memory?)")
    if ran.status == "error":
        return grade(ERROR, f"your cell that defines {name} raised {ran.ename}: {ran.evalue}", detail=ran.ename)
    kernel.replay.append((answer.source, cell_timeout))
    before = len(results.read_results(recorded))
    ran = kernel.run(exercise.check_cell, cell_timeout)
    mine = [r for r in results.read_results(recorded)[before:] if r.exercise == name and r.check == exercise.check]
    if ran.status == "timeout":
        kernel.restart()
        if ran.out_of_time:
            return grade(TIME_LIMIT, f"the submission's time limit of {_seconds(total_timeout)} ran out while the "
                                     f"check ran {name}", ran.limit, _limit(ran, total_timeout))
        return grade(TIME_LIMIT, f"the check did not finish within {_seconds(ran.limit)}: does {name} loop forever "
                                 "(or take far too long)?", ran.limit, _limit(ran, total_timeout))
    if ran.status == "died":
        kernel.restart()
        return grade(KERNEL_DIED, f"the kernel died while the check ran {name} (out of memory?)")
    if mine:
        return grade(mine[-1].outcome, mine[-1].message, mine[-1].seconds)
    return grade(ERROR, f"the check cell raised {ran.ename}: {ran.evalue}" if ran.status == "error" else
                 "the check recorded no result (did the answer cell replace the checks?)", detail=ran.ename)


def _grade_combined(kernel, assignment, cell_timeout, total_timeout, recorded, not_run):
    """Run the chapter's own cells after the exercises (``assignment.after_exercises``: never the learner's) and
    grade each of ``assignment.combined_checks`` by what it recorded; their ExerciseGrades."""
    def grade(check, outcome, message, seconds=0.0, detail=""):
        return ExerciseGrade(check.check, check.check, outcome, message, seconds, detail, check.points, True)

    if kernel.left() <= 0:
        return [grade(check, NOT_RUN, not_run[0], detail=not_run[1]) for check in assignment.combined_checks]
    if kernel.broken:
        return [grade(check, ERROR, f"not run: {kernel.broken}") for check in assignment.combined_checks]
    before, failed = len(results.read_results(recorded)), None
    for source in assignment.after_exercises:
        # a cell that calls no check runs the chapter's code only (loading the model): the import cell's limit
        ran = kernel.run(source, cell_timeout if "checks." in source else max(cell_timeout, IMPORT_SECONDS))
        if ran.status != "ok":
            failed = (source, ran)
            break
    mine = results.read_results(recorded)[before:]
    grades = []
    for check in assignment.combined_checks:
        found = [r for r in mine if r.check == check.check and r.exercise == check.exercise]
        if found:
            grades.append(grade(check, found[-1].outcome, found[-1].message, found[-1].seconds))
            continue
        if failed is None:
            grades.append(grade(check, ERROR, f"the chapter's cells ran, but {check.check} recorded no result"))
            continue
        source, ran = failed
        first = next((line for line in source.splitlines() if line.strip() and not line.startswith("#")), "")
        cell = f"the chapter's cell `{first.strip()[:80]}`"
        if ran.status == "timeout":
            why = (f"the submission's time limit of {_seconds(total_timeout)} ran out while {cell} ran"
                   if ran.out_of_time else f"{cell} did not finish within {_seconds(ran.limit)}")
            grades.append(grade(check, TIME_LIMIT, f"{why}, before {check.check} recorded its result",
                                detail=_limit(ran, total_timeout)))
        elif ran.status == "died":
            grades.append(grade(check, KERNEL_DIED, f"the kernel died while {cell} ran (out of memory?)"))
        else:
            grades.append(grade(check, ERROR, f"{cell} raised {ran.ename}: {ran.evalue}", detail=ran.ename))
    return grades
