"""The instructors' suggested sequences respect the prerequisites: every chapter a plan schedules comes after every
chapter it needs (its metadata ``needs_chapters``), in an earlier session or earlier in the same session."""
import re

import nbformat
import pytest
from conftest import ROOT, chapter_paths

GUIDE = ROOT / "book" / "instructors.md"
RANGE = re.compile(r"(\d+)\s*(?:to|-|–)\s*(\d+)")


def needs() -> dict[int, list[int]]:
    table = {}
    for path in chapter_paths():
        meta = nbformat.read(path, as_version=4).metadata["attention_book"]
        table[meta["chapter"]] = meta["needs_chapters"]
    return table


def plans(text: str) -> dict[str, list[list[int]]]:
    """Each suggested sequence in the guide: its name (the bold words before its table) and its sessions, each the
    list of chapter numbers of its "Chapters" column, in the order written."""
    section = text.split("## Suggested sequences", 1)[1].split("\n## ", 1)[0]
    found = {}
    for name, table in re.findall(r"^\*\*(.+?)\*\*.*?\n\n((?:\|[^\n]*\|\n?)+)", section, re.M | re.S):
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]
        header, body = rows[0], rows[2:]
        column = header.index("Chapters")
        found[name] = [[int(n) for n in re.findall(r"\d+", row[column])] for row in body]
    return found


def mentioned(text: str) -> set[int]:
    """The chapter numbers a prerequisites text names, with ranges ("chapters 1 to 3", "Chapters 1-3") expanded."""
    numbers = {int(n) for n in re.findall(r"\d+", text)}
    for start, end in RANGE.findall(text):
        numbers |= set(range(int(start), int(end) + 1))
    return numbers


def test_the_guide_has_the_three_plans():
    found = plans(GUIDE.read_text())
    assert set(found) == {"One week", "Two weeks", "Four weeks"}, sorted(found)
    chapters = set(needs())
    for name, sessions in found.items():
        scheduled = [n for session in sessions for n in session]
        assert scheduled, f"{name}: no chapters parsed"
        assert set(scheduled) <= chapters, f"{name}: schedules a chapter that does not exist: {scheduled}"
        assert len(scheduled) == len(set(scheduled)), f"{name}: schedules a chapter twice: {scheduled}"


@pytest.mark.parametrize("name", ["One week", "Two weeks", "Four weeks"])
def test_every_plan_respects_the_prerequisites(name):
    sessions = plans(GUIDE.read_text())[name]
    order = [n for session in sessions for n in session]  # sessions in order, chapters in order within each
    problems = []
    for position, chapter in enumerate(order):
        for needed in needs()[chapter]:
            if needed not in order:
                problems.append(f"chapter {chapter} needs chapter {needed}, which the plan leaves out")
            elif order.index(needed) > position:
                problems.append(f"chapter {chapter} needs chapter {needed}, which the plan puts after it")
    assert not problems, f"{name}: " + "; ".join(problems)


def test_two_and_four_week_plans_cover_every_chapter():
    found = plans(GUIDE.read_text())
    for name in ("Two weeks", "Four weeks"):
        assert sorted(n for session in found[name] for n in session) == sorted(needs()), name


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda path: path.name[:2])
def test_needs_chapters_are_named_in_the_prerequisites(path):
    """What a chapter needs is said to its reader: in its Prerequisites paragraph and in its metadata."""
    nb = nbformat.read(path, as_version=4)
    meta = nb.metadata["attention_book"]
    intro = next(cell for cell in nb.cells if cell.cell_type == "markdown").source
    paragraph = re.search(r"^\*\*Prerequisites:\*\*.*?(?=\n[ \t]*\n|\Z)", intro, re.M | re.S)
    assert paragraph, f"{path.name}: no Prerequisites paragraph in the intro"
    for text, where in ((paragraph.group(0), "its Prerequisites paragraph"),
                        ("; ".join(meta["prerequisites"]), "its metadata prerequisites")):
        missing = set(meta["needs_chapters"]) - mentioned(text)
        assert not missing, f"{path.name}: needs chapters {sorted(missing)}, which {where} does not name"


def test_plan_parser_keeps_the_order_within_a_session():
    text = ("## Suggested sequences\n\n**One week** (text):\n\n| Session | Chapters | Focus |\n|---|---|---|\n"
            "| 1 | 1 | a |\n| 2 | 3, then 7 and 6 | b |\n")
    assert plans(text) == {"One week": [[1], [3, 7, 6]]}
