"""Checks for chapter 12's exercises: a matrix-vector product straight from Q4_1 bytes, quantising to Q4_1, the
decode roofline of a real model, perplexity."""
import math

import torch
import torch.nn.functional as F

from ..experiments.tensor_memory import PeakTensorBytes
from ..llama.dequantize import dequantize
from ._compare import CheckFailed, _call, _compare, _describe, _exercise, _generator, _see_hint
from ._watch import NON_FINITE, NonFiniteToInteger


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
        generator = _generator(L)
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


# Q4_1, as GGUF stores it: blocks of 32 numbers in 20 bytes, a scale d (fp16), a minimum m (fp16), then 16 bytes
# whose low nibbles are numbers 0-15 and high nibbles numbers 16-31; the numbers are d q + m.
Q4_1_ITSELF = ["attention_book.llama.dequantize.dequantize", "attention_book.llama.dequantize._numbers"]


def _gguf_quants(*names):
    """gguf's own Q4_1 functions, refused too where the gguf package is installed."""
    try:
        import gguf.quants  # noqa: F401
    except ImportError:
        return []
    return [f"gguf.quants.{name}" for name in names]


def _q4_1_bytes(rows, gen):
    """Random Q4_1 rows: uint8 (N, K / 32 * 20), with scales in [0.01, 0.1] and minimums in [-1, 0]."""
    n_rows, n_blocks = rows
    d = (torch.rand(n_rows, n_blocks, 1, generator=gen) * 0.09 + 0.01).half()
    m = -torch.rand(n_rows, n_blocks, 1, generator=gen).half()
    q = torch.randint(0, 16, (n_rows, n_blocks, 32), generator=gen, dtype=torch.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)
    return torch.cat((d.view(torch.uint8), m.view(torch.uint8), packed), dim=-1).reshape(n_rows, -1)


def _q4_1_read(raw, order="low first", swap=False):
    """The numbers of Q4_1 rows as the d, m and q of each block: (N, K / 32, 1) twice and (N, K / 32, 32), read as
    stored or as a likely mistake reads them: nibbles "interleaved" (byte j as numbers 2j, 2j + 1), "high first",
    or d and m swapped."""
    blocks = raw.reshape(raw.shape[0], -1, 20)
    d, m = (blocks[..., s:s + 2].contiguous().view(torch.float16).float() for s in (0, 2))
    low, high = blocks[..., 4:] & 0x0F, blocks[..., 4:] >> 4
    if order == "interleaved":
        q = torch.stack((low, high), dim=-1).flatten(-2)
    else:
        q = torch.cat((low, high) if order == "low first" else (high, low), dim=-1)
    return (m, d, q.float()) if swap else (d, m, q.float())


@_exercise("q4_1_matvec",
           task="given raw, a uint8 tensor of shape (N, K / 32 * 20) holding a weight W of shape (N, K) (as nn.Linear "
                "stores it) in GGUF's Q4_1 format, row after row, and x of shape (K,), fp32, return W @ x, shape "
                "(N,), fp32. Each row is K / 32 blocks of 20 bytes: the block's scale d (fp16, 2 bytes), its minimum "
                "m (fp16, 2 bytes), then 16 bytes holding its 32 numbers q, 4 bits each, unsigned: byte j holds "
                "number j in its low 4 bits and number j + 16 in its high 4 bits; the block stands for the 32 values "
                "d q + m; d and m are little-endian fp16. Never hold W in fp32: the new tensors the function holds at "
                "any one moment must stay under N * K bytes, a quarter of W in fp32 (counted on a (256, 1024) "
                "weight). Do not call the package's dequantize or _numbers (or gguf's dequantize); _fp16 is allowed.",
           hint="View raw as (N, K / 32, 20): a view, no copy. d is blocks[..., 0:2].contiguous().view(torch.float16)"
                "[..., 0].float(), shape (N, K / 32), m the same from bytes 2:4. Cut x the same way, as (K / 32, 32). "
                "Within one block, sum_j (d q_j + m) x_j = d (q . x_block) + m (sum of x_block), so keep one running "
                "dot product per block, dots (N, K / 32), and add to it one byte position at a time: for j in 0 .. "
                "15, byte = blocks[..., 4 + j] holds number j in byte & 0x0F and number j + 16 in byte >> 4, so "
                "dots += (byte & 0x0F).float() * x_blocks[:, j] + (byte >> 4).float() * x_blocks[:, j + 16]. "
                "Then sum d * dots + m * x_blocks.sum(-1) over each row's blocks. (Rows a few at a time works too, "
                "if few enough.)",
           idea="Read section 1's picture of a block: two fp16 numbers, then 16 bytes holding 32 four-bit numbers. A "
                "row's dot product with x is a sum over blocks, and within a block d and m factor out of the sum, so "
                "you never need the dequantised weights, only a few products per block.")
