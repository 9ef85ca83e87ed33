"""GroupedQueryAttention: its two paths, a hand-built reference, nn.MultiheadAttention, the KV cache."""
import functools

import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from attention_book import GroupedQueryAttention, from_torch_mha, real_key_mask, to_torch_mha
from layer_configs import MASK_SHAPES, TOL, LayerConfig, full_mask, with_examples

MASK_KINDS = list(MASK_SHAPES)


class Config(LayerConfig):
    def build(self):
        return self.build_with(lambda c: GroupedQueryAttention(c.d_model, c.n_heads, c.n_kv_heads, d_head=c.d_head,
                                                               bias=c.bias))


def example_config(**changes):
    base = dict(B=2, L=4, S=4, n_heads=4, n_kv_heads=4, d_model=16, d_head=None, bias=True, cross=False,
                mask_kind="B,L,S", is_causal=True, dtype=torch.float32, seed=0)
    return Config(**{**base, **changes})


# Head counts and sizes that are not powers of two or squares, and an explicit d_head.
EXAMPLES = [
    example_config(d_model=30, n_heads=5, n_kv_heads=5),  # d_head = 6
    example_config(d_model=30, n_heads=5, n_kv_heads=1, cross=True, S=6, mask_kind="L,S"),  # MQA, d_head 6
    example_config(d_model=21, n_heads=3, n_kv_heads=3, mask_kind="none"),  # d_head = 7
    example_config(d_model=21, n_heads=3, n_kv_heads=1, dtype=torch.float64),
    example_config(d_model=10, n_heads=4, n_kv_heads=2, d_head=3, mask_kind="B,h,L,S"),  # 4 * 3 != 10
]


@st.composite
def configs(draw, kv_heads="any", explicit_d_head=True):
    """kv_heads: "any" (MHA, GQA or MQA) or "mha". explicit_d_head: may d_head * n_heads != d_model."""
    if kv_heads == "mha":
        n_heads = n_kv_heads = draw(st.integers(1, 6))
    else:
        n_kv_heads, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        n_heads = n_kv_heads * group
    if explicit_d_head and draw(st.booleans()):
        d_head, d_model = draw(st.integers(1, 7)), draw(st.integers(1, 24))
    else:
        d_head, d_model = None, n_heads * draw(st.integers(1, 7))
    L, cross = draw(st.integers(1, 6)), draw(st.booleans())
    S = draw(st.integers(1, 6)) if cross else L
    return Config(
        B=draw(st.integers(1, 3)), L=L, S=S, n_heads=n_heads, n_kv_heads=n_kv_heads, d_model=d_model,
        d_head=d_head, bias=draw(st.booleans()), cross=cross, mask_kind=draw(st.sampled_from(MASK_KINDS)),
        is_causal=L <= S and draw(st.booleans()), dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        seed=draw(SEEDS),
    )


with_examples = functools.partial(with_examples, examples=EXAMPLES)


def linear(proj, t):
    return t @ proj.weight.T + (0 if proj.bias is None else proj.bias)


def reference_forward(layer, x, kv, mask):
    """The layer's function built from its projections and F.scaled_dot_product_attention(enable_gqa=True)."""
    kv = x if kv is None else kv
    h, g, d = layer.n_heads, layer.n_kv_heads, layer.d_head
    q = linear(layer.q_proj, x).unflatten(-1, (h, d)).transpose(1, 2)
    k = linear(layer.k_proj, kv).unflatten(-1, (g, d)).transpose(1, 2)
    v = linear(layer.v_proj, kv).unflatten(-1, (g, d)).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return linear(layer.o_proj, out.transpose(1, 2).flatten(2))


