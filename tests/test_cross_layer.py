"""Cross-layer K/V sharing in TinyTransformer (config.kv_share) and chapter 15's tiny-model experiment."""
import dataclasses

import pytest
import torch
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book.attention_layer import GroupedQueryAttention
from attention_book.convert import convert_to_gqa
from attention_book.experiments import cla_experiment as cross_layer
from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig
from attention_book.torch_interop import to_torch_mha

VOCAB = 11
BASE = dict(vocab_size=VOCAB, max_len=10, d_model=16, n_layers=2, n_heads=4)


def model(seed=0, **changes):
    torch.manual_seed(seed)
    return TinyTransformer(TinyTransformerConfig(**{**BASE, **changes})).eval()


def tokens(B, L, seed=1):
    return torch.randint(0, VOCAB, (B, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("changes", [{}, {"mlp": False}, {"n_kv_heads": 2, "n_layers": 3}])
def test_sharing_off_is_the_plain_model_exactly(changes):
    plain, one = model(**changes), model(**changes, kv_share=1)
    assert plain.state_dict().keys() == one.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), one.state_dict().values(), strict=True))
    x = tokens(3, 7)
    assert torch.equal(plain(x), one(x))
    assert torch.equal(plain.attention_weights(x), one.attention_weights(x))
    assert "kv_share" not in repr(plain.config) and "kv_share=1" in repr(one.config)


def test_shared_layers_have_no_kv_projections():
    plain, shared = model(n_layers=4), model(n_layers=4, kv_share=2)
    names = [name for name, _ in shared.named_parameters()]
    for layer in range(4):
        has_kv = any(name.startswith(f"blocks.{layer}.attn.k_proj") for name in names)
        assert has_kv == (layer % 2 == 0)
        assert any(name.startswith(f"blocks.{layer}.attn.q_proj") for name in names)
    dropped = 2 * 2 * (16 * 16 + 16)  # two layers lose k_proj and v_proj, weights and biases
    count = lambda net: sum(p.numel() for p in net.parameters())  # noqa: E731
    assert count(plain) - count(shared) == dropped
    # The weights are drawn as without sharing: every weight the shared model has equals the plain model's.
    assert all(torch.equal(value, plain.state_dict()[name]) for name, value in shared.state_dict().items())


def test_a_shared_layer_is_cross_attention_to_its_groups_first_layer():
    """Reference: layer 1 = GroupedQueryAttention with layer 1's q/o and layer 0's k/v, attending from
    LayerNorm_1(x_1) to kv = LayerNorm_0(x_0)."""
    net = model(kv_share=2, mlp=False)
    x = tokens(2, 6)
    first, second = net.blocks
    x0 = net.token_embedding(x) + net.position_embedding(torch.arange(6))
    x1 = x0 + first.attn(first.attn_norm(x0), is_causal=True)[0]
    reference = GroupedQueryAttention(16, 4)
    reference.q_proj, reference.o_proj = second.attn.q_proj, second.attn.o_proj
    reference.k_proj, reference.v_proj = first.attn.k_proj, first.attn.v_proj
    x2 = x1 + reference(second.attn_norm(x1), kv=first.attn_norm(x0), is_causal=True)[0]
    with torch.no_grad():
        torch.testing.assert_close(net(x), net.unembed(net.final_norm(x2)), atol=1e-5, rtol=1e-5)


@given(seed=SEEDS, n_layers_share=st.sampled_from([(2, 2), (3, 3), (4, 2), (6, 3), (4, 4)]),
       n_kv_heads=st.sampled_from([None, 2, 1]), mlp=st.booleans(), B=st.integers(1, 3),
       L=st.integers(2, 10), prompt=st.integers(1, 9), chunk=st.integers(1, 3))
def test_cached_decode_equals_the_full_forward(seed, n_layers_share, n_kv_heads, mlp, B, L, prompt, chunk):
    n_layers, share = n_layers_share
    net = model(seed, n_layers=n_layers, kv_share=share, n_kv_heads=n_kv_heads, mlp=mlp)
    x = tokens(B, L, seed=seed % 1000)
    prompt = min(prompt, L - 1)
    with torch.no_grad():
        full, full_weights = net(x, return_weights=True)
        torch.testing.assert_close(net(x), full, atol=1e-5, rtol=1e-5)  # PyTorch's kernel vs the book's
        caches = net.new_caches(B)
        assert len(caches) == n_layers // share
        pieces = [net(x[:, :prompt], caches=caches)]
        for start in range(prompt, L, chunk):
            pieces.append(net(x[:, start:start + chunk], caches=caches))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    assert torch.all(full_weights.triu(diagonal=1) == 0)  # causal


def test_head_mask_ablates_a_head_of_a_shared_layer():
    net = model(kv_share=2)
    x = tokens(2, 6)
    mask = torch.ones(2, 4)
    mask[1, 2] = 0
    with torch.no_grad():
        heads = net.blocks[1].attn.o_proj.weight.clone()
        net.blocks[1].attn.o_proj.weight[:, 8:12] = 0  # head 2's d_head = 4 columns
        zeroed = net(x)
        net.blocks[1].attn.o_proj.weight.copy_(heads)
    torch.testing.assert_close(net(x, head_mask=mask), zeroed)


