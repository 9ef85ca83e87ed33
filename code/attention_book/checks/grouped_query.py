"""Checks for chapter 8's exercises: where a query lands in the fold, repeat_kv, and the folded decode step over a
preallocated cache, without copying it."""

import torch
import torch.nn.functional as F

from ..experiments.tensor_memory import PeakTensorBytes
from ..grouped_sdpa import grouped_query_sdpa
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _size


def _fold_owners(n_heads, n_kv_heads, L):
    """owners[j][r] = (query head, position) of row r of group j once q (1, h, L, 2) is folded to (1, g, h/g L, 2)."""
    q = torch.stack(torch.meshgrid(torch.arange(n_heads), torch.arange(L), indexing="ij"), dim=-1)  # (h, L, 2)
    folded = q[None].reshape(1, n_kv_heads, n_heads // n_kv_heads * L, 2)  # the fold of grouped_query_sdpa
    return [[tuple(row) for row in group.tolist()] for group in folded[0]]


@_exercise("folded_row_owner",
           task="given a K/V head kv_head, a row index of that group's folded queries, n_heads, n_kv_heads (which "
                "divides n_heads) and L, the number of queries per head, return the pair (query_head, position) "
                "whose query sits in that row once q (B, h, L, d) is folded into (B, g, (h / g) * L, d) as in "
                "section 2's picture and the package's grouped_query_sdpa.",
           hint="A group holds h / g consecutive query heads, kv_head * (h / g) up to (kv_head + 1) * (h / g) - 1, "
                "and the fold writes each head's L rows one after the other. So row r belongs to the group's head "
                "number r // L, at position r % L: query_head = kv_head * (n_heads // n_kv_heads) + row // L.")
def check_folded_row_owner(fn):
    """fn(kv_head, row, n_heads, n_kv_heads, L) -> (query_head, position) held by that row of the folded queries.

    Tried on every row of every group of 5 layouts (MHA, GQA, MQA; L from 1 to 4); compared with where
    q.reshape(B, g, (h / g) * L, d), the fold of grouped_query_sdpa, puts each query.
    """
    for h, g, L in [(4, 4, 1), (4, 2, 2), (8, 1, 2), (8, 2, 3), (12, 3, 4)]:  # the fewest queries first
        group = h // g
        expected = _fold_owners(h, g, L)
        got = [[_call(fn, (j, r, h, g, L), "folded_row_owner") for r in range(group * L)] for j in range(g)]
        try:
            got = [[tuple(int(x) for x in pair) for pair in rows] for rows in got]
        except (TypeError, ValueError):  # None, a number: not pairs
            raise CheckFailed(f"n_heads={h}, n_kv_heads={g}, L={L}: expected pairs (query_head, position), "
                              f"got {got[0][0]!r} for row 0 of group 0") from None
        if got == expected:
            continue
        interleaved = [[(j * group + r % group, r // group) for r in range(group * L)] for j in range(g)]
        round_robin = [[(j + g * (r // L), r % L) for r in range(group * L)] for j in range(g)]
        likely = ""
        if got == interleaved:
            likely = ("\nLikely mistake: the rows were read position by position, the group's heads taking turns "
                      "at each position; the fold keeps each head's L queries together")
        elif got == round_robin:
            likely = ("\nLikely mistake: the query heads were given to the groups round-robin (head i to group "
                      "i % n_kv_heads); a group holds consecutive query heads")
        j, r = next((j, r) for j in range(g) for r in range(group * L) if got[j][r] != expected[j][r])
        raise CheckFailed(f"n_heads={h}, n_kv_heads={g}, L={L}: row {r} of group {j} holds query head "
                          f"{expected[j][r][0]} at position {expected[j][r][1]}, got {got[j][r]}{likely}")
    print("✓ folded_row_owner finds every row of the fold for 5 layouts, MHA and MQA included.")


@_exercise("my_repeat_kv",
           task="given k (B, g, S, d) and n_heads (a multiple of g), return (B, n_heads, S, d) whose head i is the "
                "K/V head that query head i reads (the grouping of section 1), leaving k unchanged, without calling "
                "repeat_interleave.",
           hint="Each K/V head must appear n_heads // g times in a row: [0, 0, 1, 1], not [0, 1, 0, 1]. Insert a "
                "dimension after the heads, k[:, :, None] (B, g, 1, S, d), .expand it to (B, g, n_heads // g, S, d) "
                "without copying, then .reshape(B, n_heads, S, d).")
def check_repeat_kv(fn):
    """fn(k (B, g, S, d), n_heads) -> (B, h, S, d), K/V head j repeated for its h / g query heads.

    Tried on 3 random K tensors; compared with Tensor.repeat_interleave, which the answer may not call.
    """
    gen = _generator(11)
    inputs = [(torch.randn(B, g, S, d, generator=gen), h) for B, g, S, d, h in
              [(2, 2, 5, 4, 8), (1, 1, 3, 8, 4), (2, 4, 2, 2, 4)]]
    refused = [(name, "which the exercise says not to call")
               for name in ("torch.Tensor.repeat_interleave", "torch.repeat_interleave")]
    for k, h in sorted(inputs, key=lambda kh: _size(kh[0])):  # the smallest first
        g = k.shape[1]
        expected, before = k.repeat_interleave(h // g, dim=1), k.clone()
        tiled = ("the K/V heads come out tiled, [0, 1, 0, 1] (what Tensor.repeat does); query heads need each K/V "
                 "head's copies next to each other, [0, 0, 1, 1]", lambda: before.repeat(1, h // g, 1, 1))
        got = _call(fn, (k, h), "my_repeat_kv", refuse=refused)
        if not torch.equal(k, before):
            raise CheckFailed(f"your repeat_kv on k {tuple(k.shape)}, n_heads={h}: k was changed; it must be left "
                              "as it was")
        _compare("your repeat_kv", f"k {tuple(k.shape)}, n_heads={h}", expected, got,
                 hint=_see_hint("my_repeat_kv"), mistakes=[tiled])
    print("✓ your repeat_kv matches repeat_interleave on 3 inputs, without calling it.")


def _asks_for_gqa(*args, **kwargs):
    """Whether a call of F.scaled_dot_product_attention sets enable_gqa (its eighth argument)."""
    return bool(kwargs.get("enable_gqa") or len(args) > 7 and args[7])


def _decode_inputs(gen, B, h, g, S_max, length, d):
    """q (B, h, 1, d), k_new and v_new (B, g, 1, d), and a cache (B, g, S_max, d) filled up to ``length``: the
    slots from ``length`` on hold leftovers of another sequence (random numbers), as a reused buffer does."""
    q = torch.randn(B, h, 1, d, generator=gen)
    k_new, v_new = (torch.randn(B, g, 1, d, generator=gen) for _ in range(2))
    k_cache, v_cache = (torch.randn(B, g, S_max, d, generator=gen) for _ in range(2))
    return q, k_new, v_new, k_cache, v_cache, length


def _written(cache, new, length):
    """The cache once the new token's entry is written at position ``length``."""
    cache = cache.clone()
    cache[:, :, length] = new[:, :, 0]
    return cache


@_exercise("folded_decode_step",
           task="given q (B, h, 1, d), the queries of one new token, its key and value k_new, v_new (B, g, 1, d), "
                "and a preallocated cache k_cache, v_cache (B, g, S_max, d) whose first `length` positions hold the "
                "earlier tokens (the rest is left over from before), write the new key and value at position "
                "`length` of the cache, in place, and return (B, h, 1, d): the new token's grouped-query attention "
                "over positions 0 .. length, query head i reading K/V head i // (h / g); computed as the fold "
                "computes it, with no copy of the cache or of its K/V heads, and without grouped_query_sdpa, "
                "repeat_interleave or enable_gqa.",
           hint="k_cache[:, :, length] = k_new[:, :, 0] writes the new key in place (the same for v). "
                "k_cache[:, :, :length + 1] is a view of the filled part, not a copy. Fold the queries: "
                "q.reshape(B, g, h // g, d) puts the h // g heads of each group as the rows of that group's "
                "queries. Scores: folded @ k.transpose(-2, -1) / math.sqrt(d), (B, g, h // g, length + 1); softmax "
                "over the last dimension; times v gives (B, g, h // g, d); reshape it to (B, h, 1, d). "
                "(F.scaled_dot_product_attention on the folded queries and the two views does the same.)",
           idea="Section 2's fold: a group's query heads all read the same K/V head, so stack them as rows of one "
                "query matrix for that head. Write the new key and value into the cache first; then each group is one "
                "small attention against a view of its filled cache.")
def check_folded_decode_step(fn):
    """fn(q (B, h, 1, d), k_new, v_new (B, g, 1, d), k_cache, v_cache (B, g, S_max, d), length) -> (B, h, 1, d),
    the cache written at position length.

    Tried on 5 seeded random steps (MQA, GQA and MHA; S_max from 6 to 200), the unfilled slots holding random
    leftovers; compared with attention_book.grouped_sdpa.grouped_query_sdpa on the filled part. The answer runs
    with grouped_query_sdpa, the package's other GQA functions, repeat_interleave and enable_gqa=True refused, and
    the bytes of the tensors it makes are counted (experiments.tensor_memory): at most twice its output and four
    tensors of scores (B, h, 1, length + 1), so any copy of the cache's K/V heads fails on the larger inputs.
    """
    gen = _generator(12)
    inputs = [_decode_inputs(gen, *sizes) for sizes in  # (B, h, g, S_max, length, d)
              [(1, 2, 1, 6, 3, 4), (1, 4, 2, 8, 5, 8), (2, 8, 2, 16, 9, 16), (1, 8, 8, 40, 30, 32),
               (2, 8, 2, 200, 120, 64)]]
    refused = ["attention_book.grouped_sdpa.grouped_query_sdpa", "attention_book.grouped_sdpa.attend",
               "attention_book.grouped_sdpa.gqa_by_repeating_kv", "attention_book.grouped_sdpa.gqa_with_enable_gqa",
               ("torch.Tensor.repeat_interleave", "which the exercise says not to call"),
               ("torch.repeat_interleave", "which the exercise says not to call"),
               ("torch.nn.functional.scaled_dot_product_attention",
                "with enable_gqa=True, which the exercise says not to use", _asks_for_gqa)]
    for q, k_new, v_new, k_cache, v_cache, length in sorted(inputs, key=lambda i: _size(*i)):  # the smallest first
        (B, h, _, d), g = q.shape, k_cache.shape[1]
        k_old, v_old = k_cache.clone(), v_cache.clone()
        k_full, v_full = _written(k_old, k_new, length), _written(v_old, v_new, length)
        expected = grouped_query_sdpa(q, k_full[:, :, :length + 1], v_full[:, :, :length + 1])
        tried = (f"q {tuple(q.shape)}, k_new {tuple(k_new.shape)}, a cache {tuple(k_cache.shape)} filled up to "
                 f"length={length}")
        with torch.no_grad(), PeakTensorBytes() as counter:
            got = _call(fn, (q, k_new, v_new, k_cache, v_cache, length), "folded_decode_step", refuse=refused)
            peak = counter.peak
        folded = q.reshape(B, g, h // g, d)
        mistakes = [
            ("the attention ran over every slot of the preallocated cache, the unfilled ones too, not over positions "
             "0 .. length", lambda: grouped_query_sdpa(q, k_full, v_full)),
            ("the new token's own key and value were left out: it attends to positions 0 .. length - 1",
             lambda: grouped_query_sdpa(q, k_old[:, :, :length], v_old[:, :, :length])),
            ("the attention read position `length` before the new key and value were written there",
             lambda: grouped_query_sdpa(q, k_old[:, :, :length + 1], v_old[:, :, :length + 1])),
            ("the query heads were grouped round-robin (head i with K/V head i % g); a group holds consecutive "
             "query heads", lambda: F.scaled_dot_product_attention(
                 q, *(t[:, :, :length + 1].repeat(1, h // g, 1, 1) for t in (k_full, v_full)))),
            ("the scores are not scaled by 1/√d", lambda: F.scaled_dot_product_attention(
                folded, k_full[:, :, :length + 1], v_full[:, :, :length + 1], scale=1.0).reshape(B, h, 1, d)),
        ]
        _compare("your decode step", tried, expected, got, hint=_see_hint("folded_decode_step"), mistakes=mistakes)
        for name, cache, full in (("k_cache", k_cache, k_full), ("v_cache", v_cache, v_full)):
            if not torch.equal(cache, full):
                changed = (cache != full).any(dim=-1).nonzero()[:, 2].unique().tolist()
                raise CheckFailed(f"your decode step on {tried}: after the step, {name} differs from the cache "
                                  f"with the new token's entry at position {length} and nothing else changed; "
                                  f"it differs at positions {changed}")
        scores = B * h * (length + 1) * q.element_size()  # one tensor of scores (B, h, 1, length + 1)
        allowed = 2 * expected.nbytes + 4 * scores
        if peak > allowed:
            copy = B * g * (length + 1) * d * q.element_size()
            raise CheckFailed(f"your decode step on {tried}: it made {peak:,} bytes of new tensors at once; its "
                              f"output takes {expected.nbytes:,} bytes and a tensor of scores (B, h, 1, length + 1) "
                              f"{scores:,}, so {allowed:,} bytes (twice the output plus four tensors of scores) "
                              f"would be enough, while one copy of the filled "
                              f"part of k_cache takes {copy:,}: the step copies the cache or its K/V heads")
    print("✓ your folded decode step matches grouped_query_sdpa on 5 steps, writes the cache in place, and makes no "
          "copy of it.")
