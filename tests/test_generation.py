"""Greedy generation: the loop with one KVCache per layer chooses exactly the tokens of the loop without, the model's
``caches=`` forward equals the full forward, and bad input is refused with a message naming the argument."""
import _hypothesis  # noqa: F401  (registers and loads the Hypothesis profile)
import pytest
import torch
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book import generate
from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig

VOCAB = 11


def model(n_heads=4, n_kv_heads=None, n_layers=2, d_head=4, max_len=12, mlp=True, seed=0):
    torch.manual_seed(seed)
    config = TinyTransformerConfig(vocab_size=VOCAB, max_len=max_len, d_model=n_heads * d_head, n_layers=n_layers,
                                   n_heads=n_heads, n_kv_heads=n_kv_heads, mlp=mlp)
    return TinyTransformer(config).eval()


def prompt(B=2, L0=3, seed=1):
    return torch.randint(0, VOCAB, (B, L0), generator=torch.Generator().manual_seed(seed))


@st.composite
def models_and_prompts(draw):
    """Model sizes with MHA, GQA and MQA (n_kv_heads divides n_heads), and prompts that leave room to generate."""
    n_heads = draw(st.sampled_from([1, 2, 4, 6]))
    n_kv_heads = draw(st.sampled_from([g for g in (1, 2, 3, 4, 6) if n_heads % g == 0]))
    net = model(n_heads, n_kv_heads, n_layers=draw(st.integers(1, 3)), d_head=draw(st.sampled_from([2, 4, 8])),
                max_len=12, mlp=draw(st.booleans()), seed=draw(SEEDS))
    L0 = draw(st.integers(1, 11))
    n_new = draw(st.integers(0, 12 - L0))
    return net, prompt(draw(st.integers(1, 3)), L0, draw(SEEDS)), n_new


@given(models_and_prompts())
def test_the_cached_loop_chooses_the_uncached_loops_tokens(case):
    net, tokens, n_new = case
    cached, cached_logits = generate(net, tokens, n_new, use_cache=True)
    plain, plain_logits = generate(net, tokens, n_new, use_cache=False)
    B, L0 = tokens.shape
    assert cached.shape == (B, L0 + n_new) and cached_logits.shape == (B, n_new, VOCAB)
    assert torch.equal(cached[:, :L0], tokens)
    assert torch.equal(plain_logits.argmax(-1), plain[:, L0:])  # greedy: each token is its step's argmax
    # A random model can meet a near-tie, where rounding may choose either token and the two loops then go on from
    # different sequences. So each row is compared up to its first near-tie: the logits of every step until then
    # (that step included) and the tokens chosen before it. A trained model has no near-ties (chapter 6).
    if n_new == 0:
        return
    best_two = plain_logits.topk(2, dim=-1).values
    tie = best_two[..., 0] - best_two[..., 1] < 1e-4  # (B, n_new)
    first_tie = torch.where(tie.any(dim=1), tie.float().argmax(dim=1), n_new)  # (B,): n_new where none
    for row in range(B):
        t = int(first_tie[row])
        torch.testing.assert_close(cached_logits[row, :t + 1], plain_logits[row, :t + 1], atol=1e-5, rtol=1e-5)
        assert torch.equal(cached[row, :L0 + t], plain[row, :L0 + t])

