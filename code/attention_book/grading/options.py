"""The options that ``attention-book grade``, ``attention-book autograder`` and Gradescope's run_autograder share,
and their defaults (light: argparse is the caller's)."""

CELL_TIMEOUT = 60.0  # seconds one answer cell or one check may run
TIMEOUT = 900.0  # seconds one submission may run in all, on the instructor's machine


def variant_seed(text):
    """argparse's type for --variant: results.variant_number (a whole number from 0 to results.MAX_VARIANT), its
    ValueError turned into argparse's own error, which prints the rule."""
    import argparse

    from .results import variant_number

    try:
        return variant_number(text, "--variant")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_grading_options(parser, timeout=TIMEOUT):
    """Add --chapter, --variant, --cell-timeout and --timeout (default ``timeout`` seconds) to the argparse
    ``parser``."""
    parser.add_argument("--chapter", type=int, required=True, help="the chapter's number, e.g. 3")
    parser.add_argument("--variant", type=variant_seed, default=0, metavar="SEED",
                        help="check on other random inputs than the chapter's public ones (default 0: the public "
                             "ones), so that an answer that hard-codes their outputs fails")
    parser.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT, metavar="SECONDS",
                        help=f"seconds one answer cell or one check may run (default {CELL_TIMEOUT:g})")
    parser.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                        help=f"seconds one submission may run in all (default {timeout:g})")
