"""Rotary position embeddings (attention_book.rope): the "halves" layout equals Hugging Face transformers' Llama RoPE
bit for bit; the "pairs" layout equals a rotation by complex numbers (Meta's reference code); the two layouts are the
same rotation after a permutation of coordinates, or of W_q's and W_k's rows; scores depend only on m - n; and the
attention layer with RoPE decodes with a cache exactly as it runs without one."""
import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book import GroupedQueryAttention
from attention_book.rope import (LAYOUTS, Rope, apply_rope, halves_order, halves_to_pairs_rows,
                                 pairs_to_halves_rows, rope_cos_sin, rope_frequencies, rotate)
from layer_configs import TOL

# transformers 5's API (LlamaConfig(rope_parameters=...); 4.x ignores that keyword and keeps base 10,000)
pytest.importorskip("transformers", minversion="5")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import (LlamaRotaryEmbedding, apply_rotary_pos_emb,  # noqa: E402
                                                      rotate_half)

BASES = st.sampled_from([10_000.0, 100_000.0, 500_000.0, 1.5, 37.0])
DTYPES = st.sampled_from([torch.float32, torch.float64])


@st.composite
def shapes(draw):
    """(B, heads, S, d_head, d_model): d_head even, and often not d_model / heads."""
    B, heads, S = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 8))
    d_head = 2 * draw(st.integers(1, 12))
    d_model = heads * (d_head if draw(st.booleans()) else draw(st.integers(1, 10)))  # transformers: heads | d_model
    return B, heads, S, d_head, d_model


@st.composite
def positions(draw, B, S):
    """Positions of shape (S,) from an offset, or (B, S), each sequence from its own offset or in any order."""
    kind = draw(st.sampled_from(["offset", "per-sequence offsets", "any"]))
    if kind == "offset":
        return torch.arange(S) + draw(st.integers(0, 5000))
    if kind == "per-sequence offsets":
        offsets = draw(st.lists(st.integers(0, 5000), min_size=B, max_size=B))
        return torch.arange(S)[None] + torch.tensor(offsets)[:, None]
    return torch.tensor(draw(st.lists(st.lists(st.integers(0, 5000), min_size=S, max_size=S), min_size=B,
                                      max_size=B)))


def hf_rotary(d_head, d_model, heads, base):
    """transformers' LlamaRotaryEmbedding for a small Llama configuration with this head size and base."""
    config = LlamaConfig(hidden_size=d_model, num_attention_heads=heads, num_key_value_heads=1, head_dim=d_head,
                         rope_parameters={"rope_type": "default", "rope_theta": base}, max_position_embeddings=64)
    return LlamaRotaryEmbedding(config)


def meta_pairs(x, positions, base):
    """The "pairs" layout as Meta's Llama reference code computes it: pairs (2i, 2i + 1) as complex numbers,
    multiplied by e^(i position theta_i). Written here without the package (theta from the formula, in float64)."""
    d_head = x.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = positions.double()[..., None] * theta  # (..., S, d_head / 2)
    if positions.dim() == 2:
        angles = angles[:, None]  # (B, 1, S, d_head / 2)
    turns = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * turns).flatten(-2)


# --- the "halves" layout is transformers' RoPE -------------------------------------------------------------------

@given(shape=shapes(), base=BASES, dtype=DTYPES, data=st.data(), seed=SEEDS)
def test_halves_equals_transformers_bit_for_bit(shape, base, dtype, data, seed):
    B, heads, S, d_head, d_model = shape
    pos = data.draw(positions(B, S), label="positions")
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, heads, S, d_head, generator=gen, dtype=dtype)
    k = torch.randn(B, 1, S, d_head, generator=gen, dtype=dtype)
    rotary = hf_rotary(d_head, d_model, heads, base)
    assert torch.equal(rope_frequencies(d_head, base), rotary.inv_freq)
    position_ids = pos if pos.dim() == 2 else pos[None].expand(B, S)  # transformers takes (B, S)
    cos, sin = rotary(q, position_ids)  # (B, S, d_head), each angle twice
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    assert torch.equal(apply_rope(q, pos, base), q_hf)
    assert torch.equal(apply_rope(k, pos, base, layout="halves"), k_hf)
    ours_cos, ours_sin = rope_cos_sin(pos, d_head, base)
    assert torch.equal(torch.cat((ours_cos, ours_cos), -1).to(dtype).expand_as(cos), cos)
    assert torch.equal(torch.cat((ours_sin, ours_sin), -1).to(dtype).expand_as(sin), sin)


