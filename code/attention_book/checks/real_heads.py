"""Checks for chapter 5's exercises: pooling, a padding-aware head score, entropy, one encoder layer from its
weights, and a GQA conversion of one layer."""
import copy
import math

import torch
import torch.nn.functional as F

from ..bert.encoder import BertEncoder, BertLayer, hf_names, mean_pool, sentence_embeddings
from ..convert import convert_to_gqa
from ..experiments.head_scores import attention_entropy, offset_targets, weight_on
from ..bert.loader import BertConfig
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _seeded


def _padded_batch(generator, B, L, d):
    lengths = torch.randint(2, L + 1, (B,), generator=generator)
    lengths[0] = L  # at least one sentence without padding
    is_real = torch.arange(L)[None, :] < lengths[:, None]  # (B, L), True = a real token
    return torch.randn(B, L, d, generator=generator), is_real


def _padded_weights(generator, B, h, L, sharpness):
    _, is_real = _padded_batch(generator, B, L, 1)
    scores = torch.randn(B, h, L, L, generator=generator) * sharpness
    weights = torch.softmax(scores.masked_fill(~is_real[:, None, None, :], float("-inf")), dim=-1)
    return weights, is_real  # (B, h, L, L): padding keys get no weight


@_exercise("my_mean_pool",
           task="given hidden (B, L, d_model) and is_real (B, L), True for a real token and False for padding, return "
                "(B, d_model): each sentence's mean hidden vector over its real tokens only.",
           hint="Turn is_real into a (B, L, 1) float weight (is_real[..., None].float()), multiply hidden by it and "
                "sum over L (dimension 1), then divide by the number of real tokens, the weight's sum over L.")
def check_mean_pool(fn):
    """fn(hidden (B, L, d_model), is_real (B, L)) -> (B, d_model): the mean over each sentence's real tokens.

    Tried on 3 seeded random padded batches of shapes (1, 4, 3), (3, 6, 5) and (4, 9, 8), each with one unpadded
    sentence; compared with attention_book.bert.encoder.mean_pool.
    """
    gen = _generator(50)
    for B, L, d in [(1, 4, 3), (3, 6, 5), (4, 9, 8)]:  # the smallest first
        hidden, is_real = _padded_batch(gen, B, L, d)
        _compare("your mean pooling", f"hidden {(B, L, d)} with sentence lengths {is_real.sum(1).tolist()}",
                 mean_pool(hidden, is_real),
                 _call(fn, (hidden, is_real), "my_mean_pool", refuse=["attention_book.bert.encoder.mean_pool"]),
                 hint="padding positions must count neither in the sum nor in the number of tokens averaged")
    print("✓ your mean pooling matches the package's on 3 padded batches.")


@_exercise("my_next_token_score",
           task="given weights (B, h, L, L) and is_real (B, L), True for real tokens, return a tensor (h,): for each "
                "head, the mean weight that a real token puts on the next position when that position is a real "
                "token too, over those queries of the whole batch together (one mean, not a mean per sentence; "
                "other queries do not count).",
           hint="The weight from i to i + 1 sits just above the diagonal: weights.diagonal(offset=1, dim1=-2, "
                "dim2=-1) is (B, h, L - 1). The queries that count are those where is_real[:, :-1] & "
                "is_real[:, 1:]; zero the others (multiply by that mask as floats), sum over the batch and positions "
                "and divide by the number of counted queries.")
