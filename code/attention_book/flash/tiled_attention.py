"""Tiled attention (FlashAttention's idea, Dao et al. 2022), in plain PyTorch: exact attention that never holds the
(L, S) weights.

For each block of queries, the keys and values are read block by block (FlashAttention-2's loop order, Dao 2023:
each key/value block is read once per query block). FlashAttention-1 put the loop over key/value blocks outside: it
reads each key/value block once, and reads and writes each query block's running output, maximum and sum once per
key/value block. Each key block gives a (block_q, block_k) tile of scores; the online softmax folds it into a
running maximum and sum per query, and the running output, a weighted sum of the values seen so far, is rescaled by
the same factor whenever the maximum grows. Only one tile of scores exists at any time.
"""
import math

import torch

from ..validation import check_mask, require_divisible, require_positive, require_rank


def tiled_attention(q, k, v, attn_mask=None, is_causal=False, block_q=64, block_k=64, scale=None):
    """Attention computed tile by tile with an online softmax, equal to ``F.scaled_dot_product_attention``.

    Args:
        q: queries, shape (B, h, L, d_head).
        k: keys, shape (B, g, S, d_head), where g divides h: query head i reads K/V head i // (h / g), as
            SDPA's ``enable_gqa=True`` does.
        v: values, shape (B, g, S, d_v).
        attn_mask: optional bool mask, True = may attend, broadcastable to (B, h, L, S) as SDPA's attn_mask.
        is_causal: query i may attend to keys 0 .. i + (S - L), the book's bottom-right alignment
            (``masks.causal_mask``; needs L <= S). This equals SDPA with attn_mask=causal_mask(L, S), not SDPA's
            own is_causal when L < S: SDPA aligns that one top-left (query i sees keys 0 .. i). Combined with
            attn_mask if both are given. Key blocks that lie wholly in a query block's future are skipped.
        block_q, block_k: queries and keys per tile (positive integers; they need not divide L or S).
        scale: factor applied to the scores; defaults to 1 / sqrt(d_head).

    Returns:
        out: shape (B, h, L, d_v). A query whose keys are all masked gets zeros, as SDPA gives on CPU and the book's
        own attention functions give.

    Besides q, k, v and the output, what it holds at once is one tile: scores and weights of shape
    (B, h, block_q, block_k), and a running maximum, sum and output for block_q queries per head.
    """
    for name, t, letters in (("q", q, "B, h, L, d_head"), ("k", k, "B, g, S, d_head"), ("v", v, "B, g, S, d_v")):
        require_rank(name, t, 4, letters)
    (B, h, L, d_head), (g, S) = q.shape, k.shape[1:3]
    if k.shape[0] != B or k.shape[3] != d_head:
        raise ValueError(f"k must have shape (B, g, S, d_head) = ({B}, g, S, {d_head}) for q of shape "
                         f"{tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have shape (B, g, S, d_v) with k's B, g, S = {tuple(k.shape[:3])}, "
                         f"got {tuple(v.shape)}")
    require_divisible("h (q.shape[1])", h, "g (k.shape[1])", g)
    require_positive(block_q=block_q, block_k=block_k)
    if is_causal and L > S:
        raise ValueError(f"is_causal=True needs L <= S (the L queries are the last L of the S positions), "
                         f"got L={L}, S={S}")
    mask = None
    if attn_mask is not None:  # made 4-D, (B|1, h|1, L, S): a view (expand copies nothing) to slice by block
        check_mask(attn_mask, torch.Size((B, h, L, S)))
        mask = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)).expand(-1, -1, L, S)
    scale = 1.0 / math.sqrt(d_head) if scale is None else scale
    group = h // g
    q5 = q.reshape(B, g, group, L, d_head)  # the h / g query heads of K/V head j sit together
    if mask is not None:  # (B|1, h|1, L, S) -> (B|1, g|1, group|1, L, S)
        mask = mask.reshape(mask.shape[0], g, group, *mask.shape[2:]) if mask.shape[1] == h else mask[:, :, None]
    out = torch.empty(B, h, L, v.shape[-1], dtype=q.dtype, device=q.device)
    for i0 in range(0, L, block_q):
        i1 = min(i0 + block_q, L)
        n_q = i1 - i0
        # (B, g, group * n_q, d_head): the group's queries stacked, so each K/V block is read once (chapter 8's fold)
        q_blk = q5[:, :, :, i0:i1].reshape(B, g, group * n_q, d_head) * scale
        m = torch.full((B, g, group, n_q, 1), -math.inf, dtype=q.dtype, device=q.device)  # running maximum
        sum_exp = torch.zeros_like(m)  # running sum of exp(score - m)
        acc = torch.zeros(B, g, group, n_q, v.shape[-1], dtype=q.dtype, device=q.device)  # running output, unscaled
        for j0 in range(0, S, block_k):
            if is_causal and j0 > i1 - 1 + (S - L):
                break  # this key block, and every later one, is in the future of all n_q queries
            j1 = min(j0 + block_k, S)
            s = (q_blk @ k[:, :, j0:j1].transpose(-2, -1)).reshape(B, g, group, n_q, j1 - j0)  # the tile's scores
            allowed = None if mask is None else mask[..., i0:i1, j0:j1]  # broadcasts to s
            if is_causal:
                rows = torch.arange(i0, i1, device=q.device)[:, None] + (S - L)
                causal = torch.arange(j0, j1, device=q.device)[None, :] <= rows  # (n_q, n_k), bottom-right
                allowed = causal if allowed is None else allowed & causal
            if allowed is not None:
                s = s.masked_fill(~allowed, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            shift = m_new.masked_fill(m_new == -math.inf, 0.0)  # a query with no visible key yet: shift by 0
            p = torch.exp(s - shift)  # (B, g, group, n_q, n_k): the tile's unnormalised weights
            correction = torch.exp(m - shift)  # rescales what was summed under the old maximum
            sum_exp = sum_exp * correction + p.sum(dim=-1, keepdim=True)
            pv = p.reshape(B, g, group * n_q, j1 - j0) @ v[:, :, j0:j1]
            acc = acc * correction + pv.reshape(acc.shape)
            m = m_new
        # sum_exp == 0 only where a query saw no key at all; its acc is 0 too, and it gets zeros
        out[:, :, i0:i1] = (acc / sum_exp.masked_fill(sum_exp == 0, 1.0)).reshape(B, h, n_q, -1)
    return out
