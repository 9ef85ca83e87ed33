"""Sinusoidal position encodings follow Vaswani et al.'s formula."""
import math

import pytest
import torch

from attention_book import sinusoidal_positions


@pytest.mark.parametrize("L, d_model", [(1, 2), (7, 8), (100, 64)])
def test_matches_the_formula(L, d_model):
    encoding = sinusoidal_positions(L, d_model)
    assert encoding.shape == (L, d_model)
    for p in {0, L // 2, L - 1}:
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            assert encoding[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert encoding[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_every_position_gets_a_different_vector():
    encoding = sinusoidal_positions(512, 32)
    distances = torch.cdist(encoding, encoding) + torch.eye(512)
    assert distances.min() > 1e-3


@pytest.mark.parametrize("L, d_model, message", [(5, 7, "d_model=7 must be even"),
                                                 (0, 8, "L=0 must be a positive integer")])
def test_bad_sizes_raise(L, d_model, message):
    with pytest.raises(ValueError, match=message):
        sinusoidal_positions(L, d_model)