def check_next_token_score(fn):
    """fn(weights (B, h, L, L), is_real (B, L)) -> (h,): mean weight from a real token to the next real token.

    Tried on a perfect next-token pattern (1, 1, 4, 4) and 2 seeded random padded weight tensors (2, 3, 6, 6) and
    (4, 2, 9, 9); compared with attention_book.experiments.head_scores.weight_on(weights,
    offset_targets(is_real, +1), is_real).
    """
    gen = _generator(51)
    perfect = torch.zeros(1, 1, 4, 4)
    perfect[0, 0, torch.arange(3), torch.arange(1, 4)] = 1.0
    perfect[0, 0, 3, 3] = 1.0
    cases = [("a perfect next-token head", perfect, torch.ones(1, 4, dtype=torch.bool))]
    for B, h, L, s in [(2, 3, 6, 1.0), (4, 2, 9, 3.0)]:
        weights, is_real = _padded_weights(gen, B, h, L, s)
        cases.append((f"padded weights {(B, h, L, L)}, lengths {is_real.sum(1).tolist()}", weights, is_real))
    for tried, weights, is_real in cases:  # the smallest first
        expected = weight_on(weights, offset_targets(is_real, +1), is_real)
        per_sentence = [("a mean per sentence, then a mean over the sentences: the score is one mean over all the "
                         "counted queries of the batch together (padded sentences count fewer queries)",
                         lambda w=weights, r=is_real: torch.stack([
                             weight_on(w[b:b + 1], offset_targets(r[b:b + 1], +1), r[b:b + 1])
                             for b in range(len(r))]).mean(dim=0))]
        got = _call(fn, (weights, is_real), "my_next_token_score",
                    refuse=[("attention_book.experiments.head_scores.weight_on", "which the exercise says not to call"),
                            "attention_book.experiments.head_scores.offset_targets"])
        _compare("your next-token score", tried, expected, got,
                 hint="the last real token has no next token, and padding queries do not count",
                 mistakes=per_sentence)
    print(f"✓ your next-token score matches the package's on {len(cases)} patterns, a perfect one included.")


@_exercise("my_attention_entropy",
           task="given weights (B, h, L, L) and is_real (B, L), True for real tokens, return a tensor (h,): for each "
                "head, the mean entropy in nats of the real queries' rows of weights, over those queries and the "
                "batch (padding queries do not count; a weight of exactly 0 adds nothing to the entropy).",
           hint="A row's entropy is -sum_j w_j log w_j. A weight of 0 gives 0 * log 0 = 0 * -inf = NaN, so compute "
                "the terms with torch.where(weights > 0, -weights * weights.log(), 0) (or clamp the weights before "
                "the log). Sum over the keys (the last dimension), then average over the real queries with is_real "
                "as a float (B, 1, L) weight: sum over dimensions 0 and 2 divided by the number of real queries.")
def check_attention_entropy(fn):
    """fn(weights (B, h, L, L), is_real (B, L)) -> (h,): mean entropy in nats of the real queries' rows.

    Tried on one-hot and uniform weights over 5 keys and 2 seeded random padded weight tensors (2, 3, 6, 6) and
    (3, 2, 8, 8); compared with attention_book.experiments.head_scores.attention_entropy.
    """
    gen = _generator(52)
    one_hot = torch.eye(5)[None, None]  # every query on one key: entropy 0
    uniform = torch.full((1, 1, 5, 5), 1 / 5)  # entropy log 5
    cases = [("one-hot weights", one_hot, torch.ones(1, 5, dtype=torch.bool)),
             ("uniform weights over 5 keys", uniform, torch.ones(1, 5, dtype=torch.bool))]
    for B, h, L, s in [(2, 3, 6, 1.0), (3, 2, 8, 4.0)]:
        weights, is_real = _padded_weights(gen, B, h, L, s)
        cases.append((f"padded weights {(B, h, L, L)}, lengths {is_real.sum(1).tolist()}", weights, is_real))
    for tried, weights, is_real in cases:  # the smallest first
        naive = (-(weights * weights.log()).sum(dim=-1) * is_real[:, None]).sum(dim=(0, 2)) / is_real.sum()
        _compare("your attention entropy", tried, attention_entropy(weights, is_real),
                 _call(fn, (weights, is_real), "my_attention_entropy",
                       refuse=["attention_book.experiments.head_scores.attention_entropy"]),
                 hint=_see_hint("my_attention_entropy"),
                 mistakes=[("a weight of exactly 0 must add 0 to the entropy, not 0 * log 0 = NaN", lambda: naive)])
    print(f"✓ your entropy matches the package's on {len(cases)} patterns, one-hot and uniform included.")


