"""One decoder block of a decoder-only transformer, in the book's visual language: where the heads read and write.

The residual stream, one d_model-wide vector per position, runs from the token embedding at the bottom to the final
norm and the unembedding at the top. Inside the block (repeated n_layers times) two sub-layers read it and add to it,
each behind its own norm (pre-norm, as in GPT-2 and Llama): the attention layer, whose head i reads the normalised
stream through its own slices W_Q,i, W_K,i, W_V,i and writes back through its own slice W_O,i, the heads' results
summed into the stream; then the MLP. Query head i is drawn in ``head_colour(i)``, W_Q, W_K and W_V in the colours
of queries, keys and values, and the stream in the colour of token vectors. Boxes carry a ``gid`` ("head", "w-q",
"w-k", "w-v", "w-o", "norm", "mlp", "embedding", "unembedding", "add", "stream", "block") so tests can count them.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyBboxPatch, Rectangle

from ..validation import require_positive
from .diagrams import _arrow, _box, _shown_heads
from .style import FONT_SIZE, INK, LINE_WIDTH, ROLE_COLOURS, head_colour, tint, use_book_style

_STREAM = tint(ROLE_COLOURS["input"], 0.35)  # the residual stream: token vectors, in the colour of inputs
_COLUMN = 2.7  # the width of one head's column, in data units


def _add(ax, x, y):
    """The ⊕ where a sub-layer's output is added to the stream."""
    ax.add_patch(Circle((x, y), 0.24, facecolor="#FFFFFF", edgecolor=INK, lw=LINE_WIDTH * 1.2, gid="add", zorder=3))
    ax.text(x, y, "+", ha="center", va="center", fontsize=FONT_SIZE + 3, color=INK, zorder=4)


