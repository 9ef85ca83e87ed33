"""FlashAttention's idea (attention_book.flash, chapter 13): the online softmax equals torch.softmax, -inf entries and
fully masked rows included; tiled attention equals F.scaled_dot_product_attention for many shapes, masks, causal
(bottom-right, S >= L), GQA and block sizes that do not divide L or S; the split decode equals SDPA's decode step, its
merge is exact; the tensor-memory counter counts what it should; bad inputs are ValueErrors that name the input."""
import math

import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book.experiments.tensor_memory import peak_tensor_bytes
from attention_book.flash import (attend_chunks, merge_partials, online_softmax, running_update, split_kv_decode,
                                  tiled_attention)
from attention_book.masks import causal_mask

ATOL = 1e-5
DTYPES = st.sampled_from([torch.float32, torch.float64])


def sdpa(q, k, v, mask=None):
    """The reference: SDPA with enable_gqa; a query with no visible key gets zeros (SDPA's CPU result, made sure)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
    if mask is not None:
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out


@given(seed=SEEDS, shape=st.lists(st.integers(1, 4), min_size=0, max_size=2), S=st.integers(1, 40),
       block=st.integers(1, 45), masked=st.sampled_from(["none", "some", "rows", "all"]), dtype=DTYPES)
def test_online_softmax_equals_torch_softmax(seed, shape, S, block, masked, dtype):
    gen = torch.Generator().manual_seed(seed)
    scores = 10 * torch.randn(*shape, S, generator=gen, dtype=dtype)
    if masked != "none":
        drop = torch.rand(scores.shape, generator=gen) < 0.5
        if masked == "rows" and scores.dim() > 1:
            drop[..., 0, :] = True  # a fully masked row
        if masked == "all":
            drop[:] = True
        scores = scores.masked_fill(drop, -math.inf)
    expected = torch.softmax(scores, dim=-1)
    got = online_softmax(scores, block)
    assert got.shape == expected.shape and got.dtype == dtype
    assert torch.equal(got.isnan(), expected.isnan())  # NaN exactly on the all -inf rows, as torch.softmax
    assert torch.allclose(got, expected, atol=ATOL, equal_nan=True)


def test_online_softmax_does_not_overflow_and_a_fully_masked_row_is_nan_as_torch_softmax():
    scores = torch.tensor([[1000.0, 1001.0, -1000.0, 999.0], [-math.inf] * 4])
    got = online_softmax(scores, block=1)
    assert torch.allclose(got[0], torch.softmax(scores[0], dim=-1)) and got[1].isnan().all()


def test_running_update_rescales_the_old_sum_when_the_maximum_grows():
    m, sum_exp = torch.tensor([[2.0]]), torch.tensor([[3.0]])
    m_new, sum_new = running_update(m, sum_exp, torch.tensor([[4.0, 1.0]]))
    assert m_new.item() == 4.0
    assert sum_new.item() == pytest.approx(3 * math.exp(-2) + 1 + math.exp(-3))
    m_new, sum_new = running_update(torch.tensor([[-math.inf]]), torch.tensor([[0.0]]), torch.full((1, 3), -math.inf))
    assert m_new.item() == -math.inf and sum_new.item() == 0.0  # nothing seen yet: no NaN


@st.composite
def attention_problems(draw):
    """q (B, h, L, d_head), k (B, g, S, d_head), v (B, g, S, d_v), a mask or None, is_causal, blocks."""
    B, g, group = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    L, S = draw(st.integers(1, 12)), draw(st.integers(1, 20))
    causal = draw(st.booleans()) and L <= S
    d_head, d_v = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    mask_shape = draw(st.sampled_from([None, "L S", "B 1 L S", "B h L S", "1 1 1 S", "B 1 1 S", "h L S"]))
    return B, g * group, g, L, S, d_head, d_v, causal, mask_shape, draw(st.integers(1, 14)), draw(st.integers(1, 22))


@given(seed=SEEDS, problem=attention_problems(), dtype=DTYPES)
def test_tiled_attention_equals_sdpa(seed, problem, dtype):
    B, h, g, L, S, d_head, d_v, causal, mask_shape, block_q, block_k = problem
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, L, d_head, generator=gen, dtype=dtype)
    k = torch.randn(B, g, S, d_head, generator=gen, dtype=dtype)
    v = torch.randn(B, g, S, d_v, generator=gen, dtype=dtype)
    mask = None
    if mask_shape is not None:
        sizes = {"B": B, "h": h, "L": L, "S": S, "1": 1}
        mask = torch.rand([sizes[c] for c in mask_shape.split()], generator=gen) < 0.7  # True = may attend
    reference_mask = mask
    if causal:
        reference_mask = causal_mask(L, S) if mask is None else mask & causal_mask(L, S)
    expected = sdpa(q, k, v, None if reference_mask is None else reference_mask.expand(B, h, L, S))
    got = tiled_attention(q, k, v, attn_mask=mask, is_causal=causal, block_q=block_q, block_k=block_k)
    assert got.shape == (B, h, L, d_v) and got.dtype == dtype
    assert torch.allclose(got, expected, atol=ATOL), (got - expected).abs().max()


def test_a_query_with_every_key_masked_gets_zeros_as_sdpa_gives_on_cpu():
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    got = tiled_attention(q, k, v, attn_mask=mask, block_q=2, block_k=2)
    assert torch.equal(got[:, :, 1], torch.zeros(1, 2, 4)) and not got.isnan().any()
    assert torch.allclose(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), got, atol=ATOL)


def test_causal_skips_the_key_blocks_in_the_future_and_is_aligned_bottom_right():
    q, k, v = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 9, 8), torch.randn(1, 1, 9, 8)
    got = tiled_attention(q, k, v, is_causal=True, block_k=4)  # one decode query sees every key
    assert torch.allclose(got, F.scaled_dot_product_attention(q, k, v), atol=ATOL)


@given(seed=SEEDS, B=st.integers(1, 2), g=st.integers(1, 3), group=st.integers(1, 4), S=st.integers(1, 60),
       d_head=st.integers(1, 16), split=st.sampled_from(["n_splits", "chunk"]), size=st.integers(1, 70),
       dtype=DTYPES)
def test_split_kv_decode_equals_sdpa_decode(seed, B, g, group, S, d_head, split, size, dtype):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, g * group, 1, d_head, generator=gen, dtype=dtype)
    k, v = (torch.randn(B, g, S, d_head, generator=gen, dtype=dtype) for _ in range(2))
    got = split_kv_decode(q, k, v, **{split: size})
    assert got.shape == q.shape and got.dtype == dtype
    assert torch.allclose(got, sdpa(q, k, v), atol=ATOL)


@given(seed=SEEDS, n=st.integers(1, 5), S=st.integers(1, 12), dead=st.booleans())
def test_merging_partials_equals_attending_over_all_keys(seed, n, S, dead):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 1, 3, 4, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, n, S, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    outs, lses = attend_chunks(q, k, v, scale=0.5)  # (2, n, 3, 4), (2, n, 3, 1)
    if dead:  # a chunk whose keys are all masked: lse -inf, any output; it must weigh nothing
        outs[:, 0], lses[:, 0] = 123.0, -math.inf
    out, lse = merge_partials(outs.movedim(1, 0), lses.movedim(1, 0))
    keys, values = k.flatten(1, 2)[:, None], v.flatten(1, 2)[:, None]  # (2, 1, n * S, 4)
    if dead:
        keys, values = keys[:, :, S:], values[:, :, S:]
    if keys.shape[2] == 0:
        assert torch.equal(out, torch.zeros_like(out)) and (lse == -math.inf).all()
        return
    expected = F.scaled_dot_product_attention(q, keys, values, scale=0.5)[:, 0]
    assert torch.allclose(out, expected, atol=1e-10)
    assert torch.allclose(lse, torch.logsumexp(0.5 * q[:, 0] @ keys[:, 0].transpose(-2, -1), -1, keepdim=True))


def test_peak_tensor_bytes_counts_new_storages_not_views_or_inputs():
    x = torch.randn(100)
    assert peak_tensor_bytes(lambda: torch.empty(1000)) == 4000
    assert peak_tensor_bytes(lambda: torch.empty(1000) * 2) == 8000  # both alive at once
    assert peak_tensor_bytes(lambda: x.view(10, 10).t()) == 0
    assert peak_tensor_bytes(lambda: x.view(10, 10).t().contiguous()) == 400


def test_tiling_holds_less_than_the_weights_and_grows_slower():
    peaks = {}
    for L in (256, 1024):
        q, k, v = (torch.randn(1, 1, L, 16) for _ in range(3))
        peaks[L] = peak_tensor_bytes(lambda: tiled_attention(q, k, v, block_q=32, block_k=32))
        assert peaks[L] < L * L * 4  # less than the (L, S) weights alone
        weights = peak_tensor_bytes(lambda: torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v)
        assert weights >= 2 * L * L * 4  # the scores and the weights, both (L, S), alive at once
    assert peaks[1024] < 4 * peaks[256]  # far from the 16x of L²


def qkv(B=1, h=4, L=3, S=5, d=8, g=2):
    return torch.randn(B, h, L, d), torch.randn(B, g, S, d), torch.randn(B, g, S, d)


@pytest.mark.parametrize("call, match", [
    (lambda: online_softmax(torch.tensor([1, 2]), 1), "scores must be a floating-point tensor"),
    (lambda: online_softmax(torch.zeros(2, 0), 1), "at least one entry in its last dimension S"),
    (lambda: online_softmax(torch.zeros(3), 0), "block=0 must be a positive integer"),
    (lambda: online_softmax(torch.zeros(3), 1.5), "block=1.5 must be a positive integer"),
    (lambda: tiled_attention(torch.zeros(4, 3, 8), *qkv()[1:]), r"q must have shape \(B, h, L, d_head\)"),
    (lambda: tiled_attention(qkv()[0], torch.zeros(1, 2, 5, 7), qkv()[2]), r"k must have shape \(B, g, S, d_head\)"),
    (lambda: tiled_attention(*qkv()[:2], torch.zeros(1, 2, 4, 8)), r"v must have shape \(B, g, S, d_v\)"),
    (lambda: tiled_attention(*qkv(h=4, g=3)), r"h \(q.shape\[1\]\)=4 is not divisible by g \(k.shape\[1\]\)=3"),
    (lambda: tiled_attention(*qkv(), block_q=0), "block_q=0 must be a positive integer"),
    (lambda: tiled_attention(*qkv(), block_k=-2), "block_k=-2 must be a positive integer"),
    (lambda: tiled_attention(*qkv(L=6, S=5), is_causal=True), "is_causal=True needs L <= S"),
    (lambda: tiled_attention(*qkv(), attn_mask=torch.ones(3, 5)), "mask must be a boolean tensor"),
    (lambda: tiled_attention(*qkv(), attn_mask=torch.ones(3, 4, dtype=torch.bool)), "does not broadcast"),
    (lambda: split_kv_decode(*qkv(), n_splits=2), "q must hold one query per sequence"),
    (lambda: split_kv_decode(*qkv(L=1)), "give exactly one of n_splits and chunk"),
    (lambda: split_kv_decode(*qkv(L=1), n_splits=2, chunk=3), "give exactly one of n_splits and chunk"),
    (lambda: split_kv_decode(*qkv(L=1), chunk=0), "chunk=0 must be a positive integer"),
    (lambda: split_kv_decode(*qkv(L=1), n_splits=True), "n_splits=True must be a positive integer"),
    (lambda: split_kv_decode(*qkv(L=1, g=3), n_splits=2), r"h \(q.shape\[1\]\)=4 is not divisible"),
    (lambda: split_kv_decode(qkv(L=1)[0], torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 6, 8), chunk=2),
     r"k and v must have shapes"),
])
def test_bad_inputs_are_value_errors_that_name_the_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
