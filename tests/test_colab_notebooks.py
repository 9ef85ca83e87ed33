"""The notebooks a learner opens in Colab (colab/NN_*.ipynb and student/NN_*.ipynb) are plain Markdown and up to date.

Colab renders Markdown, not the site's MyST: no Colab notebook may hold a role, a directive, a target or a relative
link, and each must be what scripts/colab.py (and scripts/student.py) write now from its chapter. Their code is the
chapter's, byte for byte, except that claim cells open with a form title. The renderer itself is tested on a small
text with each construct, and on markup it does not know, which must stop it. Fast: no kernel.
"""
import re

import nbformat
import pytest
from conftest import ROOT, chapter_paths

from book import blob_url, colab_url, is_claim_cell, raw_url, site_url
from colab import (CLAIMS_TITLE, FORM, SETUP_TITLE, RenderError, citation_url, colab_path, colab_version,
                   glossary_terms, render, render_markdown)
from colab_button import add_colab_buttons
from setup_cell import MARKER, first_code_cell
from student import render as render_student
from student import student_path, student_version

from chinese_notebooks import COLAB_ZH, STUDENT_ZH

ROLE = re.compile(r"\{[\w:+-]+\}`")
DIRECTIVE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*\{", re.M)
TARGET = re.compile(r"^\([^()\s]+\)=\s*$", re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)")
BROKEN_LINK = re.compile(r"\[[^\[\]]*\[[^\[\]]*\]\([^)]*\)[^\[\]]*\]\(")  # a link inside a link's text
ABSOLUTE = re.compile(r"^(https?://|mailto:)")
PAGE = "book/03_multi_head.ipynb"
SITE = site_url()


def colab_facing():
    """Every notebook a Colab link opens: each chapter solved and as a student version, in English and in Chinese
    (colab/zh_CN/, student/zh_CN/: scripts/chinese_notebooks.py)."""
    return [pytest.param(path, id=path.relative_to(ROOT).as_posix())
            for chapter in chapter_paths()
            for path in (colab_path(chapter), student_path(chapter), COLAB_ZH / chapter.name,
                         STUDENT_ZH / chapter.name)]


def markup_left(text: str) -> list[str]:
    """What a Markdown text still holds of the site's markup: roles, directives, targets, relative links."""
    left = [m.group(0) for m in ROLE.finditer(text)]
    left += [m.group(0).strip() for m in DIRECTIVE.finditer(text)]
    left += [m.group(0) for m in TARGET.finditer(text)]
    left += [f"link to {m.group(1)!r}" for m in LINK.finditer(text) if not ABSOLUTE.match(m.group(1))]
    left += [f"link in a link: {m.group(0)}" for m in BROKEN_LINK.finditer(text)]
    return left


def test_the_check_finds_each_kind_of_markup():
    text = ("{term}`head` and\n```{note}\nx\n```\n:::{tip}\n:::\n(label)=\n# T\n[a](notation.md) "
            "![b](fig.png) [c](#part) [d](https://example.org) [e](mailto:a@b.c) "
            "[the [head](https://x.org/g#h) page](https://x.org/n)")
    assert markup_left(text) == ["{term}`", "```{", ":::{", "(label)=", "link to 'notation.md'", "link to 'fig.png'",
                                 "link to '#part'", "link in a link: [the [head](https://x.org/g#h) page]("]


@pytest.mark.parametrize("path", colab_facing())
def test_a_colab_notebook_holds_no_myst_markup_and_no_relative_link(path):
    nb = nbformat.read(path, as_version=4)
    left = [(index, found) for index, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for found in markup_left(cell.source)]
    assert left == [], f"{path.relative_to(ROOT)}: markup that Colab would show raw (cell, what): {left[:5]}"


GENERATED = {"colab": (colab_path, render), "student": (student_path, render_student)}  # folder: its path, its text


@pytest.mark.parametrize("folder", GENERATED)
@pytest.mark.parametrize("chapter", chapter_paths(), ids=lambda p: p.name)
def test_each_generated_notebook_is_up_to_date(folder, chapter):
    path_of, render_of = GENERATED[folder]
    path = path_of(chapter)
    assert path.exists(), f"{folder}/{chapter.name} is missing: run `make student`"
    assert path.read_text() == render_of(chapter), f"{folder}/{chapter.name} is out of date: run `make student`"


@pytest.mark.parametrize("folder", GENERATED)
def test_every_generated_notebook_has_a_chapter(folder):
    chapters = {p.name for p in chapter_paths()}
    orphans = [p.name for p in (ROOT / folder).glob("*.ipynb") if p.name not in chapters]
    assert orphans == [], f"{folder}/ notebooks without a chapter: {orphans}; run `make student`"


def expected_code(cell, setup):
    """A code cell's source and metadata as the Colab notebooks hold it (``setup``: the chapter's setup cell)."""
    if cell is setup:
        return f"{SETUP_TITLE}\n{cell.source}", {**cell.metadata, **FORM}
    if is_claim_cell(cell):
        return f"{CLAIMS_TITLE}\n{cell.source}", {**cell.metadata, **FORM}
    return cell.source, dict(cell.metadata)


@pytest.mark.parametrize("chapter", chapter_paths(), ids=lambda p: p.name)
def test_the_code_is_the_chapters_and_claim_cells_are_titled_forms(chapter):
    book = nbformat.read(chapter, as_version=4)
    pairs = [(book, nbformat.read(colab_path(chapter), as_version=4)),
             (student_version(book, chapter), nbformat.read(student_path(chapter), as_version=4))]
    for source, written in pairs:
        assert [c.id for c in written.cells] == [c.id for c in source.cells]
        setup = first_code_cell(source)
        for before, after in zip(source.cells, written.cells, strict=True):
            if before.cell_type == "code":
                assert (after.source, dict(after.metadata)) == expected_code(before, setup), (
                    f"{chapter.name} {before.id}")
                assert after.outputs == before.outputs
    claims = [c for c in pairs[0][1].cells if c.cell_type == "code" and c.source.startswith(CLAIMS_TITLE)]
    assert len(claims) == sum(is_claim_cell(c) for c in book.cells)
    assert all(c.metadata["cellView"] == "form" for c in claims)


@pytest.mark.parametrize("path", colab_facing())
def test_the_setup_cell_is_a_titled_form_that_nbval_still_skips(path):
    setup = first_code_cell(nbformat.read(path, as_version=4))
    assert setup.source.splitlines()[:2] == [SETUP_TITLE, MARKER]  # Colab's title first; nbval reads any line
    assert setup.metadata["cellView"] == "form"


@pytest.mark.parametrize("chapter", chapter_paths(), ids=lambda p: p.name)
def test_the_solved_notebook_says_it_is_solved_and_links_the_student_version_not_itself(chapter):
    nb = nbformat.read(colab_path(chapter), as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert colab_url(f"colab/{chapter.name}") not in text, f"colab/{chapter.name} links to itself"
    assert "this is the solved version" in nb.cells[0].source
    assert text.count(f"]({colab_url(f'student/{chapter.name}')})") == 2  # the header and the exercises
    assert "toggle" not in text, f"colab/{chapter.name} speaks of the site's toggles"


def test_the_renderer_turns_each_construct_into_markdown():
    text = "\n".join([
        "(decoder-block)=",
        "## A section",
        "",
        "As {cite:t}`olsson2022induction` show {cite:p}`shazeer2019fast,ainslie2023gqa`, the {term}`K/V heads",
        "<K/V head>` and {term}`GQA` differ; see {ref}`decoder-block`, {ref}`the block <decoder-block>`,",
        "{doc}`where_next`, {doc}`the notation </book/notation>`, [notation](notation.md),",
        "[chapter 8](08_grouped_query.ipynb#time-follows-bytes), [above](#a-section), [code](../code/README.md),",
        "![a figure](favicon.svg), $\\{a\\}_{i}$, [the {term}`head` page](notation.md), [as {cite:t}`shazeer2019fast`",
        "wrote](#a-section) and ``{term}`kept` `` `[kept](kept.md)`.",
        "",
        "```python",
        "{term}`kept in code`",
        "```",
        "",
        "```{note}",
        "A {term}`head` inside.",
        "```",
        "",
        ":::{admonition} Why {term}`heads <head>`",
        ":class: tip",
        "Because.",
        ":::",
        "",
        "```{figure} favicon.svg",
        ":alt: two heads",
        "",
        "The caption.",
        "```",
    ])
    book, glossary, refs = f"{SITE}book/", f"{SITE}book/glossary.html", f"{SITE}book/references.html#cite-"
    assert render_markdown(text, PAGE) == "\n".join([
        "## A section",
        "",
        f"As [Olsson et al. (2022)]({refs}olsson2022induction) show ([Shazeer, 2019]({refs}shazeer2019fast); "
        f"[Ainslie et al., 2023]({refs}ainslie2023gqa)), the "
        f"[K/V heads]({glossary}#term-K-V-head) and [GQA]({glossary}#term-GQA) differ; see "
        f"[9. From a layer to a block]({book}03_multi_head.html#decoder-block), "
        f"[the block]({book}03_multi_head.html#decoder-block),",
        f"[Where to go next]({book}where_next.html), [the notation]({book}notation.html), "
        f"[notation]({book}notation.html),",
        f"[chapter 8]({book}08_grouped_query.html#time-follows-bytes), [above]({book}03_multi_head.html#a-section), "
        f"[code]({blob_url('code/README.md')}),",
        f"![a figure]({raw_url('book/favicon.svg')}), $\\{{a\\}}_{{i}}$, [the head page]({book}notation.html), "
        "[as Shazeer (2019)",
        f"wrote]({book}03_multi_head.html#a-section) and ``{{term}}`kept` `` `[kept](kept.md)`.",
        "",
        "```python",
        "{term}`kept in code`",
        "```",
        "",
        f"> **Note**\n>\n> A [head]({glossary}#term-head) inside.",
        "",
        f"> **Why [heads]({glossary}#term-head)**\n>\n> Because.",
        "",
        f"![two heads]({raw_url('book/favicon.svg')})\n\n*The caption.*",
    ])


def test_citations_name_the_authors_as_the_site_does_and_link_their_entries():
    refs = f"{SITE}book/references.html#cite-"
    cases = {"{cite:t}`vaswani2017attention`": f"[Vaswani et al. (2017)]({refs}vaswani2017attention)",
             "{cite:t}`milakov2018online`": f"[Milakov and Gimelshein (2018)]({refs}milakov2018online)",
             "{cite:p}`llama3herd2024`": f"([Llama Team, AI @ Meta, 2024]({refs}llama3herd2024))",
             "{cite:p}`allal2025smollm2`": f"([Ben Allal et al., 2025]({refs}allal2025smollm2))",
             "{cite:t}`xiao2024streamingllm`": f"[Xiao et al. (2024)]({refs}xiao2024streamingllm)",  # "and others"
             "{cite}`shazeer2019fast`": f"([Shazeer, 2019]({refs}shazeer2019fast))"}
    assert {role: render_markdown(role, PAGE) for role in cases} == cases


def test_a_citations_anchor_is_the_id_the_sites_template_gives_its_entry():
    """_config.yml's bibtex_cite_id, made into an id as docutils makes one (lower case, "-" for what is not a
    letter or digit); tests/test_book_build.py checks that the built page has every id the Colab notebooks link."""
    assert citation_url("Olsson2022_Induction").endswith("/book/references.html#cite-olsson2022-induction")


def test_glossary_anchors_are_the_ids_sphinx_gives_the_terms():
    terms = glossary_terms()
    assert (terms["k/v head"], terms["bleu"], terms["d_head"], terms["causal mask"]) == (
        "term-K-V-head", "term-BLEU", "term-d_head", "term-causal-mask")


@pytest.mark.parametrize("text, message", [
    ("a {abbr}`GQA (grouped-query attention)` b", "the MyST role {abbr} has no Colab rendering"),
    ("```{glossary}\nterm\n  text\n```", "the MyST directive {glossary} has no Colab rendering"),
    ("{term}`no such term`", "{term} names 'no such term', which book/glossary.md does not define"),
    ("{cite:t}`nobody2099`", "no entry 'nobody2099' in book/references.bib"),
    ("{ref}`no-such-label`", "{ref} names the label 'no-such-label', which no (label)= line defines"),
    ("{doc}`nowhere`", "{doc} names 'nowhere', which is no page of the book"),
    ("{eq}`no-such-equation`", "the MyST role {eq} has no Colab rendering"),  # no chapter uses these: not rendered
    ("{math}`x^2`", "the MyST role {math} has no Colab rendering"),
    ("{cite:year}`shazeer2019fast`", "the MyST role {cite:year} has no Colab rendering"),
    ("```{math}\nx\n```", "the MyST directive {math} has no Colab rendering"),
    ("```{figure} favicon.svg\n---\nalt: x\n---\n```", "options are written as :key: value lines here"),
    ("```{figure} favicon.svg\n```", "a {figure} of 'favicon.svg' has no :alt: text"),
    ("[gone](gone.md)", "the link 'gone.md' points at book/gone.md, which the repository does not hold"),
])
def test_the_renderer_stops_on_markup_it_cannot_render(text, message):
    with pytest.raises(RenderError) as error:
        render_markdown(text, PAGE)
    assert message in str(error.value)


def test_an_error_names_the_notebook_and_the_cell(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("{sub}`2`")])
    nb.cells[0].id = "intro"
    with pytest.raises(RenderError, match=r"^01_x\.ipynb, cell intro: book/01_x\.ipynb: the MyST role \{sub\}"):
        colab_version(nb, ROOT / "book" / "01_x.ipynb")


def test_a_chapter_page_gets_the_colab_button_and_other_pages_none():
    chapter = chapter_paths()[0]
    context = {"header_buttons": []}
    add_colab_buttons(None, f"book/{chapter.stem}", "page.html", context, None)
    [group] = context["header_buttons"]
    assert [(b["text"], b["url"]) for b in group["buttons"]] == [
        ("Colab: exercises", colab_url(f"student/{chapter.name}")),
        ("Colab: with solutions", colab_url(f"colab/{chapter.name}"))]
    for page in ("book/glossary", "book/intro", "book/99_missing", "genindex"):
        other = {"header_buttons": []}
        add_colab_buttons(None, page, "page.html", other, None)
        assert other["header_buttons"] == [], page
