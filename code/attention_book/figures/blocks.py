"""Tensors drawn as blocks in proportion to their shapes: the building block of the book's diagrams.

A (rows, cols) matrix is drawn ``rows`` cells tall and ``cols`` cells wide, each cell ``cell`` data units square.
A side longer than ``max_cells`` is drawn ``max_cells`` long and its cells are not drawn one by one, so that a
(4096, 128) cache still fits on the page; the label keeps the true shape. Coordinates: x grows to the right and y
grows downwards (call ``ax.invert_yaxis()`` once, or use ``new_canvas``), as a matrix is read.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from .style import ARROW, FONT_SIZE, INK, LINE_WIDTH, tint, use_book_style


def drawn_size(rows: int, cols: int, cell: float = 1.0, max_cells: int = 16) -> tuple[float, float]:
    """The (width, height) a (rows, cols) block takes on the page."""
    return min(cols, max_cells) * cell, min(rows, max_cells) * cell


def draw_block(ax, x, y, rows, cols, colour, label=None, cell=1.0, max_cells=16, highlight_rows=(),
               highlight_cols=(), light=0.55, label_side="above"):
    """Draw a (rows, cols) tensor with its top-left corner at (x, y); return its drawn (width, height).

    Args:
        colour: the block's hue (a head's or a role's); cells are a light tint of it, highlighted rows and columns
            the full colour.
        label: text written above (or below, ``label_side="below"``) the block, e.g. "K (S, d_head)".
        highlight_rows, highlight_cols: indices of rows/columns drawn in the full colour (one query row followed
            through a figure, one head's columns of W_Q...). Ignored on a side that is scaled down.
    """
    width, height = drawn_size(rows, cols, cell, max_cells)
    ax.add_patch(Rectangle((x, y), width, height, facecolor=tint(colour, light), edgecolor=INK, lw=LINE_WIDTH))
    if rows <= max_cells:
        for r in highlight_rows:
            ax.add_patch(Rectangle((x, y + r * cell), width, cell, facecolor=colour, edgecolor=INK, lw=0.5))
        for r in range(1, rows):
            ax.plot([x, x + width], [y + r * cell] * 2, color=INK, lw=0.25)
    if cols <= max_cells:
        for c in highlight_cols:
            ax.add_patch(Rectangle((x + c * cell, y), cell, height, facecolor=colour, edgecolor=INK, lw=0.5))
        for c in range(1, cols):
            ax.plot([x + c * cell] * 2, [y, y + height], color=INK, lw=0.25)
    if label:
        ty = y - 0.4 * cell if label_side == "above" else y + height + 0.4 * cell
        ax.text(x + width / 2, ty, label, ha="center", va="bottom" if label_side == "above" else "top",
                fontsize=FONT_SIZE, color=INK)
    return width, height


def draw_arrow(ax, start, end, label=None):
    """An arrow in the book's style from ``start`` to ``end`` ((x, y) pairs), with an optional label beside it."""
    ax.add_patch(FancyArrowPatch(start, end, **ARROW))
    if label:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 - 0.3, label, ha="center", va="bottom",
                fontsize=FONT_SIZE - 1, color=INK)


def new_canvas(width, height, scale=0.25):
    """A figure and axes for a diagram ``width`` x ``height`` data units large, y growing downwards, no axes drawn.

    ``scale`` is inches per data unit. Call inside ``use_book_style()`` to get the book's fonts.
    """
    with use_book_style():
        fig, ax = plt.subplots(figsize=(max(width * scale, 2), max(height * scale, 1.5)))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax
