"""The cache diet (chapter 15): sliding-window masks and ring-buffer caches, int8 K/V, local/global layer patterns
and cross-layer K/V sharing, each against a reference on many shapes."""
import math

import pytest
import torch
from _hypothesis import SEEDS
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book import GroupedQueryAttention, KVCache, causal_mask
from attention_book.cache_diet import (Int8KVCache, RingKVCache, cache_bytes_at, cache_bytes_per_token_at,
                                       dequantize, int8_caches, int8_decode_attention, layer_windows,
                                       local_global_caches, quantize_keys_per_channel, quantize_values_per_token,
                                       ring_caches, window_mask)
from attention_book.cross_layer import shared_kv_owners
from attention_book.grouped_sdpa import grouped_query_sdpa
from attention_book.kv_cache import kv_cache_bytes_per_token
from attention_book.llama.decoder import LlamaDecoder
from attention_book.llama.loader import LlamaConfig
from attention_book.llama.variants import token_losses, with_shared_kv
from attention_book.rope import Rope


def make_layer(seed, g, rope_layout):
    torch.manual_seed(seed)
    rope = None if rope_layout is None else Rope(8, 10_000.0, rope_layout)
    return GroupedQueryAttention(32, 4, g, d_head=8, rope=rope).eval()


def run_in_chunks(layer, x, cache, cuts):
    """The layer over x (B, N, d_model) chunk by chunk through the cache; cuts: the chunks' ends."""
    outs, start = [], 0
    with torch.no_grad():
        for end in [*cuts, x.shape[1]]:
            if end > start:
                outs.append(layer(x[:, start:end], cache=cache, is_causal=True)[0])
                start = end
    return torch.cat(outs, dim=1)


CHUNKS = st.lists(st.integers(1, 60), max_size=6).map(sorted)
LAYOUTS = st.sampled_from([None, "halves", "pairs"])


@given(L=st.integers(1, 12), extra=st.integers(0, 12), window=st.integers(1, 30), n_sinks=st.integers(0, 5))
def test_window_mask_is_its_definition(L, extra, window, n_sinks):
    S = L + extra
    mask = window_mask(L, S, window, n_sinks)
    for i in range(L):
        p = S - L + i
        for j in range(S):
            assert mask[i, j] == (j <= p and (p - j < window or j < n_sinks))
    if window >= S:
        assert torch.equal(window_mask(L, S, window), causal_mask(L, S))


@settings(max_examples=25)
@given(seed=SEEDS, n=st.integers(1, 40), extra=st.integers(0, 20), g=st.sampled_from([1, 2, 4]),
       layout=LAYOUTS, cuts=CHUNKS)
def test_ring_cache_with_a_window_as_long_as_the_text_is_full_attention(seed, n, extra, g, layout, cuts):
    layer = make_layer(seed, g, layout)
    x = torch.randn(2, n, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)
    token_by_token = run_in_chunks(layer, x, RingKVCache(2, g, 8, n + extra), range(1, n))
    chunked = run_in_chunks(layer, x, RingKVCache(2, g, 8, n + extra), [c for c in cuts if c < n])
    torch.testing.assert_close(token_by_token, full, rtol=0, atol=1e-5)
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-5)


@settings(max_examples=40)
@given(seed=SEEDS, n=st.integers(1, 70), window=st.integers(1, 9), n_sinks=st.integers(0, 4),
       g=st.sampled_from([1, 2, 4]), layout=LAYOUTS, cuts=CHUNKS)
