"""Checks for chapter 2's exercises: self-attention, positions, memory."""
import math

import torch

from ..positions import sinusoidal_positions
from ..self_attention import SelfAttentionHead
from ._compare import CheckFailed, _call, _compare, _describe, _exercise, _see_hint


@_exercise("self_attention",
           task="given x (B, L, d_model) and W_q, W_k, W_v (d_model, d_head), return (out, weights): the "
                "self-attention of x with those three projections and no mask, weights (B, L, L) (row i: how much "
                "token i attends to each token) and out (B, L, d_head).",
           hint="Project x three times: q, k, v = x @ W_q, x @ W_k, x @ W_v, each (B, L, d_head). Then it is the "
                "attention of chapter 1: scaled_dot_product_attention(q, k, v) returns (out, weights).")
def check_self_attention(fn):
    """fn(x, W_q, W_k, W_v) -> (out, weights), x (B, L, d_model), each W (d_model, d_head).

    Tried on 3 random inputs and weight matrices; weights and output compared with attention_book.SelfAttentionHead.
    """
    # (seed, (B, L, d_model, d_head)), the smallest input (x and the three matrices) first
    for seed, (B, L, d_model, d_head) in [(1, (1, 7, 6, 6)), (2, (3, 3, 10, 2)), (0, (2, 5, 8, 4))]:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            head = SelfAttentionHead(d_model, d_head)
            x = torch.randn(B, L, d_model)
        weights_t = [p.weight.detach().T for p in (head.q_proj, head.k_proj, head.v_proj)]  # (d_model, d_head)
        tried = f"x {tuple(x.shape)}, W_q, W_k, W_v of shape {(d_model, d_head)}"
        result = _call(fn, (x, *weights_t), "self_attention")
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"your self_attention on {tried}: expected a pair (out, weights), "
                              f"got {_describe(result)}")
        with torch.no_grad():
            out, weights = head(x)
        q, k = x @ weights_t[0], x @ weights_t[1]
        unscaled = ("the scores are not scaled by 1/√d_head", lambda: torch.softmax(q @ k.transpose(-2, -1), -1))
        _compare("your attention weights", tried, weights, result[1], _see_hint("self_attention"),
                 mistakes=[unscaled])
        _compare("your self-attention output", tried, out, result[0], _see_hint("self_attention"))
    print("✓ your self_attention matches attention_book.SelfAttentionHead on 3 inputs.")


@_exercise("sinusoidal",
           task="return an (L, d_model) float32 tensor (d_model even) whose row p encodes position p with the "
                "chapter's sinusoidal formula: a sine and a cosine of the same angle for each pair of columns, the "
                "first pair turning fastest.",
           hint="Column 2i holds sin(p / 10000^(2i / d_model)) and column 2i + 1 the cosine of the same angle. Build "
                "the angles at once: positions torch.arange(L)[:, None] (L, 1) divided by 10000 ** (two_i / d_model) "
                "with two_i = torch.arange(0, d_model, 2), giving (L, d_model / 2); then fill encoding[:, 0::2] with "
                "their sines and encoding[:, 1::2] with their cosines.")
def check_sinusoidal(fn):
    """fn(L, d_model) -> (L, d_model) sinusoidal position encodings.

    Tried on 4 sizes from (1, 2) to (50, 16); compared with attention_book.sinusoidal_positions.
    """
    for L, d_model in [(1, 2), (6, 8), (10, 64), (50, 16)]:  # the smallest first
        _compare("your position encoding", f"L={L}, d_model={d_model}", sinusoidal_positions(L, d_model),
                 _call(fn, (L, d_model), "sinusoidal"),
                 hint=_see_hint("sinusoidal"))
    print("✓ your sinusoidal encoding matches attention_book.sinusoidal_positions for 4 sizes.")


@_exercise("weights_bytes",
           task="return the number of bytes (an int) that a tensor of attention weights of shape (B, h, L, S) and "
                "the given dtype (torch.float16, torch.bfloat16, torch.float32, ...) takes.",
           hint="It is the number of weights, B * h * L * S, times the bytes of one element: "
                "torch.finfo(dtype).bits // 8 (2 for fp16 and bf16, 4 for fp32, 8 for fp64).")
def check_weights_bytes(fn):
    """fn(B, h, L, S, dtype) -> bytes taken by the attention weights of that shape and dtype.

    Tried on 5 shapes in fp16, bf16, fp32 and fp64; compared with the size of a real tensor (Tensor.nbytes). On a
    pass, it prints the answer to the exercise's question: the longest L whose fp16 weights (1, 1, L, L) fit in 1 GiB.
    """
    cases = [(1, 1, 4, 4, torch.float32), (4, 2, 3, 5, torch.float64), (2, 8, 10, 10, torch.float32),
             (1, 32, 1, 4096, torch.bfloat16), (8, 12, 1024, 1024, torch.float16)]  # the fewest weights first
    for B, h, L, S, dtype in cases:
        expected = torch.empty(B, h, L, S, dtype=dtype).nbytes
        got = _call(fn, (B, h, L, S, dtype), "weights_bytes")
        if got != expected:
            raise CheckFailed(f"weights_bytes(B={B}, h={h}, L={L}, S={S}, dtype={dtype}): expected {expected:,}, "
                              f"got {got!r}\n{_weights_bytes_mistake(got, B * h * L * S, dtype)}")
    longest = math.isqrt(2**30 // 2)  # L * L * 2 bytes <= 2**30
    print(f"✓ weights_bytes matches the real tensors' sizes for {len(cases)} shapes and dtypes.\n"
          f"  The question's answer: one fp16 head over one sequence fits in 1 GiB up to L = {longest:,} "
          f"({longest:,}² × 2 bytes ≤ 2³⁰).")


def _weights_bytes_mistake(got, count, dtype):
    """What a wrong weights_bytes answer most likely got wrong, given the number of weights ``count``."""
    size = torch.empty((), dtype=dtype).element_size()
    if got == count:
        return "Likely mistake: that is the number of weights; the question asks for bytes."
    if got == count * size * 8:
        return "Likely mistake: that counts bits, not bytes."
    if isinstance(got, int) and got % count == 0 and got // count in (1, 2, 4, 8):
        return (f"Likely mistake: {got // count} bytes per weight, but a {dtype} weight takes another number of "
                "bytes: each dtype has its own size.")
    return "Hint: " + _see_hint("weights_bytes")
