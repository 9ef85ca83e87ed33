"""Figures for the book, drawn with matplotlib (imported only when this module is).

Diagrams are drawn in code rather than loaded from image files, so a chapter opened alone in Colab
shows the same figures as the site.

Colour maps are perceptually uniform and readable in greyscale and by colour-blind readers: heatmaps of
attention weights use ``ATTENTION_CMAP`` (viridis: 0 is dark violet, 1 bright yellow), other values
``VALUE_CMAP`` (cividis). Numbers written in a cell are black or white, whichever stands out from its colour.
"""
import matplotlib.pyplot as plt
import torch

ATTENTION_CMAP = "viridis"
VALUE_CMAP = "cividis"


def plot_attention(weights, queries, keys, ax=None, title=None, annotate=True):
    """Heatmap of one attention pattern: row i shows how query i spreads its weight over the keys.

    Args:
        weights: shape (L, S), rows summing to 1 (or 0 for a fully masked row).
        queries: L labels for the rows.
        keys: S labels for the columns.
        annotate: write each weight in its cell (readable up to about 12 x 12).
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() != 2 or weights.shape != (len(queries), len(keys)):
        raise ValueError(f"weights of shape {tuple(weights.shape)} do not match "
                         f"{len(queries)} queries x {len(keys)} keys")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * len(keys) + 2, 0.5 * len(queries) + 1.2))
    image = ax.imshow(weights.numpy(), cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    ax.set_yticks(range(len(queries)), queries)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate:
        annotate_heatmap(image, weights, decimals=2, fontsize=8)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_mask(mask, ax=None, title=None):
    """Draw a boolean mask of shape (L, S): grey cells may attend (True), white ones may not."""
    mask = torch.as_tensor(mask).detach().cpu()
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape (L, S), got {tuple(mask.shape)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.4 * mask.shape[1] + 1.5, 0.4 * mask.shape[0] + 1.2))
    ax.imshow(mask.float().numpy(), cmap="Greys", vmin=0.0, vmax=1.6)
    ax.set_xticks(range(mask.shape[1]))
    ax.set_yticks(range(mask.shape[0]))
    ax.set_xticks([j - 0.5 for j in range(1, mask.shape[1])], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, mask.shape[0])], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if title:
        ax.set_title(title)
    return ax


def plot_attention_grid(weights, queries, keys, row_names=None, annotate=False, cell_size=1.9):
    """A grid of attention heatmaps: one row per layer, one column per head.

    Args:
        weights: shape (h, L, S) for one layer's heads, or (n_layers, h, L, S).
        queries: L labels for each heatmap's rows; keys: S labels for its columns.
        row_names: a name per layer (default "layer 0", "layer 1", ...).
    Returns the Figure; axes are titled "head j" (and "layer i" on the left).
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
    fig, axes = plt.subplots(n_layers, n_heads, squeeze=False,
                             figsize=(cell_size * n_heads + 1.0, cell_size * n_layers + 0.6))
    for i in range(n_layers):
        for j in range(n_heads):
            ax = axes[i, j]
            image = ax.imshow(weights[i, j].numpy(), cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0)
            ax.set_title(f"head {j}", fontsize=9)
            ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
            ax.set_yticks(range(len(queries)), queries if j == 0 else [""] * len(queries), fontsize=7)
            if annotate:
                annotate_heatmap(image, weights[i, j], decimals=1, fontsize=6)
        if n_layers > 1:
            axes[i, 0].set_ylabel(row_names[i])
    fig.tight_layout()
    return fig


