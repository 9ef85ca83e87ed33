"""Write the notebooks a learner opens in Colab: the chapters with the site's markup rendered as plain Markdown.

    python scripts/colab.py          # (re)write colab/*.ipynb   (make student)
    python scripts/colab.py --check  # exit 1 and list the Colab notebooks that are out of date

The chapters are written in MyST, which only the site renders: Colab would show "{cite:t}`olsson2022induction`"
where the site shows "Olsson et al. [2022]", and its relative links (``notation.md``) lead nowhere. So every notebook
that a Colab link opens is generated, by ``colab_version`` here:
- colab/NN_name.ipynb: the solved chapter (this script);
- student/NN_name.ipynb: the student version (scripts/student.py, which passes its notebook through
  ``colab_version`` too, so both follow one pipeline).

``colab_version`` changes the markdown cells, the setup cell and the claim cells only:
- roles: ``{cite:t}`key``` -> "[Vaswani et al. (2017)](entry)", ``{cite:p}`a,b``` -> "([A et al., 2019](entry);
  [B, 2020](entry))" (``{cite}`` as ``{cite:p}``), from book/references.bib, each linked to its entry on the site's
  bibliography page (the id _config.yml's ``bibtex_cite_id`` gives it); ``{term}`text <term>``` -> the text linked to
  the term on the site's glossary; ``{doc}``, ``{ref}`` -> links to the site's pages (the page's or section's title
  when the role gives no text). Inside a link's text, a role is its text alone (a link cannot hold a link);
- relative links and images (``notation.md``, ``05_real_heads.ipynb#part``, ``#part``) -> absolute links to the
  site's pages (``.html``), or to the repository for any other file; targets (``(label)=``) are dropped;
- directives: admonitions (``note``, ``tip``, ``warning``, ``admonition``, ``dropdown``, ...) -> a blockquote with a
  bold title; ``figure`` and ``image`` -> a Markdown image with its alt text and caption;
- claim cells (code cells that call ``claim(``; hidden on the site by their ``hide-input`` tag) get the first line
  ``# @title Check the chapter's claims`` and the cell metadata ``cellView: "form"``: Colab shows the title and the
  ✓ lines, with the code folded away; so does the setup cell (the first code cell), titled
  ``# @title Setup: install the book's package`` (its ``# NBVAL_SKIP`` marker stays, on the next line).
The solved notebook's header and exercises preamble say that it is the solved version and link the student version
(scripts/chapter_header.py, ``with_version_blocks``).
Math stays as it is (Colab renders ``$...$`` and ``$$...$$``), and so do fenced code blocks and inline code.
The renderer knows the markup the chapters use, and the admonitions and figures a chapter may add, nothing more: a
role or directive that it does not know (``{math}``, ``{eq}``, a ``{math}`` block...) stops it with an error naming
the notebook, rather than reaching a learner raw; tests/test_colab_notebooks.py checks that no Colab notebook holds
MyST markup or a relative link, and that each is up to date.

Author names follow the site's author-year style (sphinxcontrib-bibtex): one author "Shazeer", two "Milakov and
Gimelshein", three or more "Vaswani et al."; a list that ends in "and others" also reads "et al." (the site writes
"Xiao and others" there). Every address comes from _config.yml through scripts/book.py: the site's from
``html.baseurl``, the repository's from ``repository``.
"""
import contextlib
import copy
import functools
import pathlib
import re
import sys

import nbformat
from docutils.nodes import make_id  # how sphinxcontrib-bibtex makes an entry's id from bibtex_cite_id
from pybtex.database import parse_file
from pybtex.richtext import Text
from sphinx.util.nodes import _make_id  # the ids Sphinx gives glossary terms, so that the links land on them

from book import (ROOT, SITE_EDITION, blob_url, config, is_claim_cell, notebook_text, raw_url, site_url,
                  write_chapter_copies)
from chapter_header import SOLVED, with_version_blocks
from setup_cell import first_code_cell

COLAB = ROOT / "colab"
BOOK = ROOT / "book"
CLAIMS_TITLE = "# @title Check the chapter's claims"
SETUP_TITLE = "# @title Setup: install the book's package"
FORM = {"cellView": "form"}

