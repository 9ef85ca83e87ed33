"""Checks for chapter 1's exercises: softmax, causal mask, attention with both kinds of mask."""
import math

import torch

from ..masks import causal_mask, real_key_mask
from ..sdpa import scaled_dot_product_attention
from ._compare import CheckFailed, _call, _compare, _describe, _exercise, _generator, _see_hint, _size


SOFTMAXES = ["torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax", "torch.special.softmax",
             "torch.log_softmax", "torch.Tensor.log_softmax", "torch.nn.functional.log_softmax",
             "torch.special.log_softmax", "torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp"]


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
    torch.softmax. Calling a softmax, log-softmax or logsumexp of torch's fails.
    """
    gen = _generator(0)
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
        _compare("stable_softmax", tried, torch.softmax(x, dim=-1), _call(fn, (x,), "stable_softmax", refuse=[
                     (name, "which the exercise says not to call") for name in SOFTMAXES]),
                 hint=_see_hint("stable_softmax"), mistakes=[naive])
    print(f"✓ stable_softmax matches torch.softmax on {len(cases)} inputs, "
          "including values up to ±1000 and rows near -1000.")


def _top_left(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril()


TRIANGLES = ["attention_book.masks.causal_mask", "torch.tril", "torch.Tensor.tril", "torch.triu",
             "torch.Tensor.triu"]


@_exercise("my_causal_mask",
           task="return an (L, S) boolean tensor, True where query i may attend to key j: the L queries are the last "
                "L of the S positions, and each may attend to its own position and every earlier one.",
           hint="Query i sits at position i + (S - L) of the sequence. Compare positions: torch.arange(S)[None, :] "
                "(the keys, a row) <= torch.arange(L)[:, None] + (S - L) (the queries, a column) broadcasts to "
                "(L, S).")
def check_causal_mask(fn):
    """fn(L, S) -> (L, S) boolean mask, True = may attend, aligned bottom-right.

    Tried on 5 sizes (L, S), square and not; compared with attention_book.causal_mask. Calling causal_mask, tril or
    triu fails.
    """
    sizes = [(1, 1), (4, 4), (1, 6), (3, 5), (2, 7)]
    for L, S in sorted(sizes, key=lambda size: size[0] * size[1]):  # the smallest first
        own = ("the mask hides each query's own position from it; the key at a query's position is one it may see",
               lambda: causal_mask(L, S) & ~(torch.arange(S)[None, :] == torch.arange(L)[:, None] + S - L))
        inverted = ("the mask is inverted: True must mean that the query may attend to the key, False that it "
                    "may not (nn.MultiheadAttention's attn_mask uses the opposite convention)",
                    lambda: ~causal_mask(L, S))
        top_left = ("the mask is aligned top-left: with S > L keys, the L queries are the last L of the S "
                    "positions, so the last query must see every key (bottom-right alignment)",
                    lambda: _top_left(L, S))
        expected = causal_mask(L, S)  # before the answer runs: causal_mask refuses then
        _compare("your causal mask", f"L={L}, S={S}", expected, _call(fn, (L, S), "my_causal_mask", refuse=[
                     (name, "which the exercise says not to call") for name in TRIANGLES]),
                 mistakes=[own, inverted, top_left])
    print(f"✓ your causal mask matches attention_book.causal_mask for (L, S) in {sizes}.")


REFUSED_ATTENTION = ["attention_book.sdpa.scaled_dot_product_attention",
                     ("torch.nn.functional.scaled_dot_product_attention", "PyTorch's own solution of this step")]


def _masked_attention(q, k, v, mask, *, scaled=True, empty="zero", dim=-1, invert=False,
                      finite_only=False, before_scale=False, as_numbers=False):
    """Attention with a boolean (True = may attend) or additive float mask, computed in float64 and returned in q's
    dtype as (out, weights). The keyword arguments make the mistakes the check names: a mask read the wrong way round
    (``invert``), a float mask whose finite values are dropped (``finite_only``) or added before the scaling
    (``before_scale``), a boolean mask added to the scores as 1 and 0 (``as_numbers``), unscaled scores, a softmax
    over the queries (``dim=-2``), and what a query with no visible key gets (``empty``: "zero" as the package and
    PyTorch's SDPA give, "nan" as a plain softmax of -inf gives, "uniform" as masking with -1e9 gives)."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    scores = q64 @ k64.transpose(-2, -1)
    scale = 1 / math.sqrt(q.shape[-1]) if scaled else 1.0
    bias = torch.zeros(())
    if mask is not None and mask.dtype == torch.bool and as_numbers:
        bias = mask.double()
    elif mask is not None and mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask if invert else ~mask, float("-inf"))
    elif mask is not None:
        bias = mask.double()
        if finite_only:
            bias = torch.where(bias == float("-inf"), bias, 0.0)
    scores = (scores + bias) * scale if before_scale else scores * scale + bias
    hidden = (scores == float("-inf")).expand(scores.shape)
    if empty == "uniform":  # -1e9: every key of a fully masked row gets the same score
        scores = scores.masked_fill(hidden, -1e9)
    weights = torch.softmax(scores, dim=dim)
    if empty == "zero":
        weights = torch.softmax(scores.masked_fill(hidden.all(-1, keepdim=True), 0.0), dim=dim).masked_fill(hidden, 0)
    return (weights @ v64).to(q.dtype), weights.to(q.dtype)


