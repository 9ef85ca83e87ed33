"""attention_book: the code that the book *Attention, Head by Head* builds and runs.

Importing this package loads only torch and the attention library, the modules at this level. The subpackages
are imported only when you use them: ``bert`` (a real pretrained encoder; the ``real`` extra), ``llama`` (a real
GQA decoder read from a GGUF file; the ``llm`` extra), ``flash`` (tiled attention and split-K decoding), ``mla``
(multi-head latent attention), ``cache_diet`` (sliding-window, attention-sink and int8 caches, and cross-layer
sharing), ``experiments`` (what the chapters measure with), ``figures`` (matplotlib) and ``checks`` (the exercises'
checks).
"""
from .attention_layer import GroupedQueryAttention
from .generation import generate
from .kv_cache import KVCache
from .masks import causal_mask, real_key_mask
from .multi_head_attention import MultiHeadAttention
from .positions import sinusoidal_positions
from .sdpa import scaled_dot_product_attention
from .self_attention import SelfAttentionHead
from .torch_interop import from_torch_mha, to_torch_mha

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "MultiHeadAttention",
    "SelfAttentionHead",
    "causal_mask",
    "from_torch_mha",
    "generate",
    "real_key_mask",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "to_torch_mha",
]
__version__ = "0.1.0"
