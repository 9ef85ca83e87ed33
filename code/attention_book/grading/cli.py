"""The ``attention-book`` command (also ``python -m attention_book.grading``).

    attention-book grade --chapter 3 submissions/*.ipynb --csv grades.csv --feedback feedback/

Each subcommand is added by a function of ``COMMANDS``: ``add(subcommands)`` registers its parser with
``subcommands.add_parser`` and sets ``run``, a function of the parsed arguments that returns the exit status.
"""
import argparse
import concurrent.futures
import contextlib
import functools
import os
import sys
from pathlib import Path

from .autograder import add_command as add_autograder
from .options import add_grading_options


def _notebooks(arguments):
    """The submissions that the command line's SUBMISSION arguments name: a file as it is (one that cannot be read
    is graded as such), a folder as every .ipynb under it (one folder per learner, say), checkpoints left out."""
    found = []
    for argument in map(Path, arguments):
        if argument.is_dir():
            found += sorted(p for p in argument.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        else:
            found.append(argument)
    return found


def submission_names(paths):
    """Each submission's name in the grades: its path from the folder that holds them all, so that notebooks with one
    file name (every Colab download of a chapter has the same) in one folder per learner are told apart by the
    folder (``ada/03_multi_head.ipynb``), and notebooks in one folder are named by their file names."""
    resolved = [Path(p).resolve() for p in paths]
    parent = Path(os.path.commonpath([p.parent for p in resolved]))
    return [p.relative_to(parent).as_posix() for p in resolved]


def _grade_one(path, name, assignment, **options):
    """grade_submission(path, ...), or, where the grader itself fails on this submission, a grade that says so: one
    submission never stops the others."""
    from .results import ERROR
    from .run import SubmissionGrade, grade_submission, ungraded

    try:
        return grade_submission(path, assignment, name=name, **options)
    except Exception as error:
        reason = f"the grader failed on this submission ({type(error).__name__}: {error}); the others were graded"
        return SubmissionGrade(name, assignment.chapter, ungraded(assignment, ERROR, reason), reason,
                               options.get("variant", 0))


def _grade(args):
    from .assignment import load_assignment
    from .report import reasons, write_csv, write_feedback
    from .results import ERROR
    from .run import SubmissionGrade, require_grading_packages, ungraded

    try:
        require_grading_packages()
        assignment = load_assignment(args.chapter)
    except (ImportError, ValueError) as error:  # a missing extra, a chapter without exercises
        print(f"attention-book grade: {error}", file=sys.stderr)
        return 2
    paths = _notebooks(args.submissions)
    if not paths:
        print("attention-book grade: no notebook (.ipynb) in the folders given", file=sys.stderr)
        return 2
    names = submission_names(paths)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        print(f"attention-book grade: a submission is given twice ({', '.join(twice)})", file=sys.stderr)
        return 2
    options = {"variant": args.variant, "cell_timeout": args.cell_timeout, "total_timeout": args.timeout}
    grades = []
    with contextlib.ExitStack() as stack:  # --jobs N: N processes, each running one submission's kernel at a time
        if args.jobs <= 1:
            running = [functools.partial(_grade_one, path, name, assignment, **options)
                       for path, name in zip(paths, names, strict=True)]
        else:
            pool = stack.enter_context(concurrent.futures.ProcessPoolExecutor(args.jobs))
            running = [pool.submit(_grade_one, path, name, assignment, **options).result
                       for path, name in zip(paths, names, strict=True)]
        for name, result in zip(names, running, strict=True):
            try:
                grade = result()
            except Exception as error:  # a process of the pool died (out of memory?): this one, not the batch
                reason = f"the process grading this submission failed ({type(error).__name__}: {error})"
                grade = SubmissionGrade(name, assignment.chapter, ungraded(assignment, ERROR, reason), reason,
                                        args.variant)
            grades.append(grade)
            why = reasons(grade)
            print(f"{grade.submission}: {grade.score:g} of {grade.max_score:g}" + (f"; {why}" if why else ""),
                  flush=True)
    if args.csv:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.feedback:
        written = write_feedback(grades, args.feedback, assignment.title)
        print(f"wrote {len(written)} feedback page{'s' * (len(written) != 1)} to {args.feedback}")
    return 0


def _add_grade(subcommands):
    parser = subcommands.add_parser(
        "grade", help="grade learners' notebooks of one chapter: a CSV and a feedback page per learner",
        description="Run each submission's answers with the chapter's checks in a fresh kernel, with time limits, "
                    "and write the grades (one CSV row per submission) and each learner's feedback.")
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                        help="a learner's notebook (.ipynb), or a folder: every notebook under it (one folder per "
                             "learner, each with its Colab download, is named after the folder)")
    add_grading_options(parser)  # --chapter, --variant, --cell-timeout, --timeout
    parser.add_argument("--csv", metavar="PATH", help="write the grades to this CSV file")
    parser.add_argument("--feedback", metavar="DIR", help="write one Markdown page per submission to this folder")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="grade N submissions at once, each in its own kernel (default 1)")
    parser.set_defaults(run=_grade)


COMMANDS = [_add_grade, add_autograder]  # add_autograder: attention_book.grading.autograder


def main(argv=None):
    """Run the command line ``argv`` (default: the process's); the exit status."""
    parser = argparse.ArgumentParser(prog="attention-book",
                                     description="Tools for teaching with the book 'Attention, Head by Head'.")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(subcommands)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
