"""Checks for chapter 5's exercises: pooling, a padding-aware head score, entropy, and a GQA conversion."""
import torch
import torch.nn.functional as F

from ..bert.encoder import BertEncoder, mean_pool, sentence_embeddings
from ..convert import convert_to_gqa
from ..experiments.head_scores import attention_entropy, offset_targets, weight_on
from ..bert.loader import BertConfig
from ._compare import CheckFailed, _call, _compare


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


def check_mean_pool(fn):
    """fn(hidden (B, L, d_model), is_real (B, L)) -> (B, d_model): the mean over each sentence's real tokens.

    Tried on 3 seeded random padded batches of shapes (1, 4, 3), (3, 6, 5) and (4, 9, 8), each with one unpadded
    sentence; compared with attention_book.bert.encoder.mean_pool.
    """
    task = "average hidden[b, i] over the positions i where is_real[b, i] is True, one vector per sentence."
    gen = torch.Generator().manual_seed(50)
    for B, L, d in [(1, 4, 3), (3, 6, 5), (4, 9, 8)]:
        hidden, is_real = _padded_batch(gen, B, L, d)
        _compare("your mean pooling", f"hidden {(B, L, d)} with sentence lengths {is_real.sum(1).tolist()}",
                 mean_pool(hidden, is_real), _call(fn, (hidden, is_real), task),
                 hint="padding positions must count neither in the sum nor in the number you divide by")
    print("✓ your mean pooling matches the package's on 3 padded batches.")


def check_next_token_score(fn):
    """fn(weights (B, h, L, L), is_real (B, L)) -> (h,): mean weight from a real token to the next real token.

    Tried on a perfect next-token pattern (1, 1, 4, 4) and 2 seeded random padded weight tensors (2, 3, 6, 6) and
    (4, 2, 9, 9); compared with attention_book.experiments.head_scores.weight_on(weights,
    offset_targets(is_real, +1), is_real).
    """
    task = ("for every real token i whose next position i + 1 is also real, take weights[b, :, i, i + 1]; average "
            "over those queries and the batch, one number per head.")
    gen = torch.Generator().manual_seed(51)
    perfect = torch.zeros(1, 1, 4, 4)
    perfect[0, 0, torch.arange(3), torch.arange(1, 4)] = 1.0
    perfect[0, 0, 3, 3] = 1.0
    cases = [("a perfect next-token head", perfect, torch.ones(1, 4, dtype=torch.bool))]
    for B, h, L, s in [(2, 3, 6, 1.0), (4, 2, 9, 3.0)]:
        weights, is_real = _padded_weights(gen, B, h, L, s)
        cases.append((f"padded weights {(B, h, L, L)}, lengths {is_real.sum(1).tolist()}", weights, is_real))
    for tried, weights, is_real in cases:
        expected = weight_on(weights, offset_targets(is_real, +1), is_real)
        _compare("your next-token score", tried, expected, _call(fn, (weights, is_real), task),
                 hint="the last real token has no next token, and padding queries do not count")
    print(f"✓ your next-token score matches the package's on {len(cases)} patterns, a perfect one included.")


def check_attention_entropy(fn):
    """fn(weights (B, h, L, L), is_real (B, L)) -> (h,): mean entropy in nats of the real queries' rows.

    Tried on one-hot and uniform weights over 5 keys and 2 seeded random padded weight tensors (2, 3, 6, 6) and
    (3, 2, 8, 8); compared with attention_book.experiments.head_scores.attention_entropy.
    """
    task = ("compute -sum_j w log w for each real query's row (0 log 0 = 0), and average over real queries and the "
            "batch.")
    gen = torch.Generator().manual_seed(52)
    one_hot = torch.eye(5)[None, None]  # every query on one key: entropy 0
    uniform = torch.full((1, 1, 5, 5), 1 / 5)  # entropy log 5
    cases = [("one-hot weights", one_hot, torch.ones(1, 5, dtype=torch.bool)),
             ("uniform weights over 5 keys", uniform, torch.ones(1, 5, dtype=torch.bool))]
    for B, h, L, s in [(2, 3, 6, 1.0), (3, 2, 8, 4.0)]:
        weights, is_real = _padded_weights(gen, B, h, L, s)
        cases.append((f"padded weights {(B, h, L, L)}, lengths {is_real.sum(1).tolist()}", weights, is_real))
    for tried, weights, is_real in cases:
        _compare("your attention entropy", tried, attention_entropy(weights, is_real),
                 _call(fn, (weights, is_real), task),
                 hint="a weight of exactly 0 gives 0 * log 0 = NaN unless you clamp or mask it")
    print(f"✓ your entropy matches the package's on {len(cases)} patterns, one-hot and uniform included.")


def check_gqa_similarity(fn):
    """fn(encoder, ids, is_real, n_kv_heads) -> (B,): cosine of each sentence's embedding before and after pooling.

    Tried on a seeded random 2-layer, 6-head encoder and a padded batch of 3 sentences, pooled to n_kv_heads = 6, 3
    and 1; compared with the cosine of attention_book.bert.encoder.sentence_embeddings before and after
    attention_book.convert.convert_to_gqa.
    """
    task = ("convert the encoder with convert_to_gqa(encoder, n_kv_heads), embed the batch with both models, and "
            "return the cosine similarity of each sentence's two embeddings.")
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
        got = _call(fn, (encoder, ids, is_real, n_kv_heads), task)
        _compare("your similarity", f"a random 2-layer, 6-head encoder pooled to n_kv_heads={n_kv_heads}",
                 expected, got, hint="use convert_to_gqa's default init ('mean'), and sentence_embeddings for both")
    if encoder.layers[0].attention.n_kv_heads != config.n_heads:
        raise CheckFailed("your function changed the encoder's config: convert a copy, leave the original alone")
    print("✓ your similarities match for n_kv_heads = 6, 3 and 1 on a small random encoder.")
