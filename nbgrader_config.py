# nbgrader configuration for instructors (see book/instructors.md): the chapters mark their solutions with
# nbgrader's own "### BEGIN SOLUTION" / "### END SOLUTION", so `nbgrader generate_assignment` can strip them
# without nbgrader cell metadata (the chapters carry none).
c = get_config()  # noqa: F821 (nbgrader provides it)
c.ClearSolutions.enforce_metadata = False
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError(\"write your answer here\")"}
