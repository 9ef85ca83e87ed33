"""An interactive KV-cache calculator: a model's cache with MHA, its own g and MQA, and what fits in a memory.

``cache_calculator()`` returns a ``View`` (see ``interactive.py``). The reader picks a model from the package's table
(``experiments.model_configs.MODELS``) or types sizes: layers, query heads h, K/V heads g, d_head, context, batch,
bytes per number and memory. The view shows the cache of one batch, in bytes and as bars, for MHA (g = h), the chosen
g and MQA (g = 1), and, for each, the longest context that fits in the memory at that batch and the largest batch that
fits at that context. Its arithmetic is ``kv_cache.kv_cache_bytes_per_token`` ported to JavaScript with BigInt
integers, so every byte count is exact however large (a JavaScript Number is exact only below 2**53); the tests run
it in Chromium against the Python function.
"""
import html

from ..experiments.model_configs import MODELS, AttentionConfig, find_model
from ..kv_cache import kv_cache_bytes_per_token
from ..validation import require_divisible, require_positive
from .interactive import View
from .style import FONT_SIZE, INK, ROLE_COLOURS, tint, use_book_style

GIB = 2**30
DTYPES = {4: "fp32 (4 bytes)", 2: "fp16 / bf16 (2 bytes)", 1: "int8 / fp8 (1 byte)"}
SIZES = [("n_layers", "layers"), ("n_heads", "query heads h"), ("n_kv_heads", "K/V heads g"), ("d_head", "d_head"),
         ("context", "context S (tokens)"), ("batch", "batch B")]

# JavaScript shared with the head-sharing explorer: exact integers as BigInt, and their display.
JS_NUMBERS = r"""
function groupDigits(n) { return n.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
function inUnits(n) {  // bytes (a BigInt) in KiB, MiB, GiB or TiB, to two decimals
  var units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"], x = Number(n), u = 0;
  while (x >= 1024 && u < units.length - 1) { x /= 1024; u += 1; }
  return u === 0 ? groupDigits(n) + " bytes" : x.toFixed(2) + " " + units[u];
}
function kvCacheBytesPerToken(nLayers, nKvHeads, dHead, bytesPerElement) {  // the package's formula
  return 2n * nLayers * nKvHeads * dHead * bytesPerElement;
}
"""

