"""Scaled dot-product attention, written out from the formula softmax(q kᵀ / √d) v.

Shape letters used throughout the book: B batch, h heads, L query length,
S key length, d head size.
"""
import math

import torch

from .validation import check_mask, check_qkv


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """Attention of queries q over keys k, mixing values v.

    Args:
        q: queries, shape (..., L, d).
        k: keys, shape (..., S, d).
        v: values, shape (..., S, d_v).
        mask: optional boolean tensor broadcastable to (..., L, S).
            True means "may attend", as in F.scaled_dot_product_attention
            (nn.MultiheadAttention uses the opposite convention).
        scale: factor applied to the scores; defaults to 1 / √d.

    Returns:
        out: shape (..., L, d_v), the weighted averages of the values.
        weights: shape (..., L, S); each row sums to 1 over the keys
            that the query may attend to.

    A query whose keys are all masked gets all-zero weights and an
    all-zero output, never NaN, in fp32, fp16 and bf16 alike, as
    F.scaled_dot_product_attention does (checked with torch 2.13, CPU).
    """
    check_qkv(q, k, v)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., L, S)
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        check_mask(mask, scores.shape)
        # -inf, not -1e9: masked keys get exactly zero weight in any dtype.
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        # A fully masked row is softmax of all -inf, which is NaN (0 / 0).
        # Zeroing the masked entries turns that row, and only it, into 0s.
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
