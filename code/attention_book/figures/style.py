"""The book's one visual language, shared by every diagram, heatmap and interactive view.

- A colour per head: query head i has the hue ``head_colour(i)`` everywhere; a K/V head takes the hue of its group,
  ``kv_head_colour(j, n_heads, n_kv_heads)``, which is the hue of the group's first query head.
- A colour family per role: queries, keys, values, scores/weights and outputs (``ROLE_COLOURS``), used where a
  figure is about roles rather than heads (one head's matrices, for example).
- One style: fonts, line weights and arrows (``FONT_SIZE``, ``LINE_WIDTH``, ``ARROW``, ``use_book_style``).

The hues are Paul Tol's "muted" scheme, which stays distinguishable with the common colour-vision deficiencies,
reordered so that neighbouring heads also differ in lightness, so that they stay apart in greyscale.
"""
import contextlib

import matplotlib as mpl
from cycler import cycler
from matplotlib.colors import LinearSegmentedColormap, to_rgb

# Paul Tol's muted palette, ordered dark, light, dark, light... so that heads i and i + 1 differ in greyscale too
# (clearly for the first seven heads; the last three hues have close lightness, so figures label heads as well).
HEAD_HUES = ["#332288", "#DDCC77", "#882255", "#88CCEE", "#117733", "#999933", "#AA4499", "#44AA99", "#CC6677"]

# Okabe and Ito's palette: a fixed family per role.
ROLE_COLOURS = {
    "query": "#0072B2",  # blue
    "key": "#E69F00",  # orange
    "value": "#009E73",  # bluish green
    "weight": "#CC79A7",  # reddish purple: scores and attention weights
    "output": "#56B4E9",  # sky blue
    "input": "#BBBBBB",  # grey: tokens' vectors before any projection
    "mask": "#D55E00",  # vermillion: what a mask hides by mistake, or an error
}
INK = "#222222"  # text, outlines and arrows
FONT_SIZE = 9
LINE_WIDTH = 1.0
ARROW = dict(arrowstyle="-|>", color=INK, lw=LINE_WIDTH, mutation_scale=10)


def head_colour(i: int) -> str:
    """The hue of query head i (0-based), the same in every figure of the book; it repeats after 9 heads."""
    if i < 0:
        raise ValueError(f"head index i={i} must be >= 0")
    return HEAD_HUES[i % len(HEAD_HUES)]


def kv_head_colour(j: int, n_heads: int, n_kv_heads: int) -> str:
    """The hue of K/V head j: that of its group, whose first query head is j * (n_heads // n_kv_heads)."""
    if n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must be a positive divisor of n_heads={n_heads}")
    if not 0 <= j < n_kv_heads:
        raise ValueError(f"K/V head index j={j} must be in 0 .. n_kv_heads - 1 = {n_kv_heads - 1}")
    return head_colour(j * (n_heads // n_kv_heads))


def relative_luminance(colour) -> float:
    """WCAG relative luminance of a colour (any matplotlib colour): 0 for black, 1 for white."""
    def linear(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    red, green, blue = (linear(c) for c in to_rgb(colour))
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def contrast_ratio(first, second) -> float:
    """WCAG contrast ratio of two colours, from 1 (the same) to 21 (black on white)."""
    lighter, darker = sorted((relative_luminance(first), relative_luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def text_colour_on(colour) -> str:
    """The colour for text on ``colour``: the book's ink, else white, whichever first reaches WCAG's 4.5:1 for
    small text; black when neither does (on a mid-light hue such as rose)."""
    for text in (INK, "#FFFFFF"):
        if contrast_ratio(text, colour) >= 4.5:
            return text
    return "#000000"


def tint(colour: str, amount: float) -> tuple:
    """``colour`` mixed with white: amount 0 gives the colour, 1 gives white."""
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def colour_map(colour: str, name: str = "") -> LinearSegmentedColormap:
    """A sequential colour map from white (0) to ``colour`` (1): a heatmap in a head's or a role's hue."""
    return LinearSegmentedColormap.from_list(name or f"white-{colour}", ["#FFFFFF", colour])


def shade(colour: str, amount: float) -> tuple:
    """``colour`` mixed with black: amount 0 gives the colour, 1 gives black."""
    return tuple(c * (1 - amount) for c in to_rgb(colour))


def head_cmap(i: int) -> LinearSegmentedColormap:
    """The colour map of head i's heatmaps: white, through the head's hue, to a dark shade of it, so that a light
    hue (sand, light blue) still shows large weights clearly and the map reads in greyscale."""
    hue = head_colour(i)
    return LinearSegmentedColormap.from_list(f"head-{i}", ["#FFFFFF", hue, shade(hue, 0.55)])


# Lines and bars of a chart that are not heads: the role colours, in an order that stays apart in greyscale.
CHART_COLOURS = [ROLE_COLOURS[r] for r in ("query", "key", "value", "weight", "mask", "output")]
# A line or bar that stands for an attention variant (chapters 7 to 10): the same colour, marker and line style in
# every chart, dark to light from MHA to MQA, so that the variants stay apart in greyscale too.
VARIANT_COLOURS = {"MHA": CHART_COLOURS[0], "GQA": CHART_COLOURS[2], "MQA": CHART_COLOURS[1]}
VARIANT_MARKERS = {"MHA": "o", "GQA": "^", "MQA": "s"}
VARIANT_LINES = {"MHA": "-", "GQA": "-.", "MQA": "--"}
# How chapter 9 initialises the K/V heads of a converted model: the chart colours the variants leave free.
INIT_COLOURS = {"mean": CHART_COLOURS[3], "first": CHART_COLOURS[4], "random": CHART_COLOURS[5]}

BOOK_RC = {
    "font.size": FONT_SIZE, "axes.titlesize": FONT_SIZE + 1, "axes.labelsize": FONT_SIZE,
    "xtick.labelsize": FONT_SIZE - 1, "ytick.labelsize": FONT_SIZE - 1, "legend.fontsize": FONT_SIZE - 1,
    "lines.linewidth": 1.5, "axes.linewidth": LINE_WIDTH, "axes.edgecolor": INK, "text.color": INK,
    "axes.labelcolor": INK, "xtick.color": INK, "ytick.color": INK, "figure.dpi": 100,
    "axes.spines.top": False, "axes.spines.right": False, "axes.prop_cycle": cycler(color=CHART_COLOURS),
    "image.cmap": "cividis",
}


@contextlib.contextmanager
def use_book_style():
    """Matplotlib settings shared by every figure of the book (fonts, line weights, chart colours), for the
    duration of a block."""
    with mpl.rc_context(BOOK_RC):
        yield


def apply_book_style():
    """Make the book's matplotlib settings the default for every figure drawn afterwards (a chapter's charts)."""
    mpl.rcParams.update(BOOK_RC)
