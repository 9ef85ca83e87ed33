"""The virtual environments that some tests make once per machine (the simulated Colab's in tests/test_colab.py,
nbgrader's in tests/test_nbgrader.py), kept in the user's cache so that a fresh clone does not wait minutes for
them."""
import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil


def cache_folder() -> pathlib.Path:
    """~/.cache/attention-book (or $XDG_CACHE_HOME/attention-book)."""
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "attention-book"


@contextlib.contextmanager
def _locked(path, wait=True):
    """Hold an exclusive lock on the file ``path`` (made if missing); yields False, holding nothing, when another
    process holds it and ``wait`` is False."""
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_environment(prefix, made_with, make, stamp) -> pathlib.Path:
    """The folder cache_folder()/<prefix>-<hash of made_with>, made by ``make(folder)`` unless it holds ``stamp``,
    the file ``make`` writes last (a folder without it is what an interrupted run left, and is made again).

    The folder is made in place, under a lock: a second run at once waits for the first's folder instead of building
    its own beside it, and the environment's scripts (whose first lines name its path, as nbgrader's alembic does)
    keep a path that exists. Folders of other ``made_with`` (earlier pins) are removed, unless a run holds them."""
    key = hashlib.sha256(json.dumps(made_with, sort_keys=True).encode()).hexdigest()[:16]
    cache = cache_folder()
    cache.mkdir(parents=True, exist_ok=True)
    made = cache / f"{prefix}-{key}"
    with _locked(cache / f".{made.name}.lock"):
        if not (made / stamp).exists():
            shutil.rmtree(made, ignore_errors=True)
            make(made)
            if not (made / stamp).exists():
                raise RuntimeError(f"making {made} wrote no {stamp}, the file that says it is complete")
            for old in cache.glob(f"{prefix}-*"):
                if old != made and old.is_dir():
                    with _locked(cache / f".{old.name}.lock", wait=False) as free:
                        if free:
                            shutil.rmtree(old, ignore_errors=True)
    return made
