"""Chapter 10's three-panel figure (figures/tradeoffs.py): bars in their variants' colours from MQA to MHA, a legend
whose entries do not run into their labels, an annotation clear of the lines, and titles that say which model each
panel measures."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from attention_book.figures.style import VARIANT_COLOURS  # noqa: E402
from attention_book.figures.tradeoffs import draw_tradeoffs  # noqa: E402

GROUPS = [8, 4, 2, 1]
STORED = dict(cache_mib=[384, 192, 96, 48], step_ms=[18.5, 10.8, 5.3, 3.0], memory_bound_ms=[8.2, 4.1, 2.05, 1.03],
              compute_bound_ms=1.0, losses={0: [0.004, 3.46, 4.73, 4.64], 30: [0.023, 0.068, 0.73, 2.54],
                                            150: [0.008, 0.002, 0.005, 0.39]})


@pytest.fixture
def figure():
    fig = draw_tradeoffs(8, GROUPS, **STORED, cache_title="a real decoder's shape\nKV cache",
                         step_title="the same shape\ndecode step", loss_title="chapter 9's tiny model\nloss")
    fig.canvas.draw()
    yield fig
    plt.close(fig)


def test_bars_run_from_mqa_to_mha_in_their_variants_colours(figure):
    ax_mem, ax_time, _ = figure.axes
    for ax, values in ((ax_mem, STORED["cache_mib"]), (ax_time, STORED["step_ms"])):
        assert [p.get_height() for p in ax.patches] == pytest.approx(values[::-1])  # g = 1 on the left
        assert [to_hex(p.get_facecolor()) for p in ax.patches] == [
            to_hex(VARIANT_COLOURS[v]) for v in ("MQA", "GQA", "GQA", "MHA")]
    assert [t.get_text() for t in ax_mem.get_xticklabels()] == ["g=1\nMQA", "g=2\nGQA", "g=4\nGQA", "g=8\nMHA"]


def test_each_panel_says_which_model_it_measures(figure):
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["a real decoder's shape\nKV cache", "the same shape\ndecode step", "chapter 9's tiny model\nloss"]


def test_the_legend_draws_lines_that_fit_beside_their_labels(figure):
    legend = figure.axes[1].get_legend()
    renderer = figure.canvas.get_renderer()
    for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
        if hasattr(handle, "get_marker"):
            assert handle.get_marker() in ("None", "", None), "a marker as wide as a bar runs into its label"
        assert handle.get_window_extent(renderer).x1 <= text.get_window_extent(renderer).x0 + 1


def test_the_mha_annotation_is_clear_of_every_line(figure):
    ax = figure.axes[2]
    renderer = figure.canvas.get_renderer()
    (note,) = ax.texts
    box = Text.get_window_extent(note, renderer).expanded(1.05, 1.2)  # the words, not the arrow to the point
    for line in ax.lines:
        xy = line.get_transform().transform(np.column_stack(line.get_data(orig=False)).astype(float))
        for a, b in zip(xy[:-1], xy[1:], strict=True):
            for t in np.linspace(0, 1, 200):
                x, y = a + t * (b - a)
                assert not (box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1), f"'{note.get_text()}' crosses a line"


@pytest.mark.parametrize("change, message", [
    (dict(cache_mib=[1, 2]), "cache_mib has 2 values for 4"),
    (dict(losses={}), "losses must hold 1 to 3"),
    (dict(n_kv_heads=[8, 4, 3, 1]), "n_kv_heads=3 must divide n_heads=8"),
])
def test_bad_inputs_are_named(change, message):
    kwargs = {**STORED, "n_kv_heads": GROUPS, **change}
    with pytest.raises(ValueError, match=message):
        draw_tradeoffs(8, **kwargs)


def test_the_step_panel_keeps_a_fast_step_apart_from_its_bounds(figure):
    ax = figure.axes[1]
    assert ax.get_yscale() == "log"  # MQA's 3 ms bar and its 1 ms bounds, beside MHA's 18 ms, stay apart
    low, high = ax.get_ylim()
    values = [*STORED["step_ms"], *STORED["memory_bound_ms"], STORED["compute_bound_ms"]]
    assert low < min(values) and max(values) < high
