"""Figures for the book, drawn with matplotlib (imported only when this module is).

Diagrams are drawn in code rather than loaded from image files, so a chapter opened alone in Colab
shows the same figures as the site.

Every figure uses the book's visual language (``figures.style``) and is drawn inside ``use_book_style()``.
A heatmap of attention weights goes from white (weight 0) to a full hue (weight 1): the hue of head i,
``head_cmap(i)``, when the figure knows which head it shows (``head=i``), and otherwise the neutral colour of
weights, ``ATTENTION_CMAP`` (white to the reddish purple ``ROLE_COLOURS["weight"]``). Lightness falls steadily
from 0 to 1 in every one of these maps, so greyscale keeps the order of the weights. Other values use
``VALUE_CMAP`` (cividis). Numbers written in a cell are dark or white, whichever contrasts more with its colour.
"""
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch, Rectangle

from ..masks import causal_mask
from .style import INK, ROLE_COLOURS, colour_map, head_cmap, head_colour, text_colour_on, tint, use_book_style

ATTENTION_CMAP = colour_map(ROLE_COLOURS["weight"], "attention-weight")
VALUE_CMAP = "cividis"


def attention_cmap(head=None):
    """The colour map of a heatmap of attention weights: head ``head``'s hue, or the neutral weight colour."""
    return ATTENTION_CMAP if head is None else head_cmap(head)




