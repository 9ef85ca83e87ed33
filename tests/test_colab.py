"""Colab, simulated: every chapter and every student version runs alone in a fresh kernel.

- The notebook is copied alone into an empty temporary folder, which is the kernel's working directory.
- The kernel's Python is a virtual environment (.venv-colab, cached between runs) holding only what Colab
  preinstalls that the book uses: torch, numpy, matplotlib, tqdm (and ipykernel, to be a kernel), at the
  versions of requirements.txt. Before each notebook, anything installed since the environment was made
  (the book's package, a chapter's extras) is uninstalled, so every notebook starts as in a new Colab session.
- ATTENTION_BOOK_SOURCE points the setup cell at a copy of this checkout's code/ instead of the public URL.
- The setup cell runs twice: the first run installs the package, the second must do nothing.
- A chapter runs top to bottom without error. A student version runs up to its first exercise check, which
  must fail with CheckFailed saying what to write (shown without a traceback).
- torch's version and file are the same before and after: the setup cell never reinstalls it.

Slow (minutes: a kernel and a pip install per notebook). Fast run: ``pytest -m "not colab"``; ``make test``
runs it. The time per notebook is printed at the end of the run.
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime

import nbformat
import pytest
from conftest import COLAB_TIMES, ROOT, chapter_paths
from nbclient import NotebookClient

from setup_cell import SOURCE_VARIABLE, first_code_cell
from student import student_path

pytestmark = pytest.mark.colab

VENV = ROOT / ".venv-colab"
PREINSTALLED = ["torch", "numpy", "matplotlib", "tqdm", "ipykernel"]
KERNEL = "colab-simulated"


def pins():
    """requirements.txt's exact pins of what Colab preinstalls."""
    found = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name = line.split("==")[0].strip().lower()
        if name in PREINSTALLED and "==" in line:
            found[name] = line.strip()
    return [found[name] for name in PREINSTALLED]


def pip(python, *args):
    return subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check"], check=True,
                          capture_output=True, text=True)


def installed(python):
    """{distribution name: version} of what the environment holds."""
    return {d["name"].lower().replace("_", "-"): d["version"]
            for d in json.loads(pip(python, "list", "--format=json").stdout)}


@pytest.fixture(scope="session")
def colab_python():
    """The simulated Colab environment's Python, made once and reused while the pins do not change."""
    python, stamp = VENV / "bin" / "python", VENV / "colab-stamp.json"
    made = json.loads(stamp.read_text()) if stamp.exists() else {}
    if not (python.exists() and made.get("pins") == pins() and isinstance(made.get("baseline"), dict)):
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip(python, "install", "--quiet", *pins())
        stamp.write_text(json.dumps({"pins": pins(), "baseline": installed(python)}, indent=1))
    assert "attention-book" not in json.loads(stamp.read_text())["baseline"]
    return python


def reset(python):
    """Back to the environment as it was made (a new Colab session): uninstall what was added since, and
    put back any preinstalled package whose version a chapter's extras changed."""
    baseline = json.loads((VENV / "colab-stamp.json").read_text())["baseline"]
    now = installed(python)
    added = sorted(set(now) - set(baseline))
    if added:
        pip(python, "uninstall", "--yes", *added)
    changed = [f"{name}=={version}" for name, version in baseline.items() if now.get(name) != version]
    if changed:
        pip(python, "install", "--quiet", "--no-deps", *changed)


