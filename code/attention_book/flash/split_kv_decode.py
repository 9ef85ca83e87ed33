"""Flash-Decoding's split (Dao, Haziza, Massa and Sizov, 2023): one query against a long cache, in chunks.

A decode step has one query per sequence. Attention parallelises over sequences, heads and blocks of queries, so
with one sequence and few K/V heads (MQA, GQA with small g) there is little to share between cores. Splitting the
cache into chunks gives independent pieces of work: each chunk is attended on its own, giving a partial output and
the log-sum-exp of its scores, and the partials are merged exactly by weighting each with exp(its lse - the total
lse).
"""
import math
import numbers

import torch

from ..validation import require_divisible, require_rank


def merge_partials(outs, lses):
    """Merge attention outputs over disjoint chunks of keys into the output over all of them.

    Args:
        outs: the partial outputs, shape (n, ...): chunk c's softmax-weighted average of its own values.
        lses: the log-sum-exp of each chunk's scores, shape (n, ...) with a last dimension of 1 that broadcasts
            with outs. A chunk's lse is -inf when a mask hides every key in it (a padded batch, a sliding window,
            exercise 2's sets); its weight is then 0, and its outs must be finite (zeros, as the book's attention
            gives a query that sees no key), since 0 * NaN is still NaN. ``attend_chunks`` takes no mask, so the
            chunks of ``split_kv_decode`` always have a finite lse.

    Returns:
        (out, lse): out = sum over c of exp(lses[c] - lse) * outs[c], where lse = logsumexp over the chunks of lses,
        shape outs.shape[1:] and lses.shape[1:]. Where every chunk is -inf, out is zeros and lse is -inf.
    """
    lse = torch.logsumexp(lses, dim=0)  # (...): log of the sum of every chunk's sum of exp(score)
    shift = lse.masked_fill(lse == -math.inf, 0.0)  # nothing seen at all: every weight below is exp(-inf) = 0
    weights = torch.exp(lses - shift)  # (n, ...): chunk c's share of the total sum; they sum to 1
    return (weights * outs).sum(dim=0), lse


def attend_chunks(q, k, v, scale):
    """Attention of each query over each chunk of keys on its own: its partial output and log-sum-exp.

    Args:
        q: shape (..., 1 or n_chunks, n_q, d_head): n_q queries (broadcast over the chunks when its size there is 1).
        k: shape (..., n_chunks, chunk, d_head) and v (..., n_chunks, chunk, d_v): n_chunks chunks of ``chunk``
            keys and values each, chunk >= 1.
        scale: factor applied to the scores.

    Returns:
        (outs, lses): shape (..., n_chunks, n_q, d_v) and (..., n_chunks, n_q, 1). No mask is applied, so every lse
        is finite (a chunk whose scores were all -inf would give exp(-inf + inf) = NaN weights: see
        ``merge_partials``).
    """
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., n_chunks, n_q, chunk): the chunks are a batch dimension
    lses = torch.logsumexp(scores, dim=-1, keepdim=True)  # (..., n_chunks, n_q, 1)
    return torch.exp(scores - lses) @ v, lses


def split_kv_decode(q, k, v, n_splits=None, chunk=None, scale=None):
    """One decode step by Flash-Decoding's split: the cache in chunks, each attended alone, merged by log-sum-exp.

    Args:
        q: queries, shape (B, h, 1, d_head): one new token per sequence.
        k, v: the cache, shape (B, g, S, d_head) and (B, g, S, d_v), where g divides h (query head i reads K/V
            head i // (h / g)).
        n_splits: how many chunks to split the S keys into, at most: chunk = ceil(S / n_splits), which can give
            fewer chunks than asked (S = 9, n_splits = 4: chunk = 3, so 3 chunks); or
        chunk: how many keys per chunk. Give exactly one of the two. The last chunk may be shorter.
        scale: factor applied to the scores; defaults to 1 / sqrt(d_head).

    Returns:
        out: shape (B, h, 1, d_v), equal to ``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)``.

    The chunks are views of the cache, not copies: when ``chunk`` divides S they form one (B, g, n, chunk, d_head)
    view, a batch of n independent products that torch can share among threads; a shorter last chunk is one more
    partial.
    """
    for name, t, letters in (("q", q, "B, h, 1, d_head"), ("k", k, "B, g, S, d_head"), ("v", v, "B, g, S, d_v")):
        require_rank(name, t, 4, letters)
    (B, h, L, d_head), (g, S) = q.shape, k.shape[1:3]
    if L != 1:
        raise ValueError(f"q must hold one query per sequence, shape (B, h, 1, d_head), got L={L}: "
                         f"split_kv_decode is for decode steps; use tiled_attention for longer queries")
    if k.shape[0] != B or k.shape[3] != d_head or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"k and v must have shapes (B, g, S, d_head) and (B, g, S, d_v) with B={B}, "
                         f"d_head={d_head}, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    require_divisible("h (q.shape[1])", h, "g (k.shape[1])", g)
    if (n_splits is None) == (chunk is None):
        raise ValueError(f"give exactly one of n_splits and chunk, got n_splits={n_splits!r}, chunk={chunk!r}")
    for name, value in (("n_splits", n_splits), ("chunk", chunk)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0):
            raise ValueError(f"{name}={value!r} must be a positive integer")
    chunk = chunk if chunk is not None else -(-S // n_splits)  # ceil(S / n_splits)
    scale = 1.0 / math.sqrt(d_head) if scale is None else scale
    group = h // g
    q_g = q.reshape(B, g, 1, group, d_head)  # the group's h / g queries, folded as chapter 8 does; 1 broadcasts
    n_full = S // chunk
    outs, lses = [], []
    if n_full:  # (B, g, n_full, chunk, d): views of the cache, chunk after chunk
        k_c = k[:, :, :n_full * chunk].unflatten(2, (n_full, chunk))
        v_c = v[:, :, :n_full * chunk].unflatten(2, (n_full, chunk))
        o, s = attend_chunks(q_g, k_c, v_c, scale)  # (B, g, n_full, group, d_v), (B, g, n_full, group, 1)
        outs.append(o.movedim(2, 0))
        lses.append(s.movedim(2, 0))
    if n_full * chunk < S:  # the shorter last chunk
        o, s = attend_chunks(q_g, k[:, :, None, n_full * chunk:], v[:, :, None, n_full * chunk:], scale)
        outs.append(o.movedim(2, 0))
        lses.append(s.movedim(2, 0))
    out, _ = merge_partials(torch.cat(outs), torch.cat(lses))  # (B, g, group, d_v)
    return out.reshape(B, h, 1, -1)