def _line(ax, points):
    """A plain line through (x, y) points: the path of a branch before its arrow."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs, ys, color=INK, lw=LINE_WIDTH, solid_capstyle="butt")


def draw_decoder_block(n_heads=4, d_model=256, d_head=None, title=None, n_layers=None, d_ff=None, max_shown=4):
    """A pre-norm decoder block with its heads, between the token embedding and the unembedding.

    Args:
        n_heads: query heads h of the attention layer; more than ``max_shown`` are drawn as 0, 1, ..., h - 1.
        d_model: width of the residual stream.
        d_head: width of each head; defaults to d_model // n_heads.
        title: the figure's title; by default it names the sizes.
        n_layers: how many blocks the model stacks (drawn as "× n_layers"); None writes "× N".
        d_ff: the MLP's hidden width, if known (a label; 4 d_model in GPT-2, other widths in Llama).
    Returns the Figure, drawn at 150 dpi so that its small labels stay sharp when the page scales it.
    """
    require_positive(n_heads=n_heads, d_model=d_model, max_shown=max_shown)
    if d_head is None:
        d_head = max(d_model // n_heads, 1)
    require_positive(d_head=d_head)
    if n_layers is not None:
        require_positive(n_layers=n_layers)
    if d_ff is not None:
        require_positive(d_ff=d_ff)
    if max_shown < 3:
        raise ValueError(f"max_shown={max_shown} must be at least 3 (first heads, '...', last head)")
    heads = _shown_heads(n_heads, max_shown)
    sx = 2.3  # the residual stream's x
    x0 = 5.0  # left edge of the sub-layers
    branch = max(len(heads) * _COLUMN, 8.0)
    xc = x0 + branch / 2  # centre of the sub-layers
    notes = x0 + branch + 0.4  # left edge of the size notes
    # Heights (y grows upwards): the attention sub-layer, then the MLP, then the top of the model.
    y_split, y_norm, y_bus, y_w, y_head, y_o, y_sum = 2.9, 3.5, 4.3, 5.1, 6.45, 7.8, 8.7
    y_split2, y_norm2, y_mlp, y_add2 = 9.5, 10.1, 11.2, 12.15
    y_block_top, y_final = 12.9, 13.6
    width, height = notes + 6.2, y_final + 3.3
    with use_book_style():
        fig, ax = plt.subplots(figsize=(width * 0.5, height * 0.5), dpi=150)
        ax.set(xlim=(0, width), ylim=(-0.2, height - 0.2))
        ax.set_aspect("equal")
        ax.axis("off")
        # Bottom: tokens, embedding. Top: final norm, unembedding, logits. Between them, the stream.
        # Two-line boxes are 1.0 high, so that the text keeps clear of the arrows and the stream at their edges.
        ax.add_patch(Rectangle((sx - 0.16, 2.05), 0.32, y_final - 0.25 - 2.05, facecolor=_STREAM, edgecolor=INK,
                               lw=0.6, gid="stream", zorder=0.5))
        _box(ax, sx, 0.25, 3.6, 0.5, "tokens (B, L)", "input", colour=tint(ROLE_COLOURS["input"], 0.5))
        _arrow(ax, (sx, 0.5), (sx, 0.95))
        _box(ax, sx, 1.5, 4.6, 1.0, "token embedding\n(+ positions, in GPT-2)", "embedding", colour="#FFFFFF")
        ax.text(sx - 0.4, (y_split + y_add2) / 2, f"residual stream (B, L, d_model), d_model = {d_model}",
                rotation=90, ha="right", va="center", fontsize=FONT_SIZE - 1, color=INK)
        _box(ax, sx, y_final, 3.6, 0.5, "final norm", "norm", colour="#FFFFFF")
        _arrow(ax, (sx, y_final + 0.25), (sx, y_final + 0.7))
        _box(ax, sx, y_final + 1.25, 4.6, 1.0, "unembedding\nd_model → vocabulary", "unembedding", colour="#FFFFFF")
        _arrow(ax, (sx, y_final + 1.8), (sx, y_final + 2.25))
        _box(ax, sx, y_final + 2.55, 4.6, 0.5, "logits (B, L, vocabulary)", "output",
             colour=tint(ROLE_COLOURS["output"], 0.5))
        # The block, repeated.
        ax.add_patch(FancyBboxPatch((0.45, 2.3), width - 0.75, y_block_top - 2.3,
                                    boxstyle="round,pad=0.05,rounding_size=0.3", facecolor="none", edgecolor=INK,
                                    lw=LINE_WIDTH, linestyle=(0, (4, 3)), gid="block", zorder=0))
        repeat = f"× {n_layers}" if n_layers else "× N"
        ax.text(width - 0.5, y_block_top - 0.2, f"decoder block {repeat}", ha="right", va="top",
                fontsize=FONT_SIZE + 1, fontweight="bold", color=INK)
        stacked = f"the model stacks {n_layers} such blocks" if n_layers else "N: how many such blocks the model stacks"
        ax.text(width - 0.5, y_block_top - 0.7, stacked, ha="right", va="top", fontsize=FONT_SIZE, color=INK)
        # Attention: a norm, then every head reads the normalised stream through its W_Q, W_K, W_V slices.
        _line(ax, [(sx, y_split), (xc, y_split), (xc, y_norm - 0.35)])
        ax.plot([sx], [y_split], "o", color=INK, ms=3.5, zorder=3)
        _arrow(ax, (xc, y_norm - 0.35), (xc, y_norm - 0.25))
        _box(ax, xc, y_norm, 3.0, 0.5, "norm", "norm", colour="#FFFFFF")
        columns = [x0 + (k + 0.5) * branch / len(heads) for k in range(len(heads))]
        shown = [x for x, head in zip(columns, heads, strict=True) if head is not None]
        _line(ax, [(xc, y_norm + 0.25), (xc, y_bus)])
        ax.plot([min(shown) - 0.8, max(shown) + 0.8], [y_bus, y_bus], color=INK, lw=LINE_WIDTH)
        roles = (("W_Q", "query", "w-q"), ("W_K", "key", "w-k"), ("W_V", "value", "w-v"))
        for x, head in zip(columns, heads, strict=True):
            if head is None:
                ax.text(x, y_head, "...", ha="center", va="center", fontsize=14, color=INK)
                continue
            for offset, (name, role, gid) in zip((-0.8, 0.0, 0.8), roles, strict=True):
                _arrow(ax, (x + offset, y_bus), (x + offset, y_w - 0.25))
                _box(ax, x + offset, y_w, 0.72, 0.5, name, gid, fontsize=FONT_SIZE - 1,
                     colour=tint(ROLE_COLOURS[role], 0.35))
                _arrow(ax, (x + offset, y_w + 0.25), (x + 0.4 * offset, y_head - 0.3))
            _box(ax, x, y_head, _COLUMN - 0.45, 0.6, f"head {head}", "head", colour=head_colour(head))
            _arrow(ax, (x, y_head + 0.3), (x, y_o - 0.25))
            _box(ax, x, y_o, 1.5, 0.5, f"W_O,{head}", "w-o", fontsize=FONT_SIZE - 1,
                 colour=tint(head_colour(head), 0.5))
            _arrow(ax, (x, y_o + 0.25), (x, y_sum))
        # The heads' outputs are summed into the stream.
        ax.plot([sx + 0.24, max(shown)], [y_sum, y_sum], color=INK, lw=LINE_WIDTH)
        _arrow(ax, (sx + 0.9, y_sum), (sx + 0.25, y_sum))
        _add(ax, sx, y_sum)
        last = n_heads - 1
        terms = " + ".join(f"head {i} W_O,{i}" for i in range(n_heads)) if n_heads <= 2 else (
            f"head 0 W_O,0 + … + head {last} W_O,{last}")
        ax.text(xc, y_sum + 0.12, f"added to the stream:  {terms}  =  concat(heads) W_O", ha="center",
                va="bottom", fontsize=FONT_SIZE, color=INK)
        # Notes beside the heads: what each part reads and its size.
        note = dict(ha="left", va="center", fontsize=FONT_SIZE, color=INK)
        ax.text(notes, y_w, f"head i's W_Q, W_K, W_V, each\n(d_model, d_head) = ({d_model}, {d_head});\n"
                "each reads the whole vector", **note)
        plural = "s" * (n_heads > 1)
        ax.text(notes, y_head, f"h = {n_heads} head{plural}, each one\nsoftmax(q kᵀ/√d_head) v,\ncausal: i sees 0 … i",
                **note)
        ax.text(notes, y_o, f"W_O,i: head i's d_head rows\nof W_O, (d_head, d_model)\n= ({d_head}, {d_model})",
                **note)
        # MLP: a norm, then the MLP, added to the stream.
        _line(ax, [(sx, y_split2), (xc, y_split2), (xc, y_norm2 - 0.35)])
        ax.plot([sx], [y_split2], "o", color=INK, ms=3.5, zorder=3)
        _arrow(ax, (xc, y_norm2 - 0.35), (xc, y_norm2 - 0.25))
        _box(ax, xc, y_norm2, 3.0, 0.5, "norm", "norm", colour="#FFFFFF")
        _arrow(ax, (xc, y_norm2 + 0.25), (xc, y_mlp - 0.5))
        hidden = f"d_ff = {d_ff}" if d_ff else "d_ff"
        _box(ax, xc, y_mlp, 7.4, 1.0, f"MLP, on each position alone\nd_model → {hidden} → d_model", "mlp",
             colour="#FFFFFF")
        ax.text(notes, y_mlp, "d_ff: the MLP's hidden width\n(4 d_model in GPT-2)", **note)
        _line(ax, [(xc, y_mlp + 0.5), (xc, y_add2), (sx + 0.9, y_add2)])
        _arrow(ax, (sx + 0.9, y_add2), (sx + 0.25, y_add2))
        _add(ax, sx, y_add2)
        ax.set_title(title or f"A decoder-only transformer, one pre-norm block drawn: h = {n_heads}, "
                     f"d_model = {d_model}, d_head = {d_head}", color=INK)
    return fig


if __name__ == "__main__":  # pragma: no cover
    draw_decoder_block()
    plt.show()
