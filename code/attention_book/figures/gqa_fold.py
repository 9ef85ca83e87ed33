"""GQA's fold against repeat_kv: what each way of sharing a K/V head copies and reads (chapter 8).

``fold_bytes`` counts the bytes of K and V that each way writes and reads for one attention call;
``draw_gqa_fold`` draws both ways for one group (or a few) and prints those bytes.

- **repeat_kv** copies each K/V head (B, g, S, d_head) once per query head of its group into (B, h, S, d_head):
  it reads K and V once to copy them, writes h / g copies, and attention then reads the copies.
- **The fold** stacks the h / g query heads of a group as rows, (h / g)·L of them, against the group's one K/V
  head: no copy, and each K/V head is read once.
"""
from matplotlib.patches import Rectangle

from ..validation import require_divisible, require_positive
from .blocks import draw_arrow, draw_block, drawn_size, new_canvas
from .style import FONT_SIZE, INK, head_colour, kv_head_colour, use_book_style


def fold_bytes(batch, n_heads, n_kv_heads, kv_len, d_head, bytes_per_element=4):
    """Bytes of K and V written and read by one GQA attention call, done by repeating K/V or by folding.

    Args:
        batch, n_heads, n_kv_heads, kv_len, d_head: B, h, g, S and d_head; g must divide h.
        bytes_per_element: 4 in fp32, 2 in fp16 or bf16.

    Returns:
        A dict ``{"repeat_kv": {"written": ..., "read": ...}, "fold": {"written": ..., "read": ...}}``:
        repeat_kv reads K and V (B, g, S, d_head) to copy them, writes the copies (B, h, S, d_head) and reads
        them again in attention; the fold writes nothing and reads K and V once.
        (The queries, (B, h, L, d_head), are read by both alike and not counted.)
    """
    require_positive(batch=batch, n_heads=n_heads, n_kv_heads=n_kv_heads, kv_len=kv_len, d_head=d_head,
                     bytes_per_element=bytes_per_element)
    require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    per_head = 2 * batch * kv_len * d_head * bytes_per_element  # one K/V head's keys and values
    kv, copies = n_kv_heads * per_head, n_heads * per_head
    return {"repeat_kv": {"written": copies, "read": kv + copies}, "fold": {"written": 0, "read": kv}}


