"""When does the cache matter? (chapter 12): decode step time against the bytes a step reads.

A decode step reads every weight once, whatever the batch, plus the K/V cache of every sequence in the batch, which
grows with batch size B and context S. If reading is what costs, the step time follows the roofline
``time = bytes read / bandwidth``. Past ``bytes read = 2 x weight bytes`` the cache costs more to read than the
weights. ``draw_cache_crossover`` draws the measured steps of a batch x context sweep against that line.
"""
import math
import numbers

import matplotlib.pyplot as plt

from .style import CHART_COLOURS, INK, use_book_style

MARKERS = "osD^vP*X"
KEYS = ("batch", "context", "cache_bytes", "seconds")


def step_bytes(point, weight_bytes):
    """The bytes one decode step reads: every weight once, plus the point's K/V cache."""
    return weight_bytes + point["cache_bytes"]


def point_label(point):
    """The annotation of a measured point, e.g. ``"B = 4, S = 2,048"``."""
    return f"B = {point['batch']}, S = {point['context']:,}"


def draw_cache_crossover(points, weight_bytes, bandwidth, title=None, ax=None):
    """Measured decode step time against bytes read per step, with the roofline and the cache = weights line.

    The figure shows each measured decode step (one marker per batch size) at the bytes it reads, weights plus K/V
    cache, against its time, next to the line time = bytes / bandwidth, and a vertical line where the cache grows
    as large as the weights, past which reading the cache costs more than reading the weights.

    Args:
        points: one dict per measurement, ``{"batch": B, "context": S, "cache_bytes": bytes of K/V cache read per
            step, "seconds": measured time of one step}``; each batch size gets its own marker and colour, and its
            points are joined in order of bytes read; later batch sizes are drawn smaller and on top, so that
            points with the same B x S (the same cache) stay visible.
        weight_bytes: the bytes of all the model's weights.
        bandwidth: the read bandwidth, bytes per second (e.g. ``experiments.measure.read_bandwidth()``).
        title: the axes' title; ax: axes to draw on (else a new figure).

    Returns the matplotlib Figure.
    """
    _require_positive("weight_bytes", weight_bytes)
    _require_positive("bandwidth", bandwidth)
    points = _checked(points)
    mb, ms = 1e6, 1e3  # drawn in MB and milliseconds
    crossover = 2 * weight_bytes
    x_top = 1.08 * max([step_bytes(p, weight_bytes) for p in points] + [1.25 * crossover])
    batches = sorted({p["batch"] for p in points})
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.plot([0, x_top / mb], [0, x_top / bandwidth * ms], color=INK, lw=1.5, gid="roofline",
                label=f"roofline: bytes / bandwidth ({bandwidth / 1e9:.1f} GB/s)")
        ax.axvline(crossover / mb, color=INK, lw=1, ls="--", gid="crossover")
        ax.annotate("cache = weights", (crossover / mb, 1), xycoords=("data", "axes fraction"), xytext=(4, -4),
                    textcoords="offset points", ha="left", va="top", fontsize=8, color=INK)
        ax.annotate("→ the cache costs more to read", (crossover / mb, 1), xycoords=("data", "axes fraction"),
                    xytext=(4, -16), textcoords="offset points", ha="left", va="top", fontsize=7, color=INK)
        ax.axvline(weight_bytes / mb, color=INK, lw=0.8, ls=":", gid="weights")
        ax.annotate("weights alone (no cache)", (weight_bytes / mb, 0.5), xycoords=("data", "axes fraction"),
                    xytext=(-3, 0), textcoords="offset points", ha="right", va="center", rotation=90, fontsize=7,
                    color=INK)
        for i, batch in enumerate(batches):
            mine = sorted((p for p in points if p["batch"] == batch), key=lambda p: p["cache_bytes"])
            xs = [step_bytes(p, weight_bytes) / mb for p in mine]
            ys = [p["seconds"] * ms for p in mine]
            ax.plot(xs, ys, MARKERS[i % len(MARKERS)] + "-", color=CHART_COLOURS[i % len(CHART_COLOURS)], lw=0.8,
                    markeredgecolor=INK, markersize=max(9 - 1.5 * i, 4), zorder=3 + i, label=f"batch {batch}",
                    gid=f"batch-{batch}")  # smaller markers on top: the same B x S reads the same bytes
        y_top = max([p["seconds"] for p in points] + [x_top / bandwidth]) * ms
        _label_points(ax, points, batches, weight_bytes, x_top / mb, 1.15 * y_top)
        ax.set(xlim=(0, x_top / mb), ylim=(0, 1.15 * y_top), ylabel="time per decode step (ms)",
               xlabel="bytes read per decode step (weights + K/V cache, MB)")
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        if title:
            ax.set_title(title)
        ax.legend(loc="lower right", fontsize=7)
        ax.figure.tight_layout()
    return ax.figure


def _label_points(ax, points, batches, weight_bytes, width, height):
    """Label the point of each batch size with the largest cache, unless another point sits where its text goes."""
    for batch in batches:
        last = max((p for p in points if p["batch"] == batch), key=lambda p: p["cache_bytes"])
        x, y = step_bytes(last, weight_bytes) / 1e6, last["seconds"] * 1e3
        in_the_way = [p for p in points if p is not last and 0 <= step_bytes(p, weight_bytes) / 1e6 - x < 0.22 * width
                      and abs(p["seconds"] * 1e3 - y) < 0.06 * height]
        if not in_the_way:
            ax.annotate(point_label(last), (x, y), textcoords="offset points", xytext=(6, -3), fontsize=7,
                        color=INK, gid="point-label")


def _checked(points):
    try:
        points = list(points)
    except TypeError:
        raise ValueError(f"points={points!r} must be a list of dicts with the keys {', '.join(KEYS)}") from None
    if not points:
        raise ValueError("points must hold at least one measurement")
    for point in points:
        if not isinstance(point, dict) or any(key not in point for key in KEYS):
            raise ValueError(f"points: {point!r} must be a dict with the keys {', '.join(KEYS)}")
        for key in ("batch", "context"):
            value = point[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"points: {key}={value!r} must be a positive whole number")
        cache = point["cache_bytes"]
        if isinstance(cache, bool) or not isinstance(cache, numbers.Real) or not math.isfinite(cache) or cache < 0:
            raise ValueError(f"points: cache_bytes={cache!r} must be a number >= 0")
        _require_positive("points: seconds", point["seconds"])
    return points


def _require_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not value > 0:
        raise ValueError(f"{name}={value!r} must be a positive number")
