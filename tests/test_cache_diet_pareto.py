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


def panels(fig, gid):
    every = fig.axes + [child for ax in fig.axes for child in ax.child_axes]  # insets are their axes' children
    return [ax for ax in every if ax.get_gid() == gid]


def test_the_plot_has_a_panel_per_context_the_front_and_off_scale_points():
    perplexity = {name: p for name, (_, p) in POINTS.items()}
    at_1k = {name: b * 2**20 for name, (b, _) in POINTS.items()}
    at_8k = dict(at_1k, full=360 * 2**20, MHA=1080 * 2**20, int8=101 * 2**20, MQA=120 * 2**20, CLA=180 * 2**20)
    fig = draw_cache_diet({"at 1,024 tokens": at_1k, "at 8,192 tokens": at_8k}, perplexity, ceiling=40)
    mains, strips = panels(fig, "panel"), panels(fig, "off-scale")
    assert len(mains) == len(strips) == 2
    assert [ax.get_title() for ax in strips] == ["at 1,024 tokens", "at 8,192 tokens"]  # titles above the strips
    for ax, strip, points in zip(mains, strips, (at_1k, at_8k), strict=True):
        front = [line for line in ax.get_lines() if line.get_gid() == "pareto-front"]
        assert len(front) == 1
        expected = pareto_front_names({name: (points[name], perplexity[name]) for name in perplexity})
        assert list(front[0].get_xdata()) == pytest.approx([points[name] / 2**20 for name in expected])
        # the staircase carries the true perplexities: the axes clip it, nothing is moved to an edge
        assert list(front[0].get_ydata()) == pytest.approx([perplexity[name] for name in expected])
        off = [c for c in strip.collections if c.get_gid() == "off-scale"]
        assert len(off) == 2  # MQA and CLA, at their true values on the strip's log axis, written as numbers
        assert strip.get_yscale() == "log"
        assert sorted(c.get_offsets()[0][1] for c in off) == pytest.approx([17419.0, 466969.0])
        assert sorted(t.get_text() for t in strip.texts if t.get_gid() == "off-scale-label") == ["17,419", "466,969"]
        assert not [c for c in ax.collections if c.get_gid() == "off-scale"]  # none left at the main axes' edge
        low, high = ax.get_ylim()
        assert high < 17419.0 and low < min(perplexity.values())
        assert [line for line in ax.get_lines() + strip.get_lines() if line.get_gid() == "axis-break"]
    plt.close(fig)


def marker_paths(collections):
    return [c.get_paths()[0].vertices.round(6).tolist() for c in collections]


def test_off_scale_points_keep_their_marker_and_a_ring_only_where_the_point_is_drawn():
    perplexity = {"full (GQA)": 13.75, "MQA (pooled)": 11969.0, "int8": 13.76}
    at_1k = {"full (GQA)": 45 * 2**20, "MQA (pooled)": 15.0 * 2**20, "int8": 15.1 * 2**20}
    fig = draw_cache_diet({"at 1,024 tokens": at_1k}, perplexity, zoom=None)
    (ax,), (strip,) = panels(fig, "panel"), panels(fig, "off-scale")
    [mqa] = [c for c in strip.collections if c.get_gid() == "off-scale"]
    reference = plt.figure().add_subplot().scatter([1], [1], marker=technique_styles(list(perplexity))
                                                   ["MQA (pooled)"][1])
    assert marker_paths([mqa]) == marker_paths([reference])  # the legend's square, not a triangle
    rings = [c for c in strip.collections if c.get_gid() == "pareto-front-off-scale-ring"]
    assert len(rings) == 1 and rings[0].get_offsets()[0][1] == pytest.approx(11969.0)  # ringed where it is drawn
    main_rings = [c for c in ax.collections if c.get_gid() == "pareto-front-ring"]
    assert all(y < 100 for ring in main_rings for _, y in ring.get_offsets())  # no ring at a clipped position
    plt.close("all")


def test_crowded_points_near_the_lowest_perplexity_get_an_inset():
    perplexity = {name: p for name, (_, p) in POINTS.items()}
    at_1k = {name: b * 2**20 for name, (b, _) in POINTS.items()}
    fig = draw_cache_diet({"at 1,024 tokens": at_1k}, perplexity, ceiling=40)
    (inset,) = panels(fig, "zoom")
    zoomed = sorted(c.get_offsets()[0][1] for c in inset.collections if c.get_gid() == "zoomed")
    assert zoomed == pytest.approx(sorted(p for p in perplexity.values() if p <= 13.69 * 1.05))
    low, high = inset.get_ylim()
    assert low < 13.69 and 14.06 < high < 15  # stretched around the near-ties, not the whole range
    plt.close(fig)
    spread = {"a": 10.0, "b": 15.0, "c": 20.0}  # nothing crowded, nothing off the scale: no inset, no strip
    fig = draw_cache_diet({"p": {"a": 1.0, "b": 2.0, "c": 3.0}}, spread)
    assert not panels(fig, "zoom") and not panels(fig, "off-scale")
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
    (({"p": {"a": 1.0}}, {"a": 2.0}, None, "perplexity", None, 1.5), "zoom=1.5"),
])
def test_bad_plot_inputs_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        draw_cache_diet(*args)