@given(shape=shapes(), base=BASES, start=st.integers(0, 3000), first=st.integers(0, 3000), seed=SEEDS)
def test_rope_table_equals_transformers_at_any_start(shape, base, start, first, seed):
    """Rope's growing table gives the same angles as transformers, whatever was asked before (first)."""
    B, heads, S, d_head, d_model = shape
    x = torch.randn(B, heads, S, d_head, generator=torch.Generator().manual_seed(seed))
    rope = Rope(d_head, base)
    rope(x, first)  # grows the table to first + S
    position_ids = torch.arange(start, start + S)[None].expand(B, S)
    cos, sin = hf_rotary(d_head, d_model, heads, base)(x, position_ids)
    expected, _ = apply_rotary_pos_emb(x, x, cos, sin)
    assert torch.equal(rope(x, start), expected)


@pytest.mark.parametrize("d_head", [2, 8, 64])
def test_a_quarter_turn_is_rotate_half(d_head):
    """With every angle a quarter turn (cos 0, sin 1), rotating in halves is transformers' rotate_half."""
    x = torch.randn(2, 3, 4, d_head)
    zeros, ones = torch.zeros(4, d_head // 2), torch.ones(4, d_head // 2)
    assert torch.equal(rotate(x, zeros, ones, "halves"), rotate_half(x))


# --- the "pairs" layout is a rotation of complex numbers ------------------------------------------------------------

@given(shape=shapes(), base=BASES, data=st.data(), seed=SEEDS)
def test_pairs_equals_complex_multiplication(shape, base, data, seed):
    B, heads, S, d_head, _ = shape
    pos = data.draw(positions(B, S), label="positions")
    x = torch.randn(B, heads, S, d_head, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    expected = meta_pairs(x, pos, base)
    # the package's angles are float32 (as transformers'): at position p they are off by up to about p * 6e-8 rad
    torch.testing.assert_close(apply_rope(x, pos, base, layout="pairs"), expected,
                               atol=1e-6 * (1 + pos.max().item()), rtol=0)


@given(shape=shapes(), base=BASES, dtype=DTYPES, data=st.data(), seed=SEEDS)
def test_the_layouts_are_one_rotation_after_reordering(shape, base, dtype, data, seed):
    """x in the pairs layout, rotated in it, then reordered, equals x reordered, then rotated in the halves
    layout (bit for bit); the scores are the same either way, and the reordering round-trips."""
    B, heads, S, d_head, _ = shape
    pos = data.draw(positions(B, S), label="positions")
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, heads, S, d_head, generator=gen, dtype=dtype) for _ in range(2))
    order = halves_order(d_head)
    assert sorted(order.tolist()) == list(range(d_head))
    assert torch.equal(q[..., order][..., torch.argsort(order)], q)
    q_pairs, k_pairs = apply_rope(q, pos, base, "pairs"), apply_rope(k, pos, base, "pairs")
    q_halves, k_halves = apply_rope(q[..., order], pos, base, "halves"), apply_rope(k[..., order], pos, base, "halves")
    assert torch.equal(q_pairs[..., order], q_halves)
    torch.testing.assert_close(q_pairs @ k_pairs.transpose(-2, -1), q_halves @ k_halves.transpose(-2, -1),
                               **TOL[dtype])


@given(n_heads=st.integers(1, 4), half=st.integers(1, 6), d_in=st.integers(1, 9), seed=SEEDS)
def test_row_permutation_round_trips_and_reorders_each_heads_outputs(n_heads, half, d_in, seed):
    d_head = 2 * half
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(n_heads * d_head, d_in, generator=gen)
    halves = pairs_to_halves_rows(weight, n_heads)
    assert halves.shape == weight.shape
    assert torch.equal(halves_to_pairs_rows(halves, n_heads), weight)
    assert torch.equal(pairs_to_halves_rows(halves_to_pairs_rows(weight, n_heads), n_heads), weight)
    x = torch.randn(3, d_in, generator=gen, dtype=torch.float64)
    per_head = (x @ weight.double().T).unflatten(-1, (n_heads, d_head))  # (3, n_heads, d_head)
    torch.testing.assert_close((x @ halves.double().T).unflatten(-1, (n_heads, d_head)),
                               per_head[..., halves_order(d_head)], **TOL[torch.float64])