def _attention_cases():
    """(q, k, v, mask, what the mask is), the smallest first."""
    gen = _generator(1)

    def qkv(lead, L, S, d, d_v, dtype=torch.float32):
        return tuple(torch.randn(*lead, n, m, generator=gen).to(dtype) for n, m in ((L, d), (S, d), (S, d_v)))

    cases = [(*qkv((), 2, 3, 4, 2), None, "no mask")]
    q, k, v = qkv((2,), 3, 4, 4, 3)
    mask = torch.rand(2, 3, 4, generator=gen) > 0.4
    mask[0, 1] = False  # sequence 0, query 1 may see no key
    mask[1, :, 0] = True
    cases.append((q, k, v, mask, "boolean (B, L, S), one query with no visible key"))
    q, k, v = qkv((2,), 3, 5, 4, 3)
    distance = (torch.arange(5)[None, :] - torch.arange(2, 5)[:, None]).float()  # key position - query position
    bias = (0.5 * distance).masked_fill(distance > 0, float("-inf"))  # a causal, distance-biased float mask
    cases.append((q, k, v, bias, "float (L, S): -0.5 per step back, -inf on future keys"))
    q, k, v = qkv((2,), 3, 6, 8, 4, torch.float16)
    mask = real_key_mask([4, 0], 6)  # (B, 1, S): the second sequence is empty
    cases.append((q, k, v, mask, "boolean (B, 1, S) padding, an empty sequence, fp16"))
    q, k, v = qkv((2, 2), 4, 5, 6, 5, torch.float64)
    bias = torch.randn(2, 1, 1, 5, generator=gen, dtype=torch.float64)
    bias[0, ..., 3:] = float("-inf")  # padding of sequence 0
    bias[1] = float("-inf")  # sequence 1 is all padding
    cases.append((q, k, v, bias, "float (B, 1, 1, S): random biases, padding at -inf, an empty sequence, fp64"))
    return sorted(cases, key=lambda case: _size(*case[:4]))


@_exercise("my_attention_with_masks",
           task="given q (..., L, d), k (..., S, d), v (..., S, d_v) and mask (None, a boolean tensor with True = "
                "may attend, or a float tensor added to the scaled scores), broadcastable to (..., L, S), return "
                "(out, weights): weights (..., L, S), each row summing to 1 over the keys its query may see, and "
                "out (..., L, d_v), in q's dtype; a query that may see no key gets all-zero weights and an all-zero "
                "output, never NaN.",
           hint="Compute the scaled scores q kᵀ / √d. Turn a boolean mask into a float one (0 where True, -inf where "
                "False) and add the float mask to the scaled scores, in the scores' dtype. A row whose scores are "
                "all -inf would give 0 / 0 in the softmax: find those rows (all(dim=-1, keepdim=True)), replace their "
                "scores by 0 before the softmax, then set the weights of every hidden key (score -inf) to 0.",
           idea="Make the two kinds of mask one kind before anything else: a boolean mask says which scores to hide, "
                "a float mask is added to the scaled scores, and hiding a score is the same as adding -inf to it. The "
                "only new trouble is a row in which every score is hidden: decide what its softmax should give before "
                "you compute it.")