def _layer_weights(config, seed):
    """A BertLayer of ``config`` with seeded random weights (LayerNorms included), and the same tensors by their names
    in a Hugging Face checkpoint, without the "encoder.layer.0." prefix."""
    with _seeded(seed):
        layer = BertLayer(config).eval()
        with torch.no_grad():
            for norm in (layer.attention_norm, layer.mlp_norm):
                norm.weight.normal_(1.0, 0.2)
                norm.bias.normal_(0.0, 0.2)
    names = {ours.removeprefix("layers.0."): theirs.removeprefix("encoder.layer.0.")
             for ours, theirs in hf_names(1).items() if ours.startswith("layers.0.")}
    return layer, {names[name]: t.detach().clone() for name, t in layer.state_dict().items()}


def _encoder_layer(x, is_real, w, n_heads, eps, *, masked=True, scale_by="d_head", split="heads first",
                   post_norm=True, transposed=True, gelu="none", first_norm=True):
    """One BERT layer from checkpoint tensors, with the variants that common mistakes give."""
    B, L, d_model = x.shape
    d_head = d_model // n_heads

    def linear(t, name, square=False):
        weight = w[f"{name}.weight"] if transposed or not square else w[f"{name}.weight"].T
        return F.linear(t, weight, w[f"{name}.bias"])

    def norm(t, name):
        return F.layer_norm(t, (d_model,), w[f"{name}.weight"], w[f"{name}.bias"], eps)

    def heads(t):  # (B, L, d_model) -> (B, h, L, d_head)
        if split == "heads first":
            return t.view(B, L, n_heads, d_head).transpose(1, 2)
        return t.view(B, L, d_head, n_heads).permute(0, 3, 1, 2)

    def attention(t):
        q, k, v = (heads(linear(t, f"attention.self.{p}", square=True)) for p in ("query", "key", "value"))
        scores = q @ k.transpose(-2, -1)
        scores = scores / math.sqrt({"d_head": d_head, "d_model": d_model, "none": 1}[scale_by])
        if masked:
            scores = scores.masked_fill(~is_real[:, None, None, :], float("-inf"))
        out = scores.softmax(dim=-1) @ v  # (B, h, L, d_head)
        out = out.transpose(1, 2) if split == "heads first" else out.permute(0, 2, 3, 1)
        return linear(out.reshape(B, L, d_model), "attention.output.dense", square=True)

    def mlp(t):
        return linear(F.gelu(linear(t, "intermediate.dense"), approximate=gelu), "output.dense")

    if post_norm:
        x = x + attention(x)
        x = norm(x, "attention.output.LayerNorm") if first_norm else x
        return norm(x + mlp(x), "output.LayerNorm")
    x = x + attention(norm(x, "attention.output.LayerNorm"))
    return x + mlp(norm(x, "output.LayerNorm"))


