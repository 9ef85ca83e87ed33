"""The exercise convention: solutions between nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION``.

``stub_solutions`` turns a solution cell into what a student sees, as ``nbgrader generate_assignment``
does: in a code cell the region becomes ``# YOUR CODE HERE`` and a ``raise NotImplementedError`` (with the
same indentation) whose message names the function to write; in a markdown cell it becomes
``YOUR ANSWER HERE``.
"""
import re

SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.M | re.S)
DEF = re.compile(r"^([ \t]*)def (\w+)\(", re.M)
TEXT_STUB = "YOUR ANSWER HERE"


def _hint(before: str, indent: str) -> str:
    """The stub's message: name the innermost function around the region, if there is one."""
    enclosing = [m.group(2) for m in DEF.finditer(before) if len(m.group(1)) < len(indent)]
    if enclosing:
        return f"write the body of {enclosing[-1]}(); the check in the next cell tells you if it is right"
    return "write your answer here; the check in the next cell tells you if it is right"


def stub_solutions(source: str, cell_type: str = "code") -> str:
    """Replace each solution region of a cell's source by a stub (code) or by YOUR ANSWER HERE (markdown)."""
    if cell_type == "markdown":
        return SOLUTION.sub(lambda m: f"{m.group(1)}{TEXT_STUB}", source)
    return SOLUTION.sub(lambda m: (f"{m.group(1)}# YOUR CODE HERE\n"
                                   f'{m.group(1)}raise NotImplementedError("{_hint(source[:m.start()], m.group(1))}")'),
                        source)


def has_solution(source: str) -> bool:
    return bool(SOLUTION.search(source))
