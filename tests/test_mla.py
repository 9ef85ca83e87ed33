"""Multi-head latent attention (attention_book.mla): the layer equals transformers' DeepseekV3Attention with the same
weights, with and without a cache, with and without the queries' low-rank path, in both RoPE layouts; absorbed
attention equals naive attention on many shapes; neither calls PyTorch's SDPA with keys and values of two widths
(its CPU kernel would copy the keys), and the absorbed step reads the cache once; the latent cache holds
d_c + d_h^R numbers per token; the decode costs add up; chapter 14's excerpt of the layer is the package's code;
bad inputs raise a ValueError naming the parameter."""
import math
import re
from contextlib import contextmanager
from unittest.mock import patch

import pytest
import torch
from _hypothesis import SEEDS
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.experiments.operator_traffic import count_traffic
from attention_book.masks import causal_mask
from attention_book.mla import (LatentCache, MultiHeadLatentAttention, absorbed_attention, decode_step_cost,
                                naive_attention)
from attention_book.mla.reference import to_deepseek_v3
from attention_book.mla.layer import MultiHeadLatentAttention as LayerClass
from attention_book.rope import halves_order
from conftest import ROOT

# transformers 5's API (DynamicCache(config=...), the attention's cache= keyword)
pytest.importorskip("transformers", minversion="5")
from transformers import DynamicCache  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding  # noqa: E402


@st.composite
def layer_sizes(draw):
    """Keyword arguments of a small MultiHeadLatentAttention."""
    return dict(d_model=draw(st.integers(1, 24)), n_heads=draw(st.integers(1, 5)),
                kv_lora_rank=draw(st.integers(1, 20)), qk_nope_head_dim=draw(st.integers(1, 10)),
                qk_rope_head_dim=2 * draw(st.integers(1, 5)), v_head_dim=draw(st.integers(1, 10)),
                q_lora_rank=draw(st.one_of(st.none(), st.integers(1, 16))),
                rope_layout=draw(st.sampled_from(["pairs", "halves"])))


def random_layer(sizes, seed):
    torch.manual_seed(seed)
    layer = MultiHeadLatentAttention(**sizes)
    with torch.no_grad():  # norms' weights away from 1, so that copying them is tested
        for name, p in layer.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return layer.eval()


def additive_causal(L, S):
    """transformers' form of causal_mask(L, S): 0 where a query may attend, -inf elsewhere, shape (1, 1, L, S)."""
    return torch.zeros(L, S).masked_fill(~causal_mask(L, S), float("-inf"))[None, None]


def reference_steps(attention, config, x, chunks):
    """transformers' outputs for x fed in chunks (start, end) through a DynamicCache, concatenated: (B, L, d_model)."""
    rotary, cache, outs = DeepseekV3RotaryEmbedding(config), DynamicCache(config=config), []
    for start, end in chunks:
        xs = x[:, start:end]
        positions = torch.arange(start, end)[None].expand(x.shape[0], -1)
        out, _ = attention(xs, position_embeddings=rotary(xs, positions),
                           attention_mask=additive_causal(end - start, end), cache=cache)
        outs.append(out)
    return torch.cat(outs, dim=1), cache


def chunks_of(L, cuts):
    bounds = [0] + sorted({c for c in cuts if 0 < c < L}) + [L]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


# --- the reference: transformers' DeepseekV3Attention ----------------------------------------------------------------