def test_ring_cache_equals_the_window_mask_after_many_wraps(seed, n, window, n_sinks, g, layout, cuts):
    """Decoding through the ring buffer (token by token, or in chunks longer than the window) gives what the whole
    sequence gives under window_mask: so the RoPE positions stay absolute after the ring wraps around."""
    layer = make_layer(seed, g, layout)
    x = torch.randn(2, n, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected, _ = layer(x, mask=window_mask(n, n, window, n_sinks))
    cache = RingKVCache(2, g, 8, window, n_sinks)
    token_by_token = run_in_chunks(layer, x, cache, range(1, n))
    torch.testing.assert_close(token_by_token, expected, rtol=0, atol=1e-5)
    assert cache.length == n and cache.nbytes == 2 * 2 * g * (window + n_sinks) * 8 * 4
    chunked = run_in_chunks(layer, x, RingKVCache(2, g, 8, window, n_sinks), [c for c in cuts if c < n])
    torch.testing.assert_close(chunked, expected, rtol=0, atol=1e-5)


def test_ring_cache_keeps_the_sinks_and_the_last_window_at_their_positions():
    cache = RingKVCache(1, 1, 2, window=3, n_sinks=2)
    with torch.no_grad():
        for position in range(11):  # wraps the 3 ring slots three times
            key = torch.full((1, 1, 1, 2), float(position))
            k, v = cache.append(key, key)
    assert cache.length == 11 and cache.n_slots_used == 5
    assert sorted(cache.slot_positions.tolist()) == [0, 1, 8, 9, 10]
    assert torch.equal(k[0, 0, :, 0], cache.slot_positions.float())  # each slot holds its position's key
    assert cache.causal_mask(1).all()
    rope = Rope(2)  # the layer rotates at start = cache.length: the next token's absolute position
    assert torch.equal(rope(torch.ones(1, 1, 1, 2), cache.length), rope(torch.ones(1, 1, 12, 2))[:, :, 11:])
    cache.reset()
    assert cache.length == 0 and (cache.slot_positions == -1).all()


def test_kv_cache_causal_mask_is_the_layers_old_mask():
    cache = KVCache(1, 1, 4, 10)
    with torch.no_grad():
        cache.append(torch.zeros(1, 1, 6, 4), torch.zeros(1, 1, 6, 4))
    assert torch.equal(cache.causal_mask(2), causal_mask(2, 6))


@given(seed=SEEDS, shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 20), st.integers(1, 16)),
       spread=st.sampled_from([1e-3, 1.0, 100.0]))
def test_int8_round_trip_is_within_half_a_step(seed, shape, spread):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * spread
    x[..., 0, :] += 5 * spread  # an outlier token; and channels of one sign below
    for quantize, scale_shape in ((quantize_keys_per_channel, (*shape[:2], 1, shape[3])),
                                  (quantize_values_per_token, (*shape[:3], 1))):
        q = quantize(x)
        assert q.data.dtype == torch.int8 and q.data.shape == x.shape
        assert q.scale.shape == scale_shape and q.zero.shape == scale_shape
        error = (dequantize(q) - x).abs()
        assert (error <= q.scale / 2 + 1e-6 * x.abs().amax()).all()
    constant = torch.full(shape, 0.3)
    assert torch.equal(dequantize(quantize_keys_per_channel(constant)), constant)  # scale 0: exact


@settings(max_examples=20)
@given(seed=SEEDS, n=st.integers(1, 40), group=st.integers(1, 12), g=st.sampled_from([1, 2, 4]),
       layout=LAYOUTS, cuts=CHUNKS, spare=st.integers(0, 5))
def test_int8_cache_through_the_layer_is_close_to_the_float_cache(seed, n, group, g, layout, cuts, spare):
    layer = make_layer(seed, g, layout)
    x = torch.randn(2, n, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)
    cache = Int8KVCache(2, g, 8, n + spare, group_size=group)
    out = run_in_chunks(layer, x, cache, [c for c in cuts if c < n])
    torch.testing.assert_close(out, full, rtol=0, atol=0.02)
    keys, values = cache.dequantized()
    assert keys.shape == values.shape == (2, g, n, 8)
    assert cache.last_copy_nbytes == keys.nbytes + values.nbytes
    q = torch.randn(2, 4, 1, 8, generator=torch.Generator().manual_seed(seed + 1))
    torch.testing.assert_close(int8_decode_attention(q, cache), grouped_query_sdpa(q, keys, values),
                               rtol=0, atol=1e-5)


def test_int8_cache_bytes_are_about_a_quarter():
    float_cache, int8_cache = KVCache(1, 3, 64, 8192), Int8KVCache(1, 3, 64, 8192, group_size=128)
    g, d, S, groups = 3, 64, 8192, 8192 // 128  # int8 K and V, per-token value scales and zeros, per-channel
    expected = 2 * g * S * d + 2 * g * S * 4 + 2 * g * groups * d * 4 + g * 128 * d * 4  # key ones, residual
    assert int8_cache.nbytes == expected
    assert 0.25 < int8_cache.nbytes / float_cache.nbytes < 0.3