@given(n_kv_heads=st.integers(1, 3), group=st.integers(1, 3), half=st.integers(1, 5), base=BASES, seed=SEEDS)
def test_a_pairs_layer_equals_a_halves_layer_with_permuted_rows(n_kv_heads, group, half, base, seed):
    """What chapter 12 does with a GGUF file: W_q and W_k (and their biases) stored for the pairs layout, rows
    reordered, run in the halves layout: the same outputs."""
    n_heads, d_head = n_kv_heads * group, 2 * half
    torch.manual_seed(seed)
    pairs = GroupedQueryAttention(12, n_heads, n_kv_heads, d_head, rope=Rope(d_head, base, "pairs")).double()
    halves = GroupedQueryAttention(12, n_heads, n_kv_heads, d_head, rope=Rope(d_head, base, "halves")).double()
    halves.load_state_dict(pairs.state_dict())
    with torch.no_grad():
        for proj, heads in ((halves.q_proj, n_heads), (halves.k_proj, n_kv_heads)):
            proj.weight.copy_(pairs_to_halves_rows(proj.weight, heads))
            proj.bias.copy_(pairs_to_halves_rows(proj.bias[:, None], heads)[:, 0])
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    torch.testing.assert_close(halves(x, is_causal=True)[0], pairs(x, is_causal=True)[0], **TOL[torch.float64])


# --- the score depends only on m - n --------------------------------------------------------------------------------

@given(half=st.integers(1, 16), base=BASES, layout=st.sampled_from(LAYOUTS), m=st.integers(0, 300),
       n=st.integers(0, 300), shift=st.integers(0, 300), seed=SEEDS)
def test_score_depends_only_on_the_distance(half, base, layout, m, n, shift, seed):
    d_head = 2 * half
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(1, 1, 1, d_head, generator=gen, dtype=torch.float64) for _ in range(2))

    def score(i, j):
        return (apply_rope(q, torch.tensor([i]), base, layout) * apply_rope(k, torch.tensor([j]), base, layout)).sum()

    scale = q.norm() * k.norm()
    assert abs(score(m, n) - score(m + shift, n + shift)) <= 1e-4 * scale  # float32 angles up to 600 * theta
    lo = min(m, n)
    assert abs(score(m, n) - score(m - lo, n - lo)) <= 1e-4 * scale  # one of the two at position 0
    assert abs(score(m, m) - (q * k).sum()) <= 1e-4 * scale  # the same position: no rotation between them


# --- the attention layer with RoPE ---------------------------------------------------------------------------------

def reference_rope_forward(layer, x, base, layout):
    """The layer's causal forward built by hand: projections, RoPE at positions 0 .. L-1, SDPA with enable_gqa."""
    B, L, _ = x.shape
    h, g, d = layer.n_heads, layer.n_kv_heads, layer.d_head
    q = layer.q_proj(x).view(B, L, h, d).transpose(1, 2)
    k = layer.k_proj(x).view(B, L, g, d).transpose(1, 2)
    v = layer.v_proj(x).view(B, L, g, d).transpose(1, 2)
    pos = torch.arange(L)
    q, k = apply_rope(q, pos, base, layout), apply_rope(k, pos, base, layout)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return layer.o_proj(out.transpose(1, 2).flatten(2))


@given(n_kv_heads=st.integers(1, 3), group=st.integers(1, 3), half=st.integers(1, 4), B=st.integers(1, 2),
       T=st.integers(1, 9), prefill=st.integers(1, 9), base=BASES, layout=st.sampled_from(LAYOUTS), dtype=DTYPES,
       seed=SEEDS)
def test_cached_decoding_with_rope_equals_the_full_forward(n_kv_heads, group, half, B, T, prefill, base, layout,
                                                           dtype, seed):
    """Prefill, then one token at a time, for MHA, GQA and MQA: the cache holds rotated keys, and each new token is
    rotated at the cache's length."""
    n_heads, d_head, prefill = n_kv_heads * group, 2 * half, min(prefill, T)
    torch.manual_seed(seed)
    layer = GroupedQueryAttention(n_heads * d_head + 1, n_heads, n_kv_heads, d_head,
                                  rope=Rope(d_head, base, layout)).to(dtype)
    x = torch.randn(B, T, layer.d_model, dtype=dtype)
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)
        torch.testing.assert_close(full, reference_rope_forward(layer, x, base, layout), **TOL[dtype])
        cache = layer.new_cache(B, T)
        outs = [layer(x[:, :prefill], cache=cache, is_causal=True)[0]]
        for t in range(prefill, T):
            assert cache.length == t  # the new token's position
            outs.append(layer(x[:, t:t + 1], cache=cache, is_causal=True)[0])
        # the cache holds the keys rotated at their own positions
        k = layer.k_proj(x).view(B, T, n_kv_heads, d_head).transpose(1, 2)
        torch.testing.assert_close(cache.k, apply_rope(k, torch.arange(T), base, layout), **TOL[dtype])
    torch.testing.assert_close(torch.cat(outs, dim=1), full, **TOL[dtype])


class RopeAlwaysFromZero(Rope):
    """The mistake chapter 11 shows: each call rotates its tokens as if the first sat at position 0."""

    def __call__(self, x, start=0):
        return super().__call__(x, 0)


