"""Head scores on hand-built attention patterns whose scores are known exactly."""
import re

import pytest
import torch

from attention_book.experiments.head_scores import induction_score, previous_token_score
from attention_book.masks import causal_mask


def uniform_causal(L):
    """Each query spreads its weight evenly over positions 0 .. i. Shape (L, L)."""
    mask = causal_mask(L).float()
    return mask / mask.sum(-1, keepdim=True)


def previous_token_pattern(L):
    """Query i puts all its weight on i - 1 (query 0 on itself). Shape (L, L)."""
    weights = torch.zeros(L, L)
    weights[0, 0] = 1
    weights[torch.arange(1, L), torch.arange(L - 1)] = 1
    return weights


def induction_pattern(tokens):
    """Query i puts all its weight on the position after the last earlier copy of its token, else on itself."""
    B, L = tokens.shape
    weights = torch.zeros(B, L, L)
    for b in range(B):
        for i in range(L):
            earlier = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
            weights[b, i, earlier[-1] + 1 if earlier else i] = 1
    return weights


def stack_heads(*patterns, B=1):
    """Patterns (L, L) or (B, L, L), one per head, as weights of shape (B, h, L, L)."""
    return torch.stack([p.expand(B, *p.shape[-2:]) for p in patterns], dim=1)


REPEATED = torch.tensor([[4, 1, 7, 3, 4, 1, 7, 3], [2, 5, 0, 6, 2, 5, 0, 6]])  # (B=2, L=8), pattern of 4 twice


def test_previous_token_scores_perfect_uniform_and_zero():
    L = 6
    weights = stack_heads(previous_token_pattern(L), uniform_causal(L), torch.eye(L), B=2)  # (2, 3, L, L)
    expected = torch.tensor([1.0, sum(1 / (i + 1) for i in range(1, L)) / (L - 1), 0.0])
    torch.testing.assert_close(previous_token_score(weights), expected)


def test_induction_scores_perfect_uniform_and_previous_token():
    weights = stack_heads(induction_pattern(REPEATED), uniform_causal(8), previous_token_pattern(8), B=2)
    # Uniform: queries 4..7 each have one target among i + 1 keys.
    uniform = sum(1 / (i + 1) for i in range(4, 8)) / 4
    torch.testing.assert_close(induction_score(weights, REPEATED), torch.tensor([1.0, uniform, 0.0]))
    # The induction pattern looks back L - n - 1 = 3 positions, not 1: it is not a previous-token head.
    assert previous_token_score(weights)[0] < 0.2


def test_induction_score_by_hand():
    uniform = stack_heads(uniform_causal(4))
    # Queries 2 and 3 repeat tokens 0 and 1; their targets are keys 1 and 2: (1/3 + 1/4) / 2.
    torch.testing.assert_close(induction_score(uniform, torch.tensor([[5, 7, 5, 7]])), torch.tensor([7 / 24]))
    # Every earlier copy counts: query 2 of [3, 3, 3] has targets 1 and 2, weight 2/3; query 1 has target 1.
    uniform = stack_heads(uniform_causal(3))
    torch.testing.assert_close(induction_score(uniform, torch.tensor([[3, 3, 3]])), torch.tensor([(1 / 2 + 2 / 3) / 2]))


def test_rows_without_repeats_are_left_out_of_the_average():
    tokens = torch.cat([REPEATED[:1], torch.arange(8)[None]])  # row 1 has no repeated token
    weights = stack_heads(induction_pattern(tokens), B=2)
    weights[1] = 0  # whatever row 1's weights are, they do not count
    torch.testing.assert_close(induction_score(weights, tokens), torch.tensor([1.0]))


def test_every_layer_at_once():
    layer0 = stack_heads(previous_token_pattern(8), uniform_causal(8), B=2)
    layer1 = stack_heads(uniform_causal(8), induction_pattern(REPEATED), B=2)
    weights = torch.stack([layer0, layer1])  # (n_layers=2, B=2, h=2, L, L)
    prev, ind = previous_token_score(weights), induction_score(weights, REPEATED)
    assert prev.shape == ind.shape == (2, 2)
    torch.testing.assert_close(prev[0, 0], torch.tensor(1.0))
    torch.testing.assert_close(ind[1, 1], torch.tensor(1.0))
    torch.testing.assert_close(prev[1], previous_token_score(layer1))
    torch.testing.assert_close(ind[0], induction_score(layer0, REPEATED))


BAD = [
    (lambda: previous_token_score(torch.rand(2, 4, 4)),
     "weights must have shape (B, h, L, L) or (n_layers, B, h, L, L), got 3 dimensions"),
    (lambda: previous_token_score(torch.rand(1, 2, 2, 4, 4, 4)), "got 6 dimensions"),
    (lambda: previous_token_score(torch.rand(2, 3, 4, 5)), "L queries and L keys, got shape (2, 3, 4, 5)"),
    (lambda: previous_token_score(torch.rand(2, 3, 1, 1)), "weights need L >= 2"),
    (lambda: induction_score(torch.rand(2, 3, 8, 8), REPEATED[0]), "tokens must have shape (B, L), got 1 dimensions"),
    (lambda: induction_score(torch.rand(2, 3, 8, 8), REPEATED[:, :6]),
     "tokens must have shape (B, L) = (2, 8) to match weights (2, 3, 8, 8), got (2, 6)"),
    (lambda: induction_score(torch.rand(1, 3, 4, 4), torch.arange(4)[None]), "every token is unique"),
]


@pytest.mark.parametrize("call, message", BAD, ids=[m for _, m in BAD])
def test_bad_shapes_raise(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
