"""Write the generated parts of every chapter: its time estimate, its Colab links and the chapters it needs.

    python scripts/chapter_header.py              # rewrite book/NN_*.ipynb   (make chapter-headers)
    python scripts/chapter_header.py --check      # exit 1 and list the chapters that are out of date
    python scripts/chapter_header.py --book DIR   # the same on the chapters in DIR instead of book/

In each chapter it writes, each time between its own pair of HTML comment markers (Jupyter, Colab and the
site hide the markers):
- in the first markdown cell, in place of the hand-written "**Time:**" paragraph, the **header**: the time
  line, the two Colab links (the student version, student/NN_name.ipynb, and the solved chapter as written for
  Colab, colab/NN_name.ipynb: scripts/student.py and scripts/colab.py) with one sentence saying which is which,
  and a link to the notation page;
- in the "## Exercises" cell, under its heading, the exercises' preamble, one text for every chapter:
  what an exercise and its check do, `checks.hint`, and the link to the student version.
Each Colab notebook says both blocks its own way (``with_version_blocks``): the student version says how to run
its stubs and links the solved chapter, the solved one (colab/) says that it is solved and links the student
version; neither links itself.
The "**Prerequisites:**" paragraph above the header stays hand-written. It also writes _config.yml's repository.url
into the package's ``attention_book.experiments.claims.REPOSITORY_URL`` (where a failed claim's ✗ lines send a
report), which the package cannot read from _config.yml in Colab.

It also sets, in the notebook metadata ``attention_book``:
- ``time_read_minutes``: the chapter's length up to its Exercises section, read at READING_WORDS_PER_MINUTE
  words of prose a minute, plus, for every code cell but the setup cell, SECONDS_PER_CODE_LINE for each
  non-blank line and SECONDS_PER_CODE_CELL to run it and read what it prints, plus MINUTES_PER_FIGURE for
  each figure it draws; rounded to 5 minutes;
- ``time_exercises_minutes``: the Exercises section's prose at the same rate, plus, for each exercise (a
  code cell with a model solution), EXERCISE_BASE_MINUTES and EXERCISE_MINUTES_PER_LINE for each non-blank
  line of its solution, at least EXERCISE_FLOOR_MINUTES; rounded to 5 minutes;
- ``time_minutes``: their sum (the course map's "Time" column);
- ``needs_chapters``: the chapters a reader must have read first, from NEEDS below. The instructors'
  suggested sequences are checked against it (tests/test_plans.py).

The constants were set against a first-time reader's own times for chapters 1-3 and 6-8
(the cold read of 2026-11-30): about 60-70 minutes to read and run chapters 1 and 2, 90-110 for chapter 3 as it
was then, 50, 35-45 and 45 for chapters 6, 7 and 8, and 20-30 minutes for each chapter's exercises. The exercise
constants were raised after the build exercises came (two learners' cold runs of 2026-12-02 put a newcomer at
10 minutes for a one-line answer and 40-60 for a build exercise of 12-15 lines: 1, 6, 11, 13, 14, 15, 16).
"""
import argparse
import copy
import math
import pathlib
import re
import sys

import nbformat

from book import ROOT, chapters, colab_url, notebook_text, repository, write_generated

# Which chapters each chapter needs: what its "Prerequisites" paragraph names and what it uses from them.
# 3 builds on 2's learned projections; 4 and 6 on 1-3; 5 scores heads as 4 does (its section 6 previews 9's
# conversion, readable without it); 7's section 3 trains 4's tiny transformer on 4's task and scores its
# heads; 8 extends 7 with 6's cache; 9 converts 4's model using 8's grouping; 10 weighs 6's roofline, 7's
# arithmetic intensity, 8's folded call and 9's stored results. 11 contrasts RoPE with 2's sinusoidal positions
# and puts it in 6's cache and 8's GQA layer; 12 runs a real GQA model (8) with RoPE in the GGUF layout (11)
# through 6's cache against 6's roofline, and pools its K/V heads as 9 does.
NEEDS = {
    1: [],
    2: [1],
    3: [1, 2],
    4: [1, 2, 3],
    5: [3, 4],
    6: [1, 2, 3, 4],
    7: [3, 4, 6],
    8: [6, 7],
    9: [4, 8],
    10: [6, 7, 8, 9],
    11: [2, 6, 8],
    12: [6, 8, 9, 11],
    13: [2, 6, 8, 10],
    14: [6, 8, 10, 11],
    15: [6, 8, 11, 12],
    16: [1, 3, 6, 8, 11, 12],
}

