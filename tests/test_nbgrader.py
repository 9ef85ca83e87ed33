"""The nbgrader route, with no cell marked by hand.

- Every chapter carries nbgrader's cell metadata as scripts/nbgrader_metadata.py writes it (exercise cells are
  autograded answers, check cells autograder tests of 1 point), and its student version keeps it (fast).
- nbgrader itself, on chapter 1 (marker slow: about a minute, and the first run on a machine installs nbgrader
  into its own environment): `generate_assignment` with the repository's nbgrader_config.py, then `autograde` of a
  correct submission and of a learner's student version (student/01_single_head.ipynb, as downloaded from Colab)
  with one wrong answer, then `export`; the scores come from nbgrader's CSV and its gradebook, cell by cell.
  nbgrader runs from its own environment (tests/nbgrader-pins.txt: about 50 packages the book's environment does
  not need), made once per machine and set of pins in ~/.cache/attention-book; the chapter runs in a kernel of the
  book's own Python, where the package is installed, so the setup cell does nothing.
"""
import concurrent.futures
import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import nbformat
import pytest
from cached_environment import cached_environment
from conftest import ROOT, chapter_paths
from exercise_answers import answered

from nbgrader_metadata import SCHEMA_VERSION, nbgrader_cells, with_nbgrader_metadata
from student import student_path

PINS = ROOT / "tests" / "nbgrader-pins.txt"
CHAPTER = ROOT / "book" / "01_single_head.ipynb"


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_chapter_carries_nbgrader_metadata(path):
    nb = nbformat.read(path, as_version=4)
    assert with_nbgrader_metadata(nb) == nb, f"{path.name}: nbgrader metadata out of date: run `make nbgrader-metadata`"
    wanted = nbgrader_cells(nb)
    exercises = [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]
    checks = [c for c in nb.cells if "exercise-check" in c.metadata.get("tags", [])]
    assert {c.id for c in exercises + checks} <= set(wanted)
    student = {c.id: c for c in nbformat.read(student_path(path), as_version=4).cells}
    for cell_id, meta in wanted.items():
        assert student[cell_id].metadata.get("nbgrader") == meta, f"student/{path.name}: cell {cell_id} lost it"


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for index, (source, tags) in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": tags})
        cell.id = f"c{index}"
        nb.cells.append(cell)
    return nb


def test_nbgrader_roles_of_cells():
    nb = _notebook(
        ("import torch", []),
        ("def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION", ["exercise", "hide-input"]),
        ("checks.check_f(f)", ["exercise-check"]),
        ("def empty(n):\n    return []\n\n\ndef append(c, x):\n    return c + [x]", ["exercise"]),
        ("checks.check_append(append)", ["exercise-check"]),
        ("tokens = checks.same_tokens_as_package(greedy_generate)", ["uses-exercises"]),
        ("print(tokens)", ["uses-exercises"]),
    )
    nb.cells[0].metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "grade_id": "stale"}
    common = {"schema_version": SCHEMA_VERSION, "task": False}
    assert nbgrader_cells(nb) == {
        "c1": {"grade": False, "grade_id": "f", "locked": False, "solution": True, **common},
        "c2": {"grade": True, "grade_id": "check_f", "locked": True, "points": 1, "solution": False, **common},
        "c3": {"grade": False, "grade_id": "empty-append", "locked": False, "solution": True, **common},
        "c4": {"grade": True, "grade_id": "check_empty-append", "locked": True, "points": 1, "solution": False,
               **common},
        "c5": {"grade": True, "grade_id": "check_same_tokens_as_package", "locked": True, "points": 2,
               "solution": False, **common},
    }
    new = with_nbgrader_metadata(nb)
    assert "nbgrader" not in new.cells[0].metadata  # metadata no rule asks for is removed
    assert new.cells[2].metadata["nbgrader"]["grade_id"] == "check_f"
    assert nb.cells[0].metadata["nbgrader"]["grade_id"] == "stale"  # the notebook given is not changed


def test_nbgrader_metadata_errors_name_the_rule():
    with pytest.raises(ValueError, match="defines no function at the top level"):
        nbgrader_cells(_notebook(("x = 1", ["exercise"])))
    with pytest.raises(ValueError, match="before any exercise cell"):
        nbgrader_cells(_notebook(("checks.check_f(f)", ["exercise-check"])))
    with pytest.raises(ValueError, match=r"more than one cell: \['f'\]"):
        nbgrader_cells(_notebook(("def f():\n    pass", ["exercise"]), ("def f():\n    pass", ["exercise"])))


# nbgrader itself, on chapter 1


def _make_nbgrader_environment(folder):
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-r", str(PINS)], check=True)
    (folder / "made-with.json").write_text(json.dumps(_made_with()))


