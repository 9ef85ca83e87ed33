"""Diagrams of multi-head attention, drawn with matplotlib so that they look the same on the site,
in Colab and in Jupyter, and can be redrawn with your own sizes.

They use the book's visual language (``figures.style``): query head i in ``head_colour(i)``, a K/V head in its
group's hue, roles (input, output) in their fixed colours, the book's fonts, lines and arrows, all drawn inside
``use_book_style()``. Each head is also numbered, so that the diagrams read in greyscale.

Each function returns the matplotlib Figure. Boxes are ``FancyBboxPatch`` objects carrying a
``gid`` ("input", "head", "kv-head", ...) so that tests can count what a diagram shows.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ..validation import require_divisible, require_positive
from .style import (ARROW, FONT_SIZE, INK, LINE_WIDTH, ROLE_COLOURS, head_colour, kv_head_colour, text_colour_on,
                    tint, use_book_style)

_COLOURS = {"input": tint(ROLE_COLOURS["input"], 0.5), "proj": "#FFFFFF", "concat": "#FFFFFF",
            "output": tint(ROLE_COLOURS["output"], 0.5), "shape": "#FFFFFF"}


def _box(ax, x, y, w, h, text, kind, fontsize=FONT_SIZE, colour=None):
    """A rounded box centred on (x, y), tagged with ``kind``; ``colour`` overrides the kind's fill."""
    fill = colour or _COLOURS[kind]
    patch = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                           facecolor=fill, edgecolor=INK, linewidth=LINE_WIDTH, gid=kind)
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=text_colour_on(fill))
    return patch


def _arrow(ax, start, end, label=None):
    ax.add_patch(FancyArrowPatch(start, end, shrinkA=0, shrinkB=0, **ARROW))
    if label:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, label, fontsize=FONT_SIZE - 1,
                ha="left", va="center", color=INK)


def _shown_heads(n_heads, max_shown):
    """Head numbers to draw (0-based, as in code); None marks the '...' box when some are left out."""
    if n_heads <= max_shown:
        return list(range(n_heads))
    return list(range(max_shown - 2)) + [None, n_heads - 1]


def draw_mha_flow(n_heads=4, d_model=None, max_shown=5):
    """The data flow of multi-head attention: input -> projections -> h heads -> concat -> W_O -> output.

    Args:
        n_heads: number of heads h. More than ``max_shown`` are drawn as head 0, 1, ..., h - 1.
        d_model: if given (it must be divisible by n_heads), boxes also show widths.
    """
    require_positive(n_heads=n_heads, max_shown=max_shown)
    if max_shown < 3:
        raise ValueError(f"max_shown={max_shown} must be at least 3 (first heads, '...', last head)")
    d_head = None
    if d_model is not None:
        require_positive(d_model=d_model)
        require_divisible("d_model", d_model, "n_heads", n_heads)
        d_head = d_model // n_heads
    heads = _shown_heads(n_heads, max_shown)
    width = max(6.0, 1.5 * len(heads))
    with use_book_style():
        fig, ax = plt.subplots(figsize=(width, 6.6))
        centre = width / 2
        wide = f" (B, L, {d_model})" if d_model else " (B, L, d_model)"
        _box(ax, centre, 5.6, 3.4, 0.5, "input X" + wide, "input")
        _box(ax, centre, 4.6, 4.2, 0.55, "linear projections\nQ = X W_Q,  K = X W_K,  V = X W_V", "proj")
        _arrow(ax, (centre, 5.35), (centre, 4.875))
        xs = [width * (i + 0.5) / len(heads) for i in range(len(heads))]
        for x, head in zip(xs, heads, strict=True):
            if head is None:
                ax.text(x, 3.3, "...", ha="center", va="center", fontsize=14, color=INK)
                continue
            label = f"head {head}" + (f"\nwidth {d_head}" if d_head else "")
            _box(ax, x, 3.4, min(1.2, width / len(heads) - 0.15), 0.6, label, "head", fontsize=FONT_SIZE - 1,
                 colour=head_colour(head))
            _arrow(ax, (centre, 4.325), (x, 3.7))
            _arrow(ax, (x, 3.1), (centre, 2.275))
        # The caption sits above the input, out of the way of the arrows to the heads.
        ax.text(centre, 6.2, "each head i: softmax(Q_i K_iᵀ / √d_head) V_i, on its own slice of Q, K, V",
                ha="center", va="center", fontsize=FONT_SIZE - 1, style="italic", color=INK)
        concat = _box(ax, centre, 2.0, 3.4, 0.5, "", "concat")
        _head_stripes(ax, concat, heads)
        ax.text(centre, 2.0, "concatenate heads" + wide, ha="center", va="center", fontsize=FONT_SIZE, color=INK,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})
        _box(ax, centre, 1.0, 3.4, 0.5, "output projection W_O: mixes the heads", "proj")
        _arrow(ax, (centre, 1.75), (centre, 1.25))
        _box(ax, centre, 0.1, 3.4, 0.5, "output" + wide, "output")
        _arrow(ax, (centre, 0.75), (centre, 0.35))
        ax.set(xlim=(0, width), ylim=(-0.3, 6.4))
        ax.set_title(f"Multi-head attention, h = {n_heads}", color=INK)
        ax.axis("off")
    return fig


