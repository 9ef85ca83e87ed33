"""Chapter 3's picture of the head split: W_Q's columns by head, the regrouping, the concatenation and W_O."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_book.figures.head_split import draw_head_split, head_split_shapes  # noqa: E402
from attention_book.figures.style import head_colour, tint  # noqa: E402



@pytest.mark.parametrize("d_model, n_heads, d_head, L", [(12, 3, 4, 5), (512, 8, 64, 10), (8, 2, 3, 1), (6, 1, 6, 4)])
def test_shapes_are_those_of_the_code(d_model, n_heads, d_head, L):
    B = 2
    shapes = head_split_shapes(d_model, n_heads, d_head, L, batch=B)
    x = torch.randn(B, L, d_model)
    w_q = torch.randn(d_model, n_heads * d_head)
    q = x @ w_q
    by_head = q.view(B, L, n_heads, d_head).transpose(1, 2)
    concat = by_head.transpose(1, 2).reshape(B, L, n_heads * d_head)
    assert shapes["x"] == tuple(x.shape) and shapes["W_Q"] == tuple(w_q.shape) and shapes["q"] == tuple(q.shape)
    assert shapes["q by head"] == shapes["out by head"] == tuple(by_head.shape)
    assert shapes["concat"] == tuple(concat.shape) and torch.equal(concat, q)  # the way back, exactly
    assert torch.equal(by_head[:, 1 % n_heads], q[..., (1 % n_heads) * d_head:(1 % n_heads + 1) * d_head])
    assert shapes["output"] == (B, L, d_model) and shapes["W_O"] == (n_heads * d_head, d_model)


@pytest.mark.parametrize("d_model, n_heads, d_head, L", [(12, 3, 4, 5), (512, 8, 64, 10), (8, 2, 3, 1), (6, 1, 6, 4)])
def test_draws_every_head_in_its_hue(d_model, n_heads, d_head, L):
    fig = draw_head_split(d_model, n_heads, d_head, L)
    patches = fig.axes[0].patches
    stacked = [p for p in patches if p.get_gid() == "head"]
    bands = [p for p in patches if p.get_gid() == "head-band"]
    assert len(stacked) == 2 * n_heads  # q by head and the heads' outputs
    assert len(bands) == 4 * n_heads  # W_Q's columns, q, the concatenation and W_O's rows
    for i in range(n_heads):
        hue = matplotlib.colors.to_rgb(tint(head_colour(i), 0.45))
        assert sum(p.get_facecolor()[:3] == pytest.approx(hue) for p in stacked + bands) == 6
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert f"W_Q (d_model, h·d_head)\n({d_model}, {n_heads * d_head})" in labels
    assert f"q by head\n(h, L, d_head)\n({n_heads}, {L}, {d_head})" in labels


@pytest.mark.parametrize("kwargs, message", [
    ({"d_model": 0}, "d_model=0 must be a positive integer"),
    ({"n_heads": -2}, "n_heads=-2 must be a positive integer"),
    ({"d_head": 1.5}, "d_head=1.5 must be a positive integer"),
    ({"L": None}, "L=None must be a positive integer"),
    ({"max_cells": 0}, "max_cells=0 must be a positive integer"),
])
def test_rejects_bad_sizes_naming_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        draw_head_split(**kwargs)