def _made_with():
    return {"pins": PINS.read_text(), "python": sys.version.split()[0], "platform": sys.platform}


def nbgrader_environment() -> pathlib.Path:
    """The bin folder of an environment holding tests/nbgrader-pins.txt, made once per machine and set of pins in
    ~/.cache/attention-book/venv-nbgrader-<hash> (tests/cached_environment.py: in place, as nbgrader runs its
    scripts, such as alembic, whose first lines name the environment's path; under a lock, so that two runs at once
    share it)."""
    return cached_environment("venv-nbgrader", _made_with(), _make_nbgrader_environment, "made-with.json") / "bin"


def test_two_runs_at_once_share_one_cached_environment(tmp_path, monkeypatch):
    """The second run waits for the first's environment, made once, in place (its path is the one its scripts name),
    instead of removing it to build its own; earlier pins' environments go."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    made, started = [], threading.Event()

    def make(folder):
        made.append(folder)
        folder.mkdir()
        started.set()
        time.sleep(0.3)  # the other run arrives meanwhile
        (folder / "stamp").write_text("done")

    old = tmp_path / "attention-book" / "venv-test-0123456789abcdef"
    old.mkdir(parents=True)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(cached_environment, "venv-test", {"pins": 1}, make, "stamp")
        started.wait(5)
        second = pool.submit(cached_environment, "venv-test", {"pins": 1}, make, "stamp")
        folders = {first.result(), second.result()}
    assert len(made) == 1 and folders == {made[0]} and (made[0] / "stamp").read_text() == "done"
    assert not old.exists()


GRADES = """
import json, sys
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gradebook:
    print(json.dumps({student: {grade.name: grade.score for grade in
                                gradebook.find_submission_notebook(sys.argv[1], sys.argv[2], student).grades}
                      for student in sys.argv[3:]}))
"""


@pytest.mark.slow
def test_nbgrader_generates_and_autogrades_chapter_1(tmp_path):
    bin_folder = nbgrader_environment()
    python = bin_folder / "python"
    course = tmp_path / "course"
    (course / "source" / "ch01").mkdir(parents=True)
    shutil.copy(CHAPTER, course / "source" / "ch01")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    # the notebooks' kernel, python3, is the book's own Python (where the package is installed), as the guide has it
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(course / "jupyter"), "--name",
                    "python3"], check=True, capture_output=True)
    env = {**os.environ, "JUPYTER_PATH": str(course / "jupyter" / "share" / "jupyter"),
           "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}"}  # as `source nbgrader-env/bin/activate` does

    def nbgrader(*args):
        done = subprocess.run([str(python), "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stderr[-3000:]}"
        return done

    nbgrader("generate_assignment", "ch01")
    released = nbformat.read(course / "release" / "ch01" / CHAPTER.name, as_version=4)
    stubs = [c.source for c in released.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert len(stubs) == 3 and all("raise NotImplementedError" in s and "SOLUTION" not in s for s in stubs)

    overflows = "def stable_softmax(x):\n    return x.exp() / x.exp().sum(-1, keepdim=True)\n"
    for learner, notebook, answers in [
            ("right", course / "release" / "ch01" / CHAPTER.name, {}),
            # a learner's student version from Colab, with one answer that overflows on large inputs
            ("overflow", student_path(CHAPTER), {"stable_softmax": overflows})]:
        (course / "submitted" / learner / "ch01").mkdir(parents=True)
        nbformat.write(answered(notebook, CHAPTER, answers), course / "submitted" / learner / "ch01" / CHAPTER.name)
    nbgrader("autograde", "ch01")  # adds the students it finds in submitted/ to its gradebook
    nbgrader("export")

    with open(course / "grades.csv", newline="") as file:
        rows = {row["student_id"]: row for row in csv.DictReader(file)}
    assert {s: (float(r["score"]), float(r["max_score"])) for s, r in rows.items()} == {
        "right": (3.0, 3.0), "overflow": (2.0, 3.0)}
    cells = subprocess.run([str(python), "-c", GRADES, CHAPTER.stem, "ch01", "right", "overflow"], cwd=course,
                           capture_output=True, text=True, check=True)
    assert json.loads(cells.stdout) == {
        "right": {"check_stable_softmax": 1.0, "check_my_causal_mask": 1.0, "check_my_attention_with_masks": 1.0},
        "overflow": {"check_stable_softmax": 0.0, "check_my_causal_mask": 1.0, "check_my_attention_with_masks": 1.0}}
    graded = nbformat.read(course / "autograded" / "overflow" / "ch01" / CHAPTER.name, as_version=4)
    [check] = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_stable_softmax"]
    [error] = [o for o in check.outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed" and "stable_softmax" in error.evalue  # the learner reads why
