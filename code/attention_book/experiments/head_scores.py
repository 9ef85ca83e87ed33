"""Scores that say how much a head's attention pattern looks like a known kind of head.

Both scores take attention weights of shape (B, h, L, L), one layer's heads, or (n_layers, B, h, L, L), every
layer's (as ``TinyTransformer.attention_weights`` returns), and give one number per head: shape (h,) or
(n_layers, h). A score is the average attention weight, over the batch and the positions it is defined for, that a
query puts on the key the kind of head would pick, so it lies in [0, 1] and a perfect head scores 1.
"""
import torch

from ..validation import require_rank


def previous_token_score(weights):
    """Average weight from each position i >= 1 to position i - 1.

    Args:
        weights: attention weights, shape (B, h, L, L) or (n_layers, B, h, L, L), with L >= 2.

    Returns:
        scores: shape (h,) or (n_layers, h). Causal attention spread uniformly over positions 0 .. i scores
        the mean of 1 / (i + 1) over i = 1 .. L - 1.
    """
    _check_weights(weights)
    if weights.shape[-1] < 2:
        raise ValueError(f"weights need L >= 2 for a position to have a previous one, got L={weights.shape[-1]}")
    on_previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (..., B, h, L - 1): weights[..., i, i - 1]
    return on_previous.mean(dim=-1).mean(dim=-2)  # mean over positions, then over the batch


def induction_score(weights, tokens):
    """Average weight from a token to the positions right after its earlier occurrences.

    For query i, the induction targets are the keys j + 1 for every j < i with tokens[j] == tokens[i]: where an
    induction head looks for the token that came next last time, [A][B] ... [A] -> [B]. The score of a query is the
    total weight on its targets (with one earlier occurrence, the weight on the one position after it). Queries
    whose token has not occurred before are left out of the average.

    Args:
        weights: attention weights, shape (B, h, L, L) or (n_layers, B, h, L, L).
        tokens: the token ids the weights were computed for, shape (B, L).

    Returns:
        scores: shape (h,) or (n_layers, h).
    """
    _check_weights(weights)
    require_rank("tokens", tokens, 2, "B, L")
    B, L = weights.shape[-4], weights.shape[-1]
    if tuple(tokens.shape) != (B, L):
        raise ValueError(f"tokens must have shape (B, L) = {(B, L)} to match weights {tuple(weights.shape)}, "
                         f"got {tuple(tokens.shape)}")
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, L, L): same[b, i, j] = tokens j and i are equal
    earlier = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril(diagonal=-1)  # j < i
    occurrence = same & earlier  # (B, L, L): j is an earlier occurrence of token i
    target = torch.zeros_like(occurrence)
    target[:, :, 1:] = occurrence[:, :, :-1]  # key j + 1 is a target when j is an earlier occurrence
    if not target.any():
        raise ValueError("induction_score needs a token that occurs twice in tokens, but every token is unique")
    return weight_on(weights, target)  # queries without a target (a first occurrence) are left out


def _check_weights(weights):
    """Self-attention weights: (B, h, L, L) or (n_layers, B, h, L, L)."""
    if weights.dim() not in (4, 5):
        raise ValueError(f"weights must have shape (B, h, L, L) or (n_layers, B, h, L, L), "
                         f"got {weights.dim()} dimensions: {tuple(weights.shape)}")
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be self-attention weights with L queries and L keys, "
                         f"got shape {tuple(weights.shape)}")


def weight_on(weights, targets, queries=None):
    """Average total weight that a query puts on its target keys.

    Args:
        weights: attention weights, shape (B, h, L, S) or (n_layers, B, h, L, S).
        targets: boolean, True = a key the score looks for. Shape (B, L, S), each query its own keys, or (B, S),
            the same keys for every query (the position of [CLS], say).
        queries: boolean (B, L), the queries to average over (the real tokens, say). Default: every query.
            Queries with no target are always left out.

    Returns:
        scores: shape (h,) or (n_layers, h), in [0, 1].
    """
    _check_batch_weights(weights)
    B, L, S = weights.shape[-4], weights.shape[-2], weights.shape[-1]
    if targets.dim() == 2 and tuple(targets.shape) == (B, S):
        targets = targets[:, None, :].expand(B, L, S)
    if tuple(targets.shape) != (B, L, S):
        raise ValueError(f"targets must have shape (B, L, S) = {(B, L, S)} or (B, S), got {tuple(targets.shape)}")
    counted = targets.any(dim=-1)  # (B, L)
    if queries is not None:
        if tuple(queries.shape) != (B, L):
            raise ValueError(f"queries must have shape (B, L) = {(B, L)}, got {tuple(queries.shape)}")
        counted = counted & queries
    if not counted.any():
        raise ValueError("no query has a target key, so the score is undefined")
    on_targets = (weights * targets[:, None]).sum(dim=-1)  # (..., B, h, L)
    return (on_targets * counted[:, None]).sum(dim=(-3, -1)) / counted.sum()


def offset_targets(is_real, offset):
    """Targets for ``weight_on``: query i looks for key i + offset, when both are real tokens.

    is_real: boolean (B, L), True = a real token. offset: -1 for the previous token, +1 for the next one.
    Returns a boolean (B, L, L).
    """
    require_rank("is_real", is_real, 2, "B, L")
    position = torch.arange(is_real.shape[1], device=is_real.device)
    shifted = position[None, :] == position[:, None] + offset  # (L, L): key j = query i + offset
    return shifted & is_real[:, :, None] & is_real[:, None, :]


def attention_entropy(weights, queries=None):
    """Average entropy, in nats, of each query's weights: 0 for a head that looks at one key, log S for a uniform one.

    weights: (B, h, L, S) or (n_layers, B, h, L, S); queries: boolean (B, L), which queries to average over
    (default: all). Returns shape (h,) or (n_layers, h).
    """
    _check_batch_weights(weights)
    B, L = weights.shape[-4], weights.shape[-2]
    queries = torch.ones(B, L, dtype=torch.bool, device=weights.device) if queries is None else queries
    if tuple(queries.shape) != (B, L):
        raise ValueError(f"queries must have shape (B, L) = {(B, L)}, got {tuple(queries.shape)}")
    per_query = -(weights * weights.clamp(min=1e-12).log()).sum(dim=-1)  # (..., B, h, L); 0 log 0 counts as 0
    return (per_query * queries[:, None]).sum(dim=(-3, -1)) / queries.sum()


def _check_batch_weights(weights):
    """Any attention weights: (B, h, L, S) or (n_layers, B, h, L, S)."""
    if weights.dim() not in (4, 5):
        raise ValueError(f"weights must have shape (B, h, L, S) or (n_layers, B, h, L, S), "
                         f"got {weights.dim()} dimensions: {tuple(weights.shape)}")
