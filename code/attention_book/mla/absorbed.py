"""Absorbed MLA attention: fold W_UK into the query and apply W_UV after attending, so the heads attend to the
cached latents directly, as multi-query attention with one (d_c + d_h^R)-wide K/V head."""
import torch
import torch.nn.functional as F

from .shapes import check_latent_inputs


def absorbed_attention(q_nope, q_rope, latent, w_uk, w_uv, scale, mask=None):
    """The same attention as ``naive_attention``, without rebuilding any key or value.

    Args and shapes as ``naive_attention``: q_nope (B, h, L, d_nope), q_rope (B, h, L, d_rope), latent
    (B, S, d_c + d_rope), w_uk (h * d_nope, d_c), w_uv (h * d_v, d_c), mask (L, S) or None (True = may attend).

    Returns:
        out: shape (B, h, L, d_v), equal to ``naive_attention``'s within float rounding.

    Head i scores token s with q_i . (W_UK_i c_s) + q^R_i . k^R_s = (W_UK_iᵀ q_i) . c_s + q^R_i . k^R_s: with the
    absorbed query [W_UK_iᵀ q_i ; q^R_i] of width d_c + d_rope, the key is the cached row itself. Its output is
    sum_s p_s W_UV_i c_s = W_UV_i (sum_s p_s c_s): attend over the latents c_s as values, then up-project once.
    Every head reads the same rows, so the heads fold into the query length (chapter 8's fold with g = 1) and one
    SDPA call reads the cache once. The whole rows are the values too: SDPA's fused CPU kernel needs keys and
    values of one width (with d_c-wide values it takes a slower path that copies every key), so each head mixes
    whole rows and keeps the first d_c numbers of the mix. Mixing the d_rope numbers of k^R as well costs
    d_rope / (2 d_c + d_rope) more FLOPs than needed, and no copy.
    """
    check_latent_inputs(q_nope, q_rope, latent, w_uk, w_uv, mask)
    B, h, L, d_nope = q_nope.shape
    d_c = w_uk.shape[1]
    q_latent = q_nope @ w_uk.view(h, d_nope, d_c)  # (B, h, L, d_c): W_UK_iᵀ q_i for every head i
    q = torch.cat((q_latent, q_rope), dim=-1).reshape(B, 1, h * L, -1)  # (B, 1, h L, d_c + d_rope): folded heads
    rows = latent[:, None]  # (B, 1, S, d_c + d_rope): the cached rows as one K/V head (a view, no copy)
    folded_mask = None if mask is None else mask.repeat(h, 1)  # (h L, S): row i L + l is query l of head i
    o = F.scaled_dot_product_attention(q, rows, rows, attn_mask=folded_mask, scale=scale)  # (B, 1, h L, d_c + d_rope)
    o = o[..., :d_c].view(B, h, L, d_c)  # each head's mix of the latents c_s (its mix of the k^R_s dropped)
    return o @ w_uv.view(h, -1, d_c).transpose(1, 2)  # (B, h, L, d_v): W_UV_i applied to head i's mix of latents