ROLE = r"\{(?P<name>[A-Za-z][\w:+-]*)\}(?P<ticks>`+)(?P<content>.+?)(?P=ticks)"
CODE_SPAN = r"(?P<code>`+).+?(?P=code)"
LINK = r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target><[^>]*>|[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)"
ROLE_OR_CODE = re.compile(f"{ROLE}|{CODE_SPAN}", re.S)  # scanned left to right, so a role in inline code stays
INLINE = re.compile(f"{CODE_SPAN}|{LINK}|{ROLE}", re.S)  # at a "[", the link (with any role in its text) wins
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)  # "text <target>" in a role
FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,}|:{3,})[ \t]*(?P<info>.*?)[ \t]*$")
DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[\w:-]+)\}[ \t]*(?P<argument>.*)$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$")
HEADING = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t#]*$", re.M)
ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)  # https:, mailto:, data:, //host
LINK_TEXT_ROLE = re.compile(r"\[(?P<text>[^\]]*)\]\([^)]*\)")  # a rendered role that sits in a link's text
CITATIONS = {"cite", "cite:p", "cite:t"}
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error", "seealso",
               "admonition", "dropdown", "margin", "sidebar"}


class RenderError(ValueError):
    """Markup that the Colab renderer cannot turn into plain Markdown."""


# ----------------------------------------------------------------------------------------------------------------
# What the renderer links to: the site's pages, the bibliography, the glossary, the labels.


def site_page(source: str) -> str:
    """The site's address of a source file given relative to the repository: book/notation.md ->
    .../book/notation.html (a chapter, .ipynb, likewise)."""
    path = pathlib.PurePosixPath(source)
    return site_url(str(path.with_suffix(".html")))


def source_of(relative: str, page: str) -> str:
    """A path written in a page (``notation.md``, ``../code/x.py``), relative to the repository's root."""
    parts = []
    for part in (pathlib.PurePosixPath(page).parent / relative).parts:
        if part == "..":
            if not parts:
                raise RenderError(f"{page}: the link {relative!r} leaves the repository")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


@functools.cache
def bibliography(path=BOOK / "references.bib"):
    return parse_file(str(path)).entries


def _surname(person) -> str:
    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


@functools.cache
def cited_authors(key: str) -> str:
    """The authors of a reference as the site's author-year citations name them: "Shazeer", "Milakov and
    Gimelshein", "Vaswani et al."."""
    entry = bibliography().get(key)
    if entry is None:
        raise RenderError(f"no entry {key!r} in book/references.bib")
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    named = [p for p in people if str(p) != "others"]
    if not named:
        raise RenderError(f"book/references.bib: {key} has no author")
    if len(named) >= 3 or len(named) < len(people):
        return f"{_surname(named[0])} et al."
    return " and ".join(_surname(p) for p in named)


def cited_year(key: str) -> str:
    cited_authors(key)
    return bibliography()[key].fields["year"]


@functools.cache
def _pages() -> dict[str, str]:
    """{docname such as "book/notation": its source file relative to the repository} for every page of the book."""
    return {str(p.relative_to(ROOT).with_suffix("")): p.relative_to(ROOT).as_posix()
            for p in sorted(BOOK.glob("*.md")) + sorted(BOOK.glob("*.ipynb"))}


def _markdown_of(source: str) -> str:
    """The Markdown of a page of the book: a .md file, or a notebook's markdown cells."""
    path = ROOT / source
    if path.suffix == ".ipynb":
        return "\n\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return path.read_text()


def _page_title(source: str) -> str:
    """The first heading of a page of the book."""
    heading = HEADING.search(_markdown_of(source))
    if heading is None:
        raise RenderError(f"{source} has no heading to name it by")
    return heading.group("title")


@functools.cache
def labels() -> dict[str, tuple[str, str]]:
    """{label: (its page's source, the title of the section it marks)} from every ``(label)=`` line in the book."""
    found = {}
    for source in _pages().values():
        lines = _markdown_of(source).splitlines()
        for index, line in enumerate(lines):
            target = TARGET.match(line)
            if target:
                heading = next((HEADING.match(rest) for rest in lines[index + 1:] if rest.strip()), None)
                found[target.group("label")] = (source, heading.group("title") if heading else target.group("label"))
    return found


@functools.cache
def glossary_entries(path=BOOK / "glossary.md") -> tuple[str, ...]:
    """The glossary's terms as book/glossary.md writes them, in order (scripts/translations.py's catalogue holds
    them under these names)."""
    text = path.read_text()
    block = re.search(r"^(`{3,}|:{3,})\{glossary\}[^\n]*\n(?P<body>.*?)^\1[ \t]*$", text, re.M | re.S)
    if block is None:
        raise RenderError(f"{path.name} has no glossary directive")
    return tuple(line.strip() for line in block.group("body").splitlines()
                 if line.strip() and not line[0].isspace() and not OPTION.match(line))


@functools.cache
def glossary_terms(path=BOOK / "glossary.md") -> dict[str, str]:
    """{term, lower-cased: its anchor on the site's glossary page (Sphinx's id, such as "term-K-V-head")}."""
    return {term.lower(): _make_id(f"term-{term}") for term in glossary_entries(path)}


TRANSLATED_TERMS = {}  # {a term's name in another edition, lower-cased: its anchor}, set by edition()