_SCRIPT = JS_NUMBERS + r"""
var $ = function (name) { return document.getElementById(root.id + "-" + name); };
var sizeNames = ["n_layers", "n_heads", "n_kv_heads", "d_head"];
var allNames = sizeNames.concat(["context", "batch", "bytes_per_element", "memory_gib"]);
function positive(name) {
  var text = String($(name).value).trim();
  if (!/^[0-9]+$/.test(text) || BigInt(text) < 1n) {
    throw new Error(name + "=" + (text || "(empty)") + " must be a positive integer");
  }
  return BigInt(text);
}
function fill(index) {
  var m = data.models[index];
  sizeNames.forEach(function (name) { $(name).value = m[name]; });
}
function matchingModel() {
  for (var i = 0; i < data.models.length; i++) {
    var m = data.models[i];
    if (sizeNames.every(function (name) { return $(name).value.trim() === String(m[name]); })) { return i; }
  }
  return -1;
}
function update() {
  var v = {};
  try {
    allNames.forEach(function (name) { v[name] = positive(name); });
    if (v.n_heads % v.n_kv_heads !== 0n) {
      throw new Error("n_heads=" + v.n_heads + " is not divisible by n_kv_heads=" + v.n_kv_heads);
    }
  } catch (e) {
    $("error").textContent = e.message;
    $("results").hidden = true;
    root.dataset.state = "error: " + e.message;
    return;
  }
  $("error").textContent = "";
  $("results").hidden = false;
  var index = $("model").value === "" ? -1 : Number($("model").value);
  var name = index < 0 ? "your sizes" : data.models[index].name;
  var memory = v.memory_gib * 1073741824n;
  var rows = [["mha", "MHA (g = h)", v.n_heads], ["this", "this model", v.n_kv_heads], ["mqa", "MQA (g = 1)", 1n]];
  var cache = rows.map(function (r) {
    return kvCacheBytesPerToken(v.n_layers, r[2], v.d_head, v.bytes_per_element) * v.context * v.batch;
  });
  var scale = Number(cache[0] > memory ? cache[0] : memory);
  var variant = v.n_kv_heads === v.n_heads ? "MHA" : v.n_kv_heads === 1n ? "MQA" : "GQA";
  var parts = [];
  rows.forEach(function (r, i) {
    var row = $("row-" + r[0]);
    var perToken = kvCacheBytesPerToken(v.n_layers, r[2], v.d_head, v.bytes_per_element);
    var maxContext = memory / (perToken * v.batch), maxBatch = memory / (perToken * v.context);  // BigInt: rounds down
    row.dataset.bytes = cache[i].toString();
    row.dataset.maxContext = maxContext.toString();
    row.dataset.maxBatch = maxBatch.toString();
    row.querySelector(".ab-name").textContent = r[0] === "this" ? name + " (" + variant + ")" : r[1];
    row.querySelector(".ab-g").textContent = groupDigits(r[2]);
    row.querySelector(".ab-bytes").textContent = groupDigits(cache[i]) + " bytes = " + inUnits(cache[i]) +
      (cache[i] > memory ? ": does not fit" : ": fits");
    row.querySelector(".ab-fill").style.width = (100 * Number(cache[i]) / scale).toFixed(2) + "%";
    row.querySelector(".ab-budget").style.left = (100 * Number(memory) / scale).toFixed(2) + "%";
    row.querySelector(".ab-context").textContent = groupDigits(maxContext) + " tokens";
    row.querySelector(".ab-maxbatch").textContent = groupDigits(maxBatch) + " sequences";
    parts.push(r[0] + " g=" + r[2] + " " + cache[i] + " bytes, longest context " + maxContext +
               ", largest batch " + maxBatch);
  });
  $("head-context").textContent = "longest context at batch " + groupDigits(v.batch);
  $("head-batch").textContent = "largest batch at " + groupDigits(v.context) + " tokens";
  $("caption").textContent = "KV cache of " + name + ": " + v.n_layers + " layers, h = " + v.n_heads + ", g = " +
    v.n_kv_heads + ", d_head = " + v.d_head + ", " + groupDigits(v.context) + " tokens, batch " + v.batch + ", " +
    v.bytes_per_element + " byte" + (v.bytes_per_element > 1n ? "s" : "") +
    " per number; the dashed line is the memory left for the cache, " + v.memory_gib +
    " GiB (the weights need their own).";
  root.dataset.state = name + " (" + allNames.map(function (n) { return n + "=" + v[n]; }).join(", ") + "): " +
    parts.join("; ");
}
var select = $("model");
select.addEventListener("change", function () { if (select.value !== "") { fill(Number(select.value)); } update(); });
sizeNames.forEach(function (name) {
  $(name).addEventListener("input", function () {
    var i = matchingModel();
    select.value = i < 0 ? "" : String(i);
    update();
  });
});
["context", "batch", "bytes_per_element", "memory_gib"].forEach(function (name) {
  $(name).addEventListener("input", update);
});
$("bytes_per_element").addEventListener("change", update);
update();
"""

_STYLE = """
#{uid} { font: 14px/1.4 system-ui, sans-serif; color: %(ink)s; max-width: 820px; margin: 0.5em 0; }
#{uid} fieldset { border: 1px solid #bbb; display: flex; flex-wrap: wrap; gap: 0.4em 1em; padding: 0.5em; }
#{uid} fieldset label { display: inline-flex; flex-direction: column; font-size: 12px; }
#{uid} input[type=number] { width: 7em; font: inherit; }
#{uid} select, #{uid} input { font-size: 14px; }
#{uid} .ab-control:focus { outline: 3px solid %(focus)s; outline-offset: 1px; }
#{uid} .ab-error { color: #a0300a; font-weight: bold; min-height: 1.2em; margin: 0.3em 0; }
#{uid} table { border-collapse: collapse; width: 100%%; font-size: 13px; }
#{uid} th, #{uid} td { text-align: left; padding: 3px 6px; border-bottom: 1px solid #ddd; vertical-align: middle; }
#{uid} caption { text-align: left; font-size: 12px; padding: 3px 0; caption-side: bottom; }
#{uid} .ab-track { position: relative; width: 200px; height: 14px; background: #f2f2f2; border: 1px solid #999; }
#{uid} .ab-fill { position: absolute; left: 0; top: 0; bottom: 0; background: %(bar)s; }
#{uid} tr[id$=row-this] .ab-fill { background: %(this)s
  repeating-linear-gradient(45deg, transparent 0 4px, rgba(0, 0, 0, 0.4) 4px 5px); }
#{uid} .ab-name { white-space: nowrap; }
#{uid} .ab-budget { position: absolute; top: -3px; bottom: -3px; border-left: 2px dashed %(ink)s; }
"""