def annotate_heatmap(image, values, decimals=2, fontsize=8, fmt=None):
    """Write each value of a heatmap drawn by ``ax.imshow`` in its cell, in black or white, whichever has
    more contrast with the cell's colour.

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
            red, green, blue, _ = image.cmap(image.norm(v))
            luminance = 0.2126 * red + 0.7152 * green + 0.0722 * blue
            image.axes.text(col, row, fmt(v), ha="center", va="center", fontsize=fontsize,
                            color="black" if luminance > 0.45 else "white")


def plot_head_map(scores, ax=None, title=None, vmin=0.0, vmax=1.0, cmap=ATTENTION_CMAP, decimals=2):
    """One number per head as a layer x head heatmap, the value written in each cell.

    Args:
        scores: shape (n_layers, h), for example a head score of every head of a model.
        vmin, vmax: the colour scale's ends (None: the scores' own range).
    """
    scores = torch.as_tensor(scores).detach().float().cpu()
    if scores.dim() != 2:
        raise ValueError(f"scores must have shape (n_layers, h), got {tuple(scores.shape)}")
    n_layers, n_heads = scores.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * n_heads + 1.5, 0.45 * n_layers + 1.0))
    image = ax.imshow(scores.numpy(), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if title:
        ax.set_title(title)
    annotate_heatmap(image, scores, fontsize=6,  # ".86" rather than "0.86", to fit the small cells
                     fmt=lambda v: f"{v:.{decimals}f}".lstrip("0") if 0 <= v < 1 else f"{v:.{decimals - 1}f}")
    return ax


def plot_head_mosaic(weights, ax=None, title=None, gap=1):
    """Every head of every layer in one image: a tile of (L, S) weights per head, layers down, heads across.

    One image draws far faster than n_layers x h separate heatmaps (72 for a 6-layer, 12-head model), at the
    price of token labels; each tile has the queries down and the keys across, in the same order in every tile.

    Args:
        weights: shape (n_layers, h, L, S), one sentence's weights.
        gap: width in cells of the white lines between tiles.
    """
    weights = torch.as_tensor(weights).detach().float().cpu()
    if weights.dim() != 4:
        raise ValueError(f"weights must have shape (n_layers, h, L, S), got {tuple(weights.shape)}")
    n_layers, n_heads, L, S = weights.shape
    mosaic = torch.full((n_layers * (L + gap) - gap, n_heads * (S + gap) - gap), float("nan"))
    for i in range(n_layers):
        for j in range(n_heads):
            mosaic[i * (L + gap):i * (L + gap) + L, j * (S + gap):j * (S + gap) + S] = weights[i, j]
    if ax is None:
        _, ax = plt.subplots(figsize=(0.11 * mosaic.shape[1] + 1.5, 0.11 * mosaic.shape[0] + 1.0))
    cmap = plt.get_cmap(ATTENTION_CMAP).with_extremes(bad="white")  # the gaps between tiles are NaN
    image = ax.imshow(mosaic.numpy(), cmap=cmap, vmin=0.0, vmax=1.0)
    ax.set_xticks([j * (S + gap) + (S - 1) / 2 for j in range(n_heads)], range(n_heads))
    ax.set_yticks([i * (L + gap) + (L - 1) / 2 for i in range(n_layers)], [f"layer {i}" for i in range(n_layers)])
    ax.set_xlabel("head")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.02, pad=0.02)
    return ax


MASK_COLOURS = {"may attend": "#727272", "may not attend": "#ffffff",
                "hidden by mistake (not in the future)": "#e69f00"}


def plot_causal_alignments(L, S):
    """The two ways to place a causal mask of shape (L, S) when L < S, side by side, with one colour per meaning.

    The L queries are the last L positions of the sequence, S - L ... S - 1, and the rows are labelled with those
    positions. Left: the triangle aligned top-left (what ``is_causal=True`` builds), which lets query i see only
    keys 0 ... i and so hides keys that are not in the query's future (orange). Right: the triangle aligned bottom-right
    (``causal_mask(L, S)``), in which the query at position p sees keys 0 ... p. Returns the Figure.
    """
    if not 0 < L <= S:
        raise ValueError(f"need 0 < L <= S, got L={L} and S={S}")
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    positions = torch.arange(S - L, S)[:, None]  # (L, 1): where each query sits in the sequence
    keys = torch.arange(S)[None, :]  # (1, S)
    bottom_right = keys <= positions  # (L, S)
    top_left = torch.ones(L, S, dtype=torch.bool).tril()  # (L, S)
    fig, axes = plt.subplots(1, 2, figsize=(0.55 * S * 2 + 2.5, 0.55 * L + 1.6))
    panels = [(top_left, "aligned top-left (is_causal=True)"),
              (bottom_right, f"aligned bottom-right (causal_mask({L}, {S}))")]
    for ax, (mask, title) in zip(axes, panels, strict=True):
        meaning = torch.where(mask, 0, torch.where(bottom_right, 2, 1))  # 0 may, 1 may not, 2 hidden by mistake
        rgb = [[to_rgb(list(MASK_COLOURS.values())[m]) for m in row] for row in meaning.tolist()]
        ax.imshow(rgb)
        ax.set_xticks(range(S))
        ax.set_yticks(range(L), [str(p) for p in range(S - L, S)])
        ax.set_xticks([j - 0.5 for j in range(S + 1)], minor=True)
        ax.set_yticks([i - 0.5 for i in range(L + 1)], minor=True)
        ax.grid(which="minor", color="#606060", linewidth=1)
        ax.tick_params(which="minor", length=0)
        ax.set(xlabel="key position", ylabel="query position", title=title)
        ax.title.set_fontsize(10)
    handles = [Patch(facecolor=c, edgecolor="#606060", label=m) for m, c in MASK_COLOURS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
