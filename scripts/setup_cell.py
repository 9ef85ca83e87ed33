"""Write the setup cell, derived from _config.yml, as the first code cell of every chapter.

    python scripts/setup_cell.py          # rewrite the cell in book/*.ipynb
    python scripts/setup_cell.py --check  # exit 1 and list the chapters whose cell differs

The cell installs the book's package when the notebook runs in Colab or wherever the package is
missing. It asks pip for the package only; its ``torch>=2.5`` bound keeps the torch already there.
"""
import pathlib
import sys

import nbformat
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = "# NBVAL_SKIP"
SETUP_TAGS = ["setup", "hide-input"]  # hidden behind a toggle on the site


def setup_source(config_path=ROOT / "_config.yml") -> str:
    repo = yaml.safe_load(pathlib.Path(config_path).read_text())["repository"]
    spec = f"attention-book @ git+{repo['url']}@{repo.get('branch', 'main')}#subdirectory=code"
    return f'''{MARKER}
# Setup: in Colab, or wherever the book's package is missing, install it from the book's repository.
# pip leaves the installed torch alone (the package asks only for torch>=2.5).
# Written by scripts/setup_cell.py from _config.yml: edit that, not this cell.
import importlib
import importlib.util
import subprocess
import sys

if "google.colab" in sys.modules or importlib.util.find_spec("attention_book") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                    "{spec}"], check=True)
    importlib.invalidate_caches()'''


def first_code_cell(nb):
    return next((cell for cell in nb.cells if cell.cell_type == "code"), None)


def chapters():
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def main(argv) -> int:
    expected = setup_source()
    stale = []
    for path in chapters():
        nb = nbformat.read(path, as_version=4)
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