READING_WORDS_PER_MINUTE = 150  # technical prose, read to be understood
SECONDS_PER_CODE_LINE = 10  # reading one line of code
SECONDS_PER_CODE_CELL = 30  # running a cell and reading what it prints
MINUTES_PER_FIGURE = 1  # studying a plot or a diagram
EXERCISE_BASE_MINUTES = 5  # reading the check's message, trying again
EXERCISE_MINUTES_PER_LINE = 2  # per non-blank line of the model solution: writing it, and getting it right
EXERCISE_FLOOR_MINUTES = 10  # even a one-line answer takes thought

HEADER = ("<!-- chapter-header: written by scripts/chapter_header.py, do not edit -->", "<!-- /chapter-header -->")
EXERCISES_LINK = ("<!-- exercises-link: written by scripts/chapter_header.py, do not edit -->",
                  "<!-- /exercises-link -->")
EXERCISES_HEADING = re.compile(r"^## Exercises[ \t]*$", re.M)
TIME_PARAGRAPH = re.compile(r"^\*\*Time:\*\*.*?(?=\n[ \t]*\n|\Z)", re.M | re.S)
PREREQUISITES_PARAGRAPH = re.compile(r"^\*\*Prerequisites:\*\*.*?(?=\n[ \t]*\n|\Z)", re.M | re.S)
SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION", re.M | re.S)
SETUP_TAG = "setup"
CLAIMS = ROOT / "code" / "attention_book" / "experiments" / "claims.py"  # its REPOSITORY_URL: the ✗ lines' address
REPOSITORY_LINE = re.compile(r'^REPOSITORY_URL = "[^"]*"$', re.M)


def block_pattern(markers) -> re.Pattern:
    start, end = markers
    return re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)


def without_blocks(text: str) -> str:
    """The text without the generated blocks (or the "**Time:**" paragraph they replace) and HTML comments."""
    for pattern in (block_pattern(HEADER), block_pattern(EXERCISES_LINK), TIME_PARAGRAPH):
        text = pattern.sub(" ", text)
    return re.sub(r"<!--.*?-->", " ", text, flags=re.S)


def words(markdown: str) -> int:
    """Words of prose: whitespace-separated pieces, not counting link targets or generated blocks."""
    text = re.sub(r"\]\([^)]*\)", "]", without_blocks(markdown))
    return len(text.split())


def non_blank_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def figures(cell) -> int:
    return sum(1 for output in cell.get("outputs", [])
               if any(kind.startswith("image/") for kind in output.get("data", {})))


def exercises_index(nb) -> int | None:
    """The index of the markdown cell that holds the "## Exercises" heading."""
    return next((i for i, cell in enumerate(nb.cells)
                 if cell.cell_type == "markdown" and EXERCISES_HEADING.search(cell.source)), None)


def raw_minutes(nb) -> tuple[float, float]:
    """(minutes to read and run the chapter up to its exercises, minutes for the exercises), unrounded."""
    split = exercises_index(nb)
    split = len(nb.cells) if split is None else split
    read = 0.0
    for cell in nb.cells[:split]:
        if cell.cell_type == "markdown":
            read += words(cell.source) / READING_WORDS_PER_MINUTE
        elif cell.cell_type == "code" and SETUP_TAG not in cell.metadata.get("tags", []):
            read += (non_blank_lines(cell.source) * SECONDS_PER_CODE_LINE + SECONDS_PER_CODE_CELL) / 60
            read += figures(cell) * MINUTES_PER_FIGURE
    exercises = 0.0
    for cell in nb.cells[split:]:
        if cell.cell_type == "markdown":
            exercises += words(cell.source) / READING_WORDS_PER_MINUTE
        elif cell.cell_type == "code" and SOLUTION.search(cell.source):  # one exercise, one or more regions
            lines = sum(non_blank_lines(solution) for solution in SOLUTION.findall(cell.source))
            exercises += max(EXERCISE_FLOOR_MINUTES, EXERCISE_BASE_MINUTES + EXERCISE_MINUTES_PER_LINE * lines)
    return read, exercises


