"""The texts shipped with the package (``llama/data``, written for the book, CC BY 4.0; see its README.md)."""
import importlib.resources


def _read(name) -> str:
    return (importlib.resources.files("attention_book.llama") / "data" / name).read_text(encoding="utf-8")


def heldout_text() -> str:
    """Five short expository sections (about 2,100 tokens), held out: used only to measure perplexity."""
    return _read("heldout.txt")


def long_prompt_text() -> str:
    """The opening of a short story (about 660 tokens), longer than a page, stopping mid-sentence: a prompt."""
    return _read("long_prompt.txt")


def long_heldout_text() -> str:
    """``heldout_text()`` followed by eight more sections (6,303 tokens with the SmolLM2 tokenizer, about 5,300
    words), held out like it: chapter 15 measures perplexity past a sliding window on it. Later sections refer back
    to names and numbers from earlier ones (the Ebbridge Canal's twenty-three locks, Lock Nine, Agnes Penhallow's
    clock of 1824, the tides), thousands of tokens apart. Its first 2,141 tokens are those of ``heldout_text()``."""
    # heldout.txt ends with a newline, so one more makes the blank line that separates all the sections.
    return heldout_text() + "\n" + _read("heldout_continuation.txt")
