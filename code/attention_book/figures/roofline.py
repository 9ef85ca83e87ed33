"""The roofline with both ceilings (chapters 7, 10 and 14): past the ridge point, fewer bytes no longer lower the bound.

A kernel that does F FLOPs while reading N bytes has an arithmetic intensity I = F / N FLOP per byte. On a machine
that reads ``bandwidth`` bytes per second and computes ``flop_rate`` FLOPs per second, it can attain at most
``min(flop_rate, I * bandwidth)`` FLOPs per second: the bandwidth slope left of the ridge point
``flop_rate / bandwidth``, the flat compute ceiling right of it. ``draw_roofline`` draws both ceilings and the
measured points (intensity, FLOPs per second attained) of the variants a chapter timed. The roofline bounds a kernel;
it does not predict it: a measured point can sit far below its roof (PyTorch's one-query CPU kernel for MHA does).
Where the kernels on one chart do different amounts of work (chapter 14), a point's label can carry its FLOPs and
its time: time = FLOPs / height, so a higher point is not always a faster kernel.
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


def draw_roofline(bandwidth, flop_rate, points, title=None, ax=None,
                  xlabel="arithmetic intensity (FLOP per byte read)"):
    """Log-log roofline: attainable FLOPs per second against arithmetic intensity, with measured points.

    Args:
        bandwidth: the read bandwidth, bytes per second (e.g. ``experiments.measure.read_bandwidth()``).
        flop_rate: the compute rate, FLOPs per second (e.g. ``experiments.measure.compute_rate()``).
        points: (label, intensity in FLOP per byte, FLOPs per second attained) for each measured kernel, e.g.
            ``("MQA", flops / n_bytes, flops / seconds)``, or (label, intensity, attained, flops) to write under the
            label the kernel's FLOPs and its time, flops / attained (``point_note``): where kernels do different
            amounts of work, a higher point is not a faster one. Drawn in the order given, each with its own marker
            and labelled; a label that starts with MHA, GQA or MQA takes that variant's colour
            (style.VARIANT_COLOURS), any other point a chart colour that no variant in ``points`` uses.
        title: the axes' title; ax: axes to draw on (else a new figure); xlabel: the x axis's title.

    Each label goes beside its point on the first side (right, then left, below, above) where it crosses neither
    the roofline nor the ridge line, another label, a marker or the legend, and stays inside the axes.

    Returns the matplotlib Figure.
    """
    ridge = ridge_point(bandwidth, flop_rate)
    points = [tuple(p) for p in points]
    if not points:
        raise ValueError("points must hold at least one (label, intensity, flop_rate_attained) triple")
    for point in points:
        if len(point) not in (3, 4):
            raise ValueError(f"point {point!r}: points are (label, intensity, attained) or (..., flops)")
        label, intensity, attained = point[:3]
        if not intensity > 0 or not attained > 0:
            raise ValueError(f"point {label!r}: intensity={intensity!r} and attained={attained!r} must be > 0")
        if len(point) == 4 and not point[3] > 0:
            raise ValueError(f"point {label!r}: flops={point[3]!r} must be > 0")
    xs = [p[1] for p in points] + [ridge]
    lo, hi = 2 ** math.floor(math.log2(min(xs)) - 1), 2 ** math.ceil(math.log2(max(xs)) + 1)
    texts = [f"{p[0]}\n{point_note(p[3], p[2])}" if len(p) == 4 else p[0] for p in points]
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(5.8, 3.8))
        for attempt in range(6):  # where a label finds no free spot, widen the axes an octave on the side it needs
            if attempt:
                ax.clear()
            crossings, outside = _draw(ax, bandwidth, flop_rate, points, texts, lo, hi, title, xlabel)
            if not crossings:
                break
            lo, hi = lo / (2 if "left" in outside or not outside else 1), hi * (2 if "right" in outside else 1)
    return ax.figure


def _draw(ax, bandwidth, flop_rate, points, texts, lo, hi, title, xlabel):
    """Draw the roofline and its points on ``ax`` between intensities lo and hi; return ``_place_labels``'s
    crossings and sides."""
    ridge = ridge_point(bandwidth, flop_rate)
    g = 1e9  # drawn in GFLOP/s
    ax.loglog([lo, ridge], [lo * bandwidth / g, flop_rate / g], color=INK, lw=2,
              label=f"memory: {bandwidth / 1e9:.1f} GB/s × intensity")
    ax.loglog([ridge, hi], [flop_rate / g, flop_rate / g], color=INK, lw=2, ls="--",
              label=f"compute ceiling: {flop_rate / 1e9:.0f} GFLOP/s")
    ax.axvline(ridge, color=INK, lw=0.8, ls=":")
    ylim = (min([p[2] for p in points] + [lo * bandwidth]) / 2 / g, 4 * flop_rate / g)
    lines = [((lo, lo * bandwidth / g), (ridge, flop_rate / g)), ((ridge, flop_rate / g), (hi, flop_rate / g)),
             ((ridge, ylim[0]), (ridge, ylim[1]))]
    ridge_text = ax.annotate(f"ridge point\n{ridge:.1f} FLOP/byte", (ridge, flop_rate / g),
                             textcoords="offset points", xytext=(4, 6), fontsize=8, color=INK)
    colours = _point_colours([p[0] for p in points])
    for i, (point, colour) in enumerate(zip(points, colours, strict=True)):
        ax.loglog([point[1]], [point[2] / g], MARKERS[i % len(MARKERS)], color=colour, markeredgecolor=INK,
                  markersize=8, gid="measured")
    ticks = [2.0**k for k in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks], minor=False)
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set(xlim=(lo, hi), xlabel=xlabel, ylabel="GFLOP/s attained", ylim=ylim)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    if title:
        ax.set_title(title)
    legend = ax.legend(loc="upper left", fontsize=7, title="roofline (measured ceilings)", title_fontsize=7)
    return _place_labels(ax, [(text, (p[1], p[2] / g)) for text, p in zip(texts, points, strict=True)], lines,
                         [ridge_text, legend])


def point_note(flops, attained):
    """What a roofline point's label adds under its name: its FLOPs and its time, flops / attained, e.g.
    "8,632 MFLOP in 282 ms": the time is the FLOPs divided by the height."""
    mflop, ms = flops / 1e6, 1e3 * flops / attained
    mflop_text = f"{mflop:,.0f}" if mflop >= 10 else f"{mflop:.2g}"
    ms_text = f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"
    return f"{mflop_text} MFLOP in {ms_text} ms"


def _point_colours(labels):
    """A variant's colour for MHA, GQA and MQA points; for the others, chart colours that no variant here uses."""
    variants = [label.replace(",", " ").split()[0] if label.strip() else "" for label in labels]
    taken = {VARIANT_COLOURS[v] for v in variants if v in VARIANT_COLOURS}
    free = [c for c in CHART_COLOURS if c not in taken]
    colours, k = [], 0
    for variant in variants:
        if variant in VARIANT_COLOURS:
            colours.append(VARIANT_COLOURS[variant])
        else:
            colours.append(free[k % len(free)])
            k += 1
    return colours


