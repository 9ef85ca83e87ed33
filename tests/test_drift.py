"""The code a chapter shows is the code the package runs.

A chapter cell tagged ``package-source`` defines functions or classes that also live in
``attention_book``; each definition must equal the package's source (after trimming whitespace).
Any other top-level definition in a chapter must not reuse a package name, so nothing drifts untagged.
"""
import ast
import importlib
import inspect
import pkgutil
import textwrap

import attention_book
import nbformat
import pytest
from conftest import chapter_paths


def package_objects():
    """Every function and class defined in an attention_book module (not plotting), by name."""
    found = {}
    for info in pkgutil.iter_modules(attention_book.__path__):
        if info.name == "plotting":
            continue
        module = importlib.import_module(f"attention_book.{info.name}")
        for name, obj in vars(module).items():
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__:
                found[name] = obj
    return found


def normalise(source: str) -> str:
    lines = [line.rstrip() for line in textwrap.dedent(source).strip().splitlines()]
    return "\n".join(lines)


def definitions(source):
    tree = ast.parse(source)
    return [(node.name, ast.get_source_segment(source, node, padded=True)) for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def shown_definitions():
    for path in chapter_paths():
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                tagged = "package-source" in cell.metadata.get("tags", [])
                for name, source in definitions(cell.source):
                    yield pytest.param(path.name, index, tagged, name, source, id=f"{path.stem}-cell{index}-{name}")


@pytest.mark.parametrize("chapter, index, tagged, name, source", list(shown_definitions()))
def test_shown_code_matches_the_package(chapter, index, tagged, name, source):
    objects = package_objects()
    if not tagged:
        assert name not in objects, (
            f"{chapter} cell {index} defines {name}, a name the package has: tag the cell 'package-source' "
            "and show the package's code, or rename it"
        )
        return
    assert name in objects, f"{chapter} cell {index} is tagged package-source but attention_book has no {name}"
    assert normalise(source) == normalise(inspect.getsource(objects[name])), (
        f"{chapter} cell {index}: {name} differs from {inspect.getsourcefile(objects[name])}"
    )


def test_chapter_one_shows_the_package_function():
    tagged = [p.values[3] for p in shown_definitions() if p.values[0].startswith("01_") and p.values[2]]
    assert "scaled_dot_product_attention" in tagged


def test_normalise_detects_a_changed_line():
    source = inspect.getsource(attention_book.scaled_dot_product_attention)
    assert normalise(source) != normalise(source.replace("dim=-1", "dim=-2", 1))
