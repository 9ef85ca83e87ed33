"""The chapters keep their own verification out of the reader's way (issue 27).

- A claim cell (a code cell that calls ``claim(``) is hidden on the site (tag ``hide-input``), so the reader sees only
  its ✓ lines: it prints nothing else and draws nothing, and nbval compares its lines (no ``NBVAL_IGNORE_OUTPUT``).
- How the book checks itself (CPU numerics, kernel choices, the Colab-like test run) is explained on one page,
  book/checking.md: no chapter's prose names ``ATEN_CPU_CAPABILITY``, MKL or "simulated Colab", and a chapter links
  to that page at most once.
"""
import re

import nbformat
import pytest
from conftest import ROOT, chapter_paths

from book import is_claim_cell

CHAPTERS = [pytest.param(path, id=path.name) for path in chapter_paths()]
FORBIDDEN = re.compile(r"ATEN_CPU_CAPABILITY|\bMKL|simulated Colab", re.I)


def claim_cells(nb):
    return [(index, cell) for index, cell in enumerate(nb.cells) if is_claim_cell(cell)]


@pytest.mark.parametrize("path", CHAPTERS)
def test_claim_cells_are_hidden_and_show_only_their_check_lines(path):
    nb = nbformat.read(path, as_version=4)
    for index, cell in claim_cells(nb):
        where = f"{path.name}, cell {index}"
        assert "hide-input" in cell.metadata.get("tags", []), f"{where} calls claim() but is not tagged hide-input"
        assert not cell.source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT"), (
            f"{where}: a claim cell's ✓ lines are what nbval compares; move what varies into the cell above")
        for out in cell.get("outputs", []):
            assert out.output_type == "stream" and out.name == "stdout", (
                f"{where} shows a {out.output_type} output; a hidden claim cell may only print its ✓ lines")
            lines = [line for line in out.text.splitlines() if line.strip()]
            stray = [line for line in lines if not line.startswith("✓")]
            assert not stray, f"{where} prints lines other than claims, which the site would hide: {stray[:2]}"


@pytest.mark.parametrize("path", CHAPTERS)
def test_the_prose_leaves_the_machinery_to_the_checking_page(path):
    nb = nbformat.read(path, as_version=4)
    prose = [cell.source for cell in nb.cells if cell.cell_type == "markdown"]
    for text in prose:
        m = FORBIDDEN.search(text)
        assert not m, f"{path.name} names {m.group(0)!r} in its prose; that belongs on book/checking.md"
    links = sum(len(re.findall(r"\]\(checking\.md[)#]", text)) for text in prose)
    assert links <= 1, f"{path.name} links to checking.md {links} times; once is enough"


def test_the_checking_page_is_in_the_table_of_contents():
    assert "book/checking" in (ROOT / "_toc.yml").read_text()
    page = (ROOT / "book" / "checking.md").read_text()
    for topic in ("claim", "NBVAL_IGNORE_OUTPUT", "ATEN_CPU_CAPABILITY", "threads", "Colab"):
        assert topic in page, f"book/checking.md does not explain {topic}"
