"""Colab, simulated: every chapter, with its student version's stubs, runs alone in a fresh kernel.

What runs is what a learner opens in Colab: the chapter as rendered for it (colab/NN_name.ipynb, scripts/colab.py) and
its student version (student/NN_name.ipynb), whose code is the chapter's (tests/test_colab_notebooks.py).

- The notebook is copied alone into an empty temporary folder, which is the kernel's working directory.
- The kernel's Python is a virtual environment (.venv-colab: hard links to one made once per machine and set of
  pins in ~/.cache/attention-book, so that a fresh clone does not wait for it) holding only what Colab
  preinstalls that the book uses: torch, numpy, matplotlib, tqdm (and ipykernel, to be a kernel), at the
  versions of requirements.txt, and Colab's own transformers stack (tests/colab-pins.txt), which lags behind ours:
  there, the oldest transformers that the package's extras accept. The setup cell keeps it, as in real Colab.
  Before each notebook, anything installed since the environment was made (the book's package, a chapter's
  extras) is uninstalled, so every notebook starts as in a new Colab session.
- ATTENTION_BOOK_SOURCE points the setup cell at a wheel built from this checkout's code/ instead of the public URL.
- The kernel's pip resolves under PIP_CONSTRAINT: what the environment was made with, and requirements.txt's pins
  for the rest, so the same commit installs the same versions next week.
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
- torch's version and installed files are the same before and after: the setup cell never reinstalls it (read from
  its metadata, without importing it).

Slow (minutes: a kernel and a pip install per notebook). Fast run: ``pytest -m "not colab"``; ``make test``
runs it in a second pytest process beside the rest (tests/alongside.py). The time per notebook is printed at the end
of the run, beside nbval's native time (tests/conftest.py).
"""
import copy
import hashlib
import importlib.metadata
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
from cached_environment import cached_environment as shared_cached_environment
from conftest import COLAB_TIMES, ROOT, chapter_paths
from nbclient import NotebookClient
from nbval.plugin import coalesce_streams, transform_streams_for_comparison

from colab import colab_path
from exercises import has_solution
from numerics import configurations
from setup_cell import SOURCE_VARIABLE, first_code_cell, pip_extras
from student import student_path

pytestmark = pytest.mark.colab

VENV = ROOT / ".venv-colab"
NUMERICS = "default-1"  # the foreign numerics the simulated Colab kernel runs under (scripts/numerics.py)
NOT_COMPARED = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count", "image/png",
                "image/jpeg", "application/vnd.jupyter.widget-view+json"}  # nbval's defaults
PREINSTALLED = ["torch", "numpy", "matplotlib", "tqdm", "ipykernel"]  # at requirements.txt's pins
COLAB_PINS = ROOT / "tests" / "colab-pins.txt"  # Colab's own transformers stack, older than requirements.txt's
KERNEL = "colab-simulated"
STAMP_VERSION = 2  # the stamp's format; a change remakes the environment


def canonical(name):
    return name.lower().replace("_", "-").replace(".", "-")


def pinned(*files):
    """{name: 'name==version'} of the exact pins in requirements files (comments, options and -e lines left out)."""
    found = {}
    for path in files:
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line and not line.startswith("-"):
                found[canonical(line.split("==")[0].split("[")[0].strip())] = line
    return found


def pins():
    """What the environment is made with: requirements.txt's exact pins of what Colab preinstalls, then
    tests/colab-pins.txt."""
    ours = pinned(ROOT / "requirements.txt")
    return [ours[name] for name in PREINSTALLED] + list(pinned(COLAB_PINS).values())


def pip(python, *args):
    return subprocess.run([str(python), "-m", "pip", *args, "--disable-pip-version-check"], check=True,
                          capture_output=True, text=True)


def site_packages(venv=VENV):
    [folder] = (venv / "lib").glob("python*/site-packages")
    return folder


def installed(venv=VENV):
    """{distribution name: version} of what the environment holds, read from its metadata (no pip, no import)."""
    return {canonical(d.metadata["Name"]): d.version
            for d in importlib.metadata.distributions(path=[str(site_packages(venv))])}


def write_constraints(path, baseline):
    """A pip constraints file: the environment's own versions, and requirements.txt's (and requirements-no-deps.txt's)
    pins for everything else. The setup cell then resolves the same versions whatever the index offers that day."""
    constraints = pinned(ROOT / "requirements.txt", ROOT / "requirements-no-deps.txt")
    constraints |= {name: f"{name}=={version}" for name, version in baseline.items()}
    constraints.pop("attention-book", None)
    path.write_text("\n".join(sorted(constraints.values())) + "\n")
    return path


def made_with():
    """What the environment's contents follow from; the stamp records it, and the cache is keyed by its hash."""
    return {"version": STAMP_VERSION, "pins": pins(), "python": sys.version.split()[0], "platform": sys.platform}


