"""Chapters 4 and 5: the head-score checks name the averaging mistake (a mean per sequence instead of one pooled
mean), and the figures of the two chapters label what a reader needs to read them."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from attention_book import checks  # noqa: E402
from attention_book.checks import CheckFailed  # noqa: E402
from attention_book.figures.plotting import (  # noqa: E402
    VALUE_CMAP, plot_attention_grid, plot_head_maps, plot_head_mosaic)


# Written without the package's scores, which the checks refuse: a learner's own code, averaged per sequence.
def induction_score_per_sequence(weights, tokens):
    L = tokens.shape[1]
    same = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(L, L, dtype=torch.bool).tril(diagonal=-1)
    target = torch.zeros_like(same)
    target[:, :, 1:] = same[:, :, :-1]  # key j + 1 after each earlier occurrence j
    counted = target.any(dim=-1)  # (B, L)
    per_query = (weights * target[:, None]).sum(dim=-1)  # (B, h, L)
    return ((per_query * counted[:, None]).sum(dim=2) / counted.sum(dim=1, keepdim=True)).mean(0)


def next_token_score_per_sentence(weights, is_real):
    counted = (is_real[:, :-1] & is_real[:, 1:]).float()  # (B, L - 1)
    on_next = weights.diagonal(offset=1, dim1=-2, dim2=-1)  # (B, h, L - 1)
    return ((on_next * counted[:, None]).sum(dim=2) / counted.sum(dim=1, keepdim=True)).mean(0)


@pytest.mark.parametrize("check, mistaken", [(checks.check_induction_score, induction_score_per_sequence),
                                             (checks.check_next_token_score, next_token_score_per_sentence)])
def test_a_mean_per_sequence_is_named(check, mistaken):
    with pytest.raises(CheckFailed, match="Likely mistake: a mean per (sequence|sentence), then a mean over"):
        check(mistaken)


def test_the_grid_names_its_axes_when_asked():
    weights = torch.softmax(torch.randn(2, 3, 4, 4), -1)
    fig = plot_attention_grid(weights, list("wxyz"), list("wxyz"), axis_titles=True)
    assert fig.axes[0].get_ylabel() == "layer 0\nquery ↓" and fig.axes[3].get_ylabel() == "layer 1\nquery ↓"
    assert [ax.get_xlabel() for ax in fig.axes] == [""] * 3 + ["key →"] * 3  # under the bottom row only
    one_layer = plot_attention_grid(weights[0], list("wxyz"), list("wxyz"), axis_titles=True)
    assert one_layer.axes[0].get_ylabel() == "query ↓" and one_layer.axes[1].get_ylabel() == ""
    plain = plot_attention_grid(weights, list("wxyz"), list("wxyz"))  # the default, as chapters 2 and 3 draw it
    assert plain.axes[0].get_ylabel() == "layer 0" and plain.axes[3].get_xlabel() == ""
    plt.close("all")


def test_the_mosaic_marks_the_keys_it_is_given_above_every_tile():
    ax = plot_head_mosaic(torch.rand(2, 3, 5, 5), marked_keys={0: "[CLS]", 4: "[SEP]"})
    marks = [t for t in ax.texts if t.get_gid() == "marked-key"]
    assert sorted(t.get_text() for t in marks) == ["[CLS]"] * 3 + ["[SEP]"] * 3  # one pair per head's tile
    assert sorted(t.get_position()[0] for t in marks) == [0, 4, 6, 10, 12, 16]  # tiles 5 wide, 1 apart
    with pytest.raises(ValueError, match=r"positions \[5\] outside the S=5 keys"):
        plot_head_mosaic(torch.rand(2, 3, 5, 5), marked_keys={5: "[SEP]"})
    plt.close("all")


def test_head_maps_sit_in_a_grid_with_an_odd_last_map_centred():
    maps = {name: torch.rand(6, 12) for name in "abcde"}
    fig = plot_head_maps(maps, columns=2, value_maps=["e"])
    maps_axes = [ax for ax in fig.axes if ax.get_title()]  # the colour bar has no title
    assert [ax.get_title() for ax in maps_axes] == list("abcde")
    boxes = [ax.get_position() for ax in maps_axes]
    assert boxes[0].y0 > boxes[2].y0 > boxes[4].y0  # three rows
    assert boxes[0].x0 < boxes[4].x0 < boxes[1].x0  # the fifth sits between the columns
    assert maps_axes[4].images[0].cmap.name == VALUE_CMAP and len(fig.axes) == 6  # its own scale, with a bar
    assert fig.get_size_inches()[1] < 12  # about half the height of five maps one above the other
    with_bars = plot_head_maps(maps, columns=2, value_maps=["e"], colorbars=True)
    assert len(with_bars.axes) == 10  # five maps, five colour bars
    with pytest.raises(ValueError, match="same shape"):
        plot_head_maps({"a": torch.rand(6, 12), "b": torch.rand(5, 12)})
    with pytest.raises(ValueError, match="not among the maps' titles"):
        plot_head_maps({"a": torch.rand(6, 12)}, value_maps=["entropy"])
    plt.close("all")
