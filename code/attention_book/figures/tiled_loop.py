"""The tiled loop of chapter 13, one step of it: one query block, the key/value blocks streaming past, one tile.

Tiled attention in FlashAttention-2's loop order takes the queries in blocks of ``block_q`` (the outer loop) and, for
each, walks the keys and values in blocks of ``block_k`` (the inner loop). At each step it reads one key block and
one value block from main memory, makes the (block_q, block_k) tile of scores, and folds it into three running
values per query: the maximum m, the sum ℓ of exp(score - m) and the unnormalised output acc. When the tile raises
the maximum to m', the old ℓ and acc are rescaled by exp(m - m'). After the last key block the query block's output
is acc / ℓ, written once. No (L, S) matrix is ever stored.

``tile_step`` counts what one step reads and holds; ``draw_tiled_loop`` draws that step, blocks to scale.
"""
import numbers

from matplotlib.path import Path
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ..validation import require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, LINE_WIDTH, ROLE_COLOURS, tint, use_book_style


def _blocks(n, block):
    return -(-n // block)  # ceil(n / block)


def tile_step(L, S, block_q, block_k, d_head, query_block=0, key_block=0):
    """What one step of the tiled loop reads from main memory and holds on chip, for one head.

    Args:
        L, S: queries and keys; block_q, block_k: queries and keys per tile (need not divide L or S);
        d_head: the width of queries, keys and values.
        query_block: which query block (0-based) the outer loop is at; key_block: which key block the inner loop is
            at, within that query block.

    Returns:
        a dict: ``queries`` and ``keys``, the (start, stop) ranges of this step; ``n_query_blocks`` and
        ``n_key_blocks``; ``read``, the numbers this step reads from main memory (its key block and value block;
        the query block is read once, before the first step, and counted in ``read_per_query_block``);
        ``on_chip``, the numbers it holds: the query block, the key and value blocks, the tile of scores, and m, ℓ
        and acc; ``read_per_query_block``, the numbers one query block reads in all (its queries once, every key
        and value block once); ``written_per_query_block``, the output rows written once at the end; and
        ``scores``, L × S, the numbers the whole score matrix would hold if it were stored.
    """
    require_positive(L=L, S=S, block_q=block_q, block_k=block_k, d_head=d_head)
    n_q, n_k = _blocks(L, block_q), _blocks(S, block_k)
    for name, value, n in (("query_block", query_block, n_q), ("key_block", key_block, n_k)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < n:
            raise ValueError(f"{name}={value!r} must be an integer from 0 to {n - 1}: there are {n} blocks")
    i0, j0 = query_block * block_q, key_block * block_k
    i1, j1 = min(i0 + block_q, L), min(j0 + block_k, S)
    rows, cols = i1 - i0, j1 - j0
    return {
        "queries": (i0, i1), "keys": (j0, j1), "n_query_blocks": n_q, "n_key_blocks": n_k,
        "read": 2 * cols * d_head,
        "on_chip": rows * d_head + 2 * cols * d_head + rows * cols + 2 * rows + rows * d_head,
        "read_per_query_block": rows * d_head + 2 * S * d_head,
        "written_per_query_block": rows * d_head,
        "scores": L * S,
    }


def _span(n, max_cells):
    """Drawn length of a side of n cells, and the drawn length of one cell along it."""
    length = min(n, max_cells)
    return length, length / n


DONE, LATER = 0.45, 0.8  # the tints of blocks already done and of blocks to come; this step's block is in full colour


def _blocked(ax, x, y, rows, cols, colour, blocks_along, block, now, max_cells, label, gid, label_side="above"):
    """A (rows, cols) matrix cut into blocks of ``block`` along its rows ("rows") or columns ("cols"): blocks before
    ``now`` in a middle tint (done), block ``now`` in full colour, the later ones pale (to come). Returns the drawn
    (width, height)."""
    width, cw = _span(cols, max_cells)
    height, ch = _span(rows, max_cells)
    n = rows if blocks_along == "rows" else cols
    unit = ch if blocks_along == "rows" else cw
    for b in range(_blocks(n, block)):
        start, stop = b * block, min((b + 1) * block, n)
        fill = colour if b == now else tint(colour, DONE if b < now else LATER)
        if blocks_along == "rows":
            box = (x, y + start * unit, width, (stop - start) * unit)
        else:
            box = (x + start * unit, y, (stop - start) * unit, height)
        ax.add_patch(Rectangle(box[:2], *box[2:], facecolor=fill, edgecolor=INK, lw=0.6,
                               gid=f"{gid}-now" if b == now else (f"{gid}-done" if b < now else f"{gid}-later")))
    if rows <= max_cells:
        for r in range(1, rows):
            ax.plot([x, x + width], [y + r * ch] * 2, color=INK, lw=0.2)
    if cols <= max_cells:
        for c in range(1, cols):
            ax.plot([x + c * cw] * 2, [y, y + height], color=INK, lw=0.2)
    ax.add_patch(Rectangle((x, y), width, height, fill=False, edgecolor=INK, lw=LINE_WIDTH))
    if label:
        ty = y - 0.4 if label_side == "above" else y + height + 0.4
        ax.text(x + width / 2, ty, label, ha="center", va="bottom" if label_side == "above" else "top",
                fontsize=FONT_SIZE, color=INK)
    return width, height


def draw_tiled_loop(L=12, S=16, block_q=4, block_k=4, d_head=4, query_block=1, key_block=2, max_cells=16):
    """One step of tiled attention (FlashAttention-2's loop order) for one head, blocks to scale, read left to right:
    what main memory holds, what the chip holds at this step, and where the output goes.

    Left, main memory, read: Q (L, d_head) with the current query block in full colour; Kᵀ above and Vᵀ below the
    place of the (L, S) score matrix, drawn on their sides so that key block j sits above and below column block j
    of the scores. A key on the legend: this step's block in full colour, blocks done in a middle tint, blocks to
    come pale; the key/value blocks stream past from left to right. The score matrix is only an outline (it is never
    stored), with this step's tile marked in its row of tiles.

    Middle, on chip: what this step holds, laid out as the left part is: the query block, key block j above and
    value block j below the (block_q, block_k) tile of scores, and the running maximum m, sum ℓ (block_q, 1 each)
    and output acc (block_q, d_head), rescaled by exp(m - m') when the tile raises the maximum to m'.

    Right, main memory, written: O (L, d_head): the rows of earlier query blocks done (written), this query block's
    rows in full colour and outlined (written once, after the last key block), later rows to come.

    Below the chip's blocks, the step's four operations in order: the tile of scores (scaled by 1 / sqrt(d_head)), the
    new maximum, the rescaling of ℓ and acc by exp(m - m') with the tile's terms added, and m <- m'.

    Args:
        L, S, block_q, block_k, d_head: the reader's sizes (blocks need not divide L or S).
        query_block, key_block: the step to show, 0-based (see ``tile_step``).
        max_cells: a side longer than this is drawn this long, its cells not drawn one by one (labels keep the true
            sizes).

    Returns the matplotlib Figure.
    """
    step = tile_step(L, S, block_q, block_k, d_head, query_block, key_block)
    require_positive(max_cells=max_cells)
    (i0, i1), (j0, j1) = step["queries"], step["keys"]
    rows, cols = i1 - i0, j1 - j0
    q_c, k_c, v_c = ROLE_COLOURS["query"], ROLE_COLOURS["key"], ROLE_COLOURS["value"]
    w_c, o_c = ROLE_COLOURS["weight"], ROLE_COLOURS["output"]

    w_d, _ = _span(d_head, max_cells)  # the drawn width of d_head columns
    w_S, cw = _span(S, max_cells)
    h_L, ch = _span(L, max_cells)
    w_qb, h_qb = drawn_size(rows, d_head, max_cells=max_cells)  # the query block, and acc
    w_t, h_t = drawn_size(rows, cols, max_cells=max_cells)  # the tile
    w_1, _ = drawn_size(rows, 1, max_cells=max_cells)  # m and ℓ
    pad, gap = 1.2, 1.6
    top = 4.2  # the regions' top edge, below the title
    y_k = top + 4.0  # Kᵀ, leaving room for the read arrows above it
    y_s = y_k + w_d + 2.6  # the scores and Q
    y_v = y_s + h_L + 2.6  # Vᵀ
    # left: main memory, read
    x_q = 0.2 + pad
    x_s = x_q + w_d + 3.0
    memory_right = max(x_s + w_S + pad, 19.5)  # at least as wide as its labels
    # middle: on chip
    x_chip = memory_right + 2.0
    x_qb = x_chip + pad
    x_t = x_qb + w_qb + max(gap, 5.0 - (w_qb + w_t) / 2)  # the blocks' captions apart
    x_m = x_t + w_t + 2.4
    x_l = x_m + w_1 + 1.0
    x_acc = x_l + w_1 + 1.0
    y_row = y_s + max(0.0, min(i0 * ch, h_L - h_t))  # the chip's row of this query block, level with the scores'
    y_rules = max(y_v - 4.0, y_row + max(h_t, h_qb) + 3.4)  # the four steps, below the running values' caption
    bottom = max(y_v + w_d + 4.0, y_rules + 10.0)  # the regions' bottom edge, below the read arrow under Vᵀ
    x_eq = max(x_m, x_t + w_t + 5.5)  # the update rules, clear of the blocks' labels
    chip_right = max(x_acc + w_qb, x_eq + 17.5) + pad
    # right: main memory, written
    x_out_box = chip_right + 3.6
    x_o = x_out_box + max(pad, (9.0 - w_d) / 2)
    width = x_out_box + max(w_d + 2 * pad, 9.0) + 0.2
    height = bottom + 4.2
    fig, ax = new_canvas(width, height, scale=0.2)

    with use_book_style():
        ax.text(0.3, 0.3, f"Tiled attention, one step: query block {query_block} of {step['n_query_blocks']}, "
                f"key block {key_block} of {step['n_key_blocks']} (counting from 0)", ha="left", va="top",
                fontsize=FONT_SIZE + 1, weight="bold", color=INK)
        shortened = f"; sides longer than {max_cells} drawn {max_cells} long" if max(L, S, d_head) > max_cells else ""
        ax.text(0.3, 1.9, f"L = {L}, S = {S}, block_q = {block_q}, block_k = {block_k}, d_head = {d_head}; "
                f"this step: queries {i0}..{i1 - 1} against keys {j0}..{j1 - 1}{shortened}", ha="left", va="top",
                fontsize=FONT_SIZE, color=INK)
        for x0, x1, name, gid in ((0.2, memory_right, "main memory (HBM on a GPU): read", "memory"),
                                  (x_chip, chip_right, "on chip (SRAM on a GPU): this step", "chip"),
                                  (x_out_box, width - 0.2, "main memory:\nwritten", "memory-out")):
            ax.add_patch(FancyBboxPatch((x0, top), x1 - x0, bottom - top, boxstyle="round,pad=0,rounding_size=0.8",
                                        facecolor=tint(INK, 0.95 if gid == "chip" else 0.98), edgecolor=INK, lw=0.7,
                                        ls="--" if gid == "chip" else "-", gid=gid))
            ax.text(x0 + 0.5, top + 0.4, name, ha="left", va="top", fontsize=FONT_SIZE, weight="bold", color=INK)

        # left: main memory, read
        _blocked(ax, x_q, y_s, L, d_head, q_c, "rows", block_q, query_block, max_cells, f"Q ({L}, {d_head})", "q")
        _blocked(ax, x_s, y_k, d_head, S, k_c, "cols", block_k, key_block, max_cells, None, "k")
        _blocked(ax, x_s, y_v, d_head, S, v_c, "cols", block_k, key_block, max_cells, None, "v")
        for y, name in ((y_k, "Kᵀ"), (y_v, "Vᵀ")):
            ax.text(x_s - 0.4, y + w_d / 2, f"{name}\n({d_head}, {S})", ha="right", va="center", fontsize=FONT_SIZE,
                    color=INK)
        ax.add_patch(Rectangle((x_s, y_s), w_S, h_L, fill=False, edgecolor=INK, lw=0.8, ls="--", gid="scores"))
        ax.add_patch(Rectangle((x_s, y_s + i0 * ch), w_S, rows * ch, facecolor=tint(w_c, 0.85), edgecolor=INK,
                               lw=0.5, ls="--", gid="score-row"))
        ax.add_patch(Rectangle((x_s + j0 * cw, y_s + i0 * ch), cols * cw, rows * ch, facecolor=tint(w_c, 0.35),
                               edgecolor=INK, lw=1.0, ls="--", gid="tile"))
        ax.text(x_s, y_s + h_L + 0.3, f"(L, S) = ({L}, {S}) scores: never stored", ha="left", va="top",
                fontsize=FONT_SIZE - 1, color=INK, style="italic")
        x_key = x_s  # the legend, a swatch for each state of a block, under Kᵀ
        for fill, name in ((k_c, "this step"), (tint(k_c, DONE), "done"), (tint(k_c, LATER), "to come  →")):
            ax.add_patch(Rectangle((x_key, y_k + w_d + 0.45), 0.8, 0.8, facecolor=fill, edgecolor=INK, lw=0.5,
                                   gid="legend"))
            ax.text(x_key + 1.1, y_k + w_d + 0.85, name, ha="left", va="center", fontsize=FONT_SIZE - 2, color=INK)
            x_key += 1.1 + 0.4 * len(name) + 1.0

        # middle: on chip, laid out as the left part
        draw_block(ax, x_qb, y_row, rows, d_head, q_c, None, light=0.0, max_cells=max_cells)
        ax.text(x_qb + w_qb / 2, y_row - 0.4, "Q block", ha="center", va="bottom", fontsize=FONT_SIZE - 1, color=INK)
        ax.text(x_qb + w_qb / 2, y_row + h_qb + 0.4, "read once,\nbefore key\nblock 0", ha="center", va="top",
                fontsize=FONT_SIZE - 2, color=INK)
        draw_block(ax, x_t, y_k, d_head, cols, k_c, None, light=0.0, max_cells=max_cells)
        draw_block(ax, x_t, y_v, d_head, cols, v_c, None, light=0.0, max_cells=max_cells)
        ax.text(x_t + w_t + 0.4, y_k + w_d / 2, f"Kᵀ, block {key_block}\n({d_head}, {cols})", ha="left",
                va="center", fontsize=FONT_SIZE - 1, color=INK)
        ax.text(x_t + w_t + 0.4, y_v + w_d / 2, f"Vᵀ, block {key_block}\n({d_head}, {cols})", ha="left",
                va="center", fontsize=FONT_SIZE - 1, color=INK)
        draw_block(ax, x_t, y_row, rows, cols, w_c, None, light=0.0, max_cells=max_cells)
        ax.text(x_t + w_t / 2, y_row + h_t + 0.4, f"tile s\n({rows}, {cols})", ha="center", va="top",
                fontsize=FONT_SIZE - 1, color=INK)
        for x, name in ((x_m, "m"), (x_l, "ℓ")):
            draw_block(ax, x, y_row, rows, 1, w_c, None, light=0.6, max_cells=max_cells)
            ax.text(x + w_1 / 2, y_row - 0.4, name, ha="center", va="bottom", fontsize=FONT_SIZE, color=INK)
        draw_block(ax, x_acc, y_row, rows, d_head, o_c, None, light=0.0, max_cells=max_cells)
        ax.text(x_acc + w_qb / 2, y_row - 0.4, "acc", ha="center", va="bottom", fontsize=FONT_SIZE, color=INK)
        ax.text(x_m, y_row + h_qb + 0.4, f"running values of the {rows} quer{'y' if rows == 1 else 'ies'},\n"
                "kept from one key block to the next",
                ha="left", va="top", fontsize=FONT_SIZE - 2, color=INK)
        draw_arrow(ax, (x_t + w_t + 0.2, y_row + h_t / 2), (x_m - 0.2, y_row + min(h_t, h_qb) / 2))
        ax.text(x_eq, y_rules,
                r"1. the tile of scores: $s = \mathrm{Q\ block} \cdot \mathrm{K\ block}^\top / \sqrt{d_\mathrm{head}}$"
                "\n"
                r"2. the new maximum: $m' = \max(m,\ \mathrm{row\ max\ of}\ s)$" "\n"
                r"3. rescale by $e^{m-m'}$, add the tile:" "\n"
                r"    $\ell \leftarrow \ell\ e^{m-m'} + \mathrm{row\ sum\ of}\ e^{s-m'}$" "\n"
                r"    $\mathrm{acc} \leftarrow \mathrm{acc}\ e^{m-m'} + e^{s-m'}\ \mathrm{V\ block}$" "\n"
                r"4. $m \leftarrow m'$; on to the next key block", ha="left", va="top", fontsize=FONT_SIZE - 1,
                color=INK, linespacing=1.8)
        # the reads: this step's key and value blocks, from main memory to the chip, over and under the strips
        for y0, side in ((y_k - 0.15, -1), (y_v + w_d + 0.15, 1)):
            x_a, x_b, y_bar = x_s + (j0 + cols / 2) * cw, x_t + w_t / 2, y0 + side * 1.6
            ax.add_patch(FancyArrowPatch(path=Path([(x_a, y0), (x_a, y_bar), (x_b, y_bar), (x_b, y0)],
                                                   [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO]),
                                         arrowstyle="-|>", color=INK, lw=LINE_WIDTH, mutation_scale=10, gid="read"))
            ax.text((x_a + x_b) / 2, y_bar - 0.25 if side < 0 else y_bar + 0.25, "read at this step", ha="center",
                    va="bottom" if side < 0 else "top", fontsize=FONT_SIZE - 1, color=INK,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.5))

        # right: main memory, written
        # earlier query blocks' rows done (written), this block's rows outlined (written after its last key block)
        _blocked(ax, x_o, y_s, L, d_head, o_c, "rows", block_q, query_block, max_cells, f"O ({L}, {d_head})", "o")
        ax.add_patch(Rectangle((x_o, y_s + i0 * ch), w_d, rows * ch, fill=False, edgecolor=INK, lw=1.2, ls=":",
                               gid="o-block"))
        draw_arrow(ax, (x_acc + w_qb + 0.2, y_row + h_qb / 2), (x_o - 0.2, y_s + (i0 + rows / 2) * ch))
        ax.text(x_o + w_d / 2, y_s + h_L + 0.4, f"rows {i0}..{i1 - 1}\n= acc / ℓ,\nwritten once,\nafter the last\n"
                "key block", ha="center", va="top", fontsize=FONT_SIZE - 2, color=INK)

        ax.text(0.3, bottom + 0.6,
                f"This step reads {step['read']:,} numbers (a key block and a value block) and holds "
                f"{step['on_chip']:,} on chip. One query block reads its queries once and every key and value block "
                f"once ({step['read_per_query_block']:,} numbers),\nand writes its {step['written_per_query_block']:,} "
                f"output numbers once. The {step['scores']:,} scores are never written to main memory. Kᵀ and Vᵀ are "
                f"drawn on their sides so that each key's column lines up with its column of scores.\nEach query "
                f"block runs this loop on its own, needing nothing from the others: on a GPU, each on its own "
                f"multiprocessor, in parallel.",
                ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK)
    return fig
