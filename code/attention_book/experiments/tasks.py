"""Synthetic tasks whose solutions need a particular kind of attention head.

Each task is a function ``task(generator, batch_size, ...) -> (tokens, targets)``, both of shape (B, L). The logits
at position i are trained to predict ``targets[:, i]``; positions with nothing to predict hold ``IGNORE_INDEX``
(-100), which ``F.cross_entropy`` skips by default. All randomness comes from the generator, so a task is
deterministic for a given seed, and ``functools.partial(task, batch_size=..., ...)`` is a ``make_batch`` for
``training.train``.
"""
import torch

from ..validation import require_positive

IGNORE_INDEX = -100  # the default ignore_index of F.cross_entropy


def previous_token(generator, batch_size=64, seq_len=16, vocab_size=16):
    """Random tokens; the target at position i is the token at position i - 1 (position 0 has none).

    One head that attends from each position to the one before it (a previous-token head) solves this in a single
    layer. The same kind of head is the first half of an induction circuit (see ``repeated_sequence``).

    Returns:
        tokens: shape (B, L), uniform over 0 .. vocab_size - 1.
        targets: shape (B, L); targets[:, i] = tokens[:, i - 1], and IGNORE_INDEX at i = 0.
    """
    require_positive(batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size)
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)  # (B, L)
    targets = torch.full_like(tokens, IGNORE_INDEX)
    targets[:, 1:] = tokens[:, :-1]
    return tokens, targets


def repeated_sequence(generator, batch_size=64, seq_len=24, vocab_size=32, min_pattern_len=4, max_pattern_len=None):
    """Random filler, then a pattern of n distinct tokens, then the same pattern again, ending at position L - 1.

    Only the second copy can be predicted: at a token of the second copy, the next token is the one that followed
    the same token in the first copy, [A][B] ... [A] -> [B]. Doing that by content is what an induction head does
    (Olsson et al. 2022); with two layers it needs a previous-token head in the first layer to mark each position
    with the token before it. The pattern length n is drawn per row from min_pattern_len .. max_pattern_len, so the
    distance between the copies varies and attending to a fixed position does not solve the task. The filler uses
    only tokens that are not in the row's pattern, so each token of the second copy occurs exactly once before.

    Returns:
        tokens: shape (B, L).
        targets: shape (B, L); the next token at positions of the second copy except its last one (whose next
            token does not exist), IGNORE_INDEX everywhere else.
    """
    max_pattern_len = seq_len // 2 if max_pattern_len is None else max_pattern_len
    require_positive(batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size,
                     min_pattern_len=min_pattern_len, max_pattern_len=max_pattern_len)
    if min_pattern_len < 2:
        raise ValueError(f"min_pattern_len={min_pattern_len} must be at least 2: a pattern of one token "
                         "leaves nothing to predict")
    if min_pattern_len > max_pattern_len:
        raise ValueError(f"min_pattern_len={min_pattern_len} must be <= max_pattern_len={max_pattern_len}")
    if 2 * max_pattern_len > seq_len:
        raise ValueError(f"max_pattern_len={max_pattern_len} must be <= seq_len // 2 = {seq_len // 2}: "
                         "two copies of the pattern must fit in the sequence")
    if vocab_size <= max_pattern_len:
        raise ValueError(f"vocab_size={vocab_size} must be > max_pattern_len={max_pattern_len}: the pattern's "
                         "tokens are distinct and the filler needs a token outside them")
    B, L, V = batch_size, seq_len, vocab_size
    n = torch.randint(min_pattern_len, max_pattern_len + 1, (B, 1), generator=generator)  # (B, 1)
    vocabulary = torch.rand(B, V, generator=generator).argsort(dim=1)  # (B, V): each row's own shuffled vocabulary
    # Row b's pattern is vocabulary[b, :n], its filler draws from vocabulary[b, n:].
    offset = torch.arange(L) - (L - 2 * n)  # (B, L): position within the two copies, negative in the filler
    filler = n + (torch.rand(B, L, generator=generator) * (V - n)).long()  # (B, L): in n .. V - 1
    tokens = vocabulary.gather(1, torch.where(offset >= 0, offset % n, filler))  # (B, L)
    targets = torch.full_like(tokens, IGNORE_INDEX)
    in_second_copy = offset[:, :-1] >= n  # (B, L - 1)
    targets[:, :-1] = torch.where(in_second_copy, tokens[:, 1:], IGNORE_INDEX)
    return tokens, targets