# The package's own layer and attention, and every ready-made attention forward: the exercise writes them.
REFUSED_LAYERS = [
    "attention_book.bert.encoder.BertLayer.forward",
    "attention_book.bert.encoder.BertEncoder.forward",
    "attention_book.attention_layer.GroupedQueryAttention.forward",
    "attention_book.multi_head_attention.MultiHeadAttention.forward",
    "attention_book.sdpa.scaled_dot_product_attention",
    "attention_book.grouped_sdpa.grouped_query_sdpa",
    "attention_book.grouped_sdpa.attend",
    ("torch.nn.functional.scaled_dot_product_attention", "which the exercise says not to call"),
    ("torch.nn.functional.multi_head_attention_forward", "which the exercise says not to call"),
    ("torch.nn.MultiheadAttention.forward", "which the exercise says not to call"),
    ("torch.nn.TransformerEncoderLayer.forward", "which the exercise says not to call"),
    # transformers' BERT, refused when it is loaded (refusing skips it otherwise: importing it would take seconds)
    *(f"transformers.models.bert.modeling_bert.{name}.forward" for name in
      ("BertLayer", "BertAttention", "BertSelfAttention", "BertSdpaSelfAttention")),
]
@_exercise("my_encoder_layer",
           task="given x (B, L, d_model), is_real (B, L), True for real tokens, weights, a dict of one BERT layer's "
                "tensors by their checkpoint names without the layer prefix (each weight (out, in) as nn.Linear "
                "stores it), n_heads and the LayerNorm eps, return (B, L, d_model): the layer's output, post-norm "
                "self-attention in which no token attends to padding, then the GELU feed-forward, as BERT computes "
                "it (rows of padding positions are not checked); the package's layers, nn.MultiheadAttention, "
                "nn.TransformerEncoderLayer and scaled_dot_product_attention may not be called.",
           hint="Project x with each Linear's tensors, x @ weight.T + bias (or F.linear). Split q, k and v into "
                "heads: view (B, L, n_heads, d_head), then transpose to (B, n_heads, L, d_head). Scores q @ k^T / "
                "sqrt(d_head); masked_fill the padding keys, ~is_real[:, None, None, :], with -inf; softmax over the "
                "keys; times v; transpose back and reshape to (B, L, d_model); attention.output.dense. Then "
                "x = LayerNorm(x + that) with attention.output.LayerNorm's weight and bias (F.layer_norm), and "
                "LayerNorm(x + output.dense(gelu(intermediate.dense(x)))) with output.LayerNorm's.",
           idea="The layer is two sublayers, each followed by add-and-norm (post-norm, as in BERT): attention over "
                "the real tokens only, then a two-layer MLP with GELU. Every weight you need is in the dict you are "
                "given, stored (out, in) as nn.Linear stores it, which tells you how to apply it.")
def check_encoder_layer(fn):
    """fn(x (B, L, d_model), is_real (B, L), weights, n_heads, eps) -> (B, L, d_model): one BERT layer's output.

    Tried on seeded random layers of 2, 3 and 4 heads (d_model 8, 12 and 24) with random LayerNorm weights, the
    first batch without padding and the others with; compared with attention_book.bert.encoder.BertLayer holding
    the same tensors, on the real tokens. Chapter 5 checks that layer against transformers' BertModel. The
    package's layers and attention, nn.MultiheadAttention, nn.TransformerEncoderLayer and
    scaled_dot_product_attention refuse.
    """
    gen = _generator(55)
    eps = 1e-12
    for B, L, d_model, n_heads in [(1, 3, 8, 2), (3, 5, 12, 3), (4, 7, 24, 4)]:  # the smallest first
        config = BertConfig(vocab_size=8, d_model=d_model, n_layers=1, n_heads=n_heads, d_ff=2 * d_model, max_len=L,
                            layer_norm_eps=eps)
        layer, weights = _layer_weights(config, seed=56 + n_heads)
        x, is_real = _padded_batch(gen, B, L, d_model)  # the first sentence unpadded: with B = 1, no padding
        with torch.no_grad():
            expected = layer(x, is_real[:, None, None, :])[0]  # (B, L, d_model)
        real = is_real[..., None]  # (B, L, 1): padding rows are not compared

        def variant(**mistake):
            return lambda: torch.where(real, _encoder_layer(x, is_real, weights, n_heads, eps, **mistake), 0.0)
        mistakes = [
            ("the padding keys are not masked: real tokens attend to padding", variant(masked=False)),
            ("pre-norm: the LayerNorm runs before each sublayer, but BERT's layer is post-norm",
             variant(post_norm=False)),
            ("attention.output.LayerNorm is missing: the sum of x and the attention's output goes into the "
             "feed-forward without it", variant(first_norm=False)),
            ("the scores are divided by √d_model, not √d_head", variant(scale_by="d_model")),
            ("the scores are not scaled by 1/√d_head", variant(scale_by="none")),
            ("each head's numbers were taken from every n_heads-th column, not from a block of d_head side by side",
             variant(split="heads last")),
            ("the attention's weights were used as (in, out): x @ weight, but a checkpoint stores nn.Linear's "
             "(out, in)", variant(transposed=False)),
            ("GELU's tanh approximation: BERT's gelu is the exact one", variant(gelu="tanh")),
        ]
        got = _call(fn, (x, is_real, weights, n_heads, eps), "my_encoder_layer", refuse=REFUSED_LAYERS)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            got = torch.where(real, got, 0.0)  # whatever the padding rows hold
        _compare("your encoder layer", f"x {(B, L, d_model)} with {n_heads} heads and sentence lengths "
                 f"{is_real.sum(1).tolist()}", torch.where(real, expected, 0.0), got, atol=1e-5,
                 hint=_see_hint("my_encoder_layer"), mistakes=mistakes)
    print("✓ your encoder layer matches the package's BertLayer on 3 random layers, padded batches included.")


