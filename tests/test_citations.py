"""Papers are cited with {cite} roles that resolve in book/references.bib, never by a bare author name.

A bare "Shazeer" or "Ainslie et al." in the prose has no link to the bibliography; the build itself (-W -n) already
fails on a {cite} key that references.bib lacks.
"""
import re

import nbformat
import pytest
from conftest import ROOT, chapter_paths

BIB = (ROOT / "book" / "references.bib").read_text()
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`[^`]*`")


def first_author_surnames():
    """The surname of each entry's first author ("Vaswani", "Shazeer", ...), skipping corporate authors."""
    names = set()
    for authors in re.findall(r"author\s*=\s*\{(.*?)\},?\s*\n", BIB):
        first = authors.split(" and ")[0].strip()
        if first.startswith("{"):
            continue  # {Llama Team, AI @ Meta}
        names.add(first.split(",")[0].strip())
    return names


def prose_pages():
    for path in chapter_paths():
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
        yield pytest.param(text, id=path.name)
    for path in sorted((ROOT / "book").glob("*.md")):
        yield pytest.param(path.read_text(), id=path.name)


def test_the_bibliography_lists_the_papers_the_book_relies_on():
    for key in ["vaswani2017attention", "shazeer2019fast", "ainslie2023gqa", "clark2019bert", "voita2019analyzing",
                "michel2019sixteen", "olsson2022induction", "touvron2023llama2", "llama3herd2024",
                "jiang2023mistral", "chowdhery2022palm"]:
        assert re.search(r"@\w+\{" + key + ",", BIB), f"references.bib has no entry {key}"


@pytest.mark.parametrize("text", list(prose_pages()))
def test_authors_are_cited_not_named(text):
    prose = CITE.sub("", text)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)  # code blocks
    prose = re.sub(r"`[^`]*`", "", prose)  # inline code
    bare = re.findall(r"[A-Z][\w-]+(?: and [A-Z][\w-]+)? et al\.", prose)
    bare += [m.group(0) for name in first_author_surnames() for m in re.finditer(rf"\b{name}\b('s)?", prose)]
    assert not bare, f"author names outside a {{cite}} role: {sorted(set(bare))}; cite them with {{cite:t}}`key`"
