"""Multi-head latent attention (MLA; DeepSeek-V2, section 2.1): cache one small latent per token, not K and V.

- ``latent_cache``: the cache, one row [c_KV ; k^R] of d_c + d_h^R numbers per token per layer.
- ``naive``: attention that rebuilds every head's keys and values from the cached latents at every step.
- ``absorbed``: the same attention with W_UK folded into the query and W_UV applied after it: MQA over the latents.
- ``layer``: the attention layer, ``MultiHeadLatentAttention``, which runs either path.
- ``shapes``: the checks of their inputs' shapes.
- ``cost``: the FLOPs and bytes of one decode step of each path, for the roofline.
- ``reference``: copy a layer's weights into transformers' ``DeepseekV3Attention`` (needs transformers).
"""
from .absorbed import absorbed_attention
from .cost import decode_step_cost
from .latent_cache import LatentCache
from .layer import MultiHeadLatentAttention
from .naive import naive_attention

__all__ = ["LatentCache", "MultiHeadLatentAttention", "absorbed_attention", "decode_step_cost", "naive_attention"]
