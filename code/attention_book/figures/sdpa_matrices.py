"""Scaled dot-product attention drawn as matrices to scale: Q Kᵀ gives the scores, a softmax over each row turns
them into weights, and the weights times V give the output, with one query row followed through every step."""
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from ..validation import require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, ROLE_COLOURS, use_book_style


def sdpa_shapes(L, S, d_k, d_v):
    """The shape of each matrix of softmax(Q Kᵀ / √d_k) V, for L queries, S keys, keys of size d_k, values of d_v."""
    require_positive(L=L, S=S, d_k=d_k, d_v=d_v)
    return {"Q": (L, d_k), "Kᵀ": (d_k, S), "scores": (L, S), "weights": (L, S), "V": (S, d_v), "output": (L, d_v)}


def _highlight_row(ax, x, y, rows, cols, row, colour, max_cells):
    """Mark ``row`` of a block whose rows are scaled down (draw_block marks it only when rows <= max_cells)."""
    width, height = drawn_size(rows, cols, 1.0, max_cells)
    band = max(height / rows, 0.35)
    ax.add_patch(Rectangle((x, y + (height - band) * row / max(rows - 1, 1)), width, band, facecolor=colour,
                           edgecolor=INK, lw=0.5))


def draw_sdpa_matrices(L=4, S=6, d_k=3, d_v=2, row=1, max_cells=16):
    """softmax(Q Kᵀ / √d_k) V as blocks in proportion to their shapes, with query ``row`` followed through.

    Q (L, d_k) times Kᵀ (d_k, S) gives the scores (L, S); dividing by √d_k and a softmax over each row give the
    weights (L, S), each row summing to 1; the weights times V (S, d_v) give the output (L, d_v). The chosen query
    row is drawn in full colour in Q, the scores, the weights and the output. A side longer than ``max_cells`` is
    drawn ``max_cells`` long; the labels keep the true shapes. Returns the Figure.
    """
    shapes = sdpa_shapes(L, S, d_k, d_v)
    require_positive(max_cells=max_cells)
    if not 0 <= row < L:
        raise ValueError(f"row={row} must be in 0 .. L - 1 = {L - 1}")
    colours = {"Q": ROLE_COLOURS["query"], "Kᵀ": ROLE_COLOURS["key"], "scores": ROLE_COLOURS["weight"],
               "weights": ROLE_COLOURS["weight"], "V": ROLE_COLOURS["value"], "output": ROLE_COLOURS["output"]}
    letters = {"Q": "(L, d_k)", "Kᵀ": "(d_k, S)", "scores": "(L, S)", "weights": "(L, S)", "V": "(S, d_v)",
               "output": "(L, d_v)"}
    between = {"Q": "×", "Kᵀ": "=", "scores": None, "weights": "×", "V": "=", "output": ""}  # after each block
    sizes = {name: drawn_size(*shape, 1.0, max_cells) for name, shape in shapes.items()}
    height = max(h for _, h in sizes.values())
    gap, arrow_gap, top = 2.2, 6.0, 4.2
    width = 1.0 + sum(w for w, _ in sizes.values()) + 4 * gap + arrow_gap + 1.0
    fig, ax = new_canvas(width, top + height + 4.2, scale=min(0.3, 13.0 / width))  # at most 13 inches wide
    with use_book_style():
        x = 1.0
        for name, (rows, cols) in shapes.items():
            w, h = sizes[name]
            y = top + (height - h) / 2
            highlight = (row,) if name in ("Q", "scores", "weights", "output") else ()
            shown = "Q Kᵀ" if name == "scores" else name  # the raw scores, before ÷ √d_k
            label = f"{shown}\n{letters[name]} = ({rows}, {cols})"
            draw_block(ax, x, y, rows, cols, colours[name], label, max_cells=max_cells, highlight_rows=highlight,
                       light=0.7)
            if highlight and rows > max_cells:
                _highlight_row(ax, x, y, rows, cols, row, colours[name], max_cells)
            x += w
            if between[name] is None:  # the softmax between the scores and the weights
                middle = top + height / 2
                draw_arrow(ax, (x + 0.5, middle), (x + arrow_gap - 0.5, middle))
                ax.text(x + arrow_gap / 2, middle + 0.5, "÷ √d_k,\nsoftmax\nof each row", ha="center", va="top",
                        fontsize=FONT_SIZE - 1, color=INK)
                x += arrow_gap
            elif between[name]:
                ax.text(x + gap / 2, top + height / 2, between[name], ha="center", va="center",
                        fontsize=FONT_SIZE + 4, color=INK)
                x += gap
        ax.text(width / 2, top + height + 1.2,
                f"Query {row} (the full-colour row) meets every key: one row of S = {S} dot products, then one row of "
                f"weights that sums to 1,\nthen one output row, the average of the {S} value rows in those "
                f"proportions.", ha="center", va="top", fontsize=FONT_SIZE, color=INK)
    return fig


if __name__ == "__main__":  # pragma: no cover
    draw_sdpa_matrices()
    plt.show()
