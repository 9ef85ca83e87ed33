"""The package's diagrams show what they claim: boxes, labels and errors, not pixels."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_book.figures import diagrams  # noqa: E402
from attention_book.figures.plotting import (  # noqa: E402
    ATTENTION_CMAP, VALUE_CMAP, annotate_heatmap, plot_attention, plot_attention_grid, plot_head_mosaic)
from attention_book.figures.style import INK, head_cmap, head_colour, kv_head_colour  # noqa: E402



def boxes(fig, kind):
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == kind]


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("n_heads, shown", [(1, 1), (3, 3), (5, 5), (8, 4), (32, 4)])
def test_flow_draws_one_box_per_shown_head(n_heads, shown):
    fig = diagrams.draw_mha_flow(n_heads)
    assert len(boxes(fig, "head")) == shown
    labels = texts(fig)
    assert f"head {n_heads - 1}" in labels and "head 0" in labels  # numbered from 0, as in code
    assert ("..." in labels) == (n_heads > 5)
    for kind in ("input", "concat", "output"):
        assert len(boxes(fig, kind)) == 1
    assert len(boxes(fig, "proj")) == 2  # the Q/K/V projections and W_O


def test_flow_shows_widths_when_d_model_is_given():
    labels = texts(diagrams.draw_mha_flow(8, d_model=512))
    assert "head 0\nwidth 64" in labels
    assert "input X (B, L, 512)" in labels


def test_shape_steps_follow_the_seed_example():
    steps = dict(diagrams.mha_shape_steps(512, 8, batch=2, length=10))
    assert steps["input x"] == (2, 10, 512)
    assert steps[".view: split into h heads"] == (2, 10, 8, 64)
    assert steps[".transpose(1, 2): heads first"] == (2, 8, 10, 64)
    assert steps["scores q kᵀ/√d_head, softmax"] == (2, 8, 10, 10)
    assert steps["output = concat W_O"] == (2, 10, 512)


def test_shapes_diagram_labels_every_step_in_letters_and_numbers():
    fig = diagrams.draw_mha_shapes(96, 3, batch=2, length=5)
    assert len(boxes(fig, "shape")) == 8
    labels = texts(fig)
    assert "(B, h, L, d_head)  =  (2, 3, 5, 32)" in labels
    assert "(B, h, L, S)  =  (2, 3, 5, 5)" in labels


@pytest.mark.parametrize("n_heads, n_kv_heads, title", [(8, 8, "MHA"), (8, 2, "GQA"), (6, 1, "MQA")])
def test_head_sharing_counts_heads_and_names_the_variant(n_heads, n_kv_heads, title):
    fig = diagrams.draw_head_sharing(n_heads, n_kv_heads)
    assert len(boxes(fig, "head")) == n_heads
    assert len(boxes(fig, "kv-head")) == n_kv_heads
    plural = "s" if n_kv_heads > 1 else ""
    assert fig.axes[0].get_title().startswith(f"{title}: {n_heads} query heads, {n_kv_heads} K/V head{plural},")
    assert len([p for p in fig.axes[0].patches if p.get_gid() is None]) == n_heads  # one arrow per query head


def test_head_sharing_arrows_follow_the_grouping():
    fig = diagrams.draw_head_sharing(8, 2)
    ax = fig.axes[0]
    kv = sorted(boxes(fig, "kv-head"), key=lambda p: p.get_x())
    arrows = [p for p in ax.patches if p.get_gid() is None]
    for i, arrow in enumerate(arrows):
        (x_end, _) = arrow._posA_posB[1]
        box = kv[i // 4]  # query head i reads K/V head i // (8 // 2)
        assert box.get_x() <= x_end <= box.get_x() + box.get_width()


@pytest.mark.parametrize("call, message", [
    (lambda: diagrams.draw_head_sharing(8, 3), "n_heads=8 is not divisible by n_kv_heads=3"),
    (lambda: diagrams.draw_head_sharing(0, 1), "n_heads=0 must be a positive integer"),
    (lambda: diagrams.draw_mha_flow(6, d_model=100), "d_model=100 is not divisible by n_heads=6"),
    (lambda: diagrams.draw_mha_flow(4, max_shown=2), "max_shown=2 must be at least 3"),
    (lambda: diagrams.draw_mha_shapes(10, 4), "d_model=10 is not divisible by n_heads=4"),
    (lambda: plot_attention_grid(torch.rand(2, 3, 3), list("ab"), list("abc")), "L=2"),
    (lambda: plot_attention(torch.rand(3, 3), list("ab"), list("abc")), "do not match 2 queries"),
], ids=["sharing-groups", "sharing-zero", "flow-d_model", "flow-max_shown", "shapes-d_model", "grid", "heatmap"])
def test_impossible_parameters_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_grid_has_one_titled_axis_per_layer_and_head():
    fig = plot_attention_grid(torch.softmax(torch.randn(2, 3, 4, 4), -1), list("wxyz"), list("wxyz"))
    assert len(fig.axes) == 6
    assert [ax.get_title() for ax in fig.axes[:3]] == ["head 0", "head 1", "head 2"]
    assert fig.axes[0].get_ylabel() == "layer 0" and fig.axes[3].get_ylabel() == "layer 1"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("wxyz")


@pytest.mark.parametrize("name", [ATTENTION_CMAP, VALUE_CMAP] + [head_cmap(i) for i in range(9)])
def test_colour_maps_read_in_greyscale(name):
    """Lightness changes steadily from one end of the map to the other, so greyscale keeps the order of values."""
    colours = plt.get_cmap(name)(torch.linspace(0, 1, 64).numpy())[:, :3]
    luminance = colours @ [0.2126, 0.7152, 0.0722]
    steps = luminance[1:] - luminance[:-1]
    assert (steps > 0).all() or (steps < 0).all()


def test_heatmap_numbers_contrast_with_their_cells():
    fig, ax = plt.subplots()
    image = ax.imshow([[0.0, 1.0]], cmap=head_cmap(0), vmin=0.0, vmax=1.0)
    annotate_heatmap(image, [[0.0, 1.0]])
    assert [text.get_color() for text in ax.texts] == [INK, "#FFFFFF"]  # white cell, head 0's dark indigo
    plt.close(fig)


def test_heatmaps_take_their_head_s_hue():
    weights = torch.softmax(torch.randn(3, 4, 4), -1)
    ax = plot_attention(weights[0], list("abcd"), list("abcd"), head=2)
    assert ax.images[0].cmap(1.0)[:3] == head_cmap(2)(1.0)[:3]
    assert plot_attention(weights[0], list("abcd"), list("abcd")).images[0].cmap is ATTENTION_CMAP  # no head: neutral
    fig = plot_attention_grid(weights, list("abcd"), list("abcd"), heads=[None, 0, 5])
    assert [ax.images[0].cmap for ax in fig.axes][0] is ATTENTION_CMAP
    assert fig.axes[2].images[0].cmap(1.0)[:3] == head_cmap(5)(1.0)[:3]
    assert [ax.get_title() for ax in fig.axes] == ["head", "head 0", "head 5"]
    with pytest.raises(ValueError, match="heads has 2 entries for 3 heads"):
        plot_attention_grid(weights, list("abcd"), list("abcd"), heads=[0, 1])


def test_mosaic_tiles_are_in_their_head_s_hue():
    ax = plot_head_mosaic(torch.ones(2, 3, 4, 4))  # weight 1 everywhere: each tile is its head's full hue
    image = ax.images[0].get_array()
    for j in range(3):
        assert tuple(image[0, j * 5, :3]) == pytest.approx(head_cmap(j)(1.0)[:3])
    assert image[0, 4, :3].tolist() == [1.0, 1.0, 1.0]  # the gap between tiles is white


def test_diagram_heads_are_in_their_hues():
    fig = diagrams.draw_mha_flow(4)
    fills = [p.get_facecolor()[:3] for p in boxes(fig, "head")]
    assert fills == [pytest.approx(matplotlib.colors.to_rgb(head_colour(i))) for i in range(4)]
    fig = diagrams.draw_head_sharing(8, 2)
    kv = sorted(boxes(fig, "kv-head"), key=lambda p: p.get_x())
    assert [p.get_facecolor()[:3] for p in kv] == [
        pytest.approx(matplotlib.colors.to_rgb(kv_head_colour(j, 8, 2))) for j in range(2)]


@pytest.mark.parametrize("n_heads, n_kv_heads", [(8, 8), (8, 2), (6, 1)])
def test_head_sharing_draws_the_cache_it_keeps_and_saves(n_heads, n_kv_heads):
    fig = diagrams.draw_head_sharing(n_heads, n_kv_heads)
    kept = [p for p in fig.axes[0].patches if p.get_gid() == "cache"]
    saved = [p for p in fig.axes[0].patches if p.get_gid() == "cache-saved"]
    assert len(kept) == n_kv_heads and len(saved) == n_heads - n_kv_heads
    assert f"cache: {n_kv_heads} of {n_heads}" in texts(fig)
