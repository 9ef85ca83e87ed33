"""Checks for chapter 12's exercises: RMSNorm, the SwiGLU MLP, the decode roofline of a real model, perplexity."""
import math

import torch
import torch.nn.functional as F

from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint


@_exercise("my_rms_norm",
           task="return x, of shape (..., d_model), with each vector divided by its root mean square (over the last "
                "dimension, with eps added inside the root) and then scaled by weight, shape (d_model,); same shape "
                "and dtype as x.",
           hint="The root mean square of each vector is torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + eps). "
                "Divide x by it (or multiply by torch.rsqrt of the same thing) and multiply by weight. Unlike "
                "LayerNorm, nothing is subtracted and there is no bias.")
def check_rms_norm(fn):
    """fn(x, weight, eps) -> x / sqrt(mean(x^2 over the last dimension) + eps) * weight, shape of x.

    Tried on 3 seeded inputs, from (1, 4) to (2, 5, 576), with eps 1e-5 and 1e-1 (a large eps shows whether it
    is inside the root); compared with PyTorch's ``F.rms_norm``.
    """
    for shape, eps in [((1, 4), 1e-1), ((3, 8), 1e-5), ((2, 5, 576), 1e-5)]:
        generator = torch.Generator().manual_seed(sum(shape))
        x = torch.randn(shape, generator=generator) * 3 + 0.5
        weight = torch.rand(shape[-1], generator=generator) + 0.5
        expected = F.rms_norm(x, (shape[-1],), weight, eps)
        got = _call(fn, (x, weight, eps), "my_rms_norm")
        _compare("my_rms_norm", f"x of shape {shape}, eps={eps:g}", expected, got, hint=_see_hint("my_rms_norm"),
                 mistakes=[
                     ("subtracting the mean first: that is LayerNorm, which SmolLM2 does not use",
                      lambda: F.layer_norm(x, (shape[-1],), weight, eps=eps)),
                     ("leaving out weight", lambda: F.rms_norm(x, (shape[-1],), None, eps)),
                     ("adding eps outside the square root",
                      lambda: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight),
                     ("dividing by the mean square, not its square root",
                      lambda: x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight),
                 ])
    print("✓ my_rms_norm equals F.rms_norm on 3 inputs.")