@given(models_and_prompts())
def test_a_forward_with_caches_equals_the_full_forward(case):
    net, tokens, _ = case
    B, L0 = tokens.shape
    full = net(tokens)
    caches = net.new_caches(B)
    split = L0 // 2
    with torch.no_grad():
        parts = [net(tokens[:, :split], caches=caches) if split else full[:, :0], net(tokens[:, split:], caches=caches)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert all(cache.length == L0 for cache in caches)


def test_weights_with_caches_cover_every_cached_key():
    net = model(n_kv_heads=2)
    tokens = prompt(L0=5)
    caches = net.new_caches(2)
    with torch.no_grad():
        net(tokens[:, :3], caches=caches)
        logits, weights = net(tokens[:, 3:], caches=caches, return_weights=True)
    assert weights.shape == (2, 2, 4, 2, 5)  # (n_layers, B, h, L, S)
    torch.testing.assert_close(weights, net.attention_weights(tokens)[..., 3:, :])
    torch.testing.assert_close(logits, net(tokens)[:, 3:], atol=1e-5, rtol=1e-5)


def test_new_caches_makes_one_cache_per_layer_sized_for_the_model():
    net = model(n_heads=4, n_kv_heads=1, n_layers=3, d_head=8)
    caches = net.new_caches(5)
    assert len(caches) == 3
    assert all(c.k.shape == (5, 1, 12, 8) for c in caches)
    assert net.new_caches(2, max_len=4)[0].max_len == 4


def test_generate_without_new_tokens_returns_the_prompt():
    tokens, logits = generate(model(), prompt(), 0)
    assert torch.equal(tokens, prompt()) and logits.shape == (2, 0, VOCAB)


def test_generate_does_not_track_gradients():
    _, logits = generate(model(), prompt(), 2)
    assert not logits.requires_grad


@pytest.mark.parametrize("args, message", [
    ((prompt(), -1), r"n_new=-1 must be an integer >= 0"),
    ((prompt(), 2.0), r"n_new=2.0 must be an integer >= 0"),
    ((prompt(), True), r"n_new=True must be an integer >= 0"),
    ((prompt(L0=10), 3), r"prompt length L0=10 \+ n_new=3 exceeds the model's max_len=12"),
    ((prompt().float(), 1), r"prompt must hold integer token ids, got torch.float32"),
    ((prompt() > 0, 1), r"prompt must hold integer token ids, got torch.bool"),
    ((prompt()[0], 1), r"prompt must have shape \(B, L0\), got 1 dimensions"),
    ((prompt()[:, None], 1), r"prompt must have shape \(B, L0\), got 3 dimensions"),
    ((prompt()[:, :0], 1), r"prompt must hold at least one token"),
    ((prompt() + VOCAB, 1), r"prompt must hold token ids in 0 \.\. vocab_size - 1 = 10"),
    ((-prompt() - 1, 1), r"prompt must hold token ids in 0 \.\. vocab_size - 1"),
])
def test_generate_names_the_bad_argument(args, message):
    with pytest.raises(ValueError, match=message):
        generate(model(), *args)


def test_generate_refuses_a_prompt_that_is_not_a_tensor_and_a_use_cache_that_is_not_a_bool():
    with pytest.raises(TypeError, match=r"prompt must be a torch.Tensor"):
        generate(model(), [[1, 2]], 1)
    with pytest.raises(ValueError, match=r"use_cache=1 must be True or False"):
        generate(model(), prompt(), 1, use_cache=1)


def test_forward_refuses_bad_caches():
    net = model(n_layers=2)
    tokens = prompt()
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"caches must be a list of 2 KV caches, one per layer"):
            net(tokens, caches=net.new_caches(2)[:1])
        with pytest.raises(ValueError, match=r"tokens have batch size B=2 but the caches were made for batch_size=3"):
            net(tokens, caches=net.new_caches(3))
        caches = net.new_caches(2)
        net.blocks[0](torch.zeros(2, 1, 16), cache=caches[0])  # fill one layer only
        with pytest.raises(ValueError, match=r"must all hold the same number of tokens, got lengths \[0, 1\]"):
            net(tokens, caches=caches)
        caches = net.new_caches(2, max_len=4)
        net(tokens, caches=caches)
        with pytest.raises(ValueError, match=r"3 cached \+ L=3 new tokens exceeds the caches' max_len=4"):
            net(tokens, caches=caches)
        layer_caches = [block.attn.new_cache(2, 20) for block in net.blocks]  # longer than the model allows
        net(torch.zeros(2, 10, dtype=torch.long), caches=layer_caches)
        with pytest.raises(ValueError, match=r"10 cached \+ L=3 new tokens exceeds the model's max_len=12"):
            net(tokens, caches=layer_caches)


def test_new_caches_refuses_a_length_beyond_the_model():
    with pytest.raises(ValueError, match=r"max_len=13 must be <= the model's max_len=12"):
        model().new_caches(1, max_len=13)
    with pytest.raises(ValueError, match=r"batch_size=0 must be a positive integer"):
        model().new_caches(0)
