"""Checks for chapter 8's exercises: the grouping, repeat_kv, and the folded GQA attention."""
import torch

from ..grouped_sdpa import grouped_query_sdpa
from ._compare import CheckFailed, _call, _compare


def check_kv_head_of(fn):
    """fn(query_head, n_heads, n_kv_heads) -> the K/V head that query head reads.

    Tried on every query head of 5 layouts (MHA, GQA, MQA); compared with the grouping of repeat_interleave.
    """
    task = "query heads come in n_kv_heads consecutive groups of n_heads // n_kv_heads."
    for h, g in [(8, 8), (8, 2), (8, 1), (32, 8), (12, 3)]:
        expected = [i // (h // g) for i in range(h)]
        got = [_call(fn, (i, h, g), task) for i in range(h)]
        if got != expected:
            raise CheckFailed(f"n_heads={h}, n_kv_heads={g}: expected K/V heads {expected} for query heads "
                              f"0 .. {h - 1}, got {got}")
    print("✓ kv_head_of follows the grouping of repeat_interleave and enable_gqa for 5 layouts.")


def check_repeat_kv(fn):
    """fn(k (B, g, S, d), n_heads) -> (B, h, S, d), K/V head j repeated for its h / g query heads.

    Tried on 3 random K tensors; compared with Tensor.repeat_interleave.
    """
    task = "repeat each K/V head n_heads // g times in a row along dimension 1."
    gen = torch.Generator().manual_seed(11)
    for B, g, S, d, h in [(2, 2, 5, 4, 8), (1, 1, 3, 8, 4), (2, 4, 2, 2, 4)]:
        k = torch.randn(B, g, S, d, generator=gen)
        _compare("your repeat_kv", f"k {tuple(k.shape)}, n_heads={h}", k.repeat_interleave(h // g, dim=1),
                 _call(fn, (k, h), task), hint="head order matters: [0, 0, 1, 1], not [0, 1, 0, 1]")
    print("✓ your repeat_kv matches repeat_interleave on 3 inputs.")


def check_folded_gqa(fn):
    """fn(q (B, h, L, d), k, v (B, g, S, d)) -> (B, h, L, d) by folding each group's query heads into L.

    Tried on 4 random inputs, MHA and MQA included; compared with attention_book.grouped_sdpa.grouped_query_sdpa.
    """
    task = ("reshape q to (B, g, (h // g) * L, d), run F.scaled_dot_product_attention against k and v, "
            "and reshape back to (B, h, L, d).")
    gen = torch.Generator().manual_seed(12)
    for B, h, g, L, S, d in [(2, 8, 2, 1, 9, 4), (1, 6, 3, 3, 5, 8), (2, 4, 1, 2, 6, 2), (1, 4, 4, 2, 3, 4)]:
        q = torch.randn(B, h, L, d, generator=gen)
        k, v = (torch.randn(B, g, S, d, generator=gen) for _ in range(2))
        _compare("your folded GQA", f"q {tuple(q.shape)}, k and v {tuple(k.shape)}", grouped_query_sdpa(q, k, v),
                 _call(fn, (q, k, v), task), hint="query head i must meet K/V head i // (h // g)")
    print("✓ your folded GQA matches grouped_query_sdpa on 4 inputs, MHA and MQA included.")
