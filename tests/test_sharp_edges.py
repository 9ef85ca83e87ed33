"""The layer, the cache and grouped_query_sdpa used slightly off the chapters' path: each works, or says what to do.

Found in the code review of 2026-11-30: decoding with a cache outside no_grad, under autocast, with cross-attention;
grouped_query_sdpa with a 3-D mask or a g that does not divide h; inputs of the wrong dtype or type; the names of
the layer's parameters, which loading other models' weights depends on; and the causal fast path.
"""
import io
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attention_book import GroupedQueryAttention, KVCache, causal_mask
from attention_book.convert import convert_to_gqa
from attention_book.grouped_sdpa import grouped_query_sdpa
from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig


def layer_and_tokens(n_kv_heads=2, L=5, seed=0):
    torch.manual_seed(seed)
    return GroupedQueryAttention(16, 4, n_kv_heads), torch.randn(2, L, 16)


# --- the KV cache -----------------------------------------------------------------------------------------------

def test_decoding_with_a_cache_outside_no_grad_says_to_use_no_grad():
    layer, x = layer_and_tokens()
    cache = layer.new_cache(2, 5)
    with pytest.raises(ValueError, match=r"cache stores them in place .* decode under torch.no_grad\(\)"):
        layer(x[:, :1], cache=cache, is_causal=True)
    assert cache.length == 0  # nothing was written
    with torch.no_grad():
        out, _ = layer(x[:, :1], cache=cache, is_causal=True)
    assert out.shape == (2, 1, 16) and cache.length == 1


def test_a_cache_takes_keys_that_need_no_grad_even_with_grad_enabled():
    cache = KVCache(1, 1, 2, max_len=2)
    k, _ = cache.append(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))  # plain tensors: nothing to record
    assert k.shape == (1, 1, 1, 2)


def test_a_cache_refuses_keys_on_another_device():
    cache = KVCache(1, 1, 2, max_len=2, device="meta")
    with pytest.raises(ValueError, match=r"k is on cpu but the cache is on meta"):
        cache.append(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))


def test_decoding_under_bfloat16_autocast_works_and_stays_close_to_fp32():
    layer, x = layer_and_tokens()
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)  # fp32
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cache = layer.new_cache(2, 5)
            assert cache.k.dtype == torch.bfloat16
            steps = [layer(x[:, t:t + 1], cache=cache, is_causal=True)[0] for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1).float(), full, atol=5e-2, rtol=5e-2)


def test_a_cache_with_cross_attention_is_refused():
    layer, x = layer_and_tokens()
    memory = torch.randn(2, 7, 16)  # an encoder's output
    with torch.no_grad(), pytest.raises(ValueError, match=r"cache is for self-attention \(kv=None\)"):
        layer(x[:, :1], memory, cache=layer.new_cache(2, 20))


# --- grouped_query_sdpa --------------------------------------------------------------------------------------

def test_a_3d_mask_is_per_sequence_even_when_b_equals_h():
    torch.manual_seed(0)
    B = h = 4
    q, k, v = torch.randn(B, h, 3, 8), torch.randn(B, 2, 5, 8), torch.randn(B, 2, 5, 8)
    mask = torch.rand(B, 3, 5) > 0.3
    mask[..., 0] = True
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], enable_gqa=True)
    torch.testing.assert_close(grouped_query_sdpa(q, k, v, mask), expected)


def test_g_must_divide_h():
    q, kv = torch.randn(1, 4, 2, 8), torch.randn(1, 3, 5, 8)
    with pytest.raises(ValueError, match=r"h \(q.shape\[1\]\)=4 is not divisible by g \(k.shape\[1\]\)=3"):
        grouped_query_sdpa(q, kv, kv)


@pytest.mark.parametrize("k_shape, v_shape", [((1, 2, 5, 4), (1, 2, 5, 4)), ((1, 2, 5, 8), (1, 2, 6, 8)),
                                              ((2, 2, 5, 8), (2, 2, 5, 8))])
def test_k_and_v_must_fit_q(k_shape, v_shape):
    with pytest.raises(ValueError, match=r"k and v must both have shape \(B, g, S, d\)"):
        grouped_query_sdpa(torch.randn(1, 4, 2, 8), torch.randn(k_shape), torch.randn(v_shape))


def test_a_mask_that_does_not_fit_is_refused():
    q, kv = torch.randn(1, 4, 2, 8), torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match=r"does not broadcast to the attention scores' shape \(1, 4, 2, 5\)"):
        grouped_query_sdpa(q, kv, kv, torch.ones(2, 4, dtype=torch.bool))


@given(g=st.sampled_from([1, 2, 4]), L=st.integers(1, 4), seed=st.integers(0, 100))
def test_a_query_with_nothing_to_see_gets_zeros(g, L, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, L, 8, generator=gen), torch.randn(2, g, 6, 8, generator=gen),
               torch.randn(2, g, 6, 8, generator=gen))
    mask = torch.rand(2, 1, L, 6, generator=gen) > 0.5
    mask[0, 0, 0] = False  # the first query of the first sequence sees nothing
    out = grouped_query_sdpa(q, k, v, mask)
    assert torch.isfinite(out).all() and (out[0, :, 0] == 0).all()


