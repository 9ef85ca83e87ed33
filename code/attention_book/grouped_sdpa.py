"""Grouped-query attention through PyTorch's fused kernel, reading each K/V head once, not once per query head.

``grouped_query_sdpa`` is what the book's layer runs. The two other functions compute the same thing the
common ways, for comparison in chapter 8 and in ``benchmarks/decode.py``.
"""
import torch.nn.functional as F


def grouped_query_sdpa(q, k, v, mask=None):
    """Attention in which groups of query heads share K/V heads, via ``F.scaled_dot_product_attention``.

    Args:
        q: queries, shape (B, h, L, d).
        k, v: keys and values, shape (B, g, S, d), where g divides h. Query head i reads K/V head
            i // (h / g), the grouping of ``repeat_interleave`` and of SDPA's ``enable_gqa``.
        mask: optional boolean mask (True = may attend), shape (L, S) or (B or 1, h or 1, L, S).

    Returns:
        out: shape (B, h, L, d), equal to
        ``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)``.

    The h / g query heads of a group all read the same K and V, so they are stacked along the query-length
    dimension: q becomes (B, g, (h / g) * L, d) and each K/V head is read once, instead of once for every
    query head of its group. Decoding one token
    (L = 1) is limited by how fast K and V can be read, so reading them h / g times less is what makes
    MQA and GQA decode faster. (On CPUs, ``enable_gqa=True`` does not do this.)
    """
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    if g == h:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    group = h // g
    q = q.reshape(B, g, group * L, d)  # query head j * group + m lands in group j, rows m * L ... m * L + L - 1
    if mask is not None:
        if mask.dim() == 2:
            mask = mask[None, None]  # (1, 1, L, S)
        mask = mask.expand(mask.shape[0], h, L, S).reshape(mask.shape[0], g, group * L, S)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, g, group * L, d)
    return out.reshape(B, h, L, d)


def gqa_by_repeating_kv(q, k, v):
    """The same attention by copying each K/V head for its group: (B, g, S, d) -> (B, h, S, d), then MHA."""
    group = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))


def gqa_with_enable_gqa(q, k, v):
    """The same attention by PyTorch's own grouping, ``enable_gqa=True`` (torch >= 2.5)."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