@contextlib.contextmanager
def edition(language: str, terms: dict[str, str]):
    """Render for another edition of the site (scripts/chinese_notebooks.py): every link to the site goes to that
    edition's pages (its folder ``language``/), and a {term} may name a term as that edition's glossary names it
    (``terms``: {name: the anchor of the English term it translates}; Sphinx keeps the English anchors)."""
    before = SITE_EDITION["prefix"]
    SITE_EDITION["prefix"] = f"{language}/"
    TRANSLATED_TERMS.update({name.lower(): anchor for name, anchor in terms.items()})
    try:
        yield
    finally:
        SITE_EDITION["prefix"] = before
        TRANSLATED_TERMS.clear()


# ----------------------------------------------------------------------------------------------------------------
# Roles


def _explicit(content: str) -> tuple[str | None, str]:
    """(the text, the target) of a role's content: "text <target>" or just "target"."""
    content = " ".join(content.split())
    match = EXPLICIT.match(content)
    return (match.group("text"), match.group("target")) if match else (None, content)


def citation_url(key: str) -> str:
    """The address of a reference's entry on the site's bibliography page: its id is _config.yml's
    ``bibtex_cite_id`` made into an id as sphinxcontrib-bibtex makes it (the page has one bibliography)."""
    template = config()["sphinx"]["config"]["bibtex_cite_id"]
    return f"{site_url('book/references.html')}#{make_id(template.format(key=key, bibliography_count=1))}"


def _cite(name: str, content: str) -> str:
    keys = [key.strip() for key in content.split(",") if key.strip()]
    if name == "cite:t":
        return ", ".join(f"[{cited_authors(k)} ({cited_year(k)})]({citation_url(k)})" for k in keys)
    return "(" + "; ".join(f"[{cited_authors(k)}, {cited_year(k)}]({citation_url(k)})" for k in keys) + ")"


def _page_target(target: str, page: str) -> str:
    """A {doc} target (a docname, relative to the page or from the root with a leading /) as a source file."""
    docname = target.lstrip("/") if target.startswith("/") else source_of(target, page)
    docname = re.sub(r"\.(md|ipynb)$", "", docname)
    if docname not in _pages():
        raise RenderError(f"{page}: {{doc}} names {target!r}, which is no page of the book")
    return _pages()[docname]


def render_role(name: str, content: str, page: str) -> str:
    """One MyST role as Markdown (``page``: the notebook's path relative to the repository, e.g. book/01_x.ipynb)."""
    if name in CITATIONS:
        return _cite(name, content)
    text, target = _explicit(content)
    if name == "term":
        anchor = glossary_terms().get(target.lower()) or TRANSLATED_TERMS.get(target.lower())
        if anchor is None:
            raise RenderError(f"{page}: {{term}} names {target!r}, which book/glossary.md does not define")
        return f"[{text or target}]({site_url('book/glossary.html')}#{anchor})"
    if name == "doc":
        source = _page_target(target, page)
        return f"[{text or _page_title(source)}]({site_page(source)})"
    if name == "ref":
        if target not in labels():
            raise RenderError(f"{page}: {{ref}} names the label {target!r}, which no (label)= line defines")
        source, title = labels()[target]
        return f"[{text or title}]({site_page(source)}#{target})"
    raise RenderError(f"{page}: the MyST role {{{name}}} has no Colab rendering (scripts/colab.py, render_role)")


# ----------------------------------------------------------------------------------------------------------------
# Links


def absolute_target(target: str, page: str, image: bool = False) -> str:
    """A link's target, made absolute: a page of the book -> its page on the site; a fragment -> the same page's
    section on the site; another file of the repository -> its page there (an image: its bytes)."""
    target = target.strip("<>")
    if ABSOLUTE.match(target):
        return target
    path, _, fragment = target.partition("#")
    source = source_of(path, page) if path else page
    if not (ROOT / source).exists():
        raise RenderError(f"{page}: the link {target!r} points at {source}, which the repository does not hold")
    if source.endswith((".md", ".ipynb")) and source.startswith("book/"):
        return site_page(source) + (f"#{fragment}" if fragment else "")
    url = raw_url(source) if image else blob_url(source)
    return url + (f"#{fragment}" if fragment else "")


