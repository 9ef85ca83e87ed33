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


def check_layer_inputs(x, kv, d_model: int, weight: torch.Tensor) -> tuple[int, int, int]:
    """Check an attention layer's inputs x (B, L, d_model) and kv (B, S, d_model) against its d_model and the
    dtype of its weights (any dtype under autocast); return B, L, S."""
    for name, t, letters in (("x", x, "B, L, d_model"), ("kv", kv, "B, S, d_model")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape ({letters}), got {type(t).__name__}")
        require_rank(name, t, 3, letters)
        if t.shape[-1] != d_model:
            raise ValueError(f"{name} has last dimension {t.shape[-1]} but the layer has d_model={d_model}")
        if t.dtype != weight.dtype and not torch.is_autocast_enabled(t.device.type):
            raise ValueError(f"{name} has dtype {t.dtype} but the layer's weights are {weight.dtype}: "
                             f"convert one of them ({name}.to({weight.dtype}) or layer.to({t.dtype}))")
    if kv.shape[0] != x.shape[0]:
        raise ValueError(f"x and kv must have the same batch size B, got {x.shape[0]} and {kv.shape[0]}")
    return x.shape[0], x.shape[1], kv.shape[1]
