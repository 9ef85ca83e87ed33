"""Every chapter's header (time estimate, Colab links, notation link) and Exercises link are generated, up to date."""
import re
import shutil

import nbformat
import pytest
from conftest import chapter_paths

import chapter_header
from book import colab_url

MarkdownIt = pytest.importorskip("markdown_it").MarkdownIt


def intro(nb):
    return next(cell for cell in nb.cells if cell.cell_type == "markdown").source


def exercises_cell(nb):
    return nb.cells[chapter_header.exercises_index(nb)].source


@pytest.fixture(params=chapter_paths(), ids=lambda path: path.name[:2])
def chapter(request):
    return request.param, nbformat.read(request.param, as_version=4)


def test_every_header_is_up_to_date(chapter):
    path, nb = chapter
    assert chapter_header.updated(path, nb) == nb, f"{path.name}: run `make chapter-headers`"


def test_check_mode_passes_on_the_book():
    assert chapter_header.main(["--check"]) == 0, "chapter headers are out of date: run `make chapter-headers`"


def test_every_chapter_links_its_student_version_in_its_intro_and_its_exercises(chapter):
    path, nb = chapter
    student = colab_url(f"student/{path.name}")
    assert f"[Open the exercises in Colab]({student})" in intro(nb)
    assert f"[Open with solutions]({colab_url(f'colab/{path.name}')})" in intro(nb)  # the Colab rendering
    assert f"[Open the exercises in Colab]({student})" in exercises_cell(nb)


# What the generated preamble says about how the exercises work, which no chapter repeats in its own words.
PREAMBLE_WORDS = ("NotImplementedError", "checks.hint", "behind a toggle", "student version")


def test_every_exercises_section_opens_with_the_one_generated_preamble(chapter):
    """The solved chapter's preamble says what an exercise and its check do, names `checks.hint`, and links the
    student version; the chapter's own text after it (the section's markdown cells) repeats none of it."""
    path, nb = chapter
    split = chapter_header.exercises_index(nb)
    block = chapter_header.exercises_block(path.name)
    assert block in nb.cells[split].source
    for words in ("stub that raises `NotImplementedError`", "check cell after it", 'checks.hint("name")',
                  f"[Open the exercises in Colab]({colab_url(f'student/{path.name}')})"):
        assert words in block, f"the exercises' preamble no longer says {words!r}"
    own = [chapter_header.block_pattern(chapter_header.EXERCISES_LINK).sub(" ", cell.source)
           for cell in nb.cells[split:] if cell.cell_type == "markdown"]
    repeated = [w for w in PREAMBLE_WORDS if any(w in text for text in own)]
    assert repeated == [], (f"{path.name}: its Exercises section says {repeated} in its own words; the generated "
                            "preamble (scripts/chapter_header.py, exercises_block) says it for every chapter")


@pytest.mark.parametrize("version", [chapter_header.SITE, chapter_header.STUDENT, chapter_header.SOLVED])
def test_each_version_says_once_what_the_student_version_holds(chapter, version):
    """The header names the two versions; what the student version holds (a stub in place of each model solution)
    is said once, in the exercises' preamble, and the preamble says a check may make a function fail, with PyTorch's
    among them."""
    path, nb = chapter
    meta = nb.metadata["attention_book"]
    text = (chapter_header.header_block(path.name, meta, version) + "\n"
            + chapter_header.exercises_block(path.name, version))
    assert text.count("replaced by a stub") == 1, f"{path.name} ({version}): the stubs are explained more than once"
    assert "the package or PyTorch already has the function" in text
    assert "prints a line that starts with ✓" in text


def test_every_chapter_links_the_notation_page(chapter):
    path, nb = chapter
    assert "](notation.md)" in intro(nb), f"{path.name}: its intro does not link notation.md"


def test_time_line_and_metadata_agree(chapter):
    path, nb = chapter
    meta = nb.metadata["attention_book"]
    read, exercises = meta["time_read_minutes"], meta["time_exercises_minutes"]
    assert meta["time_minutes"] == read + exercises
    assert read % 5 == 0 and exercises % 5 == 0 and read >= 5 and exercises >= 5
    assert (f"**Time:** about {read} minutes to read and run, and {exercises} minutes for the exercises."
            in intro(nb))
    assert intro(nb).count("**Time:**") == 1, f"{path.name}: a hand-written Time line is left beside the header"


def test_needs_chapters_name_earlier_chapters(chapter):
    path, nb = chapter
    meta = nb.metadata["attention_book"]
    assert meta["needs_chapters"] == chapter_header.NEEDS[meta["chapter"]]
    assert all(1 <= needed < meta["chapter"] for needed in meta["needs_chapters"])


def test_header_sits_under_the_hand_written_prerequisites(chapter):
    path, nb = chapter
    text = intro(nb)
    assert "**Prerequisites:**" in text, f"{path.name}: the intro has lost its Prerequisites paragraph"
    assert text.index("**Prerequisites:**") < text.index(chapter_header.HEADER[0])


def test_markers_render_as_hidden_comments(chapter):
    """CommonMark (markdown-it, the parser of MyST and JupyterLab) reads each marker as an HTML comment block of its
    own, so it is hidden in Jupyter, Colab and on the site, and the links between the markers are real links."""
    path, nb = chapter
    md = MarkdownIt("commonmark")
    for source, markers in ((intro(nb), chapter_header.HEADER), (exercises_cell(nb), chapter_header.EXERCISES_LINK)):
        tokens = md.parse(source)
        blocks = [t.content.strip() for t in tokens if t.type == "html_block"]
        assert list(markers) == [b for b in blocks if b in markers], f"{path.name}: {markers[0]} is not a block"
        html = md.render(source)
        assert f'<a href="{colab_url(f"student/{path.name}")}">Open the exercises in Colab</a>' in html
    assert '<a href="notation.md">notation</a>' in md.render(intro(nb))


