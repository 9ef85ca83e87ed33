"""The exercise convention: solutions between nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION``.

``stub_solutions`` turns a solution cell into what a student sees: the region is replaced by a
``raise NotImplementedError`` with the same indentation, as nbgrader does.
"""
import re

SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.M | re.S)


def stub_solutions(source: str) -> str:
    """Replace each solution region of a cell's source by a stub that raises NotImplementedError."""
    return SOLUTION.sub(lambda m: f'{m.group(1)}raise NotImplementedError("write your answer here")', source)


def has_solution(source: str) -> bool:
    return bool(SOLUTION.search(source))