def cache_table(config: AttentionConfig, context: int, batch: int, bytes_per_element: int, memory_bytes: int):
    """The calculator's numbers, in Python: for MHA (g = h), ``config``'s g and MQA (g = 1), one dict each with
    g, the cache of ``batch`` sequences of ``context`` tokens in bytes, the longest context that fits in
    ``memory_bytes`` at that batch, and the largest batch that fits at that context."""
    require_positive(context=context, batch=batch, memory_bytes=memory_bytes)
    require_divisible("n_heads", config.n_heads, "n_kv_heads", config.n_kv_heads)
    rows = []
    for kind, g in (("mha", config.n_heads), ("this", config.n_kv_heads), ("mqa", 1)):
        per_token = kv_cache_bytes_per_token(config.n_layers, g, config.d_head, bytes_per_element)
        rows.append({"kind": kind, "g": g, "bytes": per_token * context * batch,
                     "max_context": memory_bytes // (per_token * batch),
                     "max_batch": memory_bytes // (per_token * context)})
    return rows


def _fallback(config, context, batch, bytes_per_element, memory_gib, rows):
    import matplotlib.pyplot as plt

    labels = ["MHA (g = h)", f"{config.name} ({config.variant})", "MQA (g = 1)"]
    memory = memory_gib * GIB
    with use_book_style():
        fig, ax = plt.subplots(figsize=(5, 3.2))
        y = [2, 1, 0]
        values = [r["bytes"] / GIB for r in rows]
        colours = [tint(ROLE_COLOURS["key"], 0.45), ROLE_COLOURS["key"], tint(ROLE_COLOURS["key"], 0.45)]
        ax.barh(y, values, color=colours, edgecolor=INK, hatch=[None, "//", None])
        ax.set_yticks(y, [f"{label}\ng = {r['g']}" for label, r in zip(labels, rows, strict=True)])
        ax.axvline(memory / GIB, color=INK, ls="--", lw=1.5)
        right = max(max(values), memory / GIB)
        ax.text(memory / GIB, 2.65, f" memory for the cache: {memory_gib} GiB", fontsize=FONT_SIZE - 1, va="center")
        for yy, r in zip(y, rows, strict=True):
            fits = "fits" if r["bytes"] <= memory else "does not fit"
            ax.annotate(f"{r['bytes'] / GIB:,.2f} GiB: {fits}\nlongest context {r['max_context']:,} at batch {batch}"
                        f"\nlargest batch {r['max_batch']:,} at {context:,} tokens", (1.03, yy),
                        xycoords=("axes fraction", "data"), va="center", fontsize=FONT_SIZE - 1)
        ax.set_xlim(0, right * 1.05)
        ax.set_ylim(-0.6, 2.9)
        ax.set_xlabel("KV cache (GiB)")
        ax.set_title(f"KV cache of {config.name}: {config.n_layers} layers, d_head = {config.d_head},\n"
                     f"{context:,} tokens, batch {batch}, {bytes_per_element} bytes per number", loc="left")
        fig.tight_layout()
    return fig


def cache_calculator(model="Llama 3 8B", context=8192, batch=32, bytes_per_element=2, memory_gib=80) -> View:
    """The KV-cache calculator as an interactive view, starting from ``model`` (a name from ``MODELS`` or an
    ``AttentionConfig`` of your own) at ``context`` tokens, ``batch`` sequences, ``bytes_per_element`` bytes per
    number (4, 2 or 1) and ``memory_gib`` GiB of memory. Display it, or make it the last expression of a cell."""
    config = find_model(model)
    require_positive(n_layers=config.n_layers, n_heads=config.n_heads, n_kv_heads=config.n_kv_heads,
                     d_head=config.d_head, context=context, batch=batch, memory_gib=memory_gib)
    if bytes_per_element not in DTYPES:
        raise ValueError(f"bytes_per_element={bytes_per_element!r} must be one of {', '.join(map(str, DTYPES))} "
                         "(fp32, fp16/bf16, int8/fp8)")
    rows = cache_table(config, context, batch, bytes_per_element, memory_gib * GIB)
    models = list(MODELS) if config in MODELS else [*MODELS, config]
    data = {"models": [{"name": m.name, "n_layers": m.n_layers, "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads,
                        "d_head": m.d_head} for m in models]}
    chosen = models.index(config)
    options = "".join(f'<option value="{i}"{" selected" if i == chosen else ""}>{html.escape(m.name)}</option>'
                      for i, m in enumerate(models))
    initial = {"n_layers": config.n_layers, "n_heads": config.n_heads, "n_kv_heads": config.n_kv_heads,
               "d_head": config.d_head, "context": context, "batch": batch}
    inputs = "".join(f'<label for="{{uid}}-{name}">{text}<input type="number" id="{{uid}}-{name}" class="ab-control" '
                     f'min="1" step="1" value="{initial[name]}"></label>' for name, text in SIZES)
    dtypes = "".join(f'<option value="{b}"{" selected" if b == bytes_per_element else ""}>{text}</option>'
                     for b, text in DTYPES.items())
    row_html = "".join(
        f'<tr id="{{uid}}-row-{kind}"><th scope="row" class="ab-name"></th><td class="ab-g"></td>'
        f'<td><div class="ab-track" aria-hidden="true"><div class="ab-fill"></div><div class="ab-budget"></div></div>'
        f'</td><td class="ab-bytes"></td><td class="ab-context"></td><td class="ab-maxbatch"></td></tr>'
        for kind in ("mha", "this", "mqa"))
    body = (f'<p><label for="{{uid}}-model">Model </label><select id="{{uid}}-model" class="ab-control">'
            f'<option value="">your sizes</option>{options}</select></p>'
            f"<fieldset><legend>Sizes (change any)</legend>{inputs}"
            f'<label for="{{uid}}-bytes_per_element">bytes per number<select id="{{uid}}-bytes_per_element" '
            f'class="ab-control">{dtypes}</select></label>'
            f'<label for="{{uid}}-memory_gib">memory for the cache (GiB)<input type="number" id="{{uid}}-memory_gib" '
            f'class="ab-control" min="1" step="1" value="{memory_gib}"></label></fieldset>'
            f'<p id="{{uid}}-error" class="ab-error" role="alert"></p>'
            f'<table id="{{uid}}-results" aria-live="polite"><caption id="{{uid}}-caption"></caption>'
            f'<thead><tr><th scope="col">variant</th><th scope="col">g</th><th scope="col">cache</th>'
            f'<th scope="col">bytes</th><th scope="col" id="{{uid}}-head-context">longest context</th>'
            f'<th scope="col" id="{{uid}}-head-batch">largest batch</th></tr></thead><tbody>{row_html}</tbody></table>')
    style = _STYLE % {"ink": INK, "focus": ROLE_COLOURS["query"], "bar": _hex(tint(ROLE_COLOURS["key"], 0.45)),
                      "this": ROLE_COLOURS["key"]}
    description = (f"KV-cache calculator, showing {config.name} ({config.variant}, {config.n_layers} layers, "
                   f"h = {config.n_heads}, g = {config.n_kv_heads}, d_head = {config.d_head}) at {context:,} tokens, "
                   f"batch {batch}, {bytes_per_element} bytes per number: the cache is "
                   f"{rows[0]['bytes'] / GIB:,.2f} GiB with MHA, {rows[1]['bytes'] / GIB:,.2f} GiB with its g and "
                   f"{rows[2]['bytes'] / GIB:,.2f} GiB with MQA; the reader can pick another model or type sizes, and "
                   f"it shows the longest context and largest batch whose cache fits in {memory_gib} GiB.")
    fallback = _fallback(config, context, batch, bytes_per_element, memory_gib, rows)
    return View("kv-cache-calculator", data, body, _SCRIPT, style, fallback, description)


def _hex(rgb) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgb)