def round5(minutes: float) -> int:
    """To the nearest 5 minutes, at least 5."""
    return max(5, 5 * math.floor(minutes / 5 + 0.5))


def times(nb) -> dict:
    read, exercises = raw_minutes(nb)
    read, exercises = round5(read), round5(exercises)
    return {"time_read_minutes": read, "time_exercises_minutes": exercises, "time_minutes": read + exercises}


SITE, STUDENT, SOLVED = "site", "student", "solved"  # the three versions of a chapter: the site's page (book/),
# the student version (student/, scripts/student.py) and the solved chapter as Colab shows it (colab/, scripts/colab.py)


def student_link(name: str) -> str:
    return f"[Open the exercises in Colab]({colab_url(f'student/{name}')})"


def solved_link(name: str) -> str:
    return f"[Open with solutions]({colab_url(f'colab/{name}')})"


def _version(version: str) -> str:
    if version not in (SITE, STUDENT, SOLVED):
        raise ValueError(f"version must be {SITE!r}, {STUDENT!r} or {SOLVED!r}, not {version!r}")
    return version


def header_block(name: str, meta: dict, version: str = SITE) -> str:
    """The chapter's header as ``version`` shows it: the site's page links both Colab notebooks; each Colab notebook
    says which one it is and links the other, never itself."""
    start, end = HEADER
    # what the student version holds is said once, in the exercises' preamble (exercises_block)
    colab = {
        SITE: (f"**In Colab:** {student_link(name)} opens the student version, for writing the exercises yourself; "
               f"{solved_link(name)} opens the chapter with its model solutions in place."),
        STUDENT: (f"**In Colab:** this is the student version, for writing the exercises yourself; "
                  f"{solved_link(name)} opens the chapter with its model solutions in place."),
        SOLVED: (f"**In Colab:** this is the solved version, with every exercise's model solution in place; "
                 f"{student_link(name)} opens the student version, for writing them yourself."),
    }[_version(version)]
    return (f"{start}\n\n"
            f"**Time:** about {meta['time_read_minutes']} minutes to read and run, and "
            f"{meta['time_exercises_minutes']} minutes for the exercises.\n\n"
            f"{colab}\n\n"
            f"Tensor shapes are written with the letters B, L, S, h, g, d_model and d_head of the "
            f"[notation](notation.md) page.\n\n"
            f"{end}")


def exercises_block(name: str, version: str = SITE) -> str:
    """The preamble under the Exercises heading, the same in every chapter: what an exercise asks, what its check
    says, ``checks.hint`` and the other version's link, as ``version`` says it (the student version holds the stubs
    and says how to run them, and links the solved chapter, not itself)."""
    start, end = EXERCISES_LINK
    checks = ("When your function passes, the check prints a line that starts with ✓ and says what it tried; when "
              "it fails, it stops with an error that says which input it tried, what it expected and what came back. "
              "Where the package or PyTorch already has the function, or a piece of it, the exercise names it and the "
              "check makes it fail while yours runs, so a check also fails if your code calls it. If you are stuck, "
              "`checks.hint(\"name\")`, with the name of the function you are writing, prints a hint.")
    version = _version(version)
    if version == STUDENT:
        text = ("This is the student version: each exercise asks for one function, whose model solution is replaced "
                "by a stub that raises `NotImplementedError`. Write your code in its place and run the check cell "
                f"after it, which tries your function on several inputs. {checks}\n\n"
                "Run the chapter's cells above the exercises first, the setup cell included: the exercises use what "
                "they define. In Colab, click in the first exercise's cell and choose Runtime > Run before (or run "
                "the chapter once from the top). \"Run all\" stops at the check of the first exercise you have not "
                "written yet, as it should: its stub raises. A grader runs only the chapter's imports and the "
                "exercises' cells (not the rest of the chapter, nor cells you add), so define any helper function "
                "in the same cell as the function the exercise asks for.\n\n"
                f"The solved chapter, with every model solution in place: {solved_link(name)}.")
    else:
        where = " (on the site each is hidden behind a toggle)" if version == SITE else ""
        text = (f"Each exercise asks for one function, and the check cell after it tries that function on several "
                f"inputs. Here the model solutions are in place{where}. Write your own in the student version, "
                "where each model solution is replaced by a stub that raises "
                f"`NotImplementedError`: {student_link(name)}. {checks}")
    return f"{start}\n\n{text}\n\n{end}"


