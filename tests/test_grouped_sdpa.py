"""grouped_query_sdpa (query heads folded into the length dimension) equals SDPA's enable_gqa and repeat_interleave."""
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book.grouped_sdpa import grouped_query_sdpa
from attention_book.masks import causal_mask

MASK_KINDS = ["none", "L,S causal", "B,1,L,S", "B,h,L,S", "1,h,L,S"]


@st.composite
def cases(draw):
    g, group = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    B, S, d = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 8))
    L = draw(st.integers(1, S))
    return dict(B=B, h=g * group, g=g, L=L, S=S, d=d, mask=draw(st.sampled_from(MASK_KINDS)),
                dtype=draw(st.sampled_from([torch.float32, torch.float64])), seed=draw(SEEDS))


def make(case):
    gen = torch.Generator().manual_seed(case["seed"])
    B, h, g, L, S, d, dtype = (case[k] for k in ("B", "h", "g", "L", "S", "d", "dtype"))
    q = torch.randn(B, h, L, d, generator=gen, dtype=dtype)
    k, v = (torch.randn(B, g, S, d, generator=gen, dtype=dtype) for _ in range(2))
    shapes = {"B,1,L,S": (B, 1, L, S), "B,h,L,S": (B, h, L, S), "1,h,L,S": (1, h, L, S)}
    mask = {"none": None, "L,S causal": causal_mask(L, S)}.get(case["mask"])
    if case["mask"] in shapes:
        mask = torch.rand(shapes[case["mask"]], generator=gen) > 0.3
    return q, k, v, mask


@given(case=cases())
def test_equals_enable_gqa(case):
    q, k, v, mask = make(case)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    tol = 1e-5 if case["dtype"] == torch.float32 else 1e-12
    torch.testing.assert_close(grouped_query_sdpa(q, k, v, mask), expected, atol=tol, rtol=tol)


@given(case=cases())
def test_equals_repeat_interleave(case):
    q, k, v, mask = make(case)
    group = case["h"] // case["g"]
    expected = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                                              attn_mask=mask)
    tol = 1e-5 if case["dtype"] == torch.float32 else 1e-12
    torch.testing.assert_close(grouped_query_sdpa(q, k, v, mask), expected, atol=tol, rtol=tol)


def test_decoding_one_token_against_a_long_cache():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 32, 1, 16, generator=gen)  # (B, h, 1, d): one new token
    k, v = (torch.randn(2, 4, 300, 16, generator=gen) for _ in range(2))  # (B, g, S, d)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(grouped_query_sdpa(q, k, v, causal_mask(1, 300)), expected, atol=1e-5, rtol=1e-5)


def test_the_comparison_implementations_agree_with_the_folded_one():
    from attention_book.grouped_sdpa import gqa_by_repeating_kv, gqa_with_enable_gqa

    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 8, 3, 4, generator=gen)
    k, v = (torch.randn(2, 2, 5, 4, generator=gen) for _ in range(2))
    folded = grouped_query_sdpa(q, k, v)
    torch.testing.assert_close(gqa_by_repeating_kv(q, k, v), folded, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(gqa_with_enable_gqa(q, k, v), folded, atol=1e-6, rtol=1e-6)