def plot_attention(weights, queries, keys, ax=None, title=None, annotate=True, head=None):
    """Heatmap of one attention pattern: row i shows how query i spreads its weight over the keys.

    Args:
        weights: shape (L, S), rows summing to 1 (or 0 for a fully masked row).
        queries: L labels for the rows.
        keys: S labels for the columns.
        annotate: write each weight in its cell (readable up to about 12 x 12).
        head: the index of the head these weights belong to, if known: the heatmap then goes from white to that
            head's hue (``head_cmap(head)``); by default, to the neutral colour of weights.
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() != 2 or weights.shape != (len(queries), len(keys)):
        raise ValueError(f"weights of shape {tuple(weights.shape)} do not match "
                         f"{len(queries)} queries x {len(keys)} keys")
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(0.55 * len(keys) + 2, 0.5 * len(queries) + 1.2))
        image = ax.imshow(weights.numpy(), cmap=attention_cmap(head), vmin=0.0, vmax=1.0)
        _frame(ax, *weights.shape)
        ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
        ax.set_yticks(range(len(queries)), queries)
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query (attending)")
        if title:
            ax.set_title(title)
        if annotate:
            annotate_heatmap(image, weights, decimals=2, fontsize=8)
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        bar.set_label("attention weight")
        bar.outline.set_edgecolor(INK)
    return ax


def _frame(ax, rows, cols, colour="#DDDDDD", width=0.5):
    """Thin lines between the cells of a heatmap (so that white cells stay visible) and an outline around it."""
    ax.set_xticks([j - 0.5 for j in range(1, cols)], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, rows)], minor=True)
    ax.grid(which="minor", color=colour, linewidth=width)
    ax.tick_params(which="minor", length=0)
    for side in ax.spines.values():
        side.set_visible(True)
        side.set_color(INK)


MASK_COLOURS = {"may attend": ROLE_COLOURS["weight"], "may not attend": "#FFFFFF",
                "hidden by mistake (not in the future)": ROLE_COLOURS["mask"]}
MISTAKE_HATCH = "xxx"  # the cells a mask hides by mistake are hatched too, so that greyscale shows them


def plot_mask(mask, ax=None, title=None):
    """Draw a boolean mask of shape (L, S): cells that may attend (True) in the colour of weights, the others white."""
    mask = torch.as_tensor(mask).detach().cpu()
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape (L, S), got {tuple(mask.shape)}")
    L, S = mask.shape
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(0.4 * S + 1.5, 0.4 * L + 1.2))
        ax.imshow(_mask_rgb(torch.where(mask, 0, 1)))
        ax.set_xticks(range(S))
        ax.set_yticks(range(L))
        _frame(ax, L, S, colour=INK, width=0.6)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        if title:
            ax.set_title(title)
    return ax


def _mask_rgb(meaning):
    """An (L, S, 3) image from an (L, S) tensor of 0 (may attend), 1 (may not) and 2 (hidden by mistake)."""
    palette = [to_rgb(c) for c in MASK_COLOURS.values()]
    return [[palette[m] for m in row] for row in meaning.tolist()]


def plot_attention_grid(weights, queries, keys, row_names=None, annotate=False, cell_size=1.9, heads=None,
                        axis_titles=False):
    """A grid of attention heatmaps: one row per layer, one column per head.

    Args:
        weights: shape (h, L, S) for one layer's heads, or (n_layers, h, L, S).
        queries: L labels for each heatmap's rows; keys: S labels for its columns.
        row_names: a name per layer (default "layer 0", "layer 1", ...).
        heads: for each column, the index of the head it shows, which picks its hue (``head_cmap``) and its title;
            None for a column in the neutral colour of weights, titled "head". Default: 0, 1, ..., h - 1.
        axis_titles: name the axes: "key →" under the bottom row, "query ↓" beside the left column (after the
            layer's name when there are several layers).
    Returns the Figure; axes are titled "head j" (and "layer i" on the left). Each heatmap goes from white
    (weight 0) to its head's full hue (weight 1).
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() == 3:
        weights = weights[None]
    if weights.dim() != 4 or weights.shape[-2:] != (len(queries), len(keys)):
        raise ValueError(f"weights must have shape (h, L, S) or (n_layers, h, L, S) with L={len(queries)} and "
                         f"S={len(keys)}, got {tuple(weights.shape)}")
    n_layers, n_heads = weights.shape[:2]
    row_names = row_names or [f"layer {i}" for i in range(n_layers)]
    if len(row_names) != n_layers:
        raise ValueError(f"row_names has {len(row_names)} names for {n_layers} layers")
    heads = list(range(n_heads)) if heads is None else list(heads)
    if len(heads) != n_heads:
        raise ValueError(f"heads has {len(heads)} entries for {n_heads} heads")
    with use_book_style():
        fig, axes = plt.subplots(n_layers, n_heads, squeeze=False,
                                 figsize=(cell_size * n_heads + 1.0, cell_size * n_layers + 0.6))
        for i in range(n_layers):
            for j, head in enumerate(heads):
                ax = axes[i, j]
                image = ax.imshow(weights[i, j].numpy(), cmap=attention_cmap(head), vmin=0.0, vmax=1.0)
                _frame(ax, len(queries), len(keys), width=0.3)
                title = ax.set_title("head" if head is None else f"head {head}", fontsize=9)
                if head is not None:
                    head_label_box(title, head)
                ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
                ax.set_yticks(range(len(queries)), queries if j == 0 else [""] * len(queries), fontsize=7)
                if annotate:
                    annotate_heatmap(image, weights[i, j], decimals=1, fontsize=6)
            if n_layers > 1:
                axes[i, 0].set_ylabel(row_names[i] + ("\nquery ↓" if axis_titles else ""))
            elif axis_titles:
                axes[i, 0].set_ylabel("query ↓")
        if axis_titles:
            for ax in axes[-1]:
                ax.set_xlabel("key →")
        fig.tight_layout()
    return fig


def annotate_heatmap(image, values, decimals=2, fontsize=8, fmt=None):
    """Write each value of a heatmap drawn by ``ax.imshow`` in its cell, in dark ink or white, whichever has
    the higher contrast with the cell's colour.

    Args:
        image: what ``ax.imshow(values, ...)`` returned (its colour map and limits pick the text colour).
        values: shape (rows, columns), the numbers the heatmap shows.
        fmt: a function from a value to its label; default: the value with ``decimals`` decimals.
    """
    fmt = fmt or (lambda v: f"{v:.{decimals}f}")
    values = torch.as_tensor(values).detach().float().cpu()
    if values.dim() != 2:
        raise ValueError(f"values must have shape (rows, columns), got {tuple(values.shape)}")
    for row in range(values.shape[0]):
        for col in range(values.shape[1]):
            v = values[row, col].item()
            image.axes.text(col, row, fmt(v), ha="center", va="center", fontsize=fontsize,
                            color=text_colour_on(image.cmap(image.norm(v))))


def plot_head_map(scores, ax=None, title=None, vmin=0.0, vmax=1.0, cmap=ATTENTION_CMAP, decimals=2, fontsize=6):
    """One number per head as a layer x head heatmap, the value written in each cell.

    Args:
        scores: shape (n_layers, h), for example a head score of every head of a model.
        vmin, vmax: the colour scale's ends (None: the scores' own range).
        cmap: the colour map; by default white (vmin) to the neutral colour of weights (vmax).
        fontsize: the size of the numbers in the cells.
    Each head's number on the axis sits in a box of its hue.
    """
    scores = torch.as_tensor(scores).detach().float().cpu()
    if scores.dim() != 2:
        raise ValueError(f"scores must have shape (n_layers, h), got {tuple(scores.shape)}")
    n_layers, n_heads = scores.shape
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(0.45 * n_heads + 1.5, 0.45 * n_layers + 1.0))
        image = ax.imshow(scores.numpy(), cmap=cmap, vmin=vmin, vmax=vmax)
        _frame(ax, n_layers, n_heads)
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(n_layers))
        for j, label in enumerate(ax.get_xticklabels()):
            head_label_box(label, j)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        if title:
            ax.set_title(title)
        annotate_heatmap(image, scores, fontsize=fontsize,  # ".86" rather than "0.86", to fit the small cells
                         fmt=lambda v: f"{v:.{decimals}f}".lstrip("0") if 0 <= v < 1 else f"{v:.{decimals}f}")
    return ax