def reference_weights_loop(layer, x, kv, mask):
    """Per-head weights, one head at a time: query head i reads K/V head i // (h // g)."""
    kv = x if kv is None else kv
    h, g, d = layer.n_heads, layer.n_kv_heads, layer.d_head
    q = linear(layer.q_proj, x).unflatten(-1, (h, d))  # (B, L, h, d)
    k = linear(layer.k_proj, kv).unflatten(-1, (g, d))  # (B, S, g, d)
    heads = []
    for i in range(h):
        scores = q[:, :, i] @ k[:, :, i // (h // g)].transpose(1, 2) / d**0.5  # (B, L, S)
        if mask is not None:
            head_mask = mask.expand(x.shape[0], h, *scores.shape[1:])[:, i]
            scores = scores.masked_fill(~head_mask, float("-inf"))
        heads.append(torch.softmax(scores, dim=-1).nan_to_num(0.0))  # a fully masked row -> zeros
    return torch.stack(heads, dim=1)  # (B, h, L, S)


@given(config=configs())
@with_examples
def test_fast_path_equals_weights_path(config):
    layer, x, kv, mask = config.build()
    fast, no_weights = layer(x, kv, mask=mask, is_causal=config.is_causal)
    slow, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
    assert no_weights is None
    assert fast.shape == slow.shape == (config.B, config.L, config.d_model)
    assert weights.shape == (config.B, config.n_heads, config.L, config.S)
    torch.testing.assert_close(fast, slow, **TOL[config.dtype])


@given(config=configs())
@with_examples
def test_matches_hand_built_reference(config):
    layer, x, kv, mask = config.build()
    expected_mask = full_mask(config, mask)
    out, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
    fast, _ = layer(x, kv, mask=mask, is_causal=config.is_causal)
    with torch.no_grad():
        expected = reference_forward(layer, x, kv, expected_mask)
        expected_weights = reference_weights_loop(layer, x, kv, expected_mask)
    torch.testing.assert_close(out, expected, **TOL[config.dtype])
    torch.testing.assert_close(fast, expected, **TOL[config.dtype])
    torch.testing.assert_close(weights, expected_weights, **TOL[config.dtype])


def mha_inputs(config, layer_mask):
    """The layer's mask as nn.MultiheadAttention wants it: (B * h, L, S) and True = NOT allowed."""
    if layer_mask is None:
        return None
    return ~layer_mask.expand(config.B, config.n_heads, config.L, config.S).reshape(-1, config.L, config.S)


def keep_key_0(mask):
    """nn.MultiheadAttention returns NaN for a query that may attend to nothing: leave key 0 open."""
    if mask is not None:
        mask = mask.clone()
        mask[..., 0] = True
    return mask


def run_mha(mha, x, kv, attn_mask):
    kv = x if kv is None else kv
    if not mha.batch_first:  # (B, L, E) -> (L, B, E)
        x, kv = x.transpose(0, 1), kv.transpose(0, 1)
    out, weights = mha(x, kv, kv, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)
    return (out if mha.batch_first else out.transpose(0, 1)), weights


@given(config=configs(explicit_d_head=False))
@functools.partial(with_examples, keep=lambda config: config.has_torch_counterpart)  # explicit d_head: see test_errors
def test_to_torch_mha_is_equivalent(config):
    """MHA, GQA and MQA layers alike become an nn.MultiheadAttention computing the same function."""
    assert config.has_torch_counterpart
    layer, x, kv, mask = config.build()
    mask = keep_key_0(mask)
    out, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
    mha = to_torch_mha(layer)
    assert mha.batch_first and mha.num_heads == config.n_heads and mha.embed_dim == config.d_model
    mha_out, mha_weights = run_mha(mha, x, kv, mha_inputs(config, full_mask(config, mask)))
    assert mha_weights.shape == weights.shape == (config.B, config.n_heads, config.L, config.S)
    torch.testing.assert_close(out, mha_out, **TOL[config.dtype])
    torch.testing.assert_close(weights, mha_weights, **TOL[config.dtype])


@given(config=configs(kv_heads="mha", explicit_d_head=False), batch_first=st.booleans())
def test_from_torch_mha_is_equivalent(config, batch_first):
    torch.manual_seed(config.seed)
    mha = nn.MultiheadAttention(config.d_model, config.n_heads, bias=config.bias, batch_first=batch_first,
                                dtype=config.dtype)
    if config.bias:  # nn.MultiheadAttention starts its biases at zero: make them count
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    _, x, kv, mask = config.build()
    mask = keep_key_0(mask)
    layer = from_torch_mha(mha)
    assert (layer.n_heads, layer.n_kv_heads, layer.d_head) == (config.n_heads, config.n_heads, config.head_size)
    assert (layer.q_proj.bias is not None) == config.bias
    out, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
    mha_out, mha_weights = run_mha(mha, x, kv, mha_inputs(config, full_mask(config, mask)))
    torch.testing.assert_close(out, mha_out, **TOL[config.dtype])
    torch.testing.assert_close(weights, mha_weights, **TOL[config.dtype])
    # and back again: the round trip gives the same parameters
    back = to_torch_mha(layer)
    assert [n for n, _ in mha.named_parameters()] == [n for n, _ in back.named_parameters()]
    for (name, p), (_, p_back) in zip(mha.named_parameters(), back.named_parameters(), strict=True):
        assert torch.equal(p, p_back), name


def test_real_key_mask_matches_mha_key_padding_mask():
    torch.manual_seed(0)
    layer = GroupedQueryAttention(12, 3)
    x = torch.randn(3, 5, 12)
    pad = real_key_mask([5, 2, 4], 5)  # (B, 1, S)
    out, weights = layer(x, mask=pad, need_weights=True)
    mha_out, mha_weights = to_torch_mha(layer)(x, x, x, key_padding_mask=~pad[:, 0], average_attn_weights=False)
    torch.testing.assert_close(out, mha_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, mha_weights, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_padded_keys_do_not_change_the_output(n_kv_heads):
    torch.manual_seed(1)
    layer = GroupedQueryAttention(16, 4, n_kv_heads)
    x, kv = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    lengths = [6, 4]
    pad = real_key_mask(lengths, 6)
    changed = kv.clone()
    changed[1, 4:] = 100 * torch.randn(2, 16)  # garbage in the padding of sequence 1
    for need_weights in (False, True):
        out, _ = layer(x, kv, mask=pad, need_weights=need_weights)
        out_changed, _ = layer(x, changed, mask=pad, need_weights=need_weights)
        torch.testing.assert_close(out, out_changed, atol=1e-5, rtol=1e-5)


# --- Cached decoding -------------------------------------------------------------------------------------

KINDS = {"MHA": 4, "GQA": 2, "MQA": 1}  # n_kv_heads for n_heads = 4


def decode_in_chunks(layer, x, chunks, max_len, need_weights, mask=None):
    """Feed x through the layer with a KV cache, ``chunks`` tokens at a time; return the outputs and weights."""
    cache = layer.new_cache(x.shape[0], max_len)
    outs, weights, start = [], [], 0
    for n in chunks:
        end = start + n
        chunk_mask = None if mask is None else mask[..., :end]
        with torch.no_grad():  # a cache is for inference
            out, w = layer(x[:, start:end], cache=cache, is_causal=True, mask=chunk_mask, need_weights=need_weights)
        assert cache.length == end
        assert out.shape == (x.shape[0], n, layer.d_model)
        assert (w is None) == (not need_weights)
        if need_weights:
            assert w.shape == (x.shape[0], layer.n_heads, n, end)
        outs.append(out)
        weights.append(w)
        start = end
    return torch.cat(outs, dim=1), weights


def check_cached_weights(weights, full_weights, chunks, tol):
    start = 0
    for n, w in zip(chunks, weights, strict=True):
        end = start + n
        torch.testing.assert_close(w, full_weights[:, :, start:end, :end], **tol)
        assert (full_weights[:, :, start:end, end:] == 0).all(), "causal: no weight on tokens not yet cached"
        start = end


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "weights"])
@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1, 1), (3, 1, 2), (6,)], ids=["token-by-token", "3-1-2", "all"])
@pytest.mark.parametrize("kind", KINDS)
def test_cached_decoding_equals_full_causal_forward(kind, chunks, need_weights):
    torch.manual_seed(0)
    layer = GroupedQueryAttention(24, 4, KINDS[kind])
    x = torch.randn(2, 6, 24)
    full, full_weights = layer(x, is_causal=True, need_weights=True)
    out, weights = decode_in_chunks(layer, x, chunks, max_len=8, need_weights=need_weights)
    torch.testing.assert_close(out, full, atol=1e-5, rtol=1e-5)
    if need_weights:
        check_cached_weights(weights, full_weights, chunks, dict(atol=1e-5, rtol=1e-5))


