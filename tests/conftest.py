"""Shared set-up: the repository's paths, the book's helper scripts on sys.path, and one build of the site
that the build test and the browser test share."""
import dataclasses
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
COLAB_TIMES = {}  # notebook -> (seconds to run it, seconds of its setup cell), filled by test_colab.py
sys.path.insert(0, str(ROOT / "scripts"))

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
    """`jupyter-book build` of the repository (from stored outputs, -W -n) into a temporary folder, once a session."""
    out = tmp_path_factory.mktemp("book")
    jupyter_book = pathlib.Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), "-W", "-n", "--keep-going",
                             "--path-output", str(out)], capture_output=True, text=True, timeout=600)
    return BuiltBook(result.returncode, result.stdout + result.stderr, out / "_build" / "html")


def pytest_terminal_summary(terminalreporter):
    """At the end of a run: the browser test's per-page table, and how long each notebook took in simulated Colab."""
    if SUMMARY_LINES:
        terminalreporter.section("site in the browser")
        for line in SUMMARY_LINES:
            terminalreporter.write_line(line)
    if COLAB_TIMES:
        terminalreporter.section("simulated Colab: seconds per notebook (total, of which the setup cell)")
        for name, (seconds, setup) in COLAB_TIMES.items():
            terminalreporter.write_line(f"{name:40s} {seconds:6.1f} s  ({setup:.1f} s setup)")
        terminalreporter.write_line(f"{'all':40s} {sum(s for s, _ in COLAB_TIMES.values()):6.1f} s")


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium for the tests of the interactive views (tests/views.py), started once per session."""
    from views import chromium

    with chromium() as launched:
        yield launched
