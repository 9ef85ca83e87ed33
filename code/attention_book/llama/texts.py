"""The two texts shipped with the package (``llama/data``, written for the book, CC BY 4.0; see its README.md)."""
import importlib.resources


def _read(name) -> str:
    return (importlib.resources.files("attention_book.llama") / "data" / name).read_text(encoding="utf-8")


def heldout_text() -> str:
    """Five short expository sections (about 2,100 tokens), held out: used only to measure perplexity."""
    return _read("heldout.txt")


def long_prompt_text() -> str:
    """The opening of a short story (about 660 tokens), longer than a page, stopping mid-sentence: a prompt."""
    return _read("long_prompt.txt")