@pytest.mark.parametrize("q_lora_rank", [None, 12])
@pytest.mark.parametrize("rope_layout", ["pairs", "halves"])
@pytest.mark.parametrize("absorbed", [False, True])
def test_equals_deepseek_v3_attention(q_lora_rank, rope_layout, absorbed):
    layer = random_layer(dict(d_model=32, n_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                              v_head_dim=6, q_lora_rank=q_lora_rank, rope_layout=rope_layout), seed=0)
    attention, config = to_deepseek_v3(layer)
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        expected, _ = reference_steps(attention, config, x, [(0, 9)])
        torch.testing.assert_close(layer(x, absorbed=absorbed), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("q_lora_rank", [None, 12])
@pytest.mark.parametrize("rope_layout", ["pairs", "halves"])
def test_decodes_with_a_cache_as_deepseek_v3_attention_with_a_dynamic_cache(q_lora_rank, rope_layout):
    """Prefill 5 tokens, then decode one at a time, naive and absorbed steps in turn; the latent cache holds what
    transformers caches (its k^R comes out of the "pairs" rotation in the "halves" order)."""
    layer = random_layer(dict(d_model=32, n_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                              v_head_dim=6, q_lora_rank=q_lora_rank, rope_layout=rope_layout), seed=1)
    attention, config = to_deepseek_v3(layer)
    x, chunks = torch.randn(3, 9, 32), [(0, 5)] + [(t, t + 1) for t in range(5, 9)]
    with torch.no_grad():
        expected, reference_cache = reference_steps(attention, config, x, chunks)
        cache = layer.new_cache(3, 12)
        got = torch.cat([layer(x[:, a:b], cache=cache, absorbed=bool(i % 2)) for i, (a, b) in enumerate(chunks)], 1)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    their_c_kv, their_k_rope = reference_cache.layers[0].keys[:, 0], reference_cache.layers[0].values[:, 0]
    torch.testing.assert_close(cache.c_kv, their_c_kv, atol=1e-6, rtol=0)
    ours = cache.k_rope[..., halves_order(4)] if rope_layout == "pairs" else cache.k_rope
    torch.testing.assert_close(ours, their_k_rope, atol=1e-6, rtol=0)


@settings(max_examples=25)
@given(sizes=layer_sizes(), B=st.integers(1, 3), L=st.integers(1, 8), cuts=st.lists(st.integers(1, 7), max_size=3),
       seed=SEEDS)
def test_equals_deepseek_v3_attention_on_many_shapes(sizes, B, L, cuts, seed):
    layer = random_layer(sizes, seed)
    attention, config = to_deepseek_v3(layer)
    x, chunks = torch.randn(B, L, sizes["d_model"]), chunks_of(L, cuts)
    with torch.no_grad():
        expected, _ = reference_steps(attention, config, x, chunks)
        cache = layer.new_cache(B, L)
        got = torch.cat([layer(x[:, a:b], cache=cache, absorbed=bool(i % 2)) for i, (a, b) in enumerate(chunks)], 1)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


# --- naive == absorbed ------------------------------------------------------------------------------------------------


@given(B=st.integers(1, 3), h=st.integers(1, 6), L=st.integers(1, 5), extra=st.integers(0, 12),
       d_c=st.integers(1, 24), d_nope=st.integers(1, 12), d_rope=st.integers(1, 6), d_v=st.integers(1, 12),
       causal=st.booleans(), dtype=st.sampled_from([torch.float32, torch.float64]), seed=SEEDS)
def test_absorbed_equals_naive(B, h, L, extra, d_c, d_nope, d_rope, d_v, causal, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    S = L + extra

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    q_nope, q_rope, latent = randn(B, h, L, d_nope), randn(B, h, L, d_rope), randn(B, S, d_c + d_rope)
    w_uk, w_uv = randn(h * d_nope, d_c) / math.sqrt(d_c), randn(h * d_v, d_c) / math.sqrt(d_c)
    mask = causal_mask(L, S) if causal else None
    scale = 1 / math.sqrt(d_nope + d_rope)
    naive = naive_attention(q_nope, q_rope, latent, w_uk, w_uv, scale, mask)
    absorbed = absorbed_attention(q_nope, q_rope, latent, w_uk, w_uv, scale, mask)
    assert absorbed.shape == naive.shape == (B, h, L, d_v)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(absorbed, naive, atol=tol, rtol=tol)


def test_absorbed_attention_is_mqa_over_the_latents():
    """One head whose W_UK and W_UV are identities: the scores are q . c + q^R . k^R, the output the mix of c."""
    torch.manual_seed(3)
    d_c, d_rope, S = 4, 2, 5
    q_nope, q_rope, latent = torch.randn(1, 1, 1, d_c), torch.randn(1, 1, 1, d_rope), torch.randn(1, S, d_c + d_rope)
    eye = torch.eye(d_c)
    out = absorbed_attention(q_nope, q_rope, latent, eye, eye, 1.0)
    weights = torch.softmax(torch.cat((q_nope, q_rope), -1)[0, 0] @ latent[0].T, dim=-1)  # (1, S)
    torch.testing.assert_close(out[0, 0], weights @ latent[0, :, :d_c])


@given(sizes=layer_sizes(), B=st.integers(1, 3), L=st.integers(1, 7), seed=SEEDS)
def test_a_cached_decode_equals_the_whole_sequence(sizes, B, L, seed):
    layer = random_layer(sizes, seed)
    x = torch.randn(B, L, sizes["d_model"])
    with torch.no_grad():
        whole = layer(x)
        cache = layer.new_cache(B, L)
        steps = torch.cat([layer(x[:, t:t + 1], cache=cache, absorbed=True) for t in range(L)], dim=1)
    torch.testing.assert_close(steps, whole, atol=1e-5, rtol=1e-5)
    assert cache.length == L


def test_causal_mask_hides_later_tokens_and_is_causal_false_does_not():
    layer = random_layer(dict(d_model=8, n_heads=2, kv_lora_rank=4, qk_nope_head_dim=3, qk_rope_head_dim=2,
                              v_head_dim=3), seed=4)
    x = torch.randn(1, 6, 8)
    changed = x.clone()
    changed[:, 4:] += 1.0
    with torch.no_grad():
        for absorbed in (False, True):
            a, b = layer(x, absorbed=absorbed), layer(changed, absorbed=absorbed)
            torch.testing.assert_close(a[:, :4], b[:, :4])  # tokens 0..3 never see tokens 4, 5
            a, b = layer(x, absorbed=absorbed, is_causal=False), layer(changed, absorbed=absorbed, is_causal=False)
            assert not torch.allclose(a[:, :4], b[:, :4])


# --- what the steps call and what they move ------------------------------------------------------------------------


@contextmanager
def sdpa_recorded():
    """``with sdpa_recorded() as calls:`` records every call of F.scaled_dot_product_attention as its (q, k, v)
    shapes; a call whose keys and values differ in width fails the test (PyTorch's CPU SDPA then leaves its fused
    kernel and copies the keys), and so does an fp32 CPU call that would not take the flash kernel."""
    calls, real = [], torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, *args, **kwargs):
        calls.append((tuple(q.shape), tuple(k.shape), tuple(v.shape)))
        assert k.shape[-1] == v.shape[-1], f"SDPA called with key width {k.shape[-1]} and value width {v.shape[-1]}"
        if q.device.type == "cpu" and q.dtype == torch.float32 and hasattr(torch, "_fused_sdp_choice"):
            choice = torch._fused_sdp_choice(q, k, v, kwargs.get("attn_mask"), 0.0, False, scale=kwargs.get("scale"))
            assert choice == 1, f"SDPA would take backend {choice}, not its flash kernel (1)"
        return real(q, k, v, *args, **kwargs)

    with patch.object(torch.nn.functional, "scaled_dot_product_attention", recording):
        yield calls


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_no_step_calls_sdpa_with_keys_and_values_of_two_widths(q_lora_rank):
    """The sizes of chapter 14's section 6 scaled down (q and k 96 wide in the naive path, v 64; the absorbed key
    288 wide, its latent 256): prefill, then decode, both paths, with and without the cache."""
    layer = random_layer(dict(d_model=32, n_heads=4, kv_lora_rank=16, qk_nope_head_dim=6, qk_rope_head_dim=4,
                              v_head_dim=5, q_lora_rank=q_lora_rank), seed=5)
    x = torch.randn(2, 7, 32)
    with torch.no_grad(), sdpa_recorded() as sdpa_calls:
        for absorbed in (False, True):
            layer(x, absorbed=absorbed)
            cache = layer.new_cache(2, 7)
            layer(x[:, :4], cache=cache, absorbed=absorbed)
            for t in range(4, 7):
                layer(x[:, t:t + 1], cache=cache, absorbed=absorbed)
    assert len(sdpa_calls) == 5  # the absorbed path's calls; the naive path attends with chapter 1's function
    q, k, v = sdpa_calls[-1]
    assert q == (2, 1, 4, 16 + 4) and k == v == (2, 1, 7, 16 + 4)  # the heads folded, the whole cached rows as K and V


@given(B=st.integers(1, 2), h=st.integers(1, 4), L=st.integers(1, 4), extra=st.integers(0, 6),
       d_c=st.integers(1, 12), d_nope=st.integers(1, 8), d_rope=st.integers(1, 4), d_v=st.integers(1, 8),
       causal=st.booleans())
def test_no_shape_makes_either_path_call_sdpa_with_two_widths(B, h, L, extra, d_c, d_nope, d_rope, d_v, causal):
    S = L + extra
    args = (torch.randn(B, h, L, d_nope), torch.randn(B, h, L, d_rope), torch.randn(B, S, d_c + d_rope),
            torch.randn(h * d_nope, d_c), torch.randn(h * d_v, d_c), 0.5, causal_mask(L, S) if causal else None)
    with sdpa_recorded() as calls:
        naive_attention(*args)
        absorbed_attention(*args)
    assert len(calls) == 1  # absorbed's; the checks are in sdpa_recorded


def test_the_absorbed_step_reads_the_cache_once_and_copies_nothing_of_its_size():
    """One decode step at section 6's sizes: it moves the cached rows once, W_UK and W_UV, and a few small tensors;
    the naive step writes and reads back every head's keys and values."""
    h, d_c, d_nope, d_rope, d_v, S = 8, 256, 64, 32, 64, 2048
    gen = torch.Generator().manual_seed(0)
    args = (torch.randn(1, h, 1, d_nope, generator=gen), torch.randn(1, h, 1, d_rope, generator=gen),
            torch.randn(1, S, d_c + d_rope, generator=gen), torch.randn(h * d_nope, d_c, generator=gen),
            torch.randn(h * d_v, d_c, generator=gen), 0.1)
    rows, weights = S * (d_c + d_rope) * 4, h * (d_nope + d_v) * d_c * 4
    absorbed = count_traffic(lambda: absorbed_attention(*args))
    assert rows + weights <= absorbed.total < rows + weights + 64 * 1024
    assert all(read + written < rows + weights for read, written, _ in absorbed.by_op.values())
    counted = decode_step_cost("absorbed", S, h, d_c, d_nope, d_rope, d_v, bytes_per_element=4)["bytes"]
    assert counted == rows + weights
    naive = count_traffic(lambda: naive_attention(*args))
    rebuilt = S * h * (d_nope + d_rope + d_v) * 4  # every head's keys and values
    assert naive.total > 2 * rebuilt + rows


def test_chapter_14_excerpt_of_the_layer_is_the_package_code():
    """Chapter 14 quotes lines of MultiHeadLatentAttention.forward in a markdown code block; they must be there."""
    import inspect

    import nbformat

    nb = nbformat.read(ROOT / "book" / "14_latent_attention.ipynb", as_version=4)
    blocks = [block for cell in nb.cells if cell.cell_type == "markdown"
              for block in re.findall(r"```python\n(.*?)```", cell.source, flags=re.S)]
    excerpts = [block for block in blocks if "cache.length" in block]
    assert len(excerpts) == 1, "chapter 14 should quote the layer's forward once"
    source = [line.strip() for line in inspect.getsource(LayerClass.forward).splitlines()]
    shown = [line.strip() for line in excerpts[0].splitlines() if line.strip()]
    start = source.index(shown[0])  # the lines shown follow each other in the source
    assert source[start:start + len(shown)] == shown


# --- the cache and the costs ------------------------------------------------------------------------------------------


def test_latent_cache_holds_d_c_plus_d_rope_numbers_per_token():
    cache = LatentCache(2, 512, 64, 10)
    assert cache.numbers_per_token == 576 and cache.nbytes == 2 * 10 * 576 * 4
    with torch.no_grad():
        latent = cache.append(torch.ones(2, 3, 512), torch.full((2, 3, 64), 2.0))
    assert latent.shape == (2, 3, 576) and cache.length == 3
    assert cache.c_kv.eq(1).all() and cache.k_rope.eq(2).all()
    cache.reset()
    assert cache.length == 0 and cache.c_kv.shape == (2, 0, 512)


def test_decode_costs_for_deepseek_v2():
    sizes = dict(n_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    mha = decode_step_cost("mha", 1000, **sizes)
    assert mha["bytes"] == 1000 * 128 * (128 + 64 + 128) * 2 and mha["intensity"] == 1.0
    absorbed = decode_step_cost("absorbed", 1000, **sizes)
    assert absorbed["bytes"] == (1000 * 576 + 128 * 256 * 512) * 2
    assert absorbed["flops"] == 2 * 128 * 512 * 256 + 2 * 1000 * 128 * (2 * 512 + 64)
    naive = decode_step_cost("naive", 1000, **sizes)
    assert naive["flops"] > 100 * absorbed["flops"] and naive["bytes"] > 5 * absorbed["bytes"]
    long = decode_step_cost("absorbed", 32768, **sizes)  # the weights W_UK, W_UV no longer dominate the bytes
    assert long["intensity"] > 100 * mha["intensity"]


# --- bad inputs -------------------------------------------------------------------------------------------------------

GOOD = dict(d_model=8, n_heads=2, kv_lora_rank=4, qk_nope_head_dim=3, qk_rope_head_dim=2, v_head_dim=3)


@pytest.mark.parametrize("change, match", [
    (dict(n_heads=0), "n_heads=0 must be a positive integer"),
    (dict(kv_lora_rank=2.5), "kv_lora_rank=2.5 must be a positive integer"),
    (dict(qk_rope_head_dim=3), "qk_rope_head_dim=3 must be even"),
    (dict(q_lora_rank=0), "q_lora_rank=0 must be a positive integer"),
    (dict(rope_layout="interleaved"), "layout='interleaved' must be one of"),
])
def test_bad_sizes_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadLatentAttention(**(GOOD | change))


def test_bad_calls_are_named():
    layer = MultiHeadLatentAttention(**GOOD)
    with pytest.raises(ValueError, match="last dimension 7 but the layer has d_model=8"):
        layer(torch.randn(1, 3, 7))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, d_model\)"):
        layer(torch.randn(3, 8))
    with pytest.raises(ValueError, match="absorbed='yes' must be True"):
        layer(torch.randn(1, 3, 8), absorbed="yes")
    with pytest.raises(ValueError, match="cache must be a LatentCache"):
        layer(torch.randn(1, 3, 8), cache=object())
    with pytest.raises(ValueError, match="require grad"):
        layer(torch.randn(1, 3, 8), cache=layer.new_cache(1, 4))
    with torch.no_grad():
        cache = layer.new_cache(1, 4)
        with pytest.raises(ValueError, match="batch_size=1"):
            layer(torch.randn(2, 3, 8), cache=cache)
        layer(torch.randn(1, 3, 8), cache=cache)
        with pytest.raises(ValueError, match="cache overflow: 3 cached \\+ 2 new tokens exceeds max_len=4"):
            layer(torch.randn(1, 2, 8), cache=cache)


def test_bad_cache_sizes_and_rows_are_named():
    with pytest.raises(ValueError, match="max_len=0 must be a positive integer"):
        LatentCache(1, 4, 2, 0)
    cache = LatentCache(1, 4, 2, 5)
    with pytest.raises(ValueError, match=r"k_rope must have shape \(B, L_new, 2\)"):
        cache.append(torch.zeros(1, 1, 4), torch.zeros(1, 1, 3))
    with pytest.raises(ValueError, match="same number of tokens"):
        cache.append(torch.zeros(1, 2, 4), torch.zeros(1, 1, 2))
    with pytest.raises(ValueError, match="float64"):
        cache.append(torch.zeros(1, 1, 4, dtype=torch.float64), torch.zeros(1, 1, 2))


def test_bad_cost_path_is_named():
    with pytest.raises(ValueError, match="path='fast' must be one of"):
        decode_step_cost("fast", 10, 2, 4, 3, 2, 3)
    with pytest.raises(ValueError, match="S=0 must be a positive integer"):
        decode_step_cost("naive", 0, 2, 4, 3, 2, 3)


def test_bad_attention_inputs_are_named():
    q_nope, q_rope, latent = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 2), torch.zeros(1, 5, 6 + 2)
    w_uk, w_uv = torch.zeros(8, 6), torch.zeros(10, 6)
    for attend in (naive_attention, absorbed_attention):
        with pytest.raises(ValueError, match=r"q_nope must have shape \(B, h, L, d_nope\)"):
            attend(q_nope[0], q_rope, latent, w_uk, w_uv, 1.0)
        with pytest.raises(ValueError, match=r"w_uk has 6 rows, but h \* d_nope = 2 \* 4 = 8"):
            attend(q_nope, q_rope, latent, w_uk[:6], w_uv, 1.0)
        with pytest.raises(ValueError, match="latent must have shape"):
            attend(q_nope, q_rope, latent[..., :7], w_uk, w_uv, 1.0)
        with pytest.raises(ValueError, match="w_uv must have shape"):
            attend(q_nope, q_rope, latent, w_uk, w_uv[:, :5], 1.0)
        with pytest.raises(ValueError, match="does not broadcast"):
            attend(q_nope, q_rope, latent, w_uk, w_uv, 1.0, torch.ones(3, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="boolean"):
            attend(q_nope, q_rope, latent, w_uk, w_uv, 1.0, torch.ones(3, 5))