def check_q4_1_matvec(fn):
    """fn(raw (N, K / 32 * 20) uint8, x (K,)) -> W @ x, (N,), for W stored in Q4_1.

    Tried on 5 seeded weights made of random Q4_1 blocks, from (1, 32) to (256, 1024); compared with the package's
    dequantize followed by a matrix-vector product in float64. On the largest, the new tensors the answer holds at
    once are counted (PeakTensorBytes) against N x K bytes, a quarter of W in fp32. Refuses answers that call the
    package's dequantize (or _numbers), or gguf's dequantize.
    """
    gen = _generator(25)
    for n_rows, k in [(1, 32), (3, 64), (8, 96), (16, 256), (256, 1024)]:  # the smallest first
        raw = _q4_1_bytes((n_rows, k // 32), gen)
        x = torch.randn(k, generator=gen)
        expected = (dequantize(raw, "Q4_1", (n_rows, k)).double() @ x.double()).float()

        def product(d, m, q):  # (N,): the matrix-vector product of the blocks d q + m
            return ((d * q + m).reshape(n_rows, k).double() @ x.double()).float()

        mistakes = [
            ("byte j was read as numbers 2j and 2j + 1; in Q4_1 it holds number j (low 4 bits) and number j + 16 "
             "(high 4 bits)", lambda: product(*_q4_1_read(raw, "interleaved"))),
            ("the high 4 bits were taken as number j and the low 4 bits as number j + 16: the low ones come first",
             lambda: product(*_q4_1_read(raw, "high first"))),
            ("d and m were swapped: a block starts with its scale d, then its minimum m",
             lambda: product(*_q4_1_read(raw, swap=True))),
            ("the minimum m was left out: each of a block's numbers stands for d q + m",
             lambda: _without_m(raw, product)),
            ("m was added once per block, not to each of its 32 numbers", lambda: _m_once(raw, x)),
            ("the 4-bit numbers were read as signed, -8 to 7 (as Q4_0 stores them); Q4_1's are 0 to 15",
             lambda: _signed(raw, product)),
        ]
        raw, x = raw.clone(), x.clone()
        with torch.no_grad(), PeakTensorBytes() as counter:
            got = _call(fn, (raw, x), "q4_1_matvec", refuse=Q4_1_ITSELF + _gguf_quants("dequantize"))
        tried = f"W ({n_rows}, {k}) in Q4_1, raw {tuple(raw.shape)}"
        _compare("your q4_1_matvec", tried, expected, got, hint=_see_hint("q4_1_matvec"), atol=1e-3,
                 mistakes=mistakes)
        bound = n_rows * k  # bytes: one per weight, a quarter of W in fp32
        if n_rows * k >= _MATVEC_MEASURED and counter.peak >= bound:
            held = (f"; W in fp32 is {4 * bound:,} bytes: the answer held about that much, one fp32 number per "
                    f"weight" if counter.peak >= 4 * bound else "")
            raise CheckFailed(f"your q4_1_matvec on {tried}: it held {counter.peak:,} bytes of new tensors at once, "
                              f"not under the {bound:,} bytes (N × K, a quarter of W in fp32) the exercise "
                              f"allows{held}")
    print("✓ your q4_1_matvec multiplies by the Q4_1 weight as the package's dequantize reads it, on 5 weights, "
          "and on (256, 1,024) it held under N × K bytes of new tensors, never W in fp32.")


_MATVEC_MEASURED = 256 * 1024  # the weights whose peak bytes q4_1_matvec's check counts: N x K at least this


def _m_once(raw, x):
    """W @ x when each block's m is added once to its row's sum, not to every number: sum d (q . x) + m."""
    d, m, q = _q4_1_read(raw)
    xb = x.double().reshape(-1, 32)
    return (d[..., 0].double() * (q.double() * xb).sum(-1) + m[..., 0].double()).sum(-1).float()


def _without_m(raw, product):
    d, _, q = _q4_1_read(raw)
    return product(d, 0.0, q)


def _signed(raw, product):
    d, m, q = _q4_1_read(raw)
    return product(d, m, q - 8)


@_exercise("quantize_q4_1",
           task="given w of shape (N, K), fp32, with K a multiple of 32, return its Q4_1 bytes, a uint8 tensor of "
                "shape (N, K / 32 * 20), laid out as GGUF stores them: each row cut into blocks of 32 numbers, "
                "each block 20 bytes: a scale d (fp16), a minimum m (fp16), then its 32 numbers q, 4 bits each "
                "from 0 to 15, number j in the low 4 bits of byte j and number j + 16 in its high 4 bits, standing "
                "for d q + m. Every number of w must come back, through the package's dequantize, within half of "
                "its block's step (the block's largest number minus its smallest, over 15), up to fp16's rounding "
                "of d and m; a block whose numbers are all equal comes back as that number. Do not call gguf's "
                "quantize.",
           hint="View w as (N, K / 32, 32). Per block, m is the smallest number and d = (largest - smallest) / 15; "
                "q = round((w - m) / d), clamped to 0 .. 15, with q = 0 where d is 0. Pack q[..., :16] | "
                "(q[..., 16:] << 4) as uint8. torch.cat((d, m), dim=-1).half().view(torch.uint8) gives the 4 bytes "
                "of d and m; concatenate them with the 16 packed bytes and reshape to (N, K / 32 * 20).")
def check_quantize_q4_1(fn):
    """fn(w (N, K) fp32) -> uint8 (N, K / 32 * 20), the Q4_1 bytes of w.

    Tried on 4 seeded weights, from (1, 32) to (8, 256), one with a block of equal numbers; compared with w after
    the package's dequantize reads the answer back: each number within half of its block's step, (largest -
    smallest) / 15, plus fp16's rounding of d and m. Refuses answers that call gguf's quantize.
    """
    gen = _generator(26)
    for n_rows, k in [(1, 32), (2, 64), (4, 128), (8, 256)]:  # the smallest first
        w = torch.randn(n_rows, k, generator=gen) * (torch.rand(n_rows, 1, generator=gen) * 2 + 0.1) \
            + torch.randn(n_rows, 1, generator=gen)
        if n_rows == 2:
            w[1, 32:] = 0.75  # a block whose 32 numbers are equal: its step is 0
        blocks = w.reshape(n_rows, -1, 32)
        low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
        step = (high - low) / 15
        allowed = (step / 2 + (15 * step + low.abs()) * 2.0 ** -10 + 1e-6).expand_as(blocks).reshape(n_rows, k)
        tried = f"w of shape ({n_rows}, {k})"
        with NonFiniteToInteger() as watch:
            got = _call(fn, (w.clone(),), "quantize_q4_1",
                        refuse=_gguf_quants("quantize", "Q4_1.quantize_blocks"))
        if watch.seen:
            equal = " (row 1, numbers 32 to 63: a block of 32 equal numbers, whose step is 0)" if n_rows == 2 else ""
            raise CheckFailed(f"your quantize_q4_1 on {tried}{equal}: {NON_FINITE}")
        shape = (n_rows, k // 32 * 20)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.uint8 or tuple(got.shape) != shape:
            raise CheckFailed(f"your quantize_q4_1 on {tried}: expected a uint8 tensor of shape {shape}, got "
                              f"{_describe(got)}")
        back = dequantize(got.contiguous(), "Q4_1", (n_rows, k))
        error = (back - w).abs().nan_to_num(nan=float("inf"))
        if (error <= allowed).all():
            continue
        r, c = (int(i) for i in torch.unravel_index((error - allowed).argmax(), error.shape))
        likely = None
        for description, order, swap in [
                ("numbers 2j and 2j + 1 went into byte j; in Q4_1 byte j holds number j (low 4 bits) and number "
                 "j + 16 (high 4 bits)", "interleaved", False),
                ("number j went into the high 4 bits and number j + 16 into the low ones: the low ones come first",
                 "high first", False),
                ("d and m were stored the other way round: a block starts with its scale d, then its minimum m",
                 "low first", True)]:
            d, m, q = _q4_1_read(got, order, swap)
            if ((d * q + m).reshape(n_rows, k) - w).abs().le(allowed).all():
                likely = description
        equal_block = n_rows == 2 and not (error[1, 32:] <= allowed[1, 32:]).all()
        if likely is None and equal_block and (error[:, :32] <= allowed[:, :32]).all():
            likely = "a block whose 32 numbers are all equal (its step is 0) came back wrong"
        stored_d = _q4_1_read(got)[0]
        if likely is None and torch.allclose(stored_d, (high - low) / 16, rtol=2e-3, atol=1e-6) \
                and not torch.allclose(stored_d, step, rtol=2e-3, atol=1e-6):
            likely = "the step was (largest - smallest) / 16: 16 levels have 15 steps between them"
        if likely is None and error.isfinite().all() and (error <= 2 * allowed).all() and (back <= w + allowed).all():
            likely = "the numbers were rounded down, not to the nearest of the block's 16 levels"
        raise CheckFailed(f"your quantize_q4_1 on {tried}: number ({r}, {c}) is {w[r, c].item():.6g} in w but "
                          f"{back[r, c].item():.6g} once dequantised, {error[r, c].item():.3g} away; within its "
                          f"block, at most {allowed[r, c].item():.3g} is allowed"
                          + (f"\nLikely mistake: {likely}" if likely else f"\n{_see_hint('quantize_q4_1')}"))
    print("✓ your quantize_q4_1 gives Q4_1 bytes that dequantise to within half a step of w, on 4 weights.")
