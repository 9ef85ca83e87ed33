"""The package's MLA layer and transformers' ``DeepseekV3Attention``, with the same weights (needs transformers).

transformers stacks what the paper keeps apart: ``kv_a_proj_with_mqa`` is [W_DKV ; W_KR] and ``kv_b_proj`` is, head
by head, [W_UK_i ; W_UV_i]. ``to_deepseek_v3`` builds a ``DeepseekV3Config`` with the layer's sizes and a
``DeepseekV3Attention`` holding the layer's weights, stacked that way. transformers is imported only when called, so
``attention_book.mla`` imports without it.
"""
import torch


def deepseek_v3_config(layer, **overrides):
    """A small ``DeepseekV3Config`` with the sizes of ``layer`` (a ``MultiHeadLatentAttention``), eager attention."""
    from transformers import DeepseekV3Config

    sizes = dict(hidden_size=layer.d_model, num_attention_heads=layer.n_heads, num_key_value_heads=layer.n_heads,
                 kv_lora_rank=layer.kv_lora_rank, q_lora_rank=layer.q_lora_rank,
                 qk_nope_head_dim=layer.qk_nope_head_dim, qk_rope_head_dim=layer.qk_rope_head_dim,
                 v_head_dim=layer.v_head_dim, rope_interleave=layer.rope.layout == "pairs",
                 rope_parameters={"rope_type": "default", "rope_theta": layer.rope.base},
                 rms_norm_eps=layer.kv_norm.eps, num_hidden_layers=1, intermediate_size=64,
                 moe_intermediate_size=16, n_routed_experts=4, n_group=1, topk_group=1, num_experts_per_tok=2,
                 vocab_size=32, attention_bias=False)
    config = DeepseekV3Config(**(sizes | overrides))
    config._attn_implementation = "eager"
    return config


@torch.no_grad()
def to_deepseek_v3(layer):
    """transformers' ``DeepseekV3Attention`` (layer_idx 0) with the weights of ``layer``; returns (attention, config).

    Call it as transformers' decoder layer does: ``attention(x, position_embeddings=rotary(x, position_ids),
    attention_mask=additive_mask, cache=DynamicCache(config=config))`` with ``rotary = DeepseekV3RotaryEmbedding(
    config)`` and a float mask of shape (B, 1, L, S) (0 where a query may attend, -inf elsewhere).
    """
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    config = deepseek_v3_config(layer)
    attention = DeepseekV3Attention(config, layer_idx=0).to(layer.kv_down.weight.dtype).eval()
    if layer.q_lora_rank is None:
        attention.q_proj.weight.copy_(layer.q_proj.weight)
    else:
        attention.q_a_proj.weight.copy_(layer.q_down.weight)
        attention.q_a_layernorm.weight.copy_(layer.q_norm.weight)
        attention.q_b_proj.weight.copy_(layer.q_up.weight)
    attention.kv_a_proj_with_mqa.weight.copy_(torch.cat((layer.kv_down.weight, layer.k_rope.weight)))
    attention.kv_a_layernorm.weight.copy_(layer.kv_norm.weight)
    h, d_c = layer.n_heads, layer.kv_lora_rank
    w_uk = layer.k_up.weight.view(h, layer.qk_nope_head_dim, d_c)
    w_uv = layer.v_up.weight.view(h, layer.v_head_dim, d_c)
    attention.kv_b_proj.weight.copy_(torch.cat((w_uk, w_uv), dim=1).reshape(-1, d_c))  # head i: [W_UK_i ; W_UV_i]
    attention.o_proj.weight.copy_(layer.o_proj.weight)
    return attention, config
