"""Checks for chapter 11's exercises: the positions of a cached decode step's tokens, RoPE for a left-padded batch
after a cache, and reordering a fused QKV projection's rows from the halves to the pairs layout."""
import torch

from ..rope import apply_rope, halves_to_pairs_rows, pairs_to_halves_rows
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint

ROPE_ITSELF = ["attention_book.rope.Rope.__call__", "attention_book.rope.Rope", "attention_book.rope.apply_rope",
               "attention_book.rope.rotate", "attention_book.rope.rope_cos_sin"]


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
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and got.dtype == torch.int64 \
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
            elif torch.equal(got.long(), expected):
                likely = f"\nLikely mistake: the positions are {got.dtype}, not int64 (torch.arange's integer dtype)"
        if not isinstance(got, torch.Tensor):
            likely = f"\nLikely mistake: a {type(got).__name__}, not a tensor"
        raise CheckFailed(f"cache_length={cache_length}, n_new={n_new}: expected positions {expected.tolist()} "
                          f"(an int64 tensor), got {got!r}{likely}")
    print("✓ next_positions gives the right positions for prefills and decode steps, on 5 steps.")


def _padded_positions(mask, offset):
    """Each real token's position, (B, S): offset plus the real tokens before it in its row (pads: 0)."""
    return torch.where(mask, offset[:, None] + mask.long().cumsum(-1) - 1, 0)


@_exercise("rope_left_padded",
           task="given x (B, heads, S, d_head), the queries or keys of a step of S tokens for a batch of B sequences "
                "in the halves layout (coordinates i and i + d_head / 2 form pair i), mask (B, S), True where a "
                "token is real and False where it is left padding, offset (B,) int64, the real tokens each "
                "sequence already has in its cache, and base, return x rotated by RoPE, shape and dtype of x: each "
                "sequence's real tokens sit at positions offset, offset + 1, ... in order, padding not counted; a "
                "padding token's output may be anything. Do not call the package's Rope, apply_rope, rotate or "
                "rope_cos_sin, nor the copies of them that the chapter's listings define.",
           hint="A real token's position is offset[b] plus the number of real tokens before it in its row: "
                "offset[:, None] + mask.long().cumsum(-1) - 1. The angles are positions[:, None, :, None] times "
                "theta = base ** (-2i / d_head), i = 0 .. d_head/2 - 1 (rope_frequencies(d_head, base)), shape "
                "(B, 1, S, d_head / 2): the same for every head. With a = x[..., :d_head // 2] and "
                "b = x[..., d_head // 2:], the result is torch.cat((a cos - b sin, a sin + b cos), dim=-1).",
           idea="Only the positions change from section 2's RoPE (in section 3's halves layout): a real token's "
                "position counts the cached tokens and the real tokens before it in its row, never the padding. Once "
                "every token has its position, the rotation is the usual one, pair by pair.")