def make_environment(venv):
    """A new virtual environment at ``venv`` with pins(); its stamp records made_with() and what it holds."""
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # what those packages pull in (scikit-learn, requests, ...) comes at requirements.txt's pins
    colab_own = {name: line.split("==", 1)[1] for name, line in pinned(COLAB_PINS).items()}
    constraints = write_constraints(venv / "constraints-made-with.txt", colab_own)
    pip(python, "install", "--quiet", "--constraint", str(constraints), *pins())
    (venv / "colab-stamp.json").write_text(json.dumps({"made_with": made_with(), "baseline": installed(venv)},
                                                      indent=1))


def cached_environment():
    """The environment as made, in the user's cache (~/.cache/attention-book/venv-colab-<hash of made_with()>): made
    once per machine and set of pins, whatever the checkout, so that a fresh clone does not wait minutes for it
    (tests/cached_environment.py: made under a lock, so that two runs at once never see half of one)."""
    return shared_cached_environment("venv-colab", made_with(), make_environment, "colab-stamp.json")


@pytest.fixture(scope="session")
def colab_python():
    """The simulated Colab environment's Python, in .venv-colab: hard links to the cached environment (seconds; pip
    only ever adds and removes files, never writes into one), remade while the pins do not change."""
    python, stamp = VENV / "bin" / "python", VENV / "colab-stamp.json"
    made = json.loads(stamp.read_text()) if stamp.exists() else {}
    if not (python.exists() and made.get("made_with") == made_with()):
        cached = cached_environment()
        shutil.rmtree(VENV, ignore_errors=True)
        try:
            shutil.copytree(cached, VENV, symlinks=True, copy_function=os.link)
        except (OSError, shutil.Error):  # another file system: no hard links
            shutil.rmtree(VENV, ignore_errors=True)
            make_environment(VENV)
    assert "attention-book" not in json.loads(stamp.read_text())["baseline"]
    return python


def baseline():
    return json.loads((VENV / "colab-stamp.json").read_text())["baseline"]


def reset(python):
    """Back to the environment as it was made (a new Colab session): uninstall what was added since, and
    put back any preinstalled package whose version a chapter's extras changed."""
    made, now = baseline(), installed()
    added = sorted(set(now) - set(made))
    if added:
        pip(python, "uninstall", "--yes", *added)
    changed = [f"{name}=={version}" for name, version in made.items() if now.get(name) != version]
    if changed:
        pip(python, "install", "--quiet", "--no-deps", *changed)


def torch_identity():
    """torch's version, and a fingerprint of its installed files: the hash of its RECORD (every file with its own
    hash) and that file's inode and modification time, which any reinstall changes."""
    [info] = site_packages().glob("torch-*.dist-info")
    record = info / "RECORD"
    stat = record.stat()
    return info.name, hashlib.sha256(record.read_bytes()).hexdigest(), stat.st_ino, stat.st_mtime_ns


@pytest.fixture(scope="module")
def kernel(colab_python, package_wheel, tmp_path_factory):
    """A kernel spec whose Python is the Colab environment's, with the package's wheel for the setup cell (one wheel
    for every notebook: pip installs it in a fraction of the time a source folder takes to build; that the source
    builds cleanly, as Colab's install from the repository does: tests/test_packaging.py), and pip's constraints."""
    assert package_wheel.returncode == 0, package_wheel.log[-3000:]
    base = tmp_path_factory.mktemp("colab")
    constraints = write_constraints(base / "constraints.txt", baseline())
    spec = base / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(colab_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab (simulated)", "language": "python",
        "env": {SOURCE_VARIABLE: package_wheel.path.as_uri(), "PIP_CONSTRAINT": str(constraints),
                **configurations()[NUMERICS]},
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
    torch_before = torch_identity()
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
    assert torch_identity() == torch_before, "torch was reinstalled or replaced"
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
    for advice in ("Could not install the book's package", "connect it and run this cell again", SOURCE_VARIABLE,
                   "PIP_INDEX_URL", "Running the book"):
        assert advice in error.evalue, error.evalue
    assert "attention-book" not in installed()


def colab_order(chapters):
    """Chapters that install extras last: uninstalling those (transformers and its kin) before the next notebook is
    the slowest part of a reset."""
    return sorted(chapters, key=lambda p: bool(pip_extras(nbformat.read(p, as_version=4))))


@pytest.mark.parametrize("chapter", colab_order(chapter_paths()), ids=lambda p: p.stem)
def test_chapter_and_its_student_version_run_alone_in_colab(colab_python, kernel, chapter, tmp_path):
    merged = with_student_stubs(nbformat.read(colab_path(chapter), as_version=4),
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
    stored = nbformat.read(colab_path(chapter), as_version=4).cells
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