def check_attention_with_masks(fn):
    """fn(q, k, v, mask=None) -> (out, weights), mask boolean (True = may attend) or float (added to the scaled
    scores), like F.scaled_dot_product_attention's attn_mask.

    Tried on 5 random inputs, the smallest first: no mask, boolean masks of shapes (B, L, S) and (B, 1, S), float
    masks of shapes (L, S) and (B, 1, 1, S), with fully masked rows, in fp32, fp16 and fp64; compared with the
    package's scaled_dot_product_attention run in fp64 (boolean masks) and with the softmax of the scaled scores plus
    the mask in fp64 (float masks), fully masked rows giving zeros. Calling either scaled_dot_product_attention (the
    package's or PyTorch's) fails.
    """
    cases = _attention_cases()
    for q, k, v, mask, kind in cases:
        tried = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, {q.dtype}, mask {kind}"
        # before the answer runs (the package's own function refuses then); a boolean mask (or none) by the
        # package's function, in fp64
        if mask is None or mask.dtype == torch.bool:
            out, weights = (t.to(q.dtype) for t in scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                               mask))
        else:
            out, weights = _masked_attention(q, k, v, mask)
        result = _call(fn, (q, k, v, mask), "my_attention_with_masks", refuse=REFUSED_ATTENTION)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"your attention on {tried}: expected a pair (out, weights), got {_describe(result)}")
        atol = 1e-2 if q.dtype == torch.float16 else 1e-5

        def mistake(**how):
            return lambda: _masked_attention(q, k, v, mask, **how)[1]
        mistakes = [
            ("a query that may see no key got NaN: its row of scores is all -inf, and a softmax of it is 0 / 0; "
             "such a query must get zero weights and a zero output", mistake(empty="nan")),
            ("a query that may see no key spread its weight evenly over keys it may not see, as masking with a "
             "large finite number such as -1e9 does; such a query must get zero weights", mistake(empty="uniform")),
            ("the scores are not scaled by 1/√d (d = q's last dimension)", mistake(scaled=False)),
            ("the softmax runs over the queries (dim=-2): each query's weights must sum to 1 over the keys, the "
             "last dimension", mistake(dim=-2))]
        if mask is not None and mask.dtype == torch.bool:
            inverted = ("the boolean mask is used the wrong way round: True means the query may attend to the key, "
                        "so the keys to leave out are those where the mask is False")
            mistakes[:0] = [(inverted, mistake(invert=True)), (inverted, mistake(invert=True, empty="nan")),
                            ("the boolean mask was added to the scores as numbers (True as 1, False as 0): it hid no "
                             "key; the keys a boolean mask hides are those where it is False",
                             mistake(as_numbers=True))]
        elif mask is not None:
            mistakes[:0] = [
                ("the float mask's finite values were dropped: only its -inf entries hid keys, but every value of "
                 "a float mask is added to the scores", mistake(finite_only=True)),
                ("the float mask was added before the scaling: it is added to the scores already divided by √d",
                 mistake(before_scale=True))]
        _compare("your attention weights", tried, weights, result[1], _see_hint("my_attention_with_masks"),
                 atol=atol, mistakes=mistakes)
        _compare("your attention output", tried, out, result[0], _see_hint("my_attention_with_masks"), atol=atol)
    print(f"✓ your attention matches on {len(cases)} inputs: no mask, boolean and float masks of 4 shapes, "
          "fully masked rows giving zeros, in fp32, fp16 and fp64.")
