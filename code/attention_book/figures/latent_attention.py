"""Multi-head latent attention's figures (chapter 14): what one token caches, and the absorbed computation.

``draw_cache_per_token`` draws the numbers one token adds to one layer's cache as bars to scale: K and V of every
head for MHA, of g heads for GQA, and the latent c_KV plus the shared RoPE key k^R for MLA. ``draw_absorbed_attention``
draws one head's absorbed decode step as blocks in proportion to their shapes. In both, the latent c_KV (and
anything of its width that lives in its space) is dotted, in ``LATENT_COLOUR``.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from ..validation import require_divisible, require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, ROLE_COLOURS, tint, use_book_style

# c_KV: neither a key nor a value until an up-projection makes it one, so none of the role colours: the yellow of
# Okabe and Ito's palette, which the roles leave free (pink is the scores' and weights').
LATENT_COLOUR = "#F0E442"
_HATCH = {"key": "", "value": "//", "latent": ".."}
_CHAR_WIDTH = 0.26  # about the width of one character of a label, in the absorbed figure's units


def cache_rows(n_heads, d_head, n_kv_heads, kv_lora_rank, qk_rope_head_dim):
    """The bars of ``draw_cache_per_token``: (row label, [(segment label, numbers, role), ...]) for MHA, GQA, MLA."""
    require_positive(n_heads=n_heads, d_head=d_head, n_kv_heads=n_kv_heads, kv_lora_rank=kv_lora_rank,
                     qk_rope_head_dim=qk_rope_head_dim)
    require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    return [
        (f"MHA, h = {n_heads}", [("K", n_heads * d_head, "key"), ("V", n_heads * d_head, "value")]),
        (f"GQA, g = {n_kv_heads}", [("K", n_kv_heads * d_head, "key"), ("V", n_kv_heads * d_head, "value")]),
        ("MLA", [("c_KV", kv_lora_rank, "latent"), ("k^R", qk_rope_head_dim, "key")]),
    ]


def _role_colour(role):
    return LATENT_COLOUR if role == "latent" else ROLE_COLOURS[role]


def draw_cache_per_token(n_heads=128, d_head=128, n_kv_heads=8, kv_lora_rank=512, qk_rope_head_dim=64):
    """Numbers per token per layer in the cache of MHA, GQA and MLA, as bars to scale (defaults: DeepSeek-V2's
    heads, and a GQA with 8 K/V heads of the same size).

    Top panel: all three rows at one scale. Bottom panel: GQA and MLA again, at the scale that fits GQA's bar, so
    that MLA's two parts can be read. Keys are solid, values hatched "//", the latent dotted. A part wide enough
    carries its name and size inside; a bar with a part too narrow for that gives all its parts after its total.
    The axis counts numbers with thousands separators, as the labels do. Returns the Figure.
    """
    rows = cache_rows(n_heads, d_head, n_kv_heads, kv_lora_rank, qk_rope_head_dim)
    with use_book_style():
        fig, axes = plt.subplots(2, 1, figsize=(7.2, 3.6), height_ratios=[3, 2])
        for ax, shown, title in ((axes[0], rows, "to scale"), (axes[1], rows[1:], "zoomed in: GQA and MLA")):
            widest = max(sum(n for _, n, _ in segments) for _, segments in shown)
            for y, (_, segments) in enumerate(shown):
                x, all_inside = 0, True
                for label, n, role in segments:
                    ax.add_patch(Rectangle((x, y - 0.35), n, 0.7, facecolor=tint(_role_colour(role), 0.35),
                                           edgecolor=INK, lw=0.8, hatch=_HATCH[role], gid=f"{label} {n}"))
                    if n > 0.12 * widest:
                        ax.text(x + n / 2, y, f"{label} {n:,}", ha="center", va="center", fontsize=FONT_SIZE - 1,
                                color=INK, bbox=dict(facecolor="white", edgecolor="none", pad=1))
                    else:
                        all_inside = False
                    x += n
                parts = " + ".join(f"{label} {n:,}" for label, n, _ in segments)
                ax.text(x + 0.01 * widest, y, f"{x:,}" if all_inside else f"{x:,} = {parts}",
                        ha="left", va="center", fontsize=FONT_SIZE - 1, color=INK)
            ax.set_yticks(range(len(shown)), [name for name, _ in shown])
            ax.set_ylim(len(shown) - 0.5, -0.5)
            ax.set_xlim(0, widest * 1.45)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            ax.set_title(title, fontsize=FONT_SIZE, loc="left")
            ax.spines[["top", "right"]].set_visible(False)
        axes[1].set_xlabel("numbers cached per token per layer")
        fig.tight_layout()
    return fig


def draw_absorbed_attention(S=6, kv_lora_rank=8, qk_rope_head_dim=2, qk_nope_head_dim=4, v_head_dim=4, max_cells=12):
    """One head's absorbed decode step, blocks to scale (a side longer than ``max_cells`` is scaled down; labels keep
    the true sizes), in three numbered rows.

    1. The query q_i (1, d_nope) times W_UK_i (d_nope, d_c) gives W_UK_iᵀ q_i (1, d_c); the RoPE query
       q^R_i (1, d_rope) joins it, and the two are the absorbed query (1, d_c + d_rope).
    2. An arrow brings that query to the cached rows [c_KV ; k^R] (S, d_c + d_rope): its dot product with each row
       gives the scores (1, S), and their softmax the weights (1, S).
    3. An arrow brings the weights down to head i's mix of latents (1, d_c), the weighted sum of the rows' first
       d_c numbers; times W_UV_iᵀ (d_c, d_v), it gives the head's output (1, d_v).

    The latent's numbers (c_KV, W_UK_iᵀ q_i, the mix) are dotted; c_KV and the mix in ``LATENT_COLOUR``. Returns the
    Figure.
    """
    require_positive(S=S, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
                     qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim, max_cells=max_cells)
    d_c, d_r, d_n, d_v = kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim

    def size(rows, cols):
        return drawn_size(rows, cols, max_cells=max_cells)

    def slot(width, *labels):
        """The room a block of this drawn width takes in its row: at least as wide as its labels."""
        return max([width] + [_CHAR_WIDTH * len(line) for label in labels for line in label.split("\n")])

    gap, times_gap, left = 2.8, 1.6, 1.0  # the room for an arrow; for a "×" between two blocks; the left margin
    w_q, _ = size(1, d_n)
    w_uk, h_uk = size(d_n, d_c)
    w_lat, _ = size(1, d_c)
    w_rope, _ = size(1, d_r)
    w_cache, h_cache = size(S, d_c + d_r)
    w_p, _ = size(1, S)
    w_uv, h_uv = size(d_c, d_v)
    w_out, _ = size(1, d_v)
    labels = {"q": f"q_i (1, {d_n})", "w_uk": f"W_UK_i ({d_n}, {d_c})", "query": f"absorbed query (1, {d_c}+{d_r})",
              "q_latent": f"W_UK_iᵀ q_i (1, {d_c})", "rope": f"q^R_i (1, {d_r})",
              "cache": f"cached rows [c_KV ; k^R]\n(S={S}, {d_c}+{d_r}), read by every head",
              "scores": f"scores (1, {S})", "weights": f"weights (1, {S})",
              "mix": f"head i's mix of latents (1, {d_c})",
              "w_uv": f"W_UV_iᵀ ({d_c}, {d_v})", "out": f"head output (1, {d_v})"}
    # x of each block's left side, row by row; a block sits in the middle of its slot
    s_q, s_uk, s_query = slot(w_q, labels["q"]), slot(w_uk, labels["w_uk"]), slot(w_lat + w_rope, labels["query"])
    x_q = left + (s_q - w_q) / 2
    x_uk = left + s_q + times_gap + (s_uk - w_uk) / 2
    x_query = left + s_q + times_gap + s_uk + gap + (s_query - w_lat - w_rope) / 2
    row1 = x_query + w_lat + w_rope + 0.3 + _CHAR_WIDTH * len(labels["rope"])
    s_cache, s_scores, s_weights = (slot(w_cache, labels["cache"]), slot(w_p, labels["scores"]),
                                    slot(w_p, labels["weights"]))
    x_cache = left + (s_cache - w_cache) / 2
    x_scores = left + s_cache + gap + (s_scores - w_p) / 2
    x_weights = left + s_cache + gap + s_scores + gap + (s_weights - w_p) / 2
    row2 = left + s_cache + gap + s_scores + gap + s_weights
    s_mix, s_uv, s_out = slot(w_lat, labels["mix"]), slot(w_uv, labels["w_uv"]), slot(w_out, labels["out"])
    x_mix = left + (s_mix - w_lat) / 2
    x_uv = left + s_mix + times_gap + (s_uv - w_uv) / 2
    x_out = left + s_mix + times_gap + s_uv + gap + (s_out - w_out) / 2
    row3 = left + s_mix + times_gap + s_uv + gap + s_out
    width = max(row1, row2, row3, 24) + 1
    title_room, label_room, row_gap = 1.0, 1.9, 1.6  # a row's title; the labels above its blocks; between rows
    y1 = title_room + label_room
    y2 = y1 + max(h_uk, 1.6) + row_gap + title_room + label_room
    y3 = y2 + max(h_cache, 1.6) + row_gap + title_room + label_room
    height = y3 + max(h_uv, 1.6) + 1.6
    fig, ax = new_canvas(width, height, scale=0.3)
    q, k, v, out = ROLE_COLOURS["query"], ROLE_COLOURS["key"], ROLE_COLOURS["value"], ROLE_COLOURS["output"]
    weight = ROLE_COLOURS["weight"]

    def title(y, text):
        ax.text(0.2, y - label_room - title_room + 0.1, text, ha="left", va="top", fontsize=FONT_SIZE,
                weight="bold", color=INK)

    def times(x_after, x_before, y):
        ax.text((x_after + x_before) / 2, y + 0.5, "×", ha="center", va="center", fontsize=FONT_SIZE + 2, color=INK)

    def arrow(x_after, x_before, y, label=None):
        draw_arrow(ax, (x_after + 0.2, y + 0.5), (x_before - 0.3, y + 0.5), label)

    def dots(x, y, w, h):
        ax.add_patch(Rectangle((x, y), w, h, fill=False, hatch="..", edgecolor=INK, lw=0))

    with use_book_style():
        # 1. the absorbed query
        title(y1, "1. fold W_UK_i into head i's query")
        draw_block(ax, x_q, y1, 1, d_n, q, labels["q"], max_cells=max_cells, light=0.2)
        times(x_q + w_q, x_uk, y1)
        draw_block(ax, x_uk, y1, d_n, d_c, k, labels["w_uk"], max_cells=max_cells, light=0.6)
        arrow(x_uk + w_uk, x_query, y1)
        draw_block(ax, x_query, y1, 1, d_c, q, None, max_cells=max_cells, light=0.2)
        dots(x_query, y1, w_lat, 1)
        ax.text(x_query + (w_lat + w_rope) / 2, y1 - 0.4, labels["query"], ha="center", va="bottom",
                fontsize=FONT_SIZE, color=INK)
        ax.text(x_query + w_lat / 2, y1 + 1.3, labels["q_latent"], ha="center", va="top", fontsize=FONT_SIZE - 1,
                color=INK)
        draw_block(ax, x_query + w_lat, y1, 1, d_r, q, None, max_cells=max_cells, light=0.0)
        ax.text(x_query + w_lat + w_rope + 0.3, y1 + 0.5, labels["rope"], ha="left", va="center",
                fontsize=FONT_SIZE - 1, color=INK)
        # 2. scores and weights over the cached rows
        title(y2, "2. score the cached rows, then softmax")
        draw_block(ax, x_cache, y2, S, d_c + d_r, k, labels["cache"], max_cells=max_cells, light=0.6)
        w_latent_cols = w_cache * d_c / (d_c + d_r)
        ax.add_patch(Rectangle((x_cache, y2), w_latent_cols, h_cache, facecolor=tint(LATENT_COLOUR, 0.35),
                               edgecolor=INK, lw=0.8, gid="cached latents"))
        dots(x_cache, y2, w_latent_cols, h_cache)
        arrow(x_cache + w_cache, x_scores, y2)
        scores_arrow_x = (x_cache + w_cache + x_scores) / 2
        ax.text(scores_arrow_x, y2 + 0.9, "dot\nproducts", ha="center", va="top", fontsize=FONT_SIZE - 1, color=INK)
        draw_arrow(ax, (x_query + w_lat / 2, y1 + 2.1), (scores_arrow_x, y2 + 0.35))  # the query meets every row
        draw_block(ax, x_scores, y2, 1, S, weight, labels["scores"], max_cells=max_cells, light=0.6)
        arrow(x_scores + w_p, x_weights, y2, "softmax")
        draw_block(ax, x_weights, y2, 1, S, weight, labels["weights"], max_cells=max_cells, light=0.1)
        # 3. the mix of latents, then W_UV_i
        title(y3, "3. mix the latents, then apply W_UV_i")
        draw_block(ax, x_mix, y3, 1, d_c, LATENT_COLOUR, labels["mix"], max_cells=max_cells, light=0.35,
                   label_side="below")
        dots(x_mix, y3, w_lat, 1)
        start, end = (x_weights + w_p / 2, y2 + 1.1), (x_mix + w_lat - 0.3, y3 - 0.1)
        draw_arrow(ax, start, end)  # the weights mix the latents
        ax.text(start[0] + 0.35 * (end[0] - start[0]) + 0.6, start[1] + 0.35 * (end[1] - start[1]), "weights × c_KV",
                ha="left", va="center", fontsize=FONT_SIZE - 1, color=INK)
        times(x_mix + w_lat, x_uv, y3)
        draw_block(ax, x_uv, y3, d_c, d_v, v, labels["w_uv"], max_cells=max_cells, light=0.6)
        arrow(x_uv + w_uv, x_out, y3)
        draw_block(ax, x_out, y3, 1, d_v, out, labels["out"], max_cells=max_cells, light=0.0)
        ax.text(left, height - 0.3, "dotted: numbers in the latent's space, d_c wide; the cache's last d_rope "
                "columns (solid) are k^R", ha="left", va="bottom", fontsize=FONT_SIZE - 1, color=INK)
        ax.set_xlim(0, width)
    return fig