def _inline(text: str, page: str) -> str:
    """Roles and links in a run of Markdown prose, scanned left to right; inline code is left as it is. A role in a
    link's text becomes its text alone ("[the {term}`head` page](notation.md)" -> "[the head page](...)"): Markdown
    has no link inside a link."""
    def plain_roles(link_text: str) -> str:
        def role(match):
            if match.group("name") is None:  # a code span
                return match.group(0)
            rendered = render_role(match.group("name"), match.group("content"), page)
            return LINK_TEXT_ROLE.sub(r"\g<text>", rendered)
        return ROLE_OR_CODE.sub(role, link_text)

    def piece(match):
        if match.group("code") is not None:  # a code span
            return match.group(0)
        if match.group("name") is not None:  # a role outside any link
            return render_role(match.group("name"), match.group("content"), page)
        target = absolute_target(match.group("target"), page, image=bool(match.group("bang")))
        return (f"{match.group('bang')}[{plain_roles(match.group('text'))}]"
                f"({target}{match.group('title') or ''})")

    return INLINE.sub(piece, text)


# ----------------------------------------------------------------------------------------------------------------
# Blocks: fenced code, directives, targets


def _options(body: list[str]) -> tuple[dict, list[str]]:
    """A directive's ``:key: value`` lines at the top of its body, and the rest."""
    options, index = {}, 0
    if body and body[0].strip() == "---":
        raise RenderError("a directive's options are written as :key: value lines here, not as a --- block")
    while index < len(body) and OPTION.match(body[index].strip()):
        option = OPTION.match(body[index].strip())
        options[option.group("key")] = option.group("value")
        index += 1
    return options, body[index:]


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}".rstrip() for line in text.splitlines())


def render_directive(name: str, argument: str, body: list[str], page: str) -> str:
    """One MyST directive as Markdown that Colab shows."""
    options, body = _options(body)
    if name in ADMONITIONS:
        content = render_markdown("\n".join(body).strip("\n"), page)
        title = argument if name in {"admonition", "dropdown", "sidebar"} and argument else name.capitalize()
        if name == "seealso":
            title = "See also"
        title = _inline(title, page)
        return _quoted(f"**{title}**" + (f"\n\n{content}" if content else ""))
    if name in {"figure", "image"}:
        alt = options.get("alt")
        if not alt:
            raise RenderError(f"{page}: a {{{name}}} of {argument!r} has no :alt: text")
        image = f"![{alt}]({absolute_target(argument, page, image=True)})"
        caption = render_markdown("\n".join(body).strip("\n"), page) if name == "figure" else ""
        return image + (f"\n\n*{caption}*" if caption else "")
    raise RenderError(f"{page}: the MyST directive {{{name}}} has no Colab rendering "
                      "(scripts/colab.py, render_directive)")


def _closing(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def render_markdown(text: str, page: str) -> str:
    """A markdown cell's MyST as plain Markdown (``page``: the notebook's path relative to the repository)."""
    lines, out, prose = text.split("\n"), [], []

    def flush():
        if prose:
            out.append(_inline("\n".join(prose), page))
            prose.clear()

    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if TARGET.match(line.strip()):
            index += 1
            if index < len(lines) and not lines[index].strip() and (not prose or not prose[-1].strip()):
                index += 1  # the blank line after a dropped target goes too
            continue
        if fence is None or (fence.group("fence")[0] == ":" and not fence.group("info").startswith("{")):
            prose.append(line)
            index += 1
            continue
        flush()
        mark = fence.group("fence")
        end = next((i for i in range(index + 1, len(lines)) if _closing(lines[i], mark)), len(lines))
        directive = DIRECTIVE_INFO.match(fence.group("info"))
        if directive:
            out.append(render_directive(directive.group("name"), directive.group("argument").strip(),
                                        lines[index + 1:end], page))
        else:  # fenced code: verbatim
            out.append("\n".join(lines[index:end + 1]))
        index = end + 1
    flush()
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------
# Notebooks


def colab_version(nb, chapter: pathlib.Path):
    """The notebook ``nb`` (the chapter at ``chapter``, or its student version) as Colab should show it: a new
    notebook, with its markdown rendered and its claim cells as titled forms; ``nb`` is not changed."""
    nb = copy.deepcopy(nb)
    page = (BOOK / chapter.name).relative_to(ROOT).as_posix()
    setup = first_code_cell(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            try:
                cell.source = render_markdown(cell.source, page)
            except RenderError as error:
                raise RenderError(f"{chapter.name}, cell {cell.get('id')}: {error}") from None
        elif cell is setup or is_claim_cell(cell):
            cell.source = f"{SETUP_TITLE if cell is setup else CLAIMS_TITLE}\n{cell.source}"
            cell.metadata.update(FORM)
    return nb


def render(chapter: pathlib.Path) -> str:
    """colab/NN_name.ipynb's text for the chapter book/NN_name.ipynb."""
    nb = with_version_blocks(nbformat.read(chapter, as_version=4), chapter.name, SOLVED)
    return notebook_text(colab_version(nb, chapter))


def colab_path(chapter: pathlib.Path) -> pathlib.Path:
    return COLAB / chapter.name


def main(argv) -> int:
    return write_chapter_copies(argv, COLAB, render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
