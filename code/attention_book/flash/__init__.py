"""FlashAttention's idea on a CPU, in plain PyTorch (chapter 13): exact attention computed block by block.

- ``online_softmax``: softmax over the last dimension with a running maximum and a running sum, block by block.
- ``tiled_attention``: attention that loops over key/value blocks and never holds the (L, S) weights.
- ``split_kv_decode``: one decode query against a long cache, in chunks attended independently and merged by
  log-sum-exp (Flash-Decoding's split), with ``merge_partials`` as the merge.
"""
from .online_softmax import online_softmax, running_update
from .split_kv_decode import attend_chunks, merge_partials, split_kv_decode
from .tiled_attention import tiled_attention

__all__ = ["attend_chunks", "merge_partials", "online_softmax", "running_update", "split_kv_decode",
           "tiled_attention"]
