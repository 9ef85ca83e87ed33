"""The cache diet (chapter 15): four ways deployed models cut the KV cache further, as cache policies for the book's
``GroupedQueryAttention`` and ``KVCache``. One idea per module:

- ``window``: ``window_mask``, the sliding-window (and attention-sink) mask for a whole sequence in one pass;
- ``ring_cache``: ``RingKVCache``, a ring buffer of n_sinks + window slots whose bytes stay bounded;
- ``quantized_cache``: KIVI-style int8 (keys per channel, values per token) and ``Int8KVCache``;
- ``local_global``: Gemma 3's pattern of local (windowed) and global layers, and its cache bytes;
- ``policies``: ``ring_caches``, ``local_global_caches`` and ``int8_caches``, one cache per layer of a decoder;
- ``pareto``: ``pareto_front_names``, the techniques that no other one beats on both cache bytes and perplexity.

Keys are cached after RoPE, at their absolute positions in the text, as everywhere in the book.
"""
from .local_global import cache_bytes_at, cache_bytes_per_token_at, cached_tokens_at, layer_windows
from .pareto import pareto_front_names
from .policies import int8_caches, local_global_caches, ring_caches
from .quantized_cache import (Int8KVCache, Int8Tensor, dequantize, int8_decode_attention, quantize_int8,
                              quantize_keys_per_channel, quantize_values_per_token)
from .ring_cache import RingKVCache
from .window import window_mask

__all__ = ["Int8KVCache", "Int8Tensor", "RingKVCache", "cache_bytes_at", "cache_bytes_per_token_at",
           "cached_tokens_at", "dequantize", "int8_caches", "int8_decode_attention", "layer_windows",
           "local_global_caches", "pareto_front_names", "quantize_int8", "quantize_keys_per_channel",
           "quantize_values_per_token", "ring_caches", "window_mask"]
