"""Chapters 1-3's build exercises: attention with both kinds of mask (ch 1), self-attention a block of queries at a
time and positions anywhere (ch 2), a layer's forward from its four projections (ch 3). Their checks pass the
model solutions, name the common mistakes, refuse the package's (and PyTorch's) own solution of the step, and
measure the memory the block exercise promises to save."""
import contextlib
import io
import math

import attention_book
import attention_book.checks as checks
import pytest
import torch
import torch.nn.functional as F
from attention_book import GroupedQueryAttention, causal_mask, scaled_dot_product_attention, sinusoidal_positions
from attention_book.checks.single_head import _attention_cases, _masked_attention
from exercise_answers import fails


def _package_attention(q, k, v, mask=None):
    return attention_book.scaled_dot_product_attention(q, k, v, mask)


def _package_blocks(x, W_q, W_k, W_v, block):
    L, d_model = x.shape[1:]
    x = x + sinusoidal_positions(L, d_model)
    return attention_book.scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, causal_mask(L))[0]


def _package_multi_head(layer, x, kv=None, mask=None):
    return layer(x, kv, mask=mask)[0]


def _package_positions(positions, d_model):
    return attention_book.sinusoidal_positions(int(positions.max()) + 1, d_model)[positions]


def _package_param_count(d_model, n_heads, n_kv_heads, bias):
    return sum(p.numel() for p in GroupedQueryAttention(d_model, n_heads, n_kv_heads, bias=bias).parameters())


def _package_to_torch_mha(layer):
    return attention_book.to_torch_mha(layer)


# check name -> an answer that calls the package's own solution of the step (tests/test_exercises_build.py)
CHEATS = {
    "check_attention_with_masks": _package_attention,  # ch 1
    "check_sinusoidal_at": _package_positions,  # ch 2
    "check_self_attention_in_blocks": _package_blocks,  # ch 2
    "check_multi_head": _package_multi_head,  # ch 3
    "check_param_count": _package_param_count,  # ch 3
    "check_to_torch_mha": _package_to_torch_mha,  # ch 3
}


# Chapter 1: attention with a boolean or a float mask

def attention(q, k, v, mask=None, *, fill=float("-inf"), zero_empty=True, before_scale=False, finite_only=False):
    """Right by default; the keywords make the mistakes."""
    scores = q @ k.transpose(-2, -1)
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, fill)
    elif mask is not None and finite_only:
        mask = torch.zeros_like(mask).masked_fill(mask == float("-inf"), float("-inf"))
    if mask is not None and before_scale:
        scores = scores + mask
    scores = scores / math.sqrt(q.shape[-1])
    if mask is not None and not before_scale:
        scores = scores + mask
    hidden = scores == float("-inf")
    if zero_empty:
        scores = scores.masked_fill(hidden.all(-1, keepdim=True), 0.0)
    weights = torch.softmax(scores, -1).masked_fill(hidden, 0.0) if zero_empty else torch.softmax(scores, -1)
    return weights @ v, weights


@pytest.mark.parametrize("how, named", [
    (dict(zero_empty=False), "a query that may see no key got NaN"),
    (dict(fill=-1e9, zero_empty=False), "as masking with a large finite number such as -1e9 does"),
    (dict(before_scale=True), "the float mask was added before the scaling"),
    (dict(finite_only=True), "the float mask's finite values were dropped"),
])
def test_attention_with_masks_names_the_mistake(how, named):
    message = fails(checks.check_attention_with_masks, lambda q, k, v, mask=None: attention(q, k, v, mask, **how))
    assert "Likely mistake: " in message and named in message.split("Likely mistake: ")[1], message


def test_attention_with_masks_needs_the_inputs_dtype():
    def in_fp32(q, k, v, mask=None):
        out, weights = attention(q.float(), k.float(), v.float(), None if mask is None else
                                 mask if mask.dtype == torch.bool else mask.float())
        return out, weights

    assert "expected dtype torch.float16, got torch.float32" in fails(checks.check_attention_with_masks, in_fp32)