@_exercise("my_gqa_similarity",
           task="given an encoder, ids and is_real (B, L), a layer index and n_kv_heads, return a tensor (B,): for "
                "each sentence, the cosine similarity of its embedding by the encoder and by a copy of the encoder "
                "in which only that layer's attention is converted to n_kv_heads mean-pooled K/V heads; the encoder "
                "itself must not change.",
           hint="copy.deepcopy(encoder) gives a copy to change. convert_to_gqa(encoder.layers[layer].attention, "
                "n_kv_heads) returns a converted copy of one attention layer: put it in the copy's "
                "layers[layer].attention. sentence_embeddings(model, ids, is_real) gives each sentence's unit-length "
                "embedding, (B, d_model), for both models, and the cosine of unit vectors is their dot product.")
def check_gqa_similarity(fn):
    """fn(encoder, ids, is_real, layer, n_kv_heads) -> (B,): cosine of each sentence's embedding before and after
    pooling the K/V heads of one layer.

    Tried on a seeded random 2-layer, 6-head encoder and a padded batch of 3 sentences, with layer 0 pooled to 6
    K/V heads (no change), layer 1 to 3 and layer 0 to 1; compared with the cosine of
    attention_book.bert.encoder.sentence_embeddings before and after attention_book.convert.convert_to_gqa of that
    layer's attention. The encoder must come back unchanged.
    """
    config = BertConfig(vocab_size=40, d_model=24, n_layers=2, n_heads=6, d_ff=48, max_len=16)
    with _seeded(53):
        encoder = BertEncoder(config).eval()
    gen = _generator(54)
    ids = torch.randint(1, config.vocab_size, (3, 7), generator=gen)
    is_real = torch.arange(7)[None, :] < torch.tensor([[7], [5], [3]])
    state = {name: t.clone() for name, t in encoder.state_dict().items()}
    before = sentence_embeddings(encoder, ids, is_real)
    for layer, n_kv_heads in [(0, 6), (1, 3), (0, 1)]:
        one_layer = copy.deepcopy(encoder)
        one_layer.layers[layer].attention = convert_to_gqa(encoder.layers[layer].attention, n_kv_heads)
        expected = F.cosine_similarity(before, sentence_embeddings(one_layer, ids, is_real), dim=-1)
        every_layer = [("every layer's K/V heads were pooled, not only those of the given layer",
                        lambda n=n_kv_heads: F.cosine_similarity(
                            before, sentence_embeddings(convert_to_gqa(encoder, n), ids, is_real), dim=-1))]
        got = _call(fn, (encoder, ids, is_real, layer, n_kv_heads), "my_gqa_similarity")
        changed = [name for name, t in encoder.state_dict().items() if name not in state or t.shape != state[name].shape
                   or not torch.equal(t, state[name])]
        if changed or any(block.attention.n_kv_heads != config.n_heads for block in encoder.layers):
            raise CheckFailed(f"your function changed the encoder it was given (layer {layer}, n_kv_heads="
                              f"{n_kv_heads}): {', '.join(changed) or 'its number of K/V heads'}; the conversion "
                              "must happen on a copy")
        _compare("your similarity", f"a random 2-layer, 6-head encoder with layer {layer} pooled to "
                 f"n_kv_heads={n_kv_heads}", expected, got, mistakes=every_layer,
                 hint="use convert_to_gqa's default init ('mean'), and embed both models' sentences the same way")
    print("✓ your similarities match for one layer pooled to 6, 3 and 1 K/V heads on a small random encoder.")