def test_local_global_pattern_and_bytes():
    windows = layer_windows(12, local_per_global=5, window=1024)
    assert windows == [1024] * 5 + [None] + [1024] * 5 + [None]
    assert layer_windows(3, local_per_global=0) == [None, None, None]
    per_layer_token = 2 * 4 * 256 * 2
    assert cache_bytes_at(8192, windows, 4, 256) == per_layer_token * (10 * 1024 + 2 * 8192)
    assert cache_bytes_at(512, windows, 4, 256) == 512 * kv_cache_bytes_per_token(12, 4, 256, 2)
    assert cache_bytes_per_token_at(512, windows, 4, 256) == kv_cache_bytes_per_token(12, 4, 256, 2)
    assert cache_bytes_at(8192, [4], 1, 1, 1, n_sinks=4) == 2 * 8
    assert math.isclose(cache_bytes_per_token_at(8192, windows, 4, 256), per_layer_token * (10 / 8 + 2))


TINY = LlamaConfig(n_layers=5, d_model=32, n_heads=4, n_kv_heads=2, d_head=8, d_ff=48, vocab_size=50,
                   rope_base=10_000.0, rms_eps=1e-5, context_length=64)


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    return LlamaDecoder(TINY).eval()


@settings(max_examples=10)
@given(seed=SEEDS, n=st.integers(1, 20), share=st.integers(1, 3), cuts=CHUNKS)
def test_cross_layer_sharing(tiny_llama, seed, n, share, cuts):
    ids = torch.randint(0, 50, (2, n), generator=torch.Generator().manual_seed(seed))
    shared = with_shared_kv(tiny_llama, share) if share > 1 else tiny_llama
    with torch.no_grad():
        plain, full = tiny_llama(ids), shared(ids)
        caches, outs, start = shared.new_caches(2, n), [], 0
        for end in [*[c for c in cuts if c < n], n]:
            if end > start:
                outs.append(shared(ids[:, start:end], caches))
                start = end
    if share == 1:
        torch.testing.assert_close(full, plain, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=0, atol=1e-4)
    assert len(caches) == math.ceil(TINY.n_layers / share)


def test_cross_layer_sharing_halves_the_cache(tiny_llama):
    config = LlamaConfig(**{**TINY.__dict__, "n_layers": 4})
    model = LlamaDecoder(config).eval()
    plain = sum(cache.nbytes for cache in model.new_caches(1, 32))
    assert sum(cache.nbytes for cache in with_shared_kv(model, 2).new_caches(1, 32)) * 2 == plain
    assert shared_kv_owners(5, 2) == [0, 0, 2, 2, 4]


