"""Small checks that turn bad input into a clear ``ValueError``.

Every message names the parameter and the rule it broke, for example
``d_model=10 is not divisible by n_heads=4``, so that a mistake is reported where it is made
instead of surfacing later as a wrong shape or a NaN.
"""
import numbers

import torch


def require_positive(**sizes: int) -> None:
    """Raise if any of the named sizes is not a positive integer."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise ValueError(f"{name}={value!r} must be a positive integer")


def require_divisible(num_name: str, num: int, den_name: str, den: int) -> None:
    """Raise unless ``num`` is a multiple of ``den``."""
    if num % den != 0:
        raise ValueError(f"{num_name}={num} is not divisible by {den_name}={den}")


def require_rank(name: str, x: torch.Tensor, rank: int, letters: str) -> None:
    """Raise unless ``x`` has exactly ``rank`` dimensions; ``letters`` spells the expected shape."""
    if x.dim() != rank:
        raise ValueError(f"{name} must have shape ({letters}), got {x.dim()} dimensions: {tuple(x.shape)}")


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Check q (..., L, d), k (..., S, d) and v (..., S, d_v) against each other."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, d), got shape {tuple(x.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension d, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"k (..., S, d) and v (..., S, d_v) must agree in every dimension but the last, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q and k must have the same leading dimensions, "
                         f"got q {tuple(q.shape)} and k {tuple(k.shape)}")


def check_mask(mask: torch.Tensor, scores_shape: torch.Size) -> None:
    """Check that ``mask`` is boolean and broadcasts to the scores' shape (..., L, S)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        dtype = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got {dtype}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} (..., L, S)"
        )