def test_cache_bytes_halve_with_pairs():
    plain, shared = model(n_layers=4), model(n_layers=4, kv_share=2)
    nbytes = lambda net: sum(cache.nbytes for cache in net.new_caches(1))  # noqa: E731
    assert nbytes(shared) * 2 == nbytes(plain)
    per_token = cross_layer.config_kv_bytes_per_token
    assert per_token(shared.config) * 2 == per_token(plain.config)
    assert per_token(model(n_layers=4, kv_share=4).config) == 2 * 16 * 4  # one K/V layer, fp32


@pytest.mark.parametrize("kv_share, message", [(0, "kv_share=0 must be a positive integer"),
                                               (-2, "kv_share=-2 must be a positive integer"),
                                               (1.5, "kv_share=1.5 must be a positive integer"),
                                               (True, "kv_share=True must be a positive integer"),
                                               ("2", "kv_share='2' must be a positive integer")])
def test_bad_kv_share_raises(kv_share, message):
    with pytest.raises(ValueError, match=message):
        TinyTransformerConfig(**BASE, kv_share=kv_share)


def test_a_last_group_may_be_shorter():
    """One rule for the tiny model and the Llama decoder (cross_layer.shared_kv_owners): 5 layers in pairs make
    3 K/V, the last layer alone in its group."""
    net = model(n_layers=5, kv_share=2)
    assert net.config.kv_layers == 3 and [net.config.makes_kv(i) for i in range(5)] == [True, False, True, False, True]
    x = tokens(2, 6)
    with torch.no_grad():
        caches = net.new_caches(2)
        assert len(caches) == 3
        stepped = torch.cat([net(x[:, t:t + 1], caches=caches) for t in range(6)], dim=1)
    torch.testing.assert_close(stepped, net(x).detach(), atol=1e-5, rtol=1e-5)


def test_caches_must_be_one_per_group():
    net = model(n_layers=4, kv_share=2)
    with pytest.raises(ValueError, match=r"caches must be a list of 2 KV caches, one per group of kv_share layers"):
        net(tokens(1, 3), caches=model(n_layers=4).new_caches(1))


def test_share_kv_converts_without_training():
    plain = model(n_layers=4)
    shared = cross_layer.share_kv(plain)
    assert shared.config == dataclasses.replace(plain.config, kv_share=2)
    assert all(torch.equal(value, plain.state_dict()[name]) for name, value in shared.state_dict().items())
    x = tokens(2, 5)
    with torch.no_grad():  # layer 0 is untouched, so its attention weights agree; layer 1's do not
        plain_weights, shared_weights = plain.attention_weights(x), shared.attention_weights(x)
    torch.testing.assert_close(shared_weights[0], plain_weights[0])
    assert not torch.allclose(shared_weights[1], plain_weights[1])
    with pytest.raises(ValueError, match="already shares K/V"):
        cross_layer.share_kv(shared)


def test_experiment_runs_and_returns_the_documented_keys():
    results = cross_layer.cross_layer_experiment(seed=0, steps=3, retrain_steps=2)
    assert tuple(results) == cross_layer.VARIANTS
    assert all(tuple(row) == cross_layer.KEYS for row in results.values())
    assert results["separate"]["kv_bytes_per_token"] == 512  # 2 layers x 2 (K, V) x 32 x 4 bytes
    assert all(results[v]["kv_bytes_per_token"] == 256 for v in ("shared", "gqa", "converted", "retrained"))
    assert results["separate"]["parameters"] == 10_192  # chapter 4's model
    assert all(results[v]["parameters"] == 8_080 for v in ("shared", "gqa", "converted", "retrained"))
    assert results["converted"]["train_seconds"] == 0
    assert all(0 <= row["accuracy"] <= 1 and row["loss"] > 0 for row in results.values())


def test_a_sharing_model_converts_to_gqa():
    """18d0874 deleted the sharing layers' k_proj and v_proj, so convert_to_gqa raised AttributeError."""
    net = model(n_layers=4, kv_share=2, n_kv_heads=4)
    gqa = convert_to_gqa(net, 2)
    assert gqa.config.n_kv_heads == 2 and [b.attn.makes_kv for b in gqa.blocks] == [True, False, True, False]
    assert gqa.blocks[0].attn.k_proj.weight.shape == (2 * 4, 16)
    with torch.no_grad():
        caches = gqa.new_caches(1)
        x = tokens(1, 5)
        stepped = torch.cat([gqa(x[:, t:t + 1], caches=caches) for t in range(5)], dim=1)
        torch.testing.assert_close(stepped, gqa(x), atol=1e-5, rtol=1e-5)


def test_a_sharing_layer_says_what_it_needs():
    """18d0874: AttributeError 'GroupedQueryAttention' object has no attribute 'k_proj'."""
    attn = model(kv_share=2).blocks[1].attn
    with pytest.raises(ValueError, match="makes no keys and values of its own .* pass shared_kv"):
        attn(torch.zeros(1, 3, 16))
    with pytest.raises(ValueError, match="nn.MultiheadAttention has no way to read another layer's keys"):
        to_torch_mha(attn)
    with pytest.raises(ValueError, match="the cache of its group's first layer holds them"):
        attn.new_cache(1, 4)
