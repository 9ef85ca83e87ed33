"""An interactive head-sharing explorer: a slider over g shows the groups, the cache and the bytes a decode step reads.

``head_sharing_explorer()`` returns a ``View`` (see ``interactive.py``). A slider runs over the values of g (K/V
heads) that divide h. For each it draws the h query heads in their colours (``head_colour(i)``), grouped above the
K/V head they share (``kv_head_colour(j, h, g)``), and gives the cache of one sequence (``kv_cache_bytes_per_token``
times the context), the bytes a decode step at that context reads (the whole cache, each K/V head once, as the
folded ``grouped_query_sdpa`` does), the FLOPs of that step (4 h S d_head per layer, the same for every g) and
their ratio, the arithmetic intensity. The byte counts are exact BigInt integers in JavaScript.
"""
from matplotlib.patches import Circle, Rectangle

from ..experiments.model_configs import AttentionConfig, find_model
from ..kv_cache import kv_cache_bytes_per_token
from ..validation import require_divisible, require_positive
from .blocks import new_canvas
from .cache_calculator import JS_NUMBERS
from .interactive import View
from .style import FONT_SIZE, INK, head_colour, kv_head_colour, text_colour_on, use_book_style

MAX_HEADS = 256  # the view draws every query head


def divisors(n: int) -> list[int]:
    """The values of g that divide n, smallest first."""
    return [g for g in range(1, n + 1) if n % g == 0]


def variant(n_heads: int, n_kv_heads: int) -> str:
    return "MHA" if n_kv_heads == n_heads else "MQA" if n_kv_heads == 1 else "GQA"


def decode_step_numbers(n_heads, n_kv_heads, n_layers, d_head, context, bytes_per_element):
    """One decode step of one sequence with ``context`` cached tokens: the cache in bytes (all of which the step
    reads, each K/V head once), the same for MHA, and the step's attention FLOPs, 4 h S d_head per layer."""
    require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
    require_positive(context=context)
    cache = kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_element) * context
    return {"cache_bytes": cache, "bytes_read": cache,
            "mha_bytes": kv_cache_bytes_per_token(n_layers, n_heads, d_head, bytes_per_element) * context,
            "flops": 4 * n_heads * context * d_head * n_layers}


_SCRIPT = JS_NUMBERS + r"""
var $ = function (name) { return document.getElementById(root.id + "-" + name); };
var slider = $("g"), h = BigInt(data.n_heads), L = BigInt(data.n_layers), d = BigInt(data.d_head);
var S = BigInt(data.context), b = BigInt(data.bytes_per_element);
function cell(tag, cls, text, colour, ink) {
  var e = document.createElement(tag);
  e.className = cls;
  e.textContent = text;
  if (colour) { e.style.background = colour; e.style.color = ink; }
  return e;
}
function update() {
  var g = data.divisors[Number(slider.value)], group = data.n_heads / g, G = BigInt(g);
  var kind = g === data.n_heads ? "MHA" : g === 1 ? "MQA" : "GQA";
  var label = "g = " + g + " (" + kind + ")";
  slider.setAttribute("aria-valuetext", label);
  $("gout").textContent = label;
  var box = $("groups"), kv = data.kv_colours[String(g)], small = data.n_heads > 48;
  box.textContent = "";
  box.classList.toggle("ab-small", small);
  for (var j = 0; j < g; j++) {
    var grp = cell("div", "ab-group", "", null, null), row = cell("div", "ab-qrow", "", null, null);
    for (var i = j * group; i < (j + 1) * group; i++) {
      var q = cell("span", "ab-q", small ? "" : String(i), data.q_colours[i], data.q_ink[i]);
      q.dataset.colour = data.q_colours[i];
      q.title = "query head " + i;
      row.appendChild(q);
    }
    grp.appendChild(row);
    var k = cell("span", "ab-kv", small && group < 3 ? "" : "K/V " + j, kv[j], data.kv_ink[String(g)][j]);
    k.dataset.colour = kv[j];
    k.title = "K/V head " + j + ", read by query heads " + (j * group) + " to " + ((j + 1) * group - 1);
    grp.appendChild(k);
    box.appendChild(grp);
  }
  var perToken = kvCacheBytesPerToken(L, G, d, b), cache = perToken * S;
  var mha = kvCacheBytesPerToken(L, h, d, b) * S, flops = 4n * h * S * d * L;
  var intensity = Number(flops) / Number(cache);
  box.setAttribute("aria-label", g + " group" + (g > 1 ? "s" : "") + " of " + group + " query head" +
    (group > 1 ? "s" : "") + ", each group sharing one K/V head: query head i reads K/V head i // " + group);
  var out = $("numbers");
  out.dataset.cacheBytes = cache.toString();
  out.dataset.bytesRead = cache.toString();
  out.dataset.flops = flops.toString();
  out.dataset.intensity = String(intensity);
  $("cache").textContent = groupDigits(perToken) + " bytes per token; " + groupDigits(cache) + " bytes = " +
    inUnits(cache) + " at " + groupDigits(S) + " tokens" + (g === data.n_heads ? " (MHA's)" :
    ", " + group + " times less than MHA's " + inUnits(mha));
  $("read").textContent = groupDigits(cache) + " bytes = " + inUnits(cache) + ", the whole cache, each K/V head once";
  $("flops").textContent = groupDigits(flops) + " FLOPs, the same for every g: " +
    intensity.toFixed(intensity < 10 ? 2 : 1) + " FLOP per byte read";
  root.dataset.state = "h=" + data.n_heads + " g=" + g + " (" + kind + "), groups of " + group + ": cache " + cache +
    " bytes, read per step " + cache + " bytes, " + flops + " FLOPs";
}
slider.addEventListener("input", update);
update();
"""