@given(g=st.sampled_from([1, 2, 4]), L=st.integers(1, 6), seed=st.integers(0, 100))
def test_is_causal_equals_the_causal_mask(g, L, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, L, 8, generator=gen), torch.randn(2, g, L, 8, generator=gen),
               torch.randn(2, g, L, 8, generator=gen))
    torch.testing.assert_close(grouped_query_sdpa(q, k, v, is_causal=True),
                               grouped_query_sdpa(q, k, v, causal_mask(L)))


def test_is_causal_needs_l_equal_s():
    q, kv = torch.randn(1, 4, 2, 8), torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match=r"is_causal=True needs L == S and no mask, got L=2, S=5"):
        grouped_query_sdpa(q, kv, kv, is_causal=True)


# --- the layer's inputs ----------------------------------------------------------------------------------------

def test_an_input_of_another_dtype_names_both_dtypes():
    layer, x = layer_and_tokens()
    with pytest.raises(ValueError, match=r"x has dtype torch.float64 but the layer's weights are torch.float32"):
        layer(x.double())
    with pytest.raises(ValueError, match=r"kv has dtype torch.float16 but the layer's weights are torch.float32"):
        layer(x, x.half())


def test_a_list_input_names_its_type():
    layer, x = layer_and_tokens()
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor of shape \(B, L, d_model\), got list"):
        layer(x.tolist())


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_the_causal_fast_path_builds_no_mask_and_gives_the_same_output(n_kv_heads):
    layer, x = layer_and_tokens(n_kv_heads)
    with torch.no_grad():
        masked, _ = layer(x, mask=causal_mask(5))
        with mock.patch("attention_book.attention_layer.layer_mask", side_effect=AssertionError("mask built")):
            fast, _ = layer(x, is_causal=True)
    torch.testing.assert_close(fast, masked)


# --- parameters: names and round trips -------------------------------------------------------------------------

def test_the_layer_parameter_names_are_stable():
    """hf_names, from_torch_mha, to_torch_mha and weight loading rely on these names (Llama's, in Hugging Face)."""
    names = ["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias",
             "o_proj.weight", "o_proj.bias"]
    assert list(GroupedQueryAttention(16, 4, 2).state_dict()) == names
    assert list(GroupedQueryAttention(16, 4, 2, bias=False).state_dict()) == [n for n in names if "weight" in n]


def test_the_tiny_transformer_parameter_names_are_stable():
    config = TinyTransformerConfig(vocab_size=8, max_len=6, d_model=16, n_layers=1, n_heads=4, mlp=True)
    block = [f"blocks.0.{name}" for name in
             ["attn_norm.weight", "attn_norm.bias", "attn.q_proj.weight", "attn.q_proj.bias", "attn.k_proj.weight",
              "attn.k_proj.bias", "attn.v_proj.weight", "attn.v_proj.bias", "attn.o_proj.weight", "attn.o_proj.bias",
              "mlp_norm.weight", "mlp_norm.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"]]
    names = list(TinyTransformer(config).state_dict())
    assert set(block) <= set(names), sorted(set(block) - set(names))
    assert len(names) == len(set(names))


def round_trip(model, make):
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    loaded = make()
    loaded.load_state_dict(torch.load(buffer, weights_only=True), strict=True)
    assert model.state_dict().keys() == loaded.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    return loaded


def test_save_and_load_round_trip_of_the_layer():
    layer, x = layer_and_tokens()
    loaded = round_trip(layer, lambda: GroupedQueryAttention(16, 4, 2))
    assert torch.equal(loaded(x)[0], layer(x)[0])


def test_save_and_load_round_trip_of_a_converted_model():
    config = TinyTransformerConfig(vocab_size=8, max_len=6, d_model=16, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    converted = convert_to_gqa(TinyTransformer(config), 2)
    loaded = round_trip(converted, lambda: TinyTransformer(converted.config))
    tokens = torch.randint(0, 8, (2, 6))
    assert torch.equal(loaded(tokens), converted(tokens))


# --- a query with nothing to see, through the whole layer -------------------------------------------------------

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "weights"])
def test_a_query_with_nothing_to_see_gets_the_output_bias_on_both_paths(device, dtype, n_kv_heads, need_weights):
    """Zero attention output, so the layer returns o_proj's bias: finite, on every path, dtype and device."""
    torch.manual_seed(0)
    layer = GroupedQueryAttention(16, 4, n_kv_heads).to(device=device, dtype=dtype)
    x = torch.randn(2, 3, 16, device=device, dtype=dtype)
    mask = torch.ones(2, 3, 3, dtype=torch.bool, device=device)
    mask[0, 1] = False  # query 1 of sequence 0 sees nothing
    with torch.no_grad():
        out, _ = layer(x, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, 1], layer.o_proj.bias)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_grouped_query_sdpa_on_a_gpu_equals_the_cpu():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 8, 4, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    mask = torch.rand(2, 1, 4, 6) > 0.4
    expected = grouped_query_sdpa(q, k, v, mask)
    got = grouped_query_sdpa(q.cuda(), k.cuda(), v.cuda(), mask.cuda()).cpu()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
