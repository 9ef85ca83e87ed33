"""Checks for chapter 1's exercises: softmax, causal mask, attention."""
import math

import torch

from ..masks import causal_mask
from ..sdpa import scaled_dot_product_attention
from ._compare import CheckFailed, _call, _compare, _describe, _exercise, _see_hint, _size


@_exercise("stable_softmax",
           task="return the softmax of x (..., S) over its last dimension: a tensor of x's shape whose rows are "
                "positive and sum to 1, finite even for inputs like ±1000.",
           hint="softmax(x) does not change if you add the same number to every entry of a row (the factor cancels "
                "between numerator and denominator). Subtract each row's maximum (x.amax(dim=-1, keepdim=True)) "
                "first: every exponent is then ≤ 0, so exp cannot overflow, and the largest term is exp(0) = 1, so "
                "the sum cannot underflow to 0. Then divide exp by its sum over the last dimension (keepdim=True).")
def check_stable_softmax(fn):
    """fn(x) -> softmax over the last dimension, stable for large inputs. x: (..., S).

    Tried on 5 random inputs of 2 or 3 dimensions, with values up to ±1000 and rows near -1000; compared with
    torch.softmax.
    """
    gen = torch.Generator().manual_seed(0)
    cases = [((3, 5), 1.0, 0.0), ((2, 4, 6), 10.0, 0.0), ((1, 7), 100.0, 0.0), ((4, 3), 1000.0, 0.0),
             ((2, 5), 10.0, -1000.0)]  # (shape, largest |x - offset|, offset)
    inputs = []
    for shape, spread, offset in cases:
        x = torch.randn(shape, generator=gen)
        inputs.append(x / x.abs().max() * spread + offset)
    for x in sorted(inputs, key=_size):  # the smallest first: a failure is shown on the smallest input
        tried = f"x of shape {tuple(x.shape)} with values in [{x.min().item():.0f}, {x.max().item():.0f}]"
        naive = ("exp overflows (to inf) or underflows (to 0) at these values: your result is the plain "
                 "exp(x) / sum(exp(x)), which gives inf / inf or 0 / 0 = NaN here",
                 lambda: x.exp() / x.exp().sum(dim=-1, keepdim=True))
        _compare("stable_softmax", tried, torch.softmax(x, dim=-1), _call(fn, (x,), "stable_softmax"),
                 hint=_see_hint("stable_softmax"), mistakes=[naive])
    print(f"✓ stable_softmax matches torch.softmax on {len(cases)} inputs, "
          "including values up to ±1000 and rows near -1000.")


def _top_left(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril()


@_exercise("my_causal_mask",
           task="return an (L, S) boolean tensor, True where query i may attend to key j: the L queries are the last "
                "L of the S positions, and each may attend to its own position and every earlier one.",
           hint="Query i sits at position i + (S - L) of the sequence. Compare positions: torch.arange(S)[None, :] "
                "(the keys, a row) <= torch.arange(L)[:, None] + (S - L) (the queries, a column) broadcasts to "
                "(L, S). torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L) gives the same.")
def check_causal_mask(fn):
    """fn(L, S) -> (L, S) boolean mask, True = may attend, aligned bottom-right.

    Tried on 5 sizes (L, S), square and not; compared with attention_book.causal_mask.
    """
    sizes = [(1, 1), (4, 4), (1, 6), (3, 5), (2, 7)]
    for L, S in sorted(sizes, key=lambda size: size[0] * size[1]):  # the smallest first
        inverted = ("the mask is inverted: True must mean that the query may attend to the key, False that it "
                    "may not (nn.MultiheadAttention's attn_mask uses the opposite convention)",
                    lambda: ~causal_mask(L, S))
        top_left = ("the mask is aligned top-left: with S > L keys, the L queries are the last L of the S "
                    "positions, so the last query must see every key (bottom-right alignment)",
                    lambda: _top_left(L, S))
        _compare("your causal mask", f"L={L}, S={S}", causal_mask(L, S), _call(fn, (L, S), "my_causal_mask"),
                 mistakes=[inverted, top_left])
    print(f"✓ your causal mask matches attention_book.causal_mask for (L, S) in {sizes}.")


@_exercise("my_attention",
           task="given q (B, L, d), k (B, S, d), v (B, S, d_v) and an optional boolean mask (True = may attend), "
                "return (out, weights): weights (B, L, S), the scaled dot-product attention weights, each row "
                "summing to 1 and 0 on every key the mask forbids; out (B, L, d_v), the weighted average of v.",
           hint="scores = q @ k.transpose(-2, -1) / math.sqrt(d), shape (B, L, S). Where the mask is False, set the "
                "score to -inf: masked_fill fills where its own argument is True, so pass it ~mask. Then "
                "weights = torch.softmax(scores, dim=-1) and out = weights @ v.")
def check_attention(fn):
    """fn(q, k, v, mask=None) -> (out, weights), like attention_book.scaled_dot_product_attention.

    Tried on 3 random q, k, v: without a mask, with a causal mask and with a random mask; weights and output
    compared with attention_book.scaled_dot_product_attention.
    """
    gen = torch.Generator().manual_seed(1)
    # (L, S, d, d_v, mask), the smallest first
    cases = [(3, 5, 4, 4, None), (4, 4, 8, 3, "causal"), (2, 6, 16, 5, "random")]
    for L, S, d, d_v, kind in cases:
        q, k, v = (torch.randn(2, n, m, generator=gen) for n, m in ((L, d), (S, d), (S, d_v)))
        mask = None
        if kind == "causal":
            mask = causal_mask(L, S)
        elif kind == "random":
            mask = torch.rand(2, L, S, generator=gen) > 0.4
            mask[..., 0] = True  # every query may attend to at least one key
        tried = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, mask {kind}"
        result = _call(fn, (q, k, v, mask), "my_attention")
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"your attention on {tried}: expected a pair (out, weights), got {_describe(result)}")
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        scores = q @ k.transpose(-2, -1)
        mistakes = [("the scores are not scaled by 1/√d (d = q's last dimension)",
                     lambda: torch.softmax(scores if mask is None else scores.masked_fill(~mask, float("-inf")), -1))]
        if mask is not None:
            mistakes.append(("the mask is used the wrong way round: True means the query may attend to the key, so "
                             "the keys to leave out are those where the mask is False",
                             lambda: torch.softmax((scores / math.sqrt(d)).masked_fill(mask, float("-inf")), -1)))
        mistakes.append(("the softmax runs over the queries (dim=-2): each query's weights must sum to 1 over "
                         "the keys, the last dimension",
                         lambda: torch.softmax((scores / math.sqrt(d)).masked_fill(
                             ~mask, float("-inf")) if mask is not None else scores / math.sqrt(d), -2)))
        _compare("your attention weights", tried, weights, result[1], _see_hint("my_attention"), mistakes=mistakes)
        _compare("your attention output", tried, out, result[0], _see_hint("my_attention"))
    print(f"✓ your attention matches attention_book.scaled_dot_product_attention on {len(cases)} inputs, "
          "with and without masks.")
