"""The learner's answers in a submitted notebook, as downloaded from Colab: only the code cells that define the
exercises' functions are taken; everything else (the checks included) comes from the instructor's copy.

Colab may drop cell metadata and tags, and a learner may reorder, rename, delete or add cells, so an answer is found
by what it defines, not by where it is: the last code cell that defines the exercise's function at its top level (the
one that "Run all" leaves in place).
"""
import dataclasses
import re

from .assignment import defined_names

DEF_OR_CLASS = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.M)


@dataclasses.dataclass(frozen=True)
class Answer:
    """The cell that answers exercise ``exercise``: its ``source``, its ``cell`` index in the submission, and
    ``syntax_error``: None, or where and why its Python does not parse ("line 3: invalid syntax"), with the
    ``line`` (of the cell, from 1) where Python found it."""
    exercise: str
    source: str
    cell: int
    syntax_error: str | None = None
    line: int | None = None


def _python(source):
    """The Python that IPython runs for a cell's ``source`` (magics and ``!`` commands turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _parse(source):
    """(names the cell defines at its top level, None, None) or, if it does not parse, (the names its ``def`` and
    ``class`` lines give, "line N: why", N)."""
    try:
        return defined_names(_python(source)), None, None
    except SyntaxError as error:
        where = f"line {error.lineno}: " if error.lineno else ""
        text = (error.text or "").strip()
        return DEF_OR_CLASS.findall(source), f"{where}{error.msg}" + (f" ({text})" if text else ""), error.lineno


def find_answers(nb, assignment):
    """{exercise name: Answer, or None where no code cell of ``nb`` defines the exercise's function}."""
    defining = {}
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")  # a cell without one (a hand-edited file) defines nothing
        source = source if isinstance(source, str) else "".join(map(str, source))
        names, error, line = _parse(source)
        for name in names:
            defining[name] = Answer(name, source, index, error, line)
    answers = {}
    for exercise in assignment.exercises:
        answers[exercise.name] = defining.get(exercise.name)
    return answers


def stated_chapter(nb):
    """The chapter number the notebook's metadata gives (``attention_book.chapter``), or None."""
    chapter = nb.get("metadata", {}).get("attention_book", {}).get("chapter")
    return chapter if isinstance(chapter, int) else None


def other_chapter(nb, assignment, assignments):
    """None if ``nb`` is ``assignment``'s chapter as far as can be told; otherwise the number of the chapter it is
    (from its metadata; without metadata, the chapter whose exercises' functions it defines when it defines none of
    ``assignment``'s). ``assignments``: {chapter: Assignment} of every chapter."""
    stated = stated_chapter(nb)
    if stated is not None:
        return None if stated == assignment.chapter else stated
    answers = find_answers(nb, assignment)
    if any(answers.values()):
        return None
    for chapter, other in assignments.items():
        if chapter != assignment.chapter and any(find_answers(nb, other).values()):
            return chapter
    return None
