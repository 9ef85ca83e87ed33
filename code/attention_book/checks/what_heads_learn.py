"""Checks for chapter 4's exercises: the head scores and switching a group of heads off."""
import torch
import torch.nn.functional as F

from ..experiments.head_scores import induction_score, previous_token_score
from ..masks import causal_mask
from ..experiments.tasks import repeated_sequence
from ..tiny_transformer import TinyTransformer, TinyTransformerConfig
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _seeded


# The package's own scores: the induction score is weight_on over the targets it builds.
REFUSED_SCORES = ["attention_book.experiments.head_scores.induction_score",
                  "attention_book.experiments.head_scores.weight_on"]


def _causal_weights(generator, B, h, L, sharpness):
    scores = torch.randn(B, h, L, L, generator=generator) * sharpness
    return torch.softmax(scores.masked_fill(~causal_mask(L), float("-inf")), dim=-1)  # (B, h, L, L)


@_exercise("my_previous_token_score",
           task="given attention weights (B, h, L, L), return a tensor (h,): for each head, the mean weight that the "
                "query at position i puts on position i - 1, over the queries i = 1 .. L - 1 and the batch.",
           hint="The weight from i to i - 1 is weights[:, :, i, i - 1], just below the diagonal: index with "
                "torch.arange(1, L) for the queries and torch.arange(L - 1) for the keys (or use "
                "weights.diagonal(offset=-1, dim1=-2, dim2=-1)), giving (B, h, L - 1); then average over the batch "
                "and positions, dimensions 0 and 2.")
def check_previous_token_score(fn):
    """fn(weights (B, h, L, L)) -> (h,): mean weight from position i to i - 1, over i >= 1 and the batch.

    Tried on a perfect previous-token pattern and 2 random causal weight tensors; compared with
    attention_book.experiments.head_scores.previous_token_score.
    """
    gen = _generator(6)
    perfect = torch.zeros(1, 1, 5, 5)
    perfect[0, 0, 0, 0] = 1.0
    perfect[0, 0, torch.arange(1, 5), torch.arange(4)] = 1.0
    cases = [("a perfect previous-token head", perfect)] + [
        (f"random causal weights of shape {(B, h, L, L)}", _causal_weights(gen, B, h, L, s))
        for B, h, L, s in [(2, 3, 6, 1.0), (4, 2, 9, 3.0)]]
    for tried, weights in cases:  # the smallest first
        _compare("your previous-token score", tried, previous_token_score(weights),
                 _call(fn, (weights,), "my_previous_token_score",
                       refuse=["attention_book.experiments.head_scores.previous_token_score"]),
                 hint=_see_hint("my_previous_token_score"))
    print(f"✓ your previous-token score matches the package's on {len(cases)} patterns, a perfect one included.")


@_exercise("my_induction_score",
           task="given weights (B, h, L, L) and tokens (B, L), return a tensor (h,): for each head, the mean over "
                "the batch's queries whose token occurred earlier in the sequence (the others do not count) of the "
                "total weight the query puts on the positions right after its earlier occurrences; one mean over "
                "all those queries of the batch together, not a mean per sequence.",
           hint="Build a boolean target (B, L, L), True at [b, i, j + 1] when tokens[b, j] == tokens[b, i] and "
                "j < i: compare tokens[:, :, None] with tokens[:, None, :], keep j < i with a strictly lower-"
                "triangular mask, and shift it one key to the right. The queries that count are those whose target "
                "row has any True. Sum weights * target over the keys, then add up over the counted queries of the "
                "whole batch and divide by how many there are.")
def check_induction_score(fn):
    """fn(weights (B, h, L, L), tokens (B, L)) -> (h,): mean weight on the position after the earlier occurrence.

    Tried on a small batch in which tokens occur three times and 2 random batches of repeated sequences, with random
    causal weights; compared with attention_book.experiments.head_scores.induction_score.
    """
    gen = _generator(7)
    thrice = torch.tensor([[5, 1, 5, 2, 5, 3, 1, 4], [2, 7, 2, 7, 2, 7, 0, 2]])  # 5, then 2 and 7: three times
    cases = [(thrice, _causal_weights(gen, 2, 2, 8, 1.0), "tokens that occur three times")]
    for B, h, L, s in [(2, 2, 12, 1.0), (3, 4, 16, 3.0)]:  # the smallest first
        tokens, _ = repeated_sequence(gen, batch_size=B, seq_len=L, vocab_size=16, min_pattern_len=3)
        cases.append((tokens, _causal_weights(gen, B, h, L, s), "repeated tokens"))
    for tokens, weights, kind in cases:
        (B, h, L, _), tried = weights.shape, f"weights {tuple(weights.shape)} and {kind} {tuple(tokens.shape)}"
        per_sequence = ("a mean per sequence, then a mean over the sequences: the score is one mean over all the "
                        "counted queries of the batch together (sequences count different numbers of queries)",
                        lambda tokens=tokens, weights=weights: torch.stack([
                            induction_score(weights[b:b + 1], tokens[b:b + 1]) for b in range(len(tokens))]).mean(0))
        one_occurrence = [(f"only the position after the {which} earlier occurrence of a token counted: a query "
                           "whose token occurred several times puts its weight on the positions after all of them",
                           lambda tokens=tokens, weights=weights, which=which: _one_occurrence(weights, tokens, which))
                          for which in ("first", "last")]
        expected = induction_score(weights, tokens)  # before the answer: it refuses then
        _compare("your induction score", tried, expected,
                 _call(fn, (weights, tokens), "my_induction_score", refuse=REFUSED_SCORES),
                 hint="only queries whose token appeared before count; the target key is one after that appearance",
                 mistakes=[per_sequence, *one_occurrence])
    print(f"✓ your induction score matches the package's on {len(cases)} batches, one with tokens that occur three "
          "times.")