# Where a point's label may go, in points from the point (dx, dy, ha, va), in order of preference.
_LABEL_SPOTS = [(7, 0, "left", "center"), (7, -7, "left", "top"), (7, 7, "left", "bottom"),
                (-7, 0, "right", "center"), (-7, -7, "right", "top"), (-7, 7, "right", "bottom"),
                (0, -9, "center", "top"), (0, 9, "center", "bottom"),
                (7, -18, "left", "top"), (-7, -18, "right", "top"), (7, 18, "left", "bottom"),
                (-7, 18, "right", "bottom")]
_MARKER_RADIUS = 5  # points: a marker of size 8 and its edge
_CROSSING, _RIDGE_CROSSING, _SEARCH_LIMIT = 10, 2, 20_000  # costs of a crossing; nodes the search may visit


def _place_labels(ax, labels, lines, others):
    """Annotate each (text, (x, y)) in ``labels`` at one of ``_LABEL_SPOTS``, choosing the spots together so that
    no label crosses the slope or the ceiling (``lines[:2]``, pairs of data points) or lies across one of them from
    its point, and no label crosses a marker, another label or one
    of ``others`` (artists), or leaves the axes; crossing the ridge line (``lines[2]``) costs less, and earlier
    spots are preferred. Returns the number of crossings left (0 when every label found a free spot; a crossing of
    the ridge line alone counts none) and the set of sides ("left", "right") where a label leaves the axes."""
    fig = ax.figure
    renderer = _renderer(fig)
    to_display = ax.transData.transform
    segments = [(to_display(a), to_display(b)) for a, b in lines]
    pixels = fig.dpi / 72
    markers = [_box_around(to_display(xy), _MARKER_RADIUS * pixels) for _, xy in labels]
    fixed = [artist.get_window_extent(renderer) for artist in others] + markers
    inside = ax.get_window_extent(renderer)
    options = []  # per label: (cost on its own, box, spot), cheapest first
    for text, xy in labels:
        spots = []
        for rank, (dx, dy, ha, va) in enumerate(_LABEL_SPOTS):
            note = ax.annotate(text, xy, textcoords="offset points", xytext=(dx, dy), ha=ha, va=va, fontsize=8,
                               color=INK, linespacing=1.25)
            box = note.get_window_extent(renderer)
            note.remove()
            centre = ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)
            crossings = (sum(_segment_hits_box(p, q, box) for p, q in segments[:2])
                         + sum(_segments_meet(to_display(xy), centre, p, q) for p, q in segments[:2])
                         + sum(box.overlaps(other) for other in fixed)
                         + (not (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0
                                 and box.y1 <= inside.y1)))
            ridge = sum(_segment_hits_box(p, q, box) for p, q in segments[2:])
            spots.append((crossings * _CROSSING + ridge * _RIDGE_CROSSING + 0.01 * rank, box, rank))
        options.append(sorted(spots, key=lambda spot: spot[0]))
    best = [float("inf"), None]
    visited = 0

    def search(i, cost, chosen):  # depth first, cheapest spots first, cut where the cost passes the best found
        nonlocal visited
        visited += 1
        if cost >= best[0]:
            return
        if i == len(options):
            best[:] = [cost, list(chosen)]
            return
        for own, box, rank in options[i]:
            if visited > _SEARCH_LIMIT and best[1] is not None:
                return
            overlaps = sum(box.overlaps(options[j][k][1]) for j, k in enumerate(chosen))
            chosen.append(options[i].index((own, box, rank)))
            search(i + 1, cost + own + overlaps * _CROSSING, chosen)
            chosen.pop()

    search(0, 0.0, [])
    for (text, xy), spots, k in zip(labels, options, best[1], strict=True):
        dx, dy, ha, va = _LABEL_SPOTS[spots[k][2]]
        ax.annotate(text, xy, textcoords="offset points", xytext=(dx, dy), ha=ha, va=va, fontsize=8, color=INK,
                    linespacing=1.25)
    outside = set()
    for spots, k in zip(options, best[1], strict=True):
        box = spots[k][1]
        outside |= {"left"} if box.x0 < inside.x0 else set()
        outside |= {"right"} if box.x1 > inside.x1 else set()
    return int(best[0] // _CROSSING), outside


def _segments_meet(a, b, c, d):
    """Whether the segments ab and cd (display coordinates) cross."""
    def side(p, q, r):
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])
    return side(a, b, c) * side(a, b, d) < 0 and side(c, d, a) * side(c, d, b) < 0


def _renderer(fig):
    get_renderer = getattr(fig.canvas, "get_renderer", None)
    if get_renderer is not None:
        return get_renderer()
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _box_around(centre, radius):
    from matplotlib.transforms import Bbox
    (x, y) = centre
    return Bbox([[x - radius, y - radius], [x + radius, y + radius]])


def _segment_hits_box(p, q, box):
    """Whether the segment from p to q (display coordinates) meets the box (Liang and Barsky's clipping)."""
    (x0, y0), (x1, y1) = p, q
    dx, dy = x1 - x0, y1 - y0
    t0, t1 = 0.0, 1.0
    for step, room in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if step == 0:
            if room < 0:
                return False
            continue
        t = room / step
        if step < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
        if t0 > t1:
            return False
    return True


def _require_rates(**rates):
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name}={value!r} must be a positive number")
