"""Peak memory of attention against the sequence length (chapter 13): materialising the weights against tiling.

``draw_peak_memory`` plots, on log-log axes, the peak bytes of new tensors that each way of computing attention
allocated at each length, as measured (``experiments.tensor_memory.peak_tensor_bytes``), with the slope each curve
has between its first and last points: about 2 for the (L, S) weights (memory ∝ L²) and about 1 for tiling.
"""
import math
import numbers

import matplotlib.pyplot as plt

from .style import CHART_COLOURS, INK, use_book_style

MARKERS = ["o", "s", "^", "D"]
LINES = ["-", "--", "-.", ":"]


def log_slope(lengths, values):
    """The slope between the first and last points on log-log axes: p in value ∝ length^p."""
    return math.log(values[-1] / values[0]) / math.log(lengths[-1] / lengths[0])


def draw_peak_memory(lengths, peaks, title=None, ax=None):
    """One line per way of computing attention: its measured peak MiB against the sequence length, log-log.

    Args:
        lengths: the sequence lengths L (= S), increasing positive integers, at least 2.
        peaks: label -> the peak bytes measured at each length (as many as lengths), e.g.
            ``{"materialised": [...], "tiled, blocks of 128": [...]}``; drawn in the order given.
        title: the axes' title; ax: axes to draw on (else a new figure).

    Each line's legend entry gives its slope from the first to the last length (2 means memory ∝ L², 1 means ∝ L).
    Lines differ by marker and line style as well as colour. Returns the matplotlib Figure.
    """
    if not isinstance(lengths, (list, tuple)) or len(lengths) < 2 or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in lengths) \
            or list(lengths) != sorted(set(lengths)):
        raise ValueError(f"lengths={lengths!r} must be at least 2 increasing positive integers")
    if not isinstance(peaks, dict) or not peaks or len(peaks) > len(MARKERS):
        raise ValueError(f"peaks must be a dict of 1 to {len(MARKERS)} label -> bytes per length, got {peaks!r}")
    for label, values in peaks.items():
        if not isinstance(values, (list, tuple)) or len(values) != len(lengths) or not all(
                isinstance(b, numbers.Real) and not isinstance(b, bool) and b > 0 for b in values):
            raise ValueError(f"peaks[{label!r}] must hold one positive number of bytes per length "
                             f"({len(lengths)}), got {values!r}")
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(6.0, 3.8))
        for i, (label, values) in enumerate(peaks.items()):
            ax.loglog(lengths, [b / 2**20 for b in values], ls=LINES[i], marker=MARKERS[i],
                      color=CHART_COLOURS[i], label=f"{label} (slope {log_slope(lengths, values):.1f})", gid="peak")
            ax.annotate(f"{values[-1] / 2**20:,.1f} MiB", (lengths[-1], values[-1] / 2**20), textcoords="offset points",
                        xytext=(-6, 6), ha="right", va="bottom", fontsize=8, color=INK, gid="peak-label")
        ax.set_xticks(list(lengths), [f"{n:,}" for n in lengths])
        ax.minorticks_off()
        ax.set_xlabel("sequence length L = S (tokens)")
        ax.set_ylabel("peak MiB of new tensors (measured)")
        ax.legend(loc="upper left", frameon=False)
        if title:
            ax.set_title(title)
        ax.figure.tight_layout()
    return ax.figure
