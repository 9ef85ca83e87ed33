"""Checks for chapter 10's exercises: a cache with a sliding window, the roofline time, the Pareto front."""
from ._compare import CheckFailed, _call


def check_cache_bytes(fn):
    """fn(n_layers, n_kv_heads, d_head, n_tokens, bytes_per_element, window) -> bytes of the whole KV cache.

    Tried on 6 models and contexts (MHA, GQA, MQA; fp16 and fp32), 3 of them with a 4,096-token window, one shorter
    than it; compared with 2 x n_layers x n_kv_heads x d_head x bytes x min(n_tokens, window).
    """
    task = ("2 x n_layers x n_kv_heads x d_head x bytes_per_element per cached token; with a window, "
            "only the last `window` tokens are cached.")
    cases = [(32, 32, 128, 4096, 2, None), (32, 8, 128, 4096, 2, None), (32, 8, 128, 32_768, 2, 4096),
             (32, 8, 128, 1000, 2, 4096), (6, 1, 128, 8192, 4, None), (80, 8, 128, 4096, 2, 4096)]
    for n_layers, g, d_head, n_tokens, b, window in cases:
        cached = n_tokens if window is None else min(n_tokens, window)
        expected = 2 * n_layers * g * d_head * b * cached
        got = _call(fn, (n_layers, g, d_head, n_tokens, b, window), task)
        if got != expected:
            raise CheckFailed(f"n_layers={n_layers}, n_kv_heads={g}, d_head={d_head}, n_tokens={n_tokens:,}, "
                              f"bytes_per_element={b}, window={window}: expected {expected:,} bytes, got {got!r}"
                              "\nHint: a window caps the number of cached tokens; it does not change a shorter context")
    print(f"✓ cache_bytes is right for {len(cases)} cases, with and without a sliding window.")


def check_roofline_seconds(fn):
    """fn(n_kv_heads, S, d_head, bytes_per_element, bandwidth) -> the fastest one decode step's attention can be.

    Tried on 4 caches and bandwidths (n_kv_heads = 8, 1, 4, 2; 20 GB/s to 1 TB/s, and a tiny one at 1 B/s);
    compared with 2 x n_kv_heads x S x d_head x bytes / bandwidth, to a relative 1e-9.
    """
    task = "the bytes of K and V a step must read (2 x n_kv_heads x S x d_head x bytes), divided by the bandwidth."
    for g, S, d, b, bandwidth in [(8, 16_384, 128, 4, 20e9), (1, 16_384, 128, 4, 20e9), (4, 1000, 64, 2, 1e12),
                                  (2, 7, 3, 4, 1.0)]:
        expected = 2 * g * S * d * b / bandwidth
        got = _call(fn, (g, S, d, b, bandwidth), task)
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9 * expected:
            raise CheckFailed(f"n_kv_heads={g}, S={S:,}, d_head={d}, bytes_per_element={b}, bandwidth={bandwidth:g} "
                              f"B/s: expected {expected:.6g} s, got {got!r}")
    print("✓ roofline_seconds is right for 4 cases.")


def _pareto(points):
    return sorted(p for p in points if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points))


def check_pareto_front(fn):
    """fn(points: list of (bytes, loss)) -> the points no other point beats on both, sorted by bytes.

    Tried on 4 sets of (bytes, loss) points: unsorted, with ties in bytes, a single point, and one where the
    largest cache has the lowest loss; compared with a brute-force front that drops every dominated point.
    """
    task = "keep a point unless another point has fewer or equal bytes and a lower or equal loss (and differs)."
    cases = [[(512, 0.01), (256, 0.03), (128, 1.9), (64, 2.7)],
             [(512, 0.01), (256, 0.5), (256, 0.03), (128, 0.04), (64, 2.7), (64, 3.0)],
             [(100, 1.0)],
             [(64, 0.5), (128, 0.6), (256, 0.7), (512, 0.01)]]
    for points in cases:
        expected = _pareto(points)
        got = _call(fn, (list(points),), task)
        try:
            same = [tuple(p) for p in got] == expected
        except TypeError:  # None, a number, points that are not pairs
            same = False
        if not same:
            raise CheckFailed(f"pareto_front on points {points}: expected the front {expected}, got {got!r}")
    print(f"✓ pareto_front is right for {len(cases)} sets of points.")