def test_attention_with_masks_refuses_pytorchs_sdpa():
    def through_torch(q, k, v, mask=None):
        _, weights = attention(q, k, v, mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), weights

    message = fails(checks.check_attention_with_masks, through_torch)
    assert "calls torch.nn.functional.scaled_dot_product_attention" in message, message


def test_the_reference_is_the_package_for_boolean_masks_and_pytorch_for_float_ones():
    for q, k, v, mask, _ in _attention_cases():
        out, weights = _masked_attention(q, k, v, mask)
        if mask is None or mask.dtype == torch.bool:
            theirs, their_weights = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
            assert torch.allclose(weights.double(), their_weights, atol=1e-3)
        else:
            theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # zeros for fully masked rows (CPU)
        assert torch.allclose(out.double(), theirs.double(), atol=1e-3)


# Chapter 2: positions anywhere, and self-attention a block of queries at a time

@pytest.mark.parametrize("layout, named", [
    ("swapped", "the sine and the cosine of each pair are swapped"),
    ("halves", "the sines fill the first half of the columns"),
    ("exponent", "pair i turns at the rate 1 / 10000^(i / d_model)"),
])
def test_sinusoidal_at_names_the_mistake(layout, named):
    def encoding(positions, d_model):
        i = torch.arange(d_model // 2) * (1 if layout == "exponent" else 2)
        angles = positions[..., None].float() / 10000 ** (i / d_model)
        sin, cos = angles.sin(), angles.cos()
        if layout == "halves":
            return torch.cat((sin, cos), -1)
        return torch.stack((cos, sin) if layout == "swapped" else (sin, cos), -1).flatten(-2)

    assert f"Likely mistake: {named}" in fails(checks.check_sinusoidal_at, encoding)


def blocks(x, W_q, W_k, W_v, block, *, positions=True, mask="right"):
    """Right by default; the keywords make the mistakes."""
    L, d_model = x.shape[1:]
    x = x + sinusoidal_positions(L, d_model) if positions else x
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    outs = []
    for start in range(0, L, block):
        scores = q[:, start:start + block] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, n, L)
        n = scores.shape[1]
        first = {"right": start, "top-left": 0, "none": L}[mask]  # the position of the block's first query
        allowed = torch.arange(L)[None, :] <= torch.arange(n)[:, None] + first
        outs.append(torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v)
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("how, named", [
    (dict(positions=False), "the positions were not added"),
    (dict(mask="top-left"), "each block's causal mask starts again at query 0"),
    (dict(mask="none"), "the attention is not causal"),
])
def test_self_attention_in_blocks_names_the_mistake(how, named):
    message = fails(checks.check_self_attention_in_blocks, lambda *args: blocks(*args, **how))
    assert "Likely mistake: " in message and named in message.split("Likely mistake: ")[1], message


def test_blocks_of_any_size_pass():
    checks.check_self_attention_in_blocks(blocks)  # keys 0 .. L - 1 for every block, not only up to its end


def test_self_attention_in_blocks_fails_an_answer_that_holds_all_the_scores():
    def all_at_once(x, W_q, W_k, W_v, block):
        return blocks(x, W_q, W_k, W_v, x.shape[1])  # one block of L queries: right values

    message = fails(checks.check_self_attention_in_blocks, all_at_once)
    assert "right values, but it held" in message and "bytes of new tensors at once" in message, message
    assert "x (2, 128, 8)" in message, message
    # B 2, L 128, d_model 8, d_head 4, fp32: what it may hold adds up, item by item
    assert ("it may hold 102,400: x with its positions 8,192, the table of positions 4,096, q, k, v and the output "
            "16,384, one more x-sized tensor of slack 8,192, and 8 tensors of scores for 8 queries 65,536") in message
    assert 8_192 + 4_096 + 16_384 + 8_192 + 65_536 == 102_400


