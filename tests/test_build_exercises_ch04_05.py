"""Chapters 4 and 5: the checks refuse the package's own solution of each step, name the common mistakes of the
exercises that build (the per-sequence group ablation, one encoder layer from its checkpoint tensors, one layer
converted to GQA), and pass the chapters' model solutions."""
import contextlib
import io
import math

import attention_book.checks as checks
import pytest
import torch
import torch.nn.functional as F
from attention_book.bert.encoder import BertLayer, hf_names, mean_pool, sentence_embeddings
from attention_book.checks.real_heads import _layer_weights, _padded_batch
from attention_book.convert import convert_to_gqa
from attention_book.experiments.ablation import ablation_losses
from attention_book.experiments.head_scores import (attention_entropy, induction_score, offset_targets,
                                                    previous_token_score, weight_on)
from attention_book.experiments.training import lm_loss
from attention_book.bert.loader import BertConfig
from exercise_answers import fails, model_solutions



CH04, CH05 = "04_what_heads_learn.ipynb", "05_real_heads.ipynb"


# Answers that call the package's own solution of the step.
def previous_token_score_by_the_package(weights):
    return previous_token_score(weights)


def induction_score_by_the_package(weights, tokens):
    return induction_score(weights, tokens)


def group_ablation_by_lm_loss(model, tokens, targets, heads):
    head_mask = torch.ones(model.config.n_layers, model.config.n_heads)
    for layer, head in heads:
        head_mask[layer, head] = 0.0
    return torch.tensor([lm_loss(model, tokens[b:b + 1], targets[b:b + 1], head_mask)
                         - lm_loss(model, tokens[b:b + 1], targets[b:b + 1]) for b in range(len(tokens))])


def mean_pool_by_the_package(hidden, is_real):
    return mean_pool(hidden, is_real)


def next_token_score_by_weight_on(weights, is_real):
    return weight_on(weights, offset_targets(is_real, +1), is_real)


def entropy_by_the_package(weights, is_real):
    return attention_entropy(weights, is_real)


def encoder_layer_by_the_package(x, is_real, weights, n_heads, eps=1e-12):
    d_model, d_ff = x.shape[-1], weights["intermediate.dense.weight"].shape[0]
    layer = BertLayer(BertConfig(vocab_size=1, d_model=d_model, n_layers=1, n_heads=n_heads, d_ff=d_ff, max_len=1,
                                 layer_norm_eps=eps))
    ours = {theirs.removeprefix("encoder.layer.0."): name.removeprefix("layers.0.")
            for name, theirs in hf_names(1).items() if name.startswith("layers.0.")}
    layer.load_state_dict({ours[name]: t for name, t in weights.items()})
    return layer(x, is_real[:, None, None, :])[0]


CHEATS = {
    "check_previous_token_score": previous_token_score_by_the_package,
    "check_induction_score": induction_score_by_the_package,
    "check_group_ablation": group_ablation_by_lm_loss,
    "check_mean_pool": mean_pool_by_the_package,
    "check_next_token_score": next_token_score_by_weight_on,
    "check_attention_entropy": entropy_by_the_package,
    "check_encoder_layer": encoder_layer_by_the_package,
}


# Chapter 4, exercise 2: a query whose token occurred several times counts the positions after all of them.
def induction_on_one_occurrence(weights, tokens, which):
    """The induction score with only the first (or last) earlier occurrence of each query's token as its target:
    the answer the check used to pass, since its random batches rarely repeat a token three times."""
    B, h, L, _ = weights.shape
    scores, counted = torch.zeros(h), 0
    for b in range(B):
        for i in range(L):
            earlier = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
            if earlier:
                j = earlier[0] if which == "first" else earlier[-1]
                scores += weights[b, :, i, j + 1]
                counted += 1
    return scores / counted


@pytest.mark.parametrize("which", ["first", "last"])
def test_induction_score_fails_an_answer_that_counts_one_earlier_occurrence(which):
    message = fails(checks.check_induction_score, lambda w, t: induction_on_one_occurrence(w, t, which))
    assert "tokens that occur three times" in message, message
    assert f"Likely mistake: only the position after the {which} earlier occurrence" in message, message


# Chapter 4, exercise 3: the rise in each sequence's loss with a group of heads switched off.
def group_ablation(model, tokens, targets, heads, *, sign=1, keep_listed=False, over_all_positions=False):
    head_mask = torch.full((model.config.n_layers, model.config.n_heads), 0.0 if keep_listed else 1.0)
    for layer, head in heads:
        head_mask[layer, head] = 1.0 if keep_listed else 0.0
    rises = []
    for mask in (head_mask, None):
        with torch.no_grad():
            losses = F.cross_entropy(model(tokens, head_mask=mask).transpose(1, 2), targets, reduction="none")
        rises.append(losses.mean(dim=1) if over_all_positions else losses.sum(dim=1) / (targets != -100).sum(dim=1))
    return sign * (rises[0] - rises[1])


