"""Checks for chapter 16, the capstone: the pieces of a Llama-style GQA decoder written by the learner, each checked
against the package's own piece on small random inputs (a tiny random ``LlamaDecoder`` for the whole-model pieces),
and the tokens that the learner's decoder generates with SmolLM2-135M's weights against the package's decoder.

A piece's cache is a dict {"k": (B, g, max_len, d_head), "v": the same, "length": tokens written so far}, as the
chapter's ``empty_cache`` makes it.
"""
import contextlib
import dataclasses
import inspect
import math

import torch
import torch.nn.functional as F

from ..experiments.measure import one_thread
from ..experiments.tensor_memory import PeakTensorBytes
from ..kv_cache import KVCache
from ..llama.capstone import decoder_weights
from ..llama.decoder import DecoderBlock, LlamaDecoder, rms_norm
from ..llama.generate import generate_greedy
from ..llama.loader import LlamaConfig
from ..masks import causal_mask
from ..rope import rotate, rope_cos_sin
from ..sdpa import scaled_dot_product_attention
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _seeded, recorded

# The package's attention, written out and fused, which no piece that computes attention may call.
ATTENTION = ["attention_book.sdpa.scaled_dot_product_attention", "attention_book.grouped_sdpa.grouped_query_sdpa",
             "attention_book.grouped_sdpa.attend", "torch.nn.functional.scaled_dot_product_attention"]
ROPE = ["attention_book.rope.rotate", "attention_book.rope.apply_rope", "attention_book.rope.Rope.__call__",
        "attention_book.rope.rope_cos_sin", "attention_book.rope.rope_frequencies"]
# Copies of K and V for each query head: what the grouped attention (exercise 5) and everything built on it must not
# make. Refused on a tensor of two dimensions or more (K, V, or a view of them); on a vector of positions it runs.


def _on_a_matrix(tensor=None, *args, **kwargs):
    return isinstance(tensor, torch.Tensor) and tensor.dim() >= 2


NO_COPY = [("torch.Tensor.repeat_interleave", "which copies K and V for each query head", _on_a_matrix),
           ("torch.repeat_interleave", "which copies K and V for each query head", _on_a_matrix)]
# Every piece of the package's decoder: what the whole-model pieces must not call (nor the final comparison).
DECODER = ATTENTION + ROPE + NO_COPY + [
    "attention_book.attention_layer.GroupedQueryAttention.forward",
    "attention_book.attention_layer.GroupedQueryAttention.queries",
    "attention_book.attention_layer.GroupedQueryAttention.keys_values",
    "attention_book.kv_cache.KVCache.append", "attention_book.masks.causal_mask",
    "attention_book.llama.decoder.rms_norm", "attention_book.llama.decoder.RMSNorm.forward",
    "attention_book.llama.decoder.SwiGLU.forward", "attention_book.llama.decoder.DecoderBlock.forward",
    "attention_book.llama.decoder.LlamaDecoder.forward", "attention_book.cross_layer.run_layers",
    "attention_book.llama.generate.generate_greedy"]
NEAR_TIE = 1e-3  # top-two logits closer than this: float rounding in another order of operations may swap them


def _empty_cache(B, g, max_len, d_head):
    return {"k": torch.zeros(B, g, max_len, d_head), "v": torch.zeros(B, g, max_len, d_head), "length": 0}


