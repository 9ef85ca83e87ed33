"""What one decode step of MLA costs: FLOPs and bytes of the naive and absorbed paths, and of an MHA cache.

Counted for one new token (L = 1, B = 1) attending to S cached tokens, for the attention itself: the projections
that both paths share (queries, the new latent, W_O) are left out. Multiply-adds count 2 FLOPs. These are the counts
of an ideal kernel, which moves every number it needs once and nothing else;
``experiments.operator_traffic.count_traffic`` measures what the package's code moves, operation by operation
(chapter 14, section 7).
"""
from ..validation import require_positive

PATHS = ("naive", "absorbed", "mha")


def decode_step_cost(path, S, n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                     bytes_per_element=2):
    """FLOPs and bytes read or written by one decode step over S cached tokens.

    Args:
        path: "naive" (rebuild K and V of every head from the S latents, write them, read them to attend),
            "absorbed" (attend to the S latents: MQA with a (d_c + d_rope)-wide key and a d_c-wide value), or
            "mha" (what the same heads would read from an MHA cache of K and V: h (d_nope + d_rope + d_v) per token).
        S, n_heads (h), kv_lora_rank (d_c), qk_nope_head_dim (d_nope), qk_rope_head_dim (d_rope), v_head_dim (d_v):
            the sizes; bytes_per_element: 2 for fp16/bf16, 4 for fp32.

    Returns:
        dict with "flops", "bytes" and "intensity" (FLOP per byte).

    naive: 2 S d_c h (d_nope + d_v) FLOPs to rebuild, 2 S h (d_nope + d_rope + d_v) to attend; bytes: the latents,
    W_UK and W_UV, and the rebuilt K and V written once and read once.
    absorbed: 2 h d_c (d_nope + d_v) FLOPs to fold W_UK into the query and apply W_UV, 2 S h (2 d_c + d_rope) to
    attend; bytes: the latents and W_UK, W_UV.
    mha: 2 S h (d_nope + d_rope + d_v) FLOPs; bytes: the cached K and V.
    """
    if path not in PATHS:
        raise ValueError(f"path={path!r} must be one of {PATHS}")
    require_positive(S=S, n_heads=n_heads, kv_lora_rank=kv_lora_rank, qk_nope_head_dim=qk_nope_head_dim,
                     qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim, bytes_per_element=bytes_per_element)
    h, d_c, d_nope, d_rope, d_v = n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    kv_per_token = h * (d_nope + d_rope + d_v)  # numbers of one token's K and V over all heads
    up_weights = h * (d_nope + d_v) * d_c  # numbers in W_UK and W_UV
    if path == "naive":
        flops = 2 * S * d_c * h * (d_nope + d_v) + 2 * S * kv_per_token
        numbers = S * (d_c + d_rope) + up_weights + 2 * S * kv_per_token
    elif path == "absorbed":
        flops = 2 * h * d_c * (d_nope + d_v) + 2 * S * h * (2 * d_c + d_rope)
        numbers = S * (d_c + d_rope) + up_weights
    else:
        flops = 2 * S * kv_per_token
        numbers = S * kv_per_token
    n_bytes = numbers * bytes_per_element
    return {"flops": flops, "bytes": n_bytes, "intensity": flops / n_bytes}
