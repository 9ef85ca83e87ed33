"""Checks for chapter 8's exercises: the grouping, repeat_kv, and the folded GQA attention."""
import torch

from ..grouped_sdpa import grouped_query_sdpa
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint, _size


@_exercise("kv_head_of",
           task="given a query head's index (0 .. n_heads - 1), n_heads and n_kv_heads (which divides n_heads), "
                "return the index (an int) of the K/V head that query head reads, pairing heads the way "
                "repeat_interleave and enable_gqa=True do.",
           hint="repeat_interleave gives each K/V head a block of n_heads // n_kv_heads consecutive query heads: "
                "query heads 0 .. size - 1 read K/V head 0, the next size read K/V head 1, and so on. So the K/V "
                "head is the query head's index divided by the block size, rounded down: "
                "query_head // (n_heads // n_kv_heads).")
def check_kv_head_of(fn):
    """fn(query_head, n_heads, n_kv_heads) -> the K/V head that query head reads.

    Tried on every query head of 5 layouts (MHA, GQA, MQA); compared with the grouping of repeat_interleave.
    """
    for h, g in [(8, 8), (8, 2), (8, 1), (12, 3), (32, 8)]:  # the fewest heads first
        expected = [i // (h // g) for i in range(h)]
        got = [_call(fn, (i, h, g), "kv_head_of") for i in range(h)]
        if got != expected:
            likely = ""
            if got == [i % g for i in range(h)]:
                likely = ("\nLikely mistake: the query heads take the K/V heads in turn, round-robin (i % n_kv_heads); "
                          "repeat_interleave and enable_gqa give each K/V head a block of consecutive query heads")
            raise CheckFailed(f"n_heads={h}, n_kv_heads={g}: expected K/V heads {expected} for query heads "
                              f"0 .. {h - 1}, got {got}{likely}")
    print("✓ kv_head_of follows the grouping of repeat_interleave and enable_gqa for 5 layouts.")


@_exercise("my_repeat_kv",
           task="given k (B, g, S, d) and n_heads (a multiple of g), return (B, n_heads, S, d) whose head i is the "
                "K/V head that query head i reads (kv_head_of(i, n_heads, g)), leaving k unchanged.",
           hint="Each K/V head must appear n_heads // g times in a row: [0, 0, 1, 1], not [0, 1, 0, 1]. Insert a "
                "dimension after the heads, k[:, :, None] (B, g, 1, S, d), .expand it to (B, g, n_heads // g, S, d) "
                "without copying, then .reshape(B, n_heads, S, d). k.repeat_interleave(n_heads // g, dim=1) gives "
                "the same.")
def check_repeat_kv(fn):
    """fn(k (B, g, S, d), n_heads) -> (B, h, S, d), K/V head j repeated for its h / g query heads.

    Tried on 3 random K tensors; compared with Tensor.repeat_interleave.
    """
    gen = torch.Generator().manual_seed(11)
    inputs = [(torch.randn(B, g, S, d, generator=gen), h) for B, g, S, d, h in
              [(2, 2, 5, 4, 8), (1, 1, 3, 8, 4), (2, 4, 2, 2, 4)]]
    for k, h in sorted(inputs, key=lambda kh: _size(kh[0])):  # the smallest first
        g = k.shape[1]
        tiled = ("the K/V heads come out tiled, [0, 1, 0, 1] (what Tensor.repeat does); query heads need each K/V "
                 "head's copies next to each other, [0, 0, 1, 1]", lambda: k.repeat(1, h // g, 1, 1))
        _compare("your repeat_kv", f"k {tuple(k.shape)}, n_heads={h}", k.repeat_interleave(h // g, dim=1),
                 _call(fn, (k, h), "my_repeat_kv"), hint=_see_hint("my_repeat_kv"),
                 mistakes=[tiled])
    print("✓ your repeat_kv matches repeat_interleave on 3 inputs.")


@_exercise("folded_gqa",
           task="given q (B, h, L, d) and k, v (B, g, S, d), return (B, h, L, d): grouped-query attention, query "
                "head i attending with K/V head kv_head_of(i, h, g), computed without making copies of k and v for "
                "each query head.",
           hint="The h // g query heads of a group all meet the same K/V head, so stack them as extra queries: "
                "q.reshape(B, g, (h // g) * L, d) puts each group's heads one after another along the query "
                "dimension. F.scaled_dot_product_attention(stacked, k, v) then gives (B, g, (h // g) * L, d); "
                "reshape it back to (B, h, L, d).")
def check_folded_gqa(fn):
    """fn(q (B, h, L, d), k, v (B, g, S, d)) -> (B, h, L, d) by folding each group's query heads into L.

    Tried on 4 random inputs, MHA and MQA included; compared with attention_book.grouped_sdpa.grouped_query_sdpa.
    """
    gen = torch.Generator().manual_seed(12)
    inputs = []
    for B, h, g, L, S, d in [(2, 8, 2, 1, 9, 4), (1, 6, 3, 3, 5, 8), (2, 4, 1, 2, 6, 2), (1, 4, 4, 2, 3, 4)]:
        q = torch.randn(B, h, L, d, generator=gen)
        k, v = (torch.randn(B, g, S, d, generator=gen) for _ in range(2))
        inputs.append((q, k, v))
    for q, k, v in sorted(inputs, key=lambda qkv: _size(*qkv)):  # the smallest first
        _compare("your folded GQA", f"q {tuple(q.shape)}, k and v {tuple(k.shape)}", grouped_query_sdpa(q, k, v),
                 _call(fn, (q, k, v), "folded_gqa"), hint="query head i must meet K/V head i // (h // g)")
    print("✓ your folded GQA matches grouped_query_sdpa on 4 inputs, MHA and MQA included.")
