"""Checks for chapter 1's exercises: softmax, causal mask, attention."""
import torch

from ..masks import causal_mask
from ..sdpa import scaled_dot_product_attention
from ._compare import CheckFailed, _call, _compare, _describe


def check_stable_softmax(fn):
    """fn(x) -> softmax over the last dimension, stable for large inputs. x: (..., S).

    Tried on 5 random inputs of 2 or 3 dimensions, with values up to ±1000 and rows near -1000; compared with
    torch.softmax.
    """
    task = "return exp(x) / sum(exp(x)) along the last dimension, after subtracting each row's maximum."
    gen = torch.Generator().manual_seed(0)
    cases = [((3, 5), 1.0, 0.0), ((2, 4, 6), 10.0, 0.0), ((1, 7), 100.0, 0.0), ((4, 3), 1000.0, 0.0),
             ((2, 5), 10.0, -1000.0)]  # (shape, largest |x - offset|, offset)
    for shape, spread, offset in cases:
        x = torch.randn(shape, generator=gen)
        x = x / x.abs().max() * spread + offset
        tried = f"x of shape {shape} with values in [{x.min().item():.0f}, {x.max().item():.0f}]"
        _compare("stable_softmax", tried, torch.softmax(x, dim=-1), _call(fn, (x,), task),
                 hint="did you subtract each row's maximum before exp?")
    print(f"✓ stable_softmax matches torch.softmax on {len(cases)} inputs, "
          "including values up to ±1000 and rows near -1000.")


def check_causal_mask(fn):
    """fn(L, S) -> (L, S) boolean mask, True = may attend, aligned bottom-right.

    Tried on 5 sizes (L, S), square and not; compared with attention_book.causal_mask.
    """
    task = "return an (L, S) boolean tensor where query i may attend to keys 0 .. i + (S - L)."
    sizes = [(1, 1), (4, 4), (1, 6), (3, 5), (2, 7)]
    for L, S in sizes:
        _compare("your causal mask", f"L={L}, S={S}", causal_mask(L, S), _call(fn, (L, S), task))
    print(f"✓ your causal mask matches attention_book.causal_mask for (L, S) in {sizes}.")


def check_attention(fn):
    """fn(q, k, v, mask=None) -> (out, weights), like attention_book.scaled_dot_product_attention.

    Tried on 3 random q, k, v: without a mask, with a causal mask and with a random mask; weights and output
    compared with attention_book.scaled_dot_product_attention.
    """
    task = "compute weights = softmax(q kᵀ / √d) with masked keys excluded, and return (weights @ v, weights)."
    gen = torch.Generator().manual_seed(1)
    cases = [(3, 5, 4, 4, None), (4, 4, 8, 3, "causal"), (2, 6, 16, 5, "random")]  # (L, S, d, d_v, mask)
    for L, S, d, d_v, kind in cases:
        q, k, v = (torch.randn(2, n, m, generator=gen) for n, m in ((L, d), (S, d), (S, d_v)))
        mask = None
        if kind == "causal":
            mask = causal_mask(L, S)
        elif kind == "random":
            mask = torch.rand(2, L, S, generator=gen) > 0.4
            mask[..., 0] = True  # every query may attend to at least one key
        tried = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, mask {kind}"
        result = _call(fn, (q, k, v, mask), task)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"your attention on {tried}: expected a pair (out, weights), got {_describe(result)}")
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        hint = ("scale the scores by 1/√d; masked_fill fills where its mask is True, "
                "so fill where the attention mask is False (~mask)")
        _compare("your attention weights", tried, weights, result[1], hint)
        _compare("your attention output", tried, out, result[0], "out = weights @ v")
    print(f"✓ your attention matches attention_book.scaled_dot_product_attention on {len(cases)} inputs, "
          "with and without masks.")