def plot_head_maps(maps, columns=2, cell_size=0.42, fontsize=8, value_maps=(), colorbars=False):
    """Several layer x head maps (``plot_head_map``) in a grid, ``columns`` across; an odd last one sits centred.

    Args:
        maps: {title: scores of shape (n_layers, h)}, all the same shape, drawn in this order.
        cell_size: the width and height of one head's cell, in inches.
        fontsize: the size of the numbers in the cells and of the axes' labels.
        value_maps: the titles of maps that are not weights (an entropy, say): drawn with ``VALUE_CMAP`` over
            their own range, with a colour bar, instead of white (0) to the colour of weights (1).
        colorbars: give the other maps a colour bar too (white = 0 to the colour of weights = 1).
    Returns the Figure.
    """
    if not maps:
        raise ValueError("maps is empty: give at least one {title: scores} entry")
    shapes = {tuple(torch.as_tensor(s).shape) for s in maps.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"every map must have the same shape (n_layers, h), got {sorted(shapes)}")
    unknown = set(value_maps) - set(maps)
    if unknown:
        raise ValueError(f"value_maps names {sorted(unknown)}, which are not among the maps' titles")
    n_layers, n_heads = next(iter(shapes))
    rows = -(-len(maps) // columns)
    width, height = cell_size * n_heads + 1.0, cell_size * n_layers + 1.1  # one map and its labels
    with use_book_style():
        fig = plt.figure(figsize=(width * columns, height * rows))
        grid = fig.add_gridspec(rows, 2 * columns)  # two grid columns per map, so that a last odd map can be centred
        for k, (title, scores) in enumerate(maps.items()):
            row, col = divmod(k, columns)
            in_last_row = len(maps) - row * columns
            start = 2 * col + (columns - in_last_row if row == rows - 1 else 0)
            ax = fig.add_subplot(grid[row, start:start + 2])
            if title in value_maps:
                plot_head_map(scores, ax=ax, title=title, vmin=None, vmax=None, cmap=VALUE_CMAP, fontsize=fontsize)
                fig.colorbar(ax.images[0], ax=ax, fraction=0.03, pad=0.02)
            else:
                plot_head_map(scores, ax=ax, title=title, fontsize=fontsize)
                if colorbars:
                    fig.colorbar(ax.images[0], ax=ax, fraction=0.03, pad=0.02)
            ax.tick_params(labelsize=fontsize)
        fig.tight_layout()
    return fig


def head_label_box(text, head):
    """Put a matplotlib Text (a tick label, a title) in a box of head ``head``'s hue, in ink that contrasts with it."""
    text.set_bbox({"facecolor": head_colour(head), "edgecolor": INK, "linewidth": 0.4, "boxstyle": "round,pad=0.25"})
    text.set_color(text_colour_on(head_colour(head)))


def plot_head_mosaic(weights, ax=None, title=None, gap=1, by_head=True, marked_keys=None):
    """Every head of every layer in one image: a tile of (L, S) weights per head, layers down, heads across.

    One image draws far faster than n_layers x h separate heatmaps (72 for a 6-layer, 12-head model), at the
    price of token labels; each tile has the queries down and the keys across, in the same order in every tile.

    Args:
        weights: shape (n_layers, h, L, S), one sentence's weights.
        gap: width in cells of the white lines between tiles.
        by_head: draw head j's tiles from white (0) to its hue (1), ``head_cmap(j)``; False: every tile in the
            neutral colour of weights, with a colour bar.
        marked_keys: {key position: label}, for example {0: "[CLS]", S - 1: "[SEP]"}: each label is written above
            that key's column in every tile of the top row.
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() != 4:
        raise ValueError(f"weights must have shape (n_layers, h, L, S), got {tuple(weights.shape)}")
    n_layers, n_heads, L, S = weights.shape
    marked_keys = dict(marked_keys or {})
    outside = [k for k in marked_keys if not 0 <= k < S]
    if outside:
        raise ValueError(f"marked_keys has positions {outside} outside the S={S} keys")
    mosaic = torch.ones(n_layers * (L + gap) - gap, n_heads * (S + gap) - gap, 4)  # white between the tiles
    for j in range(n_heads):
        cmap = attention_cmap(j if by_head else None)
        for i in range(n_layers):
            tile = torch.as_tensor(cmap(weights[i, j].clamp(0, 1).numpy()), dtype=torch.float32)
            mosaic[i * (L + gap):i * (L + gap) + L, j * (S + gap):j * (S + gap) + S] = tile
    with use_book_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(0.11 * mosaic.shape[1] + 1.5, 0.11 * mosaic.shape[0] + 1.0))
        ax.imshow(mosaic.numpy())
        for i in range(n_layers):  # an outline around each tile, so that white (zero) cells stay inside it
            for j in range(n_heads):
                ax.add_patch(Rectangle((j * (S + gap) - 0.5, i * (L + gap) - 0.5), S, L, fill=False,
                                       edgecolor="#BBBBBB", lw=0.4))
        ax.set_xticks([j * (S + gap) + (S - 1) / 2 for j in range(n_heads)], range(n_heads))
        ax.set_yticks([i * (L + gap) + (L - 1) / 2 for i in range(n_layers)],
                      [f"layer {i}" for i in range(n_layers)])
        if by_head:
            for j, label in enumerate(ax.get_xticklabels()):
                head_label_box(label, j)
        ax.set_xlabel("head (each tile: white = weight 0, the head's full hue = weight 1)" if by_head else "head")
        ax.tick_params(length=0, pad=5)
        for side in ax.spines.values():
            side.set_visible(False)
        for j in range(n_heads):  # the marked keys' names above the top row, in every tile
            for key, label in marked_keys.items():
                ax.text(j * (S + gap) + key, -0.8, label, rotation=90, ha="center", va="bottom", fontsize=8,
                        color=INK, gid="marked-key")
        if title:
            ax.set_title(title, pad=36 if marked_keys else None)
        if not by_head:
            image = plt.cm.ScalarMappable(cmap=ATTENTION_CMAP, norm=plt.Normalize(0.0, 1.0))
            ax.figure.colorbar(image, ax=ax, fraction=0.02, pad=0.02, label="attention weight")
    return ax


def plot_causal_alignments(L, S):
    """The two ways to place a causal mask of shape (L, S) when L < S, side by side, with one colour per meaning.

    The L queries are the last L positions of the sequence, S - L ... S - 1, and the rows are labelled with those
    positions. Left: the triangle aligned top-left (what ``is_causal=True`` builds), which lets query i see only
    keys 0 ... i and so hides keys that are not in the query's future (vermillion and hatched). Right: the
    triangle aligned bottom-right (``causal_mask(L, S)``), in which the query at position p sees keys 0 ... p.
    Cells that may attend are in the colour of weights, the future is white. Returns the Figure.
    """
    bottom_right = causal_mask(L, S)  # (L, S); its errors name L and S
    top_left = torch.ones(L, S, dtype=torch.bool).tril()  # (L, S)
    with use_book_style():
        fig, axes = plt.subplots(1, 2, figsize=(0.55 * S * 2 + 2.5, 0.55 * L + 1.8))
        panels = [(top_left, "aligned top-left (is_causal=True)"),
                  (bottom_right, f"aligned bottom-right (causal_mask({L}, {S}))")]
        for ax, (mask, title) in zip(axes, panels, strict=True):
            meaning = torch.where(mask, 0, torch.where(bottom_right, 2, 1))  # 0 may, 1 may not, 2 hidden by mistake
            ax.imshow(_mask_rgb(meaning))
            for r, c in (meaning == 2).nonzero().tolist():
                ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch=MISTAKE_HATCH,
                                       edgecolor=tint(INK, 0.2), lw=0, gid="mistake"))
            ax.set_xticks(range(S))
            ax.set_yticks(range(L), [str(p) for p in range(S - L, S)])
            _frame(ax, L, S, colour=INK, width=0.6)
            ax.set(xlabel="key position", ylabel="query position", title=title)
        handles = [Patch(facecolor=c, edgecolor=INK, lw=0.6, label=m,
                         hatch=MISTAKE_HATCH if m.startswith("hidden") else None)
                   for m, c in MASK_COLOURS.items()]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
