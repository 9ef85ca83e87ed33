"""Checks for chapter 4's exercises: the head scores and head ablation."""
import torch

from ..experiments.ablation import ablation_losses
from ..experiments.head_scores import induction_score, previous_token_score
from ..masks import causal_mask
from ..experiments.tasks import repeated_sequence
from ..tiny_transformer import TinyTransformer, TinyTransformerConfig
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint


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
    gen = torch.Generator().manual_seed(6)
    perfect = torch.zeros(1, 1, 5, 5)
    perfect[0, 0, 0, 0] = 1.0
    perfect[0, 0, torch.arange(1, 5), torch.arange(4)] = 1.0
    cases = [("a perfect previous-token head", perfect)] + [
        (f"random causal weights of shape {(B, h, L, L)}", _causal_weights(gen, B, h, L, s))
        for B, h, L, s in [(2, 3, 6, 1.0), (4, 2, 9, 3.0)]]
    for tried, weights in cases:  # the smallest first
        _compare("your previous-token score", tried, previous_token_score(weights),
                 _call(fn, (weights,), "my_previous_token_score"),
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

    Tried on 2 random batches of repeated sequences with random causal weights; compared with
    attention_book.experiments.head_scores.induction_score.
    """
    gen = torch.Generator().manual_seed(7)
    for B, h, L, s in [(2, 2, 12, 1.0), (3, 4, 16, 3.0)]:  # the smallest first
        tokens, _ = repeated_sequence(gen, batch_size=B, seq_len=L, vocab_size=16, min_pattern_len=3)
        weights = _causal_weights(gen, B, h, L, s)
        per_sequence = [("a mean per sequence, then a mean over the sequences: the score is one mean over all the "
                         "counted queries of the batch together (sequences count different numbers of queries)",
                         lambda: torch.stack([induction_score(weights[b:b + 1], tokens[b:b + 1])
                                              for b in range(B)]).mean(dim=0))]
        _compare("your induction score", f"weights {(B, h, L, L)} and repeated tokens {(B, L)}",
                 induction_score(weights, tokens), _call(fn, (weights, tokens), "my_induction_score"),
                 hint="only queries whose token appeared before count; the target key is one after that appearance",
                 mistakes=per_sequence)
    print("✓ your induction score matches the package's on 2 batches of repeated sequences.")


@_exercise("my_ablation",
           task="given a TinyTransformer model, tokens and targets (B, L), a layer and a head, return a float: how "
                "much the model's mean cross-entropy loss on the targets (those of -100 not counting) rises when that "
                "one head is switched off.",
           hint="The model's forward takes head_mask, a (n_layers, n_heads) tensor of ones; a 0 at [layer, head] "
                "switches that head off. Compute the loss with that mask and with none (F.cross_entropy on the "
                "logits flattened to (B * L, vocab_size) and the targets to (B * L,), under torch.no_grad()), and "
                "return the difference as a Python float (.item()).")
def check_ablation(fn):
    """fn(model, tokens, targets, layer, head) -> the rise in loss when that one head is switched off.

    Tried on each of the 4 heads of a small random 2-layer model; compared with
    attention_book.experiments.ablation.ablation_losses.
    """
    with torch.random.fork_rng():
        torch.manual_seed(8)
        model = TinyTransformer(TinyTransformerConfig(vocab_size=16, max_len=16, d_model=16, n_layers=2, n_heads=2,
                                                      mlp=False)).eval()
    tokens, targets = repeated_sequence(torch.Generator().manual_seed(9), batch_size=16, seq_len=16, vocab_size=16,
                                        min_pattern_len=3)
    expected = ablation_losses(model, tokens, targets)
    for layer in range(2):
        for head in range(2):
            try:
                got = _call(fn, (model, tokens, targets, layer, head), "my_ablation")
            except ValueError as error:
                if "head_mask must have shape" not in str(error):
                    raise
                raise CheckFailed(f"{error}\nThe check's model has 2 layers of 2 heads, not the chapter's 2 x 4: "
                                  "build head_mask from model.config.n_layers and model.config.n_heads") from None
            got = got.item() if isinstance(got, torch.Tensor) else got
            if not isinstance(got, float) or abs(got - expected[layer, head].item()) > 1e-4:
                raise CheckFailed(f"your ablation of layer {layer}, head {head} on a 2-layer, 2-head model: expected "
                                  f"a loss rise of {expected[layer, head].item():.5f}, got {got!r}\nHint: pass "
                                  "head_mask to the model, and leave out targets of -100 as F.cross_entropy does")
    print("✓ your ablation matches attention_book.experiments.ablation for all 4 heads of a small model.")
