"""Automatic checks for the chapters' exercises, one module per chapter.

Each check calls the learner's function on several seeded random inputs, smallest first, and compares the result
with the package's own implementation (or PyTorch's). On a mismatch it raises ``CheckFailed`` saying which input it
tried, what it expected and what came back, and names the likely mistake where it recognises one; on an unwritten
stub it says what the function must return, not how. ``hint(name)`` prints how, for the exercise whose function is
called ``name``: ``checks.hint("stable_softmax")``.
"""
from ._compare import CheckFailed, hint
from .cache_diet import check_local_global_bytes, check_quantize_keys, check_ring_slot
from .flash import check_largest_block_k, check_merge_two, check_update_max_and_sum
from .grouped_query import check_folded_gqa, check_kv_head_of, check_repeat_kv
from .kv_cache import check_decode_with_cache, check_kv_bytes_per_token, check_max_context
from .latent_attention import check_absorb_query, check_decoupled_rope_key, check_latent_cache_bytes
from .multi_head import check_merge_heads, check_param_count, check_split_heads, check_to_torch_mha
from .mha_to_gqa import check_converted_attention, check_group_members, check_pool_projection
from .multi_query import check_mqa_attention, check_mqa_param_count, check_tokens_per_second_bound
from .real_heads import (check_attention_entropy, check_gqa_similarity, check_mean_pool,
                         check_next_token_score)
from .real_llm import check_perplexity, check_rms_norm, check_roofline_tokens_per_s, check_swiglu
from .rope import check_next_positions, check_rotate_pairs, check_to_halves_rows
from .self_attention import check_self_attention, check_sinusoidal, check_weights_bytes
from .single_head import check_attention, check_causal_mask, check_stable_softmax
from .tradeoffs import check_cache_bytes, check_memory_bound_seconds, check_pareto_front
from .what_heads_learn import check_ablation, check_induction_score, check_previous_token_score

__all__ = [
    "CheckFailed", "hint",
    "check_attention", "check_causal_mask", "check_stable_softmax",
    "check_self_attention", "check_sinusoidal", "check_weights_bytes",
    "check_merge_heads", "check_param_count", "check_split_heads", "check_to_torch_mha",
    "check_ablation", "check_induction_score", "check_previous_token_score",
    "check_attention_entropy", "check_gqa_similarity", "check_mean_pool", "check_next_token_score",
    "check_decode_with_cache", "check_kv_bytes_per_token", "check_max_context",
    "check_mqa_attention", "check_mqa_param_count", "check_tokens_per_second_bound",
    "check_folded_gqa", "check_kv_head_of", "check_repeat_kv",
    "check_converted_attention", "check_group_members", "check_pool_projection",
    "check_cache_bytes", "check_memory_bound_seconds", "check_pareto_front",
    "check_rotate_pairs", "check_to_halves_rows", "check_next_positions",
    "check_rms_norm", "check_swiglu", "check_roofline_tokens_per_s", "check_perplexity",
    "check_latent_cache_bytes", "check_absorb_query", "check_decoupled_rope_key",
    "check_update_max_and_sum", "check_merge_two", "check_largest_block_k",
    "check_ring_slot", "check_quantize_keys", "check_local_global_bytes",
]