@pytest.mark.parametrize("mistake, named", [
    (dict(sign=-1), "that is the rise with its sign flipped"),
    (dict(keep_listed=True), "only the listed heads were kept on"),
    (dict(over_all_positions=True), "averaged over all L positions"),
])
def test_group_ablation_names_the_mistake(mistake, named):
    message = fails(checks.check_group_ablation, lambda *args: group_ablation(*args, **mistake))
    assert "Likely mistake: " in message and named in message.split("Likely mistake: ", 1)[1], message


def test_group_ablation_names_shifted_targets():
    def shifted(model, tokens, targets, heads):  # the targets are already aligned with the logits: no shift
        head_mask = torch.ones(model.config.n_layers, model.config.n_heads)
        for layer, head in heads:
            head_mask[layer, head] = 0.0
        rises = []
        for mask in (head_mask, None):
            logits, later = model(tokens, head_mask=mask)[:, :-1], targets[:, 1:]
            losses = F.cross_entropy(logits.transpose(1, 2), later, reduction="none")
            rises.append(losses.sum(dim=1) / (later != -100).sum(dim=1))
        return rises[0] - rises[1]  # with a gradient: the check accepts that

    message = fails(checks.check_group_ablation, shifted)
    assert "Likely mistake: the logits and the targets were shifted" in message, message


def test_group_ablation_passes_without_the_mistakes():
    with contextlib.redirect_stdout(io.StringIO()):
        checks.check_group_ablation(group_ablation)


def test_group_ablation_refuses_ablation_losses():
    def by_ablation_losses(model, tokens, targets, heads):
        ablation_losses(model, tokens, targets)
        return group_ablation(model, tokens, targets, heads)

    message = fails(checks.check_group_ablation, by_ablation_losses)
    assert "calls attention_book.experiments.ablation.ablation_losses, which the exercise says not to call" in message


# Chapter 5, exercise 4: one encoder layer from its checkpoint tensors, written independently of the check's own.
def encoder_layer(x, is_real, w, n_heads, eps=1e-12, *, masked=True, scale=None, heads_last=False, pre_norm=False,
                  untransposed=False, gelu="none", attention=None, first_norm=True):
    B, L, d_model = x.shape
    d_head = d_model // n_heads

    def proj(t, name):
        weight = w[f"{name}.weight"]
        return t @ (weight if untransposed and weight.shape[0] == weight.shape[1] else weight.T) + w[f"{name}.bias"]

    def norm(t, name):
        return F.layer_norm(t, (d_model,), w[f"{name}.weight"], w[f"{name}.bias"], eps)

    def split(t):
        if heads_last:
            return t.reshape(B, L, d_head, n_heads).permute(0, 3, 1, 2)
        return t.reshape(B, L, n_heads, d_head).permute(0, 2, 1, 3)

    def attend(t):
        q, k, v = (split(proj(t, f"attention.self.{p}")) for p in ("query", "key", "value"))
        if attention is not None:
            out = attention(q, k, v, is_real)
        else:
            s = q @ k.transpose(-2, -1) * (1 / math.sqrt(d_head) if scale is None else scale(d_model, d_head))
            if masked:
                s = s + torch.where(is_real, 0.0, float("-inf"))[:, None, None, :]
            out = torch.softmax(s, dim=-1) @ v
        out = out.permute(0, 2, 3, 1) if heads_last else out.permute(0, 2, 1, 3)
        return proj(out.reshape(B, L, d_model), "attention.output.dense")

    def ff(t):
        return proj(F.gelu(proj(t, "intermediate.dense"), approximate=gelu), "output.dense")

    if pre_norm:
        x = x + attend(norm(x, "attention.output.LayerNorm"))
        return x + ff(norm(x, "output.LayerNorm"))
    x = norm(x + attend(x), "attention.output.LayerNorm") if first_norm else x + attend(x)
    return norm(x + ff(x), "output.LayerNorm")


def test_an_independent_encoder_layer_passes():
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        checks.check_encoder_layer(encoder_layer)
    assert shown.getvalue().startswith("✓ ")


@pytest.mark.parametrize("mistake, named", [
    (dict(masked=False), "the padding keys are not masked"),
    (dict(pre_norm=True), "pre-norm"),
    (dict(scale=lambda d_model, d_head: 1 / math.sqrt(d_model)), "divided by √d_model, not √d_head"),
    (dict(scale=lambda d_model, d_head: 1.0), "not scaled by 1/√d_head"),
    (dict(heads_last=True), "every n_heads-th column"),
    (dict(untransposed=True), "used as (in, out)"),
    (dict(gelu="tanh"), "GELU's tanh approximation"),
    (dict(first_norm=False), "attention.output.LayerNorm is missing"),
])
def test_encoder_layer_names_the_mistake(mistake, named):
    message = fails(checks.check_encoder_layer, lambda *args: encoder_layer(*args, **mistake))
    assert "Likely mistake: " in message and named in message.split("Likely mistake: ", 1)[1], message


