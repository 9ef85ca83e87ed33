"""RoPE as a rotation (chapter 11): one pair of a query's and a key's coordinates, turned by their positions.

Pair i of a vector at position m is turned by m * theta_i. A query at m and a key at n are turned by different
angles, and the angle between them changes by (n - m) * theta_i: shift both positions by the same amount and it
stays the same, so their dot product, the score, does too. The pairs turn at different speeds: theta_0 = 1 radian
(about 57 degrees) per token, and the last pair hardly turns at all. The figure's third panel shows the speeds in
radians.

``pair_turns`` computes what the figure draws with the package's ``apply_rope``; ``draw_rope_rotation`` draws it.
"""
import math

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Arc

from ..rope import apply_rope, rope_frequencies
from ..validation import require_positive
from .style import FONT_SIZE, INK, ROLE_COLOURS, tint, use_book_style


def pair_turns(d_head, base, pair, position, angle_degrees):
    """The direction, in degrees in [0, 360), of pair ``pair`` of a vector after RoPE at ``position``.

    The vector has length 1 in that pair, at ``angle_degrees`` before rotation, and 0 elsewhere; it is rotated by
    the package's ``apply_rope`` (the "pairs" layout, so the pair is coordinates 2i and 2i + 1).
    """
    x = torch.zeros(1, 1, 1, d_head, dtype=torch.float64)
    x[..., 2 * pair] = math.cos(math.radians(angle_degrees))
    x[..., 2 * pair + 1] = math.sin(math.radians(angle_degrees))
    turned = apply_rope(x, torch.tensor([position]), base, layout="pairs")[0, 0, 0]
    return math.degrees(math.atan2(turned[2 * pair + 1].item(), turned[2 * pair].item())) % 360


def _check(d_head, base, pair, positions, shift):
    require_positive(d_head=d_head)
    if d_head % 2:
        raise ValueError(f"d_head={d_head} must be even: RoPE rotates coordinates in pairs")
    if not base > 1:
        raise ValueError(f"base={base!r} must be greater than 1")
    if isinstance(pair, bool) or not isinstance(pair, int) or not 0 <= pair < d_head // 2:
        raise ValueError(f"pair={pair!r} must be an integer in 0 .. d_head/2 - 1 = {d_head // 2 - 1}")
    if len(positions) != 2 or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in positions):
        raise ValueError(f"positions={positions!r} must be two non-negative integers (m, n): the query's and the "
                         "key's")
    if isinstance(shift, bool) or not isinstance(shift, int) or shift < 0:
        raise ValueError(f"shift={shift!r} must be a non-negative integer")


def draw_rope_rotation(d_head=8, base=10_000.0, pair=0, positions=(3, 1), shift=4, q_angle=20.0, k_angle=60.0):
    """Pair ``pair`` of a query and a key, at positions (m, n) and at (m + shift, n + shift), and each pair's speed.

    Args:
        d_head: the head size (even); base: RoPE's base; pair: which pair, 0 (the fastest) .. d_head/2 - 1.
        positions: (m, n), the query's and the key's positions; shift: how far both move for the second panel.
        q_angle, k_angle: the two vectors' directions in this pair before any rotation, in degrees.

    The first two panels draw the pair as a plane: the query (blue) and the key (orange) before rotation as faint
    dashed arrows, after it as solid arrows, with the angle between them marked and printed (its size, 0 to 180°).
    The third panel draws theta_i, in radians per token on a log scale, for every pair, the drawn pair hatched.
    Returns the matplotlib Figure.
    """
    _check(d_head, base, pair, positions, shift)
    m, n = positions
    theta = rope_frequencies(d_head, base).double()
    with use_book_style():
        fig, axes = plt.subplots(1, 3, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1, 1, 1.3]})
        for ax, (qm, kn) in zip(axes[:2], [(m, n), (m + shift, n + shift)], strict=True):
            _draw_pair(ax, d_head, base, pair, qm, kn, q_angle, k_angle)
        _draw_speeds(axes[2], theta, pair, base)
        fig.tight_layout()
    return fig


def _arrow(ax, degrees, colour, label=None, faint=False):
    x, y = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    ax.annotate("", (x, y), (0, 0), arrowprops=dict(arrowstyle="-|>", lw=1.2 if faint else 2.2, mutation_scale=14,
                                                    color=tint(colour, 0.55) if faint else colour,
                                                    linestyle="--" if faint else "-"))
    if label:
        ax.text(1.12 * x, 1.12 * y, label, ha="left" if x > 0.3 else "right" if x < -0.3 else "center",
                va="bottom" if y > 0.3 else "top" if y < -0.3 else "center", fontsize=FONT_SIZE, color=INK,
                gid="label")


def _draw_pair(ax, d_head, base, pair, m, n, q_angle, k_angle):
    q_turned = pair_turns(d_head, base, pair, m, q_angle)
    k_turned = pair_turns(d_head, base, pair, n, k_angle)
    between = (k_turned - q_turned + 180) % 360 - 180  # signed, in [-180, 180): from q to k, counter-clockwise
    ax.add_patch(plt.Circle((0, 0), 1, fill=False, color=tint(INK, 0.75), lw=0.8))
    _arrow(ax, q_angle, ROLE_COLOURS["query"], faint=True)
    _arrow(ax, k_angle, ROLE_COLOURS["key"], faint=True)
    _arrow(ax, q_turned, ROLE_COLOURS["query"], f"q at m={m}")
    _arrow(ax, k_turned, ROLE_COLOURS["key"], f"k at n={n}")
    low = min(q_turned, q_turned + between)
    ax.add_patch(Arc((0, 0), 0.7, 0.7, theta1=low, theta2=low + abs(between), color=INK, lw=1.2, gid="between"))
    ax.set(xlim=(-1.75, 1.75), ylim=(-1.75, 1.6), aspect="equal", xticks=[], yticks=[])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(f"pair {pair}: m = {m}, n = {n}, m - n = {m - n}", fontsize=FONT_SIZE)
    ax.text(0, -1.72, f"angle between q and k: {abs(between):.0f}°\n(dashed: before rotation)", ha="center",
            va="bottom", fontsize=FONT_SIZE, color=INK, gid="angle")


def _draw_speeds(ax, theta, pair, base):
    radians = theta.tolist()
    colours = [tint(ROLE_COLOURS["weight"], 0.6 * i / max(len(radians) - 1, 1)) for i in range(len(radians))]
    bars = ax.bar(range(len(radians)), radians, color=colours, edgecolor=INK, lw=0.8)
    bars[pair].set_hatch("///")
    bars[pair].set_gid("drawn-pair")
    ax.set_yscale("log")
    ax.set(xlabel="pair i", ylabel=r"turn per token, $\theta_i$ in radians",
           title=f"each pair's speed: base {base:,.0f}, d_head {2 * len(radians)}\n"
                 r"$\theta_i = \mathrm{base}^{-2i/d_\mathrm{head}}$ radians per token")
    ax.set_xticks(range(len(radians)) if len(radians) <= 16 else range(0, len(radians), len(radians) // 8))
    ax.text(0.98, 0.97, f"hatched: pair {pair}, drawn left", transform=ax.transAxes, ha="right", va="top",
            fontsize=FONT_SIZE - 1, color=INK)
