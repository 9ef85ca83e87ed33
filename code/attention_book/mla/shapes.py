"""The shapes that naive and absorbed MLA attention take, checked once, with errors that name the tensor."""
import torch

from ..validation import check_mask


def check_latent_inputs(q_nope, q_rope, latent, w_uk, w_uv, mask):
    """Check q_nope (B, h, L, d_nope), q_rope (B, h, L, d_rope), latent (B, S, d_c + d_rope),
    w_uk (h * d_nope, d_c), w_uv (h * d_v, d_c) and mask (L, S) or None against each other."""
    for name, t, letters in (("q_nope", q_nope, "B, h, L, d_nope"), ("q_rope", q_rope, "B, h, L, d_rope"),
                             ("latent", latent, "B, S, d_c + d_rope"), ("w_uk", w_uk, "h * d_nope, d_c"),
                             ("w_uv", w_uv, "h * d_v, d_c")):
        rank = len(letters.split(", "))
        if not isinstance(t, torch.Tensor) or t.dim() != rank:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must have shape ({letters}), got {shape}")
    B, h, L, d_nope = q_nope.shape
    if q_rope.shape[:3] != (B, h, L):
        raise ValueError(f"q_rope {tuple(q_rope.shape)} must match q_nope {tuple(q_nope.shape)} in (B, h, L)")
    d_c, d_rope = w_uk.shape[1], q_rope.shape[3]
    if w_uk.shape[0] != h * d_nope:
        raise ValueError(f"w_uk has {w_uk.shape[0]} rows, but h * d_nope = {h} * {d_nope} = {h * d_nope}")
    if w_uv.shape[1] != d_c or w_uv.shape[0] % h:
        raise ValueError(f"w_uv must have shape (h * d_v, d_c) with h = {h} and d_c = {d_c}, got {tuple(w_uv.shape)}")
    if latent.shape[0] != B or latent.shape[2] != d_c + d_rope:
        raise ValueError(f"latent must have shape (B, S, d_c + d_rope) = ({B}, S, {d_c} + {d_rope}), "
                         f"got {tuple(latent.shape)}")
    if mask is not None:
        check_mask(mask, torch.Size((L, latent.shape[1])))
