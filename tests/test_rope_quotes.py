"""Chapter 11 quotes the lines of the attention layer that set RoPE's offset (section 4): each is the layer's own."""
import inspect
import re

import nbformat
from conftest import ROOT

from attention_book import GroupedQueryAttention


def quoted_lines():
    """The lines of the python code blocks, and the inline ``return ...`` code, of chapter 11's section 4."""
    nb = nbformat.read(ROOT / "book" / "11_rope.ipynb", as_version=4)
    section = next(cell.source for cell in nb.cells
                   if cell.cell_type == "markdown" and cell.source.startswith("## 4. RoPE and the KV cache"))
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    inline = re.findall(r"`(return [^`]+)`", section)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()] + inline


def test_chapter_11_quotes_the_layer_s_own_lines():
    lines = quoted_lines()
    assert len(lines) >= 3, f"chapter 11's section 4 should quote the three lines that set the offset, found {lines}"
    source = inspect.getsource(GroupedQueryAttention)
    missing = [line for line in lines if line not in source]
    assert not missing, f"chapter 11 quotes lines that GroupedQueryAttention no longer has: {missing}"