def test_decoding_every_token_at_position_0_is_wrong():
    torch.manual_seed(0)
    layer = GroupedQueryAttention(32, 4, 2, rope=RopeAlwaysFromZero(8))
    x = torch.randn(1, 12, 32)
    with torch.no_grad():
        full, _ = layer(x, is_causal=True)  # one call: positions 0 .. 11, right
        cache = layer.new_cache(1, 12)
        outs = torch.cat([layer(x[:, t:t + 1], cache=cache, is_causal=True)[0] for t in range(12)], dim=1)
    assert torch.allclose(outs[:, 0], full[:, 0], atol=1e-6)  # the first token is at position 0 anyway
    assert (outs[:, 1:] - full[:, 1:]).abs().amax() > 0.01


# --- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: Rope(8, layout="interleaved"), "layout='interleaved' must be one of"),
    (lambda: rotate(torch.zeros(1, 4), torch.zeros(1, 2), torch.zeros(1, 2), "complex"), "layout='complex'"),
    (lambda: Rope(5), "d_head=5 must be even"),
    (lambda: Rope(0), "d_head=0 must be a positive integer"),
    (lambda: rope_frequencies(7), "d_head=7 must be even"),
    (lambda: rope_frequencies(8, base=1.0), "base=1.0 must be greater than 1"),
    (lambda: halves_order(3), "d_head=3 must be even"),
    (lambda: Rope(8)(torch.zeros(1, 1, 2, 8), start=-1), "start=-1 must be a non-negative integer"),
    (lambda: Rope(8)(torch.zeros(1, 1, 2, 8), start=1.0), "start=1.0 must be a non-negative integer"),
    (lambda: Rope(8)(torch.zeros(1, 1, 2, 6)), r"x must have shape \(B, heads, S, d_head=8\)"),
    (lambda: rotate(torch.zeros(2, 5), torch.zeros(2, 2), torch.zeros(2, 2)), "d_head=5 must be even"),
    (lambda: apply_rope(torch.zeros(2, 4), torch.arange(2)), r"x must have shape \(B, heads, S, d_head\)"),
    (lambda: apply_rope(torch.zeros(1, 1, 3, 4), torch.arange(2)), "positions must have shape"),
    (lambda: pairs_to_halves_rows(torch.zeros(10, 3), 3), "not divisible by n_heads=3"),
    (lambda: halves_to_pairs_rows(torch.zeros(8, 3), 0), "n_heads=0 must be a positive integer"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_layer_rejects_a_rope_it_cannot_use():
    with pytest.raises(ValueError, match="rope must be None or a Rope with d_head=4"):
        GroupedQueryAttention(16, 4, rope=Rope(8))
    with pytest.raises(ValueError, match="rope must be None or a Rope"):
        GroupedQueryAttention(16, 4, rope="halves")
    layer = GroupedQueryAttention(16, 4, 2, rope=Rope(4))
    with pytest.raises(ValueError, match="rope is for self-attention"):
        layer(torch.zeros(1, 3, 16), torch.zeros(1, 5, 16))


@pytest.mark.parametrize("device, dtype", [("meta", torch.float32), ("cpu", torch.float64)])
def test_rope_copies_its_table_to_a_device_and_dtype_once(monkeypatch, device, dtype):
    rope, x = Rope(8), torch.randn(1, 2, 3, 8, dtype=dtype).to(device)
    starts = (3, 4, 100)
    expected = [apply_rope(x, torch.arange(start, start + 3)) for start in starts] if device == "cpu" else None
    real_to, copies = torch.Tensor.to, []

    def counting_to(self, *args, **kwargs):
        out = real_to(self, *args, **kwargs)
        if out is not self:
            copies.append((out.device, out.dtype))
        return out

    monkeypatch.setattr(torch.Tensor, "to", counting_to)
    assert rope(x).device == x.device
    copies.clear()
    outs = [rope(x, start) for start in starts]
    assert copies == []
    if device == "cpu":
        torch.testing.assert_close(outs, expected, rtol=0, atol=0)


def test_apply_rope_computes_its_angles_on_the_positions_device():
    out = apply_rope(torch.zeros(1, 2, 3, 8, device="meta"), torch.arange(3, device="meta"))
    assert out.device.type == "meta" and out.shape == (1, 2, 3, 8)


def test_a_table_grown_under_inference_mode_can_be_trained_through():
    rope = Rope(8)
    with torch.inference_mode():
        rope(torch.randn(1, 1, 3, 8))
    x = torch.randn(1, 1, 3, 8, requires_grad=True)
    rope(x).sum().backward()
    assert x.grad is not None
