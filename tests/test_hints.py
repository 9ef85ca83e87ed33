"""Exercises without spoilers: a stub is told what its function must return, never how; the method is a hint that
the learner asks for with checks.hint(name); a wrong answer that makes a common mistake is told which one."""
import ast
import math
import re

import attention_book.checks as checks
import nbformat
import pytest
import torch
from attention_book.checks import CheckFailed
from attention_book.checks._compare import _see_hint
from attention_book.masks import causal_mask
from conftest import ROOT, chapter_paths

ALL_CHECKS = [getattr(checks, name) for name in checks.__all__ if name.startswith("check_")]

# What a stub's message must not say, per check: the key expressions of the solution. Compared case-insensitively,
# a fragment that starts or ends with a letter as a whole word there ("max" is not found in "softmax").
FORBIDDEN = {
    "check_stable_softmax": ["maximum", "max", "subtract", "shift"],
    "check_causal_mask": ["tril", "triu", "arange", "S - L", "<="],
    "check_attention": ["softmax", "masked_fill", "-inf", "√d", "@", "transpose", "~mask"],
    "check_self_attention": ["x @ W_q", "@", "softmax", "scaled_dot_product_attention("],
    "check_sinusoidal": ["10000", "sin(", "cos(", "2i / d_model", "arange", "0::2"],
    "check_weights_bytes": ["B * h * L * S", "finfo", "element_size", "bits", "multiply"],
    "check_split_heads": ["view", "transpose", "reshape", "permute", "swap", "move", "slices"],
    "check_merge_heads": ["transpose", "reshape", "view", "permute", "swap", "move"],
    "check_param_count": ["Q, K, V and O", "add up", "n_kv_heads * d_head", "d_model * d_model", "2 *"],
    "check_to_torch_mha": ["in_proj_weight", "in_proj_bias", "copy", "stack", "torch.cat", "out_proj"],
    "check_previous_token_score": ["diagonal", "arange", "offset", "weights[:, :, i, i - 1]", "mean(dim"],
    "check_induction_score": ["tril", "tokens[:, :, None]", "shift", "j + 1", "any("],
    "check_ablation": ["head_mask", "cross_entropy", "minus", "flatten", "no_grad"],
    "check_mean_pool": ["sum(", "[..., None]", "float()", "multiply", "divide"],
    "check_next_token_score": ["diagonal", "offset", "is_real[:, :-1]", "weights[b, :, i, i + 1]", "&"],
    "check_attention_entropy": ["log w", "-sum", "torch.where", "clamp", "nan_to_num", "0 log 0"],
    "check_gqa_similarity": ["convert_to_gqa(", "sentence_embeddings", "cosine_similarity(", "F."],
    "check_kv_bytes_per_token": ["2 *", "2 x", "factor", "keys and values", "times"],
    "check_decode_with_cache": ["new_cache", "cache=cache", "is_causal", "x[:, t:t + 1]", "torch.cat"],
    "check_max_context": ["//", "divide", "rounding", "kv_bytes_per_token", "2 *"],
    "check_mqa_param_count": ["d_model x d_head", "W_k", "d_model // n_heads", "add the biases"],
    "check_mqa_attention": ["broadcast", "softmax", "transpose", "expand", "@", "√d"],
    "check_tokens_per_second_bound": ["/ (", "weight bytes +", "batch x bandwidth", "n_params x", "once"],
    "check_kv_head_of": ["//", "group", "consecutive", "block", "divide"],
    "check_repeat_kv": ["repeat_interleave(", "in a row", "expand", "n_heads // g", "[0, 0, 1, 1]"],
    "check_folded_gqa": ["reshape", "(h // g) * L", "scaled_dot_product_attention", "fold", "stack"],
    "check_group_members": ["j * (", "range(", "contiguous", "n_heads // n_kv_heads", "consecutive"],
    "check_pool_projection": ["view", "unflatten", "reshape", "mean(dim", "second dimension"],
    "check_converted_attention": ["unflatten", "i // (", "enable_gqa", "scaled_dot_product_attention", "average k"],
    "check_cache_bytes": ["2 x", "2 *", "min(", "multiply"],
    "check_memory_bound_seconds": ["divided by", "2 x", "2 *", "/ bandwidth"],
    "check_pareto_front": ["sorted(", "so far", "any(", "walk", "q[0]"],
    "check_rotate_pairs": ["cos", "sin", "0::2", "1::2", "stack", "view_as_complex", "complex"],
    "check_to_halves_rows": ["reshape", "view", "halves_order", "0::2", "argsort", "even rows"],
    "check_next_positions": ["arange", "cache_length +", "range(", "right after"],
    "check_rms_norm": ["sqrt(", "rsqrt", "mean(", "** 2", "pow("],
    "check_swiglu": ["F.silu(", "F.linear(", "@", ".T", "*"],
    "check_roofline_tokens_per_s": ["1 /", "1 over", "context *", "+ context", "/ bandwidth"],
    "check_perplexity": ["cross_entropy", "math.exp", "exp(", "log_softmax", "nll_loss"],
    "check_latent_cache_bytes": ["d_c + d_h^R", "+", "2 *", "2 x", "multiply"],
    "check_absorb_query": ["view", "reshape", "@", "transpose", "W_UK_iᵀ", "einsum"],
    "check_decoupled_rope_key": ["Rope(", "[:, None]", "w_kr.T", "@", "rotate("],
    "check_update_max_and_sum": ["exp(m - m_new)", "torch.maximum", "amax", "multiply", "rescale"],
    "check_merge_two": ["logaddexp", "logsumexp", "exp(lse_a - lse)", "share", "weights"],
    "check_largest_block_k": ["//", "2 * d_head", "block_q +", "divide", "round down"],
    "check_ring_slot": ["%", "modulo", "remainder", "position - n_sinks", "+ (position"],
    "check_quantize_keys": ["amin", "amax", "/ 255", "round(", "dim=0", "+ 128", "- 128 *"],
    "check_local_global_bytes": ["(i + 1) %", "min(", "2 *", "2 x", "sum("],
}


