"""Checks for chapter 9's exercises: which heads a group pools, mean-pooling a projection (pool_projection), and
the converted attention."""
import torch

from ..convert import pool_heads
from ..grouped_sdpa import grouped_query_sdpa
from ._compare import CheckFailed, _call, _compare, _exercise, _size


@_exercise("group_members",
           task="given the index kv_head of a new K/V head, n_heads and n_kv_heads, return the list of the indices "
                "(ints, ascending) of the old heads pooled into it: the query heads that read it under the pairing "
                "of repeat_interleave and enable_gqa=True.",
           hint="Each new K/V head pools size = n_heads // n_kv_heads old heads that sit next to each other: head j "
                "takes heads j * size up to (j + 1) * size - 1, that is list(range(j * size, (j + 1) * size)).")
def check_group_members(fn):
    """fn(kv_head, n_heads, n_kv_heads) -> the list of the old heads pooled into that new K/V head.

    Tried on every new K/V head of 6 layouts (n_heads, n_kv_heads) = (8, 8), (8, 4), (8, 2), (8, 1), (12, 3),
    (32, 8), MHA and MQA included; compared with the contiguous grouping of repeat_interleave.
    """
    for h, g in [(8, 8), (8, 4), (8, 2), (8, 1), (12, 3), (32, 8)]:  # the fewest heads first
        for j in range(g):
            expected = list(range(j * (h // g), (j + 1) * (h // g)))
            got = _call(fn, (j, h, g), "group_members")
            try:
                same = list(got) == expected
            except TypeError:  # None, a number: not a list of heads
                same = False
            if not same:
                raise CheckFailed(f"kv_head={j}, n_heads={h}, n_kv_heads={g}: expected heads {expected}, got {got!r}"
                                  "\nHint: groups are contiguous, [0, 1], [2, 3], ..., not [0, 4], [1, 5], ...")
    print("✓ group_members follows the grouping of repeat_interleave and enable_gqa for 6 layouts.")


@_exercise("pool_projection",
           task="given a K or V projection weight (n_heads * d_head, d_model), in which old head i owns rows "
                "i * d_head up to (i + 1) * d_head, return (n_kv_heads * d_head, d_model): for each new K/V head, "
                "the mean of the rows of the old heads it pools (group_members), row by row.",
           hint="weight.view(n_kv_heads, n_heads // n_kv_heads, d_head, d_model) puts each group's heads along the "
                "second dimension (d_head = weight.shape[0] // n_heads); .mean(dim=1) averages them, and "
                ".reshape(n_kv_heads * d_head, d_model) stacks the new heads' rows again.")
def check_pool_projection(fn):
    """fn(weight (n_heads * d_head, d_model), n_heads, n_kv_heads) -> (n_kv_heads * d_head, d_model).

    Tried on 4 seeded random weights, (n_heads, n_kv_heads, d_head, d_model) = (8, 4, 4, 32), (8, 1, 2, 6),
    (6, 3, 5, 7) and (4, 4, 3, 5), MHA and MQA included; compared with the mean pooling of
    attention_book.convert.convert_to_gqa.
    """
    gen = torch.Generator().manual_seed(9)
    inputs = [(torch.randn(h * d_head, d_model, generator=gen), h, g)
              for h, g, d_head, d_model in [(8, 4, 4, 32), (8, 1, 2, 6), (6, 3, 5, 7), (4, 4, 3, 5)]]
    for weight, h, g in sorted(inputs, key=lambda whg: _size(whg[0])):  # the smallest first
        d_model = weight.shape[1]
        expected = pool_heads(weight, h, g, "mean", None, fan_in=d_model)  # what convert_to_gqa does
        _compare("your pool_projection", f"a weight {tuple(weight.shape)} with n_heads={h}, n_kv_heads={g}", expected,
                 _call(fn, (weight, h, g), "pool_projection"),
                 hint="average the d_head rows of the heads in a group, row by row")
    print("✓ your pool_projection matches the package's pooling on 4 weights, MHA and MQA included.")


@_exercise("converted_attention",
           task="given an MHA layer's q (B, h, L, d) and k, v (B, h, S, d), and n_kv_heads, return (B, h, L, d): "
                "the attention output once the layer is converted to n_kv_heads K/V heads by mean pooling, each "
                "query head attending with the pooled K/V head of its group (group_members).",
           hint="Mean-pool k and v over each group of size = h // n_kv_heads neighbouring heads: "
                "k.unflatten(1, (n_kv_heads, size)).mean(dim=2) is (B, n_kv_heads, S, d), and the same for v. Then "
                "F.scaled_dot_product_attention(q, k_mean, v_mean, enable_gqa=True) lets query head i attend with "
                "pooled head i // size (or repeat_interleave the pooled heads back to h first).")
def check_converted_attention(fn):
    """fn(q (B, h, L, d), k, v (B, h, S, d), n_kv_heads) -> (B, h, L, d), attention after mean-pooling K and V.

    Tried on 4 seeded random inputs with (n_heads, n_kv_heads) = (8, 2), (4, 1), (6, 3) and (4, 4); compared with
    attention_book.grouped_sdpa.grouped_query_sdpa on the group means of K and V.
    """
    gen = torch.Generator().manual_seed(10)
    inputs = []
    for B, h, g, L, S, d in [(2, 8, 2, 3, 5, 4), (1, 4, 1, 2, 6, 8), (2, 6, 3, 1, 4, 2), (1, 4, 4, 3, 3, 4)]:
        q = torch.randn(B, h, L, d, generator=gen)
        k, v = (torch.randn(B, h, S, d, generator=gen) for _ in range(2))
        inputs.append((q, k, v, g))
    for q, k, v, g in sorted(inputs, key=lambda qkvg: _size(*qkvg)):  # the smallest first
        h = q.shape[1]
        k_mean, v_mean = (t.unflatten(1, (g, h // g)).mean(dim=2) for t in (k, v))
        _compare("your converted attention", f"q {tuple(q.shape)}, k and v {tuple(k.shape)}, n_kv_heads={g}",
                 grouped_query_sdpa(q, k_mean, v_mean), _call(fn, (q, k, v, g), "converted_attention"),
                 hint="each query head keeps its own softmax: average the keys and values, not the scores or outputs")
    print("✓ your converted attention matches SDPA on mean-pooled K/V heads for 4 layouts.")
