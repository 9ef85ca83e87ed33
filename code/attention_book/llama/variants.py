"""The same pretrained model with more or fewer K/V heads (MHA, GQA, MQA), and its perplexity on a text.

- More K/V heads: each K/V head is repeated for its group (3 -> 9 in SmolLM2: MHA). Query head i still reads the
  same keys and values, so the outputs are the same; only the cache grows (3x).
- Fewer K/V heads: the K/V heads of each group are mean-pooled (``attention_book.convert.pool_kv_heads``, as
  chapter 9 does, without training): 3 -> 1 is MQA, with a third of the cache, at a cost in quality that
  ``perplexity`` measures.
"""
import dataclasses
import math

import torch
import torch.nn.functional as F

from ..attention_layer import GroupedQueryAttention
from ..convert import pool_kv_heads
from ..validation import require_positive
from .decoder import LlamaDecoder, fuse_qkv


def repeat_kv_heads(layer, n_kv_heads) -> GroupedQueryAttention:
    """A ``GroupedQueryAttention`` with each of ``layer``'s g K/V heads repeated n_kv_heads / g times.

    K/V head j of the new layer is head j // (n_kv_heads / g) of the old one (``repeat_interleave`` of the heads),
    so query head i reads the same keys and values as before. The query and output projections (and the RoPE) are
    ``layer``'s own, shared. The new k_proj and v_proj weights have shape (n_kv_heads * d_head, d_model).
    """
    g = layer.n_kv_heads
    if n_kv_heads % g:
        raise ValueError(f"n_kv_heads={n_kv_heads} must be a multiple of the layer's n_kv_heads={g}")
    weight = layer.k_proj.weight
    new = GroupedQueryAttention(layer.d_model, layer.n_heads, n_kv_heads, layer.d_head,
                                bias=layer.k_proj.bias is not None, rope=layer.rope).to(weight.device, weight.dtype)
    new.q_proj, new.o_proj = layer.q_proj, layer.o_proj
    with torch.no_grad():
        for old, fresh in ((layer.k_proj, new.k_proj), (layer.v_proj, new.v_proj)):
            for name, param in fresh.named_parameters():  # weight (n_kv_heads * d_head, d_model), maybe bias
                heads = getattr(old, name).unflatten(0, (g, layer.d_head))  # (g, d_head, ...)
                param.copy_(heads.repeat_interleave(n_kv_heads // g, dim=0).flatten(0, 1))
    return new


def with_kv_heads(model: LlamaDecoder, n_kv_heads, init="mean") -> LlamaDecoder:
    """The same model with n_kv_heads K/V heads per layer: repeated (more) or pooled (fewer; ``init`` "mean",
    "first" or "random", as ``attention_book.convert.pool_kv_heads`` takes).

    Every other weight (embedding, norms, MLPs, W_o; W_q too unless sped up) is shared with ``model``, not copied;
    ``model`` is left as it was. If ``model`` was sped up (``speed_up``), so is the new one: speed a model up
    before making variants of it, since ``speed_up`` on a variant would also change the layers it shares.
    """
    config = model.config
    require_positive(n_kv_heads=n_kv_heads)
    if config.n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={config.n_heads}")
    new_config = dataclasses.replace(config, n_kv_heads=n_kv_heads)
    with torch.device("meta"):  # a shell: every module in it is replaced below
        new = LlamaDecoder(new_config, model.rope.layout)
    new.rope, new.embedding, new.norm, new.output = model.rope, model.embedding, model.norm, model.output
    for old, block in zip(model.layers, new.layers, strict=True):
        if n_kv_heads >= old.attention.n_kv_heads:
            attention = repeat_kv_heads(old.attention, n_kv_heads)
        else:
            attention = pool_kv_heads(old.attention, n_kv_heads, init=init)
            attention.q_proj, attention.o_proj = old.attention.q_proj, old.attention.o_proj  # shared, not copied
        block.attention_norm, block.attention, block.mlp_norm, block.mlp = (
            old.attention_norm, attention, old.mlp_norm, old.mlp)
        if old.attention.qkv_proj is not None:  # the model was sped up: so is its copy
            fuse_qkv(attention)
    return new.eval()


def with_shared_kv(model: LlamaDecoder, share=2) -> LlamaDecoder:
    """The same model with keys and values shared across each group of ``share`` consecutive layers (cross-layer
    attention, ``attention_book.cross_layer``), with no training.

    The first layer of each group keeps its attention; the others get a ``GroupedQueryAttention`` without k_proj and
    v_proj that reuses their own W_q, W_o and RoPE and attends to the group's keys and values. Every weight is
    ``model``'s own tensor, not a copy, and ``model`` is left as it was. SmolLM2 was not trained this way: what it
    costs is measured (chapter 15), not assumed.
    """
    if model.kv_share != 1:
        raise ValueError(f"model already shares K/V (kv_share={model.kv_share}); start from an unshared model")
    with torch.device("meta"):  # a shell: every module in it is replaced below
        new = LlamaDecoder(model.config, model.rope.layout, kv_share=share)
    new.rope, new.embedding, new.norm, new.output = model.rope, model.embedding, model.norm, model.output
    for old, block in zip(model.layers, new.layers, strict=True):
        attention = old.attention
        if not block.attention.makes_kv:  # attends to its group's K/V: W_q, W_o and the RoPE are the layer's own
            a = old.attention
            with torch.device("meta"):  # its projections are replaced at once
                attention = GroupedQueryAttention(a.d_model, a.n_heads, a.n_kv_heads, a.d_head, bias=False,
                                                  rope=a.rope, makes_kv=False)
            attention.q_proj, attention.o_proj = a.q_proj, a.o_proj
        block.attention_norm, block.attention, block.mlp_norm, block.mlp = (
            old.attention_norm, attention, old.mlp_norm, old.mlp)
    return new.eval()


@torch.inference_mode()
def token_losses(model, ids, chunk=256, new_caches=None):
    """The loss (negative log-likelihood, in nats) of each token of ``ids`` given all the tokens before it.

    Args:
        ids: token ids, shape (N,) or (1, N), N >= 2 and at most the model's context length.
        chunk: tokens per forward call. The chunks go through one cache per layer, so every token sees the
            whole text before it that its cache keeps (with ``KVCache``, all of it: one pass over all N tokens),
            with logits of only (chunk, V) at a time.
        new_caches: None (the default: ``model.new_caches(1, N)``, one full ``KVCache`` per layer), a callable
            ``new_caches(batch_size, max_len)`` returning one cache per layer, or a list of fresh caches, one per
            layer (batch size 1). Chapter 15 passes its cache policies this way (a ``RingKVCache`` per layer, say):
            each token is then predicted under that policy.
    Returns:
        losses: shape (N - 1,); losses[i] is the loss of token i + 1.
    """
    ids = ids.reshape(1, -1)
    N = ids.shape[1]
    if N < 2:
        raise ValueError(f"token_losses needs at least 2 tokens, got {N}")
    if N > model.config.context_length:  # a ring cache would take them, at positions the model never saw
        raise ValueError(f"ids holds N={N} tokens, more than the model's context length "
                         f"{model.config.context_length}")
    require_positive(chunk=chunk)
    if new_caches is None:
        caches = model.new_caches(1, N)
    elif callable(new_caches):
        caches = new_caches(1, N)
    else:
        caches = list(new_caches)
    losses = []
    for start in range(0, N - 1, chunk):
        end = min(start + chunk, N - 1)
        logits = model(ids[:, start:end], caches)  # (1, end - start, V): predictions of tokens start + 1 .. end
        losses.append(F.cross_entropy(logits[0], ids[0, start + 1:end + 1], reduction="none"))
    return torch.cat(losses)


def perplexity(model, ids, chunk=256, new_caches=None) -> float:
    """exp(mean negative log-likelihood) of each token of ``ids`` given all the tokens before it: the mean of
    ``token_losses`` (same arguments), exponentiated."""
    losses = token_losses(model, ids, chunk, new_caches)
    return math.exp(losses.double().mean().item())
