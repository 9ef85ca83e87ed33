"""The sliding-window mask: each query sees the last ``window`` keys up to itself, plus the first ``n_sinks`` keys.

Sliding-window attention (Mistral 7B v0.1: window 4,096; Gemma 3's local layers: 1,024) bounds what each query reads;
StreamingLLM's attention sinks (Xiao et al. 2023: the first 4 tokens) keep the first keys visible forever as well.
This mask is what a whole sequence evaluated in one pass (perplexity) uses; ``RingKVCache`` is its decoding twin.
"""
import torch

from .. import masks
from ..validation import require_positive


def window_mask(L, S, window, n_sinks=0, device=None):
    """Which keys each query may attend to under a sliding window with attention sinks. Shape (L, S), True = may
    attend.

    Aligned bottom-right like ``causal_mask``: query i sits at position p = S - L + i, and sees key j iff
    j <= p and (p - j < window or j < n_sinks). With window >= S and no sinks this is ``causal_mask(L, S)``.

    Args:
        L: queries; S: keys, L <= S.
        window: how many of the most recent positions (the query's own included) each query sees, >= 1.
        n_sinks: how many of the first positions every query also sees, >= 0.
    """
    require_positive(window=window)
    if isinstance(n_sinks, bool) or not isinstance(n_sinks, int) or n_sinks < 0:
        raise ValueError(f"n_sinks={n_sinks!r} must be a non-negative integer (the first keys every query sees)")
    causal = masks.causal_mask(L, S, device=device)  # checks L, S and L <= S
    query = torch.arange(S - L, S, device=device)[:, None]  # (L, 1): each query's position
    key = torch.arange(S, device=device)[None, :]  # (1, S)
    return causal & ((query - key < window) | (key < n_sinks))
