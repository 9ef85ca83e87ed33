"""The committed student versions (student/NN_*.ipynb) are exactly what scripts/student.py writes.

They are rendered for Colab (scripts/colab.py): what this file says of a student version's code holds as well after
rendering, which changes only markdown and the claim cells' first line (tests/test_colab_notebooks.py).

That the student versions run up to their first exercise, that every check fails on its stub with a
helpful message and passes with the solution put back: tests/test_exercises.py (in-process) and
tests/test_colab.py (in a fresh kernel, as in Colab).
"""
import ast

import nbformat
import pytest
from conftest import ROOT, chapter_paths

from exercises import has_solution
from colab import SETUP_TITLE
from setup_cell import first_code_cell
from student import CLEARED, NOTE_ID, RAISES, SOLUTION_ONLY, USES_EXERCISES, student_path


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_student_version_holds_no_solution(path):
    chapter = nbformat.read(path, as_version=4)
    student = nbformat.read(student_path(path), as_version=4)
    for cell in student.cells:
        assert not has_solution(cell.source)
        assert SOLUTION_ONLY not in cell.metadata.get("tags", [])
        if cell.cell_type == "code" and CLEARED & set(cell.metadata.get("tags", [])):
            assert cell.outputs == [], f"student/{path.name}: outputs left in an exercise cell"
    stubbed = [c for c in chapter.cells if has_solution(c.source)]
    by_id = {c.id: c for c in student.cells}
    for cell in stubbed:
        assert "raise NotImplementedError(" in by_id[cell.id].source
    setup = first_code_cell(chapter)
    assert by_id[setup.id].source == f"{SETUP_TITLE}\n{setup.source}"  # kept (as a Colab form), so Colab can open
    # the notebook alone


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_chapters_follow_nbgrader_markers(path):
    """nbgrader generate_assignment (with nbgrader_config.py) treats any line that contains BEGIN SOLUTION
    or END SOLUTION as a marker, in any cell: such lines must be real, paired markers in code cells."""
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        markers = [line.strip() for line in cell.source.splitlines()
                   if "BEGIN SOLUTION" in line or "END SOLUTION" in line]
        if not markers:
            continue
        assert cell.cell_type == "code", (
            f"{path.name} cell {index}: prose names a solution marker; nbgrader would cut it")
        assert markers == ["### BEGIN SOLUTION", "### END SOLUTION"] * (len(markers) // 2), (
            f"{path.name} cell {index}: unpaired or malformed solution markers {markers}")


def names(source):
    """(names a cell's code reads, names it binds) at its top level and below."""
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
    return read, bound


def cells_using_exercises(nb):
    """The code cells, outside the exercises, that read what an exercise cell defines, directly or through a name
    that such a cell binds."""
    exercise_tags = {"exercise", "exercise-check"}
    defined, using = set(), []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        read, bound = names(cell.source)
        if "exercise" in cell.metadata.get("tags", []):
            defined |= bound
        elif not exercise_tags & set(cell.metadata.get("tags", [])) and read & defined:
            using.append(cell)
            defined |= bound
    return using


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_cells_that_run_the_exercises_show_no_solved_output(path):
    """A cell that runs the learner's functions outside the exercises (chapter 16's section 3) is tagged
    uses-exercises; in the student version it has no output (the solved chapter's would show what the learner has
    not written yet) and may raise (it does, as long as an exercise is a stub)."""
    chapter = nbformat.read(path, as_version=4)
    using = cells_using_exercises(chapter)
    untagged = [c.source.splitlines()[0] for c in using if USES_EXERCISES not in c.metadata.get("tags", [])]
    assert untagged == [], f"{path.name}: cells that use the exercises' functions, not tagged {USES_EXERCISES}"
    by_id = {c.id: c for c in nbformat.read(student_path(path), as_version=4).cells}
    for cell in chapter.cells:
        if USES_EXERCISES in cell.metadata.get("tags", []):
            copy = by_id[cell.id]
            assert copy.outputs == [] and copy.execution_count is None, f"student/{path.name}: outputs left"
            assert RAISES in copy.metadata["tags"], f"student/{path.name}: {USES_EXERCISES} without {RAISES}"


def test_the_capstone_tags_the_cells_that_run_the_learners_decoder():
    chapter = nbformat.read(ROOT / "book" / "16_your_decoder.ipynb", as_version=4)
    tagged = [c for c in chapter.cells if USES_EXERCISES in c.metadata.get("tags", [])]
    assert any("same_tokens_as_package(greedy_generate" in c.source for c in tagged)
    assert len(tagged) == len(cells_using_exercises(chapter)) >= 3


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_a_student_version_links_the_solved_chapter_not_itself_and_names_the_hint(path):
    from book import colab_url

    text = "\n".join(c.source for c in nbformat.read(student_path(path), as_version=4).cells
                     if c.cell_type == "markdown")
    assert colab_url(f"student/{path.name}") not in text, f"student/{path.name} links to itself"
    solved = colab_url(f"colab/{path.name}")
    assert 1 <= text.count(solved) <= 2, f"student/{path.name} links its solved chapter {text.count(solved)} times"
    assert "this is the student version" in text and 'checks.hint("name")' in text


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_a_student_versions_note_says_to_save_a_copy_and_where_the_exercises_are(path):
    """The note after the title names the Exercises section (not "the end": chapter 16 goes on after it) and says
    that Colab keeps the learner's work only in their own copy."""
    [note] = [c for c in nbformat.read(student_path(path), as_version=4).cells if c.get("id") == NOTE_ID]
    assert 'The exercises (the "Exercises" section) are yours to write' in note.source
    assert "File > Save a copy in Drive" in note.source
    assert "at the end" not in note.source


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_a_student_versions_exercises_section_says_how_to_work_and_links_the_solved_chapter(path):
    """Under its Exercises heading the student version says what it holds (stubs that raise, a check after each,
    the hint) and links the solved chapter, not itself; nothing there speaks of a toggle, which only the site has."""
    from book import colab_url
    from chapter_header import EXERCISES_LINK, block_pattern, exercises_index

    student = nbformat.read(student_path(path), as_version=4)
    section = student.cells[exercises_index(student)].source
    block = block_pattern(EXERCISES_LINK).search(section).group()
    for words in ("This is the student version", "stub that raises `NotImplementedError`", "check cell after it",
                  'checks.hint("name")', f"]({colab_url(f'colab/{path.name}')})",
                  "Run the chapter's cells above the exercises first", "Runtime > Run before",
                  '"Run all" stops at the check of the first exercise you have not written yet',
                  "define any helper function in the same cell as the function the exercise asks for"):
        assert words in block, f"student/{path.name}: its exercises' preamble does not say {words!r}"
    assert colab_url(f"student/{path.name}") not in section, f"student/{path.name}: its exercises link to themselves"
    assert "toggle" not in section, f"student/{path.name}: its exercises speak of the site's toggles"
