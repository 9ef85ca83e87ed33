"""scaled_dot_product_attention against PyTorch's F.scaled_dot_product_attention.

The book's function returns (out, weights); PyTorch's returns only out. The reference weights are
PyTorch's output for v = the identity matrix, since then out = weights @ I = weights.
"""
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book import scaled_dot_product_attention

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp64", "fp16", "bf16"]
# fp32 and fp64 are compared to PyTorch in the same dtype; fp16 and bf16 to PyTorch in fp32 on the same
# (rounded) inputs, so the tolerance covers the half-precision arithmetic: about 4 ulps of a value near 1.
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float16: dict(atol=4e-3, rtol=4e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}
MASK_KINDS = ["none", "L,S", "...,L,S", "1,S", "...,1,S"]


@dataclass(frozen=True)
class Case:
    batch: tuple  # leading dimensions: (), (b,) or (b1, b2)
    L: int
    S: int
    d: int
    d_v: int
    mask_kind: str
    p_allowed: float  # probability that a mask entry is True
    scale: float | None
    seed: int

    def mask_shape(self):
        return {
            "none": None,
            "L,S": (self.L, self.S),
            "...,L,S": (*self.batch, self.L, self.S),
            "1,S": (1, self.S),
            "...,1,S": (*self.batch, 1, self.S),
        }[self.mask_kind]

    def tensors(self, dtype):
        """q, k, v in ``dtype`` (drawn in fp32, then rounded) and the boolean mask, or None."""
        g = torch.Generator().manual_seed(self.seed)
        q = torch.randn(*self.batch, self.L, self.d, generator=g)
        k = torch.randn(*self.batch, self.S, self.d, generator=g)
        v = torch.randn(*self.batch, self.S, self.d_v, generator=g)
        shape = self.mask_shape()
        mask = None if shape is None else torch.rand(shape, generator=g) < self.p_allowed
        return q.to(dtype), k.to(dtype), v.to(dtype), mask


@st.composite
def cases(draw, mask_kinds=MASK_KINDS):
    d, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 7))
    return Case(
        batch=tuple(draw(st.lists(st.integers(1, 3), max_size=2))),
        L=draw(st.integers(1, 9)),
        S=draw(st.integers(1, 9)),
        d=d,
        d_v=d_v if d_v < d else d_v + 1,  # 1..8, never equal to d
        mask_kind=draw(st.sampled_from(mask_kinds)),
        p_allowed=draw(st.sampled_from([0.2, 0.5, 0.9])),
        scale=draw(st.none() | st.floats(0.05, 2.0)),
        seed=draw(SEEDS),
    )


def torch_reference(q, k, v, mask, scale):
    """(out, weights) from PyTorch's fused SDPA; weights are its output for v = identity."""
    S = k.shape[-2]
    eye = torch.eye(S, dtype=q.dtype).expand(*k.shape[:-2], S, S)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)
    return out, weights


def any_key_allowed(mask, weights_shape):
    """Boolean (..., L): True where the query may attend to at least one key."""
    if mask is None:
        return torch.ones(weights_shape[:-1], dtype=torch.bool)
    return mask.expand(weights_shape).any(dim=-1)


def kill_rows(mask, seed):
    """Mask out every key for a random half of the query rows (at least one row).

    Returns the new mask and the (..., L) rows that now attend to nothing (the random mask may already
    have emptied some rows itself).
    """
    g = torch.Generator().manual_seed(seed + 1)
    dead = torch.rand(mask.shape[:-1], generator=g) < 0.5
    dead.view(-1)[0] = True
    mask = mask & ~dead[..., None]
    return mask, ~mask.any(dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@given(case=cases())
def test_matches_torch_sdpa(case, dtype):
    q, k, v, mask = case.tensors(dtype)
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale=case.scale)
    # the reference runs in fp32 for half precisions, on the same rounded inputs
    ref_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    ref_out, ref_weights = torch_reference(q.to(ref_dtype), k.to(ref_dtype), v.to(ref_dtype), mask, case.scale)
    assert out.dtype == weights.dtype == dtype
    assert out.shape == (*case.batch, case.L, case.d_v)
    assert weights.shape == (*case.batch, case.L, case.S)
    torch.testing.assert_close(out.to(ref_dtype), ref_out, **TOL[dtype])
    torch.testing.assert_close(weights.to(ref_dtype), ref_weights, **TOL[dtype])