def gives_away(fragment, text):
    """Whether ``text`` contains ``fragment`` (case-insensitively; as a whole word where it starts or ends with one)."""
    pattern = (r"(?<!\w)" if fragment[0].isalnum() else "") + re.escape(fragment) + (
        r"(?!\w)" if fragment[-1].isalnum() else "")
    return re.search(pattern, text, re.IGNORECASE) is not None


def stub(*args):
    raise NotImplementedError("write your answer here")


def stub_message(check):
    with pytest.raises(CheckFailed) as error:
        check(stub)
    return str(error.value)


def exercises_in_the_book():
    """(check name, the name of the function the learner writes) for every check cell of every chapter."""
    pairs = []
    for path in chapter_paths():
        for cell in nbformat.read(path, as_version=4).cells:
            if "exercise-check" in cell.metadata.get("tags", []):
                pairs += re.findall(r"checks\.(check_\w+)\((\w+)", cell.source)
    return pairs


def test_every_check_has_a_table_of_forbidden_fragments():
    assert set(FORBIDDEN) == {check.__name__ for check in ALL_CHECKS}


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_a_stub_is_told_the_contract_not_the_method(check):
    message = stub_message(check)
    assert message.startswith("stub is not written yet: "), message  # named after the learner's function
    task = message.split("not written yet: ", 1)[1]
    pointer = f' (checks.hint("{check.exercise}") gives a hint)'
    assert task.endswith(pointer), message
    contract = task.removesuffix(pointer)
    assert len(contract) > 20, message
    for fragment in FORBIDDEN[check.__name__]:
        assert not gives_away(fragment, contract), f"{check.__name__}'s stub message gives away {fragment!r}"


def test_each_check_is_named_after_the_function_the_book_asks_for():
    pairs = exercises_in_the_book()
    assert {check for check, _ in pairs} == {check.__name__ for check in ALL_CHECKS}
    for check, written in pairs:
        assert getattr(checks, check).exercise == written, f"{check} is for {written}"


