"""Attention sizes of well-known models, and what their KV caches take.

Numbers from the models' papers and released configuration files, as checked in the book's facts file:
Llama 2 (Touvron et al. 2023, Table 1), the Llama 3 Herd of Models (2024, Table 3), Mistral 7B (Jiang et
al. 2023, Table 1), Gemma's and Falcon's released configurations, GPT-2's ``src/model.py``, GPT-3 (Brown et
al. 2020, Table 2.1), PaLM (Chowdhery et al. 2022, Table 1).
"""
from dataclasses import dataclass

from ..kv_cache import kv_cache_bytes_per_token
from ..validation import require_positive


@dataclass(frozen=True)
class AttentionConfig:
    """The sizes that decide a model's KV cache. d_head comes from the config, not always d_model / n_heads."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int

    @property
    def variant(self):
        return "MHA" if self.n_kv_heads == self.n_heads else "MQA" if self.n_kv_heads == 1 else "GQA"

    def cache_bytes_per_token(self, bytes_per_element=2):
        """Bytes of K and V one token takes in the cache of the whole model (default fp16)."""
        return kv_cache_bytes_per_token(self.n_layers, self.n_kv_heads, self.d_head, bytes_per_element)


MODELS = [
    AttentionConfig("GPT-2 small", 12, 768, 12, 12, 64),
    AttentionConfig("GPT-3 175B", 96, 12288, 96, 96, 128),
    AttentionConfig("Llama 2 7B", 32, 4096, 32, 32, 128),
    AttentionConfig("Llama 2 13B", 40, 5120, 40, 40, 128),
    AttentionConfig("Llama 2 70B", 80, 8192, 64, 8, 128),
    AttentionConfig("Llama 3 8B", 32, 4096, 32, 8, 128),
    AttentionConfig("Llama 3 70B", 80, 8192, 64, 8, 128),
    AttentionConfig("Mistral 7B", 32, 4096, 32, 8, 128),
    AttentionConfig("Mixtral 8x7B", 32, 4096, 32, 8, 128),
    AttentionConfig("Qwen2 7B", 28, 3584, 28, 4, 128),
    AttentionConfig("Gemma 2B", 18, 2048, 8, 1, 256),
    AttentionConfig("Gemma 7B", 28, 3072, 16, 16, 256),
    AttentionConfig("Gemma 2 9B", 42, 3584, 16, 8, 256),
    AttentionConfig("Falcon 7B", 32, 4544, 71, 1, 64),
    AttentionConfig("Falcon 40B", 60, 8192, 128, 8, 64),
    AttentionConfig("StarCoder 15.5B", 40, 6144, 48, 1, 128),
    AttentionConfig("PaLM 540B", 118, 18432, 48, 1, 256),
]


def find_model(model) -> AttentionConfig:
    """``model`` itself if it is an AttentionConfig, else the entry of MODELS with that name (ValueError naming
    the known ones otherwise)."""
    if isinstance(model, AttentionConfig):
        return model
    names = [m.name for m in MODELS]
    if model not in names:
        raise ValueError(f"model={model!r} is not in the package's table: use one of {', '.join(names)}, "
                         "or an AttentionConfig with your own sizes")
    return MODELS[names.index(model)]


def kv_cache_table(context=4096, bytes_per_element=2):
    """One row per model: name, variant, K/V heads, cache per token, cache at ``context`` tokens, and the cache
    the same model would need with one K/V head per query head (MHA), all in bytes."""
    rows = []
    for m in MODELS:
        per_token = m.cache_bytes_per_token(bytes_per_element)
        as_mha = kv_cache_bytes_per_token(m.n_layers, m.n_heads, m.d_head, bytes_per_element)
        rows.append({"model": m.name, "variant": m.variant, "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads,
                     "per_token": per_token, "at_context": per_token * context, "as_mha_at_context": as_mha * context})
    return rows


@dataclass(frozen=True)
class LatentAttentionConfig:
    """The sizes of a model with multi-head latent attention (MLA, DeepSeek-V2 section 2.1), named as in the
    released ``config.json`` files (DeepSeek-V2-Chat's config.json and DeepSeek's inference/configs/config_236B.json
    and config_671B.json for DeepSeek-V2 and V3; Kimi K2's README for its layers, width and 64 heads, and copies
    of its config for the latent sizes, which equal DeepSeek-V3's). Each layer caches one latent c_KV of width
    ``kv_lora_rank`` (d_c) and one RoPE key of width ``qk_rope_head_dim`` (d_h^R) per token, shared by all
    ``n_heads`` heads."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int

    variant = "MLA"

    @property
    def cache_numbers_per_token_per_layer(self):
        """d_c + d_h^R: the numbers one token adds to one layer's cache."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def cache_bytes_per_token(self, bytes_per_element=2):
        """Bytes one token takes in the cache of the whole model (default fp16)."""
        require_positive(bytes_per_element=bytes_per_element)
        return self.n_layers * self.cache_numbers_per_token_per_layer * bytes_per_element

    def as_mha_bytes_per_token(self, bytes_per_element=2):
        """What the same heads would cache per token as MHA in the paper's comparison (DeepSeek-V2, Table 1):
        2 n_h d_h numbers per layer, with d_h = qk_nope_head_dim."""
        require_positive(bytes_per_element=bytes_per_element)
        return self.n_layers * 2 * self.n_heads * self.qk_nope_head_dim * bytes_per_element

    @property
    def equivalent_gqa_groups(self):
        """The g of a GQA cache of the same size with heads of width qk_nope_head_dim: (d_c + d_h^R) / (2 d_h),
        2.25 for DeepSeek-V2 (the paper's Table 1)."""
        return self.cache_numbers_per_token_per_layer / (2 * self.qk_nope_head_dim)


LATENT_MODELS = [
    LatentAttentionConfig("DeepSeek-V2", 60, 5120, 128, 512, 64, 128, 128, 1536),
    LatentAttentionConfig("DeepSeek-V3", 61, 7168, 128, 512, 64, 128, 128, 1536),
    LatentAttentionConfig("Kimi K2", 61, 7168, 64, 512, 64, 128, 128, 1536),
]
