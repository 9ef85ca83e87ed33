"""SelfAttentionHead against PyTorch's SDPA, its parameter count, its errors, and permutation-equivariance."""
import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book import SelfAttentionHead, causal_mask, sinusoidal_positions


@given(seed=SEEDS, B=st.integers(1, 3), L=st.integers(1, 9), d_model=st.integers(1, 24),
       d_head=st.integers(1, 16), bias=st.booleans(), masked=st.booleans())
def test_head_equals_sdpa_of_its_projections(seed, B, L, d_model, d_head, bias, masked):
    torch.manual_seed(seed)
    head = SelfAttentionHead(d_model, d_head, bias=bias)
    x = torch.randn(B, L, d_model)
    mask = causal_mask(L) if masked else None
    out, weights = head(x, mask=mask)
    q, k, v = head.q_proj(x), head.k_proj(x), head.v_proj(x)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (B, L, d_head) and weights.shape == (B, L, L)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@given(seed=SEEDS, L=st.integers(2, 9), d_model=st.integers(2, 16).filter(lambda d: d % 2 == 0))
def test_permutation_equivariant_without_positions_and_not_with_them(seed, L, d_model):
    torch.manual_seed(seed)
    head = SelfAttentionHead(d_model, 4)
    x = torch.randn(1, L, d_model)
    order = torch.roll(torch.arange(L), 1)  # a permutation that moves every token
    out, _ = head(x)
    out_permuted, _ = head(x[:, order])
    torch.testing.assert_close(out_permuted, out[:, order], atol=1e-5, rtol=1e-5)
    positions = sinusoidal_positions(L, d_model)
    with_positions, _ = head(x + positions)
    permuted_with_positions, _ = head(x[:, order] + positions)
    assert not torch.allclose(permuted_with_positions, with_positions[:, order], atol=1e-4)


@pytest.mark.parametrize("d_model, d_head, bias, expected", [(16, 8, False, 384), (512, 64, False, 98_304),
                                                              (16, 8, True, 408)])
def test_parameter_count(d_model, d_head, bias, expected):
    assert sum(p.numel() for p in SelfAttentionHead(d_model, d_head, bias=bias).parameters()) == expected


@pytest.mark.parametrize("make, message", [
    (lambda: SelfAttentionHead(0, 4), "d_model=0 must be a positive integer"),
    (lambda: SelfAttentionHead(8, -1), "d_head=-1 must be a positive integer"),
    (lambda: SelfAttentionHead(8, 4)(torch.randn(5, 8)), r"x must have shape \(B, L, d_model\)"),
    (lambda: SelfAttentionHead(8, 4)(torch.randn(1, 5, 6)), "x has last dimension 6 but the head has d_model=8"),
    (lambda: SelfAttentionHead(8, 4)(torch.randn(1, 5, 8), mask=torch.ones(4, 4, dtype=torch.bool)),
     "does not broadcast"),
], ids=["d_model", "d_head", "rank", "last-dim", "mask-shape"])
def test_bad_input_raises_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()
