"""Every bad input raises ValueError, and the message names the parameter and the rule it broke."""
import re

import pytest
import torch
from torch import nn

from attention_book.mla import LatentCache
from attention_book import (GroupedQueryAttention, KVCache, causal_mask, from_torch_mha, real_key_mask,
                            scaled_dot_product_attention, to_torch_mha)

B, L, S, D_MODEL = 2, 3, 5, 8


def layer(n_kv_heads=None):
    torch.manual_seed(0)
    return GroupedQueryAttention(D_MODEL, 4, n_kv_heads)  # d_head = 2


def x(*shape):
    return torch.randn(*shape) if shape else torch.randn(B, L, D_MODEL)


def qkv(q_shape=(B, L, 4), k_shape=(B, S, 4), v_shape=(B, S, 6)):
    return torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)


def sdpa(mask=None, **shapes):
    return scaled_dot_product_attention(*qkv(**shapes), mask)


def decode(chunks, cache_batch=B, max_len=4, dtype=None, n_kv_heads=None):
    """Run chunks of tokens through a cache made with the given batch size, length and dtype."""
    lay = layer(n_kv_heads)
    cache = lay.new_cache(cache_batch, max_len, dtype=dtype)
    with torch.no_grad():
        for n in chunks:
            lay(x(B, n, D_MODEL), cache=cache, is_causal=True)


def decode_with_other_layers_cache():
    cache = layer(n_kv_heads=1).new_cache(B, 8)  # g = 1 K/V head
    with torch.no_grad():
        layer(n_kv_heads=2)(x(), cache=cache)  # g = 2 K/V heads


def mha(**kwargs):
    return nn.MultiheadAttention(D_MODEL, 4, **kwargs)


BAD_SIZES = [0, -1, 2.5, True]  # zero, negative, not an integer, a bool (an int subclass)


def bad_sizes(name, make):
    """One case per bad value of the size ``name``; ``make(value)`` builds the layer with it."""
    return [pytest.param(lambda value=value: make(value),
                         rf"{name}={re.escape(repr(value))} must be a positive integer", id=f"{name}={value!r}")
            for value in BAD_SIZES]


SIZE_CASES = (
    bad_sizes("d_model", lambda value: GroupedQueryAttention(value, 4))
    + bad_sizes("n_heads", lambda value: GroupedQueryAttention(8, value))
    + bad_sizes("n_kv_heads", lambda value: GroupedQueryAttention(8, 4, value))
    + bad_sizes("d_head", lambda value: GroupedQueryAttention(8, 4, d_head=value))
)

