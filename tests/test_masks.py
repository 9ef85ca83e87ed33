"""causal_mask (aligned bottom-right) and real_key_mask, and how they differ from SDPA's is_causal."""
import pytest
import torch
import torch.nn.functional as F
from _hypothesis import SEEDS
from hypothesis import given
from hypothesis import strategies as st

from attention_book import causal_mask, real_key_mask


@st.composite
def query_and_key_lengths(draw, max_len=12, strict=False):
    """(L, S) with 1 <= L <= S, or L < S if strict."""
    S = draw(st.integers(2 if strict else 1, max_len))
    return draw(st.integers(1, S - 1 if strict else S)), S


def top_left_causal(L, S):
    """The mask SDPA's is_causal=True uses: query i sees keys 0 .. i."""
    return torch.ones(L, S, dtype=torch.bool).tril(diagonal=0)


@given(lengths=query_and_key_lengths())
def test_causal_mask_is_bottom_right_aligned(lengths):
    L, S = lengths
    mask = causal_mask(L, S)
    assert mask.dtype == torch.bool and mask.shape == (L, S)
    assert torch.equal(mask, torch.ones(L, S).tril(S - L).bool())
    # query i is position i + (S - L) of the key sequence and sees exactly the keys up to it
    for i in range(L):
        assert mask[i].sum() == i + S - L + 1
    assert mask[-1].all(), "the newest query sees every key"


@pytest.mark.parametrize("L", [1, 2, 5, 9])
def test_square_causal_mask_is_the_lower_triangle(L):
    expected = torch.tensor([[j <= i for j in range(L)] for i in range(L)])
    assert torch.equal(causal_mask(L), expected)
    assert torch.equal(causal_mask(L, L), expected)
    assert torch.equal(causal_mask(L), top_left_causal(L, L))


@given(L=st.integers(1, 9), seed=SEEDS)
def test_square_causal_mask_matches_sdpa_is_causal(L, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, L, 4, generator=g) for _ in range(3))
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(L))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)


@given(lengths=query_and_key_lengths(strict=True))
def test_rectangular_causal_mask_differs_from_sdpa_top_left(lengths):
    L, S = lengths
    ours = causal_mask(L, S)
    assert not torch.equal(ours, top_left_causal(L, S))
    # ours sees more: every key SDPA's is_causal allows, plus the S - L keys at the end of each row
    assert (ours | top_left_causal(L, S)).equal(ours)
    assert ours.sum() - top_left_causal(L, S).sum() == L * (S - L)


@pytest.mark.parametrize("S", [2, 5, 8])
def test_single_decode_query_sees_every_key_but_sdpa_is_causal_sees_only_key_0(S):
    torch.manual_seed(S)
    q, k = torch.randn(1, 1, 4), torch.randn(1, S, 4)
    identity = torch.eye(S)[None]  # attending over the identity returns the weights themselves
    ours = F.scaled_dot_product_attention(q, k, identity, attn_mask=causal_mask(1, S))
    theirs = F.scaled_dot_product_attention(q, k, identity, is_causal=True)
    assert causal_mask(1, S).all()
    assert (ours > 0).all(), "bottom-right: the decode query attends to every cached key"
    torch.testing.assert_close(theirs, torch.eye(S)[:1][None], msg="top-left: only key 0 gets any weight")
    torch.testing.assert_close(ours, torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1))


def test_causal_mask_device_and_default_S():
    mask = causal_mask(3, device="cpu")
    assert mask.device.type == "cpu"
    assert mask.shape == (3, 3)


@given(lengths=st.lists(st.integers(0, 8), min_size=1, max_size=5), extra=st.integers(0, 3))
def test_real_key_mask_marks_the_first_lengths_keys(lengths, extra):
    S = max(max(lengths), 1) + extra
    mask = real_key_mask(lengths, S)
    assert mask.dtype == torch.bool and mask.shape == (len(lengths), 1, S)
    for b, n in enumerate(lengths):
        assert mask[b, 0].tolist() == [True] * n + [False] * (S - n)


def test_real_key_mask_accepts_a_tensor_and_defaults_S_to_the_longest():
    mask = real_key_mask(torch.tensor([3, 1, 2]))
    assert mask.shape == (3, 1, 3)
    assert torch.equal(mask[:, 0], torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool))


@given(lengths=st.lists(st.integers(0, 8), min_size=1, max_size=4).filter(lambda ls: max(ls) > 0),
       L=st.integers(1, 8))
def test_padding_and_causal_combine_with_and(lengths, L):
    S = max(max(lengths), L)
    combined = causal_mask(L, S) & real_key_mask(lengths, S)
    assert combined.shape == (len(lengths), L, S)
    for b, n in enumerate(lengths):
        for i in range(L):
            for j in range(S):
                assert bool(combined[b, i, j]) == (j <= i + S - L and j < n)
