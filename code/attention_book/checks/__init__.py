"""Automatic checks for the chapters' exercises, one module per chapter.

Each check calls the learner's function on several seeded random inputs, smallest first, and compares the result
with the package's own implementation (or PyTorch's). On a mismatch it raises ``CheckFailed`` saying which input it
tried, what it expected and what came back, and names the likely mistake where it recognises one; on an unwritten
stub it says what the function must return, not how. ``hint(name)`` prints how, for the exercise whose function is
called ``name``: ``checks.hint("stable_softmax")``.
"""
from ._compare import CheckFailed, hint
from .capstone import (check_attention_sublayer, check_cache_append, check_decoder_block, check_decoder_logits,
                       check_from_heads, check_greedy_generate, check_grouped_causal_attention,
                       check_masked_attention, check_rms_normalise, check_rope_halves, check_swiglu_mlp,
                       check_to_heads, same_tokens_as_package)
from .cache_diet import check_local_global_bytes, check_quantize_keys, check_ring_append
from .flash import check_largest_block_k, check_merge_two, check_tiled_one_head
from .grouped_query import check_folded_decode_step, check_folded_row_owner, check_repeat_kv
from .kv_cache import check_cached_decode, check_kv_bytes_per_token, check_max_context
from .latent_attention import check_absorbed_decode_step, check_decoupled_rope_key, check_latent_tokens_in
from .multi_head import check_multi_head, check_param_count, check_to_torch_mha
from .mha_to_gqa import check_convert_torch_mha, check_pool_projection, check_weighted_pool_projection
from .multi_query import check_mqa_attention, check_mqa_forward, check_mqa_param_count, check_tokens_per_second_bound
from .real_heads import (check_attention_entropy, check_encoder_layer, check_gqa_similarity, check_mean_pool,
                         check_next_token_score)
from .real_llm import check_perplexity, check_q4_1_matvec, check_quantize_q4_1, check_roofline_tokens_per_s
from .rope import check_next_positions, check_qkv_to_pairs, check_rope_left_padded
from .self_attention import check_self_attention_in_blocks, check_sinusoidal_at, check_weights_bytes
from .single_head import check_attention_with_masks, check_causal_mask, check_stable_softmax
from .tradeoffs import check_decode_step_roofline, check_largest_batch, check_pareto_front
from .what_heads_learn import check_group_ablation, check_induction_score, check_previous_token_score

__all__ = [
    "CheckFailed", "hint",
    "check_attention_with_masks", "check_causal_mask", "check_stable_softmax",
    "check_self_attention_in_blocks", "check_sinusoidal_at", "check_weights_bytes",
    "check_multi_head", "check_param_count", "check_to_torch_mha",
    "check_group_ablation", "check_induction_score", "check_previous_token_score",
    "check_attention_entropy", "check_encoder_layer", "check_gqa_similarity", "check_mean_pool",
    "check_next_token_score",
    "check_cached_decode", "check_kv_bytes_per_token", "check_max_context",
    "check_mqa_attention", "check_mqa_param_count", "check_tokens_per_second_bound", "check_mqa_forward",
    "check_folded_decode_step", "check_folded_row_owner", "check_repeat_kv",
    "check_convert_torch_mha", "check_pool_projection", "check_weighted_pool_projection",
    "check_decode_step_roofline", "check_largest_batch", "check_pareto_front",
    "check_next_positions", "check_rope_left_padded", "check_qkv_to_pairs",
    "check_q4_1_matvec", "check_quantize_q4_1", "check_roofline_tokens_per_s", "check_perplexity",
    "check_latent_tokens_in", "check_absorbed_decode_step", "check_decoupled_rope_key",
    "check_tiled_one_head", "check_merge_two", "check_largest_block_k",
    "check_ring_append", "check_quantize_keys", "check_local_global_bytes",
    "check_masked_attention", "check_to_heads", "check_from_heads", "check_cache_append",
    "check_grouped_causal_attention", "check_rope_halves", "check_rms_normalise", "check_swiglu_mlp",
    "check_attention_sublayer", "check_decoder_block", "check_decoder_logits", "check_greedy_generate",
    "same_tokens_as_package",
]