@st.composite
def partitions(draw, total):
    """Chunk sizes that add up to total, in order."""
    cuts = sorted(draw(st.sets(st.integers(1, total - 1), max_size=total - 1))) if total > 1 else []
    bounds = [0, *cuts, total]
    return tuple(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True))


@given(data=st.data(), n_kv_heads=st.integers(1, 3), group=st.integers(1, 3), d_head=st.integers(1, 6),
       B=st.integers(1, 3), T=st.integers(1, 8), spare=st.integers(0, 3), padded=st.booleans(),
       need_weights=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64]), seed=SEEDS)
def test_cached_decoding_in_random_chunks(data, n_kv_heads, group, d_head, B, T, spare, padded, need_weights,
                                          dtype, seed):
    chunks = data.draw(partitions(T), label="chunks")
    n_heads = n_kv_heads * group
    torch.manual_seed(seed)
    layer = GroupedQueryAttention(n_heads * d_head + 1, n_heads, n_kv_heads, d_head=d_head).to(dtype)
    x = torch.randn(B, T, layer.d_model, dtype=dtype)
    # padding at the end of each sequence (at least one real token, so no query attends to nothing)
    mask = real_key_mask(torch.randint(1, T + 1, (B,)), T) if padded else None
    full, full_weights = layer(x, mask=mask, is_causal=True, need_weights=True)
    out, weights = decode_in_chunks(layer, x, chunks, max_len=T + spare, need_weights=need_weights, mask=mask)
    torch.testing.assert_close(out, full, **TOL[dtype])
    if need_weights:
        check_cached_weights(weights, full_weights, chunks, TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp64", "fp16", "bf16"])
@pytest.mark.parametrize("kind", KINDS)
def test_cache_nbytes(kind, dtype):
    B, max_len, n_heads, d_head = 3, 10, 4, 5
    layer = GroupedQueryAttention(n_heads * d_head, n_heads, KINDS[kind])
    cache = layer.new_cache(B, max_len, dtype=dtype)
    element_size = torch.empty((), dtype=dtype).element_size()
    assert cache.nbytes == 2 * B * KINDS[kind] * max_len * d_head * element_size
    assert cache.k.shape == cache.v.shape == (B, KINDS[kind], max_len, d_head)
    assert cache.k.dtype == dtype and cache.length == 0
    assert (cache.batch_size, cache.max_len) == (B, max_len)


def test_mqa_cache_is_n_heads_times_smaller_than_mha():
    for n_heads in (2, 4, 8):
        mha = GroupedQueryAttention(8 * n_heads, n_heads)
        mqa = GroupedQueryAttention(8 * n_heads, n_heads, n_kv_heads=1)
        assert mha.new_cache(2, 16).nbytes == n_heads * mqa.new_cache(2, 16).nbytes


def test_cache_reset_starts_over():
    torch.manual_seed(0)
    layer = GroupedQueryAttention(8, 2, 1)
    x = torch.randn(1, 3, 8)
    cache = layer.new_cache(1, 3)
    with torch.no_grad():
        first, _ = layer(x, cache=cache, is_causal=True)
        cache.reset()
        assert cache.length == 0
        again, _ = layer(x, cache=cache, is_causal=True)
    assert torch.equal(first, again)


# --- Determinism -----------------------------------------------------------------------------------------


@given(config=configs())
def test_same_seed_gives_identical_outputs(config):
    runs = []
    for _ in range(2):
        layer, x, kv, mask = config.build()  # seeds the RNG with config.seed
        fast, _ = layer(x, kv, mask=mask, is_causal=config.is_causal)
        slow, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
        runs.append((fast, slow, weights))
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "weights"])
def test_empty_batch_gives_empty_output(need_weights):
    layer = GroupedQueryAttention(8, 2)
    x = torch.randn(0, 3, 8)
    assert to_torch_mha(layer)(x, x, x)[0].shape == (0, 3, 8)  # PyTorch's module accepts an empty batch
    out, _ = layer(x, need_weights=need_weights)
    assert out.shape == (0, 3, 8)
