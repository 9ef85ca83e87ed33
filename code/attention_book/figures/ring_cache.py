"""The ring buffer of a sliding window (chapter 15), slot by slot, before and after a chunk is appended.

``ring_cache_states`` runs the package's own ``RingKVCache`` on the reader's sizes, with each key set to its token's
position, and reads back which token sits in which slot, what ``append`` returns for a chunk and the mask that goes
with it. ``draw_ring_cache`` draws those states as rows of cells, one cell per slot or per returned key, each with
the position of the token it holds: the sink slots kept for good, the ring's slots and their wrap-around, the keys a
chunk of L new tokens attends to (the slots as they were, then the chunk: S = used + L), which of them each query of
the chunk may see, and the slots after the chunk has overwritten some of them.

Visual language: the cache holds keys (and values alike), so its cells take the key colour: tinted for tokens cached
before the chunk, full colour for the chunk's tokens, hatched for the sinks; the mask's cells that may attend take
the colour of weights, as in every mask of the book.
"""
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..cache_diet.ring_cache import RingKVCache
from ..validation import require_positive
from .blocks import new_canvas
from .style import ARROW, FONT_SIZE, INK, ROLE_COLOURS, text_colour_on, tint, use_book_style

SINK_HATCH = "///"


def ring_cache_states(window, n_sinks, n_tokens, chunk):
    """What a ``RingKVCache`` of ``n_sinks`` sinks and ``window`` ring slots holds after ``n_tokens`` tokens, and
    what appending a chunk of ``chunk`` more tokens returns and leaves.

    Returns a dict of plain lists (positions are the tokens' absolute positions in the text, -1 for an empty slot):
        ``before``: the position in each slot before the chunk (n_sinks + window entries);
        ``returned``: the positions of the keys ``append`` returns, in its order (S entries);
        ``mask``: ``causal_mask(chunk)`` of those keys, chunk rows of S booleans (True = may attend);
        ``after``: the position in each slot after the chunk;
        ``used``: the slots filled before the chunk; ``next_slot``: the slot the chunk's first token takes.
    """
    require_positive(window=window, chunk=chunk)
    for name, value in (("n_sinks", n_sinks), ("n_tokens", n_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}={value!r} must be an integer >= 0")
    cache = RingKVCache(1, 1, 1, window, n_sinks)

    def positions(start, n):  # keys and values whose one number is the token's position: (1, 1, n, 1)
        return torch.arange(start, start + n, dtype=torch.float32).reshape(1, 1, n, 1)

    if n_tokens:
        cache.append(positions(0, n_tokens), positions(0, n_tokens))
    before, used = cache.slot_positions.tolist(), cache.n_slots_used
    keys, _ = cache.append(positions(n_tokens, chunk), positions(n_tokens, chunk))
    return {"before": before, "returned": keys[0, 0, :, 0].long().tolist(),
            "mask": cache.causal_mask(chunk).tolist(), "after": cache.slot_positions.tolist(), "used": used,
            "next_slot": cache.slot_of(n_tokens)}


def _cell(ax, x, y, position, colour, light, hatch=None, gid=None):
    """One slot or key: a unit square at (x, y) with the position of the token it holds (blank if empty)."""
    face = "#FFFFFF" if position < 0 else tint(colour, light)
    ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor=INK, lw=0.6, hatch=hatch, gid=gid))
    if position >= 0:
        ax.text(x + 0.5, y + 0.5, str(position), ha="center", va="center", fontsize=FONT_SIZE - 1,
                color=text_colour_on(face), gid=f"{gid}-label" if gid else None,
                bbox=dict(boxstyle="square,pad=0.05", facecolor=face, edgecolor="none") if hatch else None)