_STYLE = """
#{uid} { font: 14px/1.4 system-ui, sans-serif; color: %(ink)s; max-width: 820px; margin: 0.5em 0; }
#{uid} input[type=range] { width: 16em; vertical-align: middle; }
#{uid} .ab-control:focus { outline: 3px solid #0072B2; outline-offset: 2px; }
#{uid} output { font-weight: bold; margin-left: 0.5em; }
#{uid} .ab-groups { display: flex; flex-wrap: wrap; gap: 8px 6px; margin: 0.6em 0; }
#{uid} .ab-group { display: flex; flex-direction: column; gap: 3px; border: 1px solid #888; padding: 3px; }
#{uid} .ab-qrow { display: flex; gap: 2px; }
#{uid} .ab-q { display: inline-block; width: 20px; height: 18px; font-size: 10px; line-height: 18px;
  text-align: center; border: 1px solid %(ink)s; border-radius: 50%%; }
#{uid} .ab-kv { display: block; height: 16px; font-size: 10px; line-height: 16px; text-align: center;
  border: 1px solid %(ink)s; white-space: nowrap; overflow: hidden; min-width: 20px; }
#{uid} .ab-small .ab-q { width: 8px; height: 12px; line-height: 12px; }
#{uid} .ab-small .ab-kv { height: 10px; line-height: 10px; font-size: 8px; min-width: 8px; }
#{uid} dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 0; font-size: 13px; }
#{uid} dt { font-weight: bold; }
#{uid} dd { margin: 0; }
"""




def _config(model, n_heads, n_kv_heads, n_layers, d_head):
    if model is None:
        return AttentionConfig("your sizes", n_layers, n_heads * d_head, n_heads, n_kv_heads, d_head)
    return find_model(model)


def draw_groups(n_heads, n_kv_heads, ax, y=0.0):
    """Draw the h query heads (circles in their colours) above the g K/V heads they share (bars spanning their
    group, in the group's colour), on ``ax`` with y growing downwards, starting at ``y``; return the height used."""
    group = n_heads // n_kv_heads
    labelled = n_heads <= 48
    for i in range(n_heads):
        ax.add_patch(Circle((i + 0.5, y + 0.5), 0.42, facecolor=head_colour(i), edgecolor=INK, lw=0.6))
        if labelled:
            ax.text(i + 0.5, y + 0.5, str(i), ha="center", va="center", fontsize=FONT_SIZE - 3,
                    color=text_colour_on(head_colour(i)))
    for j in range(n_kv_heads):
        colour = kv_head_colour(j, n_heads, n_kv_heads)
        ax.add_patch(Rectangle((j * group + 0.08, y + 1.2), group - 0.16, 0.8, facecolor=colour, edgecolor=INK,
                               lw=0.8))
        if labelled and group >= 2:
            ax.text(j * group + group / 2, y + 1.6, f"K/V {j}", ha="center", va="center", fontsize=FONT_SIZE - 3,
                    color=text_colour_on(colour))
        for i in range(j * group, (j + 1) * group):
            ax.plot([i + 0.5, j * group + group / 2], [y + 0.92, y + 1.2], color=INK, lw=0.4)
    return 2.0


def scope(config, context, bytes_per_element):
    """What the numbers cover: the model, all its layers, the context and the bytes per number (fp16 for 2)."""
    name = "" if config.name == "your sizes" else f"{config.name}, "
    dtype = {2: " (fp16)", 4: " (fp32)", 1: " (int8)"}.get(bytes_per_element, "")
    return (f"{name}whole model: {config.n_layers} layers, h = {config.n_heads}, d_head = {config.d_head}, "
            f"{context:,} cached tokens, {bytes_per_element} byte{'s' * (bytes_per_element > 1)} per number{dtype}")


