"""Checks for chapter 14's exercises: how many tokens a latent cache fits in a budget, the absorbed decode step (W_UK
folded into the query, W_UV and W_O applied after attending), and the decoupled RoPE key shared by all heads."""
import torch
from torch.utils.flop_counter import FlopCounterMode

from ..experiments.model_configs import LATENT_MODELS
from ..experiments.tensor_memory import PeakTensorBytes
from ..mla import naive_attention
from ..rope import Rope
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _require_number, _see_hint, _size


@_exercise("latent_tokens_in",
           task="given budget_bytes, n_layers, kv_lora_rank (d_c), qk_rope_head_dim (d_h^R) and bytes_per_element, "
                "return an int: the largest number of tokens of one sequence whose cache, in a model with "
                "multi-head latent attention in all n_layers layers, fits in budget_bytes (0 if not even one does).",
           hint="Each layer caches, per token, one latent c_KV of d_c numbers and one RoPE key of d_h^R numbers, "
                "shared by all heads: a token costs n_layers * (d_c + d_h^R) * bytes_per_element bytes. The budget "
                "holds budget_bytes // that many whole tokens.")
def check_latent_tokens_in(fn):
    """fn(budget_bytes, n_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element) -> whole tokens that fit.

    Tried on two toy models (in one, not a single token fits) and on the sizes of DeepSeek-V2, V3 and Kimi K2 with
    budgets from 1 KiB to Llama 3 70B's cache at 32K tokens (10 GiB), fp16 and fp32; compared with
    budget_bytes // (n_layers (d_c + d_h^R) bytes_per_element).
    """
    budgets = (1024, 2**30, 10 * 2**30)  # 10 GiB: Llama 3 70B's cache of 32K tokens in fp16
    cases = [(100, 1, 4, 2, 4), (500, 4, 64, 32, 2)] + [(budget, m.n_layers, m.kv_lora_rank, m.qk_rope_head_dim, b)
                                                     for budget in budgets for m in LATENT_MODELS for b in (2, 4)]
    for budget, n_layers, d_c, d_r, b in sorted(cases, key=lambda c: c[0]):  # the smallest budget first
        per_token = n_layers * (d_c + d_r) * b
        expected = budget // per_token
        got = _call(fn, (budget, n_layers, d_c, d_r, b), "latent_tokens_in")
        _require_number(fn, f"{budget}, {n_layers}, {d_c}, {d_r}, {b}", got)
        if got == expected and isinstance(got, int) and not isinstance(got, bool):
            continue
        likely = {budget // (n_layers * d_c * b): "only c_KV was counted: the RoPE key k^R is cached too",
                  budget // (2 * per_token): "counted twice, as K and V: the one latent rebuilds both",
                  budget // ((d_c + d_r) * b): "the layers were left out: every layer caches its own row per token",
                  -(-budget // per_token): "rounded up: only whole tokens that fit count"}
        note = f"\nLikely mistake: {likely[got]}" if got in likely and got != expected else ""
        if isinstance(got, float):
            note = "\nLikely mistake: a number of tokens is a whole number, an int"
        raise CheckFailed(f"budget_bytes={budget:,}, n_layers={n_layers}, kv_lora_rank={d_c}, qk_rope_head_dim={d_r}, "
                          f"bytes_per_element={b}: expected {expected:,} tokens, got {got!r}{note}")
    print(f"✓ latent_tokens_in is right on {len(cases)} cases, DeepSeek-V2, V3 and Kimi K2 included.")


# what the answer may not call: the package's two MLA paths, and SDPA (the exercise asks for the softmax written out)
_ABSORBED_REFUSE = ["attention_book.mla.absorbed_attention", "attention_book.mla.naive_attention",
                    ("torch.nn.functional.scaled_dot_product_attention", "which the exercise says not to call"),
                    ("attention_book.sdpa.scaled_dot_product_attention", "which the exercise says not to call")]


def _absorbed_step(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale, scaled=("nope", "rope"), uk_t=False, uv_t=False):
    """The absorbed step written out, for the mistakes: the scale on one term only (``scaled``), and each head's
    block of w_uk or w_uv viewed the wrong way round, (h, d_c, d_nope) for (h, d_nope, d_c) (``uk_t``, ``uv_t``)."""
    (B, h, d_nope), d_c = q_nope.shape, w_uk.shape[1]
    d_v = w_uv.shape[0] // h
    uk = w_uk.reshape(h, d_c, d_nope).transpose(1, 2) if uk_t else w_uk.view(h, d_nope, d_c)
    uv = w_uv.reshape(h, d_c, d_v).transpose(1, 2) if uv_t else w_uv.view(h, d_v, d_c)
    c_kv, k_rope = latent[..., :d_c], latent[..., d_c:]
    nope = torch.einsum("bhn,hnc,bsc->bhs", q_nope, uk, c_kv) * (scale if "nope" in scaled else 1.0)
    rope = torch.einsum("bhr,bsr->bhs", q_rope, k_rope) * (scale if "rope" in scaled else 1.0)
    mixed = torch.einsum("bhs,bsc->bhc", torch.softmax(nope + rope, dim=-1), c_kv)
    return torch.einsum("bhc,hvc->bhv", mixed, uv).reshape(B, h * d_v) @ w_o.T


@_exercise("absorbed_decode_step",
           task="given one new token per sequence, its position-free queries q_nope (B, h, d_nope) and its rotated "
                "RoPE queries q_rope (B, h, d_rope), the cached rows latent (B, S, d_c + d_rope) (each token's c_KV "
                "then its k^R, the new token's included), w_uk (h * d_nope, d_c), w_uv (h * d_v, d_c) and w_o "
                "(d_model, h * d_v) as the layer stores them (head i owns rows i * d_nope .. (i + 1) * d_nope - 1 of "
                "w_uk, likewise of w_uv, and columns i * d_v .. (i + 1) * d_v - 1 of w_o), and scale, which "
                "multiplies the sum of a score's two terms, before the scores become weights, return (B, d_model): "
                "the layer's output for the new token, as naive attention followed by W_O gives it. It must not "
                "rebuild keys or values, nor copy the cache per head: at no time may its new tensors hold as many "
                "numbers as one key per head per cached token, B × h × S × d_nope. Do not call naive_attention, "
                "absorbed_attention or an SDPA function.",
           hint="View w_uk as (h, d_nope, d_c): head i's absorbed query is q_i @ W_UK_i, (B, h, d_c), e.g. "
                "torch.einsum('bhn,hnc->bhc', q_nope, w_uk.view(h, d_nope, d_c)). Split the rows into c_kv = "
                "latent[..., :d_c] and k_rope = latent[..., d_c:]. The scores (B, h, S) are (absorbed @ "
                "c_kv.transpose(1, 2) + q_rope @ k_rope.transpose(1, 2)) * scale: batched products over B, with "
                "no copy per head. Softmax over S, then weights @ c_kv gives each head's mix of the latents "
                "(B, h, d_c); apply W_UV_i with w_uv.view(h, d_v, d_c) (einsum 'bhc,hvc->bhv'), flatten the heads "
                "to (B, h * d_v) and multiply by w_o.T.",
           idea="Section 4's identity: a query against a rebuilt key, q_i · (W_UK_i c_s), equals the absorbed query "
                "(q_i W_UK_i) against the latent c_s itself. Absorb W_UK into each head's query, score against the "
                "cached latents (plus the RoPE term), mix the latents by the weights, and only then apply W_UV and "
                "W_O.")
def check_absorbed_decode_step(fn):
    """fn(q_nope (B, h, d_nope), q_rope (B, h, d_rope), latent (B, S, d_c + d_rope), w_uk, w_uv, w_o, scale)
    -> (B, d_model), without rebuilding any key or value.

    Tried on 4 random inputs (1 to 8 heads, 1 to 256 cached tokens), the new tensors held at once counted
    (PeakTensorBytes) on the largest against one key per head per cached token, all the new tensors it makes against
    h / 2 times the cached rows (a copy of the cache per head), and the FLOPs of its matrix products
    (torch's FlopCounterMode) against twice the absorbed step's (a rebuild of the keys, even head by head, is 13
    times that there); compared with the package's naive
    step, naive_attention followed by W_O, with the package's MLA paths and SDPA made to refuse.
    """
    gen = _generator(14)
    inputs = []
    for B, h, S, d_nope, d_rope, d_v, d_c, d_model in [(1, 1, 1, 2, 2, 2, 3, 4), (1, 2, 4, 3, 2, 2, 5, 6),
                                                       (2, 3, 7, 4, 2, 3, 6, 8), (2, 8, 256, 32, 8, 16, 32, 24)]:
        inputs.append((torch.randn(B, h, d_nope, generator=gen), torch.randn(B, h, d_rope, generator=gen),
                       torch.randn(B, S, d_c + d_rope, generator=gen), torch.randn(h * d_nope, d_c, generator=gen),
                       torch.randn(h * d_v, d_c, generator=gen) / d_c ** 0.5,
                       torch.randn(d_model, h * d_v, generator=gen) / (h * d_v) ** 0.5, 1 / (d_nope + d_rope) ** 0.5))
    for q_nope, q_rope, latent, w_uk, w_uv, w_o, scale in sorted(inputs, key=lambda i: _size(*i[:6])):
        (B, h, d_nope), S, d_c = q_nope.shape, latent.shape[1], w_uk.shape[1]

        def step(q_nope=q_nope, latent=latent, w_uk=w_uk, scale=scale, rope=True):
            """The naive step, or one of its usual mistakes."""
            q_r = q_rope[:, :, None] if rope else torch.zeros_like(q_rope[:, :, None])
            out = naive_attention(q_nope[:, :, None], q_r, latent, w_uk, w_uv, scale)  # (B, h, 1, d_v)
            return out.transpose(1, 2).reshape(B, -1) @ w_o.T  # (B, d_model)

        expected = step()
        interleaved = w_uk.view(d_nope, h, d_c).transpose(0, 1).reshape(h * d_nope, d_c)
        mistakes = [("the scores left out the RoPE part q^R_i · k^R_s of every head's score",
                     lambda: step(rope=False)),
                    ("the scores were scaled by 1/√(d_c + d_rope), the width of the absorbed key; the absorbed "
                     "scores are the naive ones, with the scale given",
                     lambda: step(scale=1 / (d_c + q_rope.shape[-1]) ** 0.5)),
                    ("the scores were not scaled", lambda: step(scale=1.0)),
                    ("w_uk's rows were split as d_nope blocks of h heads; head i owns rows i * d_nope onwards",
                     lambda: step(w_uk=interleaved)),
                    ("scale multiplied only the position-free term of the score; it multiplies the sum of both terms",
                     lambda: _absorbed_step(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale, scaled=("nope",))),
                    ("scale multiplied only the RoPE term of the score; it multiplies the sum of both terms",
                     lambda: _absorbed_step(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale, scaled=("rope",))),
                    ("each head's block of w_uk was read as (d_c, d_nope); stored (out, in) as nn.Linear stores it, "
                     "it is (d_nope, d_c)",
                     lambda: _absorbed_step(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale, uk_t=True)),
                    ("each head's block of w_uv was read as (d_c, d_v); stored (out, in) as nn.Linear stores it, it "
                     "is (d_v, d_c)",
                     lambda: _absorbed_step(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale, uv_t=True))]
        with torch.no_grad(), PeakTensorBytes() as counter, FlopCounterMode(display=False) as flops:
            got = _call(fn, (q_nope, q_rope, latent, w_uk, w_uv, w_o, scale), "absorbed_decode_step",
                        refuse=_ABSORBED_REFUSE)
        tried = f"q_nope {tuple(q_nope.shape)}, latent {tuple(latent.shape)}, w_uv {tuple(w_uv.shape)}"
        _compare("your absorbed_decode_step", tried, expected, got, hint=_see_hint("absorbed_decode_step"),
                 atol=1e-4, mistakes=mistakes)
        keys = B * h * S * d_nope * q_nope.element_size()
        if S >= 64 and counter.peak >= keys:
            raise CheckFailed(f"your absorbed_decode_step on {tried}: it held {counter.peak:,} bytes of new tensors at "
                              f"once, as much as one key per head per cached token ({keys:,} bytes: "
                              f"B × h × S × d_nope fp32 numbers); the cached rows themselves are {latent.nbytes:,}. "
                              f"(Rebuilding the keys does that; so does torch.matmul broadcasting an operand: a head "
                              f"dimension of size 1 on the cache's side against the h heads makes h copies of the "
                              f"cache.)")
        if S >= 64:  # the products of the absorbed step, in FLOPs (2 per multiply-add), and of a rebuild of the keys
            d_rope, d_v, d_model = q_rope.shape[-1], w_uv.shape[0] // h, w_o.shape[0]
            needed = 2 * B * h * (d_nope * d_c + S * (d_c + d_rope) + S * d_c + d_c * d_v + d_v * d_model)
            rebuild = 2 * B * h * S * d_c * d_nope
            done = flops.get_total_flops()
            if done > 2 * needed:
                raise CheckFailed(f"your absorbed_decode_step on {tried}: its matrix products did {done:,} "
                                  f"floating-point operations, {done / needed:.1f} times the {needed:,} of the "
                                  f"absorbed step; rebuilding one key per head per cached token (B × h × S × d_nope "
                                  f"numbers, each a product over d_c) takes {rebuild:,} on its own, even one head "
                                  f"at a time")
        if S >= 64 and counter.total >= h // 2 * latent.nbytes:
            raise CheckFailed(f"your absorbed_decode_step on {tried}: the new tensors it made add up to "
                              f"{counter.total:,} bytes, {counter.total / latent.nbytes:.1f} times the cached rows "
                              f"({latent.nbytes:,} bytes): the cache was copied for one head after another")
    print("✓ your absorbed_decode_step equals the naive step followed by W_O on 4 inputs, and at 256 cached tokens "
          "it never held as much as one key per head per token nor did the products of rebuilding them.")


@_exercise("decoupled_rope_key",
           task="given x (B, S, d_model), the tokens' vectors, w_kr (d_rope, d_model), the RoPE key's projection, "
                "and start, the position of x's first token, return (B, S, d_rope): the one RoPE key per token "
                "that all heads share, rotated for its position in the pairs layout with base 10,000. (The "
                "package's Rope takes (B, heads, S, d): one head here.)",
           hint="Project: x @ w_kr.T is (B, S, d_rope). Rotate it as one head: Rope(d_rope, layout='pairs') takes "
                "(B, heads, S, d_rope), so add a head dimension with [:, None], call rope(k, start) and remove it "
                "with [:, 0].")
def check_decoupled_rope_key(fn):
    """fn(x (B, S, d_model), w_kr (d_rope, d_model), start) -> k^R (B, S, d_rope).

    Tried on 4 random inputs (d_rope 2 to 8, starting at 0 and later); compared with the package's Rope.
    """
    gen = _generator(15)
    inputs = []
    for B, S, d_model, d_rope, start in [(1, 1, 2, 2, 0), (1, 3, 4, 2, 5), (2, 4, 6, 4, 0), (2, 5, 8, 8, 17)]:
        inputs.append((torch.randn(B, S, d_model, generator=gen), torch.randn(d_rope, d_model, generator=gen),
                       start))
    for x, w_kr, start in sorted(inputs, key=lambda i: _size(*i[:2])):
        k = (x @ w_kr.T)[:, None]  # (B, 1, S, d_rope)
        d_rope = w_kr.shape[0]

        def rotated(layout="pairs", first=start, k=k, d_rope=d_rope):
            return Rope(d_rope, layout=layout)(k, first)[:, 0]

        mistakes = [("the key was not rotated: RoPE must turn it by its position", lambda k=k: k[:, 0]),
                    ("the positions start at 0: x's first token sits at position start", lambda: rotated(first=0)),
                    ("the halves layout; here pair i is coordinates 2i and 2i + 1", lambda: rotated("halves"))]
        _compare("your decoupled_rope_key", f"x {tuple(x.shape)}, w_kr {tuple(w_kr.shape)}, start={start}",
                 rotated(), _call(fn, (x, w_kr, start), "decoupled_rope_key"), hint=_see_hint("decoupled_rope_key"),
                 mistakes=mistakes)
    print("✓ your decoupled_rope_key projects and rotates the shared RoPE key, on 4 inputs.")
