"""Boolean attention masks. True means "may attend", as in PyTorch's ``F.scaled_dot_product_attention``."""
import torch

from .validation import check_mask, require_positive


def causal_mask(L: int, S: int | None = None, device=None) -> torch.Tensor:
    """Causal mask for L queries against S keys, aligned bottom-right. Shape (L, S).

    The L queries are the *last* L positions of the S keys: query i may attend to keys
    0 .. i + (S - L). With L == S this is the usual lower triangle. With a KV cache
    (S > L) the newest query sees every key, which is what decoding needs.
    PyTorch's ``is_causal=True`` aligns top-left instead, so a single decode query would see only key 0.
    """
    S = L if S is None else S
    require_positive(L=L, S=S)
    if L > S:
        raise ValueError(f"L={L} queries cannot be the last positions of only S={S} keys: need L <= S")
    return torch.ones(L, S, dtype=torch.bool, device=device).tril(diagonal=S - L)


def real_key_mask(lengths, S: int | None = None, device=None) -> torch.Tensor:
    """Which keys are real tokens, from sequence lengths: True = a real key (may attend). Shape (B, 1, S).

    Sequence b has ``lengths[b]`` real tokens followed by padding; its keys at positions >= lengths[b]
    are False (masked out). Mind the polarity: PyTorch's ``key_padding_mask`` means the opposite
    (True = padding), so pass it ``~real_key_mask(lengths, S)[:, 0]``. The middle dimension of size 1 broadcasts
    over the L queries, so the result combines with a causal mask as
    ``causal_mask(L, S) & real_key_mask(lengths, S)`` -> (B, L, S).
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.numel() == 0:
        raise ValueError("lengths must hold one length per sequence, got none")
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D sequence of integers, "
                         f"got {lengths.dtype} of shape {tuple(lengths.shape)}")
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    S = int(lengths.max()) if S is None else S
    require_positive(S=S)
    if (lengths > S).any():
        raise ValueError(f"lengths must be <= S={S}, got {lengths.tolist()}")
    positions = torch.arange(S, device=lengths.device)  # (S,)
    return (positions < lengths[:, None])[:, None, :]  # (B, 1, S)


def layer_mask(mask, is_causal, batch_size, n_heads, L, S, device=None, causal=None):
    """An attention layer's one boolean mask (True = may attend): the caller's ``mask`` and, if ``is_causal``,
    ``causal_mask(L, S)`` (or ``causal``, when given), combined; None when there is neither.

    Args:
        mask: None, or a boolean tensor of shape (L, S), (B, L, S) or (B, 1 or h, L, S).
        causal: None, or the (L, S) mask to use for causality, such as a cache's ``causal_mask(L)``.

    Returns:
        None, or a mask of shape (L, S) or (B or 1, h or 1, L, S) that broadcasts to the scores (B, h, L, S).
    """
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dim() not in (2, 3, 4):
            shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"mask must be a boolean tensor of shape (L, S), (B, L, S) or (B, 1 or h, L, S), "
                             f"got {shape}")
        if mask.dim() == 3:
            mask = mask[:, None]  # (B, L, S) -> (B, 1, L, S): the same mask for every head
        check_mask(mask, torch.Size((batch_size, n_heads, L, S)))
    if is_causal:
        causal = causal_mask(L, S, device=device) if causal is None else causal  # (L, S), aligned bottom-right
        mask = causal if mask is None else mask & causal
    return mask