def test_the_decoder_runs_with_ring_and_int8_caches(tiny_llama):
    ids = torch.randint(0, 50, (1, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = tiny_llama(ids)
        for caches in ([RingKVCache(1, 2, 8, window=64) for _ in range(5)],
                       [Int8KVCache(1, 2, 8, 30, group_size=8) for _ in range(5)]):
            out = torch.cat([tiny_llama(ids[:, :10], caches), *[tiny_llama(ids[:, i:i + 1], caches)
                                                                for i in range(10, 30)]], dim=1)
            torch.testing.assert_close(out, plain, rtol=0, atol=0.05)


def test_policies_give_one_cache_per_layer_of_the_right_kind(tiny_llama):
    rings = ring_caches(tiny_llama, 6, n_sinks=2)(2, 40)
    assert len(rings) == TINY.n_layers and all(isinstance(c, RingKVCache) and c.max_len == 8 for c in rings)
    mixed = local_global_caches(tiny_llama, 6, local_per_global=1)(1, 40)
    assert [type(c).__name__ for c in mixed] == ["RingKVCache", "KVCache"] * 2 + ["RingKVCache"]
    assert mixed[1].max_len == 40
    int8 = int8_caches(tiny_llama, group_size=4)(1, 40)
    assert all(isinstance(c, Int8KVCache) and c.group_size == 4 and c.max_len == 40 for c in int8)
    with pytest.raises(ValueError, match="window=0"):
        ring_caches(tiny_llama, 0)
    with pytest.raises(ValueError, match="group_size=0"):
        int8_caches(tiny_llama, 0)


def test_policies_through_token_losses(tiny_llama):
    ids = torch.randint(0, 50, (1, 30), generator=torch.Generator().manual_seed(3))
    full = token_losses(tiny_llama, ids, chunk=7)
    # windows that cover the text change nothing; a short window changes the later tokens only
    for policy in (ring_caches(tiny_llama, 32), local_global_caches(tiny_llama, 32, n_sinks=2)):
        torch.testing.assert_close(token_losses(tiny_llama, ids, chunk=7, new_caches=policy), full,
                                   rtol=0, atol=1e-4)
    short = token_losses(tiny_llama, ids, chunk=7, new_caches=ring_caches(tiny_llama, 8))
    torch.testing.assert_close(short[:7], full[:7], rtol=0, atol=1e-4)  # tokens 1 .. 7 see all before them
    assert not torch.allclose(short[8:], full[8:], atol=1e-3)
    int8 = token_losses(tiny_llama, ids, chunk=7, new_caches=int8_caches(tiny_llama, group_size=4))
    torch.testing.assert_close(int8, full, rtol=0, atol=0.05)


@pytest.mark.parametrize("make, message", [
    (lambda: window_mask(3, 2, 4), "L <= S"),
    (lambda: window_mask(2, 3, 0), "window=0"),
    (lambda: window_mask(2, 3, 2, n_sinks=-1), "n_sinks=-1"),
    (lambda: RingKVCache(1, 1, 4, window=0), "window=0"),
    (lambda: RingKVCache(1, 1, 4, window=2, n_sinks=1.5), "n_sinks=1.5"),
    (lambda: RingKVCache(1, 1, 4, 2).append(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 2, 4)), "same shape"),
    (lambda: RingKVCache(1, 1, 4, 2).append(torch.zeros(2, 1, 1, 4), torch.zeros(2, 1, 1, 4)), "batch_size=1"),
    (lambda: RingKVCache(1, 1, 4, 2).append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4)),
     r"= \(1, 1, L_new, 4\) to fit"),
    (lambda: RingKVCache(1, 1, 4, 2).append(torch.zeros(1, 1, 1, 4).double(), torch.zeros(1, 1, 1, 4).double()),
     "dtype"),
    (lambda: RingKVCache(1, 1, 4, 2).append(torch.zeros(1, 1, 1, 4, requires_grad=True), torch.zeros(1, 1, 1, 4)),
     "no_grad"),
    (lambda: RingKVCache(1, 1, 4, 2).causal_mask(1), "only 0 tokens"),
    (lambda: quantize_keys_per_channel(torch.zeros(4)), "k must have shape"),
    (lambda: quantize_values_per_token(torch.zeros(2, 3, dtype=torch.int32)), "float tensor"),
    (lambda: quantize_values_per_token(torch.tensor([[1.0, float("nan")]])), "finite"),
    (lambda: dequantize(torch.zeros(2)), "Int8Tensor"),
    (lambda: Int8KVCache(1, 1, 4, 8, group_size=0), "group_size=0"),
    (lambda: Int8KVCache(1, 1, 4, 2).append(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4)), "overflow"),
    (lambda: int8_decode_attention(torch.zeros(1, 2, 1, 4), Int8KVCache(1, 1, 4, 2)), "empty"),
    (lambda: int8_decode_attention(torch.zeros(1, 3, 1, 4), Int8KVCache(1, 2, 4, 2)), "multiple of g=2"),
    (lambda: layer_windows(0), "n_layers=0"),
    (lambda: layer_windows(4, local_per_global=-1), "local_per_global=-1"),
    (lambda: cache_bytes_at(0, [None], 1, 1), "context=0"),
    (lambda: cache_bytes_at(8, [], 1, 1), "windows must be"),
    (lambda: shared_kv_owners(4, 0), "share=0"),
])
def test_bad_inputs_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        with torch.no_grad() if message != "no_grad" else torch.enable_grad():
            make()


def test_cross_layer_caches_must_match_the_groups(tiny_llama):
    shared = with_shared_kv(tiny_llama, 2)
    with pytest.raises(ValueError, match="one cache per group of 2 layers"):
        shared(torch.zeros(1, 2, dtype=torch.long), tiny_llama.new_caches(1, 4))
