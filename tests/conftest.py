"""Shared set-up: the repository's paths, and the book's helper scripts on sys.path."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def chapter_paths():
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="session")
def root():
    return ROOT
