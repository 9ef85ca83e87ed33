"""Multi-head latent attention's figures (chapter 14): what one token caches, and the absorbed computation.

``draw_cache_per_token`` draws the numbers one token adds to one layer's cache as bars to scale: K and V of every
head for MHA, of g heads for GQA, and the latent c_KV plus the shared RoPE key k^R for MLA. ``draw_absorbed_attention``
draws one head's absorbed decode step as blocks in proportion to their shapes.
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from ..validation import require_divisible, require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, ROLE_COLOURS, tint, use_book_style

LATENT_COLOUR = ROLE_COLOURS["weight"]  # c_KV: neither a key nor a value until an up-projection makes it one


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


_HATCH = {"key": "", "value": "//", "latent": ".."}


def draw_cache_per_token(n_heads=128, d_head=128, n_kv_heads=8, kv_lora_rank=512, qk_rope_head_dim=64):
    """Numbers per token per layer in the cache of MHA, GQA and MLA, as bars to scale (defaults: DeepSeek-V2's
    heads, and a GQA with 8 K/V heads of the same size).

    Top panel: all three rows at one scale. Bottom panel: GQA and MLA again, at the scale that fits GQA's bar, so
    that MLA's two parts can be read. Keys are solid, values hatched "//", the latent dotted. Returns the Figure.
    """
    rows = cache_rows(n_heads, d_head, n_kv_heads, kv_lora_rank, qk_rope_head_dim)
    with use_book_style():
        fig, axes = plt.subplots(2, 1, figsize=(7.2, 3.6), height_ratios=[3, 2])
        for ax, shown, title in ((axes[0], rows, "to scale"), (axes[1], rows[1:], "zoomed in: GQA and MLA")):
            widest = max(sum(n for _, n, _ in segments) for _, segments in shown)
            for y, (_, segments) in enumerate(shown):
                x = 0
                for label, n, role in segments:
                    colour = LATENT_COLOUR if role == "latent" else ROLE_COLOURS[role]
                    ax.add_patch(Rectangle((x, y - 0.35), n, 0.7, facecolor=tint(colour, 0.35), edgecolor=INK,
                                           lw=0.8, hatch=_HATCH[role]))
                    if n > 0.12 * widest:
                        ax.text(x + n / 2, y, f"{label} {n:,}", ha="center", va="center", fontsize=FONT_SIZE - 1,
                                color=INK, bbox=dict(facecolor="white", edgecolor="none", pad=1))
                    x += n
                parts = " + ".join(f"{label} {n:,}" for label, n, _ in segments)
                ax.text(x + 0.01 * widest, y, f"{x:,} = {parts}" if x <= 0.12 * widest * 2 else f"{x:,}",
                        ha="left", va="center", fontsize=FONT_SIZE - 1, color=INK)
            ax.set_yticks(range(len(shown)), [name for name, _ in shown])
            ax.set_ylim(len(shown) - 0.5, -0.5)
            ax.set_xlim(0, widest * 1.45)
            ax.set_title(title, fontsize=FONT_SIZE, loc="left")
            ax.spines[["top", "right"]].set_visible(False)
        axes[1].set_xlabel("numbers cached per token per layer")
        fig.tight_layout()
    return fig


def draw_absorbed_attention(S=6, kv_lora_rank=8, qk_rope_head_dim=2, qk_nope_head_dim=4, v_head_dim=4, max_cells=12):
    """One head's absorbed decode step, blocks to scale (a side longer than ``max_cells`` is scaled down; labels keep
    the true sizes).

    Row 1: the query q_i (1, d_nope) times W_UK_i (d_nope, d_c) gives the absorbed query (1, d_c); the RoPE query
    q^R_i (1, d_rope) joins it. Row 2: that (1, d_c + d_rope) query against the cached rows (S, d_c + d_rope) gives S
    weights; the weights mix the rows' first d_c numbers (the latents) into (1, d_c); W_UV_i turns that into the
    head's output (1, d_v). Returns the Figure.
    """
    require_positive(S=S, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
                     qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim, max_cells=max_cells)
    d_c, d_r, d_n, d_v = kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim

    def size(rows, cols):
        return drawn_size(rows, cols, max_cells=max_cells)

    gap = 2.6
    w_q, _ = size(1, d_n)
    w_uk, h_uk = size(d_n, d_c)
    w_lat, _ = size(1, d_c)
    w_rope, _ = size(1, d_r)
    w_cache, h_cache = size(S, d_c + d_r)
    w_p, _ = size(1, S)
    w_uv, _ = size(d_c, d_v)
    row1 = w_q + w_uk + w_lat + w_rope + 3 * gap + 1
    row2 = w_cache + w_p + w_lat + max(w_uv, size(1, d_v)[0]) + 4 * gap + 1
    width = max(row1, row2) + 2
    y1, y2 = 2.0, 2.0 + max(h_uk, 1) + 3.2
    height = y2 + h_cache + 1.6
    fig, ax = new_canvas(width, height, scale=0.32)
    q, k, v, out = ROLE_COLOURS["query"], ROLE_COLOURS["key"], ROLE_COLOURS["value"], ROLE_COLOURS["output"]
    with use_book_style():
        ax.text(0.2, 0.3, "absorbed: fold W_UK into the query", ha="left", va="top", fontsize=FONT_SIZE,
                weight="bold", color=INK)
        x = 1.0
        draw_block(ax, x, y1, 1, d_n, q, f"q_i (1, {d_n})", max_cells=max_cells, light=0.2)
        x += w_q + 0.6
        ax.text(x, y1 + 0.5, "×", fontsize=FONT_SIZE + 2, va="center", color=INK)
        x += 0.9
        draw_block(ax, x, y1, d_n, d_c, k, f"W_UK_i ({d_n}, {d_c})", max_cells=max_cells, light=0.6)
        x += w_uk
        draw_arrow(ax, (x + 0.2, y1 + 0.5), (x + gap - 0.3, y1 + 0.5))
        x += gap
        draw_block(ax, x, y1, 1, d_c, q, f"absorbed query (1, {d_c})", max_cells=max_cells, light=0.2)
        ax.add_patch(Rectangle((x, y1), w_lat, 1, fill=False, hatch="..", edgecolor=INK, lw=0))
        x += w_lat
        draw_block(ax, x, y1, 1, d_r, q, None, max_cells=max_cells, light=0.0)
        ax.text(x + w_rope / 2, y1 + 1.4, f"q^R_i ({d_r})", ha="center", va="top", fontsize=FONT_SIZE - 1, color=INK)
        ax.text(0.2, y2 - 1.6, "MQA over the cached rows [c_KV ; k^R], shared by every head", ha="left", va="top",
                fontsize=FONT_SIZE, weight="bold", color=INK)
        x = 1.0
        draw_block(ax, x, y2, S, d_c + d_r, k, f"cache (S={S}, {d_c}+{d_r})", max_cells=max_cells, light=0.6)
        ax.add_patch(Rectangle((x, y2), w_cache * d_c / (d_c + d_r), h_cache, fill=False, hatch="..",
                               edgecolor=INK, lw=0))
        x += w_cache
        draw_arrow(ax, (x + 0.2, y2 + 0.5), (x + gap - 0.3, y2 + 0.5), "scores")
        x += gap
        draw_block(ax, x, y2, 1, S, ROLE_COLOURS["weight"], f"weights (1, {S})", max_cells=max_cells, light=0.2)
        x += w_p
        draw_arrow(ax, (x + 0.2, y2 + 0.5), (x + gap - 0.3, y2 + 0.5), "mix c_KV")
        x += gap
        draw_block(ax, x, y2, 1, d_c, v, f"(1, {d_c})", max_cells=max_cells, light=0.2)
        ax.add_patch(Rectangle((x, y2), w_lat, 1, fill=False, hatch="..", edgecolor=INK, lw=0))
        x += w_lat
        draw_arrow(ax, (x + 0.2, y2 + 0.5), (x + gap - 0.3, y2 + 0.5), "× W_UV_iᵀ")
        x += gap
        draw_block(ax, x, y2, 1, d_v, out, f"head output (1, {d_v})", max_cells=max_cells, light=0.0)
        ax.text(1.0, y2 + h_cache + 0.6, "dotted: the latent c_KV (d_c numbers), read as key and as value; "
                "the last d_rope columns: k^R", ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK)
        ax.set_xlim(0, width)
    return fig
