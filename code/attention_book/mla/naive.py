"""Naive MLA attention: rebuild every head's keys and values from the cached latents, then attend as MHA."""
import torch
import torch.nn.functional as F

from ..sdpa import scaled_dot_product_attention
from .shapes import check_latent_inputs


def naive_attention(q_nope, q_rope, latent, w_uk, w_uv, scale, mask=None):
    """Multi-head latent attention computed as the paper writes it: decompress, then attend.

    Args:
        q_nope: the queries' position-free part, shape (B, h, L, d_nope).
        q_rope: the queries' rotated RoPE part, shape (B, h, L, d_rope).
        latent: the cached rows [c_KV ; k^R], shape (B, S, d_c + d_rope) (``LatentCache.append`` returns them).
        w_uk: W_UK, the keys' up-projection, shape (h * d_nope, d_c) (an ``nn.Linear`` weight).
        w_uv: W_UV, the values' up-projection, shape (h * d_v, d_c).
        scale: the factor applied to the scores, 1 / sqrt(d_nope + d_rope) in DeepSeek-V2.
        mask: optional boolean mask (True = may attend), shape (L, S).

    Returns:
        out: shape (B, h, L, d_v).

    Head i's key for token s is [W_UK_i c_s ; k^R_s] and its value W_UV_i c_s. Every call rebuilds them for all S
    cached tokens: 2 S d_c h (d_nope + d_v) FLOPs and h (d_nope + d_rope + d_v) numbers written per token, the full
    MHA cache that MLA was meant to avoid storing. They attend with chapter 1's ``scaled_dot_product_attention``:
    the keys are d_nope + d_rope wide and the values d_v, and PyTorch's fused CPU kernel needs one width for both.
    """
    check_latent_inputs(q_nope, q_rope, latent, w_uk, w_uv, mask)
    B, h, L, d_nope = q_nope.shape
    S, d_c = latent.shape[1], w_uk.shape[1]
    c_kv, k_rope = latent[..., :d_c], latent[..., d_c:]  # (B, S, d_c), (B, S, d_rope)
    k_nope = F.linear(c_kv, w_uk).view(B, S, h, d_nope).transpose(1, 2)  # (B, h, S, d_nope)
    v = F.linear(c_kv, w_uv).view(B, S, h, -1).transpose(1, 2)  # (B, h, S, d_v)
    k = torch.cat((k_nope, k_rope[:, None].expand(B, h, S, -1)), dim=-1)  # (B, h, S, d_nope + d_rope)
    q = torch.cat((q_nope, q_rope), dim=-1)  # (B, h, L, d_nope + d_rope)
    out, _ = scaled_dot_product_attention(q, k, v, mask, scale)  # chapter 1's softmax(q kᵀ scale) v
    return out