def _tiny_model(seed, n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, d_head=4, d_ff=24, vocab=40):
    """A small random LlamaDecoder (halves layout, norms with random weights) and its weights as the learner gets
    them. Its projections are scaled up, so that attention is sharp and what the blocks add outweighs each token's
    own embedding: the tokens it generates then depend on the attention, positions included."""
    config = LlamaConfig(n_layers, d_model, n_heads, n_kv_heads, d_head, d_ff, vocab, 10_000.0, 1e-5, 64,
                         bos_id=None, eos_id=None)
    with _seeded(seed):
        model = LlamaDecoder(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(torch.rand(p.shape) + 0.5)
            for layer in model.layers:
                for linear in (layer.attention.q_proj, layer.attention.k_proj, layer.attention.v_proj,
                               layer.attention.o_proj, layer.mlp.down):
                    linear.weight.mul_(4.0)
            model.embedding.weight.mul_(0.5)
    return model, decoder_weights(model)


# 1. Attention with a mask (chapter 1)

@_exercise("masked_attention",
           task="given q (..., L, d), k (..., S, d), v (..., S, d_v) and a boolean mask that broadcasts to "
                "(..., L, S), True where a query may attend to a key, return (..., L, d_v): each query's average "
                "of the values, weighted by the softmax over its allowed keys of the dot products scaled by "
                "1/√d; a query with no allowed key gets zeros, never NaN. Do not call the book's or PyTorch's "
                "scaled_dot_product_attention.",
           hint="scores = q @ k.transpose(-2, -1) / math.sqrt(d), shape (..., L, S). scores.masked_fill(~mask, "
                "float('-inf')), then torch.softmax over the last dimension. A row whose keys are all masked is "
                "softmax of all -inf, NaN: set the weights of masked keys to 0 afterwards (masked_fill(~mask, 0.0)). "
                "Return weights @ v.")
def check_masked_attention(fn):
    """fn(q, k, v, mask) -> (..., L, d_v), with fully masked rows zero.

    Tried on 3 seeded inputs, from one query and two keys to (2, 3, 5, 7) with a (B, 1, L, S) mask, each with a
    fully masked row; compared with the book's ``scaled_dot_product_attention`` (computed before the call, which
    refuses it and PyTorch's SDPA).
    """
    gen = _generator(161)
    for lead, L, S, d in [((), 1, 2, 2), ((2,), 3, 4, 4), ((2, 3), 5, 7, 8)]:
        q = torch.randn(*lead, L, d, generator=gen)
        k, v = (torch.randn(*lead, S, d, generator=gen) for _ in range(2))
        mask = torch.rand(*lead[:1], *([1] if len(lead) > 1 else []), L, S, generator=gen) < 0.6
        mask[..., 0, :] = False  # the first query sees no key
        mask[..., -1, 0] = True if L > 1 else False
        expected, _ = scaled_dot_product_attention(q, k, v, mask)
        got = _call(fn, (q, k, v, mask), "masked_attention", refuse=ATTENTION)
        _compare("your masked_attention", f"q {tuple(q.shape)}, k and v {tuple(k.shape)}, mask {tuple(mask.shape)}",
                 expected, got, hint=_see_hint("masked_attention"), mistakes=[
                     ("the mask is used the wrong way round: True means may attend",
                      lambda: scaled_dot_product_attention(q, k, v, ~mask)[0]),
                     ("the scores are not scaled by 1/√d", lambda: scaled_dot_product_attention(q, k, v, mask, 1.0)[0]),
                     ("the scores are scaled by 1/d, not 1/√d",
                      lambda: scaled_dot_product_attention(q, k, v, mask, 1.0 / d)[0]),
                     ("a query with no allowed key must get zeros, not NaN",
                      lambda: expected.masked_fill(~mask.expand(*q.shape[:-1], S).any(-1, keepdim=True),
                                                   float("nan"))),
                     ("a query with no allowed key (here the first query) must get zeros; it got the plain average "
                      "of all the values, as if every key were allowed with equal weight",
                      lambda: expected.masked_fill(~mask.expand(*q.shape[:-1], S).any(-1, keepdim=True), 0.0)
                      + (~mask.expand(*q.shape[:-1], S).any(-1, keepdim=True)) * v.mean(-2, keepdim=True)),
                 ])
    print("✓ your masked_attention equals the book's scaled_dot_product_attention on 3 inputs, fully masked rows "
          "included.")


# 2. Split and merge heads (chapter 3)

@_exercise("to_heads",
           task="given x (B, L, n_heads * d_head), return (B, n_heads, L, d_head), where head i of token t holds "
                "x[b, t, i * d_head:(i + 1) * d_head].",
           hint="x.view(B, L, n_heads, d_head) splits each token's vector into its heads; .transpose(1, 2) then "
                "puts the heads before the tokens.")
def check_to_heads(fn):
    """fn(x (B, L, h d_head), n_heads) -> (B, h, L, d_head).

    Tried on 3 seeded inputs, from (1, 2, 2) to (2, 5, 32); compared with view and transpose.
    """
    gen = _generator(162)
    for B, L, h, d in [(1, 2, 2, 1), (2, 3, 3, 2), (2, 5, 4, 8)]:
        x = torch.randn(B, L, h * d, generator=gen)
        expected = x.view(B, L, h, d).transpose(1, 2)
        _compare("your to_heads", f"x {tuple(x.shape)}, n_heads={h}", expected, _call(fn, (x, h), "to_heads"),
                 hint=_see_hint("to_heads"),
                 mistakes=[("reshaping straight to (B, n_heads, L, d_head) mixes the tokens and the heads: the "
                            "heads of one token are consecutive numbers of its vector",
                            lambda: x.reshape(B, h, L, d))])
    print("✓ your to_heads splits the heads on 3 inputs.")


@_exercise("from_heads",
           task="given y (B, n_heads, L, d_head), return (B, L, n_heads * d_head): the heads of each token side by "
                "side again, head i at [i * d_head:(i + 1) * d_head]; y may be non-contiguous, as attention returns "
                "it.",
           hint="y.transpose(1, 2) is (B, L, n_heads, d_head); .reshape(B, L, n_heads * d_head) joins the heads "
                "(reshape, not view: after a transpose the numbers are no longer in order in memory).")
def check_from_heads(fn):
    """fn(y (B, h, L, d_head)) -> (B, L, h d_head).

    Tried on 3 seeded inputs, two of them non-contiguous as the package's attention returns them, one contiguous as a
    plain product of weights and values returns it; compared with transpose and reshape.
    """
    gen = _generator(163)
    for B, L, h, d in [(1, 2, 2, 1), (2, 3, 3, 2), (2, 5, 4, 8)]:
        y = torch.randn(B, L, h, d, generator=gen).transpose(1, 2)  # (B, h, L, d), as attention returns it
        if h == 3:
            y = y.contiguous()  # as weights @ v returns it
        _compare("your from_heads", f"y {tuple(y.shape)}", y.transpose(1, 2).reshape(B, L, h * d),
                 _call(fn, (y,), "from_heads"), hint=_see_hint("from_heads"),
                 mistakes=[("reshaping straight to (B, L, n_heads * d_head) without moving the heads after the "
                            "tokens", lambda: y.reshape(B, L, h * d))])
    print("✓ your from_heads merges the heads on 3 inputs.")


# 3. A preallocated KV cache (chapter 6)

@_exercise("cache_append",
           task="given a cache dict {'k': (B, g, max_len, d_head), 'v': the same, 'length': n} and this step's k, v "
                "(B, g, L_new, d_head), store them at positions n .. n + L_new - 1 of the cache's own buffers, set "
                "'length' to n + L_new, and return (keys, values), each (B, g, n + L_new, d_head): every token "
                "cached so far, as views of the buffers (no copy); raise a ValueError if they do not fit (n + L_new > "
                "max_len). Do not call torch.cat or the package's KVCache.",
           hint="n = cache['length']; cache['k'][:, :, n:n + L_new] = k (an assignment into a slice writes into the "
                "buffer itself), the same for v; cache['length'] = n + L_new; return cache['k'][:, :, :n + L_new] and "
                "the same for v: slicing makes views, which share the buffer's memory. Before writing, compare n + "
                "L_new with cache['k'].shape[2] and raise ValueError(...) if it is larger.")
def check_cache_append(fn):
    """fn(cache, k, v) -> (keys, values) of every cached token, views of the buffers.

    Tried on 2 seeded caches, each filled by a prefill then two steps (the last one filling it), then given one
    token more, which must raise ValueError; compared with the package's ``KVCache``, with KVCache.append and
    torch.cat refused.
    """
    gen = _generator(163)
    for B, g, d, steps in [(1, 1, 2, (2, 1, 1)), (2, 3, 4, (3, 1, 2))]:
        max_len = sum(steps)
        reference, cache = KVCache(B, g, d, max_len), _empty_cache(B, g, max_len, d)
        buffers = cache["k"], cache["v"]
        for L_new in steps:
            k, v = (torch.randn(B, g, L_new, d, generator=gen) for _ in range(2))
            expected_k, expected_v = reference.append(k, v)
            n = cache["length"]
            tried = f"a cache of (B, g, max_len, d_head) = {(B, g, max_len, d)} holding {n} tokens, k and v " \
                    f"{tuple(k.shape)}"
            got = _call(fn, (cache, k, v), "cache_append",
                        refuse=["attention_book.kv_cache.KVCache.append",
                                ("torch.cat", "which the exercise says not to call")])
            if not (isinstance(got, tuple) and len(got) == 2):
                raise CheckFailed(f"cache_append on {tried}: expected a pair (keys, values), got {type(got).__name__}")
            if cache["k"] is not buffers[0] or cache["v"] is not buffers[1]:
                raise CheckFailed(f"cache_append on {tried}: cache['k'] or cache['v'] is no longer the buffer the "
                                  "cache was made with; the cache must keep its preallocated buffers")
            if cache["length"] != n + L_new:
                raise CheckFailed(f"cache_append on {tried}: cache['length'] is {cache['length']!r} afterwards, "
                                  f"expected {n + L_new}")
            for name, expected, returned, buffer in (("keys", expected_k, got[0], buffers[0]),
                                                     ("values", expected_v, got[1], buffers[1])):
                if isinstance(returned, torch.Tensor) and returned.dim() == 4 and returned.shape[2] == max_len \
                        and max_len != n + L_new:
                    raise CheckFailed(f"cache_append on {tried}: the {name} returned have shape "
                                      f"{tuple(returned.shape)}, expected {tuple(expected.shape)}\nLikely mistake: "
                                      f"returning the whole buffer, not only the {n + L_new} tokens cached so far")
                _compare(f"the {name} cache_append returned", tried, expected, returned,
                         hint=_see_hint("cache_append"))
                if returned.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr():
                    raise CheckFailed(f"cache_append on {tried}: the {name} returned are a copy, not a view of the "
                                      "cache's buffer")
            _compare("the cache's buffer 'k' after cache_append", tried, reference.k, cache["k"],
                     hint=_see_hint("cache_append"))
        k, v = (torch.randn(B, g, 1, d, generator=gen) for _ in range(2))
        tried = f"a full cache of (B, g, max_len, d_head) = {(B, g, max_len, d)}, k and v {tuple(k.shape)}"
        try:
            _call(fn, (cache, k, v), "cache_append", refuse=["attention_book.kv_cache.KVCache.append",
                                                             ("torch.cat", "which the exercise says not to call")])
        except ValueError:
            pass
        else:
            raise CheckFailed(f"cache_append on {tried}: it raised no ValueError; the token does not fit, and a "
                              "slice past the end of a buffer is shorter than asked, so nothing says it was lost")
    print("✓ your cache_append fills the preallocated buffers in place and returns views of them, as KVCache does, "
          "on 2 caches.")


# 4. The GQA fold, causal, without copying K/V (chapter 8)

def _grouped_reference(q, k, v):
    """Causal GQA (bottom-right) by repeating K/V, for the expected values and the mistakes."""
    group, L, S = q.shape[1] // k.shape[1], q.shape[2], k.shape[2]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return scaled_dot_product_attention(q, k, v, causal_mask(L, S))[0]


def _folded_as_consecutive(q, k, v, first):
    """The fold with a causal mask over its (h // g) L rows as if they were consecutive queries, the first at
    position ``first(rows, L, S)`` (a mistake)."""
    (B, h, L, d), (g, S) = q.shape, k.shape[1:3]
    rows = (h // g) * L
    positions = first(rows, L, S) + torch.arange(rows)
    out, _ = scaled_dot_product_attention(q.reshape(B, g, rows, d), k, v, torch.arange(S) <= positions[:, None])
    return out.reshape(B, h, L, d)


@_exercise("grouped_causal_attention",
           task="given q (B, h, L, d_head) and k, v (B, g, S, d_head), with g dividing h and L <= S, the L queries "
                "being the last L of the S tokens, return (B, h, L, d_head): causal attention (query i sees keys "
                "0 .. S - L + i) in which query head i reads K/V head i // (h // g), computed with your "
                "masked_attention and without copying k and v for each query head (no repeat_interleave, no "
                "SDPA).",
           hint="Fold the h // g query heads of each group into the query dimension: q.reshape(B, g, (h // g) * L, "
                "d_head) puts head j * (h // g) + m at rows m * L .. m * L + L - 1 of group j, and each group then "
                "meets its own K/V head once. Folded row m * L + i is query i: its position is S - L + i, so the "
                "mask is (S - L + i >= key position) for i = torch.arange(L).repeat(h // g). Call "
                "masked_attention(folded, k, v, mask) and reshape the result back to (B, h, L, d_head).",
           idea="Chapter 8's fold, with one more thing to carry: the mask. Once a group's query heads are stacked as "
                "rows, each row still belongs to one of the L queries, at that query's position; the mask must be "
                "built from those positions, not from the row numbers.")
def check_grouped_causal_attention(fn):
    """fn(q (B, h, L, d), k, v (B, g, S, d)) -> (B, h, L, d), causal, grouped, without copying K/V.

    Tried on 4 seeded inputs (MQA, GQA and MHA, L = 1 and L = S, a prefill into a longer cache), the last one also
    measured (PeakTensorBytes): the new tensors it holds at once must stay below the bytes of k and v themselves,
    where one copy of them per query head takes h // g times as many; compared with the book's attention over K/V
    repeated by repeat_interleave (computed before the call, which refuses it and the package's attention).
    """
    gen = _generator(164)
    refuse = ATTENTION + NO_COPY
    for B, h, g, L, S, d in [(1, 2, 1, 1, 3, 2), (1, 4, 2, 3, 3, 4), (2, 6, 3, 2, 5, 4), (1, 8, 2, 2, 96, 32)]:
        q = torch.randn(B, h, L, d, generator=gen)
        k, v = (torch.randn(B, g, S, d, generator=gen) for _ in range(2))
        expected = _grouped_reference(q, k, v)
        tried = f"q {tuple(q.shape)}, k and v {tuple(k.shape)}"
        with torch.no_grad(), PeakTensorBytes() as counter:
            got = _call(fn, (q, k, v), "grouped_causal_attention", refuse=refuse)
        _compare("your grouped_causal_attention", tried, expected, got, hint=_see_hint("grouped_causal_attention"),
                 atol=1e-5, mistakes=[
                     ("the causal mask is aligned top-left (query i sees keys 0 .. i); the L queries are the last L "
                      "of the S tokens",
                      lambda: _grouped_reference(q, k, v) if L == S else scaled_dot_product_attention(
                          q, k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1),
                          torch.ones(L, S, dtype=torch.bool).tril())[0]),
                     ("query head i reads K/V head i % g (round-robin), not i // (h // g)",
                      lambda: scaled_dot_product_attention(q, k.repeat(1, h // g, 1, 1), v.repeat(1, h // g, 1, 1),
                                                           causal_mask(L, S))[0]),
                     ("no causal mask: every query sees every key",
                      lambda: scaled_dot_product_attention(q, k.repeat_interleave(h // g, 1),
                                                           v.repeat_interleave(h // g, 1))[0]),
                     *[("the mask reads the (h // g) · L folded rows of a group as that many consecutive queries; "
                        "each query head's L rows are the same L positions again",
                        lambda first=first: _folded_as_consecutive(q, k, v, first))
                       for first in (lambda rows, L, S: S - rows, lambda rows, L, S: S - L)],
                 ])
        copies = (h // g) * (k.nbytes + v.nbytes)
        if S >= 64 and counter.peak >= k.nbytes + v.nbytes:
            raise CheckFailed(f"your grouped_causal_attention on {tried}: it held {counter.peak:,} bytes of new "
                              f"tensors at once, as much as k and v themselves ({k.nbytes + v.nbytes:,} bytes); "
                              f"copying them for each query head takes {copies:,}, while the output and the "
                              f"scores take {got.nbytes + B * h * L * S * 4:,}: the exercise asks for no copy of k "
                              "and v. A matmul whose operands broadcast copies too: a (B, g, h // g, L, d_head) query "
                              "against k[:, :, None] (B, g, 1, S, d_head) expands k to one copy per query head "
                              "before multiplying")
    print("✓ your grouped_causal_attention equals causal attention over repeated K/V on 4 inputs, MQA and MHA "
          "included, without copying K/V.")


# 5. RoPE in the halves layout, with an offset (chapter 11)

@_exercise("rope_halves",
           task="given x (B, heads, L, d_head), start (an int) and base, return x rotated by RoPE in the halves "
                "layout (coordinate i pairs with i + d_head/2) as if its tokens sat at positions start .. start + "
                "L - 1, with theta_i = base ** (-2i / d_head) computed in float32; same shape. Do not call the "
                "functions of attention_book.rope.",
           hint="Pair i (i < d_head/2) turns by the angle position × theta_i, where theta_i is base to the power "
                "−2i/d_head, one value per pair. The angles form a table with one row per token (its position, "
                "from start on) and one column per pair: positions times thetas, an outer product. Cut each "
                "vector into its first half a and its second half b; turning the pair (a, b) by an angle α gives "
                "(a cos α − b sin α, a sin α + b cos α). Put the two new halves back side by side, in the same "
                "order.")
def check_rope_halves(fn):
    """fn(x (B, heads, L, d_head), start, base) -> the same shape, rotated in the halves layout.

    Tried on 3 seeded inputs, with start 0, 5 and 1,000 and bases 10,000 and 100,000 (SmolLM2's); compared with
    attention_book.rope.rotate (computed before the call, which refuses the module's functions).
    """
    gen = _generator(165)
    for B, heads, L, d, start, base in [(1, 1, 1, 2, 0, 10_000.0), (1, 2, 3, 4, 5, 10_000.0),
                                        (2, 3, 4, 16, 1000, 100_000.0)]:
        x = torch.randn(B, heads, L, d, generator=gen)

        def rotated(first, layout="halves", sign=1.0, width=d):
            cos, sin = rope_cos_sin(torch.arange(first, first + L), width, base)  # width 2d: theta_i = base^(-i/d)
            return rotate(x, cos[..., :d // 2], sign * sin[..., :d // 2], layout)

        expected = rotated(start)
        got = _call(fn, (x, start, base), "rope_halves", refuse=[(name, "which the exercise says not to call")
                                                                 for name in ROPE])
        _compare("your rope_halves", f"x {tuple(x.shape)}, start={start}, base={base:g}", expected, got,
                 hint=_see_hint("rope_halves"), atol=1e-4, mistakes=[
                     ("the positions start at 0, not at start", lambda: rotated(0)),
                     ("coordinates 2i and 2i + 1 are paired (the pairs layout); here i pairs with i + d_head/2",
                      lambda: rotated(start, "pairs")),
                     ("each pair turns the wrong way (clockwise)", lambda: rotated(start, sign=-1.0)),
                     ("theta_i = base ** (-i / d_head): the exponent is -2i / d_head",
                      lambda: rotated(start, width=2 * d)),
                 ])
    print("✓ your rope_halves equals the book's rotate in the halves layout on 3 inputs, from positions 0, 5 and "
          "1,000.")


# 6. RMSNorm and 7. SwiGLU (chapter 12)

@_exercise("rms_normalise",
           task="given x (..., d_model), weight (d_model,) and eps, return x with each vector divided by its root "
                "mean square over the last dimension (eps added inside the root), times weight; same shape. Do not "
                "call F.rms_norm or the package's rms_norm.",
           hint="x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.")
def check_rms_normalise(fn):
    """fn(x, weight, eps) -> RMSNorm of x, the shape of x.

    Tried on 3 seeded inputs, eps 1e-1 and 1e-5; compared with the package's rms_norm (computed before the call,
    which refuses it and F.rms_norm).
    """
    for shape, eps in [((1, 4), 1e-1), ((3, 8), 1e-5), ((2, 5, 64), 1e-5)]:
        gen = _generator(166 + sum(shape))
        x = torch.randn(shape, generator=gen) * 3 + 0.5
        weight = torch.rand(shape[-1], generator=gen) + 0.5
        expected = rms_norm(x, weight, eps)
        got = _call(fn, (x, weight, eps), "rms_normalise",
                    refuse=["attention_book.llama.decoder.rms_norm", "attention_book.llama.decoder.RMSNorm.forward",
                            ("torch.nn.functional.rms_norm", "which the exercise says not to call")])
        _compare("your rms_normalise", f"x of shape {shape}, eps={eps:g}", expected, got,
                 hint=_see_hint("rms_normalise"), mistakes=[
                     ("subtracting the mean first: that is LayerNorm", lambda: F.layer_norm(x, (shape[-1],), weight,
                                                                                            eps=eps)),
                     ("leaving out weight", lambda: rms_norm(x, torch.ones_like(weight), eps)),
                     ("adding eps outside the square root",
                      lambda: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight),
                 ])
    print("✓ your rms_normalise equals the package's rms_norm on 3 inputs.")


def _swiglu(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


@_exercise("swiglu_mlp",
           task="given x (..., d_model) and the MLP's weights as nn.Linear stores them, w_gate and w_up "
                "(d_ff, d_model) and w_down (d_model, d_ff), return (..., d_model): the up projection, gated element "
                "by element by SiLU of the gate projection, projected back by w_down. Do not call the package's "
                "SwiGLU.",
           hint="F.linear(x, w) is x @ w.T. F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down).")
def check_swiglu_mlp(fn):
    """fn(x, w_gate, w_up, w_down) -> (..., d_model).

    Tried on 3 seeded inputs, (d_model, d_ff) from (2, 3) to (32, 48); compared with F.linear and F.silu written
    out (the package's SwiGLU refuses).
    """
    for shape, d_ff in [((2,), 3), ((4, 8), 12), ((2, 3, 32), 48)]:
        d_model = shape[-1]
        gen = _generator(167 + d_ff)
        x = torch.randn(shape, generator=gen)
        w_gate, w_up = (torch.randn(d_ff, d_model, generator=gen) / math.sqrt(d_model) for _ in range(2))
        w_down = torch.randn(d_model, d_ff, generator=gen) / math.sqrt(d_ff)
        expected = _swiglu(x, w_gate, w_up, w_down)
        got = _call(fn, (x, w_gate, w_up, w_down), "swiglu_mlp",
                    refuse=["attention_book.llama.decoder.SwiGLU.forward"])
        _compare("your swiglu_mlp", f"x of shape {shape}, d_ff={d_ff}", expected, got,
                 hint=_see_hint("swiglu_mlp"), mistakes=[
                     ("SiLU applied to the up projection instead of the gate",
                      lambda: _swiglu(x, w_up, w_gate, w_down)),
                     ("no SiLU on the gate", lambda: F.linear(F.linear(x, w_gate) * F.linear(x, w_up), w_down)),
                 ])
    print("✓ your swiglu_mlp is right on 3 inputs.")


# 8. The attention sublayer, 9. the decoder block (chapters 3, 8, 11, 12)

def _steps(gen, B, L0, d_model):
    """The inputs of a prefill of L0 tokens, then one decode step, then a chunk of 2 tokens."""
    return [torch.randn(B, L, d_model, generator=gen) for L in (L0, 1, 2)]


def _mistaken_keys(block, expected_of, xs, n, late=False):
    """The keys of the first n tokens of xs as two mistakes cache them: not rotated, or (``late``) each chunk rotated
    from the cache's length after its append, its own length too far."""
    keys, start = [], 0
    B, d_head = xs[0].shape[0], block.attention.d_head
    for x in xs:
        a = block.attention_norm(x) if expected_of is _block_forward else x  # the sublayer's input
        k = block.attention.k_proj(a).view(B, x.shape[1], -1, d_head).transpose(1, 2)  # (B, g, L, d_head)
        if late:
            cos, sin = rope_cos_sin(torch.arange(start + x.shape[1], start + 2 * x.shape[1]), d_head,
                                    block.attention.rope.base)
            k = rotate(k, cos, sin)
        keys.append(k)
        start += x.shape[1]
    return torch.cat(keys, dim=2)[:, :, :n]


def _block_forward(block, x, cache):
    return DecoderBlock.forward(block, x, cache)


def _sublayer(block, x, cached, rope_start=None, top_left=False, only_new=False):
    """The attention sublayer of block on x (already its input) after the keys and values ``cached`` (k, v, length),
    written out with the package's pieces, for the mistakes: RoPE from position ``rope_start`` (None: at the true
    positions), the causal mask aligned top-left if ``top_left``, and x's queries attending to x's keys alone (the
    cache written, never read) if ``only_new``."""
    attention, (k_cached, v_cached, n) = block.attention, cached
    B, L, _ = x.shape
    h, g, d_head = attention.n_heads, attention.n_kv_heads, attention.d_head
    q = attention.q_proj(x).view(B, L, h, d_head).transpose(1, 2)
    k, v = (proj(x).view(B, L, g, d_head).transpose(1, 2) for proj in (attention.k_proj, attention.v_proj))
    start = n if rope_start is None else rope_start
    cos, sin = rope_cos_sin(torch.arange(start, start + L), d_head, attention.rope.base)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    if not only_new:
        k, v = torch.cat((k_cached[:, :, :n], k), dim=2), torch.cat((v_cached[:, :, :n], v), dim=2)
    S = k.shape[2]
    mask = torch.ones(L, S, dtype=torch.bool).tril() if top_left else causal_mask(L, S)
    out, _ = scaled_dot_product_attention(q, k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1), mask)
    return attention.o_proj(out.transpose(1, 2).reshape(B, L, h * d_head))


def _sublayer_mistakes(block, x, cached):
    n, L = cached[2], x.shape[1]
    return [("RoPE rotated x's queries and keys as if x's first token sat at position 0, whatever the cache held "
             "before it", lambda: _sublayer(block, x, cached, rope_start=0)),
            ("RoPE rotated x's queries and keys from the cache's length after x was appended: x's first token sits at "
             "the length before", lambda: _sublayer(block, x, cached, rope_start=n + L)),
            ("x's queries attended to x's own keys only: the keys and values cached before x were never read",
             lambda: _sublayer(block, x, cached, only_new=True)),
            ("the causal mask is aligned top-left (query i sees keys 0 .. i); x's L queries are the last L of the "
             "cached tokens and x's", lambda: _sublayer(block, x, cached, top_left=True))]


def _block_mistakes(block, x, cached):
    def post_norm():  # the norms after the sums: norm(x + attention(x)), then norm(h + mlp(h))
        h = block.attention_norm(x + _sublayer(block, x, cached))
        return block.mlp_norm(h + block.mlp(h))
    def normalised_residual():  # the residual stream carries the normalised input: a + attention(a)
        a = block.attention_norm(x)
        h = a + _sublayer(block, a, cached)
        return h + block.mlp(block.mlp_norm(h))
    return [("the norms are applied after the sums (post-norm: norm(x + attention(x))); this block is pre-norm: "
             "each sublayer reads the normalised input and its output is added to the input itself", post_norm),
            ("the attention's output was added to the normalised x; it is added to x itself, which the norm leaves "
             "as it is", normalised_residual)]


def _check_layer_piece(fn, exercise, what, expected_of, seeds, mistakes_of=None):
    """Run fn(x, layer, cache, config) on a tiny model's block 0 through a prefill and two steps with one cache,
    against the package's block (expected_of(block, x, cache)) through a KVCache; after each call, the keys and
    values in the cache must be the package's (the keys rotated at their positions). ``mistakes_of(block, x,
    (k, v, length) cached before the call)``: the named mistakes of the output."""
    for seed, B, L0 in seeds:
        model, weights = _tiny_model(seed)
        block, layer, config = model.layers[0], weights.layers[0], weights.config
        gen = _generator(seed)
        xs = _steps(gen, B, L0, config.d_model)
        max_len = sum(x.shape[1] for x in xs)
        reference = block.attention.new_cache(B, max_len)
        with torch.no_grad():
            expected = [expected_of(block, x, reference) for x in xs]
        cache = _empty_cache(B, config.n_kv_heads, max_len, config.d_head)
        for x, wanted in zip(xs, expected, strict=True):
            tried = (f"x {tuple(x.shape)} with {cache['length']} tokens cached, a random block with h="
                     f"{config.n_heads}, g={config.n_kv_heads}, d_head={config.d_head}")
            cached = (cache["k"].clone(), cache["v"].clone(), cache["length"])
            with torch.no_grad():
                got = _call(fn, (x, layer, cache, config), exercise, refuse=DECODER)
            with torch.no_grad():
                mistakes = mistakes_of(block, x, cached) if mistakes_of else []
                _compare(what, tried, wanted, got, hint=_see_hint(exercise), atol=1e-5, mistakes=mistakes)
            n = cache["length"]
            if not isinstance(n, int) or not 0 < n <= max_len:
                raise CheckFailed(f"{what} on {tried}: afterwards the cache's 'length' is {n!r}")
            with torch.no_grad():
                unrotated = _mistaken_keys(block, expected_of, xs, n)
                late = _mistaken_keys(block, expected_of, xs, n, late=True)
            for name, buffer, reference_buffer, mistakes in (
                    ("keys", cache["k"], reference.k, [("the cache holds the keys before RoPE rotates them; the "
                                                        "keys are to be cached rotated, at their positions",
                                                        lambda unrotated=unrotated: unrotated),
                                                       ("the keys were rotated from the cache's length after x was "
                                                        "appended: x's first token sits at the length before",
                                                        lambda late=late: late)]),
                    ("values", cache["v"], reference.v, [])):
                _compare(f"{what}: the {name} in the cache", f"{tried} (its first {n} positions, afterwards)",
                         reference_buffer[:, :, :n], buffer[:, :, :n], hint=_see_hint(exercise), atol=1e-5,
                         mistakes=mistakes)
        if cache["length"] != max_len:
            raise CheckFailed(f"{what}: after {max_len} tokens the cache's 'length' is {cache['length']!r}")


@_exercise("attention_sublayer",
           task="given x (B, L, d_model), already normalised, one block's weights `layer` (w_q, w_k, w_v, w_o), its "
                "cache dict holding the tokens before x's, and config (n_heads, n_kv_heads, d_head, rope_base), "
                "return (B, L, d_model): the block's grouped-query self-attention of x's tokens over every cached "
                "token and themselves, causal, with queries and keys rotated by RoPE at their positions, x's keys "
                "and values appended to the cache. Use your own pieces; do not call the package's layer, cache, "
                "RoPE or attention, nor repeat_interleave (it copies K and V for each query head).",
           hint="start = cache['length'], the position of x's first token. q = to_heads(x @ layer.w_q.T, "
                "config.n_heads), k and v the same with w_k, w_v and config.n_kv_heads. Rotate q and k with "
                "rope_halves(..., start, config.rope_base); then k, v = cache_append(cache, k, v); out = "
                "grouped_causal_attention(q, k, v); return from_heads(out) @ layer.w_o.T.",
           idea="This piece is mostly plumbing of your earlier pieces, in order: project, split into heads, rotate "
                "queries and keys at the positions the cache says come next, append to the cache, attend with the "
                "fold, merge, project out. The order of the rotation and the append matters.")
def check_attention_sublayer(fn):
    """fn(x, layer, cache, config) -> (B, L, d_model), appending x's keys and values to cache.

    Tried on 2 tiny random blocks, each through a prefill, a decode step and a 2-token chunk with one cache;
    compared with the package's GroupedQueryAttention with Rope and KVCache (computed before the calls, which
    refuse every piece of the package's decoder, and repeat_interleave). Names RoPE from position 0 and a top-left
    causal mask.
    """
    _check_layer_piece(fn, "attention_sublayer", "your attention_sublayer",
                       lambda block, x, cache: block.attention(x, is_causal=True, cache=cache)[0],
                       [(1681, 1, 2), (1682, 2, 4)], _sublayer_mistakes)
    print("✓ your attention_sublayer equals the package's GroupedQueryAttention (RoPE, KVCache) through a prefill "
          "and two steps, on 2 random blocks.")


@_exercise("decoder_block",
           task="given x (B, L, d_model), one block's weights `layer` (attention_norm, w_q, w_k, w_v, w_o, mlp_norm, "
                "w_gate, w_up, w_down), its cache dict and config (also rms_eps), return (B, L, d_model): a "
                "pre-norm block, chapter 3's picture: attention of the normalised x added to x, then the MLP of "
                "the normalised result added to it. Use your own pieces.",
           hint="h = x + attention_sublayer(rms_normalise(x, layer.attention_norm, config.rms_eps), layer, cache, "
                "config); return h + swiglu_mlp(rms_normalise(h, layer.mlp_norm, config.rms_eps), layer.w_gate, "
                "layer.w_up, layer.w_down).")
def check_decoder_block(fn):
    """fn(x, layer, cache, config) -> (B, L, d_model), one pre-norm block.

    Tried on 2 tiny random blocks through a prefill and two steps with one cache; compared with the package's
    DecoderBlock (which refuses, with every piece of the package's decoder, and repeat_interleave). Names post-norm.
    """
    _check_layer_piece(fn, "decoder_block", "your decoder_block",
                       _block_forward, [(1691, 1, 2), (1692, 2, 4)], _block_mistakes)
    print("✓ your decoder_block equals the package's DecoderBlock through a prefill and two steps, on 2 random "
          "blocks.")


# 10. The forward over all layers, 11. the greedy loop (chapters 6 and 12)

@_exercise("decoder_logits",
           task="given ids (B, L), the decoder's weights (embedding (V, d_model), layers, norm, config) and one "
                "cache dict per layer holding the tokens before ids, return (B, V): the logits of the token that "
                "follows the last of ids. The output projection is the embedding (tied). Use your decoder_block.",
           hint="x = weights.embedding[ids], (B, L, d_model); for each layer and its cache, x = decoder_block(x, "
                "layer, cache, weights.config); then rms_normalise(x[:, -1], weights.norm, config.rms_eps) @ "
                "weights.embedding.T.")
def check_decoder_logits(fn):
    """fn(ids, weights, caches) -> (B, V), the logits after the last of ids.

    Tried on 3 tiny random decoders, each through a prefill, a decode step and a 2-token chunk; compared with the
    package's LlamaDecoder (last_only) with its caches, computed before (it refuses during the calls). The last
    one has a vocabulary of 4,096 tokens and a prefill of 16, measured (PeakTensorBytes): the new tensors the
    prefill holds at once must stay below the bytes of a (B, L, V) tensor (the logits of all 16 positions, which the
    exercise does not ask for, or a one-hot of the ids).
    """
    for seed, B, L0, vocab in [(1701, 1, 2, 40), (1702, 2, 5, 40), (1703, 1, 16, 4096)]:
        model, weights = _tiny_model(seed, vocab=vocab)
        config = weights.config
        gen = _generator(seed)
        steps = [torch.randint(config.vocab_size, (B, L), generator=gen) for L in (L0, 1, 2)]
        max_len = L0 + 3
        references = model.new_caches(B, max_len)
        with torch.no_grad():
            expected = [model(ids, references, last_only=True)[:, -1] for ids in steps]
        caches = [_empty_cache(B, config.n_kv_heads, max_len, config.d_head) for _ in range(config.n_layers)]
        so_far = 0
        for ids, wanted in zip(steps, expected, strict=True):
            tried = f"ids {tuple(ids.shape)} with {caches[0]['length']} tokens cached, a random 2-layer decoder"
            measured = vocab >= 1024 and ids.shape[1] > 1  # the big vocabulary's prefill
            with torch.no_grad(), PeakTensorBytes() if measured else contextlib.nullcontext() as counter:
                got = _call(fn, (ids, weights, caches), "decoder_logits", refuse=DECODER)
            so_far += ids.shape[1]
            lengths = [c["length"] for c in caches]
            if isinstance(got, torch.Tensor) and got.shape == wanted.shape and lengths != [so_far] * len(caches):
                raise CheckFailed(f"your decoder_logits on {tried}: afterwards the caches' 'length' (one per layer) "
                                  f"are expected to be {[so_far] * len(caches)}, got {lengths}: every layer keeps its "
                                  "own cache of the tokens so far")
            _compare("your decoder_logits", tried, wanted, got, hint=_see_hint("decoder_logits"), atol=1e-4)
            every_position = ids.numel() * config.vocab_size * wanted.element_size()  # (B, L, V) logits
            if measured and counter.peak >= every_position:
                raise CheckFailed(f"your decoder_logits on {tried} and V={vocab:,}: it held {counter.peak:,} bytes "
                                  f"of new tensors at once, at least the size of a (B, L, V) tensor "
                                  f"({every_position:,} bytes: the logits of all {ids.shape[1]} positions, or a "
                                  f"one-hot of the ids), while the logits asked for, those of the last position, "
                                  f"take {got.nbytes:,}")
    print("✓ your decoder_logits equals the package's LlamaDecoder through a prefill and two steps, on 3 random "
          "decoders, computing the logits of the last position only.")


def _compare_tokens(what, tried, expected, got, logits_at):
    """Raise CheckFailed unless the token ids ``got`` (1, L0 + n) equal ``expected``, or first differ where the
    package's two most likely tokens are a near-tie and ``got`` took the second (``logits_at(tokens)``: the
    package's logits (V,) after ``tokens``). Return None, or a sentence that says where such a tie was accepted."""
    if not (isinstance(got, torch.Tensor) and got.dim() == 2 and got.shape[0] == 1 and got.dtype == torch.long):
        shown = f"{got.dtype} of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else type(got).__name__
        raise CheckFailed(f"{what} on {tried}: expected token ids of shape (1, L0 + n), dtype torch.int64, got "
                          f"{shown}")
    n = min(got.shape[1], expected.shape[1])
    differ = (got[0, :n] != expected[0, :n]).nonzero()
    if len(differ) == 0:
        if got.shape == expected.shape:
            return None
        raise CheckFailed(f"{what} on {tried}: the tokens agree for {n} positions, then one sequence stops: "
                          f"expected {expected.shape[1]} tokens in all (the prompt included), got {got.shape[1]}")
    first = int(differ[0])
    mine, theirs = int(got[0, first]), int(expected[0, first])
    logits = logits_at(expected[:, :first])  # (V,): the package's prediction at the first difference
    top, ids = logits.topk(2)
    if mine == int(ids[1]) and float(top[0] - top[1]) < NEAR_TIE:
        return (f"the tokens agree up to position {first}, where the package's two most likely tokens ({theirs} "
                f"and {mine}) lie {float(top[0] - top[1]):.1e} apart, a near-tie that float rounding may swap; "
                "what follows it was not compared")
    raise CheckFailed(f"{what} on {tried}: the tokens first differ at position {first} (the prompt included): "
                      f"expected token id {theirs}, got {mine} (the package's logits for the two: "
                      f"{float(logits[theirs]):.4f} and {float(logits[mine]):.4f})")


@contextlib.contextmanager
def _watching_decoder_logits(fn):
    """While active, the ``decoder_logits`` that ``fn`` (the learner's greedy_generate) calls by name, from its
    globals, records each call: (the shape of its ids, its list of caches, each cache's 'length' then). Yields the
    list of records, or None where fn's globals hold no decoder_logits (fn is not a notebook's function, or wraps
    one without saying so by ``__wrapped__``): then nothing is watched."""
    space = getattr(inspect.unwrap(fn), "__globals__", {})
    inner = space.get("decoder_logits")
    calls = []
    if not callable(inner):
        yield None
        return

    def decoder_logits(*args, **kwargs):
        ids = args[0] if args else kwargs.get("ids")
        caches = list(args[2] if len(args) > 2 else kwargs.get("caches", []))
        lengths = [c.get("length") if isinstance(c, dict) else None for c in caches]
        calls.append((tuple(ids.shape) if isinstance(ids, torch.Tensor) else ids, caches, lengths))
        return inner(*args, **kwargs)

    decoder_logits.__name__ = getattr(inner, "__name__", "decoder_logits")
    space["decoder_logits"] = decoder_logits
    try:
        yield calls
    finally:
        space["decoder_logits"] = inner


def _check_the_loop(what, tried, calls, L0, n_new, n):
    """Raise CheckFailed unless ``calls`` (``_watching_decoder_logits``'s records) show the cached loop that the
    exercise asks for: the whole prompt (1, L0) in the first call, then only (1, 1) calls, all with the caches of
    the first call, made for L0 + n_new tokens and empty before it, at most one call per new token after the
    first. ``calls`` None: nothing was watched, nothing is checked."""
    if calls is None:
        return
    if not calls:
        raise CheckFailed(f"{what} on {tried}: it never calls decoder_logits; the exercise is to generate with your "
                          "decoder_logits")
    first_ids, caches, lengths = calls[0]
    if first_ids != (1, L0):
        raise CheckFailed(f"{what} on {tried}: its first call of decoder_logits has ids of shape {first_ids}, "
                          f"expected the whole prompt, (1, {L0}), in one call (the prefill)")
    if any(length != 0 for length in lengths):
        raise CheckFailed(f"{what} on {tried}: the caches of its first call of decoder_logits already hold tokens "
                          f"(their 'length' is {lengths}); the prefill starts from empty caches")
    for number, (ids, theirs, _) in enumerate(calls[1:], start=2):
        if ids != (1, 1):
            raise CheckFailed(f"{what} on {tried}: call {number} of decoder_logits has ids of shape {ids}; after "
                              "the prefill, each call is to get one token, (1, 1), the caches holding those "
                              "before it")
        if len(theirs) != len(caches) or any(a is not b for a, b in zip(theirs, caches, strict=False)):
            raise CheckFailed(f"{what} on {tried}: call {number} of decoder_logits gets other cache dicts than "
                              "the prefill's; the caches are to be made once, before the prompt, and kept through "
                              "every step")
    sizes = {tuple(c["k"].shape) for c in caches if isinstance(c, dict) and isinstance(c.get("k"), torch.Tensor)}
    if any(size[2] != L0 + n_new for size in sizes):
        raise CheckFailed(f"{what} on {tried}: its caches' buffers have shape {sorted(sizes)}, expected room for "
                          f"L0 + n_new = {L0 + n_new} tokens (their dimension 2)")
    if len(calls) > n + 1:
        raise CheckFailed(f"{what} on {tried}: it calls decoder_logits {len(calls)} times for {n} new tokens; one "
                          "call gives the logits of one new token")


@_exercise("greedy_generate",
           task="given prompt (1, L0) of token ids, the decoder's weights and n_new, return (1, L0 + n): the prompt "
                "followed by the n <= n_new tokens that greedy decoding picks one by one (each the most likely "
                "next token), stopping after config.eos_id if it comes; one cache dict per layer, each allocated "
                "once for L0 + n_new tokens; the prompt in one call, then one token per call. Use your "
                "decoder_logits and empty_cache.",
           hint="Before anything else, make one cache per layer, each with room for the prompt and every new "
                "token. The prefill is one call of decoder_logits on the whole prompt: it fills the caches and "
                "gives the logits of the first new token. Then, at each step, the new token is the index of the "
                "largest logit, kept as a (1, 1) tensor of ids; add it to the output and stop if it is the "
                "end-of-turn token (or the last one asked for); otherwise feed that token alone to decoder_logits, "
                "with the same caches, which already hold every token before it. At the end, put the prompt and "
                "the new tokens side by side along the token dimension.",
           idea="One cache per layer, made once and big enough for everything; one call for the whole prompt; then "
                "one call per new token, feeding only that token. Stop when the model produces the end-of-turn token, "
                "keeping it.")
def check_greedy_generate(fn):
    """fn(prompt (1, L0), weights, n_new) -> (1, L0 + n).

    Tried on 2 tiny random decoders, one of them with an eos token that it reaches before n_new; compared with the
    package's generate_greedy, token for token, a near-tie of the package's logits excepted. The calls of the
    learner's decoder_logits are watched (``_check_the_loop``): the whole prompt once, then one token per call,
    always with the caches of the first call, made for L0 + n_new tokens.
    """
    for seed, L0, n_new, stop_at in [(1711, 2, 5, None), (1712, 4, 8, 3)]:
        model, weights = _tiny_model(seed)
        gen = _generator(seed)
        prompt = torch.randint(weights.config.vocab_size, (1, L0), generator=gen)
        if stop_at is not None:  # an eos token that greedy decoding reaches at step stop_at
            eos = int(generate_greedy(model, prompt, stop_at + 1, stop_at_eos=False)[0, -1])
            model.config = weights.config = dataclasses.replace(weights.config, eos_id=eos)
        expected = generate_greedy(model, prompt, n_new)
        tried = f"prompt {tuple(prompt.shape)}, n_new={n_new}, a random 2-layer decoder" + (
            f" whose eos token comes after {expected.shape[1] - L0} tokens" if stop_at is not None else "")
        with torch.no_grad(), _watching_decoder_logits(fn) as calls:
            got = _call(fn, (prompt, weights, n_new), "greedy_generate", refuse=DECODER)

        def logits_at(tokens, model=model):
            with torch.no_grad():
                return model(tokens)[0, -1]
        _compare_tokens("your greedy_generate", tried, expected, got, logits_at)
        _check_the_loop("your greedy_generate", tried, calls, L0, n_new, got.shape[1] - L0)
    print("✓ your greedy_generate gives generate_greedy's tokens on 2 random decoders, stopping at eos, with a "
          "prefill and then one token per step through caches made once.")


def same_tokens_as_package(fn, weights, model, prompt, n_new):
    """The chapter's last check: ``fn(prompt, weights, n_new)``, the learner's decoder with ``model``'s weights,
    must generate the tokens that the package's ``generate_greedy(model, prompt, n_new)`` does, with every piece
    of the package's decoder (its attention, cache, RoPE, norm, MLP, blocks, forward and loop) made to refuse while
    it runs. Where the two first differ at a near-tie of the package's two most likely tokens, it passes and says
    so. The calls of the learner's decoder_logits must be the cached loop of exercise 12 (``_check_the_loop``).
    Returns the learner's tokens, (1, L0 + n).

    Both run on one thread: at batch 1 a step is matrix-vector products, which a second thread speeds up little,
    and on a busy machine many small kernels on two threads wait for each other.
    """
    with one_thread():
        expected = generate_greedy(model, prompt, n_new)
        with torch.no_grad(), _watching_decoder_logits(fn) as calls:
            got = _call(fn, (prompt, weights, n_new), "greedy_generate", refuse=DECODER)

    def logits_at(tokens):
        with torch.no_grad():
            return model(tokens)[0, -1]
    tried = f"the {prompt.shape[1]}-token prompt, n_new={n_new}"
    tie = _compare_tokens(f"your {fn.__name__}", tried, expected, got, logits_at)
    _check_the_loop(f"your {fn.__name__}", tried, calls, prompt.shape[1], n_new, got.shape[1] - prompt.shape[1])
    n = got.shape[1] - prompt.shape[1]
    if tie:
        print(f"✓ your decoder passes: {tie}.")
    else:
        print(f"✓ your decoder generated the same {n} tokens as the package's decoder, token for token, with the "
              "package's attention, cache and decoder made to refuse.")
    return got


# Recorded for the grader under the exercise it completes: attention-book grade runs the chapter's own cells that
# call it, after the exercises, and grades it as one more column.
same_tokens_as_package = recorded(same_tokens_as_package, "greedy_generate")