def with_version_blocks(nb, name: str, version: str):
    """The notebook ``nb`` (a chapter, changed in place and returned) with its header and exercises preamble as
    ``version`` says them (scripts/student.py and scripts/colab.py)."""
    meta = nb.metadata.get("attention_book", {})
    if "time_read_minutes" not in meta:
        return nb
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = block_pattern(HEADER).sub(lambda _: header_block(name, meta, version), cell.source,
                                                    count=1)
            cell.source = block_pattern(EXERCISES_LINK).sub(lambda _: exercises_block(name, version), cell.source,
                                                            count=1)
    return nb


def with_header(source: str, block: str) -> str:
    """The intro cell with its header block: in place of the old block, or of the "**Time:**" paragraph, or
    after the "**Prerequisites:**" paragraph, or at the end."""
    for pattern in (block_pattern(HEADER), TIME_PARAGRAPH):
        if pattern.search(source):
            return pattern.sub(lambda _: block, source, count=1)
    prerequisites = PREREQUISITES_PARAGRAPH.search(source)
    at = prerequisites.end() if prerequisites else len(source.rstrip())
    return f"{source[:at]}\n\n{block}\n\n{source[at:].lstrip()}".rstrip() + "\n" * source.endswith("\n")


def with_exercises_link(source: str, block: str) -> str:
    """The Exercises cell with its link block, right under the heading."""
    pattern = block_pattern(EXERCISES_LINK)
    if pattern.search(source):
        return pattern.sub(lambda _: block, source, count=1)
    heading = EXERCISES_HEADING.search(source)
    rest = source[heading.end():].lstrip("\n")
    return f"{source[:heading.end()]}\n\n{block}" + (f"\n\n{rest}" if rest else "")


def chapter_number(path: pathlib.Path, nb) -> int:
    return int(nb.metadata.get("attention_book", {}).get("chapter", path.name[:2]))


def updated(path: pathlib.Path, nb):
    """A copy of the chapter with its generated parts and metadata up to date."""
    nb = copy.deepcopy(nb)
    number = chapter_number(path, nb)
    if number not in NEEDS:
        raise SystemExit(f"{path.name}: chapter {number} has no entry in NEEDS in scripts/chapter_header.py")
    if any(not 1 <= needed < number for needed in NEEDS[number]):
        raise SystemExit(f"{path.name}: NEEDS[{number}] = {NEEDS[number]} names a chapter that is not earlier")
    intro = next((cell for cell in nb.cells if cell.cell_type == "markdown"), None)
    exercises = exercises_index(nb)
    if intro is None or exercises is None:
        raise SystemExit(f"{path.name}: needs an intro markdown cell and a '## Exercises' markdown cell")
    meta = nb.metadata.setdefault("attention_book", {})
    meta.update(times(nb))
    meta["needs_chapters"] = list(NEEDS[number])
    intro.source = with_header(intro.source, header_block(path.name, meta))
    cell = nb.cells[exercises]
    cell.source = with_exercises_link(cell.source, exercises_block(path.name))
    return nb


def with_repository_url(source: str, url: str) -> str:
    """claims.py's source with its ``REPOSITORY_URL = "..."`` line set to ``url`` (the package cannot read
    _config.yml in Colab, so the address is written into it, as into every setup cell)."""
    if len(REPOSITORY_LINE.findall(source)) != 1:
        raise SystemExit(f"{CLAIMS.relative_to(ROOT)} must hold one line REPOSITORY_URL = \"...\" to write the "
                         "repository's address into")
    return REPOSITORY_LINE.sub(lambda _: f'REPOSITORY_URL = "{url}"', source)


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the chapters that are out of date")
    parser.add_argument("--book", type=pathlib.Path, default=ROOT / "book", help="the folder of the chapters")
    parser.add_argument("chapters", nargs="*", type=pathlib.Path, help="only these chapters (default: all)")
    args = parser.parse_args(argv)
    only = {p.name for p in args.chapters}
    wanted = {path: notebook_text(updated(path, nbformat.read(path, as_version=4)))
              for path in chapters(args.book) if not only or path.name in only}
    if args.book.resolve() == (ROOT / "book").resolve() and not only:
        wanted[CLAIMS] = with_repository_url(CLAIMS.read_text(), repository()["url"])
    return write_generated(wanted, None, check=args.check, remedy="make chapter-headers")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