def _fallback(config, n_kv_heads, context, bytes_per_element):
    shown = list(dict.fromkeys([config.n_heads, n_kv_heads, 1]))
    h = config.n_heads
    fig, ax = new_canvas(max(h, 24), 3.6 * len(shown) + 1.2, scale=min(0.3, 7.5 / max(h, 24)))
    with use_book_style():
        ax.text(0, 0.2, scope(config, context, bytes_per_element), fontsize=FONT_SIZE, va="top", weight="bold")
        for k, g in enumerate(shown):
            top = 3.6 * k + 2.4
            n = decode_step_numbers(h, g, config.n_layers, config.d_head, context, bytes_per_element)
            ax.text(0, top - 0.3, f"g = {g} ({variant(h, g)}), groups of {h // g}: KV cache of all "
                    f"{config.n_layers} layers {n['cache_bytes'] / 2**20:,.0f} MiB, all read at each decode step",
                    fontsize=FONT_SIZE, va="bottom")
            draw_groups(h, g, ax, y=top)
    return fig


def head_sharing_explorer(n_heads=32, n_kv_heads=8, n_layers=32, d_head=128, context=4096, bytes_per_element=2,
                          model=None) -> View:
    """The head-sharing explorer as an interactive view: a slider over the g that divide ``n_heads``, starting at
    ``n_kv_heads``, for a model of ``n_layers`` layers and head width ``d_head`` decoding with ``context`` cached
    tokens at ``bytes_per_element`` bytes per number. ``model`` (a name from ``MODELS`` or an ``AttentionConfig``)
    replaces n_heads, n_kv_heads, n_layers and d_head with the model's."""
    config = _config(model, n_heads, n_kv_heads, n_layers, d_head)
    h, g = config.n_heads, config.n_kv_heads
    require_positive(n_heads=h, n_kv_heads=g, n_layers=config.n_layers, d_head=config.d_head, context=context,
                     bytes_per_element=bytes_per_element)
    require_divisible("n_heads", h, "n_kv_heads", g)
    if h > MAX_HEADS:
        raise ValueError(f"n_heads={h} is more than the view draws: at most {MAX_HEADS}")
    gs = divisors(h)
    kv = {str(k): [kv_head_colour(j, h, k) for j in range(k)] for k in gs}
    data = {"n_heads": h, "n_layers": config.n_layers, "d_head": config.d_head, "context": context,
            "bytes_per_element": bytes_per_element, "divisors": gs,
            "q_colours": [head_colour(i) for i in range(h)],
            "q_ink": [text_colour_on(head_colour(i)) for i in range(h)],
            "kv_colours": kv, "kv_ink": {k: [text_colour_on(c) for c in cs] for k, cs in kv.items()}}
    body = (f'<p><label for="{{uid}}-g">K/V heads g, among the divisors of h = {h}</label> '
            f'<input type="range" id="{{uid}}-g" class="ab-control" min="0" max="{len(gs) - 1}" step="1" '
            f'value="{gs.index(g)}"><output id="{{uid}}-gout" for="{{uid}}-g"></output></p>'
            f'<div id="{{uid}}-groups" class="ab-groups" role="img" aria-label=""></div>'
            f'<dl id="{{uid}}-numbers" aria-live="polite">'
            f"<dt>KV cache</dt><dd id=\"{{uid}}-cache\"></dd>"
            f"<dt>attention reads per decode step</dt><dd id=\"{{uid}}-read\"></dd>"
            f"<dt>attention arithmetic per step</dt><dd id=\"{{uid}}-flops\"></dd></dl>"
            f'<p style="font-size:12px;margin:0.3em 0">{scope(config, context, bytes_per_element)}, one '
            f"sequence. Query head i (a circle, in its colour) reads the K/V head below its group, i // (h / g).</p>")
    n = decode_step_numbers(h, g, config.n_layers, config.d_head, context, bytes_per_element)
    description = (f"Head-sharing explorer for h = {h} query heads: a slider over g, the number of K/V heads, among "
                   f"the divisors of h ({', '.join(map(str, gs))}). It shows the query heads grouped above the K/V "
                   f"head each group shares, and the KV cache and bytes read per decode step; at g = {g} that is "
                   f"{n['cache_bytes']:,} bytes for the whole model, all {config.n_layers} layers, "
                   f"d_head = {config.d_head}, {context:,} tokens, against {n['mha_bytes']:,} for MHA.")
    fallback = _fallback(config, g, context, bytes_per_element)
    return View("head-sharing-explorer", data, body, _SCRIPT, _STYLE % {"ink": INK}, fallback, description)
