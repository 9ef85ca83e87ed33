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
from .style import CHART_COLOURS, FONT_SIZE, INK, LINE_WIDTH, VARIANT_COLOURS, VARIANT_MARKERS, use_book_style

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


def _front_steps(points, perplexity, names):
    """The front's names and its staircase (x in MiB, y the true perplexities), from its smallest cache to its
    largest."""
    front = pareto_front_names({name: (points[name], perplexity[name]) for name in names})
    return front, [points[name] / 2**20 for name in front], [perplexity[name] for name in front]


def _draw_points(ax, names, points, perplexity, styles, size=36, gid="technique"):
    for name in sorted(names, key=points.get):
        colour, marker = styles[name]
        ax.scatter([points[name] / 2**20], [perplexity[name]], marker=marker, s=size, color=colour, edgecolors=INK,
                   lw=0.5, zorder=3, gid=gid)


def _draw_front(ax, front, xs, ys, gid, ring_size=110):
    """The staircase and the rings of the front's points; the axes clip whatever lies outside their limits."""
    ax.step(xs, ys, where="post", color=INK, ls="--", lw=1.0, zorder=1, gid=gid)
    low, high = ax.get_ylim()
    inside = [(x, y) for x, y in zip(xs, ys, strict=True) if min(low, high) <= y <= max(low, high)]
    if inside:
        ax.scatter(*zip(*inside, strict=True), s=ring_size, facecolors="none", edgecolors=INK, lw=0.8, zorder=2,
                   gid=f"{gid}-ring")


def _break_marks(top_ax, bottom_ax):
    """Two short diagonal strokes on the left spine where the y-axis is broken between the two strips."""
    stroke = dict(color=INK, lw=LINE_WIDTH, clip_on=False, marker=[(-1, -0.5), (1, 0.5)], markersize=8,
                  linestyle="none", mec=INK, mew=LINE_WIDTH)
    top_ax.plot([0], [0], transform=top_ax.transAxes, gid="axis-break", **stroke)
    bottom_ax.plot([0], [1], transform=bottom_ax.transAxes, gid="axis-break", **stroke)