def check_rope_left_padded(fn):
    """fn(x (B, heads, S, d_head), mask (B, S), offset (B,), base) -> x rotated at each real token's position.

    Tried on 4 seeded batches, smallest first: a one-sequence prefill with two pads, a decode step after caches of
    different lengths, up to 3,000 (in bfloat16: the result keeps x's dtype, its angles computed in float32), a
    prefill whose rows have different padding, and a padded chunk after a cache (base 100,000); compared with
    attention_book.rope.apply_rope given the positions (B, S), at the real tokens only. Refuses answers that call
    Rope, apply_rope, rotate or rope_cos_sin.
    """
    gen = _generator(23)
    cases = [((1, 1, 4, 2), [[0, 0, 1, 1]], [0], 10_000.0),
             ((3, 2, 1, 8), [[1], [1], [1]], [2, 1_000, 3_000], 10_000.0),
             ((2, 2, 4, 4), [[0, 0, 1, 1], [1, 1, 1, 1]], [0, 0], 10_000.0),
             ((2, 3, 5, 16), [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], [3, 0], 100_000.0)]
    for shape, mask, offset, base in cases:  # the smallest first
        x = torch.randn(shape, generator=gen)
        if shape[0] == 3:  # the decode step in bfloat16
            x = x.bfloat16()
        mask, offset = torch.tensor(mask, dtype=torch.bool), torch.tensor(offset)
        real = mask[:, None, :, None]  # (B, 1, S, 1): where the result is compared
        positions = _padded_positions(mask, offset)

        def rotated(at, layout="halves"):
            return torch.where(real, apply_rope(x, at, base, layout), 0.0).to(x.dtype)

        expected = rotated(positions)
        got = _call(fn, (x.clone(), mask.clone(), offset.clone(), base), "rope_left_padded", refuse=ROPE_ITSELF)
        if isinstance(got, torch.Tensor) and got.shape == x.shape:
            got = torch.where(real, got, torch.zeros((), dtype=got.dtype))  # a padding token's output may be anything
        counted = offset[:, None] + torch.arange(shape[2])  # (B, S): every token counted, padding too
        mistakes = [
            ("the padding was counted: a real token's position is the number of real tokens before it (plus the "
             "cached ones), whatever the padding of its row", lambda: rotated(counted)),
            ("the cached tokens were not counted: the step's first real token sits at position offset, not 0",
             lambda: rotated(_padded_positions(mask, 0 * offset))),
            ("one too far: the first real token after the cached ones sits at position offset, not offset + 1",
             lambda: rotated(positions + 1)),
            ("coordinates 2i and 2i + 1 were paired (the pairs layout); here pair i is coordinates i and "
             "i + d_head / 2", lambda: rotated(positions, "pairs")),
            ("each pair turns clockwise: the sine's sign is flipped", lambda: rotated(-positions)),
        ]
        if x.dtype == torch.bfloat16:  # angles of thousands of radians, rounded to bfloat16's 8 bits
            theta = 10_000.0 ** (-torch.arange(0, shape[3], 2) / shape[3])
            angles = (positions.to(x.dtype)[:, None, :, None] * theta.to(x.dtype))
            a, b = x[..., :shape[3] // 2], x[..., shape[3] // 2:]
            in_x_dtype = torch.cat((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), -1)
            mistakes.append(("the angles were computed in bfloat16: a position of 1,000 times theta, rounded to "
                             "bfloat16's 8 bits, is off by several radians",
                             lambda: torch.where(real, in_x_dtype, torch.zeros((), dtype=x.dtype))))
        tried = f"x {shape} {x.dtype}, mask {mask.int().tolist()}, offset {offset.tolist()}, base {base:,.0f}"
        _compare("your rope_left_padded", tried, expected, got, hint=_see_hint("rope_left_padded"),
                 mistakes=mistakes, atol=5e-2 if x.dtype == torch.bfloat16 else 1e-5)  # bfloat16: 2 steps at 3
    print("✓ your rope_left_padded rotates every real token at its position, on 4 batches.")


@_exercise("qkv_to_pairs",
           task="given the fused weight ((n_heads + 2 * n_kv_heads) * d_head, d_in) of a layer's W_q, W_k and W_v "
                "stacked in that order, as nn.Linear stores them (so d_head = weight.shape[0] / (n_heads + 2 * "
                "n_kv_heads)), laid out for the halves layout, and n_heads and n_kv_heads, return the weight of the "
                "same shape whose outputs are in the pairs layout: in every query and key head, the output "
                "coordinates i and i + d_head / 2 become 2i and 2i + 1; the values' rows stay as they are. Do not "
                "call halves_to_pairs_rows, pairs_to_halves_rows or halves_order.",
           hint="Split the rows with weight.split([n_heads * d_head, n_kv_heads * d_head, n_kv_heads * d_head]). "
                "For W_q (and W_k), view it as (heads, 2, d_head / 2, d_in): [:, 0] is the first half of each head, "
                "[:, 1] the second. Swapping the two middle dimensions, .transpose(1, 2), and reshaping back puts "
                "row i of the first half next to row i of the second. Concatenate the three parts again.")
def check_qkv_to_pairs(fn):
    """fn(weight ((h + 2g) * d_head, d_in), n_heads, n_kv_heads) -> the Q and K rows in the pairs layout, V as is.

    Tried on 4 seeded weights, from 1 query head of size 2 to 6 query heads and 2 K/V heads of size 8;
    compared with attention_book.rope.halves_to_pairs_rows applied to the query and key parts. Refuses answers that
    call halves_to_pairs_rows, pairs_to_halves_rows or halves_order.
    """
    gen = _generator(24)
    for h, g, d_head, d_in in [(1, 1, 2, 1), (2, 1, 4, 3), (4, 2, 6, 5), (6, 2, 8, 4)]:  # the smallest first
        weight = torch.randn((h + 2 * g) * d_head, d_in, generator=gen)
        q, k, v = weight.split([h * d_head, g * d_head, g * d_head])
        expected = torch.cat((halves_to_pairs_rows(q, h), halves_to_pairs_rows(k, g), v))
        refuse = [(f"attention_book.rope.{name}", "which the exercise says not to call")
                  for name in ("halves_to_pairs_rows", "pairs_to_halves_rows", "halves_order")]
        got = _call(fn, (weight.clone(), h, g), "qkv_to_pairs", refuse=refuse)
        mistakes = [
            ("the values' rows were reordered too: RoPE turns only queries and keys, so W_v stays as it is",
             lambda: torch.cat((halves_to_pairs_rows(q, h), halves_to_pairs_rows(k, g), halves_to_pairs_rows(v, g)))),
            ("that is the other direction, from the pairs layout to the halves layout",
             lambda: torch.cat((pairs_to_halves_rows(q, h), pairs_to_halves_rows(k, g), v))),
            ("the key rows were left as they are: RoPE turns the keys too, so W_k's heads are reordered as W_q's are",
             lambda: torch.cat((halves_to_pairs_rows(q, h), k, v))),
            ("W_k's rows were cut into n_heads heads; it holds n_kv_heads heads of d_head rows",
             lambda: torch.cat((halves_to_pairs_rows(q, h), halves_to_pairs_rows(k, h), v))
             if k.shape[0] % (2 * h) == 0 else expected),  # where n_heads heads cannot be cut, no such mistake
            ("the query rows (or the key rows) were reordered as one big head: each head's d_head rows are "
             "reordered on their own",
             lambda: torch.cat((halves_to_pairs_rows(q, 1), halves_to_pairs_rows(k, 1), v))),
        ]
        _compare("your qkv_to_pairs", f"weight {tuple(weight.shape)}, n_heads={h}, n_kv_heads={g}", expected, got,
                 hint=_see_hint("qkv_to_pairs"), mistakes=mistakes)
    print("✓ your qkv_to_pairs puts every query and key head in the pairs layout, on 4 fused weights.")