def _count(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def _tokens(word, positions):
    """'query 5' or 'queries 5-9' (the positions are consecutive)."""
    if len(positions) == 1:
        return f"{word} {positions[0]}"
    return f"{'queries' if word == 'query' else word + 's'} {positions[0]}-{positions[-1]}"


def _brace(ax, x0, x1, y, text):
    """A bracket under cells x0 .. x1 (data units) with a label under it."""
    ax.plot([x0 + 0.05, x0 + 0.05, x1 - 0.05, x1 - 0.05], [y, y + 0.25, y + 0.25, y], color=INK, lw=0.8)
    ax.text((x0 + x1) / 2, y + 0.4, text, ha="center", va="top", fontsize=FONT_SIZE - 1, color=INK)


def draw_ring_cache(window=8, n_sinks=2, n_tokens=13, chunk=6, show_mask=True):
    """The slots of a ``RingKVCache`` before and after a chunk, and what the chunk's ``append`` returns.

    Args:
        window: the ring's slots W (each query sees its own token and the W - 1 before it).
        n_sinks: the first tokens kept for good, in slots 0 .. n_sinks - 1.
        n_tokens: tokens appended before the chunk (its ``length``, the position of the chunk's first token).
        chunk: L, the tokens of the chunk (1 for a decode step).
        show_mask: also draw ``causal_mask(L)``, which of the returned keys each query of the chunk may see.

    Rows, top to bottom: the slots before the chunk, each with the position of the token it holds, the sinks
    hatched, an arrow where the chunk's first token will be written and one showing the ring's wrap-around; the
    S keys ``append`` returns (for L > 1: the used slots as they were, then the chunk, S = used + L; for L = 1: the
    filled slots, the new token's own included); the mask; the slots after the chunk, the chunk's tokens in full
    colour. Every cell is one slot or one key, so the figure grows with the sizes: keep them small (a few dozen
    slots at most). Returns the matplotlib Figure.
    """
    states = ring_cache_states(window, n_sinks, n_tokens, chunk)
    n_slots, S, used = n_sinks + window, len(states["returned"]), states["used"]
    key = ROLE_COLOURS["key"]
    new = set(range(n_tokens, n_tokens + chunk))
    left = 6.0  # the column of row labels
    width = left + max(n_slots, S) + 1.0
    y_before, y_returned = 2.6, 9.0
    y_mask = y_returned + 3.6
    y_after = (y_mask + chunk + 2.6) if show_mask else (y_returned + 4.4)
    height = y_after + 4.0
    fig, ax = new_canvas(width, height, scale=0.32)
    with use_book_style():
        def row_label(y, text):
            ax.text(left - 0.4, y + 0.5, text, ha="right", va="center", fontsize=FONT_SIZE - 1, color=INK)

        def title(y, text):
            ax.text(0.2, y, text, ha="left", va="bottom", fontsize=FONT_SIZE, color=INK, weight="bold")

        def slots(y, held, gid):
            for s, position in enumerate(held):
                sink = s < n_sinks
                _cell(ax, left + s, y, position, key, 0.0 if position in new else 0.65,
                      hatch=SINK_HATCH if sink else None, gid=gid)
            row_label(y, "token in slot")
            for s in range(n_slots):  # slot numbers above the cells
                ax.text(left + s + 0.5, y - 0.15, str(s), ha="center", va="bottom", fontsize=FONT_SIZE - 2,
                        color="#666666")
            row_label(y - 0.75, "slot")

        # 1. before the chunk
        title(y_before - 1.35, f"Before: {_count(n_tokens, 'token')} appended ({_count(n_sinks, 'sink')}, a ring of "
              f"{_count(window, 'slot')})")
        slots(y_before, states["before"], "slot-before")
        if n_sinks:
            _brace(ax, left, left + n_sinks, y_before + 1.15, "sinks, kept")
        ring_start, ring_end = left + n_sinks, left + n_slots
        ax.add_patch(FancyArrowPatch((ring_end - 0.3, y_before + 1.1), (ring_start + 0.3, y_before + 1.1),
                                     connectionstyle="arc3,rad=-0.12", gid="wrap-arrow", **ARROW))
        ax.text(ring_start + 0.2, y_before + 2.0, f"the ring wraps around: after slot {n_slots - 1} comes slot "
                f"{n_sinks}", ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK)
        nxt = left + states["next_slot"] + 0.5
        ax.add_patch(FancyArrowPatch((nxt + 1.6, y_before - 1.0), (nxt, y_before - 0.05), gid="next-write",
                                     connectionstyle="arc3,rad=0.3", **ARROW))
        ax.text(nxt + 1.7, y_before - 1.0, f"token {n_tokens} goes here", ha="left", va="center",
                fontsize=FONT_SIZE - 1, color=INK)

        # 2. what append returns
        if chunk > 1:
            what = (f"append({chunk} new tokens) returns S = used + L = {used} + {chunk} = {S} keys,\n"
                    "the used slots as they were, then the chunk, before it overwrites any slot")
        else:
            what = f"append(1 new token) writes it, then returns the {S} filled slots, its own included"
        title(y_returned - 0.9, what)
        for i, position in enumerate(states["returned"]):
            _cell(ax, left + i, y_returned, position, key, 0.0 if position in new else 0.65,
                  hatch=SINK_HATCH if 0 <= position < n_sinks else None, gid="returned")
        row_label(y_returned, "key's token")
        if chunk > 1 and used:
            _brace(ax, left, left + used, y_returned + 1.15, "the slots before the chunk")
            _brace(ax, left + used, left + S, y_returned + 1.15, "the chunk")

        # 3. the mask of the chunk's queries over those keys
        if show_mask:
            title(y_mask - 0.3, f"cache.causal_mask({chunk}): which keys each query of the chunk may see")
            for r, row in enumerate(states["mask"]):
                for c, allowed in enumerate(row):
                    ax.add_patch(Rectangle((left + c, y_mask + r), 1, 1, lw=0.4, edgecolor=INK, gid="mask-cell",
                                           facecolor=tint(ROLE_COLOURS["weight"], 0.2) if allowed else "#FFFFFF"))
                row_label(y_mask + r, f"query {n_tokens + r}")

        # 4. after the chunk
        changed = [s for s in range(n_slots) if states["after"][s] != states["before"][s]]
        title(y_after - 1.35, f"After: {len(changed)} slot{'s' if len(changed) != 1 else ''} rewritten, "
              f"length = {n_tokens + chunk}")
        slots(y_after, states["after"], "slot-after")
        for s in changed:  # the first rewritten slot whose old token a query of the chunk still read
            old = states["before"][s]
            readers = [n_tokens + r for r, row in enumerate(states["mask"])
                       if old in states["returned"] and row[states["returned"].index(old)]]
            if readers:
                ax.annotate(f"token {states['after'][s]} overwrote token {old}, which "
                            f"{_tokens('query', readers)} still read: append returned it first",
                            (left + s + 0.5, y_after + 1.0), xytext=(left + s + 0.5, y_after + 2.1),
                            ha="left", va="center", fontsize=FONT_SIZE - 1, color=INK, gid="overwrite-note",
                            arrowprops=dict(arrowstyle="-|>", color=INK, lw=0.8, shrinkA=0, shrinkB=1))
                break
        stored = [p for p in states["after"] if p in new]
        lost = sorted(new - set(stored))
        note = "tinted: cached before the chunk; full colour: the chunk's tokens; hatched: sinks"
        if show_mask:
            note += "; mask: coloured = may attend"
        if lost:
            note = (f"{_tokens('token', lost)} of the chunk attended and were attended to, but never stored "
                    "(a later token of the chunk took the slot)\n" + note)
        ax.text(0.2, y_after + 2.9, note, ha="left", va="top", fontsize=FONT_SIZE - 1, color=INK, style="italic")
    return fig
