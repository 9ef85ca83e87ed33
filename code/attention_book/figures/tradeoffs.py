"""Chapter 10's whole picture: memory, speed and quality of MHA, GQA and MQA, one panel above the other.

``draw_tradeoffs`` puts three measurements against g, the number of K/V heads, from MQA's g = 1 on the left to MHA's
g = h on the right: the KV cache, the measured decode step beside its two bounds, and the probe loss of converted
models after some steps of uptraining. The first two panels are one model shape (a real decoder's, in the
chapter); the third may be another model (chapter 9's tiny one), so each panel's title says which it shows.
"""
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .head_sharing_explorer import variant
from .style import INIT_COLOURS, INK, VARIANT_COLOURS, shade, tint, use_book_style


def draw_tradeoffs(n_heads, n_kv_heads, cache_mib, step_ms, memory_bound_ms, compute_bound_ms, losses,
                   cache_title="KV cache", step_title="one layer's decode step", loss_title="quality after conversion"):
    """Three panels against g: the cache, one decode step with its bounds, and the loss after uptraining.

    Args:
        n_heads: h, the number of query heads.
        n_kv_heads: the values of g measured (each divides h), in any order.
        cache_mib: the KV cache of each g, in MiB (the same order as n_kv_heads).
        step_ms: the measured decode step of each g, in ms; memory_bound_ms: its memory bound (bytes / bandwidth).
            The step's panel has a log scale, so that a fast step and its bounds stay apart beside a slow one.
        compute_bound_ms: the compute bound (FLOPs / compute rate), the same for every g.
        losses: {uptraining steps: [loss of each g]}, at most three step counts, the first the fewest;
            a loss of g = h after 0 steps is the unconverted MHA model.
        cache_title, step_title, loss_title: the panels' titles, which say which model each panel measures.

    Returns the matplotlib Figure.
    """
    gs = [int(g) for g in n_kv_heads]
    for name, values in (("cache_mib", cache_mib), ("step_ms", step_ms), ("memory_bound_ms", memory_bound_ms),
                         *((f"losses[{k}]", v) for k, v in losses.items())):
        if len(values) != len(gs):
            raise ValueError(f"{name} has {len(values)} values for {len(gs)} values of n_kv_heads")
    if not 1 <= len(losses) <= 3:
        raise ValueError(f"losses must hold 1 to 3 step counts, got {len(losses)}")
    for g in gs:
        if g < 1 or n_heads % g:
            raise ValueError(f"n_kv_heads={g} must divide n_heads={n_heads}")
    order = sorted(range(len(gs)), key=lambda i: gs[i])  # g = 1, the smallest cache, on the left

    def ordered(values):
        return [values[i] for i in order]

    names = [variant(n_heads, gs[i]) for i in order]
    labels = [f"g={gs[i]}\n{name}" for i, name in zip(order, names, strict=True)]
    colours = [VARIANT_COLOURS[name] for name in names]
    with use_book_style():
        fig, (ax_mem, ax_time, ax_loss) = plt.subplots(3, 1, figsize=(8, 11.5))
        ax_mem.bar(labels, ordered(cache_mib), color=colours, edgecolor=INK)
        ax_mem.set(ylabel="MiB", title=cache_title)

        ax_time.bar(labels, ordered(step_ms), color=colours, edgecolor=INK)
        ax_time.plot(labels, ordered(memory_bound_ms), "_", color=INK, markersize=30, markeredgewidth=2)
        ax_time.axhline(compute_bound_ms, color=INK, linestyle=":")
        handles = [Patch(facecolor="white", edgecolor=INK, label="measured (each bar in its variant's colour)"),
                   Line2D([], [], color=INK, lw=2, label="memory bound: bytes / bandwidth"),
                   Line2D([], [], color=INK, linestyle=":", label="compute bound: FLOPs / compute rate")]
        ax_time.legend(handles=handles, fontsize=8, loc="upper left", handlelength=2.5)
        # a log scale: MQA's bar and its two bounds, a few ms apart, stay apart beside MHA's tens of ms
        times = [*step_ms, *memory_bound_ms, compute_bound_ms]
        ax_time.set(yscale="log", ylabel="ms (log scale)", title=step_title,
                    ylim=(min(times) / 2, max(times) * 6))  # room above the bars for the legend

        # chapter 9's colour of mean pooling, darker with more uptraining
        base = INIT_COLOURS["mean"]
        shades = [tint(base, 0.3), base, shade(base, 0.45)][-len(losses):]
        styles = [(":", "o"), ("--", "^"), ("-", "s")][-len(losses):]
        for (steps, values), colour, (style, marker) in zip(losses.items(), shades, styles, strict=True):
            ax_loss.plot(labels, ordered(values), marker=marker, linestyle=style, color=colour,
                         label=f"after {steps} steps of uptraining")
        first_steps, first = next(iter(losses.items()))
        if first_steps == 0 and n_heads in gs:  # g = h after 0 steps: the model before any conversion
            ax_loss.annotate("the MHA model", (len(gs) - 1, first[gs.index(n_heads)]), textcoords="offset points",
                             xytext=(-30, -26), fontsize=8, ha="right", va="top", color=INK,
                             arrowprops=dict(arrowstyle="-", color=INK, lw=0.6, shrinkB=4))
        ax_loss.set(yscale="log", ylabel="probe loss (median of seeds)",
                    title=loss_title)
        low = min(v for values in losses.values() for v in values if v > 0)
        high = max(v for values in losses.values() for v in values)
        ax_loss.set_ylim(low / 10, high * 3)
        ax_loss.legend(fontsize=8, loc="lower left")
        for ax in (ax_mem, ax_time, ax_loss):
            ax.set_xlabel(f"g, the number of K/V heads (of h = {n_heads} query heads)")
        fig.tight_layout()
    return fig
