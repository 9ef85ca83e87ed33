"""Checks for chapter 11's exercises: rotating pairs, reordering W_q's rows between the layouts, and the positions of
the tokens of a cached decode step."""
import torch

from ..rope import halves_to_pairs_rows, halves_order, pairs_to_halves_rows, rotate
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint, _size


@_exercise("rotate_pairs",
           task="given x (..., d_head) whose coordinates 2i and 2i + 1 form pair i, and angles (..., d_head / 2) "
                "in radians that broadcast with x's pairs, return a tensor of x's shape and dtype in which each "
                "pair, seen as a point in the plane, is turned counter-clockwise by its angle.",
           hint="Take a = x[..., 0::2] and b = x[..., 1::2] (the first and second coordinate of every pair). The "
                "turned pair is (a cos - b sin, a sin + b cos), with cos and sin of the angles. Put the two results "
                "back side by side: torch.stack((first, second), dim=-1).flatten(-2) interleaves them again.")
def check_rotate_pairs(fn):
    """fn(x (..., d_head), angles (..., d_head / 2)) -> x with pair (2i, 2i + 1) turned by angles[..., i].

    Tried on 4 random inputs (d_head from 2 to 16, one angle per pair and position, some of them per batch row);
    compared with attention_book.rope.rotate in the "pairs" layout.
    """
    gen = torch.Generator().manual_seed(21)
    inputs = []
    for x_shape, angle_shape in [((2,), (1,)), ((3, 4), (3, 2)), ((2, 1, 5, 8), (5, 4)), ((2, 3, 4, 16), (2, 1, 4, 8))]:
        inputs.append((torch.randn(x_shape, generator=gen), 6 * torch.rand(angle_shape, generator=gen) - 3))
    for x, angles in sorted(inputs, key=lambda xa: _size(*xa)):  # the smallest first
        cos, sin = angles.cos(), angles.sin()
        mistakes = [("each pair turns clockwise: the sine's sign is flipped", lambda: rotate(x, cos, -sin, "pairs")),
                    ("coordinates i and i + d_head/2 were paired (the halves layout); here pair i is 2i and 2i + 1",
                     lambda: rotate(x, cos, sin, "halves"))]
        _compare("your rotate_pairs", f"x {tuple(x.shape)}, angles {tuple(angles.shape)}",
                 rotate(x, cos, sin, "pairs"), _call(fn, (x, angles), "rotate_pairs"),
                 hint=_see_hint("rotate_pairs"), mistakes=mistakes)
    print("✓ your rotate_pairs turns every pair as the package's rotate does, on 4 inputs.")


@_exercise("to_halves_rows",
           task="given the weight (n_heads * d_head, d_in) of a query or key projection whose heads' outputs are in "
                "the pairs layout, and n_heads, return a weight of the same shape whose outputs are the same numbers "
                "with each head's coordinates in the halves layout: head by head, coordinate 2i moves to i and "
                "2i + 1 to i + d_head / 2.",
           hint="Output coordinate r of a linear layer is row r of its weight, so reorder rows. View the weight as "
                "(n_heads, d_head, d_in), index the middle dimension with halves_order(d_head) (the even rows 0, 2, "
                "4, ... then the odd rows 1, 3, 5, ...), and reshape back to (n_heads * d_head, d_in).")
def check_to_halves_rows(fn):
    """fn(weight (n_heads * d_head, d_in), n_heads) -> the rows reordered, head by head, from pairs to halves.

    Tried on 4 random weights (1 to 3 heads, d_head from 2 to 8, W_q and W_k shapes); compared with
    attention_book.rope.pairs_to_halves_rows.
    """
    gen = torch.Generator().manual_seed(22)
    inputs = [(torch.randn(n_heads * d_head, d_in, generator=gen), n_heads)
              for n_heads, d_head, d_in in [(1, 2, 3), (1, 6, 4), (2, 4, 5), (3, 8, 6)]]
    for weight, n_heads in sorted(inputs, key=lambda wn: _size(wn[0])):  # the smallest first
        rows = weight.shape[0]
        mistakes = [("the rows were reordered as one big head: each head's d_head rows must be reordered "
                     "separately", lambda: weight[halves_order(rows)]),
                    ("that is the way back, from halves to pairs", lambda: halves_to_pairs_rows(weight, n_heads))]
        _compare("your to_halves_rows", f"weight {tuple(weight.shape)}, n_heads={n_heads}",
                 pairs_to_halves_rows(weight, n_heads), _call(fn, (weight, n_heads), "to_halves_rows"),
                 hint=_see_hint("to_halves_rows"), mistakes=mistakes)
    print("✓ your to_halves_rows reorders each head's rows as pairs_to_halves_rows does, on 4 weights.")


@_exercise("next_positions",
           task="given cache_length, the number of tokens already in a layer's K/V cache, and n_new, the number "
                "of tokens of this step, return the positions (an int64 tensor of shape (n_new,)) that RoPE must "
                "rotate this step's queries and keys by, counting the first token of the sequence as position 0.",
           hint="The cache holds positions 0 .. cache_length - 1, so this step's tokens come right after them: "
                "torch.arange(cache_length, cache_length + n_new). A prefill is the same with cache_length = 0.")
def check_next_positions(fn):
    """fn(cache_length, n_new) -> the positions of this step's tokens, shape (n_new,).

    Tried on 5 steps: a prefill of 1 and of 6 tokens, single decode steps after 1 and 6 tokens, a chunk of 3 after
    100; compared with the positions that follow the cached ones.
    """
    for cache_length, n_new in [(0, 1), (1, 1), (0, 6), (6, 1), (100, 3)]:  # the smallest first
        expected = torch.arange(cache_length, cache_length + n_new)
        got = _call(fn, (cache_length, n_new), "next_positions")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and not got.is_floating_point() \
                and torch.equal(got, expected):
            continue
        likely = ""
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if cache_length and torch.equal(got.long(), torch.arange(n_new)):
                likely = ("\nLikely mistake: the step starts again at position 0: each new token would be rotated "
                          "as if it were the first, and its keys would not match the cached ones")
            elif torch.equal(got.long(), expected + 1):
                likely = "\nLikely mistake: one too far: the first token is at position 0, so the next is at the length"
            elif got.is_floating_point() and torch.equal(got.long(), expected):
                likely = "\nLikely mistake: the positions are floats; they must be an integer tensor (int64)"
        raise CheckFailed(f"cache_length={cache_length}, n_new={n_new}: expected positions {expected.tolist()} "
                          f"(int64), got {got!r}{likely}")
    print("✓ next_positions gives the right positions for prefills and decode steps, on 5 steps.")
