"""The Chinese edition's notebooks, for Colab and for a local Jupyter: each chapter solved and as a student version.

    python scripts/chinese_notebooks.py          # (re)write colab/zh_CN/*.ipynb and student/zh_CN/*.ipynb
    python scripts/chinese_notebooks.py --check  # exit 1 and list the notebooks that are out of date

Each is made as its English counterpart is (colab/NN_name.ipynb by scripts/colab.py, student/NN_name.ipynb by
scripts/student.py), with one step more before the Markdown is rendered for Colab: every message of every Markdown
cell is replaced by its translation from the chapter's catalogue (locales/zh_CN/LC_MESSAGES/book/NN_name.po), and
so is each figure's alt text. Code cells and their outputs are the English notebook's, byte for byte
(tests/test_translations.py), so they pass nbval exactly when the English ones do. The rendered links go to the
Chinese site (book.site_url's edition), and {term} links to the Chinese glossary's terms, whose anchors are the
English ones. A message with no translation stays English: tests/test_translations.py fails on any.

The blocks that only the Colab notebooks hold (the header and exercises preamble of the solved and student versions,
and the student version's note) are not on any page, so Sphinx does not extract them: generated_messages() gives
them to scripts/translations.py, which adds them to the chapter's catalogue.
"""
import copy
import sys

import nbformat

from book import ROOT, chapters, notebook_text, write_generated
from chapter_header import SOLVED, with_version_blocks
from colab import colab_version, edition, glossary_entries, glossary_terms
from markdown_messages import messages, translated
from student import student_version
from translations import CATALOGUES, LANGUAGE

COLAB_ZH = ROOT / "colab" / LANGUAGE
STUDENT_ZH = ROOT / "student" / LANGUAGE


def catalogue(name: str) -> dict[str, str]:
    """{English message: its translation} of a page's catalogue (``name``: book/03_multi_head), fuzzy and empty
    entries left out."""
    from babel.messages.pofile import read_po

    path = CATALOGUES / f"{name}.po"
    if not path.exists():
        return {}
    with open(path, "rb") as source:
        return {m.id: m.string for m in read_po(source) if m.id and m.string and not m.fuzzy}


def chinese_terms() -> dict[str, str]:
    """{the Chinese glossary's name of a term: the anchor of its English term}."""
    names = catalogue("book/glossary")
    return {names[english]: anchor for english, anchor in _english_terms().items() if english in names}


def _english_terms() -> dict[str, str]:
    """{English term as written in book/glossary.md: its anchor}."""
    anchors = glossary_terms()
    return {term: anchors[term.lower()] for term in glossary_entries()}


def translate_notebook(nb, chapter):
    """A copy of ``nb`` (the chapter at ``chapter``, or a version of it) with its Markdown and figure alt texts in
    Chinese."""
    lookup = catalogue(f"book/{chapter.stem}")
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = translated(cell.source, lambda message: lookup.get(message, message))
        image = cell.metadata.get("mystnb", {}).get("image", {})
        if image.get("alt"):
            image["alt"] = lookup.get(image["alt"], image["alt"])
    nb.metadata.setdefault("attention_book", {})["language"] = LANGUAGE
    return nb


def versions(chapter):
    """{"colab": the solved version, "student": the student version} of a chapter, in English, before rendering."""
    nb = nbformat.read(chapter, as_version=4)
    return {"colab": with_version_blocks(copy.deepcopy(nb), chapter.name, SOLVED),
            "student": student_version(nb, chapter)}


def generated_messages(chapter) -> list[str]:
    """The messages of the chapter's solved and student versions that its page does not have."""
    page = {m for cell in nbformat.read(chapter, as_version=4).cells if cell.cell_type == "markdown"
            for m in messages(cell.source)}
    found = []
    for nb in versions(chapter).values():
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                found += [m for m in messages(cell.source) if m not in page and m not in found]
    return found


def rendered(chapter) -> dict:
    """{path: notebook text} of the chapter's two Chinese notebooks."""
    with edition(LANGUAGE, chinese_terms()):
        return {folder / chapter.name: notebook_text(colab_version(translate_notebook(nb, chapter), chapter))
                for folder, nb in zip((COLAB_ZH, STUDENT_ZH), versions(chapter).values(), strict=True)}


def main(argv) -> int:
    wanted = {}
    for chapter in chapters():
        wanted |= rendered(chapter)
    check = "--check" in argv
    status = write_generated({p: t for p, t in wanted.items() if p.parent == COLAB_ZH}, COLAB_ZH, check,
                             remedy="python scripts/chinese_notebooks.py")
    return status | write_generated({p: t for p, t in wanted.items() if p.parent == STUDENT_ZH}, STUDENT_ZH, check,
                                    remedy="python scripts/chinese_notebooks.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
