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
from attention_book.grading.assignment import check_calls
from conftest import ROOT, chapter_paths

ALL_CHECKS = [getattr(checks, name) for name in checks.__all__ if name.startswith("check_")]

# What a stub's message must not say, per check: the key expressions of the solution. Compared case-insensitively,
# a fragment that starts or ends with a letter as a whole word there ("max" is not found in "softmax").
FORBIDDEN = {
    "check_stable_softmax": ["maximum", "max", "subtract", "shift"],
    "check_causal_mask": ["tril", "triu", "arange", "S - L", "<="],
    "check_attention_with_masks": ["softmax", "masked_fill", "-inf", "√d", "@", "transpose", "~mask", "all(",
                                   "0 / 0", "zeros("],
    "check_self_attention_in_blocks": ["x @ W_q", "@", "softmax", "range(", "empty_like", "k[:, :stop]", "arange",
                                       "sinusoidal_positions("],
    "check_sinusoidal_at": ["10000", "sin(", "cos(", "stack", "flatten", "[..., None]", "0::2", "arange"],
    "check_weights_bytes": ["B * h * L * S", "finfo", "element_size", "bits", "multiply"],
    "check_multi_head": ["view", "transpose", "reshape", "permute", "mask[:, None]", "softmax", "@", "√d_head", "-inf",
                         "masked_fill"],
    "check_param_count": ["Q, K, V and O", "add up", "n_kv_heads * d_head", "d_model * d_model", "2 *"],
    "check_to_torch_mha": ["in_proj_weight", "in_proj_bias", "copy", "stack", "torch.cat", "out_proj"],
    "check_previous_token_score": ["diagonal", "arange", "offset", "weights[:, :, i, i - 1]", "mean(dim"],
    "check_induction_score": ["tril", "tokens[:, :, None]", "shift", "j + 1", "any("],
    "check_group_ablation": ["head_mask", "cross_entropy", "reduction", "no_grad", "!= -100", "transpose", "minus"],
    "check_mean_pool": ["sum(", "[..., None]", "float()", "multiply", "divide"],
    "check_next_token_score": ["diagonal", "offset", "is_real[:, :-1]", "weights[b, :, i, i + 1]", "&"],
    "check_attention_entropy": ["log w", "-sum", "torch.where", "clamp", "nan_to_num", "0 log 0"],
    "check_encoder_layer": ["masked_fill", "transpose", "sqrt", "softmax", "-inf", "layer_norm", "view(", "@",
                            "d_head", ".T"],
    "check_gqa_similarity": ["convert_to_gqa(", "sentence_embeddings", "cosine_similarity(", "F.", "deepcopy",
                             ".layers["],
    "check_kv_bytes_per_token": ["2 *", "2 x", "factor", "keys and values", "times"],
    "check_cached_decode": ["zeros(", "empty(", "causal_mask(", "bottom-right", ":end]", "start:end", "torch.cat",
                            "transpose", "view("],
    "check_max_context": ["//", "divide", "rounding", "kv_bytes_per_token", "2 *"],
    "check_mqa_param_count": ["d_model x d_head", "W_k", "d_model // n_heads", "add the biases"],
    "check_mqa_attention": ["reshape", "h * L", "k[:, 0]", "rows", "softmax", "transpose", "@", "√d"],
    "check_mqa_forward": ["view", "reshape", "transpose", "h * L", "rows", "tril", "masked_fill", "softmax", "@"],
    "check_tokens_per_second_bound": ["/ (", "weight bytes +", "batch x bandwidth", "n_params x", "once"],
    "check_folded_row_owner": ["//", "%", "row // L", "consecutive", "one after the other", "kv_head *"],
    "check_repeat_kv": ["repeat_interleave(", "in a row", "expand", "n_heads // g", "[0, 0, 1, 1]"],
    "check_folded_decode_step": ["reshape", "transpose", "softmax", "[:, :, length]", ":length + 1", "view",
                                 "copy_", "h // g", "scaled_dot_product_attention("],
    "check_pool_projection": ["view", "unflatten", "reshape", "mean(dim", "second dimension"],
    "check_convert_torch_mha": ["copy_", "load_state_dict", "no_grad", "bias[:, None]", "pool_projection", "view",
                                "chunk(", "mean(dim"],
    "check_weighted_pool_projection": ["view", "sum(dim", "divide", "[:, :, None, None]", "reshape", "normalis"],
    "check_largest_batch": ["//", "min(", "2 *", "subtract", "max(0", "round down"],
    "check_decode_step_roofline": ["max(", "2 *", "4 *", "n_params *", "batch *", "/ bandwidth", "larger"],
    "check_pareto_front": ["sorted(", "so far", "any(", "walk", "q[0]", "all(", "zip("],
    "check_next_positions": ["arange", "cache_length +", "range(", "right after"],
    "check_rope_left_padded": ["cumsum", "sin(", "cos(", "torch.cat", "[:, None", "- 1", "chunk", "torch.where"],
    "check_qkv_to_pairs": ["split", "transpose", "reshape", "view", "torch.cat", "0::2", "argsort", "interleave"],
    "check_roofline_tokens_per_s": ["1 /", "1 over", "context *", "+ context", "/ bandwidth"],
    "check_perplexity": ["cross_entropy", "math.exp", "exp(", "log_softmax", "nll_loss"],
    "check_q4_1_matvec": ["& 0x0F", ">> 4", "view(torch.float16", "frombuffer", "sum(", "reshape", "dequantize(",
                          "q . x", "range(16)", "byte position", "a few at a time", "split("],
    "check_quantize_q4_1": ["amin", "amax", "min(", "max(", "round(", "<< 4", "clamp", "view(torch.uint8"],
    "check_latent_tokens_in": ["d_c + d_h^R", "//", "2 *", "divide", "round down", "floor"],
    "check_absorbed_decode_step": ["view", "einsum", "@", "transpose", "W_UK_iᵀ", "softmax", "bmm", "[..., :d_c]"],
    "check_decoupled_rope_key": ["Rope(", "[:, None]", "w_kr.T", "@", "rotate("],
    "check_tiled_one_head": ["exp(m - m_new)", "torch.maximum", "amax", "masked_fill", "rescale", "factor",
                             "running maximum", "running sum"],
    "check_merge_two": ["logaddexp", "logsumexp", "exp(lse_a - lse)", "share", "weights"],
    "check_largest_block_k": ["//", "2 * d_head", "block_q +", "divide", "round down"],
    "check_ring_append": ["%", "modulo", "remainder", "t - n_sinks", "torch.cat", "min(length", "arange"],
    "check_quantize_keys": ["amin", "amax", "/ 255", "round(", "dim=0", "+ 128", "- 128 *"],
    "check_local_global_bytes": ["(i + 1) %", "min(", "2 *", "2 x", "sum("],
    "check_masked_attention": ["masked_fill", "-inf", "softmax(", "@", "transpose", "~mask"],
    "check_to_heads": ["view", "transpose", "reshape", "permute"],
    "check_from_heads": ["transpose", "reshape", "view", "permute"],
    "check_cache_append": ["[:, :, n", "slice", "cache['k'][", "= k", "copy_"],
    "check_grouped_causal_attention": ["reshape", "fold", "arange", "repeat(", "(h // g) * L", "stack"],
    "check_rope_halves": ["cos", "sin", "torch.cat", "arange", "chunk", "x[..., :"],
    "check_rms_normalise": ["sqrt(", "rsqrt", "mean(", "pow(", "** 2"],
    "check_swiglu_mlp": ["F.silu(", "F.linear(", "@", ".T"],
    "check_attention_sublayer": ["to_heads(", "rope_halves(", "cache_append(", "grouped_causal_attention(",
                                 "from_heads(", ".T", "@"],
    "check_decoder_block": ["rms_normalise(", "attention_sublayer(", "swiglu_mlp(", "x +"],
    "check_decoder_logits": ["embedding[ids]", "x[:, -1]", "decoder_block(", ".T", "@"],
    "check_greedy_generate": ["argmax", "decoder_logits(", "empty_cache(", "keepdim", "torch.cat"],
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
                pairs += check_calls(cell.source)
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


# Hints that say the method in words, leaving the code to the learner: fragments of code they must not contain.
HINTS_IN_WORDS = {
    "greedy_generate": ["argmax", "empty_cache(", "decoder_logits(", "keepdim", "torch.cat", "range(", "=",
                        "config."],
    "rope_halves": ["torch.", "arange", ".float()", "[:, None]", "x[...", "dim=", "=", "**", "cos(", "sin("],
}


@pytest.mark.parametrize("name", sorted(HINTS_IN_WORDS))
def test_a_hint_in_words_holds_no_code(name, capsys):
    checks.hint(name, full=True)  # the method itself (a build exercise's first hint is its idea)
    shown = capsys.readouterr().out
    for fragment in HINTS_IN_WORDS[name]:
        assert fragment not in shown, f"the hint for {name} writes code: {fragment!r}"


def test_hints_are_not_printed_by_default(capsys):
    with pytest.raises(CheckFailed):
        checks.check_stable_softmax(stub)
    assert capsys.readouterr().out == ""


# Wrong answers that make a common mistake: (check, the mistaken function, what the message must name).
def multi_head_split_without_transpose(layer, x, kv=None, mask=None):
    kv = x if kv is None else kv
    (B, L, _), S, h, d = x.shape, kv.shape[1], layer.n_heads, layer.d_head
    q = layer.q_proj(x).reshape(B, h, L, d)  # cuts the flattened tokens, not each token's columns
    k, v = layer.k_proj(kv).reshape(B, h, S, d), layer.v_proj(kv).reshape(B, h, S, d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~(mask[:, None] if mask.dim() == 3 else mask), float("-inf"))
    hidden = scores == float("-inf")
    weights = torch.softmax(scores.masked_fill(hidden.all(-1, keepdim=True), 0.0), -1).masked_fill(hidden, 0.0)
    return layer.o_proj((weights @ v).transpose(1, 2).reshape(B, L, h * d))


def inverted_mask(L, S):  # without causal_mask or tril, which the exercise says not to call
    return torch.arange(S)[None, :] > torch.arange(L)[:, None] + (S - L)


def top_left_mask(L, S):
    return torch.arange(S)[None, :] <= torch.arange(L)[:, None]


def inverted_top_left_mask(L, S):
    return ~top_left_mask(L, S)


def attention_both_masks(q, k, v, mask=None, scale=True, invert=False, dim=-1):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(mask if invert else ~mask, float("-inf"))
        scores = scores + mask
    hidden = scores == float("-inf")
    weights = torch.softmax(scores.masked_fill(hidden.all(-1, keepdim=True), 0.0), dim).masked_fill(hidden, 0.0)
    return weights @ v, weights


def attention_with_mask_not_inverted(q, k, v, mask=None):
    return attention_both_masks(q, k, v, mask, invert=True)  # hides the keys the query MAY attend to


def attention_unscaled(q, k, v, mask=None):
    return attention_both_masks(q, k, v, mask, scale=False)


def attention_softmax_over_queries(q, k, v, mask=None):
    return attention_both_masks(q, k, v, mask, dim=-2)


def naive_softmax(x):
    return x.exp() / x.exp().sum(dim=-1, keepdim=True)


def folded_row_owner_position_by_position(kv_head, row, n_heads, n_kv_heads, L):
    group = n_heads // n_kv_heads
    return kv_head * group + row % group, row // group


def weighted_pool_normalised_over_all_heads(weight, n_heads, n_kv_heads, importance):
    shares = importance.view(n_kv_heads, -1) / importance.sum()
    grouped = weight.view(n_kv_heads, n_heads // n_kv_heads, -1, weight.shape[1])
    return (grouped * shares[:, :, None, None]).sum(dim=1).reshape(-1, weight.shape[1])


def largest_batch_without_the_window(memory_bytes, weight_bytes, n_layers, n_kv_heads, d_head, context,
                                     bytes_per_element, window=None):
    per_sequence = 2 * n_layers * n_kv_heads * d_head * bytes_per_element * context
    return max(0, (memory_bytes - weight_bytes) // per_sequence)


def pareto_front_of_the_first_two_costs(points):
    return sorted(p for p in points if not any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in points))


def repeat_kv_tiled(k, n_heads):
    return k.repeat(1, n_heads // k.shape[1], 1, 1)


def roofline_without_the_cache(weight_bytes, cache_bytes_per_token, context, bandwidth):
    return bandwidth / weight_bytes


def perplexity_as_cross_entropy(logits, targets):
    return torch.nn.functional.cross_entropy(logits, targets).item()


def rope_left_padded_counting_the_padding(x, mask, offset, base=10_000.0):
    d_half = x.shape[-1] // 2
    positions = offset[:, None] + torch.arange(x.shape[2])  # the padding counted
    angles = positions[:, None, :, None] * base ** (-torch.arange(d_half) / d_half)
    a, b = x[..., :d_half], x[..., d_half:]
    return torch.cat((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), dim=-1)


def qkv_to_pairs_values_too(weight, n_heads, n_kv_heads):
    d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
    heads = weight.reshape(-1, 2, d_head // 2, weight.shape[1])  # every head, the values' too
    return heads.transpose(1, 2).reshape(weight.shape)


def q4_1_matvec_interleaved(raw, x):
    blocks = raw.reshape(raw.shape[0], -1, 20)
    d, m = (blocks[..., s:s + 2].contiguous().view(torch.float16).float() for s in (0, 2))
    q = torch.stack((blocks[..., 4:] & 15, blocks[..., 4:] >> 4), dim=-1).flatten(-2).float()  # 2j, 2j + 1
    return (d * q + m).reshape(raw.shape[0], -1) @ x


def quantize_q4_1_rounding_down(w):
    blocks = w.reshape(w.shape[0], -1, 32)
    low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
    d = (high - low) / 15
    q = ((blocks - low) / torch.where(d == 0, 1.0, d)).floor().clamp(0, 15).to(torch.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)
    return torch.cat((torch.cat((d, low), -1).half().view(torch.uint8), packed), -1).reshape(w.shape[0], -1)


def next_positions_from_zero(cache_length, n_new):
    return torch.arange(n_new)


def latent_tokens_without_rope(budget_bytes, n_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element):
    return budget_bytes // (n_layers * kv_lora_rank * bytes_per_element)


def latent_tokens_rounded_up(budget_bytes, n_layers, kv_lora_rank, qk_rope_head_dim, bytes_per_element):
    return -(-budget_bytes // (n_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element))


def absorbed_step_heads_interleaved(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
    B, h, d_nope = q_nope.shape
    d_c = w_uk.shape[1]
    absorbed = torch.einsum("bhn,nhc->bhc", q_nope, w_uk.view(d_nope, h, d_c))  # rows taken head-minor
    scores = absorbed @ latent[..., :d_c].transpose(1, 2) + q_rope @ latent[..., d_c:].transpose(1, 2)
    mixed = torch.softmax(scores * scale, dim=-1) @ latent[..., :d_c]
    return torch.einsum("bhc,hvc->bhv", mixed, w_uv.view(h, -1, d_c)).reshape(B, -1) @ w_o.T


def decoupled_rope_key_from_zero(x, w_kr, start):
    from attention_book.rope import Rope
    return Rope(w_kr.shape[0], layout="pairs")((x @ w_kr.T)[:, None], 0)[:, 0]


def tiled_without_rescaling_the_sum(q, k, v, block_k, is_causal=False):
    L, S = q.shape[0], k.shape[0]
    top, total, out = torch.full((L, 1), -math.inf), torch.zeros(L, 1), torch.zeros(L, v.shape[1])
    for start in range(0, S, block_k):
        tile = q @ k[start:start + block_k].T / q.shape[1] ** 0.5
        if is_causal:
            tile = tile.masked_fill(torch.arange(start, start + tile.shape[1]) > torch.arange(L)[:, None] + S - L,
                                    -math.inf)
        new_top = torch.maximum(top, tile.amax(1, keepdim=True))
        weights = torch.exp(tile - new_top)
        total = total + weights.sum(1, keepdim=True)  # not rescaled
        out = out * torch.exp(top - new_top) + weights @ v[start:start + block_k]
        top = new_top
    return out / total


def merge_as_plain_average(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def merge_two_nan_when_both_masked(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


def largest_block_k_scores_only(budget_bytes, block_q, d_head, bytes_per_number):
    return budget_bytes // (block_q * bytes_per_number)


def ring_append_window_too_wide(buffer, positions, new, length, window, n_sinks):
    L_new = new.shape[2]
    filled = min(length, n_sinks + window)
    keys = torch.cat((buffer[:, :, :filled], new), dim=2)
    key_at = torch.cat((positions[:filled], torch.arange(length, length + L_new)))[None, :]
    query_at = torch.arange(length, length + L_new)[:, None]
    mask = (key_at >= 0) & (key_at <= query_at) & ((query_at - key_at <= window) | (key_at < n_sinks))
    for t in range(length, length + L_new):
        slot = t if t < n_sinks else n_sinks + (t - n_sinks) % window
        buffer[:, :, slot], positions[slot] = new[:, :, t - length], t
    return keys, mask


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


def group_ablation_the_wrong_way_round(model, tokens, targets, heads):
    head_mask = torch.ones(model.config.n_layers, model.config.n_heads)
    for layer, head in heads:
        head_mask[layer, head] = 0.0
    rises = []
    for mask in (None, head_mask):  # the whole model first: the sign flips
        with torch.no_grad():
            losses = torch.nn.functional.cross_entropy(model(tokens, head_mask=mask).transpose(1, 2), targets,
                                                       reduction="none")
        rises.append(losses.sum(dim=1) / (targets != -100).sum(dim=1))
    return rises[0] - rises[1]


def encoder_layer_attending_to_padding(x, is_real, w, n_heads, eps=1e-12):
    F = torch.nn.functional
    B, L, d_model = x.shape

    def heads(name):
        return F.linear(x, w[f"attention.self.{name}.weight"], w[f"attention.self.{name}.bias"]).view(
            B, L, n_heads, -1).transpose(1, 2)

    weights = torch.softmax(heads("query") @ heads("key").transpose(-2, -1) / math.sqrt(d_model // n_heads), -1)
    attended = (weights @ heads("value")).transpose(1, 2).reshape(B, L, d_model)
    x = F.layer_norm(x + F.linear(attended, w["attention.output.dense.weight"], w["attention.output.dense.bias"]),
                     (d_model,), w["attention.output.LayerNorm.weight"], w["attention.output.LayerNorm.bias"], eps)
    hidden = F.gelu(F.linear(x, w["intermediate.dense.weight"], w["intermediate.dense.bias"]))
    return F.layer_norm(x + F.linear(hidden, w["output.dense.weight"], w["output.dense.bias"]), (d_model,),
                        w["output.LayerNorm.weight"], w["output.LayerNorm.bias"], eps)


def kv_bytes_keys_only(n_layers, n_kv_heads, d_head, bytes_per_element):
    return n_layers * n_kv_heads * d_head * bytes_per_element


def kv_numbers_not_bytes(n_layers, n_kv_heads, d_head, bytes_per_element):
    return 2 * n_layers * n_kv_heads * d_head


def mqa_attention_unscaled(q, k, v):
    B, h, L, d = q.shape
    return (torch.softmax(q.reshape(B, h * L, d) @ k[:, 0].transpose(-2, -1), dim=-1) @ v[:, 0]).view(B, h, L, d)


def max_context_without_batch(memory_bytes, n_layers, n_kv_heads, d_head, bytes_per_element, batch):
    return memory_bytes // (2 * n_layers * n_kv_heads * d_head * bytes_per_element)


MISTAKES = [
    (checks.check_multi_head, multi_head_split_without_transpose, "straight to (B, h, n, d_head)"),
    (checks.check_causal_mask, inverted_mask, "the mask is inverted: True must mean"),
    (checks.check_causal_mask, top_left_mask, "the mask is aligned top-left"),
    # wrong both ways: (1, 1), the smallest input, shows the polarity first
    (checks.check_causal_mask, inverted_top_left_mask, "the mask is inverted: True must mean"),
    (checks.check_attention_with_masks, attention_with_mask_not_inverted,
     "the boolean mask is used the wrong way round"),
    (checks.check_attention_with_masks, attention_unscaled, "not scaled by 1/√d"),
    (checks.check_attention_with_masks, attention_softmax_over_queries, "the softmax runs over the queries"),
    (checks.check_stable_softmax, naive_softmax, "exp overflows (to inf) or underflows (to 0)"),
    (checks.check_folded_row_owner, folded_row_owner_position_by_position, "the rows were read position by position"),
    (checks.check_weighted_pool_projection, weighted_pool_normalised_over_all_heads, "normalised over all the heads"),
    (checks.check_largest_batch, largest_batch_without_the_window, "the window was left out"),
    (checks.check_pareto_front, pareto_front_of_the_first_two_costs, "only the first two costs were compared"),
    (checks.check_group_ablation, group_ablation_the_wrong_way_round, "that is the rise with its sign flipped"),
    (checks.check_encoder_layer, encoder_layer_attending_to_padding, "the padding keys are not masked"),
    (checks.check_kv_bytes_per_token, kv_bytes_keys_only, "only keys or only values were counted"),
    (checks.check_kv_bytes_per_token, kv_numbers_not_bytes, "that counts numbers, not bytes"),
    (checks.check_max_context, max_context_without_batch, "the batch was left out"),
    (checks.check_mqa_attention, mqa_attention_unscaled, "not scaled by 1/√d"),
    (checks.check_repeat_kv, repeat_kv_tiled, "tiled, [0, 1, 0, 1]"),
    (checks.check_next_positions, next_positions_from_zero, "the step starts again at position 0"),
    (checks.check_rope_left_padded, rope_left_padded_counting_the_padding, "the padding was counted"),
    (checks.check_qkv_to_pairs, qkv_to_pairs_values_too, "the values' rows were reordered too"),
    (checks.check_q4_1_matvec, q4_1_matvec_interleaved, "byte j was read as numbers 2j and 2j + 1"),
    (checks.check_quantize_q4_1, quantize_q4_1_rounding_down, "rounded down, not to the nearest"),
    (checks.check_roofline_tokens_per_s, roofline_without_the_cache, "the cache is read too"),
    (checks.check_perplexity, perplexity_as_cross_entropy, "returning the mean cross-entropy"),
    (checks.check_latent_tokens_in, latent_tokens_without_rope, "only c_KV was counted"),
    (checks.check_latent_tokens_in, latent_tokens_rounded_up, "rounded up"),
    (checks.check_absorbed_decode_step, absorbed_step_heads_interleaved, "split as d_nope blocks of h heads"),
    (checks.check_decoupled_rope_key, decoupled_rope_key_from_zero, "the positions start at 0"),
    (checks.check_tiled_one_head, tiled_without_rescaling_the_sum, "the running sum was not rescaled"),
    (checks.check_merge_two, merge_as_plain_average, "averaged with equal weights"),
    (checks.check_merge_two, merge_two_nan_when_both_masked, "both sets are fully masked"),
    (checks.check_largest_block_k, largest_block_k_scores_only, "only the tile of scores was counted"),
    (checks.check_ring_append, ring_append_window_too_wide, "a window of window + 1 positions"),
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
    with pytest.raises(CheckFailed, match=r"my_multi_head on MultiHeadAttention\(d_model=8, n_heads=2, d_head=4, "
                                          r"bias=True\), x \(1, 3, 8\)"):
        checks.check_multi_head(multi_head_split_without_transpose)
    with pytest.raises(CheckFailed, match="your causal mask on L=1, S=1:"):
        checks.check_causal_mask(inverted_mask)
    with pytest.raises(CheckFailed, match="your causal mask on L=1, S=6:"):  # (1, 1) cannot tell the alignments apart
        checks.check_causal_mask(top_left_mask)


def test_an_unrecognised_wrong_answer_names_no_mistake():
    with pytest.raises(CheckFailed) as error:
        checks.check_multi_head(lambda layer, x, kv=None, mask=None: torch.zeros(x.shape))
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
    with pytest.raises(CheckFailed, match=re.escape('checks.hint("my_multi_head") gives a hint')):
        checks.check_multi_head(lambda layer, x, kv=None, mask=None: torch.ones(x.shape))


def test_a_build_exercise_gives_its_idea_first_and_the_method_on_request(capsys):
    from attention_book.checks._compare import IDEAS
    assert len(IDEAS) >= 16  # one build exercise of every chapter at least
    for name in ("tiled_one_head", "absorbed_decode_step", "ring_append"):
        checks.hint(name)
        idea = capsys.readouterr().out
        checks.hint(name, full=True)
        method = capsys.readouterr().out
        assert idea.startswith(f"Hint for {name}: ") and f'checks.hint("{name}", full=True)' in idea, idea
        assert method.startswith(f"Hint for {name}: ") and method != idea and "full=True" not in method, method


@pytest.mark.parametrize("name", sorted(__import__("attention_book.checks._compare", fromlist=["IDEAS"]).IDEAS))
def test_an_idea_holds_no_code(name):
    from attention_book.checks._compare import IDEAS
    for fragment in ("torch.", "(dim=", "keepdim", ".view(", ".transpose(", "[:, ", " = "):
        assert fragment not in IDEAS[name], f"the idea for {name} writes code: {fragment!r}"
