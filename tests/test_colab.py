"""Colab, simulated: every chapter, with its student version's stubs, runs alone in a fresh kernel.

- The notebook is copied alone into an empty temporary folder, which is the kernel's working directory.
- The kernel's Python is a virtual environment (.venv-colab, cached between runs) holding only what Colab
  preinstalls that the book uses: torch, numpy, matplotlib, tqdm (and ipykernel, to be a kernel), at the
  versions of requirements.txt. Before each notebook, anything installed since the environment was made
  (the book's package, a chapter's extras) is uninstalled, so every notebook starts as in a new Colab session.
- ATTENTION_BOOK_SOURCE points the setup cell at a wheel built from this checkout's code/ instead of the public URL.
- The setup cell runs twice: the first run installs the package, the second must do nothing.
- One kernel per chapter covers both versions: the chapter runs top to bottom, and just before each exercise cell
  the student version's stub and its check run first. Each such check must fail with CheckFailed saying what to
  write (shown without a traceback); then the chapter's solution and the same check must pass. (The student file
  is exactly the chapter with those stubs, tests/test_student.py; make test-numerics runs it through nbval.)
- The kernel runs under another CPU's numerics (scripts/numerics.py's default-1: PyTorch's default kernels, MKL's
  compatible path, one thread), and every cell's output is compared with the stored one by nbval's rules (streams
  coalesced; images, metadata and execution counts left out; cells marked NBVAL_IGNORE_OUTPUT or NBVAL_SKIP not
  compared). So this run is also make test's second nbval pass over every chapter, under foreign numerics; the
  first is nbval itself, natively, over book/.
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
from collections import defaultdict
from datetime import datetime

import nbformat
import pytest
from conftest import COLAB_TIMES, ROOT, chapter_paths
from nbclient import NotebookClient
from nbval.plugin import coalesce_streams, transform_streams_for_comparison

from exercises import has_solution
from numerics import configurations
from setup_cell import SOURCE_VARIABLE, first_code_cell, pip_extras
from student import student_path

pytestmark = pytest.mark.colab

VENV = ROOT / ".venv-colab"
NUMERICS = "default-1"  # the foreign numerics the simulated Colab kernel runs under (scripts/numerics.py)
NOT_COMPARED = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count", "image/png",
                "image/jpeg", "application/vnd.jupyter.widget-view+json"}  # nbval's defaults
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
    """A kernel spec whose Python is the Colab environment's, and a wheel of code/ for the setup cell."""
    base = tmp_path_factory.mktemp("colab")
    code = base / "code"
    shutil.copytree(ROOT / "code", code, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    # One wheel for every notebook: pip installs it in a fraction of the time a source folder takes to build.
    # (That the source builds cleanly, as Colab's install from the repository does: tests/test_packaging.py.)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(base / "dist"), str(code)], check=True)
    [wheel] = (base / "dist").glob("attention_book-*.whl")
    source = wheel.as_uri()
    spec = base / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(colab_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab (simulated)", "language": "python",
        "env": {SOURCE_VARIABLE: str(source), **configurations()[NUMERICS]},
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


STUB_TAG = "student-stub"  # cells of the student version that the simulation runs before the chapter's own


def compared(cell):
    """Whether nbval compares this stored cell's output: an executed code cell without an NBVAL marker."""
    return (cell.cell_type == "code" and cell.execution_count is not None
            and "NBVAL_IGNORE_OUTPUT" not in cell.source and "NBVAL_SKIP" not in cell.source)


def comparable(outputs):
    """A cell's outputs as nbval compares them: each kept key (stdout, text/plain, ename, ...) -> its values."""
    flat = defaultdict(list)
    for out in transform_streams_for_comparison(coalesce_streams(copy.deepcopy(outputs))):
        for key, value in out.items():
            if key == "data":
                for mime, data in value.items():
                    if mime not in NOT_COMPARED:
                        flat[mime].append(data)
            elif key not in NOT_COMPARED:
                flat[key].append(value)
    return dict(flat)


def with_student_stubs(chapter, student):
    """The chapter's cells, with a copy of the student's stubbed exercise cell and its check before each exercise."""
    stubs = {c.id: c for c in student.cells}
    cells = []
    for index, cell in enumerate(chapter.cells):
        tags = cell.metadata.get("tags", [])
        if "exercise" in tags and cell.id in stubs and has_solution(cell.source):
            check = chapter.cells[index + 1]
            assert "exercise-check" in check.metadata.get("tags", []), f"cell {index}: no check cell after it"
            for original in (stubs[cell.id], check):
                stub = copy.deepcopy(original)
                stub.id = f"{original.id}-stub"
                stub.metadata["tags"] = [*tags, STUB_TAG] if original is not check else ["exercise-check", STUB_TAG]
                stub.outputs, stub.execution_count = [], None
                cells.append(stub)
        cells.append(cell)
    merged = copy.deepcopy(chapter)
    merged.cells = cells
    return merged


def simulate(python, kernel, notebook, folder):
    """Run the notebook alone in ``folder`` as Colab would; return the executed notebook."""
    reset(python)
    torch_before = torch_identity(python)
    assert not any(folder.iterdir())
    nb = notebook
    setup = first_code_cell(nb)
    again = copy.deepcopy(setup)
    again.id = "setup-cell-again"
    position = nb.cells.index(setup) + 1
    nb.cells.insert(position, again)
    nbformat.write(nb, folder / "chapter.ipynb")
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name=kernel, allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    seconds = time.perf_counter() - start
    assert torch_identity(python) == torch_before, "torch was reinstalled or replaced"
    return nb, seconds, cell_seconds(nb.cells[position - 1])


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


def colab_order(chapters):
    """Chapters that install extras last: uninstalling those (transformers and its kin) before the next notebook is
    the slowest part of a reset."""
    return sorted(chapters, key=lambda p: bool(pip_extras(nbformat.read(p, as_version=4))))


@pytest.mark.parametrize("chapter", colab_order(chapter_paths()), ids=lambda p: p.stem)
def test_chapter_and_its_student_version_run_alone_in_colab(colab_python, kernel, chapter, tmp_path):
    merged = with_student_stubs(nbformat.read(chapter, as_version=4),
                                nbformat.read(student_path(chapter), as_version=4))
    nb, seconds, setup_seconds = simulate(colab_python, kernel, merged, tmp_path)
    COLAB_TIMES[f"book/{chapter.name} + student stubs"] = (seconds, setup_seconds)
    setup_out, again_out = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])][:2]
    assert "Installed the book's package from file://" in text_of(setup_out), setup_out.outputs
    assert "already installed: nothing to do" in text_of(again_out), again_out.outputs
    stubs_checked = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        if STUB_TAG in tags and "exercise-check" in tags:
            [error] = errors_of(cell)
            assert error.ename == "CheckFailed" and "is not written yet: " in error.evalue, error
            shown = "\n".join(error.traceback)
            assert "not written yet" in shown and "Traceback" not in shown and "File " not in shown, shown
            stubs_checked += 1
        else:
            assert errors_of(cell) == [], f"{chapter.name}: cell {index} raised: {errors_of(cell)}"
    stored = nbformat.read(chapter, as_version=4).cells
    assert stubs_checked == sum(has_solution(c.source) for c in stored)
    ran = {cell.id: cell for cell in nb.cells}
    differ = [index for index, cell in enumerate(stored)
              if compared(cell) and comparable(ran[cell.id].outputs) != comparable(cell.outputs)]
    assert differ == [], (f"{chapter.name}: under {NUMERICS} numerics, cells {differ} print other outputs than "
                          f"the stored ones; the first: {comparable(ran[stored[differ[0]].id].outputs)} "
                          f"against {comparable(stored[differ[0]].outputs)}" if differ else "")


def test_the_comparison_sees_a_changed_digit_and_ignores_what_nbval_ignores():
    stored = [nbformat.v4.new_output("stream", name="stdout", text="loss 0.019\n"),
              nbformat.v4.new_output("display_data", data={"image/png": "AAA", "text/plain": "<Figure>"})]
    same = [nbformat.v4.new_output("stream", name="stdout", text="loss "),
            nbformat.v4.new_output("stream", name="stdout", text="0.019\n"),
            nbformat.v4.new_output("display_data", data={"image/png": "BBB", "text/plain": "<Figure>"})]
    other = copy.deepcopy(same)
    other[1].text = "0.001\n"
    assert comparable(same) == comparable(stored) != comparable(other)