CASES = SIZE_CASES + [
    # --- layer construction
    pytest.param(lambda: GroupedQueryAttention(10, 4), re.escape("d_model=10 is not divisible by n_heads=4"),
                 id="d_model-not-divisible-by-n_heads"),
    pytest.param(lambda: GroupedQueryAttention(12, 6, 4), re.escape("n_heads=6 is not divisible by n_kv_heads=4"),
                 id="n_heads-not-divisible-by-n_kv_heads"),
    pytest.param(lambda: GroupedQueryAttention(8, 2, 4), re.escape("n_heads=2 is not divisible by n_kv_heads=4"),
                 id="more-kv-heads-than-query-heads"),
    pytest.param(lambda: layer().new_cache(B, 0), r"max_len=0 must be a positive integer", id="new_cache-max_len=0"),
    pytest.param(lambda: layer().new_cache(-1, 4), r"batch_size=-1 must be a positive integer",
                 id="new_cache-batch_size=-1"),
    pytest.param(lambda: KVCache(1, 2, 2.0, 4), r"d_head=2.0 must be a positive integer", id="KVCache-d_head=2.0"),
    # --- layer inputs
    pytest.param(lambda: layer()(x(L, D_MODEL)), r"x must have shape \(B, L, d_model\), got 2 dimensions",
                 id="x-2d"),
    pytest.param(lambda: layer()(x(1, B, L, D_MODEL)), r"x must have shape \(B, L, d_model\), got 4 dimensions",
                 id="x-4d"),
    pytest.param(lambda: layer()(x(), x(S, D_MODEL)), r"kv must have shape \(B, S, d_model\), got 2 dimensions",
                 id="kv-2d"),
    pytest.param(lambda: layer()(x(B, L, 6)), r"x has last dimension 6 but the layer has d_model=8",
                 id="x-wrong-last-dim"),
    pytest.param(lambda: layer()(x(), x(B, S, 6)), r"kv has last dimension 6 but the layer has d_model=8",
                 id="kv-wrong-last-dim"),
    pytest.param(lambda: layer()(x(), x(B + 1, S, D_MODEL)),
                 r"x and kv must have the same batch size B, got 2 and 3", id="kv-batch-differs"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(L + 1, L, dtype=torch.bool)),
                 r"mask of shape \(4, 3\) does not broadcast to the attention scores' shape \(2, 4, 3, 3\)",
                 id="layer-mask-wrong-L"),
    pytest.param(lambda: layer()(x(), x(B, S, D_MODEL), mask=torch.ones(L, L, dtype=torch.bool)),
                 r"mask of shape \(3, 3\) does not broadcast .* \(2, 4, 3, 5\)", id="layer-mask-wrong-S"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(B + 1, L, L, dtype=torch.bool)),
                 r"mask of shape \(3, 1, 3, 3\) does not broadcast", id="layer-mask-wrong-batch"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(B, 3, L, L, dtype=torch.bool)),
                 r"mask of shape \(2, 3, 3, 3\) does not broadcast", id="layer-mask-wrong-heads"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(L, dtype=torch.bool)),
                 r"mask must be a boolean tensor of shape \(L, S\), \(B, L, S\) or \(B, 1 or h, L, S\), got \(3,\)",
                 id="layer-mask-1d"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(1, B, 1, L, L, dtype=torch.bool)),
                 r"mask must be a boolean tensor of shape .* got \(1, 2, 1, 3, 3\)", id="layer-mask-5d"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(L, L)),
                 r"mask must be a boolean tensor \(True = may attend\), got torch.float32", id="layer-mask-float"),
    pytest.param(lambda: layer()(x(), mask=torch.ones(B, L, L, dtype=torch.int64)),
                 r"mask must be a boolean tensor \(True = may attend\), got torch.int64", id="layer-mask-int"),
    pytest.param(lambda: layer()(x(), mask=[[True] * L] * L), r"mask must be a boolean tensor .* got list",
                 id="layer-mask-list"),
    pytest.param(lambda: layer()(x(B, S, D_MODEL), x(B, L, D_MODEL), is_causal=True),
                 r"L=5 queries cannot be the last positions of only S=3 keys: need L <= S",
                 id="causal-cross-attention-L>S"),
    # --- cached decoding
    pytest.param(lambda: decode([3, 2], max_len=4),
                 r"cache overflow: 3 cached \+ 2 new tokens exceeds max_len=4", id="cache-overflow"),
    pytest.param(lambda: decode([1] * 5, max_len=4),
                 r"cache overflow: 4 cached \+ 1 new tokens exceeds max_len=4", id="cache-overflow-token-by-token"),
    pytest.param(lambda: decode([1], cache_batch=B + 1),
                 r"batch size 2 does not match the cache's batch_size=3", id="cache-batch-differs"),
    pytest.param(lambda: decode([1], dtype=torch.float64),
                 r"k has dtype torch.float32 but the cache holds torch.float64", id="cache-dtype-differs"),
    pytest.param(decode_with_other_layers_cache, r"the cache holds n_kv_heads=1 and d_head=2 but the layer makes",
                 id="cache-of-another-layer"),
    pytest.param(lambda: KVCache(B, 2, 4, 8).append(torch.randn(B, 2, 1, 4), torch.randn(B, 2, 2, 4)),
                 r"k and v must have the same shape", id="cache-append-k-v-differ"),
    pytest.param(lambda: KVCache(B, 2, 4, 8).append(torch.randn(2, 1, 4), torch.randn(2, 1, 4)),
                 r"k must have shape \(B, g, L_new, d_head\), got 3 dimensions", id="cache-append-3d"),
    # v is checked as k is (18d0874 checked only k's dtype and device, and took zero new tokens)
    pytest.param(lambda: KVCache(B, 2, 4, 8).append(torch.randn(B, 2, 1, 4), torch.randn(B, 2, 1, 4).bfloat16()),
                 r"v has dtype torch.bfloat16 but the cache holds torch.float32", id="cache-append-v-dtype"),
    pytest.param(lambda: KVCache(B, 2, 4, 8).append(torch.randn(B, 2, 1, 4), torch.randn(B, 2, 1, 4, device="meta")),
                 r"v is on meta but the cache is on cpu", id="cache-append-v-device"),
    pytest.param(lambda: KVCache(B, 2, 4, 8).append(torch.randn(B, 2, 0, 4), torch.randn(B, 2, 0, 4)),
                 r"k and v hold no new token \(L_new = 0\)", id="cache-append-nothing"),
    pytest.param(lambda: layer()(x(), cache=LatentCache(B, 4, 2, 8)),
                 r"cache must be a K/V cache that keeps the contract of attention_book.kv_cache .* got LatentCache",
                 id="layer-given-a-latent-cache"),
    # --- sdpa
    pytest.param(lambda: sdpa(q_shape=(4,)),
                 r"q must have at least 2 dimensions \(\.\.\., length, d\), got shape \(4,\)",
                 id="sdpa-q-1d"),
    pytest.param(lambda: sdpa(k_shape=(4,)), r"k must have at least 2 dimensions", id="sdpa-k-1d"),
    pytest.param(lambda: sdpa(v_shape=(6,)), r"v must have at least 2 dimensions", id="sdpa-v-1d"),
    pytest.param(lambda: sdpa(q_shape=(B, L, 3)), r"q and k must have the same last dimension d", id="sdpa-d-differs"),
    pytest.param(lambda: sdpa(v_shape=(B, S + 1, 6)),
                 r"k \(\.\.\., S, d\) and v \(\.\.\., S, d_v\) must agree in every dimension but the last",
                 id="sdpa-S-differs"),
    pytest.param(lambda: sdpa(v_shape=(B + 1, S, 6)), r"must agree in every dimension but the last",
                 id="sdpa-kv-batch-differs"),
    pytest.param(lambda: sdpa(q_shape=(B + 1, L, 4)), r"q and k must have the same leading dimensions",
                 id="sdpa-q-batch-differs"),
    pytest.param(lambda: sdpa(mask=torch.ones(L, S + 1, dtype=torch.bool)),
                 r"mask of shape \(3, 6\) does not broadcast to the attention scores' shape \(2, 3, 5\)",
                 id="sdpa-mask-wrong-shape"),
    pytest.param(lambda: sdpa(mask=torch.ones(1, B, L, S, dtype=torch.bool)),
                 r"mask of shape \(1, 2, 3, 5\) does not broadcast", id="sdpa-mask-too-many-dims"),
    pytest.param(lambda: sdpa(mask=torch.ones(L, S)), r"mask must be a boolean tensor .* got torch.float32",
                 id="sdpa-mask-float"),
    pytest.param(lambda: sdpa(mask=torch.ones(L, S, dtype=torch.int32)),
                 r"mask must be a boolean tensor .* got torch.int32", id="sdpa-mask-int"),
    # --- masks
    pytest.param(lambda: causal_mask(5, 3), r"L=5 queries cannot be the last positions of only S=3 keys: need L <= S",
                 id="causal_mask-L>S"),
    pytest.param(lambda: causal_mask(0), r"L=0 must be a positive integer", id="causal_mask-L=0"),
    pytest.param(lambda: causal_mask(2, -3), r"S=-3 must be a positive integer", id="causal_mask-S=-3"),
    pytest.param(lambda: real_key_mask([2, 5], 4), re.escape("lengths must be <= S=4, got [2, 5]"),
                 id="real_key_mask-length>S"),
    pytest.param(lambda: real_key_mask([2, -1], 4), re.escape("lengths must be >= 0, got [2, -1]"),
                 id="real_key_mask-negative-length"),
    pytest.param(lambda: real_key_mask([1.5, 2.0], 4), r"lengths must be a 1-D sequence of integers, got torch.float32",
                 id="real_key_mask-float-lengths"),
    pytest.param(lambda: real_key_mask([[1, 2]], 4), r"lengths must be a 1-D sequence of integers, .* shape \(1, 2\)",
                 id="real_key_mask-2d-lengths"),
    pytest.param(lambda: real_key_mask([True, False], 4), r"lengths must be a 1-D sequence of integers, got torch.bool",
                 id="real_key_mask-bool-lengths"),
    pytest.param(lambda: real_key_mask([0, 0]), r"S=0 must be a positive integer", id="real_key_mask-all-empty"),
    # --- interop with nn.MultiheadAttention
    pytest.param(lambda: to_torch_mha(GroupedQueryAttention(10, 2, d_head=4)),
                 re.escape("nn.MultiheadAttention needs n_heads * d_head == d_model, got 2 * 4 != 10"),
                 id="to_torch_mha-d_head*n_heads!=d_model"),
    pytest.param(lambda: from_torch_mha(mha(add_bias_kv=True)), r"add_bias_kv=True or add_zero_attn=True",
                 id="from_torch_mha-add_bias_kv"),
    pytest.param(lambda: from_torch_mha(mha(add_zero_attn=True)), r"add_bias_kv=True or add_zero_attn=True",
                 id="from_torch_mha-add_zero_attn"),
    pytest.param(lambda: from_torch_mha(mha(kdim=6, vdim=6)), r"kdim == vdim == embed_dim",
                 id="from_torch_mha-kdim"),
]


@pytest.mark.parametrize("call, message", CASES)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_failed_append_leaves_the_cache_unchanged():
    cache = KVCache(1, 1, 2, max_len=3)
    cache.append(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))
    with pytest.raises(ValueError, match="cache overflow"):
        cache.append(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))
    assert cache.length == 2
    k, v = cache.append(torch.full((1, 1, 1, 2), 2.0), torch.full((1, 1, 1, 2), 2.0))  # one more still fits
    assert cache.length == 3 and k[0, 0, :, 0].tolist() == [1.0, 1.0, 2.0]


@pytest.mark.parametrize("lengths", [[], torch.tensor([], dtype=torch.long)], ids=["list", "tensor"])
def test_real_key_mask_rejects_no_lengths(lengths):
    with pytest.raises(ValueError, match="lengths must hold one length per sequence"):
        real_key_mask(lengths)


def test_numpy_integers_are_accepted_as_sizes():
    import numpy as np

    layer = GroupedQueryAttention(np.int64(8), np.int64(2))
    assert layer(torch.randn(1, 3, 8))[0].shape == (1, 3, 8)
