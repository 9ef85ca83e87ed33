"""MultiHeadAttention, chapter 3's layer: its two paths, a hand-built reference, nn.MultiheadAttention,
GroupedQueryAttention with one K/V head per query head, and its errors."""
import functools
import re

import pytest
import torch
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from attention_book import GroupedQueryAttention, MultiHeadAttention, to_torch_mha
from layer_configs import MASK_SHAPES, TOL, LayerConfig, full_mask, with_examples

MASK_KINDS = [kind for kind in MASK_SHAPES if kind != "1,L,S"]


class Config(LayerConfig):
    def build(self, open_key_0=False):
        return self.build_with(lambda c: MultiHeadAttention(c.d_model, c.n_heads, d_head=c.d_head, bias=c.bias),
                               open_key_0)


def example_config(**changes):
    base = dict(B=2, L=4, S=4, n_heads=4, d_model=16, d_head=None, bias=True, cross=False, mask_kind="B,L,S",
                is_causal=True, dtype=torch.float32, seed=0)
    return Config(**{**base, **changes})


EXAMPLES = [
    example_config(d_model=30, n_heads=5),  # d_head = 6
    example_config(d_model=21, n_heads=3, mask_kind="none", is_causal=False),  # d_head = 7
    example_config(d_model=10, n_heads=4, d_head=3, mask_kind="B,h,L,S"),  # 4 * 3 != 10
    example_config(d_model=12, n_heads=2, d_head=8, cross=True, L=3, S=6, mask_kind="L,S"),  # 2 * 8 > 12
    example_config(d_model=8, n_heads=1, dtype=torch.float64, mask_kind="B,1,L,S"),  # one head
]


@st.composite
def configs(draw, torch_counterpart=False):
    """Random layers and inputs. torch_counterpart: only those where n_heads * d_head == d_model."""
    n_heads = draw(st.integers(1, 6))
    if not torch_counterpart and draw(st.booleans()):
        d_head, d_model = draw(st.integers(1, 7)), draw(st.integers(1, 24))
    else:
        d_head, d_model = None, n_heads * draw(st.integers(1, 7))
    L, cross = draw(st.integers(1, 6)), draw(st.booleans())
    S = draw(st.integers(1, 6)) if cross else L
    return Config(
        B=draw(st.integers(1, 3)), L=L, S=S, n_heads=n_heads, d_model=d_model, d_head=d_head,
        bias=draw(st.booleans()), cross=cross, mask_kind=draw(st.sampled_from(MASK_KINDS)),
        is_causal=L <= S and draw(st.booleans()), dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        seed=draw(SEEDS),
    )


with_examples = functools.partial(with_examples, examples=EXAMPLES)


def reference(layer, x, kv, mask):
    """The layer's function, one head at a time from its weights: out (B, L, d_model), weights (B, h, L, S)."""
    kv = x if kv is None else kv
    B, L, S, h, d = x.shape[0], x.shape[1], kv.shape[1], layer.n_heads, layer.d_head
    q, k, v = layer.q_proj(x), layer.k_proj(kv), layer.v_proj(kv)  # (B, L or S, h * d_head)
    heads, weights = [], []
    for i in range(h):
        cols = slice(i * d, (i + 1) * d)  # head i's columns
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / d**0.5  # (B, L, S)
        if mask is not None:
            scores = scores.masked_fill(~mask.expand(B, h, L, S)[:, i], float("-inf"))
        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a query with no key: zeros
        heads.append(w @ v[..., cols])
        weights.append(w)
    return layer.o_proj(torch.cat(heads, dim=-1)), torch.stack(weights, dim=1)


@given(config=configs())
@with_examples
def test_fused_path_equals_weights_path_and_reference(config):
    layer, x, kv, mask = config.build()
    with torch.no_grad():
        fused, no_weights = layer(x, kv, mask=mask, is_causal=config.is_causal)
        out, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
        expected, expected_weights = reference(layer, x, kv, full_mask(config, mask))
    assert no_weights is None
    assert fused.shape == out.shape == (config.B, config.L, config.d_model)
    assert weights.shape == (config.B, config.n_heads, config.L, config.S)
    torch.testing.assert_close(fused, expected, **TOL[config.dtype])
    torch.testing.assert_close(out, expected, **TOL[config.dtype])
    torch.testing.assert_close(weights, expected_weights, **TOL[config.dtype])