def draw_cache_diet(cache_bytes, perplexity, ceiling=None, ylabel="perplexity", title=None, zoom=0.05,
                    inset_bounds=(0.42, 0.36, 0.55, 0.54)):
    """One panel per context: each technique's cache bytes (log x) against its perplexity, and the Pareto front.

    Args:
        cache_bytes: panel title -> {technique name -> bytes of one sequence's cache}, 1 to 3 panels, every panel
            with the same names, e.g. ``{"at 1,024 tokens": {...}, "at 8,192 tokens": {...}}``.
        perplexity: technique name -> its perplexity (the same in every panel), positive.
        ceiling: perplexities above it (techniques that break the model) are drawn in a strip above a break in
            the y-axis, on a log scale, with their own markers and their values written beside them; default
            2.5 x the lowest perplexity.
        ylabel: the y-axis label; title: the figure's title.
        zoom: points within this fraction of the lowest perplexity (0.05: 5%) are drawn again in an inset, with the
            y-axis stretched, when they would otherwise sit within a sliver of the panel's height; None: no inset.
        inset_bounds: where the inset sits in each panel's main axes (x, y, width, height, as fractions).

    The front is computed on the true values, off-scale points included, and drawn as a staircase from its
    smallest cache to its largest; its points are ringed wherever they are drawn. Each axes carries a gid:
    "panel" (the main one, with the panel's title unless a strip sits above it), "off-scale" (the strip) and
    "zoom" (the inset). Returns the matplotlib Figure.
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
    if zoom is not None and not (_positive(zoom) and zoom < 1):
        raise ValueError(f"zoom={zoom!r} must be None or a fraction between 0 and 1")
    on_scale = [name for name in names if perplexity[name] <= ceiling]
    off_scale = [name for name in names if perplexity[name] > ceiling]
    shown = [perplexity[name] for name in on_scale] or [ceiling]
    low, high = min(shown), max(shown)
    pad = 0.08 * (high - low) + 0.5
    near = [name for name in on_scale if zoom is not None and perplexity[name] <= low * (1 + zoom)]
    band = (low, max(perplexity[name] for name in near)) if near else (low, low)
    crowded = len(near) >= 2 and (band[1] - band[0] + 2 * pad) > 0 and band[1] - band[0] < 0.15 * (high - low + 2 * pad)
    styles = technique_styles(names)
    with use_book_style():
        legend_rows = math.ceil((len(names) + 1) / 5)
        height = (5.0 if off_scale else 4.3) + 0.2 * legend_rows
        fig = plt.figure(figsize=(3.7 * len(cache_bytes) + 0.8, height))
        bottom = (0.75 + 0.2 * legend_rows) / height  # the x-axis label and the legend below the panels
        grid = fig.add_gridspec(2 if off_scale else 1, len(cache_bytes), height_ratios=[1, 3.4] if off_scale else [1],
                                hspace=0.07, wspace=0.08, left=0.09, right=0.98, bottom=bottom,
                                top=1 - (0.75 if title else 0.45) / height)
        first = None
        for column, (panel, points) in enumerate(cache_bytes.items()):
            ax = fig.add_subplot(grid[-1, column], sharey=first)
            ax.set_gid("panel")
            first = first or ax
            front, xs, ys = _front_steps(points, perplexity, names)
            ax.set_ylim(low - pad, high + pad)
            _draw_points(ax, on_scale, points, perplexity, styles)
            ax.set_xscale("log")
            _draw_front(ax, front, xs, ys, "pareto-front")
            strip = None
            if off_scale:
                strip = fig.add_subplot(grid[0, column], sharex=ax)
                strip.set_gid("off-scale")
                offs = [perplexity[name] for name in off_scale]
                strip.set_yscale("log")
                strip.set_ylim(min(offs) / 3, max(offs) * 3)
                _draw_points(strip, off_scale, points, perplexity, styles, gid="off-scale")
                for name in off_scale:
                    strip.annotate(f"{perplexity[name]:,.0f}", (points[name] / 2**20, perplexity[name]),
                                   textcoords="offset points", xytext=(6, 0), ha="left", va="center", fontsize=7,
                                   color=INK, gid="off-scale-label")
                _draw_front(strip, front, xs, ys, "pareto-front-off-scale")
                strip.spines["bottom"].set_visible(False)
                strip.tick_params(axis="x", which="both", bottom=False, labelbottom=False)
                strip.yaxis.set_major_locator(LogLocator(numticks=4))
                strip.yaxis.set_minor_formatter(NullFormatter())
                strip.set_title(panel)
                strip.grid(True, which="major", lw=0.4, alpha=0.4)
                _break_marks(strip, ax)
                strip.text(0.01, 0.97, "above the break: log scale", transform=strip.transAxes, ha="left", va="top",
                           fontsize=FONT_SIZE - 2, color=INK, style="italic")
            else:
                ax.set_title(panel)
            ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("cache of one sequence (MiB, log scale)")
            ax.grid(True, which="major", lw=0.4, alpha=0.4)
            if column:
                ax.tick_params(axis="y", labelleft=False)
                if strip is not None:
                    strip.tick_params(axis="y", which="both", labelleft=False)
            if crowded:
                inset = ax.inset_axes(inset_bounds)
                inset.set_gid("zoom")
                inset.set_xscale("log")
                inset.set_xlim(ax.get_xlim())
                spread = band[1] - band[0]
                inset.set_ylim(band[0] - 0.3 * spread - 0.005 * low, band[1] + 0.3 * spread + 0.005 * low)
                _draw_points(inset, near, points, perplexity, styles, size=30, gid="zoomed")
                _draw_front(inset, front, xs, ys, "pareto-front-zoom", ring_size=90)
                inset.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
                inset.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                inset.xaxis.set_minor_formatter(NullFormatter())
                inset.tick_params(labelsize=FONT_SIZE - 2)
                inset.set_facecolor("#FFFFFF")
                for side in ("top", "right"):
                    inset.spines[side].set_visible(True)
                inset.set_title(f"zoom: within {zoom:.0%} of the lowest", fontsize=FONT_SIZE - 2)
                inset.grid(True, which="major", lw=0.4, alpha=0.4)
                ax.indicate_inset_zoom(inset, edgecolor=INK, alpha=0.5)
        first.set_ylabel(ylabel)
        handles = [Line2D([], [], ls="", marker=styles[name][1], color=styles[name][0], markeredgecolor=INK,
                          markeredgewidth=0.5, label=name) for name in names]
        handles.append(Line2D([], [], color=INK, ls="--", lw=1.0, marker="o", markerfacecolor="none",
                              markersize=9, label="Pareto front"))
        fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
        if title:
            fig.suptitle(title)
    return fig