@given(case=cases())
def test_default_scale_is_one_over_sqrt_d(case):
    q, k, v, mask = case.tensors(torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    out_explicit, weights_explicit = scaled_dot_product_attention(q, k, v, mask, scale=case.d**-0.5)
    torch.testing.assert_close(out, out_explicit, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(weights, weights_explicit, atol=1e-12, rtol=1e-12)


@given(case=cases())
def test_weights_rows_sum_to_one_where_any_key_is_allowed(case):
    q, k, v, mask = case.tensors(torch.float64)
    _, weights = scaled_dot_product_attention(q, k, v, mask, scale=case.scale)
    allowed = any_key_allowed(mask, weights.shape)
    sums = weights.sum(dim=-1)
    torch.testing.assert_close(sums[allowed], torch.ones_like(sums[allowed]), atol=1e-12, rtol=0)
    assert (sums[~allowed] == 0).all()
    assert (weights >= 0).all()
    if mask is not None:  # masked keys get exactly zero weight
        assert (weights[~mask.expand(weights.shape)] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@given(case=cases(mask_kinds=["L,S", "...,L,S"]))
def test_fully_masked_rows_are_exactly_zero_and_not_nan(case, dtype):
    q, k, v, mask = case.tensors(dtype)
    mask, dead = kill_rows(mask, case.seed)
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale=case.scale)
    assert not out.isnan().any() and not weights.isnan().any()
    dead = dead.expand(weights.shape[:-1])
    assert (weights[dead] == 0).all()
    assert (out[dead] == 0).all()
    # the other rows are untouched: equal to PyTorch's fused kernel
    ref_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    ref_out, _ = torch_reference(q.to(ref_dtype), k.to(ref_dtype), v.to(ref_dtype), mask, case.scale)
    torch.testing.assert_close(out.to(ref_dtype), ref_out, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@given(case=cases(mask_kinds=["L,S", "...,L,S"]))
def test_gradients_are_finite_with_fully_masked_rows(case, dtype):
    q, k, v, mask = case.tensors(dtype)
    mask, dead = kill_rows(mask, case.seed)
    g = torch.Generator().manual_seed(case.seed + 2)
    upstream = torch.randn(*case.batch, case.L, case.d_v, generator=g, dtype=dtype)

    def grads(fn):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        (fn(*leaves) * upstream).sum().backward()
        return [t.grad for t in leaves]

    ours = grads(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask, scale=case.scale)[0])
    theirs = grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=case.scale))
    for name, grad, ref in zip("qkv", ours, theirs, strict=True):
        assert torch.isfinite(grad).all(), f"gradient w.r.t. {name} is not finite"
        torch.testing.assert_close(grad, ref, **TOL[dtype], msg=f"gradient w.r.t. {name}")
    # a query that attends to nothing does not influence the output
    assert (ours[0][dead.expand(q.shape[:-1])] == 0).all()


# --- The pitfall the book warns about: filling masked scores with -1e9 instead of -inf -------------------


def naive_attention_minus_1e9(q, k, v, mask, scale):
    scores = (q @ k.transpose(-2, -1)) * scale
    weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
    return weights @ v, weights


def test_minus_1e9_fill_overflows_in_fp16():
    """-1e9 is far beyond fp16's range (max 65504): PyTorch refuses the fill, or it overflows to -inf."""
    torch.manual_seed(0)
    scores = torch.randn(3, 5, dtype=torch.float16)
    mask = torch.rand(3, 5) < 0.5
    try:
        filled = scores.masked_fill(~mask, -1e9)
    except RuntimeError as error:
        assert "overflow" in str(error)
    else:  # no error: the value did not survive the cast
        assert not torch.isfinite(filled[~mask]).any()
    # the book's function handles fp16 masks without either problem
    q, k, v = (torch.randn(3, 4, dtype=torch.float16), torch.randn(5, 4, dtype=torch.float16),
               torch.randn(5, 2, dtype=torch.float16))
    mask[1] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights[~mask] == 0).all()


@given(case=cases(mask_kinds=["L,S", "...,L,S"]))
def test_minus_1e9_fill_differs_from_ours_exactly_on_fully_masked_rows(case):
    """In fp32 the naive fill gives a uniform row (1/S each) where every key is masked; ours gives zeros."""
    q, k, v, mask = case.tensors(torch.float32)
    mask, dead = kill_rows(mask, case.seed)
    scale = case.scale if case.scale is not None else case.d**-0.5
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    naive_out, naive_weights = naive_attention_minus_1e9(q, k, v, mask, scale)
    dead = dead.expand(weights.shape[:-1])
    differs = (weights - naive_weights).abs().amax(dim=-1) > 1e-6
    assert torch.equal(differs, dead)
    torch.testing.assert_close(naive_weights[dead], torch.full_like(naive_weights[dead], 1 / case.S))
    assert (weights[dead] == 0).all()
    # the naive output on a dead row is the mean of the values, ours is zero
    mean_of_values = v.mean(dim=-2, keepdim=True).expand(*dead.shape, case.d_v)
    torch.testing.assert_close(naive_out[dead], mean_of_values[dead])
    assert (out[dead] == 0).all()
    torch.testing.assert_close(out[~dead], naive_out[~dead], atol=1e-5, rtol=1e-5)
