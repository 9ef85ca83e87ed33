"""Chapter 12's chart of decode step time against bytes read: it draws for several sweeps, puts each measured step
at weights + cache bytes and its time, one marker and legend entry per batch size, the roofline time = bytes /
bandwidth across the range and the cache = weights line at twice the weight bytes, labels points only where no other
point is in the way, and rejects bad input by name."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attention_book.figures.cache_crossover import (draw_cache_crossover, point_label,  # noqa: E402
                                                    step_bytes)

WEIGHTS, BANDWIDTH = 538e6, 32e9
PER_TOKEN = 2 * 30 * 3 * 64 * 4  # SmolLM2-135M's K and V, fp32: 2 x layers x K/V heads x d_head x bytes


def sweep(batches=(1, 4, 16), contexts=(256, 2048, 8192), efficiency=0.6):
    return [{"batch": b, "context": s, "cache_bytes": b * s * PER_TOKEN,
             "seconds": (WEIGHTS + b * s * PER_TOKEN) / (efficiency * BANDWIDTH)} for b in batches for s in contexts]



def line(ax, gid):
    (found,) = [line for line in ax.lines if line.get_gid() == gid]
    return found


def test_a_step_reads_the_weights_and_the_cache_and_points_are_labelled_by_b_and_s():
    point = {"batch": 4, "context": 2048, "cache_bytes": 4 * 2048 * PER_TOKEN, "seconds": 0.05}
    assert step_bytes(point, WEIGHTS) == WEIGHTS + 4 * 2048 * PER_TOKEN
    assert point_label(point) == "B = 4, S = 2,048"


@pytest.mark.parametrize("points", [sweep(), sweep(batches=(1,), contexts=(128, 512)), sweep(batches=(2, 8)),
                                    sweep(batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), contexts=(1024,)),
                                    [{"batch": 1, "context": 1, "cache_bytes": 0, "seconds": 0.02}]])
def test_points_roofline_and_crossover_are_where_the_bytes_put_them(points):
    fig = draw_cache_crossover(points, WEIGHTS, BANDWIDTH, title="a title")
    ax = fig.axes[0]
    batches = sorted({p["batch"] for p in points})
    for b in batches:
        mine = sorted((p for p in points if p["batch"] == b), key=lambda p: p["cache_bytes"])
        drawn = line(ax, f"batch-{b}")
        assert drawn.get_xdata() == pytest.approx([(WEIGHTS + p["cache_bytes"]) / 1e6 for p in mine])
        assert drawn.get_ydata() == pytest.approx([p["seconds"] * 1e3 for p in mine])
    markers = [line(ax, f"batch-{b}").get_marker() for b in batches]
    assert len(set(markers)) == min(len(batches), 8)
    assert [t.get_text() for t in ax.get_legend().get_texts()][1:] == [f"batch {b}" for b in batches]
    roofline = line(ax, "roofline")
    xs, ys = np.asarray(roofline.get_xdata()), np.asarray(roofline.get_ydata())
    assert xs[0] == 0 and xs[-1] == pytest.approx(ax.get_xlim()[1])
    assert ys == pytest.approx(xs * 1e6 / BANDWIDTH * 1e3)  # MB read / bandwidth, in ms
    assert list(line(ax, "crossover").get_xdata()) == [2 * WEIGHTS / 1e6] * 2
    assert list(line(ax, "weights").get_xdata()) == [WEIGHTS / 1e6] * 2
    assert ax.get_xlim()[1] > 2 * WEIGHTS / 1e6 and ax.get_xlim()[0] == ax.get_ylim()[0] == 0
    assert ax.get_ylim()[1] > max(p["seconds"] * 1e3 for p in points)
    texts = [t.get_text() for t in ax.texts]
    assert "cache = weights" in texts and ax.get_title() == "a title"
    labelled = [t.get_text() for t in ax.texts if t.get_gid() == "point-label"]
    assert set(labelled) <= {point_label(p) for p in points}
    assert len(labelled) <= len(batches)


def test_a_label_that_another_point_would_cover_is_left_out():
    # B = 4, S = 8,192 reads the same bytes as B = 16, S = 2,048 and lands on it: only batch 16's largest is labelled
    ax = draw_cache_crossover(sweep(), WEIGHTS, BANDWIDTH).axes[0]
    labelled = [t.get_text() for t in ax.texts if t.get_gid() == "point-label"]
    assert labelled == ["B = 16, S = 8,192"]


def test_accepts_numpy_numbers_and_draws_on_given_axes():
    points = [{"batch": np.int64(2), "context": np.int64(512), "cache_bytes": np.float64(1e8),
               "seconds": np.float64(0.04)}]
    fig, ax = plt.subplots()
    assert draw_cache_crossover(points, WEIGHTS, BANDWIDTH, ax=ax) is fig


GOOD = {"batch": 1, "context": 16, "cache_bytes": 1e6, "seconds": 0.03}


@pytest.mark.parametrize("points, weight_bytes, bandwidth, name", [
    ([], WEIGHTS, BANDWIDTH, "points"), (None, WEIGHTS, BANDWIDTH, "points"), ([(1, 16)], WEIGHTS, BANDWIDTH, "points"),
    ([{"batch": 1, "context": 16, "seconds": 0.03}], WEIGHTS, BANDWIDTH, "cache_bytes"),
    ([{**GOOD, "batch": 0}], WEIGHTS, BANDWIDTH, "batch"), ([{**GOOD, "batch": 1.5}], WEIGHTS, BANDWIDTH, "batch"),
    ([{**GOOD, "context": -4}], WEIGHTS, BANDWIDTH, "context"),
    ([{**GOOD, "cache_bytes": -1}], WEIGHTS, BANDWIDTH, "cache_bytes"),
    ([{**GOOD, "seconds": 0}], WEIGHTS, BANDWIDTH, "seconds"),
    ([{**GOOD, "seconds": float("nan")}], WEIGHTS, BANDWIDTH, "seconds"),
    ([GOOD], 0, BANDWIDTH, "weight_bytes"), ([GOOD], WEIGHTS, -3e9, "bandwidth"), ([GOOD], WEIGHTS, None, "bandwidth"),
])
def test_bad_input_is_rejected_by_name(points, weight_bytes, bandwidth, name):
    with pytest.raises(ValueError, match=name):
        draw_cache_crossover(points, weight_bytes, bandwidth)
