"""Checks for chapter 5's exercises: pooling, a padding-aware head score, entropy, and a GQA conversion."""
import torch
import torch.nn.functional as F

from ..bert.encoder import BertEncoder, mean_pool, sentence_embeddings
from ..convert import convert_to_gqa
from ..experiments.head_scores import attention_entropy, offset_targets, weight_on
from ..bert.loader import BertConfig
from ._compare import CheckFailed, _call, _compare, _exercise


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
    gen = torch.Generator().manual_seed(50)
    for B, L, d in [(1, 4, 3), (3, 6, 5), (4, 9, 8)]:  # the smallest first
        hidden, is_real = _padded_batch(gen, B, L, d)
        _compare("your mean pooling", f"hidden {(B, L, d)} with sentence lengths {is_real.sum(1).tolist()}",
                 mean_pool(hidden, is_real), _call(fn, (hidden, is_real), "my_mean_pool"),
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
    gen = torch.Generator().manual_seed(51)
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
        _compare("your next-token score", tried, expected, _call(fn, (weights, is_real), "my_next_token_score"),
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
    gen = torch.Generator().manual_seed(52)
    one_hot = torch.eye(5)[None, None]  # every query on one key: entropy 0
    uniform = torch.full((1, 1, 5, 5), 1 / 5)  # entropy log 5
    cases = [("one-hot weights", one_hot, torch.ones(1, 5, dtype=torch.bool)),
             ("uniform weights over 5 keys", uniform, torch.ones(1, 5, dtype=torch.bool))]
    for B, h, L, s in [(2, 3, 6, 1.0), (3, 2, 8, 4.0)]:
        weights, is_real = _padded_weights(gen, B, h, L, s)
        cases.append((f"padded weights {(B, h, L, L)}, lengths {is_real.sum(1).tolist()}", weights, is_real))
    for tried, weights, is_real in cases:  # the smallest first
        _compare("your attention entropy", tried, attention_entropy(weights, is_real),
                 _call(fn, (weights, is_real), "my_attention_entropy"),
                 hint="a weight of exactly 0 must add 0 to the entropy, not 0 * log 0 = NaN")
    print(f"✓ your entropy matches the package's on {len(cases)} patterns, one-hot and uniform included.")


@_exercise("my_gqa_similarity",
           task="given an encoder, ids and is_real (B, L) and n_kv_heads, return a tensor (B,): for each sentence, the "
                "cosine similarity of its embedding by the encoder and by a copy of the encoder converted to "
                "n_kv_heads mean-pooled K/V heads; the encoder itself must not change.",
           hint="convert_to_gqa(encoder, n_kv_heads) returns a converted copy (its default init is the mean). "
                "sentence_embeddings(model, ids, is_real) gives each sentence's embedding, (B, d_model), for the "
                "original and the converted model; F.cosine_similarity(before, after, dim=-1) compares them.")
def check_gqa_similarity(fn):
    """fn(encoder, ids, is_real, n_kv_heads) -> (B,): cosine of each sentence's embedding before and after pooling.

    Tried on a seeded random 2-layer, 6-head encoder and a padded batch of 3 sentences, pooled to n_kv_heads = 6, 3
    and 1; compared with the cosine of attention_book.bert.encoder.sentence_embeddings before and after
    attention_book.convert.convert_to_gqa.
    """
    config = BertConfig(vocab_size=40, d_model=24, n_layers=2, n_heads=6, d_ff=48, max_len=16)
    with torch.random.fork_rng():
        torch.manual_seed(53)
        encoder = BertEncoder(config).eval()
    gen = torch.Generator().manual_seed(54)
    ids = torch.randint(1, config.vocab_size, (3, 7), generator=gen)
    is_real = torch.arange(7)[None, :] < torch.tensor([[7], [5], [3]])
    before = sentence_embeddings(encoder, ids, is_real)
    for n_kv_heads in (6, 3, 1):
        after = sentence_embeddings(convert_to_gqa(encoder, n_kv_heads), ids, is_real)
        expected = F.cosine_similarity(before, after, dim=-1)
        got = _call(fn, (encoder, ids, is_real, n_kv_heads), "my_gqa_similarity")
        _compare("your similarity", f"a random 2-layer, 6-head encoder pooled to n_kv_heads={n_kv_heads}",
                 expected, got,
                 hint="use convert_to_gqa's default init ('mean'), and embed both models' sentences the same way")
    if encoder.layers[0].attention.n_kv_heads != config.n_heads:
        raise CheckFailed("your function changed the encoder's config: convert a copy, leave the original alone")
    print("✓ your similarities match for n_kv_heads = 6, 3 and 1 on a small random encoder.")
