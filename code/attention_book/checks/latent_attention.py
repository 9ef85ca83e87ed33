"""Checks for chapter 14's exercises: the bytes of a latent cache, absorbing W_UK into the query, and the decoupled
RoPE key shared by all heads."""
import torch

from ..experiments.model_configs import LATENT_MODELS
from ..rope import Rope
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint, _size


@_exercise("latent_cache_bytes",
           task="given n_layers, kv_lora_rank (d_c), qk_rope_head_dim (d_h^R), n_tokens and bytes_per_element, "
                "return an int: the bytes that the cache of a model with multi-head latent attention holds for "
                "n_tokens tokens of one sequence, over all its layers.",
           hint="Each layer caches, per token, one latent c_KV of d_c numbers and one RoPE key of d_h^R numbers, "
                "shared by all heads; nothing per head. Multiply that by the layers, the tokens and the bytes per "
                "number.")
def check_latent_cache_bytes(fn):
    """fn(n_layers, kv_lora_rank, qk_rope_head_dim, n_tokens, bytes_per_element) -> bytes of the latent cache.

    Tried on a toy layer and on DeepSeek-V2's and V3's sizes at 1 and 32,768 tokens, fp16 and fp32; compared with
    n_layers (d_c + d_h^R) n_tokens bytes_per_element.
    """
    cases = [(1, 4, 2, 1, 4)] + [(m.n_layers, m.kv_lora_rank, m.qk_rope_head_dim, n, b)
                                 for m in LATENT_MODELS for n in (1, 32_768) for b in (2, 4)]
    for n_layers, d_c, d_r, n_tokens, b in sorted(cases, key=lambda c: c[0] * (c[1] + c[2]) * c[3] * c[4]):
        expected = n_layers * (d_c + d_r) * n_tokens * b
        got = _call(fn, (n_layers, d_c, d_r, n_tokens, b), "latent_cache_bytes")
        if got == expected and isinstance(got, int):
            continue
        likely = {n_layers * d_c * n_tokens * b: "only c_KV was counted: the RoPE key k^R is cached too",
                  2 * expected: "counted twice, as K and V: the one latent rebuilds both",
                  n_layers * 2 * (d_c + d_r) * n_tokens * b: "counted twice, as K and V: the one latent rebuilds both"}
        note = f"\nLikely mistake: {likely[got]}" if got in likely and got != expected else ""
        if got == expected:
            note = "\nLikely mistake: the result must be an int (use integer arithmetic)"
        raise CheckFailed(f"n_layers={n_layers}, kv_lora_rank={d_c}, qk_rope_head_dim={d_r}, n_tokens={n_tokens}, "
                          f"bytes_per_element={b}: expected {expected:,} bytes, got {got!r}{note}")
    print(f"✓ latent_cache_bytes is right on {len(cases)} cases, DeepSeek-V2 and V3 included.")


@_exercise("absorb_query",
           task="given q_nope (B, h, L, d_nope), each head's position-free query, and w_uk (h * d_nope, d_c), the "
                "weight of the keys' up-projection (head i's keys are W_UK_i c with W_UK_i its rows i * d_nope to "
                "(i + 1) * d_nope - 1), return (B, h, L, d_c): for each head, the vector whose dot product with any "
                "latent c equals q_i . (W_UK_i c).",
           hint="q_i . (W_UK_i c) = (W_UK_iᵀ q_i) . c, so head i's absorbed query is q_i times W_UK_i (as a row "
                "vector times a matrix). View w_uk as (h, d_nope, d_c) and multiply: q_nope @ that view broadcasts "
                "over B and L and gives (B, h, L, d_c).")
def check_absorb_query(fn):
    """fn(q_nope (B, h, L, d_nope), w_uk (h d_nope, d_c)) -> the absorbed queries (B, h, L, d_c).

    Tried on 4 random inputs (1 to 4 heads); compared with q_nope @ w_uk.view(h, d_nope, d_c).
    """
    gen = torch.Generator().manual_seed(14)
    inputs = []
    for B, h, L, d_nope, d_c in [(1, 1, 1, 2, 3), (1, 2, 1, 3, 5), (2, 3, 2, 4, 6), (1, 4, 3, 2, 8)]:
        inputs.append((torch.randn(B, h, L, d_nope, generator=gen), torch.randn(h * d_nope, d_c, generator=gen)))
    for q_nope, w_uk in sorted(inputs, key=lambda qw: _size(*qw)):
        h, d_nope = q_nope.shape[1], q_nope.shape[3]
        d_c = w_uk.shape[1]
        mistakes = [("w_uk's rows were split as d_nope blocks of h heads; head i owns rows i * d_nope onwards",
                     lambda: q_nope @ w_uk.view(d_nope, h, d_c).transpose(0, 1))]
        _compare("your absorb_query", f"q_nope {tuple(q_nope.shape)}, w_uk {tuple(w_uk.shape)}",
                 q_nope @ w_uk.view(h, d_nope, d_c), _call(fn, (q_nope, w_uk), "absorb_query"),
                 hint=_see_hint("absorb_query"), mistakes=mistakes)
    print("✓ your absorb_query folds W_UK into every head's query, on 4 inputs.")


@_exercise("decoupled_rope_key",
           task="given x (B, S, d_model), the tokens' vectors, w_kr (d_rope, d_model), the RoPE key's projection, "
                "and start, the position of x's first token, return (B, S, d_rope): the one RoPE key per token "
                "that all heads share, rotated for its position in the pairs layout with base 10,000.",
           hint="Project: x @ w_kr.T is (B, S, d_rope). Rotate it as one head: Rope(d_rope, layout='pairs') takes "
                "(B, heads, S, d_rope), so add a head dimension with [:, None], call rope(k, start) and remove it "
                "with [:, 0].")
def check_decoupled_rope_key(fn):
    """fn(x (B, S, d_model), w_kr (d_rope, d_model), start) -> k^R (B, S, d_rope).

    Tried on 4 random inputs (d_rope 2 to 8, starting at 0 and later); compared with the package's Rope.
    """
    gen = torch.Generator().manual_seed(15)
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
