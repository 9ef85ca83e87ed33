"""Run chapters top to bottom and store their outputs in place (what nbval then checks).

    python scripts/execute_notebooks.py                 # every book/NN_*.ipynb
    python scripts/execute_notebooks.py book/01_single_head.ipynb

Prints each chapter's wall time; the book promises under 30 s per chapter on 2 CPU cores.
"""
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

from book import chapters


def merge_streams(outputs):
    """Join consecutive prints to the same stream into one output, however the kernel flushed them,
    and keep only what a terminal would show of lines redrawn with carriage returns (progress bars)."""
    merged = []
    for out in outputs:
        if merged and out.output_type == "stream" and merged[-1].output_type == "stream" \
                and merged[-1].name == out.name:
            merged[-1].text += out.text
        else:
            merged.append(out)
    for out in merged:
        if out.output_type == "stream":
            out.text = "\n".join(line.rsplit("\r", 1)[-1] for line in out.text.split("\n"))
    return merged


def execute(path: pathlib.Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # per-run timestamps would churn every diff
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    nbformat.write(nb, path)
    return seconds


if __name__ == "__main__":
    paths = [pathlib.Path(p) for p in sys.argv[1:]] or chapters()
    for path in paths:
        print(f"{path.name}: executed in {execute(path):.1f} s", flush=True)
