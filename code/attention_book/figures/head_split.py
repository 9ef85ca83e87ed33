"""The head split of multi-head attention, drawn to scale: the columns of W_Q coloured by head, q = x W_Q, the
``view`` + ``transpose`` that regroups the same numbers head by head, attention in each head alone, the
concatenation that undoes the regrouping, and W_O, which mixes the heads' columns into d_model."""
from matplotlib.patches import Rectangle

from ..validation import require_positive
from .blocks import draw_arrow, new_canvas
from .style import (FONT_SIZE, INK, LINE_WIDTH, ROLE_COLOURS, head_colour, text_colour_on, tint, use_book_style)

_LIGHT = 0.45  # how much white is mixed into a head's hue for its cells


def head_split_shapes(d_model, n_heads, d_head, L, batch="B"):
    """The shape of each tensor of the head split, for a batch ``batch`` (a number or "B") of L tokens."""
    require_positive(d_model=d_model, n_heads=n_heads, d_head=d_head, L=L)
    B, width = batch, n_heads * d_head
    return {"x": (B, L, d_model), "W_Q": (d_model, width), "q": (B, L, width), "q by head": (B, n_heads, L, d_head),
            "out by head": (B, n_heads, L, d_head), "concat": (B, L, width), "W_O": (width, d_model),
            "output": (B, L, d_model)}


def _drawn(n, max_cells):
    """How many cells a side of n elements is drawn with (as in blocks.draw_block: at most max_cells)."""
    return min(n, max_cells)


def _grid(ax, x, y, width, height, n_rows, n_cols, colour, light=_LIGHT, gid=None):
    """A rectangle of cells: ``n_rows`` x ``n_cols`` cell lines when they are true cells (None: no lines)."""
    ax.add_patch(Rectangle((x, y), width, height, facecolor=tint(colour, light), edgecolor=INK, lw=LINE_WIDTH,
                           gid=gid))
    if n_rows:
        for r in range(1, n_rows):
            ax.plot([x, x + width], [y + r * height / n_rows] * 2, color=INK, lw=0.25)
    if n_cols:
        for c in range(1, n_cols):
            ax.plot([x + c * width / n_cols] * 2, [y, y + height], color=INK, lw=0.25)


def _banded(ax, x, y, rows, n_heads, d_head, max_cells, across=True):
    """A (rows, h·d_head) block whose column bands (across) or row bands (not across) belong to heads 0 .. h - 1.

    Returns the drawn (width, height). A band is drawn in its head's hue and numbered with the head, so that the
    split reads in greyscale too.
    """
    total = n_heads * d_head
    long_side = _drawn(total, max_cells)
    band = long_side / n_heads
    true_cells = total <= max_cells
    other = _drawn(rows, max_cells)
    for i in range(n_heads):
        if across:
            bx, by, bw, bh = x + i * band, y, band, other
            _grid(ax, bx, by, bw, bh, rows if rows <= max_cells else None, d_head if true_cells else None,
                  head_colour(i), gid="head-band")
        else:
            bx, by, bw, bh = x, y + i * band, other, band
            _grid(ax, bx, by, bw, bh, d_head if true_cells else None, rows if rows <= max_cells else None,
                  head_colour(i), gid="head-band")
        if n_heads <= 12:
            _head_number(ax, bx + bw / 2, by + bh / 2, i)
    return (long_side, other) if across else (other, long_side)


def _head_number(ax, x, y, i):
    ax.text(x, y, str(i), ha="center", va="center", fontsize=FONT_SIZE - 1, fontweight="bold",
            color=text_colour_on(tint(head_colour(i), _LIGHT)))


def _label(ax, x, y, text):
    ax.text(x, y - 0.4, text, ha="center", va="bottom", fontsize=FONT_SIZE, color=INK)


def _symbol(ax, x, y, text):
    ax.text(x, y, text, ha="center", va="center", fontsize=FONT_SIZE + 4, color=INK)


