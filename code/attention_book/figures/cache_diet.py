"""The cache diet's Pareto plot (chapter 15): cache bytes against perplexity, one point per technique, with the front.

``draw_cache_diet`` draws one panel per context (the context measured, and 8,192 tokens, where the windows' caches
have stopped growing and the others' have not), with the same perplexities in each: bytes on a log x-axis,
perplexity on a linear y-axis, the Pareto front (``cache_diet.pareto_front_names``) as a staircase. A perplexity far
above the others (a technique that breaks the model) would squash the rest into a line, so it is drawn as a triangle at
the top edge with its value written beside it.

Visual language: the attention variants keep their colours and markers from chapters 7 to 10 (``VARIANT_COLOURS``,
``VARIANT_MARKERS``: MHA, GQA, MQA); the other techniques take the chart colours those leave free, each with a
marker of its own, so they stay apart in greyscale.
"""
import math
import numbers

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..cache_diet.pareto import pareto_front_names
from .style import CHART_COLOURS, INK, VARIANT_COLOURS, VARIANT_MARKERS, use_book_style

OTHER_STYLES = [(CHART_COLOURS[3], "D"), (CHART_COLOURS[4], "v"), (CHART_COLOURS[5], "P"), (INK, "X"),
                ("#888888", "h"), (CHART_COLOURS[3], "*"), (CHART_COLOURS[4], "p"), (CHART_COLOURS[5], "<")]


def technique_styles(names):
    """name -> (colour, marker): a name that starts with MHA, GQA or MQA, or contains "(GQA)", gets that variant's
    style from chapters 7 to 10; the others take ``OTHER_STYLES`` in order."""
    styles, others = {}, iter(OTHER_STYLES)
    for name in names:
        variant = next((v for v in VARIANT_COLOURS if name.startswith(v) or f"({v})" in name), None)
        if variant is not None:
            styles[name] = (VARIANT_COLOURS[variant], VARIANT_MARKERS[variant])
        else:
            try:
                styles[name] = next(others)
            except StopIteration:
                raise ValueError(f"at most {len(OTHER_STYLES)} techniques besides MHA, GQA and MQA can be drawn, "
                                 f"got {list(names)}") from None
    return styles


def _positive(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def draw_cache_diet(cache_bytes, perplexity, ceiling=None, ylabel="perplexity", title=None):
    """One panel per context: each technique's cache bytes (log x) against its perplexity, and the Pareto front.

    Args:
        cache_bytes: panel title -> {technique name -> bytes of one sequence's cache}, 1 to 3 panels, every panel
            with the same names, e.g. ``{"at 1,024 tokens": {...}, "at 8,192 tokens": {...}}``.
        perplexity: technique name -> its perplexity (the same in every panel), positive.
        ceiling: perplexities above it are drawn at the top edge as triangles with their value written beside
            them; default 2.5 x the lowest perplexity.
        ylabel: the y-axis label; title: the figure's title.

    The front is computed on the true values, off-scale points included, and drawn as a staircase from its
    smallest cache to its largest; its points are ringed. Returns the matplotlib Figure.
    """
    if not isinstance(cache_bytes, dict) or not 1 <= len(cache_bytes) <= 3:
        raise ValueError(f"cache_bytes must be a dict of 1 to 3 panel title -> {{name: bytes}}, got {cache_bytes!r}")
    if not isinstance(perplexity, dict) or not perplexity:
        raise ValueError(f"perplexity must be a non-empty dict of name -> perplexity, got {perplexity!r}")
    names = list(perplexity)
    for name, value in perplexity.items():
        if not _positive(value):
            raise ValueError(f"perplexity[{name!r}] must be a positive finite number, got {value!r}")
    for panel, points in cache_bytes.items():
        if not isinstance(points, dict) or set(points) != set(names):
            raise ValueError(f"cache_bytes[{panel!r}] must give bytes for exactly the names of perplexity "
                             f"({names}), got {list(points) if isinstance(points, dict) else points!r}")
        for name, value in points.items():
            if not _positive(value):
                raise ValueError(f"cache_bytes[{panel!r}][{name!r}] must be a positive number of bytes, got {value!r}")
    values = sorted(perplexity.values())
    if ceiling is None:
        ceiling = 2.5 * values[0]
    if not _positive(ceiling):
        raise ValueError(f"ceiling={ceiling!r} must be a positive number")
    shown = [p for p in values if p <= ceiling] or [ceiling]
    top = ceiling if any(p > ceiling for p in values) else max(shown)
    styles = technique_styles(names)
    with use_book_style():
        fig, axes = plt.subplots(1, len(cache_bytes), figsize=(3.6 * len(cache_bytes) + 0.8, 4.2), sharey=True,
                                 squeeze=False)
        for ax, (panel, points) in zip(axes[0], cache_bytes.items(), strict=True):
            front = pareto_front_names({name: (points[name], perplexity[name]) for name in names})
            xs = [points[name] / 2**20 for name in front]
            ys = [min(perplexity[name], top) for name in front]
            ax.step(xs, ys, where="post", color=INK, ls="--", lw=1.0, zorder=1, gid="pareto-front")
            ax.scatter(xs, ys, s=110, facecolors="none", edgecolors=INK, lw=0.8, zorder=2, gid="pareto-ring")
            n_off = 0
            for name in sorted(names, key=points.get):
                colour, marker = styles[name]
                x, p = points[name] / 2**20, perplexity[name]
                if p > ceiling:
                    ax.scatter([x], [top], marker="^", s=42, color=colour, edgecolors=INK, lw=0.5, zorder=3,
                               gid="off-scale")
                    ax.annotate(f"{p:,.0f}", (x, top), textcoords="offset points", xytext=(0, -9 - 9 * (n_off % 2)),
                                ha="center", va="top", fontsize=7, color=INK, gid="off-scale-label")
                    n_off += 1  # neighbours' labels alternate between two rows
                else:
                    ax.scatter([x], [p], marker=marker, s=36, color=colour, edgecolors=INK, lw=0.5, zorder=3,
                               gid="technique")
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_title(panel)
            ax.set_xlabel("cache of one sequence (MiB, log scale)")
            ax.grid(True, which="major", lw=0.4, alpha=0.4)
        axes[0][0].set_ylabel(ylabel)
        low = min(shown)
        axes[0][0].set_ylim(low - 0.08 * (top - low) - 0.5, top + 0.12 * (top - low) + 0.5)
        handles = [Line2D([], [], ls="", marker=styles[name][1], color=styles[name][0], markeredgecolor=INK,
                          markeredgewidth=0.5, label=name) for name in names]
        handles.append(Line2D([], [], color=INK, ls="--", lw=1.0, marker="o", markerfacecolor="none",
                              markersize=9, label="Pareto front"))
        if any(p > ceiling for p in values):
            handles.append(Line2D([], [], ls="", marker="^", color="#BBBBBB", markeredgecolor=INK,
                                  label=f"off the scale (value written), > {ceiling:.3g}"))
        fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
        if title:
            fig.suptitle(title)
        fig.tight_layout(rect=(0, 0.06 * math.ceil(len(handles) / 5) + 0.02, 1, 1))
    return fig
