"""The roofline with both ceilings (chapters 7 and 10): why sharing K/V heads stops paying past the ridge point.

A kernel that does F FLOPs while reading N bytes has an arithmetic intensity I = F / N FLOP per byte. On a machine
that reads ``bandwidth`` bytes per second and computes ``flop_rate`` FLOPs per second, it can attain at most
``min(flop_rate, I * bandwidth)`` FLOPs per second: the bandwidth slope left of the ridge point
``flop_rate / bandwidth``, the flat compute ceiling right of it. ``draw_roofline`` draws both ceilings and the
measured points (intensity, FLOPs per second attained) of the variants a chapter timed.
"""
import math

import matplotlib.pyplot as plt

from .style import CHART_COLOURS, INK, VARIANT_COLOURS, use_book_style

MARKERS = "osD^vP*X"


def attainable_flop_rate(intensity, bandwidth, flop_rate):
    """The roofline: the most FLOPs per second a kernel of ``intensity`` FLOP per byte can attain."""
    _require_rates(bandwidth=bandwidth, flop_rate=flop_rate)
    if not intensity > 0:
        raise ValueError(f"intensity={intensity!r} must be > 0 FLOP per byte")
    return min(flop_rate, intensity * bandwidth)


def ridge_point(bandwidth, flop_rate):
    """The intensity, in FLOP per byte, at which reading and computing take the same time."""
    _require_rates(bandwidth=bandwidth, flop_rate=flop_rate)
    return flop_rate / bandwidth


def draw_roofline(bandwidth, flop_rate, points, title=None, ax=None):
    """Log-log roofline: attainable FLOPs per second against arithmetic intensity, with measured points.

    Args:
        bandwidth: the read bandwidth, bytes per second (e.g. ``experiments.measure.read_bandwidth()``).
        flop_rate: the compute rate, FLOPs per second (e.g. ``experiments.measure.compute_rate()``).
        points: (label, intensity in FLOP per byte, FLOPs per second attained) for each measured kernel, e.g.
            ``("MQA", flops / n_bytes, flops / seconds)``; drawn in the order given, each with its own marker and
            labelled; a label that starts with MHA, GQA or MQA takes that variant's colour (style.VARIANT_COLOURS).
        title: the axes' title; ax: axes to draw on (else a new figure).

    Returns the matplotlib Figure.
    """
    ridge = ridge_point(bandwidth, flop_rate)
    points = list(points)
    if not points:
        raise ValueError("points must hold at least one (label, intensity, flop_rate_attained) triple")
    for label, intensity, attained in points:
        if not intensity > 0 or not attained > 0:
            raise ValueError(f"point {label!r}: intensity={intensity!r} and attained={attained!r} must be > 0")
    xs = [p[1] for p in points] + [ridge]
    lo, hi = 2 ** math.floor(math.log2(min(xs)) - 1), 2 ** math.ceil(math.log2(max(xs)) + 1)
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(5.8, 3.8))
        g = 1e9  # drawn in GFLOP/s
        ax.loglog([lo, ridge], [lo * bandwidth / g, flop_rate / g], color=INK, lw=2,
                  label=f"memory: {bandwidth / 1e9:.1f} GB/s × intensity")
        ax.loglog([ridge, hi], [flop_rate / g, flop_rate / g], color=INK, lw=2, ls="--",
                  label=f"compute ceiling: {flop_rate / 1e9:.0f} GFLOP/s")
        ax.axvline(ridge, color=INK, lw=0.8, ls=":")
        ax.annotate(f"ridge point\n{ridge:.1f} FLOP/byte", (ridge, flop_rate / g), textcoords="offset points",
                    xytext=(4, 6), fontsize=8, color=INK)
        for i, (label, intensity, attained) in enumerate(points):
            variant = label.replace(",", " ").split()[0] if label else ""  # "MQA, g = 1" -> "MQA"
            colour = VARIANT_COLOURS.get(variant, CHART_COLOURS[i % len(CHART_COLOURS)])
            ax.loglog([intensity], [attained / g], MARKERS[i % len(MARKERS)], color=colour,
                      markeredgecolor=INK, markersize=8, gid="measured")
            ax.annotate(label, (intensity, attained / g), textcoords="offset points", xytext=(7, -3), fontsize=8,
                        color=INK)
        ticks = [2.0**k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], minor=False)
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set(xlim=(lo, hi), xlabel="arithmetic intensity (FLOP per byte read)", ylabel="GFLOP/s attained",
               ylim=(min([p[2] for p in points] + [lo * bandwidth]) / 2 / g, 4 * flop_rate / g))
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        if title:
            ax.set_title(title)
        ax.legend(loc="upper left", fontsize=7, title="roofline (measured ceilings)", title_fontsize=7)
    return ax.figure


def _require_rates(**rates):
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name}={value!r} must be a positive number")
