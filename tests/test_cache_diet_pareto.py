"""The Pareto front of cache bytes against perplexity, and chapter 15's plot of it."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from attention_book.cache_diet import pareto_front_names  # noqa: E402
from attention_book.figures.cache_diet import draw_cache_diet, technique_styles  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

POINTS = {"full": (45.0, 13.69), "MHA": (135.0, 13.69), "window": (22.5, 26.4), "sinks": (22.7, 14.06),
          "int8": (15.1, 13.70), "MQA": (15.0, 17419.0), "CLA": (22.5, 466969.0)}


def test_the_front_is_every_point_that_no_other_beats_on_both():
    # MHA: same perplexity as full, more bytes; window and sinks: int8 is smaller and better; CLA: MQA is
    assert pareto_front_names(POINTS) == ["MQA", "int8", "full"]


def test_equal_points_are_both_on_the_front_and_a_strictly_better_one_removes_them():
    assert pareto_front_names({"a": (1, 2), "b": (1, 2)}) == ["a", "b"]
    assert pareto_front_names({"a": (1, 2), "b": (1, 2), "c": (1, 1.5)}) == ["c"]


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.tuples(st.integers(1, 20), st.integers(1, 20)),
                       min_size=1, max_size=12))
def test_front_points_are_undominated_and_every_other_point_is_dominated_by_a_front_point(points):
    front = pareto_front_names(points)
    assert front and len(set(front)) == len(front)

    def beats(a, b):
        return a[0] <= b[0] and a[1] <= b[1] and a != b

    for name in front:
        assert not any(beats(points[other], points[name]) for other in points)
    for name in set(points) - set(front):
        assert any(beats(points[other], points[name]) for other in front)
    assert [points[name][0] for name in front] == sorted(points[name][0] for name in front)


@pytest.mark.parametrize("points, match", [
    ({}, "non-empty dict"),
    ({"a": (1, 2, 3)}, r"points\['a'\] must be \(bytes, perplexity\)"),
    ({"a": (0, 2)}, "positive finite"),
    ({"a": (1, float("nan"))}, "positive finite"),
])
def test_bad_points_are_refused(points, match):
    with pytest.raises(ValueError, match=match):
        pareto_front_names(points)


def test_the_plot_has_a_panel_per_context_the_front_and_off_scale_points():
    perplexity = {name: p for name, (_, p) in POINTS.items()}
    at_1k = {name: b * 2**20 for name, (b, _) in POINTS.items()}
    at_8k = dict(at_1k, full=360 * 2**20, MHA=1080 * 2**20, int8=101 * 2**20, MQA=120 * 2**20, CLA=180 * 2**20)
    fig = draw_cache_diet({"at 1,024 tokens": at_1k, "at 8,192 tokens": at_8k}, perplexity, ceiling=40)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["at 1,024 tokens", "at 8,192 tokens"]
    for ax, points in zip(axes, (at_1k, at_8k), strict=True):
        front = [line for line in ax.get_lines() if line.get_gid() == "pareto-front"]
        assert len(front) == 1
        expected = pareto_front_names({name: (points[name], perplexity[name]) for name in perplexity})
        assert list(front[0].get_xdata()) == pytest.approx([points[name] / 2**20 for name in expected])
        off = [c for c in ax.collections if c.get_gid() == "off-scale"]
        assert len(off) == 2  # MQA and CLA, written as numbers
        assert sorted(t.get_text() for t in ax.texts if t.get_gid() == "off-scale-label") == ["17,419", "466,969"]
    plt.close(fig)


def test_variants_keep_their_colours_and_the_others_differ():
    styles = technique_styles(["full (GQA)", "MHA", "MQA (pooled)", "window", "int8"])
    from attention_book.figures.style import VARIANT_COLOURS
    assert styles["full (GQA)"][0] == VARIANT_COLOURS["GQA"] and styles["MHA"][0] == VARIANT_COLOURS["MHA"]
    assert styles["MQA (pooled)"][0] == VARIANT_COLOURS["MQA"]
    assert len({styles[n] for n in styles}) == len(styles)


@pytest.mark.parametrize("args, match", [
    (({}, {"a": 2.0}), "1 to 3 panel"),
    (({"p": {"a": 1.0}}, {}), "non-empty dict"),
    (({"p": {"b": 1.0}}, {"a": 2.0}), "exactly the names"),
    (({"p": {"a": -1.0}}, {"a": 2.0}), "positive number of bytes"),
    (({"p": {"a": 1.0}}, {"a": float("inf")}), "positive finite"),
])
def test_bad_plot_inputs_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        draw_cache_diet(*args)
