"""Grouped-query attention through PyTorch's fused kernel, reading each K/V head once, not once per query head.

``attend`` is the one place that chooses how attention is computed, for every layer and model of the book;
``grouped_query_sdpa`` is the kernel it runs unless weights are asked for. The last two functions compute the same
thing the common ways, for comparison in chapter 8 and in ``benchmarks/decode.py``.
"""
import torch.nn.functional as F

from .sdpa import scaled_dot_product_attention
from .validation import check_mask, require_divisible, require_rank


def attend(q, k, v, mask=None, is_causal=False, need_weights=False):
    """Attention of h query heads over g K/V heads, with the kernel that suits the call; returns (out, weights).

    Args:
        q: queries, shape (B, h, L, d). k, v: keys and values, shape (B, g, S, d); g divides h.
        mask: None, or a boolean mask (True = may attend) of shape (L, S), (B, L, S) or (B or 1, h or 1, L, S).
        is_causal: causal attention with no mask tensor, for L == S (no cache): PyTorch skips the masked blocks.
        need_weights: run the book's own ``scaled_dot_product_attention`` (each K/V head repeated for its group)
            and return the per-head weights; otherwise PyTorch's fused kernel through ``grouped_query_sdpa``.

    Returns:
        out: shape (B, h, L, d). weights: shape (B, h, L, S), or None.
    """
    if need_weights:
        if is_causal:
            raise ValueError("is_causal=True builds no mask: with need_weights, pass causal_mask(L, S) as mask")
        group = q.shape[1] // k.shape[1]  # query head i reads K/V head i // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, h, S, d)
        return scaled_dot_product_attention(q, k, v, mask)
    return grouped_query_sdpa(q, k, v, mask, is_causal=is_causal), None


def grouped_query_sdpa(q, k, v, mask=None, is_causal=False):
    """Attention in which groups of query heads share K/V heads, via ``F.scaled_dot_product_attention``.

    Args:
        q: queries, shape (B, h, L, d).
        k, v: keys and values, shape (B, g, S, d), where g divides h. Query head i reads K/V head
            i // (h / g), the grouping of ``repeat_interleave`` and of SDPA's ``enable_gqa``.
        mask: optional boolean mask (True = may attend), shape (L, S), (B, L, S) or (B or 1, h or 1, L, S).
        is_causal: causal attention without a mask tensor, for L == S only (where PyTorch's top-left alignment
            and the book's bottom-right one agree); PyTorch then skips the masked blocks.

    Returns:
        out: shape (B, h, L, d), equal to
        ``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)``.
        A query whose keys are all masked gets zeros (as the book's own ``scaled_dot_product_attention``).

    The h / g query heads of a group all read the same K and V, so they are stacked along the query-length
    dimension: q becomes (B, g, (h / g) * L, d) and each K/V head is read once, instead of once for every
    query head of its group. Decoding one token (L = 1) must read the whole cache for little arithmetic, so
    reading it h / g times less is what makes MQA and GQA decode faster. (On CPUs, ``enable_gqa=True`` reads
    each K/V head once per query head: see chapter 8's timings, or ``benchmarks/decode.py --impl enable_gqa`` in a
    clone of the repository.)
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_rank(name, t, 4, "B, heads, length, d")
    (B, h, L, d), (g, S) = q.shape, k.shape[1:3]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != d:
        raise ValueError(f"k and v must both have shape (B, g, S, d) = ({B}, g, S, {d}) for q of shape "
                         f"{tuple(q.shape)}, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    require_divisible("h (q.shape[1])", h, "g (k.shape[1])", g)
    if is_causal:
        if mask is not None or L != S:
            raise ValueError(f"is_causal=True needs L == S and no mask, got L={L}, S={S}, "
                             f"mask {'given' if mask is not None else 'None'}: pass causal_mask(L, S) as mask")
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g < h)
    if mask is not None:
        if mask.dim() == 3:
            mask = mask[:, None]  # (B, L, S) -> (B, 1, L, S): the same mask for every head
        check_mask(mask, q.shape[:-1] + (S,))
        if mask.dim() == 2:
            mask = mask[None, None]  # (1, 1, L, S)
    if g == h:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        group = h // g
        folded = q.reshape(B, g, group * L, d)  # query head j * group + m: group j, rows m * L ... m * L + L - 1
        folded_mask = None if mask is None else mask.expand(-1, h, L, S).reshape(-1, g, group * L, S)
        out = F.scaled_dot_product_attention(folded, k, v, attn_mask=folded_mask).reshape(B, h, L, d)
    if mask is not None:  # a query with no visible key gets zeros, whatever the backend returns for it
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # mask (B|1, h|1, L, 1) broadcasts
    return out


def gqa_by_repeating_kv(q, k, v):
    """The same attention by copying each K/V head for its group: (B, g, S, d) -> (B, h, S, d), then MHA."""
    group = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))


def gqa_with_enable_gqa(q, k, v):
    """The same attention by PyTorch's own grouping, ``enable_gqa=True`` (torch >= 2.5)."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
