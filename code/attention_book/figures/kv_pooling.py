"""MHA to GQA by mean pooling (chapter 9): the K/V projections of a group's heads averaged into one.

W_K is drawn as the book writes it, K = X W_K: a (d_model, h·d_head) matrix whose column block j (d_head columns)
computes key head j. (The weight of ``k_proj``, an ``nn.Linear``, is its transpose: there head j is a block of
rows.) Mean pooling to g K/V heads averages the h/g column blocks of each group into one block; W_V alike.
"""
from matplotlib.patches import Rectangle

from ..validation import require_divisible, require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, head_colour, kv_head_colour, use_book_style


def draw_kv_pooling(n_heads=8, n_kv_heads=2, d_model=6, d_head=2, max_cells=8):
    """W_K and W_V of an MHA layer, each head's column block in its head colour, averaged group by group.

    Args:
        n_heads, n_kv_heads: h heads before, g K/V heads after (g divides h).
        d_model, d_head: the blocks' rows and columns, drawn to scale (a side longer than ``max_cells`` scaled
            down; the labels keep the true sizes).

    Each group's h/g blocks are joined by an arrow to one block in the group's hue: their mean. Returns the
    matplotlib Figure.
    """
    require_positive(n_heads=n_heads, n_kv_heads=n_kv_heads, d_model=d_model, d_head=d_head, max_cells=max_cells)
    require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    group = n_heads // n_kv_heads
    w, h = drawn_size(d_model, d_head, max_cells=max_cells)
    gap_group = 1.2
    group_w = group * w
    panel_w = max(n_kv_heads * group_w + (n_kv_heads - 1) * gap_group + 2.0, 17.0)
    width = 2 * panel_w + 1.0
    height = 2.9 + h + 4.2 + h + 2.6
    fig, ax = new_canvas(width, height, scale=0.3)
    with use_book_style():
        for r, name in enumerate(("K", "V")):
            x0 = r * (panel_w + 1.0)
            ax.text(x0 + 0.2, 0.3, f"W_{name} of MHA: ({d_model}, {n_heads}·{d_head}),\none column block per head",
                    ha="left", va="top", fontsize=FONT_SIZE, color=INK, weight="bold")
            y_old, y_new = 2.9, 2.9 + h + 4.2
            for j in range(n_kv_heads):
                x_group = x0 + 1.0 + j * (group_w + gap_group)
                for m in range(group):
                    i = j * group + m
                    draw_block(ax, x_group + m * w, y_old, d_model, d_head, head_colour(i), f"{name}{i}",
                               light=0.0, max_cells=max_cells)
                x_new = x_group + (group_w - w) / 2
                draw_arrow(ax, (x_group + group_w / 2, y_old + h + 0.3), (x_new + w / 2, y_new - 1.3))
                ax.text(x_new + w / 2 + 0.4, (y_old + h + y_new - 1.0) / 2,
                        f"mean of\n{name}{j * group}..{name}{j * group + group - 1}" if group > 1 else "kept",
                        ha="left", va="center", fontsize=FONT_SIZE - 1, color=INK)
                draw_block(ax, x_new, y_new, d_model, d_head, kv_head_colour(j, n_heads, n_kv_heads),
                           f"new {name}{j}", light=0.35, max_cells=max_cells)
                ax.add_patch(_pooled_mark(x_new, y_new, w, h))
            ax.text(x0 + 0.2, y_new + h + 0.6, f"W_{name} of GQA: ({d_model}, {n_kv_heads}·{d_head}), "
                    f"one block per group of {group}", ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK)
    return fig


def _pooled_mark(x, y, width, height):
    """Dots over a pooled block, so that it reads as new without colour."""
    return Rectangle((x, y), width, height, fill=False, hatch="..", edgecolor=INK, lw=0, gid="pooled")