def draw_head_split(d_model=12, n_heads=3, d_head=4, L=5, max_cells=16):
    """How multi-head attention splits queries into heads and joins the heads again, as blocks to scale.

    Top row: x (B, L, d_model) times W_Q (d_model, h·d_head), whose column bands belong to heads 0 .. h - 1, gives
    q (B, L, h·d_head) with the same bands. ``view`` + ``transpose(1, 2)`` regroups those numbers, unchanged, into
    (B, h, L, d_head): one (L, d_head) block per head, stacked. Each head attends alone (k and v are split the
    same way). Bottom row: ``transpose`` + ``reshape`` lays the heads' outputs side by side again (the
    concatenation, (B, L, h·d_head)), and W_O (h·d_head, d_model), whose row band i meets head i's columns, mixes
    every head into each of the d_model output columns. One batch element is drawn; a side longer than
    ``max_cells`` is drawn ``max_cells`` long (the labels keep the true shapes). Returns the Figure.
    """
    shapes = head_split_shapes(d_model, n_heads, d_head, L)
    require_positive(max_cells=max_cells)
    width = n_heads * d_head
    dm, wd, rows = _drawn(d_model, max_cells), _drawn(width, max_cells), _drawn(L, max_cells)
    stack_cell = min(1.0, 2 * max_cells / (n_heads * (rows + 1)))  # the stack of heads stays at most 2 x max_cells tall
    hw = _drawn(d_head, max_cells) * stack_cell  # a head's block in the stack
    hh = rows * stack_cell
    step = hh + stack_cell
    stack_height = n_heads * step - stack_cell
    gap = 2.4
    top = 1.0
    row1 = max(dm, rows, stack_height)
    A = 11.0  # room for an arrow and its words, wide enough for about 2 inches of text at the final scale
    for _ in range(3):
        top_row = 1 + dm + gap + wd + gap + wd + A + hw + A + hw
        bottom_row = 1 + dm + gap + wd + gap + wd + gap + dm + gap + dm + 8
        canvas_w = max(top_row, bottom_row) + 1
        scale = min(0.22, 13.0 / canvas_w)
        A = max(11.0, 2.1 / scale)
    line = FONT_SIZE * 1.45 / 72 / scale  # the height of a line of text, in data units
    top += 3.3 * line  # room for the three-line labels of the stacks
    canvas_h = top + row1 + 4 + max(wd, rows) + 1.5 + 5 * line
    fig, ax = new_canvas(canvas_w, canvas_h, scale=scale)

    def fmt(name, letters):  # one batch element: a tensor's B is left out of its letters and its numbers
        shape = shapes[name][1:] if letters.count("(B, ") else shapes[name]
        letters = letters.replace("(B, ", "(")
        return f"{letters}\n({', '.join(map(str, shape))})" if len(letters) < 30 else letters

    with use_book_style():
        # Top row: x W_Q = q, then the regrouping by head.
        mid = top + row1 / 2
        x = 1.0
        y = mid - rows / 2
        _grid(ax, x, y, dm, rows, L if L <= max_cells else None, d_model if d_model <= max_cells else None,
              ROLE_COLOURS["input"], light=0.3, gid="input")
        _label(ax, x + dm / 2, y, fmt("x", "x (B, L, d_model)"))
        x += dm
        _symbol(ax, x + gap / 2, mid, "×")
        x += gap
        _banded(ax, x, mid - dm / 2, d_model, n_heads, d_head, max_cells)
        _label(ax, x + wd / 2, mid - dm / 2, f"W_Q (d_model, h·d_head)\n({d_model}, {width})")
        x += wd
        _symbol(ax, x + gap / 2, mid, "=")
        x += gap
        q_x = x
        _banded(ax, x, y, L, n_heads, d_head, max_cells)
        _label(ax, x + wd / 2, y, fmt("q", "q (B, L, h·d_head)"))
        x += wd
        draw_arrow(ax, (x + 0.5, mid), (x + A - 0.5, mid))
        ax.text(x + A / 2, mid - 0.5, ".view(B, L, h, d_head)\n.transpose(1, 2)", ha="center", va="bottom",
                fontsize=FONT_SIZE - 1, color=INK)
        ax.text(x + A / 2, mid + 0.5, "the same numbers,\nregrouped by head", ha="center", va="top",
                fontsize=FONT_SIZE - 1, color=INK, style="italic")
        x += A
        stack_top = mid - stack_height / 2
        stacks = []
        for column, title in ((x, "q by head\n(h, L, d_head)"), (x + hw + A, "out by head\n(h, L, d_head)")):
            for i in range(n_heads):
                by = stack_top + i * step
                _grid(ax, column, by, hw, hh, L if L <= max_cells else None,
                      d_head if d_head <= max_cells else None, head_colour(i), gid="head")
                if n_heads <= 12:
                    _head_number(ax, column + hw / 2, by + hh / 2, i)
            _label(ax, column + hw / 2, stack_top, title + f"\n({n_heads}, {L}, {d_head})")
            stacks.append(column)
        draw_arrow(ax, (x + hw + 0.5, mid), (x + hw + A - 0.5, mid))
        ax.text(x + hw + A / 2, mid - 0.5, "each head alone:\nsoftmax(q kᵀ/√d_head) v", ha="center", va="bottom",
                fontsize=FONT_SIZE - 1, color=INK)
        ax.text(x + hw + A / 2, mid + 0.5, "(k and v are split\nthe same way)", ha="center", va="top",
                fontsize=FONT_SIZE - 1, color=INK, style="italic")
        # Bottom row: concatenate, times W_O, gives the output.
        top2 = top + row1 + 4 + 2.5 * line
        mid2 = top2 + max(wd, rows) / 2
        x = q_x
        y2 = mid2 - rows / 2
        draw_arrow(ax, (stacks[1] + hw / 2, stack_top + stack_height + 0.3), (x + wd / 2, y2 - 0.8 - 2.3 * line))
        ax.text(stacks[1] + hw / 2 + 1.0, top + row1 + 1.2,
                ".transpose(1, 2).reshape(B, L, h·d_head):\nconcatenate the heads again", ha="left", va="top",
                fontsize=FONT_SIZE - 1, color=INK)
        _banded(ax, x, y2, L, n_heads, d_head, max_cells)
        _label(ax, x + wd / 2, y2, fmt("concat", "concat (B, L, h·d_head)"))
        x += wd
        _symbol(ax, x + gap / 2, mid2, "×")
        x += gap
        _banded(ax, x, mid2 - wd / 2, d_model, n_heads, d_head, max_cells, across=False)
        ax.text(x + dm / 2, mid2 + wd / 2 + 0.4, f"W_O (h·d_head, d_model)\n({width}, {d_model})", ha="center",
                va="top", fontsize=FONT_SIZE, color=INK)  # below the block, out of the way of the arrow
        x += dm
        _symbol(ax, x + gap / 2, mid2, "=")
        x += gap
        _grid(ax, x, y2, dm, rows, L if L <= max_cells else None, d_model if d_model <= max_cells else None,
              ROLE_COLOURS["output"], light=0.3, gid="output")
        _label(ax, x + dm / 2, y2, fmt("output", "output (B, L, d_model)"))
        ax.text(x + dm + 0.8, mid2, "each column\nmixes every head", ha="left", va="center",
                fontsize=FONT_SIZE - 1, color=INK)
        ax.set_title(f"The head split, for one batch element: d_model = {d_model}, h = {n_heads}, "
                     f"d_head = {d_head}, L = {L}", fontsize=FONT_SIZE + 1, color=INK)
    return fig
