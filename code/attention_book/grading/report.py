"""The gradebook: one CSV row per submission, and one Markdown feedback page per learner.

The CSV's columns: ``submission`` (the file's name), one per exercise (its points, 0 or 1), ``total``, ``out_of``
and ``reasons``, which names each exercise that earned nothing and why ("my_causal_mask: wrong answer;
param_count: syntax error (line 3)"). The feedback page gives every check's full message.
"""
import csv
from pathlib import Path

from .results import PASSED


def _points(value):
    return f"{value:g}"


def reasons(grade):
    """What the CSV says of a SubmissionGrade's lost points: the whole submission's reason first, then each exercise
    that did not pass, "exercise: outcome (detail)"."""
    if grade.reason is not None:
        return grade.reason
    return "; ".join(f"{e.exercise}: {e.outcome}" + (f" ({e.detail})" if e.detail else "")
                     for e in grade.exercises if e.outcome != PASSED)


def write_csv(grades, path):
    """Write ``grades`` (SubmissionGrades of one chapter) to the CSV file ``path``; its rows, header first."""
    if not grades:
        raise ValueError("grades is empty: there is no submission to write")
    exercises = [e.exercise for e in grades[0].exercises]
    rows = [["submission", *exercises, "total", "out_of", "reasons"]]
    for grade in grades:
        points = {e.exercise: e.points for e in grade.exercises}
        rows.append([grade.submission, *(_points(points[name]) for name in exercises), _points(grade.score),
                     _points(grade.max_score), reasons(grade)])
    with open(path, "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows(rows)
    return rows


def feedback_page(grade, title=""):
    """A SubmissionGrade as a Markdown page for the learner: the score, then each exercise's outcome and the
    check's whole message. ``title``: the chapter's title."""
    variant = "the checks' public inputs" if grade.variant == 0 else f"variant {grade.variant} of the checks' inputs"
    lines = [f"# Chapter {grade.chapter}{': ' + title if title else ''}", "",
             f"Feedback on `{grade.submission}`: **{_points(grade.score)} of {_points(grade.max_score)}**, "
             f"checked on {variant}.", ""]
    if grade.reason is not None:
        lines += [f"Nothing was graded: {grade.reason}.", ""]
    for number, exercise in enumerate(grade.exercises, start=1):
        lines += [f"## Exercise {number}, `{exercise.exercise}`: {exercise.outcome} "
                  f"({_points(exercise.points)} of {_points(exercise.max_points)})", ""]
        if exercise.message and grade.reason is None:
            lines += ["```text", exercise.message.rstrip(), "```", ""]
        if exercise.outcome != PASSED and grade.reason is None and "checks.hint(" not in exercise.message:
            lines += [f'In the chapter\'s notebook, `checks.hint("{exercise.exercise}")` gives a hint.', ""]
    return "\n".join(lines)


def write_feedback(grades, folder, title=""):
    """Write one feedback page per SubmissionGrade to ``folder``/<submission's stem>.md; the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for grade in grades:
        path = folder / f"{Path(grade.submission).stem}.md"
        path.write_text(feedback_page(grade, title), encoding="utf-8")
        written.append(path)
    return written