def torch_identity(python):
    return subprocess.run([str(python), "-c", "import torch; print(torch.__version__, torch.__file__)"],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def kernel(colab_python, tmp_path_factory):
    """A kernel spec whose Python is the Colab environment's, and a copy of code/ for the setup cell."""
    base = tmp_path_factory.mktemp("colab")
    source = base / "code"
    shutil.copytree(ROOT / "code", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    spec = base / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(colab_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab (simulated)", "language": "python",
        "env": {SOURCE_VARIABLE: str(source)},
    }))
    saved = {name: os.environ.pop(name, None) for name in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH")}
    os.environ["JUPYTER_PATH"] = str(base / "jupyter")
    yield KERNEL
    os.environ.pop("JUPYTER_PATH")
    os.environ.update({name: value for name, value in saved.items() if value is not None})


def cell_seconds(cell):
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    return (datetime.fromisoformat(end.replace("Z", "+00:00")) -
            datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def text_of(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def errors_of(cell):
    return [o for o in cell.outputs if o.output_type == "error"]


def simulate(python, kernel, notebook, folder, student):
    """Run the notebook alone in ``folder`` as Colab would; return the executed notebook and its setup cell."""
    reset(python)
    torch_before = torch_identity(python)
    assert not any(folder.iterdir())
    shutil.copy(notebook, folder / notebook.name)
    nb = nbformat.read(folder / notebook.name, as_version=4)
    setup = first_code_cell(nb)
    again = copy.deepcopy(setup)
    again.id = "setup-cell-again"
    position = nb.cells.index(setup) + 1
    nb.cells.insert(position, again)
    if student:
        first_check = next(i for i, c in enumerate(nb.cells) if "exercise-check" in c.metadata.get("tags", []))
        nb.cells = nb.cells[:first_check + 1]
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name=kernel, allow_errors=student,
                   resources={"metadata": {"path": str(folder)}}).execute()
    seconds = time.perf_counter() - start
    assert torch_identity(python) == torch_before, "torch was reinstalled or replaced"
    name = f"{notebook.parent.name}/{notebook.name}"
    COLAB_TIMES[name] = (seconds, cell_seconds(nb.cells[position - 1]))
    setup_out, again_out = nb.cells[position - 1], nb.cells[position]
    assert "Installed the book's package from file://" in text_of(setup_out), setup_out.outputs
    assert "already installed: nothing to do" in text_of(again_out), again_out.outputs
    return nb


@pytest.mark.parametrize("chapter", chapter_paths(), ids=lambda p: f"book/{p.stem}")
def test_chapter_runs_alone_in_colab(colab_python, kernel, chapter, tmp_path):
    simulate(colab_python, kernel, chapter, tmp_path, student=False)  # any error fails the run


@pytest.mark.parametrize("chapter", chapter_paths(), ids=lambda p: f"student/{p.stem}")
def test_student_version_runs_alone_in_colab_up_to_its_first_exercise(colab_python, kernel, chapter, tmp_path):
    notebook = student_path(chapter)
    has_check = any("exercise-check" in c.metadata.get("tags", [])
                    for c in nbformat.read(notebook, as_version=4).cells)
    nb = simulate(colab_python, kernel, notebook, tmp_path, student=has_check)
    if not has_check:
        return
    *before, check = nb.cells
    failed = [i for i, c in enumerate(before) if c.cell_type == "code" and errors_of(c)]
    assert failed == [], f"cells {failed} raised before the first exercise: {errors_of(before[failed[0]])}"
    [error] = errors_of(check)
    assert error.ename == "CheckFailed" and "is not written yet: " in error.evalue, error
    shown = "\n".join(error.traceback)
    assert "not written yet" in shown and "Traceback" not in shown and "File " not in shown, shown


def test_setup_cell_without_network_says_what_to_do(colab_python, kernel, tmp_path):
    """pip cannot reach the package (a refused connection stands in for no network): the cell fails with a
    message that says what to do, and the package stays missing."""
    reset(colab_python)
    chapter = chapter_paths()[0]
    setup = first_code_cell(nbformat.read(chapter, as_version=4))
    offline = nbformat.v4.new_code_cell('import os\nos.environ["PIP_RETRIES"] = "0"\n'
                                        f'os.environ["{SOURCE_VARIABLE}"] = "http://127.0.0.1:9/attention_book.tar.gz"')
    nb = nbformat.v4.new_notebook(cells=[offline, setup])
    NotebookClient(nb, timeout=300, kernel_name=kernel, allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    [error] = errors_of(nb.cells[1])
    assert error.ename == "RuntimeError"
    for advice in ("Could not install the book's package", "connect it to the internet and run this cell again",
                   "pip install ./code", SOURCE_VARIABLE):
        assert advice in error.evalue, error.evalue
    assert "attention-book" not in installed(colab_python)
