"""The synthetic tasks: deterministic, targets where (and only where) the next token can be known, clear errors."""
import functools
import re

import pytest
import torch
import torch.nn.functional as F

from attention_book.experiments.head_scores import previous_token_score
from attention_book.experiments.tasks import IGNORE_INDEX, previous_token, repeated_sequence
from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig
from attention_book.experiments.training import train


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("task", [previous_token, repeated_sequence])
def test_same_seed_same_batch_and_other_seed_other_batch(task):
    first, second, other = task(generator(3)), task(generator(3)), task(generator(4))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[0], other[0])


def test_previous_token_targets():
    tokens, targets = previous_token(generator(), batch_size=5, seq_len=9, vocab_size=7)
    assert tokens.shape == targets.shape == (5, 9) and tokens.dtype == torch.int64
    assert tokens.min() >= 0 and tokens.max() < 7
    assert torch.all(targets[:, 0] == IGNORE_INDEX)
    assert torch.equal(targets[:, 1:], tokens[:, :-1])


def split_row(tokens, targets):
    """One row's filler, first copy and second copy, using the targets to find the pattern length n."""
    n = int((targets != IGNORE_INDEX).sum()) + 1
    L = len(tokens)
    return tokens[:L - 2 * n], tokens[L - 2 * n:L - n], tokens[L - n:]


def test_repeated_sequence_rows():
    tokens, targets = repeated_sequence(generator(), batch_size=200, seq_len=20, vocab_size=12,
                                        min_pattern_len=3, max_pattern_len=8)
    assert tokens.shape == targets.shape == (200, 20)
    lengths = set()
    for row, row_targets in zip(tokens, targets, strict=True):
        filler, first, second = split_row(row, row_targets)
        lengths.add(len(first))
        assert 3 <= len(first) <= 8
        assert torch.equal(first, second)
        assert len(set(first.tolist())) == len(first)  # the pattern's tokens are distinct
        assert not set(filler.tolist()) & set(first.tolist())  # so each second-copy token occurred once before
        L, n = len(row), len(first)
        predictable = torch.arange(L - n, L - 1)  # the second copy but its last position
        assert torch.equal(row_targets[predictable], row[predictable + 1])
        others = torch.ones(L, dtype=torch.bool)
        others[predictable] = False
        assert torch.all(row_targets[others] == IGNORE_INDEX)
    assert lengths == set(range(3, 9))  # every allowed pattern length occurs, so the copies' distance varies


def test_repeated_sequence_without_filler():
    tokens, targets = repeated_sequence(generator(), batch_size=4, seq_len=10, vocab_size=6,
                                        min_pattern_len=5, max_pattern_len=5)
    assert torch.equal(tokens[:, :5], tokens[:, 5:])
    assert torch.all(targets[:, :5] == IGNORE_INDEX) and torch.all(targets[:, -1] == IGNORE_INDEX)


def test_cross_entropy_skips_the_ignored_positions():
    tokens, targets = repeated_sequence(generator(), batch_size=4, seq_len=12, vocab_size=10)
    logits = torch.randn(4, 12, 10, generator=generator(1))
    keep = targets != IGNORE_INDEX
    expected = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(F.cross_entropy(logits.flatten(0, -2), targets.flatten()), expected)


def test_one_layer_learns_previous_token_with_a_previous_token_head():
    torch.manual_seed(0)
    net = TinyTransformer(TinyTransformerConfig(vocab_size=8, max_len=8, d_model=32, n_layers=1, n_heads=2,
                                                mlp=False))
    make_batch = functools.partial(previous_token, batch_size=32, seq_len=8, vocab_size=8)
    losses = train(net, make_batch, steps=80, lr=1e-2, seed=0, progress=False)
    assert losses[-1] < 0.1 < 1.5 < losses[0]
    tokens, _ = make_batch(generator(99))
    assert previous_token_score(net.attention_weights(tokens)).max() > 0.9


BAD = [
    (lambda: repeated_sequence(generator(), min_pattern_len=1), "min_pattern_len=1 must be at least 2"),
    (lambda: repeated_sequence(generator(), min_pattern_len=6, max_pattern_len=5),
     "min_pattern_len=6 must be <= max_pattern_len=5"),
    (lambda: repeated_sequence(generator(), seq_len=10, max_pattern_len=6),
     "max_pattern_len=6 must be <= seq_len // 2 = 5"),
    (lambda: repeated_sequence(generator(), vocab_size=12, seq_len=24), "vocab_size=12 must be > max_pattern_len=12"),
    (lambda: repeated_sequence(generator(), batch_size=0), "batch_size=0 must be a positive integer"),
    (lambda: repeated_sequence(generator(), seq_len=3), "min_pattern_len=4 must be <= max_pattern_len=1"),
    (lambda: previous_token(generator(), vocab_size=-2), "vocab_size=-2 must be a positive integer"),
]


@pytest.mark.parametrize("call, message", BAD, ids=[m for _, m in BAD])
def test_bad_sizes_raise(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
