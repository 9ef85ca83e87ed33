"""Checks for chapter 10's exercises: the largest batch whose cache fits, a decode step's bytes, FLOPs and roofline
time for any model, and the Pareto front over any number of costs."""
from ..experiments.model_configs import AttentionConfig
from ..kv_cache import kv_cache_bytes_per_token
from ._compare import _require_number, CheckFailed, _call, _exercise


def _largest_batch(memory_bytes, weight_bytes, n_layers, n_kv_heads, d_head, context, bytes_per_element, window):
    cached = context if window is None else min(context, window)
    per_sequence = kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_element) * cached
    return int(max(0, (memory_bytes - weight_bytes) // per_sequence))


@_exercise("largest_batch",
           task="return the largest number of sequences (an int, 0 if none fits) whose K/V caches, each of "
                "`context` tokens for a model of n_layers layers with n_kv_heads heads of size d_head at "
                "bytes_per_element bytes per number, fit in memory_bytes next to the model's weights, weight_bytes "
                "(both in bytes, ints or floats such as 80e9); window=None caches every token, a sliding window of "
                "`window` tokens keeps only the most recent ones.",
           hint="One sequence's cache takes kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, "
                "bytes_per_element) bytes per cached token, and it caches `context` tokens, or "
                "min(context, window) with a window. The caches share what the weights leave: "
                "(memory_bytes - weight_bytes) // (bytes per token * cached tokens), and 0 if that is negative.")
def check_largest_batch(fn):
    """fn(memory_bytes, weight_bytes, n_layers, n_kv_heads, d_head, context, bytes_per_element, window) -> the
    largest batch whose caches fit beside the weights.

    Tried on 7 models and memories (MHA, GQA and MQA; fp16 and fp32; with and without a window, one context shorter
    than its window, one where the weights leave no room, one given in floats); compared with the free memory divided
    by one sequence's cache (attention_book.kv_cache.kv_cache_bytes_per_token), rounded down.
    """
    gib = 2**30
    # the smallest memory first
    cases = [(2 * gib, 0.5 * gib, 6, 1, 128, 8192, 4, None), (16 * gib, 14 * gib, 32, 8, 128, 4096, 2, None),
             (24 * gib, 14.5 * gib, 32, 8, 128, 32_768, 2, 4096), (24 * gib, 13.5 * gib, 32, 32, 128, 1000, 2, 4096),
             (80e9, 16e9, 32, 8, 128, 4096, 2, None),  # floats, as a memory in GB is often written
             (80 * gib, 16 * gib, 32, 8, 128, 8192, 2, None), (80 * gib, 140 * gib, 80, 8, 128, 4096, 2, None)]
    for memory, weights, n_layers, g, d_head, context, b, window in cases:
        if not isinstance(memory, float):
            memory, weights = int(memory), int(weights)
        expected = _largest_batch(memory, weights, n_layers, g, d_head, context, b, window)
        got = _call(fn, (memory, weights, n_layers, g, d_head, context, b, window), "largest_batch")
        _require_number(fn, f"{memory}, {weights}, {n_layers}, {g}, {d_head}, {context}, {b}, {window}", got)
        if isinstance(got, int) and not isinstance(got, bool) and got == expected:
            continue
        per_token = kv_cache_bytes_per_token(n_layers, g, d_head, b)
        likely = ""
        if window is not None and got == _largest_batch(memory, weights, n_layers, g, d_head, context, b, None):
            likely = "\nLikely mistake: the window was left out: each sequence caches every token of its context"
        elif window is not None and context < window and got == (memory - weights) // (per_token * window):
            likely = "\nLikely mistake: a context shorter than the window was charged the whole window"
        elif got == memory // (per_token * (context if window is None else min(context, window))):
            likely = "\nLikely mistake: the weights' bytes were not taken from the memory"
        elif isinstance(got, int) and got < 0:
            likely = "\nLikely mistake: when the weights leave no room, no sequence fits: 0, not a negative batch"
        elif isinstance(got, float):
            likely = "\nLikely mistake: a batch is a whole number of sequences: round down to an int"
        raise CheckFailed(f"memory {memory / gib:g} GiB, weights {weights / gib:g} GiB, n_layers={n_layers}, "
                          f"n_kv_heads={g}, d_head={d_head}, context={context:,}, bytes_per_element={b}, "
                          f"window={window}: expected a batch of {expected:,}, got {got!r}{likely}")
    print(f"✓ largest_batch is right for {len(cases)} models and memories, with and without a sliding window.")


def _step(config, n_params, context, batch, bytes_per_element, bandwidth, flop_rate):
    """The package's numbers for one decode step of a whole model: bytes read, FLOPs, roofline seconds, bound."""
    from ..figures.head_sharing_explorer import decode_step_numbers  # here: the figures import matplotlib
    from ..figures.roofline import attainable_flop_rate
    one = decode_step_numbers(config.n_heads, config.n_kv_heads, config.n_layers, config.d_head, context,
                              bytes_per_element)  # one sequence's cache and attention FLOPs
    n_bytes = n_params * bytes_per_element + batch * one["bytes_read"]
    flops = batch * (2 * n_params + one["flops"])
    seconds = flops / attainable_flop_rate(flops / n_bytes, bandwidth, flop_rate)
    return {"bytes": n_bytes, "flops": flops, "seconds": seconds,
            "bound": "memory" if n_bytes / bandwidth >= flops / flop_rate else "compute"}


@_exercise("decode_step_roofline",
           task="given a model's attention config (n_layers, n_heads, n_kv_heads, d_head), its number of weights "
                "n_params, and a decode step of `batch` sequences each with `context` cached tokens, numbers of "
                "bytes_per_element bytes, on a machine that reads `bandwidth` bytes and computes flop_rate FLOPs "
                "per second, return a dict: \"bytes\", the bytes the step reads (every weight, and every sequence's "
                "K/V cache of every layer), \"flops\", its FLOPs (the weights' matrix-vector products and the "
                "attention of every query head over its cache, a multiply-add counting 2), both ints; \"seconds\", "
                "the roofline's least time for the step (a float); and \"bound\", \"memory\" or \"compute\", the "
                "bound that sets it; without the package's decode_step_numbers, attainable_flop_rate, step_bytes "
                "or decode_step_bytes.",
           hint="Bytes: the weights are read once for the whole batch, n_params * bytes_per_element, and each "
                "sequence's cache once, batch * context * 2 * n_layers * n_kv_heads * d_head * bytes_per_element. "
                "FLOPs per sequence: 2 * n_params for the weights, and 4 * n_heads * context * d_head * n_layers "
                "for the attention (q . k and weights . v, for every query head, whatever n_kv_heads); times batch. "
                "seconds = max(bytes / bandwidth, flops / flop_rate); the bound is the one that gives the max.",
           idea="A decode step's time is bounded by the larger of two times: the bytes it must read over the "
                "bandwidth, and the FLOPs it must do over the compute rate. Count what is read once per step (the "
                "weights) and what is read once per sequence (each cache), and the FLOPs of the weights and of "
                "attention per sequence.")
def check_decode_step_roofline(fn):
    """fn(config, n_params, context, batch, bytes_per_element, bandwidth, flop_rate) -> {"bytes", "flops",
    "seconds", "bound"} of one decode step.

    Tried on 5 models, batches and machines (MHA, GQA and MQA; memory-bound and compute-bound steps); compared with
    the package's decode_step_numbers (one sequence's cache and attention FLOPs) and the roofline's
    attainable_flop_rate, which refuse while the answer runs, as do step_bytes and llama's decode_step_bytes.
    """
    refused = ["attention_book.figures.head_sharing_explorer.decode_step_numbers",
               "attention_book.figures.roofline.attainable_flop_rate",
               "attention_book.figures.cache_crossover.step_bytes",
               "attention_book.llama.traffic.decode_step_bytes"]
    tiny = AttentionConfig("tiny", n_layers=2, d_model=32, n_heads=8, n_kv_heads=2, d_head=4)
    shazeer = AttentionConfig("Shazeer 2019, MQA", n_layers=6, d_model=1024, n_heads=8, n_kv_heads=1, d_head=128)
    llama2 = AttentionConfig("Llama 2 7B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, d_head=128)
    llama3 = AttentionConfig("Llama 3 8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_head=128)
    cases = [(tiny, 20_000, 16, 1, 4, 1e9, 1e10), (shazeer, 90_000_000, 4096, 8, 4, 20e9, 100e9),
             (llama2, 6_740_000_000, 4096, 1, 2, 3.35e12, 989e12), (llama3, 8_030_000_000, 512, 64, 2, 20e9, 100e9),
             (llama3, 8_030_000_000, 8192, 32, 2, 3.35e12, 989e12)]  # the smallest step first
    for config, n_params, context, batch, b, bandwidth, flop_rate in cases:
        expected = _step(config, n_params, context, batch, b, bandwidth, flop_rate)
        tried = (f"{config.name} (n_layers={config.n_layers}, n_heads={config.n_heads}, "
                 f"n_kv_heads={config.n_kv_heads}, d_head={config.d_head}), n_params={n_params:,}, "
                 f"context={context:,}, batch={batch}, bytes_per_element={b}, bandwidth {bandwidth:g} B/s, "
                 f"flop_rate {flop_rate:g} FLOP/s")
        got = _call(fn, (config, n_params, context, batch, b, bandwidth, flop_rate), "decode_step_roofline",
                    refuse=refused)
        if not isinstance(got, dict) or set(got) != set(expected):
            raise CheckFailed(f"decode_step_roofline on {tried}: expected a dict with the keys {sorted(expected)}, "
                              f"got {got!r}")
        cache = batch * context * 2 * config.n_layers * config.n_kv_heads * config.d_head * b
        weights = n_params * b
        attention = batch * 4 * config.n_heads * context * config.d_head * config.n_layers
        mistakes = {
            "bytes": [(weights * batch + cache, "the weights were counted once per sequence; one step reads them "
                                                "once for the whole batch"),
                      (weights + cache // batch, "the cache of only one sequence was counted"),
                      (weights + cache // 2, "only keys or only values were counted: each cached token holds both"),
                      (weights + cache // config.n_kv_heads * config.n_heads,
                       "the cache was counted with n_heads K/V heads, as MHA's, not n_kv_heads"),
                      (cache, "the weights were left out: every step reads them too")],
            "flops": [(2 * n_params + attention // batch, "the FLOPs of one sequence were counted, not the batch's"),
                      (batch * 2 * n_params + attention // config.n_heads * config.n_kv_heads,
                       "the attention's FLOPs were counted per K/V head; every query head does its own arithmetic"),
                      (attention, "the weights' FLOPs were left out: each weight does a multiply-add per token"),
                      (batch * n_params + attention // 2, "a multiply-add was counted as 1 FLOP, not 2")],
            "seconds": [(expected["bytes"] / bandwidth + expected["flops"] / flop_rate,
                         "the two bounds were added; the roofline's least time is the larger of the two"),
                        (min(expected["bytes"] / bandwidth, expected["flops"] / flop_rate),
                         "the smaller of the two bounds was taken; the step can take no less than the larger")],
        }
        for key in ("bytes", "flops", "seconds", "bound"):
            value, want = got[key], expected[key]
            if key == "seconds":
                right = isinstance(value, (int, float)) and abs(value - want) <= 1e-9 * want
            elif key == "bound":
                right = value == want
            else:
                right = isinstance(value, int) and not isinstance(value, bool) and value == want
            if right:
                continue
            likely = next((f"\nLikely mistake: {why}" for wrong, why in mistakes.get(key, [])
                           if isinstance(value, (int, float)) and abs(value - wrong) <= 1e-9 * abs(wrong)
                           and abs(wrong - want) > 1e-9 * want), "")
            if not likely and key in ("bytes", "flops") and isinstance(value, float) and value == want:
                likely = "\nLikely mistake: bytes and FLOPs are whole numbers: an int, not a float"
            shown = f"{want:,}" if isinstance(want, int) else f"{want:.6g}" if key == "seconds" else repr(want)
            given = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else repr(value)
            raise CheckFailed(f"decode_step_roofline on {tried}: expected {key} = {shown}, got {given}{likely}")
    print(f"✓ decode_step_roofline is right for {len(cases)} models, batches and machines, memory- and "
          "compute-bound.")


def _pareto(points):
    def beaten(p):
        return any(q != p and all(a <= b for a, b in zip(q, p, strict=True)) for q in points)
    return sorted(p for p in points if not beaten(p))


@_exercise("pareto_front",
           task="given a list of points, tuples of costs of the same length (bytes, seconds, loss, ...: two or more, "
                "each the lower the better), return the list of the points that no other point beats, sorted: a "
                "point is beaten when another point is no worse in every cost and strictly better in at least one; "
                "two equal points do not beat each other, and both stay.",
           hint="A point q beats p when q != p and every cost of q is <= the same cost of p: all(a <= b for a, b "
                "in zip(q, p)). Keep p if no point of the list beats it (any() over the points), then sort what "
                "is kept.")
def check_pareto_front(fn):
    """fn(points: list of tuples of costs) -> the points no other point beats, sorted.

    Tried on 5 sets of points: one point, pairs (bytes, loss) unsorted, triples (bytes, seconds, loss) where a
    point is beaten only by the third cost, equal points, and ties in one cost; compared with a brute-force front
    that drops every beaten point.
    """
    cases = [[(100, 1.0)],
             [(512, 0.01), (256, 0.03), (128, 1.9), (64, 2.7), (128, 2.0)],
             [(512, 41.0, 0.01), (256, 21.0, 0.07), (256, 21.0, 0.03), (128, 10.2, 0.73), (64, 5.3, 2.5)],
             [(64, 5.3, 2.5), (64, 5.3, 2.5), (128, 3.1, 2.6), (128, 5.0, 2.6), (256, 3.1, 0.5)],
             [(512, 41.0, 0.01), (256, 21.0, 0.5), (256, 20.0, 0.5), (128, 10.2, 0.04), (64, 5.3, 2.7),
              (64, 5.3, 3.0), (32, 40.0, 0.04)]]  # the fewest points first
    for points in cases:
        expected = _pareto(points)
        got = _call(fn, (list(points),), "pareto_front")
        try:
            same = [tuple(p) for p in got] == expected
        except TypeError:  # None, a number, points that are not tuples
            same = False
        if same:
            continue
        likely = ""
        two = sorted(p for p in points if not any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in points))
        if len(points[0]) > 2 and got == two:
            likely = "\nLikely mistake: only the first two costs were compared; a point can be better in any of them"
        elif got == sorted(set(expected)) and len(set(expected)) < len(expected):
            likely = "\nLikely mistake: an equal point was dropped; equal points do not beat each other"
        raise CheckFailed(f"pareto_front on points {points}: expected the front {expected}, got {got!r}{likely}")
    print(f"✓ pareto_front is right for {len(cases)} sets of points, with two and three costs.")
