"""Checks for chapter 10's exercises: a cache with a sliding window, the memory bound of a step, the Pareto front."""
from ._compare import CheckFailed, _call, _exercise


@_exercise("cache_bytes",
           task="return the bytes (an int) of one sequence's whole K/V cache after n_tokens tokens, for a model with "
                "n_layers, n_kv_heads, d_head at bytes_per_element bytes per number; window=None caches every token, "
                "a sliding window of `window` tokens keeps only the most recent ones.",
           hint="A token costs 2 * n_layers * n_kv_heads * d_head * bytes_per_element bytes (keys and values). "
                "Multiply by the number of cached tokens: n_tokens without a window, min(n_tokens, window) with one "
                "(a context shorter than the window is cached whole).")
def check_cache_bytes(fn):
    """fn(n_layers, n_kv_heads, d_head, n_tokens, bytes_per_element, window) -> bytes of the whole KV cache.

    Tried on 6 models and contexts (MHA, GQA, MQA; fp16 and fp32), 3 of them with a 4,096-token window, one shorter
    than it; compared with 2 x n_layers x n_kv_heads x d_head x bytes x min(n_tokens, window).
    """
    # the smallest model and context (n_layers x n_kv_heads x d_head x bytes x n_tokens) first
    cases = [(6, 1, 128, 8192, 4, None), (32, 8, 128, 1000, 2, 4096), (32, 8, 128, 4096, 2, None),
             (80, 8, 128, 4096, 2, 4096), (32, 32, 128, 4096, 2, None), (32, 8, 128, 32_768, 2, 4096)]
    for n_layers, g, d_head, n_tokens, b, window in cases:
        cached = n_tokens if window is None else min(n_tokens, window)
        expected = 2 * n_layers * g * d_head * b * cached
        got = _call(fn, (n_layers, g, d_head, n_tokens, b, window), "cache_bytes")
        if got != expected:
            raise CheckFailed(f"n_layers={n_layers}, n_kv_heads={g}, d_head={d_head}, n_tokens={n_tokens:,}, "
                              f"bytes_per_element={b}, window={window}: expected {expected:,} bytes, got {got!r}"
                              "\nHint: a window caps the number of cached tokens; it does not change a shorter context")
    print(f"✓ cache_bytes is right for {len(cases)} cases, with and without a sliding window.")


@_exercise("memory_bound_seconds",
           task="return the memory bound in seconds (a float): the least time that one decode step of one layer's "
                "attention can take on a machine that reads `bandwidth` bytes per second, counting only the reading "
                "of that layer's K/V cache of S tokens (n_kv_heads heads of size d_head, bytes_per_element bytes "
                "each).",
           hint="The step must read every cached key and value once: 2 * n_kv_heads * S * d_head * "
                "bytes_per_element bytes. At `bandwidth` bytes per second that takes bytes / bandwidth seconds. "
                "(The roofline's other bound, FLOPs / compute rate, is not asked for here.)")
def check_memory_bound_seconds(fn):
    """fn(n_kv_heads, S, d_head, bytes_per_element, bandwidth) -> the memory bound of one decode step's attention.

    Tried on 4 caches and bandwidths (n_kv_heads = 8, 1, 4, 2; 20 GB/s to 1 TB/s, and a tiny one at 1 B/s);
    compared with 2 x n_kv_heads x S x d_head x bytes / bandwidth, to a relative 1e-9.
    """
    # the smallest cache first
    for g, S, d, b, bandwidth in [(2, 7, 3, 4, 1.0), (4, 1000, 64, 2, 1e12), (1, 16_384, 128, 4, 20e9),
                                  (8, 16_384, 128, 4, 20e9)]:
        expected = 2 * g * S * d * b / bandwidth
        got = _call(fn, (g, S, d, b, bandwidth), "memory_bound_seconds")
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9 * expected:
            raise CheckFailed(f"n_kv_heads={g}, S={S:,}, d_head={d}, bytes_per_element={b}, bandwidth={bandwidth:g} "
                              f"B/s: expected {expected:.6g} s, got {got!r}")
    print("✓ memory_bound_seconds is right for 4 cases.")


def _pareto(points):
    return sorted(p for p in points if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points))


@_exercise("pareto_front",
           task="given a list of (bytes, loss) points, return the list of the points that no other point beats, "
                "sorted by bytes: a point is beaten when another point is no worse in both (bytes and loss no "
                "larger) and strictly better in at least one.",
           hint="For each point p, look for a point q != p with q[0] <= p[0] and q[1] <= p[1]; keep p if there is "
                "none (any() over the points), then sort what is kept. A faster way: sort by (bytes, loss) and walk "
                "the list, keeping a point only when its loss is below every loss kept so far.")
def check_pareto_front(fn):
    """fn(points: list of (bytes, loss)) -> the points no other point beats on both, sorted by bytes.

    Tried on 4 sets of (bytes, loss) points: unsorted, with ties in bytes, a single point, and one where the
    largest cache has the lowest loss; compared with a brute-force front that drops every dominated point.
    """
    cases = [[(100, 1.0)],
             [(512, 0.01), (256, 0.03), (128, 1.9), (64, 2.7)],
             [(64, 0.5), (128, 0.6), (256, 0.7), (512, 0.01)],
             [(512, 0.01), (256, 0.5), (256, 0.03), (128, 0.04), (64, 2.7), (64, 3.0)]]  # the fewest points first
    for points in cases:
        expected = _pareto(points)
        got = _call(fn, (list(points),), "pareto_front")
        try:
            same = [tuple(p) for p in got] == expected
        except TypeError:  # None, a number, points that are not pairs
            same = False
        if not same:
            raise CheckFailed(f"pareto_front on points {points}: expected the front {expected}, got {got!r}")
    print(f"✓ pareto_front is right for {len(cases)} sets of points.")