def test_check_fails_on_a_stale_header_and_the_script_fixes_it(tmp_path, capsys):
    for path in chapter_paths()[:2]:
        shutil.copy(path, tmp_path / path.name)
    assert chapter_header.main(["--book", str(tmp_path)]) == 0  # as written now, whatever the book holds
    assert chapter_header.main(["--check", "--book", str(tmp_path)]) == 0

    first = sorted(tmp_path.glob("*.ipynb"))[0]
    nb = nbformat.read(first, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown")
    cell.source = re.sub(r"about \d+ minutes to read", "about 1 minutes to read", cell.source)
    nbformat.write(nb, first)
    capsys.readouterr()
    assert chapter_header.main(["--check", "--book", str(tmp_path)]) == 1
    assert first.name in capsys.readouterr().out
    assert chapter_header.main(["--book", str(tmp_path)]) == 0
    assert chapter_header.main(["--check", "--book", str(tmp_path)]) == 0

    # A chapter that grows: its estimate follows, so the header is stale until the script runs again.
    nb = nbformat.read(first, as_version=4)
    before = nb.metadata["attention_book"]["time_read_minutes"]
    split = chapter_header.exercises_index(nb)
    nb.cells.insert(split, nbformat.v4.new_markdown_cell("word " * 3000))
    nbformat.write(nb, first)
    assert chapter_header.main(["--check", "--book", str(tmp_path)]) == 1
    assert chapter_header.main(["--book", str(tmp_path)]) == 0
    after = nbformat.read(first, as_version=4).metadata["attention_book"]["time_read_minutes"]
    assert after == before + 20  # 3,000 words at 150 a minute


def test_a_hand_written_time_paragraph_is_replaced_once():
    source = ("# Title\n\nText.\n\n**Prerequisites:** chapter 1.\n\n**Time:** about 45 minutes to read and run,\n"
              "and 30 minutes for the exercises.\n\nThe first code cell installs the package.\n")
    block = chapter_header.header_block("01_x.ipynb", {"time_read_minutes": 60, "time_exercises_minutes": 25})
    new = chapter_header.with_header(source, block)
    assert new.count("**Time:**") == 1 and "45 minutes" not in new
    assert new.index("**Prerequisites:**") < new.index(block) < new.index("The first code cell")
    assert chapter_header.with_header(new, block) == new
    # With no Time paragraph, the header goes right after the prerequisites.
    bare = "# Title\n\n**Prerequisites:** none.\n\nMore text.\n"
    new = chapter_header.with_header(bare, block)
    assert new.index("**Prerequisites:**") < new.index(block) < new.index("More text.")
    assert chapter_header.with_header(new, block) == new


def test_each_version_links_the_other_colab_notebook_and_never_itself():
    meta = {"time_read_minutes": 60, "time_exercises_minutes": 25}
    student, solved = colab_url("student/01_x.ipynb"), colab_url("colab/01_x.ipynb")
    links = {}
    for version in (chapter_header.SITE, chapter_header.STUDENT, chapter_header.SOLVED):
        text = chapter_header.header_block("01_x.ipynb", meta, version) + chapter_header.exercises_block("01_x.ipynb",
                                                                                                         version)
        links[version] = (text.count(student), text.count(solved))
    assert links == {"site": (2, 1), "student": (0, 2), "solved": (2, 0)}
    assert "this is the solved version" in chapter_header.header_block("01_x.ipynb", meta, chapter_header.SOLVED)
    with pytest.raises(ValueError, match="version must be 'site', 'student' or 'solved', not 'colab'"):
        chapter_header.header_block("01_x.ipynb", meta, "colab")


def test_the_packages_repository_address_is_written_from_the_config():
    source = chapter_header.CLAIMS.read_text()
    fork = chapter_header.with_repository_url(source, "https://github.com/someone/fork")
    assert 'REPOSITORY_URL = "https://github.com/someone/fork"\n' in fork
    assert fork.replace("someone/fork", "x") == chapter_header.with_repository_url(source, "https://github.com/x")
    with pytest.raises(SystemExit, match="must hold one line REPOSITORY_URL"):
        chapter_header.with_repository_url("x = 1\n", "https://github.com/x")


def test_exercises_link_goes_under_the_heading_once():
    source = "## Exercises\n\nEach exercise asks for one function.\n\n### Exercise 1: x\n"
    block = chapter_header.exercises_block("01_x.ipynb")
    new = chapter_header.with_exercises_link(source, block)
    assert new.startswith(f"## Exercises\n\n{block}\n\nEach exercise")
    assert chapter_header.with_exercises_link(new, block) == new


def test_estimates_are_calibrated_against_a_first_time_reader():
    """The constants give a first-timer's reading speed: 150 words a minute is 20 minutes for 3,000 words, and a
    one-line exercise still takes the floor."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("word " * 3000),
                nbformat.v4.new_code_cell("\n".join(["x = 1"] * 12)),  # 12 lines: 2 min + half a minute to run
                nbformat.v4.new_markdown_cell("## Exercises\n\n" + "word " * 148),
                nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")]
    read, exercises = chapter_header.raw_minutes(nb)
    assert read == pytest.approx(20 + 2 + 0.5)
    assert exercises == pytest.approx(150 / 150 + chapter_header.EXERCISE_FLOOR_MINUTES)
    assert chapter_header.times(nb) == {"time_read_minutes": 25, "time_exercises_minutes": 10, "time_minutes": 35}
