"""The attention explorer: an interactive view of where each token's attention goes, head by head.

The tokens sit in a row. Hovering or focusing a token (Tab to the row, then the arrow keys, Home and End) makes it
the query: below the row, one strip of bars per head, in that head's colour, shows how much of the token's weight
goes to each token above it (a bar's height is the weight); under the head's name is the token that gets the
most. Where the weights have layers, a labelled ``<select>`` picks the layer.

``attention_explorer(weights, tokens)`` returns a ``View`` (``figures.interactive``): self-contained HTML with the
weights inlined, and a PNG fallback drawn by ``plot_query_weights`` (every head's weights for the first query shown).

The weights are rounded to ``decimals`` places and written one or two characters each (``encode_weights``), so that
a view of 6 layers of 12 heads over 13 tokens stays well under the 30 KB that a view may take; a bigger input is
refused with an error that says how to cut it down.
"""
import json
import math

import numpy as np

from .interactive import MAX_BYTES, View
from .style import INK, head_colour, use_book_style

# The characters that carry the weights: printable ASCII without space, quotes, backslash, '&', '<' and '>', so
# that the string needs no escaping in JSON, in HTML or in a script element.
ALPHABET = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in "\"&'<>\\")
DECIMALS = (1, 2, 3)


def _single_codes(decimals: int) -> int:
    """How many values get one character; each of the other characters starts a two-character code."""
    n, levels = len(ALPHABET), 10 ** decimals + 1
    return min(n, (n * n - levels) // (n - 1))


def encode_weights(values, decimals: int = 2) -> str:
    """Weights in [0, 1], rounded to ``decimals`` places, as text: 1 character for a value below 0.077 (3
    decimals) or 0.87 (2 decimals), 2 characters above. ``decode_weights`` (and the view's script) reverses it."""
    if decimals not in DECIMALS:
        raise ValueError(f"decimals={decimals!r} must be one of {DECIMALS}")
    k, n = _single_codes(decimals), len(ALPHABET)
    out = []
    for v in np.rint(np.asarray(values, dtype=float).ravel() * 10 ** decimals).astype(int).tolist():
        if not 0 <= v <= 10 ** decimals:
            raise ValueError(f"weights must lie in [0, 1]; found {v / 10 ** decimals}")
        out.append(ALPHABET[v] if v < k else ALPHABET[k + (v - k) // n] + ALPHABET[(v - k) % n])
    return "".join(out)


def decode_weights(text: str, decimals: int = 2) -> list[float]:
    """The inverse of ``encode_weights``: the rounded weights, in order (what the view's script computes)."""
    k, n, out, i = _single_codes(decimals), len(ALPHABET), [], 0
    while i < len(text):
        c = ALPHABET.index(text[i])
        i += 1
        if c >= k:
            c = k + (c - k) * n + ALPHABET.index(text[i])
            i += 1
        out.append(round(c / 10 ** decimals, decimals))
    return out


def _as_array(weights) -> np.ndarray:
    if hasattr(weights, "detach"):  # a torch tensor
        weights = weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=float)


def _check(weights, tokens, head_names, layer, token):
    """Check the explorer's inputs; return weights (n_layers, h, L, L), tokens, names, has_layers, layer, token."""
    w = _as_array(weights)
    if w.ndim not in (3, 4):
        raise ValueError(f"weights must have shape (n_layers, n_heads, L, S) or (n_heads, L, S); got {w.shape}")
    has_layers = w.ndim == 4
    w = w if has_layers else w[None]
    n_layers, h, L, S = w.shape
    tokens = [str(t) for t in tokens]
    if L != S or L != len(tokens) or L == 0:
        raise ValueError(f"the explorer shows self-attention over the tokens: weights (..., L, S) need L = S = "
                         f"len(tokens); got L={L}, S={S}, len(tokens)={len(tokens)}")
    if h == 0 or n_layers == 0:
        raise ValueError(f"weights have no heads or no layers: shape {w.shape}")
    if not np.isfinite(w).all() or w.min() < -1e-6 or w.max() > 1 + 1e-6:
        raise ValueError("weights must be attention weights, finite and in [0, 1]")
    if head_names is None:
        names = [[""] * h for _ in range(n_layers)]
    else:
        names = [list(head_names)] * n_layers if all(isinstance(n, str) or n is None for n in head_names) \
            else [list(row) for row in head_names]
        if len(names) != n_layers or any(len(row) != h for row in names):
            raise ValueError(f"head_names must be {h} names (one per head) or {n_layers} lists of {h} (one per "
                             f"layer and head); got {head_names!r}")
        names = [[name or "" for name in row] for row in names]
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer={layer} must be in 0 .. {n_layers - 1}")
    token = L - 1 if token is None else token
    if not 0 <= token < L:
        raise ValueError(f"token={token} must be in 0 .. {L - 1} (a position in tokens)")
    return np.clip(w, 0.0, 1.0), tokens, names, has_layers, layer, token


def plot_query_weights(weights, tokens, token, head_names=None, title=None, decimals=2, strip_height=0.5,
                       column_width=0.42):
    """Every head's attention weights for one query token: one strip of bars per head, in the head's colour.

    Args:
        weights: (n_heads, L, L), one layer's weights (rows summing to 1, or 0 where masked).
        tokens: the L tokens, which label the columns (the query's label is bold, its column shaded).
        token: the query's position.
        head_names: a name per head (its role, e.g. "induction"), or None.
        title: the figure's title; by default, which token is the query.
        decimals: the weights are rounded to this many places, as in the view.
        strip_height, column_width: inches per head strip and per token.

    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    w = _as_array(weights)
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (n_heads, L, L) for one layer; got {w.shape}")
    if strip_height <= 0 or column_width <= 0:
        raise ValueError(f"strip_height={strip_height} and column_width={column_width} must be positive")
    w, tokens, names, _, _, token = _check(w, tokens, head_names, 0, token)
    w, names = np.round(w[0], decimals), names[0]
    h, L = w.shape[0], w.shape[1]
    with use_book_style():
        fig, axes = plt.subplots(h, 1, sharex=True, squeeze=False,
                                 figsize=(max(4.0, column_width * L + 2.6), strip_height * max(h, 2) + 1.3))
        for head, ax in enumerate(axes[:, 0]):
            row = w[head, token]
            ax.axvspan(token - 0.5, token + 0.5, color="#E6E6E6", zorder=0)
            ax.bar(range(L), row, width=0.7, color=head_colour(head), edgecolor=INK, linewidth=0.6, zorder=2)
            ax.set(ylim=(0, 1), yticks=[], xlim=(-0.6, L - 0.4))
            ax.spines["left"].set_visible(False)
            ax.set_ylabel(f"head {head}" + (f"\n{names[head]}" if names[head] else ""), rotation=0, ha="right",
                          va="center", labelpad=6)
            best = int(row.argmax())
            ax.text(L - 0.2, 0.5, f"→ '{tokens[best]}' {row[best]:.{decimals}f}", va="center", ha="left",
                    fontsize=8, clip_on=False)
        bottom = axes[-1, 0]
        bottom.set_xticks(range(L), tokens, rotation=90 if max(map(len, tokens)) > 3 else 0)
        bottom.get_xticklabels()[token].set_fontweight("bold")
        fig.suptitle(title or f"where token {token} '{tokens[token]}' puts its attention, head by head "
                     "(bar height = weight)", fontsize=9)
        height = fig.get_figheight()
        fig.subplots_adjust(hspace=0.25, top=1 - 0.45 / height, bottom=0.75 / height)
    return fig


_STYLE = """
#{uid}{font:13px/1.35 system-ui,sans-serif;color:#222;background:#fff;padding:8px;overflow-x:auto;max-width:100%;
box-sizing:border-box;border:1px solid #ddd;border-radius:4px}
#{uid} .ab-top{margin-bottom:6px}
#{uid} select{font:inherit;margin-right:10px}
#{uid} .ab-grid{display:grid;align-items:end;gap:3px 2px;width:max-content}
#{uid} .ab-row{display:contents}
#{uid} .ab-token{font:inherit;font-size:12px;padding:2px 3px;border:1px solid #999;border-radius:3px;background:#fff;
color:#222;cursor:pointer;white-space:pre}
#{uid} .ab-token[aria-pressed=true]{background:#222;color:#fff;font-weight:bold;text-decoration:underline}
#{uid} .ab-control:focus-visible{outline:3px solid #0072B2;outline-offset:1px}
#{uid} .ab-cell{height:30px;display:flex;align-items:flex-end;justify-content:center;border-bottom:1px solid #999}
#{uid} .ab-q{background:#e6e6e6}
#{uid} .ab-bar{width:70%;box-sizing:border-box;border:1px solid #222;border-bottom:0}
#{uid} .ab-zero{border:0}
#{uid} .ab-head{white-space:nowrap;overflow:hidden;padding-right:6px;text-align:right;align-self:center;font-size:12px}
#{uid} .ab-sw{display:inline-block;width:.8em;height:.8em;border:1px solid #222;margin-right:4px;vertical-align:-1px}
#{uid} .ab-best{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;font-size:11px;color:#444}
#{uid} .ab-key{font-size:11px;color:#555;text-align:center;white-space:pre}
#{uid} .ab-sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
"""

_SCRIPT = """
var A = data.alphabet, T = data.tokens, n = T.length, h = data.colours.length, k = data.k, dp = data.decimals;
function decode(s) {
  var out = [], i = 0, c;
  while (i < s.length) {
    c = A.indexOf(s.charAt(i++));
    if (c >= k) { c = k + (c - k) * A.length + A.indexOf(s.charAt(i++)); }
    out.push(c / Math.pow(10, dp));
  }
  return out;
}
var W = data.weights.map(decode), layer = data.layer, query = data.token;
var grid = root.querySelector('.ab-grid'), select = root.querySelector('select');
var status = root.querySelector('.ab-status'), detail = root.querySelector('.ab-detail');
function el(tag, cls, text, parent) {
  var e = document.createElement(tag);
  if (cls) { e.className = cls; }
  if (text !== undefined) { e.textContent = text; }
  (parent || grid).appendChild(e);
  return e;
}
function quote(j) { return "token " + j + " '" + T[j] + "'"; }
// the label column is as wide as the longest head name of any layer, so the tokens never move under the mouse
var widest = Math.max.apply(null, data.names.map(function (row) {
  return Math.max.apply(null, row.map(function (name, hd) { return headLabel(hd, name).length; }));
}));
grid.style.gridTemplateColumns = (widest + 3) + 'ch repeat(' + n + ', minmax(1.8em, auto))';
var tokenRow = el('div', 'ab-row');
tokenRow.setAttribute('role', 'group');
tokenRow.setAttribute('aria-label', 'Tokens: the chosen one is the query (arrow keys move along)');
el('div', 'ab-head', 'query:', tokenRow);
var buttons = T.map(function (t, j) {
  var b = el('button', 'ab-control ab-token', t, tokenRow);
  b.type = 'button';
  b.setAttribute('aria-label', quote(j));
  b.addEventListener('focus', function () { show(j); });
  b.addEventListener('mouseenter', function () { show(j); });
  b.addEventListener('click', function () { show(j); });
  b.addEventListener('keydown', function (e) {
    var to = {ArrowLeft: j - 1, ArrowUp: j - 1, ArrowRight: j + 1, ArrowDown: j + 1, Home: 0, End: n - 1}[e.key];
    if (to === undefined) { return; }
    e.preventDefault();
    buttons[Math.max(0, Math.min(n - 1, to))].focus();
  });
  return b;
});
var cells = [], bars = [], heads = [], bests = [];
for (var hd = 0; hd < h; hd++) {
  var label = el('div', 'ab-head');
  el('span', 'ab-sw', undefined, label).style.background = data.colours[hd];
  heads.push(el('span', '', '', label));
  for (var j = 0; j < n; j++) {
    var cell = el('div', 'ab-cell');
    cells.push(cell);
    bars.push(el('div', 'ab-bar', undefined, cell));
    bars[bars.length - 1].style.background = data.colours[hd];
  }
  bests.push(el('div', 'ab-best', '', label));  // under the head's name, so the view fits a narrow page
}
el('div', '');
T.forEach(function (t) { el('div', 'ab-key', t).setAttribute('aria-hidden', 'true'); });
function headLabel(hd, name) { return 'head ' + hd + (name ? ' (' + name + ')' : ''); }
function headName(hd) { return headLabel(hd, data.names[layer][hd]); }
function render() {
  var w = W[layer], said = [];
  for (var hd = 0; hd < h; hd++) {
    var best = 0;
    for (var j = 0; j < n; j++) {
      var v = w[(hd * n + query) * n + j], i = hd * n + j;
      bars[i].style.height = (100 * v) + '%';
      bars[i].className = v > 0 ? 'ab-bar' : 'ab-bar ab-zero';
      cells[i].className = j === query ? 'ab-cell ab-q' : 'ab-cell';
      if (v > w[(hd * n + query) * n + best]) { best = j; }
    }
    var top = w[(hd * n + query) * n + best].toFixed(dp);
    heads[hd].textContent = headName(hd);
    bests[hd].textContent = "\\u2192 '" + T[best] + "' " + top;
    said.push(headName(hd) + ': most on ' + quote(best) + ', ' + top);
  }
  buttons.forEach(function (b, j) {
    b.setAttribute('aria-pressed', j === query ? 'true' : 'false');
    b.tabIndex = j === query ? 0 : -1;
  });
  var where = (data.layered ? 'layer ' + layer + ', ' : '') + quote(query);
  root.dataset.state = where;
  status.textContent = 'Query: ' + where + '. Bar height: the weight it puts on the token in that column.';
  detail.textContent = said.join('; ') + '.';
}
function show(j) { if (j !== query) { query = j; render(); } }
if (select) { select.addEventListener('change', function () { layer = Number(select.value); render(); }); }
render();
"""


def _body(n_layers, has_layers, layer):
    select = ""
    if has_layers:
        options = "".join(f'<option value="{i}"{" selected" if i == layer else ""}>layer {i}</option>'
                          for i in range(n_layers))
        select = f'<label for="{{uid}}-layer">Layer </label><select id="{{uid}}-layer" class="ab-control">{options}' \
                 "</select>"
    return (f'<div class="ab-top">{select}<span>Hover or focus a token (Tab, then the arrow keys).</span></div>'
            '<div class="ab-grid"></div>'
            '<p class="ab-live" aria-live="polite"><span class="ab-status"></span><span class="ab-sr ab-detail"></span>'
            "</p>")


def attention_explorer(weights, tokens, head_names=None, *, layer=0, token=None, decimals=2, description=None):
    """An interactive view of attention weights: choose a token, see where each head sends its weight.

    Args:
        weights: (n_layers, n_heads, L, L) or (n_heads, L, L) attention weights (a tensor or an array), over the
            tokens themselves (self-attention); masked weights are 0.
        tokens: the L tokens, as strings (or anything ``str`` turns into one).
        head_names: None, one name per head (e.g. its role: "previous-token"), or one list of names per layer;
            "" or None for a head without a name.
        layer, token: what the view shows first, and what the PNG fallback shows (token: the last by default).
        decimals: the inlined weights are rounded to this many places (1, 2 or 3).
        description: the text alternative; by default it says what the view shows, from the shapes and tokens.

    Returns a ``View``. Raises ValueError for a bad shape, weights outside [0, 1], names of the wrong length, or an
    input whose inlined weights would take the view past ``MAX_BYTES``.
    """
    w, tokens, names, has_layers, layer, token = _check(weights, tokens, head_names, layer, token)
    n_layers, h, L, _ = w.shape
    if decimals not in DECIMALS:
        raise ValueError(f"decimals={decimals!r} must be one of {DECIMALS}")
    encoded = [encode_weights(w[i], decimals) for i in range(n_layers)]
    data = {"alphabet": ALPHABET, "colours": [head_colour(i) for i in range(h)], "decimals": decimals,
            "k": _single_codes(decimals), "layer": layer, "layered": has_layers, "names": names, "token": token,
            "tokens": tokens, "weights": encoded}
    body = _body(n_layers, has_layers, layer)
    if description is None:
        shown = ", ".join(f"'{t}'" for t in tokens[:24]) + (", ..." if L > 24 else "")
        layers = f"{n_layers} layers of {h} heads" if has_layers else f"{h} heads"
        description = (f"Attention explorer for {layers} over {L} tokens ({shown}). For one query token at a time, "
                       f"one strip of bars per head shows how much weight that token puts on each token; the first "
                       f"view shows {'layer ' + str(layer) + ', ' if has_layers else ''}token {token} "
                       f"'{tokens[token]}'. Hover or focus a token{', or choose a layer,' if has_layers else ''} "
                       "to see another.")
    size = (len(json.dumps(data, separators=(",", ":"))) + len(_SCRIPT) + len(_STYLE) + len(body)
            + 2 * len(description) + 600)
    if size > MAX_BYTES:
        per_weight = sum(map(len, encoded)) / w.size
        fits = math.floor((MAX_BYTES - (size - sum(map(len, encoded)))) / per_weight)
        raise ValueError(f"too much to inline: {n_layers} layer(s) x {h} heads x {L} x {L} tokens = {w.size:,} "
                         f"weights make a view of about {size:,} bytes, and a view may take {MAX_BYTES:,}. Show "
                         f"fewer layers, heads or tokens (about {max(fits, 0):,} weights fit), e.g. "
                         f"weights[..., :n, :n] with fewer tokens, or decimals=1")
    title = (f"{'layer ' + str(layer) + ', ' if has_layers else ''}token {token} '{tokens[token]}': where its "
             "attention goes, head by head (bar height = weight)")
    fallback = plot_query_weights(w[layer], tokens, token, names[layer], decimals=decimals, title=title)
    return View("attention-explorer", data, body, _SCRIPT, _STYLE, fallback, description)
