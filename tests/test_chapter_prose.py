"""The chapters' prose reads right wherever it is read: on the site, and in the notebooks a learner opens (issue 29).

- A claim that does not hold prints ✗ with what was measured and what to do, and the notebook runs on
  (attention_book.experiments.claims): no chapter or page of the book says that the cell stops. Only the book's
  tests make claims strict, and book/checking.md says so.
- The same Markdown is a page of the site and a cell of a notebook (the chapter, its Colab version, its student
  version), so a chapter does not point at "this page": it says "the chapter" or "the run stored with the chapter".
- A chapter's first cell is the setup cell, which installs the package: the imports come after it, "at the top of
  the chapter", not "in the first cell".
- An exercise says a refusal one way, "Do not call X: the check makes it fail", the words of the generated preamble
  (scripts/chapter_header.py), not "the check refuses X" or "the check fails if you do".
"""
import re

import nbformat
import pytest
from conftest import ROOT, chapter_paths

CHAPTERS = [pytest.param(path, id=path.name) for path in chapter_paths()]
PAGES = [pytest.param(path, id=path.name) for path in sorted((ROOT / "book").glob("*.md"))]
ABOUT_A_CLAIM = re.compile(r"claim|does not hold|did not hold|after a ✓|✓ lines?", re.I)  # not an exercise's check
STOPS = re.compile(r"\bcell (?:stops|would stop)\b|\bstops? (?:and show|with what)|\bClaimFailed\b")
FIRST_CELL_IMPORTS = re.compile(r"\bimported in the first cell\b|\bthe first cell imported\b|"
                                r"\bfirst cell imports\b", re.I)
OTHER_REFUSAL = re.compile(r"\bthe check (?:refuses|fails if you do)\b|\brefuse to run\b", re.I)
THIS_PAGE = re.compile(r"\bthis page\b|\bthe page (shows|that built)|\bbuilt (this|the) page\b|"
                       r"\bstatic copy of the page\b", re.I)


def sentences(markdown: str) -> list[str]:
    """The sentences of a Markdown text, each on one line."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(markdown.split())) if s.strip()]


def says_a_claim_stops(markdown: str) -> list[str]:
    """The sentences that say a failing claim stops its cell, except those about the book's own (strict) tests."""
    return [s for s in sentences(markdown)
            if ABOUT_A_CLAIM.search(s) and STOPS.search(s) and not re.search(r"\btests?\b", s)]


def markdown_cells(path):
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]


def test_the_sentence_finders_tell_a_stop_from_a_guide():
    assert says_a_claim_stops("When it does not hold, the cell stops and shows what was measured.")
    assert says_a_claim_stops("If one did not\nhold, the cell would stop and show what it measured.")
    assert not says_a_claim_stops("If a claim does not hold, the cell prints it after a ✗, and the notebook runs on.")
    assert not says_a_claim_stops("The tests make claims strict: there a claim that does not hold stops the run.")
    assert says_a_claim_stops("It prints the sentence after a ✓, or stops with what was measured.")
    assert not says_a_claim_stops("When your function passes, the check prints a line that starts with ✓; when it "
                                  "fails, it stops with an error.")
    assert not says_a_claim_stops("The hidden claims check what the prose says of it (it stops with the end-of-turn "
                                  "token).")
    assert THIS_PAGE.search("on the machine that built this page")
    assert not THIS_PAGE.search("the letters of the [notation](notation.md) page")
    assert FIRST_CELL_IMPORTS.search("instead of the class imported in the first cell")
    assert not FIRST_CELL_IMPORTS.search("instead of the class imported at the top of the chapter")
    assert OTHER_REFUSAL.search("Do not call `sinusoidal_positions`: the check fails if you do.")
    assert OTHER_REFUSAL.search("The check refuses the package's `mean_pool`.")
    assert not OTHER_REFUSAL.search("Do not call the package's `mean_pool`: the check makes it fail.")


@pytest.mark.parametrize("path", CHAPTERS)
def test_no_chapter_says_a_failed_claim_stops_the_notebook(path):
    found = [s for text in markdown_cells(path) for s in says_a_claim_stops(text)]
    assert not found, f"{path.name} says that a failed claim stops its cell; it prints ✗ and runs on: {found[:2]}"


@pytest.mark.parametrize("path", PAGES)
def test_no_page_says_a_failed_claim_stops_the_notebook(path):
    found = says_a_claim_stops(path.read_text())
    assert not found, f"{path.name} says that a failed claim stops its cell; it prints ✗ and runs on: {found[:2]}"


@pytest.mark.parametrize("path", CHAPTERS)
def test_no_chapter_points_at_this_page(path):
    found = [m.group(0) for text in markdown_cells(path) for m in THIS_PAGE.finditer(text)]
    assert not found, (f"{path.name} says {found[:3]}: its Markdown is also a notebook's cell; say 'the chapter' or "
                       "'the run stored with the chapter'")


@pytest.mark.parametrize("path", CHAPTERS)
def test_no_chapter_says_its_first_cell_imports(path):
    found = [m.group(0) for text in markdown_cells(path) for m in FIRST_CELL_IMPORTS.finditer(" ".join(text.split()))]
    assert not found, (f"{path.name} says {found[:2]}: its first cell is the setup cell, which installs the package; "
                       "say 'imported at the top of the chapter'")


@pytest.mark.parametrize("path", CHAPTERS)
def test_every_exercise_says_a_refusal_the_preambles_way(path):
    """Under the Exercises heading (the generated preamble left out), a function the check refuses is named as
    "Do not call X: the check makes it fail", as the preamble says it."""
    from chapter_header import EXERCISES_LINK, block_pattern, exercises_index

    nb = nbformat.read(path, as_version=4)
    own = [" ".join(block_pattern(EXERCISES_LINK).sub(" ", cell.source).split())
           for cell in nb.cells[exercises_index(nb):] if cell.cell_type == "markdown"]
    found = [m.group(0) for text in own for m in OTHER_REFUSAL.finditer(text)]
    assert not found, f"{path.name}'s exercises say {found[:2]}: write 'Do not call X: the check makes it fail'"