@given(config=configs())
@with_examples
def test_equals_grouped_query_attention_with_one_kv_head_per_query_head(config):
    layer, x, kv, mask = config.build()
    gqa = GroupedQueryAttention(config.d_model, config.n_heads, n_kv_heads=config.n_heads, d_head=config.d_head,
                                bias=config.bias).to(config.dtype)
    gqa.load_state_dict(layer.state_dict())  # the same parameter names and shapes
    assert layer.n_kv_heads == gqa.n_kv_heads == config.n_heads
    with torch.no_grad():
        for need_weights in (False, True):
            ours, our_weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=need_weights)
            theirs, their_weights = gqa(x, kv, mask=mask, is_causal=config.is_causal, need_weights=need_weights)
            torch.testing.assert_close(ours, theirs, **TOL[config.dtype])
            if need_weights:
                torch.testing.assert_close(our_weights, their_weights, **TOL[config.dtype])


def run_torch(mha, x, kv, layer_mask, config):
    """nn.MultiheadAttention on (B, L, d_model) inputs, given the layer's mask (True = may attend)."""
    kv = x if kv is None else kv
    attn_mask = None
    if layer_mask is not None:  # PyTorch's module: (B * h, L, S) or (L, S), and True = NOT allowed
        attn_mask = ~layer_mask.expand(config.B, config.n_heads, config.L, config.S).flatten(0, 1)
    if not mha.batch_first:  # (B, L, E) -> (L, B, E)
        x, kv = x.transpose(0, 1), kv.transpose(0, 1)
    out, weights = mha(x, kv, kv, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)
    return (out if mha.batch_first else out.transpose(0, 1)), weights


@given(config=configs(torch_counterpart=True), batch_first=st.booleans())
@functools.partial(with_examples, keep=lambda config: config.has_torch_counterpart, batch_first=True)
def test_equals_torch_multihead_attention_with_copied_weights(config, batch_first):
    assert config.has_torch_counterpart
    layer, x, kv, mask = config.build(open_key_0=True)
    mha = nn.MultiheadAttention(config.d_model, config.n_heads, bias=config.bias, batch_first=batch_first,
                                dtype=config.dtype)
    with torch.no_grad():  # copied by hand, independently of the package's to_torch_mha
        mha.in_proj_weight.copy_(torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight]))
        mha.out_proj.weight.copy_(layer.o_proj.weight)
        if config.bias:
            mha.in_proj_bias.copy_(torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias]))
            mha.out_proj.bias.copy_(layer.o_proj.bias)
        out, weights = layer(x, kv, mask=mask, is_causal=config.is_causal, need_weights=True)
        fused, _ = layer(x, kv, mask=mask, is_causal=config.is_causal)
        theirs, their_weights = run_torch(mha, x, kv, full_mask(config, mask), config)
    torch.testing.assert_close(out, theirs, **TOL[config.dtype])
    torch.testing.assert_close(fused, theirs, **TOL[config.dtype])
    torch.testing.assert_close(weights, their_weights, **TOL[config.dtype])


@given(config=configs(torch_counterpart=True))
def test_to_torch_mha_copies_it(config):
    """The package's to_torch_mha (written for GroupedQueryAttention) copies this layer too, as chapter 3 does."""
    layer, x, kv, mask = config.build(open_key_0=True)
    mha = to_torch_mha(layer)
    with torch.no_grad():
        out, _ = layer(x, kv, mask=mask, is_causal=config.is_causal)
        theirs, _ = run_torch(mha, x, kv, full_mask(config, mask), config)
    torch.testing.assert_close(out, theirs, **TOL[config.dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "weights"])
def test_a_query_with_no_key_gets_zeros(dtype, need_weights):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).to(dtype)
    mask = torch.ones(2, 1, 3, 3, dtype=torch.bool)
    mask[1] = False  # the second sequence: every key masked
    mask[0, 0, 2] = False  # and the last query of the first
    out, weights = layer(torch.randn(2, 3, 16, dtype=dtype), mask=mask, need_weights=need_weights)
    assert not out.isnan().any()
    bias = layer.o_proj.bias.detach()
    assert torch.equal(out[1].detach(), bias.expand(3, -1))  # zero heads: only W_o's bias is left
    assert torch.equal(out[0, 2].detach(), bias)
    if need_weights:
        assert (weights[1] == 0).all() and (weights[0, :, 2] == 0).all()


