"""Chapter 1's picture of softmax(Q Kᵀ / √d_k) V as matrices: sizes to scale, one query row followed through."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_book import scaled_dot_product_attention  # noqa: E402
from attention_book.figures.sdpa_matrices import draw_sdpa_matrices, sdpa_shapes  # noqa: E402
from attention_book.figures.style import ROLE_COLOURS  # noqa: E402



@pytest.mark.parametrize("L, S, d_k, d_v", [(4, 6, 3, 2), (1, 1, 1, 1), (10, 40, 64, 64), (5, 5, 8, 3)])
def test_shapes_are_those_attention_computes(L, S, d_k, d_v):
    shapes = sdpa_shapes(L, S, d_k, d_v)
    q, k, v = torch.randn(L, d_k), torch.randn(S, d_k), torch.randn(S, d_v)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert shapes["Q"] == tuple(q.shape) and shapes["Kᵀ"] == tuple(k.T.shape) and shapes["V"] == tuple(v.shape)
    assert shapes["scores"] == shapes["weights"] == tuple(weights.shape)
    assert shapes["output"] == tuple(out.shape)


@pytest.mark.parametrize("L, S, d_k, d_v, row",
                         [(4, 6, 3, 2, 1), (1, 1, 1, 1, 0), (10, 40, 64, 64, 9), (3, 20, 2, 5, 2)])
def test_draws_each_matrix_labelled_with_its_shape(L, S, d_k, d_v, row):
    fig = draw_sdpa_matrices(L, S, d_k, d_v, row=row)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert f"Q\n(L, d_k) = ({L}, {d_k})" in labels
    assert f"Kᵀ\n(d_k, S) = ({d_k}, {S})" in labels
    assert f"weights\n(L, S) = ({L}, {S})" in labels
    assert f"output\n(L, d_v) = ({L}, {d_v})" in labels
    assert any(text.startswith(f"Query {row} ") for text in labels)
    # the followed row is drawn in full colour in Q, the scores, the weights and the output
    full = [matplotlib.colors.to_hex(p.get_facecolor()) for p in fig.axes[0].patches]
    for role, count in (("query", 1), ("weight", 2), ("output", 1)):
        assert full.count(ROLE_COLOURS[role].lower()) == count


@pytest.mark.parametrize("kwargs, message", [
    ({"L": 0}, "L=0 must be a positive integer"),
    ({"d_k": 2.5}, "d_k=2.5 must be a positive integer"),
    ({"row": 4}, r"row=4 must be in 0 .. L - 1 = 3"),
    ({"row": -1}, r"row=-1 must be in 0 .. L - 1 = 3"),
    ({"max_cells": 0}, "max_cells=0 must be a positive integer"),
])
def test_rejects_bad_sizes_naming_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        draw_sdpa_matrices(**kwargs)
