"""Copy weights between the book's attention layer and ``torch.nn.MultiheadAttention``.

Careful with masks: ``nn.MultiheadAttention`` reads a boolean ``attn_mask`` or ``key_padding_mask`` as
True = NOT allowed, the opposite of this book and of ``F.scaled_dot_product_attention``. Pass ``~mask``.
"""
import torch
from torch import nn

from .attention_layer import GroupedQueryAttention


def from_torch_mha(mha: nn.MultiheadAttention) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention`` (with n_kv_heads = n_heads) computing the same function as ``mha``."""
    if not mha._qkv_same_embed_dim:
        raise ValueError("mha must use kdim == vdim == embed_dim to be copied")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("mha with add_bias_kv=True or add_zero_attn=True has no counterpart in the book's layer")
    has_bias = mha.in_proj_bias is not None
    layer = GroupedQueryAttention(mha.embed_dim, mha.num_heads, bias=has_bias)
    layer = layer.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
    with torch.no_grad():
        # in_proj_weight stacks [W_q; W_k; W_v] into one (3 d_model, d_model) matrix.
        for proj, w in zip((layer.q_proj, layer.k_proj, layer.v_proj), mha.in_proj_weight.chunk(3), strict=True):
            proj.weight.copy_(w)
        layer.o_proj.weight.copy_(mha.out_proj.weight)
        if has_bias:
            for proj, b in zip((layer.q_proj, layer.k_proj, layer.v_proj), mha.in_proj_bias.chunk(3), strict=True):
                proj.bias.copy_(b)
            layer.o_proj.bias.copy_(mha.out_proj.bias)
    return layer


def to_torch_mha(layer: GroupedQueryAttention) -> nn.MultiheadAttention:
    """An ``nn.MultiheadAttention`` (batch_first=True) computing the same function as ``layer``.

    A GQA or MQA layer becomes an equivalent MHA one: each K/V head's weights are repeated for
    the n_heads // n_kv_heads query heads that read it (``repeat_interleave``, the layer's grouping).
    """
    if not getattr(layer, "makes_kv", True):  # chapter 3's MultiHeadAttention always makes its own
        raise ValueError("layer makes no keys and values of its own (it shares another layer's, cross_layer.py): "
                         "nn.MultiheadAttention has no way to read another layer's keys and values")
    if layer.n_heads * layer.d_head != layer.d_model:
        raise ValueError(
            f"nn.MultiheadAttention needs n_heads * d_head == d_model, got "
            f"{layer.n_heads} * {layer.d_head} != {layer.d_model}"
        )
    has_bias = layer.q_proj.bias is not None
    weight = layer.q_proj.weight
    mha = nn.MultiheadAttention(layer.d_model, layer.n_heads, bias=has_bias, batch_first=True,
                                device=weight.device, dtype=weight.dtype)
    group = layer.n_heads // layer.n_kv_heads

    def per_query_head(t):  # (g * d_head, ...) -> (h * d_head, ...)
        return t.unflatten(0, (layer.n_kv_heads, layer.d_head)).repeat_interleave(group, dim=0).flatten(0, 1)

    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([
            layer.q_proj.weight, per_query_head(layer.k_proj.weight), per_query_head(layer.v_proj.weight)]))
        mha.out_proj.weight.copy_(layer.o_proj.weight)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([
                layer.q_proj.bias, per_query_head(layer.k_proj.bias), per_query_head(layer.v_proj.bias)]))
            mha.out_proj.bias.copy_(layer.o_proj.bias)
    return mha
