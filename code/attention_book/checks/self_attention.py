"""Checks for chapter 2's exercises: positions, memory, self-attention a block of queries at a time."""
import math

import torch

from ..experiments.tensor_memory import PeakTensorBytes
from ..masks import causal_mask
from ..positions import sinusoidal_positions
from ..self_attention import SelfAttentionHead
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _seeded


def _positions_layout(positions, d_model, *, layout="interleaved", exponent=2):
    """Sinusoidal encodings of ``positions`` (any shape) in float64, cast to float32: the mistakes the check names.
    ``layout``: "interleaved" (the chapter's: sine in column 2i, cosine in 2i + 1), "swapped" (cosine first),
    "halves" (all the sines, then all the cosines); ``exponent`` 1: the rate 10000^(i / d_model)."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angles = positions.double()[..., None] / 10000 ** (exponent * i / d_model)  # (..., d_model / 2)
    sin, cos = angles.sin(), angles.cos()
    if layout == "halves":
        return torch.cat((sin, cos), dim=-1).float()
    pair = (cos, sin) if layout == "swapped" else (sin, cos)
    return torch.stack(pair, dim=-1).flatten(-2).float()


@_exercise("sinusoidal_at",
           task="given positions, an integer tensor of any shape (...), and an even d_model, return the float32 "
                "tensor (..., d_model) whose entry [..., :] is the chapter's sinusoidal encoding of the position "
                "at [...]: a sine and a cosine of the same angle for each pair of columns, the first pair turning "
                "fastest.",
           hint="Put the positions on a new last axis, positions[..., None].float() (..., 1), and multiply by the "
                "rates 10000 ** (-two_i / d_model) with two_i = torch.arange(0, d_model, 2): the angles, "
                "(..., d_model / 2). Interleave their sines and cosines: torch.stack((sin, cos), dim=-1) is "
                "(..., d_model / 2, 2), and .flatten(-2) makes it (..., d_model) with sin, cos, sin, cos, ...")
def check_sinusoidal_at(fn):
    """fn(positions, d_model) -> (..., d_model) sinusoidal encodings of integer positions of any shape.

    Tried on 5 tensors of positions, the smallest first: one position, positions in any order, positions that do not
    start at 0, a (B, L) batch whose rows start at different positions and a (2, 3, 4) tensor, d_model from 2 to 16;
    compared with rows of attention_book.sinusoidal_positions. Calling sinusoidal_positions fails.
    """
    gen = _generator(6)
    cases = [(torch.tensor([0]), 2), (torch.tensor([3, 0, 7]), 4), (torch.arange(10, 16), 8),
             (torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]), 8),
             (torch.randint(0, 60, (2, 3, 4), generator=gen), 16)]
    for positions, d_model in cases:  # the fewest positions first
        expected = sinusoidal_positions(int(positions.max()) + 1, d_model)[positions]  # (..., d_model)
        tried = f"positions {positions.tolist()}, d_model={d_model}"
        got = _call(fn, (positions, d_model), "sinusoidal_at",
                    refuse=[("attention_book.positions.sinusoidal_positions", "which the exercise says not to call")])

        def mistake(**how):
            return lambda: _positions_layout(positions, d_model, **how)
        _compare("your position encoding", tried, expected, got, hint=_see_hint("sinusoidal_at"), mistakes=[
            ("the sine and the cosine of each pair are swapped: column 2i holds the sine, column 2i + 1 the cosine",
             mistake(layout="swapped")),
            ("the sines fill the first half of the columns and the cosines the second half; in the chapter's "
             "encoding each sine sits next to its cosine (columns 2i and 2i + 1)", mistake(layout="halves")),
            ("pair i turns at the rate 1 / 10000^(i / d_model); the chapter's exponent is 2i / d_model, so that the "
             "slowest pair turns at about 1 / 10000", mistake(exponent=1))])
    print(f"✓ your sinusoidal_at matches rows of attention_book.sinusoidal_positions on {len(cases)} tensors of "
          "positions, of 1 to 3 dimensions.")


REFUSED_HEAD = ["attention_book.sdpa.scaled_dot_product_attention",
                ("torch.nn.functional.scaled_dot_product_attention", "PyTorch's own solution of this step"),
                "attention_book.self_attention.SelfAttentionHead.forward"]
SCORE_BLOCKS = 8  # how many (B, block, L) tensors of scores an answer may hold at once, over what it must hold


def _blocks(x, weights, block, *, positions=True, causal="whole", scaled=True):
    """Causal self-attention of x (+ positions) a block of queries at a time, in float64, cast to float32: the
    mistakes the check names. ``causal``: "whole" (query i sees keys 0..i), "none", "top-left" (each block's mask
    starts again at query 0), "bottom-right" (each block's queries taken as the last of the L keys)."""
    B, L, d_model = x.shape
    x = x.double() + (sinusoidal_positions(L, d_model).double() if positions else 0)
    q, k, v = (x @ w.double() for w in weights)
    out = torch.empty_like(v)
    for start in range(0, L, block):
        n = min(block, L - start)
        scores = q[:, start:start + n] @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scaled else 1.0)
        row = {"whole": start, "none": L, "top-left": 0, "bottom-right": L - n}[causal]
        allowed = torch.arange(L)[None, :] <= torch.arange(n)[:, None] + row  # (n, L)
        out[:, start:start + n] = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    return out.float()