def _one_occurrence(weights, tokens, which):
    """The induction score with only the first (or last) earlier occurrence of each query's token as its target."""
    L = tokens.shape[1]
    earlier = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril(diagonal=-1)
    positions = torch.arange(L).expand_as(earlier)
    if which == "first":
        j = torch.where(earlier, positions, L).amin(dim=-1)  # (B, L): L where there is none
    else:
        j = torch.where(earlier, positions, -1).amax(dim=-1)  # -1 where there is none
    counted = earlier.any(dim=-1)  # (B, L)
    target = torch.zeros_like(earlier)
    target[counted] = torch.nn.functional.one_hot(j[counted] + 1, L).bool()
    on_target = (weights * target[:, None]).sum(dim=-1)  # (B, h, L)
    return (on_target * counted[:, None]).sum(dim=(0, 2)) / counted.sum()


def _sequence_losses(model, tokens, targets, head_mask=None, shifted=False):
    """Each sequence's mean cross-entropy over its own counted targets (not -100): (B,). ``shifted``: the mistake of
    pairing logits[:, i] with targets[:, i + 1], as if the targets were not aligned with the logits already."""
    with torch.no_grad():
        logits = model(tokens, head_mask=head_mask)  # (B, L, vocab_size)
    if shifted:
        logits, targets = logits[:, :-1], targets[:, 1:]
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, L), 0 where the target is -100
    return losses.sum(dim=1) / (targets != -100).sum(dim=1)


def _head_mask(model, heads, off=True):
    """(n_layers, n_heads): 0 at the listed heads and 1 elsewhere (off=False: the other way round)."""
    head_mask = torch.full((model.config.n_layers, model.config.n_heads), float(off))
    for layer, head in heads:
        head_mask[layer, head] = float(not off)
    return head_mask


@_exercise("my_group_ablation",
           task="given a TinyTransformer model, tokens and targets (B, L) and heads, a list of (layer, head) pairs, "
                "return a float tensor (B,): for each sequence, how much its own loss rises when all those heads are "
                "switched off together, its loss being the mean cross-entropy over its own targets (those of -100 do "
                "not count); neither lm_loss nor ablation_losses may be called.",
           hint="Build a (n_layers, n_heads) mask of ones from model.config, with 0 at each listed head, and pass it "
                "to the model as head_mask (None runs the whole model). Under torch.no_grad(), "
                "F.cross_entropy(logits.transpose(1, 2), targets, reduction=\"none\") gives a (B, L) loss per "
                "position, 0 where the target is -100; sum it over L and divide by each sequence's number of targets "
                "that are not -100. Return the loss with the heads off minus the loss without.")
def check_group_ablation(fn):
    """fn(model, tokens, targets, heads) -> (B,): the rise in each sequence's loss with the listed heads off.

    Tried on a small random 2-layer, 2-head model and 6 repeated sequences, with one head, two heads of different
    layers and a whole layer switched off; compared with the model run with the same head_mask and PyTorch's
    cross-entropy per position. lm_loss and ablation_losses refuse.
    """
    with _seeded(8):
        model = TinyTransformer(TinyTransformerConfig(vocab_size=16, max_len=16, d_model=16, n_layers=2, n_heads=2,
                                                      mlp=False)).eval()
    tokens, targets = repeated_sequence(_generator(9), batch_size=6, seq_len=16, vocab_size=16,
                                        min_pattern_len=3)
    base = _sequence_losses(model, tokens, targets)
    for heads in ([(0, 1)], [(0, 0), (1, 1)], [(1, 0), (1, 1)]):
        expected = _sequence_losses(model, tokens, targets, _head_mask(model, heads)) - base
        mistakes = [
            ("the whole model's loss minus the loss with the heads off: that is the rise with its sign flipped",
             lambda e=expected: -e),
            ("only the listed heads were kept on, and all the others switched off",
             lambda h=heads: _sequence_losses(model, tokens, targets, _head_mask(model, h, off=False)) - base),
            ("each sequence's loss was averaged over all L positions, those whose target is -100 included",
             lambda h=heads: (_sequence_losses(model, tokens, targets, _head_mask(model, h)) - base)
             * (targets != -100).sum(dim=1) / targets.shape[1]),
            ("the logits and the targets were shifted against each other: targets[b, i] is already the token that "
             "follows position i, the one logits[b, i] predicts",
             lambda h=heads: _sequence_losses(model, tokens, targets, _head_mask(model, h), shifted=True)
             - _sequence_losses(model, tokens, targets, shifted=True)),
        ]
        try:
            got = _call(fn, (model, tokens, targets, heads), "my_group_ablation",
                        refuse=[("attention_book.experiments.training.lm_loss", "which the exercise says not to call"),
                                ("attention_book.experiments.ablation.ablation_losses",
                                 "which the exercise says not to call")])
        except ValueError as error:
            if "head_mask must have shape" not in str(error):
                raise
            raise CheckFailed(f"{error}\nThe check's model has 2 layers of 2 heads, not the chapter's 2 x 4: "
                              "build head_mask from model.config.n_layers and model.config.n_heads") from None
        _compare("your rise in loss", f"a 2-layer, 2-head model and {len(tokens)} sequences, heads {heads} off",
                 expected, got, atol=1e-4, hint=_see_hint("my_group_ablation"), mistakes=mistakes)
    print("✓ your per-sequence rises in loss match for one head, two heads and a whole layer switched off.")
