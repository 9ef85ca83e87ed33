"""The online softmax (Milakov and Gimelshein, 2018): the softmax's maximum and sum computed in one pass over blocks.

A softmax needs the maximum of its row (to shift the exponents so that none overflows) and the sum of the shifted
exponentials (to normalise). Read the row block by block and keep both as running values: when a block raises the
maximum from m to m', every exponential summed so far was shifted by m instead of m', and multiplying the running
sum by exp(m - m') shifts all of them at once. The result is exact, not an approximation.
"""
import math
import numbers

import torch


def running_update(m, sum_exp, scores_block):
    """One step of the online softmax: fold a block of scores into the running maximum and sum.

    Args:
        m: the running maximum so far, shape (..., 1); -inf before the first block.
        sum_exp: the running sum of exp(score - m) so far, shape (..., 1); 0 before the first block.
        scores_block: the next block of scores, shape (..., n) with n >= 1.

    Returns:
        (m_new, sum_new), each of shape (..., 1): m_new = max(m, max of the block), and
        sum_new = sum_exp * exp(m - m_new) + sum(exp(scores_block - m_new)).

    A row whose scores so far are all -inf keeps m = -inf and sum_exp = 0 (it shifts by 0 instead of by -inf, which
    would give exp(-inf + inf) = NaN).
    """
    m_new = torch.maximum(m, scores_block.amax(dim=-1, keepdim=True))
    shift = m_new.masked_fill(m_new == float("-inf"), 0.0)  # (..., 1): nothing finite yet, nothing to shift by
    sum_new = sum_exp * torch.exp(m - shift) + torch.exp(scores_block - shift).sum(dim=-1, keepdim=True)
    return m_new, sum_new


def online_softmax(scores, block):
    """Softmax over the last dimension, with its maximum and sum computed block by block in one pass.

    Args:
        scores: a floating-point tensor of shape (..., S), S >= 1. Entries may be -inf (masked out).
        block: how many entries of the last dimension each step reads (a positive integer; it need not divide S).

    Returns:
        the weights, shape (..., S), equal to ``torch.softmax(scores, dim=-1)`` up to float rounding. As
        ``torch.softmax`` does, a row whose entries are all -inf gives NaN (0 / 0): chapter 13's tiled attention,
        and the book's attention functions, give such a query zeros instead.

    The first pass keeps a running maximum m and sum of exponentials sum_exp (``running_update``); the second writes
    exp(scores - m) / sum_exp. Only (..., 1) numbers are kept between blocks, whatever S is.
    """
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point() or scores.dim() < 1:
        raise ValueError(f"scores must be a floating-point tensor of shape (..., S), got "
                         f"{scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__}")
    if scores.shape[-1] == 0:
        raise ValueError(f"scores must have at least one entry in its last dimension S, "
                         f"got shape {tuple(scores.shape)}")
    if isinstance(block, bool) or not isinstance(block, numbers.Integral) or block <= 0:
        raise ValueError(f"block={block!r} must be a positive integer")
    m = torch.full(scores.shape[:-1] + (1,), -math.inf, dtype=scores.dtype, device=scores.device)  # (..., 1)
    sum_exp = torch.zeros_like(m)  # (..., 1)
    for start in range(0, scores.shape[-1], block):
        m, sum_exp = running_update(m, sum_exp, scores[..., start:start + block])
    return torch.exp(scores - m) / sum_exp  # an all -inf row: exp(-inf + inf) / 0 = NaN, as in torch.softmax
