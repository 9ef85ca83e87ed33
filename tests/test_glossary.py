"""The glossary and the {term} links to it agree.

Every {term} role in the book ({term}`name` or {term}`text <name>`, in the chapters' markdown cells and in the .md
pages) names a term of book/glossary.md, matched without regard to case as Sphinx matches it; every glossary term is
linked from somewhere outside the glossary; the glossary has at least 40 terms; and the chapters hold at least 30
{term} links. The build (-W -n) would also fail on an unknown term, but only after minutes; this test says which
page and which term.

GLOSSARY_TEST_BOOK=/path/to/a/copy/of/book runs the same checks on another book folder.
"""
import os
import pathlib
import re

import nbformat
from conftest import ROOT

BOOK = pathlib.Path(os.environ.get("GLOSSARY_TEST_BOOK", ROOT / "book"))
ROLE = re.compile(r"\{term\}`([^`]*)`")


def glossary_terms(book: pathlib.Path = BOOK) -> list[str]:
    """The terms of glossary.md: the non-indented lines inside its glossary directive."""
    text = (book / "glossary.md").read_text()
    m = re.search(r"^(`{3,})\{glossary\}[^\n]*\n(.*?)^\1[ \t]*$", text, re.M | re.S)
    assert m, "glossary.md has no ```{glossary} directive"
    lines = m.group(2).splitlines()
    while lines and lines[0].startswith(":"):  # the directive's options, if any
        lines.pop(0)
    return [line.strip() for line in lines if line.strip() and not line[0].isspace()]


def role_target(inner: str) -> str:
    m = re.fullmatch(r"(.*?)\s*<([^<>]+)>", inner.strip(), re.S)
    return (m.group(2) if m else inner).strip()


def pages(book: pathlib.Path = BOOK) -> dict[str, str]:
    """Page name -> its prose: the markdown cells of each chapter, and each .md page."""
    out = {}
    for path in sorted(book.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        out[path.name] = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for path in sorted(book.glob("*.md")):
        out[path.name] = path.read_text()
    return out


def term_links(book: pathlib.Path = BOOK) -> list[tuple[str, str]]:
    """(page, target) for every {term} role in the book."""
    return [(page, role_target(m.group(1))) for page, text in pages(book).items() for m in ROLE.finditer(text)]


def test_glossary_has_at_least_40_terms_and_no_duplicates():
    terms = glossary_terms()
    assert len(terms) >= 40, f"the glossary has {len(terms)} terms"
    lowered = [t.lower() for t in terms]
    assert len(set(lowered)) == len(lowered), "a term appears twice (Sphinx compares terms without case)"


def test_every_term_link_names_a_glossary_term():
    known = {t.lower() for t in glossary_terms()}
    unknown = sorted({(page, target) for page, target in term_links() if target.lower() not in known})
    assert not unknown, f"{{term}} links to terms the glossary lacks: {unknown}"


def test_every_glossary_term_is_linked_outside_the_glossary():
    linked = {target.lower() for page, target in term_links() if page != "glossary.md"}
    unlinked = [t for t in glossary_terms() if t.lower() not in linked]
    assert not unlinked, f"glossary terms that no page links with {{term}}: {unlinked}"


def test_chapters_link_the_glossary_at_least_30_times():
    n = sum(1 for page, _ in term_links() if page.endswith(".ipynb"))
    assert n >= 30, f"the chapters hold {n} {{term}} links"