def test_self_attention_in_blocks_refuses_the_head():
    def with_the_head(x, W_q, W_k, W_v, block):
        head = attention_book.SelfAttentionHead(*W_q.shape)
        with torch.no_grad():
            for projection, W in zip((head.q_proj, head.k_proj, head.v_proj), (W_q, W_k, W_v), strict=True):
                projection.weight.copy_(W.T)
        L, d_model = x.shape[1:]
        return head(x + sinusoidal_positions(L, d_model), causal_mask(L))[0]

    message = fails(checks.check_self_attention_in_blocks, with_the_head)
    assert "calls attention_book.self_attention.SelfAttentionHead.forward" in message, message


# Chapter 3: a layer's forward from its four projections

def multi_head(layer, x, kv=None, mask=None, *, scale="d_head", fill=float("-inf"), merge=True, project=True):
    """Right by default; the keywords make the mistakes."""
    kv = x if kv is None else kv
    (B, L, _), S, h, d = x.shape, kv.shape[1], layer.n_heads, layer.d_head
    q = layer.q_proj(x).view(B, L, h, d).transpose(1, 2)
    k = layer.k_proj(kv).view(B, S, h, d).transpose(1, 2)
    v = layer.v_proj(kv).view(B, S, h, d).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d if scale == "d_head" else layer.d_model)
    if mask is not None:
        scores = scores.masked_fill(~(mask[:, None] if mask.dim() == 3 else mask), fill)
    hidden = scores == float("-inf")
    weights = torch.softmax(scores.masked_fill(hidden.all(-1, keepdim=True), 0.0), -1).masked_fill(hidden, 0.0)
    heads = weights @ v
    heads = heads.transpose(1, 2).reshape(B, L, h * d) if merge else heads.reshape(B, L, h * d)
    return layer.o_proj(heads) if project else heads


@pytest.mark.parametrize("how, named", [
    (dict(scale="d_model"), "the scores are scaled by 1/√d_model"),
    (dict(fill=-1e9), "as masking with -1e9 does"),
    (dict(merge=False), "the heads were merged by reshaping"),
    (dict(project=False), "the output projection o_proj was not applied"),
])
def test_multi_head_names_the_mistake(how, named):
    message = fails(checks.check_multi_head, lambda *args: multi_head(*args, **how))
    assert "Likely mistake: " in message and named in message.split("Likely mistake: ")[1], message


@pytest.mark.parametrize("refused, cheat", [
    ("attention_book.grouped_sdpa.attend",
     lambda layer, x, kv=None, mask=None: attention_book.grouped_sdpa.attend(
         *(p(x if kv is None else kv if i else x).view(x.shape[0], -1, layer.n_heads, layer.d_head).transpose(1, 2)
           for i, p in enumerate((layer.q_proj, layer.k_proj, layer.v_proj))), mask)),
    ("torch.nn.MultiheadAttention.forward",
     lambda layer, x, kv=None, mask=None: attention_book.to_torch_mha(layer)(x, x, x)[0]),
])
def test_multi_head_refuses_the_package_and_pytorch(refused, cheat):
    assert f"calls {refused}" in fails(checks.check_multi_head, cheat)


def always_with_biases(layer, *, copy_biases):
    """An nn.MultiheadAttention built with biases whatever the layer has: copying the layer's biases (which a layer
    with bias=False lacks), or copying them only where there are some and leaving PyTorch's zeros otherwise."""
    mha = torch.nn.MultiheadAttention(layer.d_model, layer.n_heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight]))
        mha.out_proj.weight.copy_(layer.o_proj.weight)
        if copy_biases or layer.q_proj.bias is not None:
            mha.in_proj_bias.copy_(torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias]))
            mha.out_proj.bias.copy_(layer.o_proj.bias)
    return mha


def test_to_torch_mha_tries_a_layer_without_biases():
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(TypeError):  # torch.cat of the missing biases
        checks.check_to_torch_mha(lambda layer: always_with_biases(layer, copy_biases=True))
    message = fails(checks.check_to_torch_mha, lambda layer: always_with_biases(layer, copy_biases=False))
    assert "bias=False: the layer has no biases, but your nn.MultiheadAttention has in_proj_bias and out_proj.bias" \
        in message, message


