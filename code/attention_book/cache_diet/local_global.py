"""Local and global layers, as in Gemma 3 (five local layers per global one, local span 1,024 tokens): the layer
pattern, and what the cache of such a stack holds at a given context.

A local layer attends within a sliding window, so its cache stops growing at ``window`` tokens; a global layer
attends to everything, so its cache grows with the context. Sizes: g = n_kv_heads, d_head, one sequence.
"""
from ..validation import require_positive


def _require_non_negative(**values):
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}={value!r} must be a non-negative integer")


def layer_windows(n_layers, local_per_global=5, window=1024):
    """Each layer's window, or None for a global layer: ``local_per_global`` local layers, then one global one,
    repeated (layers 0-4 local and 5 global for the default). local_per_global=0 makes every layer global.

    Returns a list of n_layers entries, each ``window`` or None.
    """
    require_positive(n_layers=n_layers, window=window)
    _require_non_negative(local_per_global=local_per_global)
    period = local_per_global + 1
    return [None if (i + 1) % period == 0 else window for i in range(n_layers)]


def cached_tokens_at(context, window, n_sinks=0):
    """Tokens one layer caches after ``context`` tokens: all of them for a global layer (window None), at most
    n_sinks + window for a local one."""
    require_positive(context=context)
    _require_non_negative(n_sinks=n_sinks)
    if window is None:
        return context
    require_positive(window=window)
    return min(context, n_sinks + window)


def cache_bytes_at(context, windows, n_kv_heads, d_head, bytes_per_element=2, n_sinks=0):
    """Bytes of K and V cached for one sequence of ``context`` tokens by a stack whose layers have ``windows``
    (a list like ``layer_windows``'s: a window, or None for global): the sum over layers of
    2 (K and V) x n_kv_heads x d_head x bytes_per_element x ``cached_tokens_at(context, window, n_sinks)``."""
    if not isinstance(windows, (list, tuple)) or not windows:
        raise ValueError(f"windows must be a non-empty list of windows (None for a global layer), got {windows!r}")
    require_positive(n_kv_heads=n_kv_heads, d_head=d_head, bytes_per_element=bytes_per_element)
    per_token = 2 * n_kv_heads * d_head * bytes_per_element
    return sum(per_token * cached_tokens_at(context, window, n_sinks) for window in windows)


def cache_bytes_per_token_at(context, windows, n_kv_heads, d_head, bytes_per_element=2, n_sinks=0):
    """``cache_bytes_at`` divided by the context: the bytes each token costs on average at that context. Equal to
    ``kv_cache_bytes_per_token`` while the context fits every window; it falls as the context grows past them."""
    return cache_bytes_at(context, windows, n_kv_heads, d_head, bytes_per_element, n_sinks) / context
