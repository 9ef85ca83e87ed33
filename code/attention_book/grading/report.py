"""The gradebook: one CSV row per submission, and one Markdown feedback page per learner.

The CSV's columns: ``submission`` (the file's name, or its path from the folder that holds every submission, such as
``ada/03_multi_head.ipynb``), one per exercise (its points, 0 or 1) and, in chapter 16, one for the check of the
whole decoder (``same_tokens_as_package``, worth as many points as the chapter has exercises), ``total``, ``out_of``,
``variant`` (of the checks' inputs) and ``reasons``, which names each item that earned nothing and why
("my_causal_mask: wrong answer; param_count: syntax error (line 3)"). The feedback page gives every check's full
message.
"""
import csv
from pathlib import Path

from .results import PASSED


def _points(value):
    return f"{value:g}"


def reasons(grade):
    """What the CSV says of a SubmissionGrade's lost points: the whole submission's reason, or each item that did
    not pass, "exercise: outcome (detail)"."""
    if grade.reason is not None:
        return grade.reason
    return "; ".join(f"{e.exercise}: {e.outcome}" + (f" ({e.detail})" if e.detail else "")
                     for e in grade.exercises if e.outcome != PASSED)


def hint_line(grade, item):
    """The sentence that points the learner to an exercise's hint (``checks.hint("name")``), or None: where the
    item passed, is not an exercise (a combined check), the whole submission was not graded, or the check's message
    already names the hint. Used by the feedback pages and by Gradescope's results (attention_book.grading
    .autograder)."""
    if item.passed or item.combined or grade.reason is not None or "checks.hint(" in item.message:
        return None
    return f'In the chapter\'s notebook, `checks.hint("{item.exercise}")` gives a hint.'


def write_csv(grades, path):
    """Write ``grades`` (SubmissionGrades of one chapter) to the CSV file ``path``; its rows, header first."""
    if not grades:
        raise ValueError("grades is empty: there is no submission to write")
    columns = [e.exercise for e in grades[0].exercises]
    rows = [["submission", *columns, "total", "out_of", "variant", "reasons"]]
    for grade in grades:
        points = {e.exercise: e.points for e in grade.exercises}
        rows.append([grade.submission, *(_points(points[name]) for name in columns), _points(grade.score),
                     _points(grade.max_score), str(grade.variant), reasons(grade)])
    with open(path, "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows(rows)
    return rows


def feedback_page(grade, title=""):
    """A SubmissionGrade as a Markdown page for the learner: the score, then each exercise's outcome and the
    check's whole message (only the reason, where the whole submission was not graded). ``title``: the chapter's
    title."""
    variant = "the checks' public inputs" if grade.variant == 0 else f"variant {grade.variant} of the checks' inputs"
    lines = [f"# Chapter {grade.chapter}{': ' + title if title else ''}", "",
             f"Feedback on `{grade.submission}`: **{_points(grade.score)} of {_points(grade.max_score)}**, "
             f"checked on {variant}.", ""]
    if grade.reason is not None:
        return "\n".join([*lines, f"Nothing was graded: {grade.reason}.", ""])
    number = 0
    for item in grade.exercises:
        number += not item.combined
        heading = (f"Exercise {number}, `{item.exercise}`" if not item.combined else
                   f"Your functions together, `checks.{item.exercise}`")
        lines += [f"## {heading}: {item.outcome} ({_points(item.points)} of {_points(item.max_points)})", ""]
        if item.message:
            lines += ["```text", item.message.rstrip(), "```", ""]
        hint = hint_line(grade, item)
        if hint:
            lines += [hint, ""]
    return "\n".join(lines)


def feedback_path(folder, submission):
    """Where ``submission``'s feedback page goes: ``folder``/<its name, .md for .ipynb> (``ada/03_multi_head.ipynb``
    gives ``folder/ada/03_multi_head.md``)."""
    return Path(folder) / Path(submission).with_suffix(".md")


def write_feedback(grades, folder, title=""):
    """Write one feedback page per SubmissionGrade (``feedback_path``); the paths written."""
    written = []
    for grade in grades:
        path = feedback_path(folder, grade.submission)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(feedback_page(grade, title), encoding="utf-8")
        written.append(path)
    return written
