"""The ``attention-book`` command (also ``python -m attention_book.grading``).

    attention-book grade --chapter 3 submissions/*.ipynb --csv grades.csv --feedback feedback/

Each subcommand is added by a function of ``COMMANDS``: ``add(subcommands)`` registers its parser with
``subcommands.add_parser`` and sets ``run``, a function of the parsed arguments that returns the exit status.
"""
import argparse
import concurrent.futures
import contextlib
import functools
import sys
from pathlib import Path

from .autograder import add_command as add_autograder


def _grade(args):
    from .assignment import load_assignment
    from .report import reasons, write_csv, write_feedback
    from .run import grade_submission, require_grading_packages

    try:
        require_grading_packages()
        assignment = load_assignment(args.chapter)
    except (ImportError, ValueError) as error:  # a missing extra, a chapter without exercises
        print(f"attention-book grade: {error}", file=sys.stderr)
        return 2
    names = [Path(p).name for p in args.submissions]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        print(f"attention-book grade: two submissions share a file name ({', '.join(twice)}); the CSV and the "
              "feedback pages are named after it: rename one", file=sys.stderr)
        return 2
    grade_one = functools.partial(grade_submission, assignment=assignment, variant=args.variant,
                                  cell_timeout=args.cell_timeout, total_timeout=args.timeout)
    grades = []
    with contextlib.ExitStack() as stack:  # --jobs N: N processes, each running one submission's kernel at a time
        mapped = map if args.jobs <= 1 else stack.enter_context(concurrent.futures.ProcessPoolExecutor(args.jobs)).map
        for grade in mapped(grade_one, args.submissions):
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
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSION", help="a learner's notebook (.ipynb)")
    parser.add_argument("--chapter", type=int, required=True, help="the chapter's number, e.g. 3")
    parser.add_argument("--csv", metavar="PATH", help="write the grades to this CSV file")
    parser.add_argument("--feedback", metavar="DIR", help="write one Markdown page per submission to this folder")
    parser.add_argument("--variant", type=int, default=0, metavar="SEED",
                        help="check on other random inputs than the chapter's public ones (default 0: the public "
                             "ones), so that an answer that hard-codes their outputs fails")
    parser.add_argument("--cell-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="seconds one answer cell or one check may run (default 60)")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS",
                        help="seconds one submission may run in all (default 900)")
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
