"""Shared set-up: the repository's paths, and the book's helper scripts on sys.path."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
COLAB_TIMES = {}  # notebook -> (seconds to run it, seconds of its setup cell), filled by test_colab.py
sys.path.insert(0, str(ROOT / "scripts"))


def chapter_paths():
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session")
def root():
    return ROOT


def pytest_terminal_summary(terminalreporter):
    """After a run that simulated Colab, say how long each notebook took there."""
    if not COLAB_TIMES:
        return
    terminalreporter.section("simulated Colab: seconds per notebook (total, of which the setup cell)")
    for name, (seconds, setup) in COLAB_TIMES.items():
        terminalreporter.write_line(f"{name:40s} {seconds:6.1f} s  ({setup:.1f} s setup)")
    terminalreporter.write_line(f"{'all':40s} {sum(s for s, _ in COLAB_TIMES.values()):6.1f} s")
