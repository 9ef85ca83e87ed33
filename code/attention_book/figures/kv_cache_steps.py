"""The KV cache over decode steps (chapter 6): what each step computes new, and what it only reads.

At decode step t (steps count from 1, positions from 0: after a prompt of P tokens, step t appends the token at
position P + t - 1), the new token's query meets P + t cached keys and values: the P + t - 1 rows cached before it,
only read, and the one row of K and one of V that this step computes and appends. ``cache_step_rows`` counts them;
``draw_kv_cache_steps`` draws one panel per step.
"""
from matplotlib.patches import Rectangle

from ..validation import require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, ROLE_COLOURS, use_book_style


def cache_step_rows(step, prompt_len=0):
    """Rows of K (and as many of V) that decode step ``step`` (1, 2, ...) writes and reads, for one head.

    After a prompt of ``prompt_len`` tokens already cached, step t computes and appends 1 row and attends to
    ``prompt_len + t`` rows, of which ``prompt_len + t - 1`` were cached before it. Returns
    ``{"new": 1, "cached_before": prompt_len + t - 1, "read": prompt_len + t}``.
    """
    require_positive(step=step)
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len < 0:
        raise ValueError(f"prompt_len={prompt_len!r} must be an integer >= 0")
    return {"new": 1, "cached_before": prompt_len + step - 1, "read": prompt_len + step}


def draw_kv_cache_steps(n_steps=4, d_head=4, prompt_len=0, max_cells=8, per_row=4):
    """One panel per decode step t = 1 .. n_steps: the query row, the K cache and the V cache of one head.

    In each panel the row this step computes and appends is drawn in full colour and marked "new", and the caption
    gives the new token's position (from 0); the rows cached by earlier steps are tinted and only read. The query
    row meets every cached row of K (the scores, one per row) and the weights then sum every row of V.

    Args:
        n_steps: number of panels, one per step, at most ``per_row`` panels to a row (fewer if they are wide).
        d_head: the head width, the number of columns of q, K and V.
        prompt_len: tokens cached before step 1 (a prefill), drawn tinted in every panel.
        max_cells: longer sides are drawn scaled down (the labels keep the true sizes).

    Returns the matplotlib Figure.
    """
    require_positive(n_steps=n_steps, d_head=d_head, max_cells=max_cells, per_row=per_row)
    cache_step_rows(1, prompt_len)  # checks prompt_len
    w, _ = drawn_size(1, d_head, max_cells=max_cells)
    _, tallest = drawn_size(prompt_len + n_steps, d_head, max_cells=max_cells)
    panel_w = 2 * w + max(5.5, 9.5 - w)  # room for the "← new" label beside V
    panel_h = tallest + 9.5
    columns = min(n_steps, per_row, max(1, int(54 // panel_w)))  # at most about 12 inches wide
    panel_rows = -(-n_steps // columns)
    width, height = columns * panel_w, panel_rows * panel_h + 2.0
    fig, ax = new_canvas(width, height, scale=0.22)
    with use_book_style():
        for p in range(n_steps):
            t = p + 1
            rows = cache_step_rows(t, prompt_len)
            S = rows["read"]
            x_k, y0 = (p % columns) * panel_w + 0.5, (p // columns) * panel_h
            x_v = x_k + w + 1.0
            ax.text(x_k, y0 + 0.2, f"step t = {t}", ha="left", va="top", fontsize=FONT_SIZE + 1, color=INK,
                    weight="bold")
            draw_block(ax, x_k, y0 + 2.4, 1, d_head, ROLE_COLOURS["query"], None, light=0.0, max_cells=max_cells)
            ax.text(x_k + w + 0.3, y0 + 2.9, f"q{t} (1, {d_head})", ha="left", va="center", fontsize=FONT_SIZE - 1,
                    color=INK)
            y = y0 + 4.6
            draw_arrow(ax, (x_k + w / 2, y0 + 3.5), (x_k + w / 2, y - 0.1))
            _, h = drawn_size(S, d_head, max_cells=max_cells)
            for x, role, name in ((x_k, "key", "K"), (x_v, "value", "V")):
                draw_block(ax, x, y, S, d_head, ROLE_COLOURS[role], f"{name} ({S}, {d_head})", light=0.7,
                           max_cells=max_cells, label_side="below")
                # the new row, in full colour (one cell tall even where the cached rows are scaled down)
                ax.add_patch(Rectangle((x, y + h - 1), w, 1, facecolor=ROLE_COLOURS[role], edgecolor=INK, lw=0.5,
                                       gid=f"new-{role}"))
            ax.text(x_v + w + 0.3, y + h - 0.5, "← new row", ha="left", va="center", fontsize=FONT_SIZE - 1,
                    color=INK, weight="bold")
            ax.text(x_k, y0 + 4.6 + tallest + 1.8, f"new token at position {S - 1}\ncomputes 1 row of K, 1 of V\n"
                    f"reads {S} of each ({rows['cached_before']} cached)", ha="left", va="top", fontsize=FONT_SIZE - 1,
                    color=INK)
        ax.text(0.5, height - 0.2, "Full colour: computed and appended at this step. Tinted: cached earlier, "
                "only read.\nThe query row meets every row of K; its weights then sum every row of V.",
                ha="left", va="bottom", fontsize=FONT_SIZE - 1, color=INK, style="italic")
    return fig