def test_encoder_layer_ignores_what_padding_rows_hold():
    def nan_on_padding(x, is_real, w, n_heads, eps=1e-12):
        return encoder_layer(x, is_real, w, n_heads, eps).masked_fill(~is_real[..., None], float("nan"))

    with contextlib.redirect_stdout(io.StringIO()):
        checks.check_encoder_layer(nan_on_padding)


@pytest.mark.parametrize("attention, refused", [
    (lambda q, k, v, is_real: F.scaled_dot_product_attention(q, k, v, attn_mask=is_real[:, None, None, :]),
     "calls torch.nn.functional.scaled_dot_product_attention, which the exercise says not to call"),
    (lambda q, k, v, is_real: __import__("attention_book.sdpa", fromlist=["x"]).scaled_dot_product_attention(
        q, k, v, is_real[:, None, None, :])[0],
     "calls attention_book.sdpa.scaled_dot_product_attention, the package's own solution of this step"),
])
def test_encoder_layer_refuses_ready_made_attention(attention, refused):
    message = fails(checks.check_encoder_layer, lambda *args: encoder_layer(*args, attention=attention))
    assert refused in message and "the exercise is to write that step yourself" in message, message


def test_encoder_layer_refuses_torch_multihead_attention():
    def by_torch_mha(x, is_real, w, n_heads, eps=1e-12):
        d_model = x.shape[-1]
        mha = torch.nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([w[f"attention.self.{p}.weight"] for p in ("query", "key", "value")]))
            mha.in_proj_bias.copy_(torch.cat([w[f"attention.self.{p}.bias"] for p in ("query", "key", "value")]))
        attended = mha(x, x, x, key_padding_mask=~is_real, need_weights=False)[0]
        return attended  # never reached

    message = fails(checks.check_encoder_layer, by_torch_mha)
    assert "calls torch.nn.MultiheadAttention.forward" in message, message


def test_the_encoder_layer_matches_transformers():
    """The check compares with the package's BertLayer; the model solution agrees with transformers' too."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.modeling_bert import BertLayer as HFBertLayer

    config = transformers.BertConfig(hidden_size=12, num_attention_heads=3, intermediate_size=24, hidden_act="gelu",
                                     layer_norm_eps=1e-12, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"
    reference = HFBertLayer(config).eval()
    _, weights = _layer_weights(BertConfig(vocab_size=1, d_model=12, n_layers=1, n_heads=3, d_ff=24, max_len=6), 3)
    reference.load_state_dict(weights)  # the checkpoint's names are the layer's own
    x, is_real = _padded_batch(torch.Generator().manual_seed(0), 3, 6, 12)
    with torch.no_grad():
        expected = reference(x, attention_mask=torch.where(is_real, 0.0, torch.finfo(x.dtype).min)[:, None, None, :])
    expected = expected[0] if isinstance(expected, tuple) else expected
    got = model_solutions(CH05)["my_encoder_layer"](x, is_real, weights, 3)
    assert ((got - expected).abs() * is_real[..., None]).max() < 1e-5

    def by_transformers(x, is_real, w, n_heads, eps=1e-12):  # now that transformers is loaded, it refuses too
        return reference(x, attention_mask=torch.where(is_real, 0.0, -1e9)[:, None, None, :])

    message = fails(checks.check_encoder_layer, by_transformers)
    assert "calls transformers.models.bert.modeling_bert.BertLayer.forward" in message, message


# Chapter 5, exercise 5: one layer converted to GQA.
def test_gqa_similarity_names_converting_every_layer():
    def every_layer(encoder, ids, is_real, layer, n_kv_heads):
        before = sentence_embeddings(encoder, ids, is_real)
        return (before * sentence_embeddings(convert_to_gqa(encoder, n_kv_heads), ids, is_real)).sum(dim=-1)

    message = fails(checks.check_gqa_similarity, every_layer)
    assert "Likely mistake: every layer's K/V heads were pooled" in message, message


def test_gqa_similarity_fails_an_answer_that_changes_the_encoder():
    similarity = model_solutions(CH05)["my_gqa_similarity"]

    def in_place(encoder, ids, is_real, layer, n_kv_heads):
        before = similarity(encoder, ids, is_real, layer, n_kv_heads)
        encoder.layers[layer].attention = convert_to_gqa(encoder.layers[layer].attention, n_kv_heads)
        return before

    message = fails(checks.check_gqa_similarity, in_place)
    assert "changed the encoder it was given" in message, message


def test_an_entropy_that_averages_over_padding_is_not_told_about_nan():
    def over_every_query(weights, is_real):
        return -(weights * weights.clamp(min=1e-12).log()).sum(-1).mean(dim=(0, 2))

    assert "NaN" not in fails(checks.check_attention_entropy, over_every_query)
