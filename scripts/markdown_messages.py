"""A Markdown cell's gettext messages, as Sphinx reads them, and the cell with each message translated.

Sphinx (through MyST) makes one message of each paragraph, heading, list item's paragraph and table cell: its
Markdown source, lines joined by spaces. ``messages`` finds the same ones with MyST's own Markdown parser, and
``translated`` puts each message's translation in place of its source lines, keeping what surrounds it (a list
marker, a heading's #, a quote's >, a table's pipes, the lines of a directive's fence). Math blocks, code blocks and
directive options stay as they are; the text inside an admonition or a figure is translated like the rest.
"""
import functools
import re

DIRECTIVE = re.compile(r"^\{(?P<name>[\w:-]+)\}")
TEXT_DIRECTIVES = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error", "seealso",
                   "admonition", "dropdown", "figure"}  # directives whose body is Markdown prose


@functools.cache
def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions={"amsmath", "dollarmath", "colon_fence"}), RendererHTML)


def message_of(content: str) -> str:
    """A message as Sphinx writes it: the source's lines joined by spaces."""
    return content.replace("\n", " ").strip()


def _inlines(text: str):
    """(token, nested text) pairs: the inline tokens of ``text`` with their line ranges, and the bodies of the prose
    directives, to be handled recursively."""
    for token in _parser().parse(text):
        if token.type == "inline" and token.map is not None and token.content.strip():
            yield token, None
        elif token.type in ("fence", "colon_fence") and token.map is not None:
            directive = DIRECTIVE.match(token.info.strip())
            if directive and directive["name"] in TEXT_DIRECTIVES:
                yield token, token.content


def _body(content: str) -> str:
    """A directive's body without its leading :option: lines."""
    lines = content.splitlines()
    while lines and re.match(r"^:[\w-]+:", lines[0]):
        lines.pop(0)
    return "\n".join(lines)


def messages(text: str) -> list[str]:
    """The messages of a Markdown text, in order."""
    found = []
    for token, nested in _inlines(text):
        if nested is None:
            found.append(message_of(token.content))
        else:
            argument = DIRECTIVE.sub("", token.info.strip()).strip()
            if argument and DIRECTIVE.match(token.info.strip())["name"] in ("admonition", "dropdown"):
                found.append(argument)
            found += messages(_body(nested))
    return found


def translated(text: str, translate) -> str:
    """``text`` with each message replaced by ``translate(message)`` (which returns the message itself where it has
    no translation)."""
    lines = text.split("\n")
    edits = []  # (first line, last line + 1, new lines)
    for token, nested in _inlines(text):
        start, end = token.map
        if nested is not None:
            info = token.info.strip()
            name = DIRECTIVE.match(info)["name"]
            argument = DIRECTIVE.sub("", info).strip()
            opening = lines[start]
            if argument and name in ("admonition", "dropdown"):
                opening = opening.replace(argument, translate(argument), 1)
            body_lines = lines[start + 1:end - 1]
            options = 0
            while options < len(body_lines) and re.match(r"^\s*:[\w-]+:", body_lines[options]):
                options += 1
            body = "\n".join(body_lines[options:])
            edits.append((start, end, [opening, *body_lines[:options], *translated(body, translate).split("\n"),
                                       lines[end - 1]]))
            continue
        message = message_of(token.content)
        new = translate(message)
        if new == message:
            continue
        if token.map[1] - token.map[0] == 1 and lines[start].count("|") >= 2:  # a table row: one cell of it
            edits.append((start, end, None, token.content.strip(), new))
            continue
        first = token.content.split("\n")[0]
        at = lines[start].find(first)
        if at < 0:
            raise ValueError(f"message not found in its lines: {message[:80]!r}")
        edits.append((start, end, [lines[start][:at] + new]))
    # apply from the end, so that line numbers stay right; table cells replace within their line
    for edit in sorted(edits, key=lambda e: (e[0], 1 if len(e) == 5 else 0), reverse=True):
        if len(edit) == 5:
            start, _, _, old, new = edit
            lines[start] = _replace_cell(lines[start], old, new)
        else:
            start, end, new_lines = edit
            lines[start:end] = new_lines
    return "\n".join(lines)


def _replace_cell(line: str, old: str, new: str) -> str:
    """A table row with the cell whose text is ``old`` given the text ``new``."""
    cells = line.split("|")
    for i, cell in enumerate(cells):
        if cell.strip() == old:
            cells[i] = cell.replace(old, new, 1)
            return "|".join(cells)
    raise ValueError(f"table cell not found: {old!r} in {line!r}")
