"""convert_to_gqa / pool_kv_heads: MHA -> GQA by pooling K/V heads, with enable_gqa's grouping."""
import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book import GroupedQueryAttention
from attention_book.convert import convert_to_gqa, pool_kv_heads
from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig


def make_layer(h, d_model, d_head=None, bias=True, seed=0):
    torch.manual_seed(seed)
    return GroupedQueryAttention(d_model, h, d_head=d_head, bias=bias)


@given(h=st.sampled_from([1, 2, 4, 6, 12]), d_head=st.integers(1, 7), bias=st.booleans(), seed=SEEDS)
def test_g_equal_h_is_the_same_layer(h, d_head, bias, seed):
    layer = make_layer(h, 10, d_head, bias, seed)
    for init in ("mean", "first"):
        same = pool_kv_heads(layer, h, init)
        assert layer.state_dict().keys() == same.state_dict().keys()
        for (name, a), (_, b) in zip(layer.state_dict().items(), same.state_dict().items(), strict=True):
            assert torch.equal(a, b), name
    x = torch.randn(2, 5, 10)
    torch.testing.assert_close(pool_kv_heads(layer, h)(x)[0], layer(x)[0], atol=0, rtol=0)


@given(groups=st.sampled_from([(4, 2), (4, 1), (6, 3), (6, 2), (12, 4), (8, 8)]), bias=st.booleans(), seed=SEEDS)
def test_grouping_matches_enable_gqa(groups, bias, seed):
    """The converted layer equals SDPA(enable_gqa=True) run on the mean of each contiguous group's K/V heads."""
    h, G = groups
    d_head, d_model, B, L = 3, 7, 2, 5
    layer = make_layer(h, d_model, d_head, bias, seed)
    x = torch.randn(B, L, d_model, generator=torch.Generator().manual_seed(seed))
    q = layer.q_proj(x).view(B, L, h, d_head).transpose(1, 2)
    k = layer.k_proj(x).view(B, L, h, d_head).transpose(1, 2)  # (B, h, L, d_head)
    v = layer.v_proj(x).view(B, L, h, d_head).transpose(1, 2)
    k_mean = k.unflatten(1, (G, h // G)).mean(2)  # K/V heads i*h/G ... (i+1)*h/G - 1 pooled: (B, G, L, d_head)
    v_mean = v.unflatten(1, (G, h // G)).mean(2)
    out = F.scaled_dot_product_attention(q, k_mean, v_mean, enable_gqa=True, is_causal=True)
    expected = layer.o_proj(out.transpose(1, 2).reshape(B, L, h * d_head))
    converted = pool_kv_heads(layer, G)
    assert converted.n_kv_heads == G and converted.k_proj.weight.shape == (G * d_head, d_model)
    torch.testing.assert_close(converted(x, is_causal=True)[0], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(converted(x, is_causal=True, need_weights=True)[0], expected, atol=1e-5, rtol=1e-5)


def test_identical_heads_in_a_group_convert_exactly():
    layer = make_layer(4, 8, 2)
    with torch.no_grad():  # make K/V heads 0 = 1 and 2 = 3, so pooling to 2 heads changes nothing
        for proj in (layer.k_proj, layer.v_proj):
            proj.weight.view(4, 2, 8)[1] = proj.weight.view(4, 2, 8)[0]
            proj.weight.view(4, 2, 8)[3] = proj.weight.view(4, 2, 8)[2]
            proj.bias.view(4, 2)[1] = proj.bias.view(4, 2)[0]
            proj.bias.view(4, 2)[3] = proj.bias.view(4, 2)[2]
    x = torch.randn(3, 6, 8)
    for init in ("mean", "first"):
        torch.testing.assert_close(pool_kv_heads(layer, 2, init)(x)[0], layer(x)[0], atol=1e-6, rtol=1e-6)


def test_first_keeps_the_first_head_and_random_is_reproducible():
    layer = make_layer(6, 12)
    first = pool_kv_heads(layer, 2, "first")
    assert torch.equal(first.k_proj.weight.view(2, 2, 12), layer.k_proj.weight.view(6, 2, 12)[[0, 3]])
    a = pool_kv_heads(layer, 3, "random", torch.Generator().manual_seed(1))
    b = pool_kv_heads(layer, 3, "random", torch.Generator().manual_seed(1))
    assert torch.equal(a.v_proj.weight, b.v_proj.weight)
    assert not torch.allclose(a.v_proj.weight, pool_kv_heads(layer, 3).v_proj.weight)
    assert torch.equal(a.q_proj.weight, layer.q_proj.weight) and torch.equal(a.o_proj.bias, layer.o_proj.bias)


def test_gqa_can_be_pooled_further_and_torch_mha_is_accepted():
    layer = make_layer(8, 16)
    twice = pool_kv_heads(pool_kv_heads(layer, 4), 2)
    torch.testing.assert_close(twice.k_proj.weight, pool_kv_heads(layer, 2).k_proj.weight)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    assert pool_kv_heads(mha, 1).n_kv_heads == 1


def test_convert_model_replaces_every_layer_and_leaves_the_original():
    config = TinyTransformerConfig(vocab_size=11, max_len=8, d_model=16, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    model = TinyTransformer(config)
    tokens = torch.randint(0, 11, (2, 8))
    same = convert_to_gqa(model, 4)
    torch.testing.assert_close(same(tokens), model(tokens), atol=0, rtol=0)
    mqa = convert_to_gqa(model, 1)
    assert mqa.config.n_kv_heads == 1 and model.config.n_kv_heads is None
    layers = [m for m in mqa.modules() if isinstance(m, GroupedQueryAttention)]
    assert len(layers) == 2 and all(m.n_kv_heads == 1 for m in layers)
    assert all(m.n_kv_heads == 4 for m in model.modules() if isinstance(m, GroupedQueryAttention))


@pytest.mark.parametrize("args, message", [
    ((3,), "n_kv_heads=4 is not divisible by n_kv_heads=3"),
    ((0,), "n_kv_heads=0 must be a positive integer"),
    ((2, "median"), "init='median' must be one of"),
])
def test_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        pool_kv_heads(make_layer(4, 8), *args)


def test_bad_model():
    with pytest.raises(TypeError, match="GroupedQueryAttention or nn.MultiheadAttention"):
        pool_kv_heads(torch.nn.Linear(2, 2), 1)
    with pytest.raises(ValueError, match="no GroupedQueryAttention layer"):
        convert_to_gqa(torch.nn.Sequential(torch.nn.Linear(2, 2)), 1)


def test_pooling_keeps_the_layers_rope():
    from attention_book.rope import Rope

    layer = GroupedQueryAttention(32, n_heads=4, n_kv_heads=4, rope=Rope(8, base=100.0))
    pooled = pool_kv_heads(layer, 2)
    assert pooled.rope is layer.rope
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        full, _ = pooled(x, is_causal=True)
        cache = pooled.new_cache(1, 5)
        steps = [pooled(x[:, t:t + 1], cache=cache, is_causal=True)[0] for t in range(5)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