def format_bytes(n):
    """Bytes in the largest binary unit that keeps the number at least 1: 384 B, 12 KiB, 1.5 MiB, 2 GiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def draw_gqa_fold(n_heads=8, n_kv_heads=2, seq_len=2, kv_len=4096, d_head=128, batch=1, bytes_per_element=4,
                  max_groups=1, max_cells=6):
    """Top, repeat_kv: each K/V head copied for its group. Bottom, the fold: the group's query heads as rows.

    Args:
        n_heads, n_kv_heads: h query heads and g K/V heads (g divides h).
        seq_len, kv_len, d_head: L queries per head, S keys, and the head width; blocks are drawn to scale, a side
            longer than ``max_cells`` scaled down (its label keeps the true size).
        batch, bytes_per_element: B and the element size, for the bytes printed under each title (``fold_bytes``,
            for all g groups).
        max_groups: how many groups to draw; the others are the same, and a note says so.

    Query heads are drawn in their head colours; K/V heads and their copies in their group's hue, the copies
    hatched. Returns the matplotlib Figure.
    """
    require_positive(n_heads=n_heads, n_kv_heads=n_kv_heads, seq_len=seq_len, kv_len=kv_len, d_head=d_head,
                     batch=batch, bytes_per_element=bytes_per_element, max_groups=max_groups, max_cells=max_cells)
    require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    group = n_heads // n_kv_heads
    shown = min(n_kv_heads, max_groups)
    counted = fold_bytes(batch, n_heads, n_kv_heads, kv_len, d_head, bytes_per_element)
    w_q, h_q = drawn_size(seq_len, d_head, max_cells=max_cells)
    w_kv, h_kv = drawn_size(kv_len, d_head, max_cells=max_cells)
    h_stack = group * seq_len * h_q / min(seq_len, max_cells)  # every query row of the group, stacked
    x_copies, step = w_kv + 4.0, max(w_kv, w_q) + 1.2
    title_h, label_h = 3.2, 1.4
    top_row = label_h + h_q + 0.6 + h_kv + label_h  # a query head above its copy, both labelled
    bottom_row = label_h + max(h_stack, h_kv) + 0.8
    note_h = 1.2 if shown < n_kv_heads else 0.0
    width = max(x_copies + group * step, x_copies + w_q + 14.0)
    height = title_h + shown * top_row + note_h + 1.0 + title_h + shown * bottom_row + note_h
    fig, ax = new_canvas(width, height, scale=0.22)
    others = n_kv_heads - shown
    note = "(the other group alike)" if others == 1 else f"(the other {others} groups alike)"
    rep, fold = counted["repeat_kv"], counted["fold"]
    groups = {1: "its one group", 2: "both groups"}.get(n_kv_heads, f"all {n_kv_heads} groups")
    sizes = f"{groups}, B = {batch}, {bytes_per_element} bytes per number"

    with use_book_style():
        y = 0.0
        _title(ax, y, "repeat_kv: each K/V head copied for every query head of its group",
               f"K and V, {sizes}: writes {format_bytes(rep['written'])} of copies, "
               f"reads {format_bytes(rep['read'])} ({format_bytes(rep['read'] - rep['written'])} to copy, "
               f"{format_bytes(rep['written'])} in attention)")
        y += title_h
        for j in range(shown):
            hue = kv_head_colour(j, n_heads, n_kv_heads)
            y_kv = y + label_h + h_q + 0.6
            draw_block(ax, 0, y_kv, kv_len, d_head, hue, f"K{j}, V{j} ({kv_len}, {d_head})", light=0.3,
                       max_cells=max_cells)
            draw_arrow(ax, (w_kv + 0.2, y_kv + h_kv / 2), (x_copies - 0.2, y_kv + h_kv / 2))
            ax.text((w_kv + x_copies) / 2, y_kv + h_kv / 2 + 0.4, f"×{group}", ha="center", va="top",
                    fontsize=FONT_SIZE - 1, color=INK)
            for m in range(group):
                i, x = j * group + m, x_copies + m * step
                draw_block(ax, x, y + label_h, seq_len, d_head, head_colour(i), f"Q{i}", light=0.0,
                           max_cells=max_cells)
                draw_block(ax, x, y_kv, kv_len, d_head, hue, f"copy for Q{i}", light=0.3, max_cells=max_cells,
                           label_side="below")
                ax.add_patch(_hatch(x, y_kv, w_kv, h_kv))
            y += top_row
        if note_h:
            ax.text(0, y, note, ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK, style="italic")
            y += note_h
        y += 1.0
        ax.plot([0, width], [y - 0.5] * 2, color=INK, lw=0.5, ls=":")
        _title(ax, y, f"the fold: the group's {group} query heads stacked as {group}·L rows against its one K/V head",
               f"K and V, {sizes}: writes nothing, reads {format_bytes(fold['read'])}")
        y += title_h
        for j in range(shown):
            hue = kv_head_colour(j, n_heads, n_kv_heads)
            draw_block(ax, 0, y + label_h, kv_len, d_head, hue, f"K{j}, V{j} ({kv_len}, {d_head})", light=0.3,
                       max_cells=max_cells)
            first = j * group
            for m in range(group):
                draw_block(ax, x_copies, y + label_h + m * h_stack / group, seq_len, d_head, head_colour(first + m),
                           None, light=0.0, max_cells=max_cells)
                ax.text(x_copies + w_q + 0.3, y + label_h + (m + 0.5) * h_stack / group, f"Q{first + m}",
                        ha="left", va="center", fontsize=FONT_SIZE - 1, color=INK)
            ax.text(x_copies + w_q / 2, y + label_h - 0.4,
                    f"Q{first}..Q{first + group - 1} ({group * seq_len}, {d_head})", ha="center", va="bottom",
                    fontsize=FONT_SIZE, color=INK)
            draw_arrow(ax, (x_copies - 0.2, y + label_h + min(h_stack, h_kv) / 2),
                       (w_kv + 0.2, y + label_h + min(h_stack, h_kv) / 2))
            ax.text((w_kv + x_copies) / 2, y + label_h + min(h_stack, h_kv) / 2 + 0.4, "read once", ha="center",
                    va="top", fontsize=FONT_SIZE - 1, color=INK)
            y += bottom_row
        if note_h:
            ax.text(0, y, note, ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK, style="italic")
    return fig


def _title(ax, y, title, subtitle):
    ax.text(0, y + 0.2, title, ha="left", va="top", fontsize=FONT_SIZE + 1, color=INK, weight="bold")
    ax.text(0, y + 1.6, subtitle, ha="left", va="top", fontsize=FONT_SIZE, color=INK)


def _hatch(x, y, width, height):
    """Diagonal hatching over a block: the mark of a copy, readable without colour."""
    return Rectangle((x, y), width, height, fill=False, hatch="///", edgecolor=INK, lw=0, gid="copy")
