"""Diagrams of multi-head attention, drawn with matplotlib so that they look the same on the site,
in Colab and in Jupyter, and can be redrawn with your own sizes.

Each function returns the matplotlib Figure. Boxes are ``FancyBboxPatch`` objects carrying a
``gid`` ("input", "head", "kv-head", ...) so that tests can count what a diagram shows.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from ..validation import require_divisible, require_positive

_COLOURS = {"input": "#e8e8e8", "proj": "#cfe2f3", "head": "#fce5cd", "kv-head": "#d9ead3",
            "concat": "#ead1dc", "output": "#e8e8e8", "shape": "#f3f3f3"}


def _box(ax, x, y, w, h, text, kind, fontsize=9):
    """A rounded box centred on (x, y), tagged with ``kind``."""
    patch = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                           facecolor=_COLOURS[kind], edgecolor="#444444", linewidth=1.0, gid=kind)
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)
    return patch


def _arrow(ax, start, end, label=None):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color="#444444",
                                 linewidth=1.0, shrinkA=0, shrinkB=0))
    if label:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, label, fontsize=8,
                ha="left", va="center", color="#444444")


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
    fig, ax = plt.subplots(figsize=(width, 6.2))
    centre = width / 2
    wide = f" (B, L, {d_model})" if d_model else " (B, L, d_model)"
    _box(ax, centre, 5.6, 3.4, 0.5, "input X" + wide, "input")
    _box(ax, centre, 4.6, 4.2, 0.55, "linear projections\nQ = X W_Q,  K = X W_K,  V = X W_V", "proj")
    _arrow(ax, (centre, 5.35), (centre, 4.875))
    xs = [width * (i + 0.5) / len(heads) for i in range(len(heads))]
    for x, head in zip(xs, heads, strict=True):
        if head is None:
            ax.text(x, 3.3, "...", ha="center", va="center", fontsize=14)
            continue
        label = f"head {head}" + (f"\nwidth {d_head}" if d_head else "")
        _box(ax, x, 3.4, min(1.2, width / len(heads) - 0.15), 0.6, label, "head", fontsize=8)
        _arrow(ax, (centre, 4.325), (x, 3.7))
        _arrow(ax, (x, 3.1), (centre, 2.275))
    ax.text(centre, 3.95, "each head i: softmax(Q_i K_iᵀ / √d_head) V_i, on its own slice of Q, K, V",
            ha="center", va="center", fontsize=8, style="italic",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})
    _box(ax, centre, 2.0, 3.4, 0.5, "concatenate heads" + wide, "concat")
    _box(ax, centre, 1.0, 3.4, 0.5, "output projection W_O", "proj")
    _arrow(ax, (centre, 1.75), (centre, 1.25))
    _box(ax, centre, 0.1, 3.4, 0.5, "output" + wide, "output")
    _arrow(ax, (centre, 0.75), (centre, 0.35))
    ax.set(xlim=(0, width), ylim=(-0.3, 6.0), title=f"Multi-head attention, h = {n_heads}")
    ax.axis("off")
    return fig


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
    fig, ax = plt.subplots(figsize=(8.0, 0.75 * len(steps) + 0.6))
    for i, ((op, shape), (_, letter_shape)) in enumerate(zip(steps, letters, strict=True)):
        y = len(steps) - i - 1
        text = f"({', '.join(letter_shape)})  =  ({', '.join(str(s) for s in shape)})"
        _box(ax, 5.6, y, 4.4, 0.5, text, "shape")
        ax.text(0.05, y, op, ha="left", va="center", fontsize=9)
        if i:
            _arrow(ax, (5.6, y + 0.75), (5.6, y + 0.25))
    ax.set(xlim=(0, 8.0), ylim=(-0.6, len(steps) - 0.4),
           title=f"Shapes through MHA: d_model={d_model}, h={n_heads}, d_head={d_model // n_heads}, S = L")
    ax.axis("off")
    return fig


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
    if ax is None:
        _, ax = plt.subplots(figsize=(width, 2.6))
    q_x = [width * (i + 0.5) / n_heads for i in range(n_heads)]
    kv_x = [sum(q_x[j * group:(j + 1) * group]) / group for j in range(n_kv_heads)]
    box_w = min(0.6, width / n_heads - 0.1)
    for i, x in enumerate(q_x):
        _box(ax, x, 1.6, box_w, 0.45, f"Q{i}", "head", fontsize=8)
        _arrow(ax, (x, 1.375), (x + 0.35 * (kv_x[i // group] - x), 0.425))
    for j, x in enumerate(kv_x):
        _box(ax, x, 0.2, max(box_w, group * width / n_heads - 0.15), 0.45, f"K{j} V{j}", "kv-head", fontsize=8)
    ax.set(xlim=(0, width), ylim=(-0.2, 2.1),
           title=f"{kind}: {n_heads} query heads, {n_kv_heads} K/V head{'s' * (n_kv_heads > 1)}, group size {group}")
    ax.axis("off")
    return ax.figure