def test_param_count_shows_both_numbers_alike():
    message = fails(checks.check_param_count, lambda d_model, n_heads, n_kv_heads, bias: 4 * d_model * d_model)
    assert "expected 3,720, got 3,600" in message, message


def test_param_count_and_to_torch_mha_refuse_to_build_or_convert():
    assert "which the exercise says not to build" in fails(checks.check_param_count, _package_param_count)
    assert "calls attention_book.torch_interop.to_torch_mha" in fails(checks.check_to_torch_mha,
                                                                          _package_to_torch_mha)


# Chapter 1's first two exercises say what not to call: their checks refuse it

def test_stable_softmax_refuses_torchs_softmax():
    message = fails(checks.check_stable_softmax, lambda x: torch.softmax(x, dim=-1))
    assert "calls torch.softmax, which the exercise says not to call" in message, message
    assert "calls torch.Tensor.softmax" in fails(checks.check_stable_softmax, lambda x: x.softmax(-1))
    assert "calls torch.nn.functional.softmax" in fails(checks.check_stable_softmax, lambda x: F.softmax(x, -1))


@pytest.mark.parametrize("answer, refused", [
    (lambda L, S: attention_book.causal_mask(L, S), "attention_book.masks.causal_mask"),
    (lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L), "torch.Tensor.tril"),
    (lambda L, S: torch.tril(torch.ones(L, S, dtype=torch.bool), diagonal=S - L), "torch.tril"),
])
def test_causal_mask_refuses_causal_mask_and_tril(answer, refused):
    assert f"calls {refused}, which the exercise says not to call" in fails(checks.check_causal_mask, answer)


def test_causal_mask_refuses_triu_and_its_hint_suggests_no_triangle(capsys):
    def by_triu(L, S):
        return ~torch.ones(L, S, dtype=torch.bool).triu(diagonal=S - L + 1)

    assert "calls torch.Tensor.triu, which the exercise says not to call" in fails(checks.check_causal_mask, by_triu)
    checks.hint("my_causal_mask")
    shown = capsys.readouterr().out
    assert "tril" not in shown and "triu" not in shown, shown


@pytest.mark.parametrize("answer, refused", [
    (lambda x: torch.log_softmax(x, -1).exp(), "torch.log_softmax"),
    (lambda x: F.log_softmax(x, -1).exp(), "torch.nn.functional.log_softmax"),
    (lambda x: (x - torch.logsumexp(x, -1, keepdim=True)).exp(), "torch.logsumexp"),
    (lambda x: (x - x.logsumexp(-1, keepdim=True)).exp(), "torch.Tensor.logsumexp"),
])
def test_stable_softmax_refuses_a_log_softmax_and_logsumexp(answer, refused):
    fails(checks.check_stable_softmax, answer, f"calls {refused}, which the exercise says not to call")


def test_a_causal_mask_that_hides_the_diagonal_is_told_so_with_the_other_reading_of_its_first_input():
    """On (1, 1) a mask that hides each query's own key and an inverted mask are the same: both are named."""
    def strict(L, S):
        return torch.arange(S)[None, :] < torch.arange(L)[:, None] + S - L

    message = fails(checks.check_causal_mask, strict)
    likely = message.split("Likely mistake: ")[1]
    assert "the mask hides each query's own position from it" in likely, message
    assert "\nor: the mask is inverted" in likely, message


def test_attention_that_adds_a_boolean_mask_as_numbers_is_told_so():
    def adding(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores + mask.to(scores.dtype)
        weights = torch.exp(scores - scores.amax(-1, keepdim=True))
        weights = weights / weights.sum(-1, keepdim=True)
        return weights @ v, weights

    message = fails(checks.check_attention_with_masks, adding)
    assert "the boolean mask was added to the scores as numbers" in message.split("Likely mistake: ")[1], message
