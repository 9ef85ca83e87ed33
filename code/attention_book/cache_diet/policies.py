"""Cache policies for a whole decoder: callables ``new_caches(batch_size, max_len)`` that return one cache per layer,
as ``llama.variants.token_losses`` and ``perplexity`` take them (chapter 15, ``benchmarks/cache_diet.py``).

Each builds its caches from the model's own sizes (``model.config``: n_layers, n_kv_heads, d_head), on the device
and in the dtype of its weights, so one call works for any ``LlamaDecoder``:

- ``ring_caches``: a ``RingKVCache`` of n_sinks + window slots in every layer (a sliding window);
- ``local_global_caches``: Gemma 3's pattern, ``layer_windows``' local layers as rings and every
  (local_per_global + 1)-th layer a full ``KVCache``;
- ``int8_caches``: an ``Int8KVCache`` in every layer.
"""
from .local_global import layer_windows
from .quantized_cache import Int8KVCache
from .ring_cache import RingKVCache


def _sizes(model):
    config, weight = model.config, next(model.parameters())
    return config.n_layers, config.n_kv_heads, config.d_head, {"dtype": weight.dtype, "device": weight.device}


def ring_caches(model, window, n_sinks=0):
    """``new_caches(batch_size, max_len)`` -> one ``RingKVCache(batch_size, g, d_head, window, n_sinks)`` per layer
    (max_len is not needed: a ring's size is fixed)."""
    n_layers, g, d_head, like = _sizes(model)
    RingKVCache(1, g, d_head, window, n_sinks, **like)  # checks window and n_sinks now, not at the first call
    return lambda batch_size, max_len: [RingKVCache(batch_size, g, d_head, window, n_sinks, **like)
                                        for _ in range(n_layers)]


def local_global_caches(model, window, local_per_global=5, n_sinks=0):
    """``new_caches(batch_size, max_len)`` -> per layer, as ``layer_windows(n_layers, local_per_global, window)``
    says: a ``RingKVCache`` of n_sinks + window slots for a local layer, the layer's full ``KVCache`` of max_len
    tokens for a global one."""
    n_layers, g, d_head, like = _sizes(model)
    windows = layer_windows(n_layers, local_per_global, window)
    RingKVCache(1, g, d_head, window, n_sinks, **like)  # checks n_sinks now
    return lambda batch_size, max_len: [
        model.layers[i].attention.new_cache(batch_size, max_len, **like) if w is None
        else RingKVCache(batch_size, g, d_head, w, n_sinks, **like) for i, w in enumerate(windows)]


def int8_caches(model, group_size=128):
    """``new_caches(batch_size, max_len)`` -> one ``Int8KVCache(batch_size, g, d_head, max_len, group_size)`` per
    layer."""
    n_layers, g, d_head, like = _sizes(model)
    Int8KVCache(1, g, d_head, 1, group_size, **like)  # checks group_size now
    return lambda batch_size, max_len: [Int8KVCache(batch_size, g, d_head, max_len, group_size, **like)
                                        for _ in range(n_layers)]
