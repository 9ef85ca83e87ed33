"""Decode speed against the roofline (chapter 12): tokens per second of each way to run a model, as bars, and the
most a batch-1 decode can reach on this machine, as a line.

At batch 1 a decode step reads every weight (and the cache) once to make one token, so no decode can make more than
``bandwidth / bytes per token`` tokens per second: the roofline. ``draw_decode_speed`` draws each measured rate as a
bar, annotated with its tokens per second and its fraction of that roofline.
"""
import math
import numbers

import matplotlib.pyplot as plt

from .style import CHART_COLOURS, INK, tint, use_book_style

HATCHES = ["", "///", "...", "xxx", "\\\\\\", "ooo"]
ROOFLINE_LABEL = "roofline: bandwidth / bytes per token"


def speed_label(rate, roofline):
    """The annotation of one bar, e.g. ``"36.0 tokens/s, 60% of the roofline"``."""
    _require_positive("rate", rate)
    _require_positive("roofline", roofline)
    return f"{rate:.1f} tokens/s, {100 * rate / roofline:.0f}% of the roofline"


def draw_decode_speed(rates, roofline, title=None, ax=None):
    """Horizontal bars of decode speed, one per way of running the model, against a dashed roofline.

    The figure shows, for each way of running the model, how many tokens per second its decode made, as a bar
    labelled with that rate and its fraction of the roofline, the dashed vertical line at the most tokens per
    second that reading every weight once per token allows.

    Args:
        rates: label -> tokens per second, drawn top to bottom in the order given, e.g.
            ``{"transformers generate": 15.8, "the book, plain layers": 16.5, "the book, sped up": 36.0}``.
        roofline: the roofline in tokens per second (measured read bandwidth / bytes read per token).
        title: the axes' title; ax: axes to draw on (else a new figure).

    Returns the matplotlib Figure.
    """
    if not isinstance(rates, dict) or not rates:
        raise ValueError(f"rates={rates!r} must be a non-empty dict of label -> tokens per second")
    for label, rate in rates.items():
        if not isinstance(label, str) or not label:
            raise ValueError(f"rates: label {label!r} must be a non-empty string")
        _require_positive(f"rates[{label!r}]", rate)
    _require_positive("roofline", roofline)
    labels, values = list(rates), list(rates.values())
    top = max(values + [roofline])
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 0.55 * len(labels) + 1.5))
        ys = range(len(labels))
        for i, value in enumerate(values):
            y = i
            colour = CHART_COLOURS[i % len(CHART_COLOURS)]
            ax.barh(y, value, height=0.6, color=tint(colour, 0.35), edgecolor=INK, lw=0.8,
                    hatch=HATCHES[i % len(HATCHES)], gid="rate")
            ax.annotate(speed_label(value, roofline), (value, y), textcoords="offset points", xytext=(5, 0),
                        va="center", fontsize=8, color=INK, gid="rate-label",
                        bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="none"))
        ax.axvline(roofline, color=INK, lw=1.5, ls="--", gid="roofline", zorder=0.5)  # behind the bars
        ax.annotate(f"{ROOFLINE_LABEL}\n= {roofline:.1f} tokens/s", (roofline, 1), xycoords=("data", "axes fraction"),
                    textcoords="offset points", xytext=(0, 4), ha="center", va="bottom", fontsize=8, color=INK,
                    gid="roofline-label")
        ax.set_yticks(list(ys), labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # the first label on top
        ax.set_xlim(0, _nice_ceiling(1.55 * top))  # room for the labels
        ax.set_xlabel("tokens per second (batch 1, greedy decode)")
        ax.tick_params(axis="y", length=0)
        if title:
            ax.set_title(title, pad=30)
        ax.figure.tight_layout()
    return ax.figure


def _nice_ceiling(x):
    step = 10 ** math.floor(math.log10(x)) / 2  # 96 -> 100, 112 -> 150
    return math.ceil(x / step) * step


def _require_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not value > 0:
        raise ValueError(f"{name}={value!r} must be a positive number")
