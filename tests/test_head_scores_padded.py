"""weight_on, offset_targets and attention_entropy: head scores for padded batches of real sentences."""
import math

import pytest
import torch
from attention_book.experiments.head_scores import attention_entropy, offset_targets, previous_token_score, weight_on
from attention_book.figures.plotting import plot_head_map, plot_head_mosaic


def test_offset_targets_respect_padding():
    is_real = torch.tensor([[True, True, True, False]])
    previous, following = offset_targets(is_real, -1)[0], offset_targets(is_real, +1)[0]
    assert previous.nonzero().tolist() == [[1, 0], [2, 1]]
    assert following.nonzero().tolist() == [[0, 1], [1, 2]]


def test_weight_on_a_perfect_next_token_head():
    weights = torch.zeros(1, 1, 4, 4)
    weights[0, 0, [0, 1, 2, 3], [1, 2, 2, 0]] = 1.0  # the last real query (2) and the padding one look elsewhere
    is_real = torch.tensor([[True, True, True, False]])
    assert weight_on(weights, offset_targets(is_real, +1), is_real).item() == 1.0


def test_weight_on_the_first_key_and_layers():
    weights = torch.softmax(torch.randn(3, 2, 4, 5, 5, generator=torch.Generator().manual_seed(0)), dim=-1)
    first = torch.zeros(2, 5, dtype=torch.bool)
    first[:, 0] = True
    assert torch.allclose(weight_on(weights, first), weights[..., 0].mean(dim=(1, 3)))
    assert weight_on(weights, first).shape == (3, 4)


def test_previous_token_score_is_the_unpadded_case():
    weights = torch.softmax(torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1)), dim=-1)
    is_real = torch.ones(2, 6, dtype=torch.bool)
    assert torch.allclose(weight_on(weights, offset_targets(is_real, -1), is_real), previous_token_score(weights))


def test_entropy_of_one_hot_and_uniform_weights():
    is_real = torch.tensor([[True, True, True, True, False]])
    uniform = torch.zeros(1, 1, 5, 5)
    uniform[..., :4] = 0.25
    assert math.isclose(attention_entropy(uniform, is_real).item(), math.log(4), rel_tol=1e-6)
    assert attention_entropy(torch.eye(5)[None, None], is_real).item() == 0.0


def test_scores_reject_bad_shapes():
    weights = torch.full((1, 2, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match="targets must have shape"):
        weight_on(weights, torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="queries must have shape"):
        attention_entropy(weights, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="no query has a target"):
        weight_on(weights, torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="weights must have shape"):
        weight_on(weights[0], torch.ones(1, 3, dtype=torch.bool))


def test_head_figures():
    import matplotlib.pyplot as plt

    ax = plot_head_map(torch.rand(2, 3))
    assert len(ax.texts) == 6
    ax = plot_head_mosaic(torch.rand(2, 3, 4, 4))
    assert ax.images[0].get_array().shape[:2] == (2 * 5 - 1, 3 * 5 - 1)  # an RGBA image, tiles in head hues
    with pytest.raises(ValueError, match="n_layers, h"):
        plot_head_map(torch.rand(3))
    with pytest.raises(ValueError, match="n_layers, h, L, S"):
        plot_head_mosaic(torch.rand(3, 4, 4))
    plt.close("all")
