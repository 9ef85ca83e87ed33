"""Multi-head latent attention (DeepSeek-V2, section 2.1): one attention layer whose cache is a latent per token."""
import math

import torch
from torch import nn

from ..masks import causal_mask
from ..rope import Rope
from ..validation import check_layer_inputs, require_positive
from .absorbed import absorbed_attention
from .latent_cache import LatentCache
from .naive import naive_attention


class MultiHeadLatentAttention(nn.Module):
    """MLA: keys and values of all heads are rebuilt from one latent per token; only the latent is cached.

    Args (named as in DeepSeek's ``config.json``; the paper's symbols in brackets):
        d_model: size of each token's vector.
        n_heads: query heads, h [n_h].
        kv_lora_rank: width of the latent c_KV [d_c] (512 in DeepSeek-V2).
        qk_nope_head_dim: width of each head's position-free query and key [d_h] (128).
        qk_rope_head_dim: width of the RoPE query of each head and of the one RoPE key all heads share [d_h^R] (64).
        v_head_dim: width of each head's value (128).
        q_lora_rank: width of the queries' latent c_Q [d_c'] (1,536), or None for one plain W_q (V2-Lite).
        rope_base: RoPE's base; rope_layout: "pairs" (DeepSeek's weights, ``rope_interleave=True``) or "halves".
        eps: the RMSNorms' epsilon.
        scale: the scores' factor; None means 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim).

    Weights (``nn.Linear``, no biases), laid out as transformers' ``DeepseekV3Attention`` so that they copy over:
        q_proj (h (d_nope + d_rope), d_model), or q_down [W_DQ] (q_lora_rank, d_model), q_norm and
        q_up [W_UQ; W_QR] (h (d_nope + d_rope), q_lora_rank): each head's d_nope query then its d_rope RoPE query;
        kv_down [W_DKV] (d_c, d_model) and kv_norm (an RMSNorm on c_KV); k_rope [W_KR] (d_rope, d_model);
        k_up [W_UK] (h d_nope, d_c); v_up [W_UV] (h d_v, d_c); o_proj [W_O] (d_model, h d_v).
    """

    def __init__(self, d_model, n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
                 q_lora_rank=None, rope_base=10_000.0, rope_layout="pairs", eps=1e-6, scale=None):
        super().__init__()
        require_positive(d_model=d_model, n_heads=n_heads, kv_lora_rank=kv_lora_rank,
                         qk_nope_head_dim=qk_nope_head_dim, qk_rope_head_dim=qk_rope_head_dim, v_head_dim=v_head_dim)
        if q_lora_rank is not None:
            require_positive(q_lora_rank=q_lora_rank)
        if qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim={qk_rope_head_dim} must be even: RoPE rotates coordinates in pairs")
        self.d_model, self.n_heads, self.kv_lora_rank = d_model, n_heads, kv_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        self.q_lora_rank = q_lora_rank
        self.scale = 1 / math.sqrt(qk_nope_head_dim + qk_rope_head_dim) if scale is None else float(scale)
        q_width = n_heads * (qk_nope_head_dim + qk_rope_head_dim)
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, q_width, bias=False)
        else:
            self.q_down = nn.Linear(d_model, q_lora_rank, bias=False)
            self.q_norm = nn.RMSNorm(q_lora_rank, eps=eps)
            self.q_up = nn.Linear(q_lora_rank, q_width, bias=False)
        self.kv_down = nn.Linear(d_model, kv_lora_rank, bias=False)
        self.kv_norm = nn.RMSNorm(kv_lora_rank, eps=eps)
        self.k_rope = nn.Linear(d_model, qk_rope_head_dim, bias=False)
        self.k_up = nn.Linear(kv_lora_rank, n_heads * qk_nope_head_dim, bias=False)
        self.v_up = nn.Linear(kv_lora_rank, n_heads * v_head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * v_head_dim, d_model, bias=False)
        self.rope = Rope(qk_rope_head_dim, rope_base, rope_layout)

    def queries(self, x):
        """Each head's position-free and RoPE queries (not yet rotated) for x (B, L, d_model):
        q_nope (B, h, L, d_nope) and q_rope (B, h, L, d_rope)."""
        q = self.q_proj(x) if self.q_lora_rank is None else self.q_up(self.q_norm(self.q_down(x)))
        q = q.view(*x.shape[:2], self.n_heads, -1).transpose(1, 2)  # (B, h, L, d_nope + d_rope)
        return q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)

    def forward(self, x, cache=None, absorbed=False, is_causal=True):
        """Attend from the tokens of x to themselves and to everything in the cache.

        Args:
            x: shape (B, L, d_model).
            cache: a ``LatentCache`` (see ``new_cache``), under ``torch.no_grad()``, or None. This call's rows
                [c_KV ; k^R] are appended to it and the queries attend to all S = cache.length rows.
            absorbed: False rebuilds every head's keys and values from the latents (``naive_attention``); True
                attends to the latents directly (``absorbed_attention``). Both give the same output.
            is_causal: apply ``causal_mask(L, S)`` (True = may attend), aligned bottom-right.

        Returns:
            out: shape (B, L, d_model).
        """
        if not isinstance(absorbed, bool):
            raise ValueError(f"absorbed={absorbed!r} must be True (attend to the latents) or False (rebuild K, V)")
        if cache is not None and not isinstance(cache, LatentCache):
            raise ValueError(f"cache must be a LatentCache (layer.new_cache(...)) or None, got {type(cache).__name__}")
        B, L, _ = check_layer_inputs(x, x, self.d_model, self.kv_down.weight)
        start = 0 if cache is None else cache.length  # the position of x's first token
        q_nope, q_rope = self.queries(x)  # (B, h, L, d_nope), (B, h, L, d_rope)
        q_rope = self.rope(q_rope, start)
        c_kv = self.kv_norm(self.kv_down(x))  # (B, L, d_c)
        k_rope = self.rope(self.k_rope(x)[:, None], start)[:, 0]  # (B, L, d_rope): one RoPE key for all heads
        if cache is None:
            latent = torch.cat((c_kv, k_rope), dim=-1)  # (B, L, d_c + d_rope)
        else:
            latent = cache.append(c_kv, k_rope)  # (B, S, d_c + d_rope): every cached token
        mask = causal_mask(L, latent.shape[1], device=x.device) if is_causal else None  # (L, S)
        attend = absorbed_attention if absorbed else naive_attention
        out = attend(q_nope, q_rope, latent, self.k_up.weight, self.v_up.weight, self.scale, mask)  # (B, h, L, d_v)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, self.n_heads * self.v_head_dim))

    def new_cache(self, batch_size, max_len, dtype=None, device=None) -> LatentCache:
        """An empty cache for this layer: a buffer of shape (batch_size, max_len, kv_lora_rank + qk_rope_head_dim)."""
        weight = self.kv_down.weight
        return LatentCache(batch_size, self.kv_lora_rank, self.qk_rope_head_dim, max_len,
                           dtype=dtype or weight.dtype, device=device or weight.device)