def _head_stripes(ax, box, heads):
    """Colour the edge strip of a box with one band per head, in the heads' hues: the heads side by side."""
    x, y, w, h = box.get_x(), box.get_y(), box.get_width(), box.get_height()
    shown = [head for head in heads if head is not None]
    band = w / len(shown)
    for k, head in enumerate(shown):
        ax.add_patch(Rectangle((x + k * band, y), band, h, facecolor=tint(head_colour(head), 0.35), lw=0,
                               gid="head-stripe"))


def mha_shape_steps(d_model, n_heads, batch="B", length="L"):
    """The tensor shapes through multi-head self-attention, as (operation, shape) pairs.

    ``batch`` and ``length`` may be numbers or letters; ``d_model`` must be divisible by ``n_heads``.
    In self-attention the key length S equals the query length L.
    """
    require_positive(d_model=d_model, n_heads=n_heads)
    require_divisible("d_model", d_model, "n_heads", n_heads)
    return _steps(batch, length, length, n_heads, d_model // n_heads, d_model)


def _steps(B, L, S, h, d_head, d_model):
    return [
        ("input x", (B, L, d_model)),
        ("q = x W_Q  (k and v alike)", (B, L, d_model)),
        (".view: split into h heads", (B, L, h, d_head)),
        (".transpose(1, 2): heads first", (B, h, L, d_head)),
        ("scores q kᵀ/√d_head, softmax", (B, h, L, S)),
        ("weights @ v", (B, h, L, d_head)),
        (".transpose, .reshape: concat", (B, L, d_model)),
        ("output = concat W_O", (B, L, d_model)),
    ]


def draw_mha_shapes(d_model=512, n_heads=8, batch="B", length="L"):
    """Boxes for each tensor's shape through multi-head self-attention, top to bottom.

    Each box shows the shape in the book's letters and, when numbers are given, in numbers too.
    """
    steps = mha_shape_steps(d_model, n_heads, batch, length)
    letters = _steps("B", "L", "S", "h", "d_head", "d_model")
    glyphs = ["input", "heads", "split", "stack", "stack", "stack", "heads", "output"]
    with use_book_style():
        fig, ax = plt.subplots(figsize=(9.5, 0.75 * len(steps) + 0.6))
        for i, ((op, shape), (_, letter_shape), glyph) in enumerate(zip(steps, letters, glyphs, strict=True)):
            y = len(steps) - i - 1
            text = f"({', '.join(letter_shape)})  =  ({', '.join(str(s) for s in shape)})"
            _box(ax, 5.6, y, 4.4, 0.5, text, "shape")
            ax.text(0.05, y, op, ha="left", va="center", fontsize=FONT_SIZE, color=INK)
            _shape_glyph(ax, 8.55, y, glyph, n_heads, square=i == 4)
            if i:
                _arrow(ax, (5.6, y + 0.75), (5.6, y + 0.25))
        ax.set(xlim=(0, 9.5), ylim=(-0.6, len(steps) - 0.4))
        ax.set_title(f"Shapes through MHA: d_model={d_model}, h={n_heads}, d_head={d_model // n_heads}, S = L",
                     color=INK)
        ax.axis("off")
    return fig


def _shape_glyph(ax, x, y, kind, n_heads, square=False):
    """A small picture of one batch element's tensor: the last dimension's head bands ("heads"), an (L, h, d_head)
    split ("split"), h blocks stacked by head ("stack"), or one plain block in a role's colour ("input", "output")."""
    width, height = 1.2, 0.42
    shown = min(n_heads, 8)  # more heads than 8 are drawn as 8 bands
    if kind in ("input", "output"):
        colour = ROLE_COLOURS["input" if kind == "input" else "output"]
        ax.add_patch(Rectangle((x - width / 2, y - height / 2), width, height, facecolor=tint(colour, 0.4),
                               edgecolor=INK, lw=LINE_WIDTH * 0.6, gid="glyph"))
        return
    if kind in ("heads", "split"):
        band = width / shown
        for j in range(shown):
            gap = 0.02 if kind == "split" else 0.0
            ax.add_patch(Rectangle((x - width / 2 + j * band + gap, y - height / 2), band - 2 * gap, height,
                                   facecolor=tint(head_colour(j), 0.35), edgecolor=INK, lw=LINE_WIDTH * 0.4,
                                   gid="glyph"))
        return
    side = 0.42 if square else 0.22  # stacked by head: a deck of h blocks, head 0 in front
    for j in reversed(range(shown)):
        offset = 0.05 * j
        ax.add_patch(Rectangle((x - 0.35 + offset, y - height / 2 - offset * 0.6), side, height,
                               facecolor=tint(head_colour(j), 0.35), edgecolor=INK, lw=LINE_WIDTH * 0.4,
                               gid="glyph"))


def draw_head_sharing(n_heads, n_kv_heads, ax=None):
    """Which query heads read which key/value heads: query head i uses K/V head i // (n_heads // n_kv_heads).

    n_kv_heads == n_heads is MHA, n_kv_heads == 1 is MQA, anything between is GQA.
    Draws on ``ax`` if given (to put several side by side), else on a new figure.
    """
    require_positive(n_heads=n_heads, n_kv_heads=n_kv_heads)
    require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    group = n_heads // n_kv_heads
    kind = "MHA" if n_kv_heads == n_heads else "MQA" if n_kv_heads == 1 else "GQA"
    width = max(4.0, 0.75 * n_heads + 0.5)
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(width, 3.3))
        q_x = [width * (i + 0.5) / n_heads for i in range(n_heads)]
        kv_x = [sum(q_x[j * group:(j + 1) * group]) / group for j in range(n_kv_heads)]
        box_w = min(0.6, width / n_heads - 0.1)
        for i, x in enumerate(q_x):
            _box(ax, x, 1.6, box_w, 0.45, f"Q{i}", "head", fontsize=FONT_SIZE - 1, colour=head_colour(i))
            _arrow(ax, (x, 1.375), (x + 0.35 * (kv_x[i // group] - x), 0.425))
        for j, x in enumerate(kv_x):
            colour = kv_head_colour(j, n_heads, n_kv_heads)
            _box(ax, x, 0.2, max(box_w, group * width / n_heads - 0.15), 0.45, f"K{j} V{j}", "kv-head",
                 fontsize=FONT_SIZE - 1, colour=colour)
        # The cache: one block per K/V head, next to the h slots that MHA would need; the empty slots are the saving.
        slot = width / n_heads
        ax.text(0.02, -0.42, f"cache: {n_kv_heads} of {n_heads}", ha="left", va="center", fontsize=FONT_SIZE - 1,
                color=INK)
        for i in range(n_heads):
            kept = i < n_kv_heads
            colour = kv_head_colour(i, n_heads, n_kv_heads) if kept else "#FFFFFF"
            ax.add_patch(Rectangle((i * slot + 0.05, -0.95), slot - 0.1, 0.32, facecolor=tint(colour, 0.2),
                                   edgecolor=INK if kept else "#999999", lw=LINE_WIDTH * (1 if kept else 0.6),
                                   linestyle="-" if kept else (0, (2, 2)), gid="cache" if kept else "cache-saved"))
        ax.set(xlim=(0, width), ylim=(-1.05, 2.1))
        ax.set_title(f"{kind}: {n_heads} query heads, {n_kv_heads} K/V head{'s' * (n_kv_heads > 1)}, "
                     f"group size {group}", color=INK)
        ax.axis("off")
    return ax.figure