def test_sizes_and_parameters():
    layer = MultiHeadAttention(512, 8)
    assert (layer.d_model, layer.n_heads, layer.d_head, layer.n_kv_heads) == (512, 8, 64, 8)
    assert sum(p.numel() for p in layer.parameters()) == 4 * 512**2 + 4 * 512
    wide = MultiHeadAttention(10, 4, d_head=3, bias=False)  # concatenated heads 12 wide, mapped back to 10
    assert wide.q_proj.weight.shape == (12, 10) and wide.o_proj.weight.shape == (10, 12)
    assert wide(torch.randn(2, 5, 10))[0].shape == (2, 5, 10)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "weights"])
def test_empty_batch_gives_empty_output(need_weights):
    out, _ = MultiHeadAttention(8, 2)(torch.randn(0, 3, 8), need_weights=need_weights)
    assert out.shape == (0, 3, 8)


# --- Bad input -----------------------------------------------------------------------------------------------

def call(*args, **kwargs):
    torch.manual_seed(0)
    return MultiHeadAttention(8, 4)(*args, **kwargs)  # d_model = 8, h = 4, d_head = 2


X = torch.randn(2, 3, 8)  # (B, L, d_model)
BAD = [
    (lambda: MultiHeadAttention(10, 4), "d_model=10 is not divisible by n_heads=4", ValueError),
    (lambda: MultiHeadAttention(0, 4), "d_model=0 must be a positive integer", ValueError),
    (lambda: MultiHeadAttention(8, 2.5), "n_heads=2.5 must be a positive integer", ValueError),
    (lambda: MultiHeadAttention(8, 4, d_head=0), "d_head=0 must be a positive integer", ValueError),
    (lambda: call(X[0]), "x must have shape (B, L, d_model), got 2 dimensions: (3, 8)", ValueError),
    (lambda: call(X.tolist()), "x must be a torch.Tensor of shape (B, L, d_model), got list", TypeError),
    (lambda: call(torch.randn(2, 3, 6)), "x has last dimension 6 but the layer has d_model=8", ValueError),
    (lambda: call(X.double()), "x has dtype torch.float64 but the layer's weights are torch.float32", ValueError),
    (lambda: call(X, torch.randn(2, 5, 6)), "kv has last dimension 6 but the layer has d_model=8", ValueError),
    (lambda: call(X, torch.randn(3, 5, 8)), "x and kv must have the same batch size B, got 2 and 3", ValueError),
    (lambda: call(X, mask=torch.ones(3, 3)), "mask must be a boolean tensor (True = may attend), got torch.float32",
     ValueError),
    (lambda: call(X, mask=torch.ones(3, dtype=torch.bool)),
     "mask must be a boolean tensor of shape (L, S), (B, L, S) or (B, 1 or h, L, S), got (3,)", ValueError),
    (lambda: call(X, mask=[[True]]),
     "mask must be a boolean tensor of shape (L, S), (B, L, S) or (B, 1 or h, L, S), got list", ValueError),
    (lambda: call(X, mask=torch.ones(3, 4, dtype=torch.bool)),
     "mask of shape (3, 4) does not broadcast to the attention scores' shape (2, 4, 3, 3)", ValueError),
    (lambda: call(X, mask=torch.ones(2, 2, 3, 3, dtype=torch.bool)),
     "mask of shape (2, 2, 3, 3) does not broadcast to the attention scores' shape (2, 4, 3, 3)", ValueError),
    (lambda: call(X, torch.randn(2, 2, 8), is_causal=True),
     "L=3 queries cannot be the last positions of only S=2 keys: need L <= S", ValueError),
]


@pytest.mark.parametrize("make, message, error", BAD, ids=[message[:40] for _, message, _ in BAD])
def test_bad_input_names_the_parameter_and_the_rule(make, message, error):
    with pytest.raises(error, match=re.escape(message)):
        make()