@pytest.mark.parametrize("name", sorted(written for _, written in exercises_in_the_book()))
def test_hint_prints_the_method_of_every_exercise(name, capsys):
    assert checks.hint(name) is None
    shown = capsys.readouterr().out
    assert shown.startswith(f"Hint for {name}: ") and len(shown) > 60, shown


def test_hint_takes_the_function_itself(capsys):
    def stable_softmax(x):
        raise NotImplementedError

    checks.hint(stable_softmax)
    assert capsys.readouterr().out.startswith("Hint for stable_softmax: ")


def test_hint_on_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="no exercise is called 'softmax'") as error:
        checks.hint("softmax")
    for _, written in exercises_in_the_book():
        assert written in str(error.value)


def test_hints_are_not_printed_by_default(capsys):
    with pytest.raises(CheckFailed):
        checks.check_stable_softmax(stub)
    assert capsys.readouterr().out == ""


# Wrong answers that make a common mistake: (check, the mistaken function, what the message must name).
def merge_without_transpose(x):
    B, h, L, d = x.shape
    return x.reshape(B, L, h * d)


def split_without_transpose(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)


def inverted_mask(L, S):
    return ~causal_mask(L, S)


def top_left_mask(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril()


def inverted_top_left_mask(L, S):
    return ~torch.ones(L, S, dtype=torch.bool).tril()


def attention_with_mask_not_inverted(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # fills where the query MAY attend
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def attention_unscaled(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def self_attention_unscaled(x, W_q, W_k, W_v):
    weights = torch.softmax((x @ W_q) @ (x @ W_k).transpose(-2, -1), dim=-1)
    return weights @ (x @ W_v), weights


def attention_softmax_over_queries(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)
    return weights @ v, weights


def naive_softmax(x):
    return x.exp() / x.exp().sum(dim=-1, keepdim=True)


def kv_head_round_robin(query_head, n_heads, n_kv_heads):
    return query_head % n_kv_heads


def repeat_kv_tiled(k, n_heads):
    return k.repeat(1, n_heads // k.shape[1], 1, 1)


def rms_norm_as_layer_norm(x, weight, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, eps=eps)


def swiglu_gating_the_wrong_projection(x, w_gate, w_up, w_down):
    F = torch.nn.functional
    return F.linear(F.linear(x, w_gate) * F.silu(F.linear(x, w_up)), w_down)


def roofline_without_the_cache(weight_bytes, cache_bytes_per_token, context, bandwidth):
    return bandwidth / weight_bytes


def perplexity_as_cross_entropy(logits, targets):
    return torch.nn.functional.cross_entropy(logits, targets).item()


def rotate_pairs_clockwise(x, angles):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() + b * angles.sin(), b * angles.cos() - a * angles.sin()), -1).flatten(-2)


def to_halves_rows_as_one_head(weight, n_heads):
    return torch.cat((weight[0::2], weight[1::2]))


def next_positions_from_zero(cache_length, n_new):
    return torch.arange(n_new)


def latent_cache_bytes_without_rope(n_layers, kv_lora_rank, qk_rope_head_dim, n_tokens, bytes_per_element):
    return n_layers * kv_lora_rank * n_tokens * bytes_per_element


def absorb_query_heads_interleaved(q_nope, w_uk):
    h, d_nope = q_nope.shape[1], q_nope.shape[3]
    return q_nope @ w_uk.view(d_nope, h, -1).transpose(0, 1)


def decoupled_rope_key_from_zero(x, w_kr, start):
    from attention_book.rope import Rope
    return Rope(w_kr.shape[0], layout="pairs")((x @ w_kr.T)[:, None], 0)[:, 0]


def update_without_rescaling(m, sum_exp, scores_block):
    m_new = torch.maximum(m, scores_block.amax(-1, keepdim=True))
    return m_new, sum_exp + torch.exp(scores_block - m_new.nan_to_num(neginf=0.0)).sum(-1, keepdim=True)


def merge_as_plain_average(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def merge_two_nan_when_both_masked(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


def largest_block_k_scores_only(budget_bytes, block_q, d_head, bytes_per_number):
    return budget_bytes // (block_q * bytes_per_number)


def ring_slot_without_sinks(position, window, n_sinks):
    return position % window


def quantize_keys_per_token(k):
    low, high = k.amin(-1, keepdim=True), k.amax(-1, keepdim=True)
    scale = (high - low) / 255
    return (torch.round((k - low) / scale) - 128).to(torch.int8), scale, low + 128 * scale


def local_global_bytes_whole_window(context, n_layers, local_per_global, window, n_kv_heads, d_head,
                                    bytes_per_element):
    per_token = 2 * n_kv_heads * d_head * bytes_per_element
    return sum(per_token * (context if (i + 1) % (local_per_global + 1) == 0 else window) for i in range(n_layers))


def local_global_bytes_keys_only(context, n_layers, local_per_global, window, n_kv_heads, d_head, bytes_per_element):
    per_token = n_kv_heads * d_head * bytes_per_element
    return sum(per_token * (context if (i + 1) % (local_per_global + 1) == 0 else min(context, window))
               for i in range(n_layers))


def kv_bytes_keys_only(n_layers, n_kv_heads, d_head, bytes_per_element):
    return n_layers * n_kv_heads * d_head * bytes_per_element


def kv_numbers_not_bytes(n_layers, n_kv_heads, d_head, bytes_per_element):
    return 2 * n_layers * n_kv_heads * d_head


def max_context_without_batch(memory_bytes, n_layers, n_kv_heads, d_head, bytes_per_element, batch):
    return memory_bytes // (2 * n_layers * n_kv_heads * d_head * bytes_per_element)


MISTAKES = [
    (checks.check_merge_heads, merge_without_transpose, "without moving the head dimension after L"),
    (checks.check_split_heads, split_without_transpose, "straight to (B, h, L, d_head)"),
    (checks.check_causal_mask, inverted_mask, "the mask is inverted: True must mean"),
    (checks.check_causal_mask, top_left_mask, "the mask is aligned top-left"),
    # wrong both ways: (1, 1), the smallest input, shows the polarity first
    (checks.check_causal_mask, inverted_top_left_mask, "the mask is inverted: True must mean"),
    (checks.check_attention, attention_with_mask_not_inverted, "the mask is used the wrong way round"),
    (checks.check_attention, attention_unscaled, "not scaled by 1/√d"),
    (checks.check_attention, attention_softmax_over_queries, "the softmax runs over the queries"),
    (checks.check_self_attention, self_attention_unscaled, "not scaled by 1/√d_head"),
    (checks.check_stable_softmax, naive_softmax, "exp overflows (to inf) or underflows (to 0)"),
    (checks.check_kv_head_of, kv_head_round_robin, "round-robin"),
    (checks.check_kv_bytes_per_token, kv_bytes_keys_only, "only keys or only values were counted"),
    (checks.check_kv_bytes_per_token, kv_numbers_not_bytes, "that counts numbers, not bytes"),
    (checks.check_max_context, max_context_without_batch, "the batch was left out"),
    (checks.check_repeat_kv, repeat_kv_tiled, "tiled, [0, 1, 0, 1]"),
    (checks.check_rotate_pairs, rotate_pairs_clockwise, "each pair turns clockwise"),
    (checks.check_to_halves_rows, to_halves_rows_as_one_head, "reordered as one big head"),
    (checks.check_next_positions, next_positions_from_zero, "the step starts again at position 0"),
    (checks.check_rms_norm, rms_norm_as_layer_norm, "that is LayerNorm"),
    (checks.check_swiglu, swiglu_gating_the_wrong_projection, "SiLU applied to the up projection"),
    (checks.check_roofline_tokens_per_s, roofline_without_the_cache, "the cache is read too"),
    (checks.check_perplexity, perplexity_as_cross_entropy, "returning the mean cross-entropy"),
    (checks.check_latent_cache_bytes, latent_cache_bytes_without_rope, "only c_KV was counted"),
    (checks.check_absorb_query, absorb_query_heads_interleaved, "split as d_nope blocks of h heads"),
    (checks.check_decoupled_rope_key, decoupled_rope_key_from_zero, "the positions start at 0"),
    (checks.check_update_max_and_sum, update_without_rescaling, "the old sum was not rescaled"),
    (checks.check_merge_two, merge_as_plain_average, "averaged with equal weights"),
    (checks.check_merge_two, merge_two_nan_when_both_masked, "both sets are fully masked"),
    (checks.check_largest_block_k, largest_block_k_scores_only, "only the tile of scores was counted"),
    (checks.check_ring_slot, ring_slot_without_sinks, "the sinks were forgotten"),
    (checks.check_quantize_keys, quantize_keys_per_token, "one scale per token (per row)"),
    (checks.check_local_global_bytes, local_global_bytes_whole_window, "local layers were charged the whole window"),
    (checks.check_local_global_bytes, local_global_bytes_keys_only, "K and V: each cached token costs 2"),
]


@pytest.mark.parametrize("check, mistaken, named", MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_a_common_mistake_is_named(check, mistaken, named):
    with pytest.raises(CheckFailed) as error:
        check(mistaken)
    message = str(error.value)
    assert f"Likely mistake: {named}" in message or ("Likely mistake: " in message and named in message), message


def test_a_mistake_is_shown_on_the_smallest_input_that_reveals_it():
    with pytest.raises(CheckFailed, match=r"merge_heads on x \(1, 8, 4, 1\)"):
        checks.check_merge_heads(merge_without_transpose)
    with pytest.raises(CheckFailed, match="your causal mask on L=1, S=1:"):
        checks.check_causal_mask(inverted_mask)
    with pytest.raises(CheckFailed, match="your causal mask on L=1, S=6:"):  # (1, 1) cannot tell the alignments apart
        checks.check_causal_mask(top_left_mask)


def test_an_unrecognised_wrong_answer_names_no_mistake():
    with pytest.raises(CheckFailed) as error:
        checks.check_merge_heads(lambda x: torch.zeros(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]))
    assert "Likely mistake" not in str(error.value) and "expected" in str(error.value)
    with pytest.raises(CheckFailed) as error:  # no mask at all: right on (1, 1) and (1, 6), wrong on (2, 7)
        checks.check_causal_mask(lambda L, S: torch.ones(L, S, dtype=torch.bool))
    assert "L=2, S=7" in str(error.value) and "Likely mistake" not in str(error.value), str(error.value)


def rendered(source):
    """A hint's source as the learner reads it: a call _see_hint("name") becomes the text it returns."""
    call = re.fullmatch(r'_see_hint\("(\w+)"\)', source)
    return _see_hint(call.group(1)) if call else source


def generic_hints():
    """(check name, the hint as shown) for every hint a check passes to _compare: the line a wrong answer that
    matches no known mistake is told."""
    found = []
    for path in sorted((ROOT / "code" / "attention_book" / "checks").glob("*.py")):
        source = path.read_text()
        for function in ast.parse(source).body:
            if isinstance(function, ast.FunctionDef) and function.name.startswith("check_"):
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_compare":
                        hints = [k.value for k in node.keywords if k.arg == "hint"] or node.args[4:5]
                        found += [(function.name, rendered(ast.get_source_segment(source, h))) for h in hints]
    return found


def test_the_checks_pass_hints_to_compare():
    hints = [hint for _, hint in generic_hints()]
    assert len(hints) >= 15
    assert sum(hint.startswith('checks.hint("') for hint in hints) >= 10  # rendered: the pointer, not the call


@pytest.mark.parametrize("check, hint", generic_hints(), ids=lambda x: x if x.startswith("check_") else "")
def test_a_wrong_answer_is_not_told_the_method(check, hint):
    for fragment in FORBIDDEN[check]:
        assert not gives_away(fragment, hint), f"{check}'s hint on a wrong answer gives away {fragment!r}: {hint}"


def test_a_wrong_answer_is_pointed_to_the_hint():
    with pytest.raises(CheckFailed, match=re.escape('checks.hint("split_heads") gives a hint')):
        checks.check_split_heads(lambda x, n_heads: torch.zeros(x.shape[0], n_heads, x.shape[1],
                                                                  x.shape[2] // n_heads))