@_exercise("self_attention_in_blocks",
           task="given x (B, L, d_model), W_q, W_k, W_v (d_model, d_head) and an int block, return out "
                "(B, L, d_head): the causal self-attention (query i sees keys 0..i) of x plus its sinusoidal "
                "positions, with those three projections, computed without ever holding the scores of more than "
                "block queries at once.",
           hint="Add sinusoidal_positions(L, d_model) to x, then project: q, k, v = x @ W_q, x @ W_k, x @ W_v. Make "
                "out = torch.empty_like(v) and loop: for start in range(0, L, block), the queries start .. stop - 1 "
                "(stop = min(start + block, L)) need only the keys 0 .. stop - 1. Their scores "
                "q[:, start:stop] @ k[:, :stop].transpose(-2, -1) / √d_head are (B, stop - start, stop); query "
                "start + i may see key j when j <= start + i (compare two aranges), -inf elsewhere; softmax over the "
                "last dimension, then out[:, start:stop] = weights @ v[:, :stop].",
           idea="Causal attention lets a query see only the keys up to its own position, so a block of queries never "
                "needs the keys after its last query. Walk over the queries a block at a time; each block's scores "
                "are (block, keys up to the block's end), never (L, L).")
def check_self_attention_in_blocks(fn):
    """fn(x, W_q, W_k, W_v, block) -> (B, L, d_head): causal self-attention of x + sinusoidal positions, computed
    ``block`` queries at a time.

    Tried on 5 random inputs, the smallest first, L from 3 to 128, blocks that do and do not divide L; compared with
    attention_book.SelfAttentionHead (its matrices set to W_q, W_k, W_v) on x + sinusoidal_positions with a causal
    mask. The bytes of the tensors the answer creates are counted (attention_book.experiments.tensor_memory):
    beyond x with its positions, the table of positions, q, k, v, the output and one more x-sized tensor of slack,
    it may hold 8 (B, block, L) tensors of scores at once.
    Calling a scaled_dot_product_attention (the package's or PyTorch's) or SelfAttentionHead.forward fails.
    """
    cases = []
    for seed, (B, L, d_model, d_head, block) in enumerate([(1, 3, 4, 2, 2), (1, 4, 4, 4, 8), (2, 5, 6, 4, 2),
                                                          (2, 9, 8, 4, 4), (2, 128, 8, 4, 8)]):
        with _seeded(seed):
            head = SelfAttentionHead(d_model, d_head)
            x = torch.randn(B, L, d_model)
        cases.append((head, x, block))
    for head, x, block in cases:  # the smallest first
        (B, L, d_model), d_head = x.shape, head.d_head
        weights = [p.weight.detach().T for p in (head.q_proj, head.k_proj, head.v_proj)]  # each (d_model, d_head)
        with torch.no_grad():
            expected, _ = head(x + sinusoidal_positions(L, d_model), causal_mask(L))
        tried = f"x {tuple(x.shape)}, W_q, W_k, W_v of shape {(d_model, d_head)}, block={block}"
        with torch.no_grad(), PeakTensorBytes() as counter:
            got = _call(fn, (x, *weights, block), "self_attention_in_blocks", refuse=REFUSED_HEAD)

        def mistake(**how):
            return lambda: _blocks(x, weights, block, **how)
        _compare("your self-attention", tried, expected, got, hint=_see_hint("self_attention_in_blocks"), mistakes=[
            ("the positions were not added: x + sinusoidal_positions(L, d_model) goes into the projections",
             mistake(positions=False)),
            ("the attention is not causal: query i may see keys 0 .. i only", mistake(causal="none")),
            ("each block's causal mask starts again at query 0: the block's first query sits at position start, "
             "not 0, so it may see keys 0 .. start", mistake(causal="top-left")),
            ("each block's queries were taken as the last of the L positions (a mask aligned to the end of the "
             "keys): the block's first query sits at position start", mistake(causal="bottom-right")),
            ("the scores are not scaled by 1/√d_head", mistake(scaled=False))])
        item = x.element_size()
        summed, table = x.numel() * item, L * d_model * item  # x + positions, and the table of positions
        projected = 4 * B * L * d_head * item  # q, k, v and the output
        needed = summed + table + projected + summed  # the last: one more x-sized tensor of slack
        allowed = needed + SCORE_BLOCKS * B * min(block, L) * L * item
        if counter.peak > allowed:
            raise CheckFailed(
                f"your self-attention on {tried}: right values, but it held {counter.peak:,} bytes of new tensors at "
                f"once; it may hold {allowed:,}: x with its positions {summed:,}, the table of positions {table:,}, "
                f"q, k, v and the output {projected:,}, one more x-sized tensor of slack {summed:,}, and "
                f"{SCORE_BLOCKS} tensors of scores for {min(block, L)} queries {allowed - needed:,}. More than "
                f"{min(block, L)} queries' scores were held at once (all L × L of them take {B * L * L * item:,} "
                "bytes)")
    print(f"✓ your self-attention in blocks matches attention_book.SelfAttentionHead with a causal mask on "
          f"{len(cases)} inputs, L up to 128, holding no more than a block of queries' scores at once.")


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
