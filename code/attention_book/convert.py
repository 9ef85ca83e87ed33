"""Turn a trained multi-head attention layer (or model) into a grouped-query one (Ainslie et al. 2023).

Query head i of the new layer reads K/V head ``i // (n_heads // n_kv_heads)``, the grouping of
``repeat_interleave`` and of ``F.scaled_dot_product_attention(..., enable_gqa=True)``. Each new K/V head is
built from the old K/V heads of its group of contiguous heads:

- ``"mean"``: the average of their key and value projections (weights and biases), the paper's recipe;
- ``"first"``: a copy of the first head of the group;
- ``"random"``: a fresh random projection, as if the K/V weights had never been trained.

The query and output projections are copied unchanged. A layer that is already GQA can be pooled further,
as long as the new number of K/V heads divides the old one.
"""
import copy
import dataclasses
import math

import torch
from torch import nn

from .attention_layer import GroupedQueryAttention
from .torch_interop import from_torch_mha
from .validation import require_divisible, require_positive

INITS = ("mean", "first", "random")


def pool_kv_heads(layer, n_kv_heads, init="mean", generator=None) -> GroupedQueryAttention:
    """A new ``GroupedQueryAttention`` with ``n_kv_heads`` K/V heads, built from ``layer``'s weights.

    Args:
        layer: a ``GroupedQueryAttention`` or an ``nn.MultiheadAttention`` (copied with ``from_torch_mha``).
        n_kv_heads: the new number of K/V heads, g. Must divide the layer's current number of K/V heads.
        init: ``"mean"``, ``"first"`` or ``"random"`` (see the module's docstring).
        generator: a ``torch.Generator`` for ``init="random"``, so that the result is reproducible.

    Returns:
        A new layer; ``layer`` is left untouched. Its k_proj and v_proj have weights of shape
        (n_kv_heads * d_head, d_model). It rotates queries and keys with ``layer``'s ``Rope``, if it has one.
    """
    if isinstance(layer, nn.MultiheadAttention):
        layer = from_torch_mha(layer)
    if not isinstance(layer, GroupedQueryAttention):
        raise TypeError(f"layer must be a GroupedQueryAttention or nn.MultiheadAttention, got {type(layer).__name__}")
    if init not in INITS:
        raise ValueError(f"init={init!r} must be one of {INITS}")
    require_positive(n_kv_heads=n_kv_heads)
    require_divisible("the layer's n_kv_heads", layer.n_kv_heads, "n_kv_heads", n_kv_heads)
    bias = layer.q_proj.bias is not None
    weight = layer.q_proj.weight
    new = GroupedQueryAttention(layer.d_model, layer.n_heads, n_kv_heads, layer.d_head, bias=bias, rope=layer.rope)
    new = new.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.q_proj.load_state_dict(layer.q_proj.state_dict())
        new.o_proj.load_state_dict(layer.o_proj.state_dict())
        for old_proj, new_proj in ((layer.k_proj, new.k_proj), (layer.v_proj, new.v_proj)):
            for name, param in old_proj.named_parameters():
                getattr(new_proj, name).copy_(
                    pool_heads(param, layer.n_kv_heads, n_kv_heads, init, generator, fan_in=layer.d_model))
    return new


def shared_kv_layer(layer, n_kv_heads) -> GroupedQueryAttention:
    """A copy of ``layer``, a layer that attends to another layer's keys and values (cross-layer sharing, no k_proj
    or v_proj), for a group whose K/V layer now has ``n_kv_heads`` heads: the same W_q, W_o and RoPE."""
    require_positive(n_kv_heads=n_kv_heads)
    require_divisible("the layer's n_kv_heads", layer.n_kv_heads, "n_kv_heads", n_kv_heads)
    weight = layer.q_proj.weight
    new = GroupedQueryAttention(layer.d_model, layer.n_heads, n_kv_heads, layer.d_head,
                                bias=layer.q_proj.bias is not None, rope=layer.rope, makes_kv=False)
    new = new.to(device=weight.device, dtype=weight.dtype)
    new.q_proj.load_state_dict(layer.q_proj.state_dict())
    new.o_proj.load_state_dict(layer.o_proj.state_dict())
    return new


def pool_heads(param, old_heads, new_heads, init, generator, fan_in):
    """Pool a K or V projection's weight (old_heads * d_head, d_model) or bias (old_heads * d_head,) into
    new_heads groups of consecutive heads: shape (new_heads * d_head, d_model) or (new_heads * d_head,)."""
    grouped = param.unflatten(0, (new_heads, old_heads // new_heads, -1))  # (g, heads per group, d_head, ...)
    if init == "mean":
        pooled = grouped.mean(dim=1)
    elif init == "first":
        pooled = grouped[:, 0]
    else:  # the same uniform range as nn.Linear's default initialisation
        bound = 1 / math.sqrt(fan_in)
        pooled = torch.rand(grouped[:, 0].shape, generator=generator, dtype=param.dtype) * 2 * bound - bound
    return pooled.flatten(0, 1)


def convert_to_gqa(model, n_kv_heads, init="mean", generator=None):
    """A copy of ``model`` in which every ``GroupedQueryAttention`` is pooled to ``n_kv_heads`` K/V heads.

    ``model`` may also be a single layer. A layer that shares another layer's keys and values (cross-layer sharing)
    keeps sharing them, now with n_kv_heads heads (``shared_kv_layer``). If the model has a dataclass ``config``
    with an ``n_kv_heads`` field (as ``TinyTransformer`` does), the copy's config says the new number. ``model`` is
    left untouched.
    """
    if isinstance(model, (GroupedQueryAttention, nn.MultiheadAttention)):
        return pool_kv_heads(model, n_kv_heads, init, generator)
    new = copy.deepcopy(model)
    layers = [(name, m) for name, m in new.named_modules() if isinstance(m, GroupedQueryAttention)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no GroupedQueryAttention layer to convert")
    for name, layer in layers:
        parent_name, _, attr = name.rpartition(".")
        parent = new.get_submodule(parent_name) if parent_name else new
        converted = pool_kv_heads(layer, n_kv_heads, init, generator) if layer.makes_kv else \
            shared_kv_layer(layer, n_kv_heads)
        setattr(parent, attr, converted)
    config = getattr(new, "config", None)
    if dataclasses.is_dataclass(config) and any(f.name == "n_kv_heads" for f in dataclasses.fields(config)):
        new.config = dataclasses.replace(config, n_kv_heads=n_kv_heads)
    return new