def _swiglu(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


@_exercise("swiglu",
           task="return the SwiGLU MLP of x, shape (..., d_model): the gate projection w_gate (d_ff, d_model), passed "
                "through SiLU, gates the up projection w_up (d_ff, d_model) element by element, and w_down "
                "(d_model, d_ff) projects the result back; shape (..., d_model). Weights are stored as nn.Linear "
                "stores them, (out, in).",
           hint="F.linear(x, w) computes x @ w.T, so F.linear(x, w_gate) has shape (..., d_ff). Apply F.silu to it, "
                "multiply by F.linear(x, w_up), and pass the product through F.linear(..., w_down).")
def check_swiglu(fn):
    """fn(x, w_gate, w_up, w_down) -> w_down(silu(w_gate x) * (w_up x)), shape (..., d_model).

    Tried on 3 seeded inputs (d_model, d_ff) = (2, 3), (8, 12), (64, 96), with 1 to 3 leading dimensions;
    compared with the same formula written with ``F.linear`` and ``F.silu``.
    """
    for shape, d_ff in [((2,), 3), ((4, 8), 12), ((2, 3, 64), 96)]:
        d_model = shape[-1]
        generator = torch.Generator().manual_seed(d_ff)
        x = torch.randn(shape, generator=generator)
        w_gate, w_up = (torch.randn(d_ff, d_model, generator=generator) / math.sqrt(d_model) for _ in range(2))
        w_down = torch.randn(d_model, d_ff, generator=generator) / math.sqrt(d_ff)
        expected = _swiglu(x, w_gate, w_up, w_down)
        got = _call(fn, (x, w_gate, w_up, w_down), "swiglu")
        _compare("swiglu", f"x of shape {shape}, d_ff={d_ff}", expected, got, hint=_see_hint("swiglu"), mistakes=[
            ("SiLU applied to the up projection instead of the gate", lambda: _swiglu(x, w_up, w_gate, w_down)),
            ("no SiLU: the gate must go through F.silu",
             lambda: F.linear(F.linear(x, w_gate) * F.linear(x, w_up), w_down)),
            ("SiLU after multiplying, not on the gate alone",
             lambda: F.linear(F.silu(F.linear(x, w_gate) * F.linear(x, w_up)), w_down)),
        ])
    print("✓ swiglu is right on 3 inputs.")


@_exercise("roofline_tokens_per_s",
           task="return the most tokens per second (a float) that decoding one sequence can reach on a machine "
                "reading `bandwidth` bytes per second, when each step must read all the weights (weight_bytes) and "
                "the K/V cache of `context` tokens at cache_bytes_per_token each.",
           hint="One decode step reads weight_bytes + context * cache_bytes_per_token bytes. At `bandwidth` bytes "
                "per second it takes that many bytes / bandwidth seconds, and tokens per second is 1 over that.")
def check_roofline_tokens_per_s(fn):
    """fn(weight_bytes, cache_bytes_per_token, context, bandwidth) -> the batch-1 decode roofline in tokens/s.

    Tried on 4 cases: SmolLM2-135M in fp32 at contexts 0, 1,000 and 100,000, and a 7-billion-parameter model in
    fp16; compared with bandwidth / (weight_bytes + context x cache_bytes_per_token), to a relative 1e-9.
    """
    for weights, per_token, context, bandwidth in [(538_060_032, 46_080, 0, 40e9),
                                                   (538_060_032, 46_080, 1_000, 40e9),
                                                   (538_060_032, 46_080, 100_000, 40e9),
                                                   (14e9, 131_072, 4_096, 1e12)]:
        expected = bandwidth / (weights + context * per_token)
        got = _call(fn, (weights, per_token, context, bandwidth), "roofline_tokens_per_s")
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9 * expected:
            wrong = bandwidth / weights if context else None
            likely = ("\nLikely mistake: the cache is read too, at every step"
                      if wrong is not None and isinstance(got, (int, float)) and abs(got - wrong) < 1e-9 * wrong
                      else f"\n{_see_hint('roofline_tokens_per_s')}")
            raise CheckFailed(f"roofline_tokens_per_s on weight_bytes={weights:,.0f}, cache_bytes_per_token="
                              f"{per_token:,}, context={context:,}, bandwidth={bandwidth:g} B/s: expected "
                              f"{expected:.6g} tokens/s, got {got!r}{likely}")
    print("✓ roofline_tokens_per_s is right for 4 cases.")


@_exercise("my_perplexity",
           task="return the perplexity (a float) of a model on a text, given its logits of shape (L, vocab) and the "
                "text's next tokens, targets of shape (L,) (targets[i] is the token that follows position i): "
                "e to the power of the mean, over the L positions, of minus the log-probability the model gave to "
                "the right token.",
           hint="F.cross_entropy(logits, targets) is the mean of minus the log-probability of each target "
                "(natural log). Perplexity is math.exp of it: a float, so take .item().")
def check_perplexity(fn):
    """fn(logits (L, vocab), targets (L,)) -> exp(mean cross-entropy), a float.

    Tried on 3 seeded cases, from L = 1 with a vocabulary of 3 to L = 200 with 1,000, one of them with confident
    logits; compared with ``math.exp(F.cross_entropy(logits, targets))`` to a relative 1e-5.
    """
    for L, vocab, scale in [(1, 3, 1.0), (20, 50, 5.0), (200, 1000, 2.0)]:
        generator = torch.Generator().manual_seed(L)
        logits = torch.randn(L, vocab, generator=generator) * scale
        targets = torch.randint(vocab, (L,), generator=generator)
        loss = F.cross_entropy(logits, targets).item()
        expected = math.exp(loss)
        got = _call(fn, (logits, targets), "my_perplexity")
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or not abs(got - expected) <= 1e-5 * expected:
            likely = None
            if isinstance(got, (int, float)):
                if abs(got - loss) <= 1e-5 * abs(loss):
                    likely = "returning the mean cross-entropy: perplexity is e to its power"
                elif abs(got - 2 ** (loss / math.log(2))) <= 1e-5 * expected and abs(got - expected) > 0:
                    likely = "a log in base 2 used with e, or the other way round"
            raise CheckFailed(f"my_perplexity on logits of shape ({L}, {vocab}): expected {expected:.6g}, got {got!r}"
                              + (f"\nLikely mistake: {likely}" if likely else f"\n{_see_hint('my_perplexity')}"))
    print("✓ my_perplexity is right on 3 cases.")
