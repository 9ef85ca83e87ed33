"""TinyTransformer: shapes, causality, attention weights, head ablation through head_mask, and bad input."""
import re

import pytest
import torch

from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig

B, L, VOCAB = 3, 7, 11


def model(**changes):
    base = dict(vocab_size=VOCAB, max_len=8, d_model=16, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    return TinyTransformer(TinyTransformerConfig(**{**base, **changes})).eval()


def tokens(length=L, seed=1):
    return torch.randint(0, VOCAB, (B, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("changes", [{}, {"mlp": False}, {"n_kv_heads": 2}, {"n_kv_heads": 1, "n_layers": 3}],
                         ids=["mha", "attention-only", "gqa", "mqa-3-layers"])
def test_shapes_and_weights(changes):
    net = model(**changes)
    x = tokens()
    logits = net(x)
    weights = net.attention_weights(x)
    assert logits.shape == (B, L, VOCAB)
    assert weights.shape == (net.config.n_layers, B, 4, L, L)
    torch.testing.assert_close(weights.sum(-1), torch.ones(net.config.n_layers, B, 4, L))
    assert torch.all(weights.triu(diagonal=1) == 0)  # causal: no weight on later positions
    logits_too, weights_too = net(x, return_weights=True)
    torch.testing.assert_close(logits_too, logits, atol=1e-5, rtol=1e-5)  # book's attention vs PyTorch's kernel
    torch.testing.assert_close(weights_too, weights)


def test_attention_only_model_has_no_mlp():
    names = [name for name, _ in model(mlp=False).named_parameters()]
    assert not any("mlp" in name for name in names)
    assert any("mlp" in name for name, _ in model().named_parameters())


@pytest.mark.parametrize("changed", [0, 3, L - 1])
def test_changing_a_token_changes_no_earlier_logits(changed):
    net = model()
    x = tokens()
    y = x.clone()
    y[:, changed] = (y[:, changed] + 1) % VOCAB
    before, after = net(x), net(y)
    torch.testing.assert_close(after[:, :changed], before[:, :changed], atol=0, rtol=0)
    assert not torch.allclose(after[:, changed], before[:, changed])


def test_head_mask_of_ones_is_the_plain_forward():
    net = model()
    x = tokens()
    assert torch.equal(net(x, head_mask=torch.ones(2, 4)), net(x))


def test_zeroing_a_head_equals_zeroing_its_columns_of_the_output_projection():
    net = model()
    x = tokens()
    mask = torch.ones(2, 4)
    mask[1, 2] = 0
    ablated = net(x, head_mask=mask)
    assert not torch.allclose(ablated, net(x))
    d_head = net.blocks[1].attn.d_head
    with torch.no_grad():
        net.blocks[1].attn.o_proj.weight[:, 2 * d_head:3 * d_head] = 0  # head 2's slice of the concatenation
    torch.testing.assert_close(net(x), ablated)


def test_head_mask_leaves_no_hook_behind_and_accepts_lists():
    net = model()
    x = tokens()
    mask = [[1, 0, 1, 1], [1, 1, 1, 0]]
    torch.testing.assert_close(net(x, head_mask=mask), net(x, head_mask=torch.tensor(mask, dtype=torch.float32)))
    assert all(not block.attn.o_proj._forward_pre_hooks for block in net.blocks)


def test_a_head_mask_ablating_layer_zero_changes_its_weights_only_downstream():
    net = model()
    x = tokens()
    mask = torch.ones(2, 4)
    mask[0] = 0  # all of layer 0's heads
    plain, ablated = net.attention_weights(x), net.attention_weights(x, head_mask=mask)
    torch.testing.assert_close(ablated[0], plain[0])  # layer 0's own patterns are computed before the mask acts
    assert not torch.allclose(ablated[1], plain[1])


BAD_CONFIGS = [
    (dict(vocab_size=0), "vocab_size=0 must be a positive integer"),
    (dict(max_len=-1), "max_len=-1 must be a positive integer"),
    (dict(d_model=2.5), "d_model=2.5 must be a positive integer"),
    (dict(n_layers=0), "n_layers=0 must be a positive integer"),
    (dict(n_heads=True), "n_heads=True must be a positive integer"),
    (dict(n_kv_heads=0), "n_kv_heads=0 must be a positive integer"),
    (dict(d_model=10), "d_model=10 is not divisible by n_heads=4"),
    (dict(n_kv_heads=3), "n_heads=4 is not divisible by n_kv_heads=3"),
    (dict(mlp="yes"), "mlp='yes' must be True or False"),
]


@pytest.mark.parametrize("changes, message", BAD_CONFIGS, ids=[m for _, m in BAD_CONFIGS])
def test_bad_config_raises(changes, message):
    base = dict(vocab_size=VOCAB, max_len=8, d_model=16, n_layers=2, n_heads=4)
    with pytest.raises(ValueError, match=re.escape(message)):
        TinyTransformerConfig(**{**base, **changes})


BAD_INPUTS = [
    (lambda net: net(tokens()[0]), r"tokens must have shape (B, L), got 1 dimensions"),
    (lambda net: net(tokens(length=9)), "tokens have length L=9 but the model has max_len=8"),
    (lambda net: net(tokens().float()), "tokens must hold integer token ids, got torch.float32"),
    (lambda net: net(tokens() + VOCAB), "tokens must lie in 0 .. vocab_size - 1 = 10"),
    (lambda net: net(tokens() - VOCAB), "tokens must lie in 0 .. vocab_size - 1 = 10"),
    (lambda net: net(tokens(), head_mask=torch.ones(4, 2)),
     "head_mask must have shape (n_layers, n_heads) = (2, 4), got (4, 2)"),
    (lambda net: net(tokens(), head_mask=torch.ones(4)), "head_mask must have shape (n_layers, n_heads)"),
]


@pytest.mark.parametrize("call, message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call(model())
