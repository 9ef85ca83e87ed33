# nbgrader configuration for instructors (see book/instructors.md, "With nbgrader"). The chapters carry nbgrader's
# cell metadata (written by scripts/nbgrader_metadata.py): each exercise cell is an autograded answer, each check
# cell below it an autograder test worth 1 point, so generate_assignment, autograde and export need no cell marked
# by hand. autograde runs the chapters in their kernel, python3: register the book's Python (where the package is
# installed) under that name, as the guide shows, or nbgrader's own Python runs them without the package.
c = get_config()  # noqa: F821 (nbgrader provides it)
# The stub a learner sees in place of each model solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError(\"write your answer here\")"}
# autograde runs the whole chapter; nbgrader's default limit, 30 seconds a cell, is too short for a chapter's
# experiments on a slow machine (and an answer that loops forever still stops after this many seconds).
c.Execute.timeout = 300
