"""The build exercises of chapters 8 to 10: GQA's folded decode step over a preallocated cache, converting PyTorch's
nn.MultiheadAttention to GQA, and a decode step's bytes, FLOPs and roofline time; and the exercises rewritten beside
them. Their checks pass the model solutions, name the usual mistakes, refuse the package's own solution and what the
exercise says not to call, and count the bytes of the tensors the decode step makes.

``CHEATS`` (collected by tests/test_exercises_build.py): answers that call the package's own solution of the step.
"""

import attention_book.checks as checks
import pytest
import torch
import torch.nn.functional as F
from attention_book import GroupedQueryAttention
from attention_book.convert import pool_heads, pool_kv_heads
from attention_book.figures.head_sharing_explorer import decode_step_numbers
from attention_book.figures.roofline import attainable_flop_rate
from attention_book.grouped_sdpa import grouped_query_sdpa
from attention_book.kv_cache import kv_cache_bytes_per_token
from attention_book.torch_interop import from_torch_mha
from exercise_answers import fails, passes


def cheat_decode_step(q, k_new, v_new, k_cache, v_cache, length):
    k_cache[:, :, length], v_cache[:, :, length] = k_new[:, :, 0], v_new[:, :, 0]
    return grouped_query_sdpa(q, k_cache[:, :, :length + 1], v_cache[:, :, :length + 1])


def cheat_convert(mha, n_kv_heads):
    return pool_kv_heads(mha, n_kv_heads)


def cheat_roofline(config, n_params, context, batch, bytes_per_element, bandwidth, flop_rate):
    one = decode_step_numbers(config.n_heads, config.n_kv_heads, config.n_layers, config.d_head, context,
                              bytes_per_element)
    n_bytes = n_params * bytes_per_element + batch * one["bytes_read"]
    flops = batch * (2 * n_params + one["flops"])
    seconds = flops / attainable_flop_rate(flops / n_bytes, bandwidth, flop_rate)
    return {"bytes": n_bytes, "flops": flops, "seconds": seconds,
            "bound": "memory" if n_bytes / bandwidth >= flops / flop_rate else "compute"}


CHEATS = {"check_folded_decode_step": cheat_decode_step, "check_convert_torch_mha": cheat_convert,
          "check_decode_step_roofline": cheat_roofline}


# Chapter 8: the folded decode step.

def _write(q, k_new, v_new, k_cache, v_cache, length):
    k_cache[:, :, length], v_cache[:, :, length] = k_new[:, :, 0], v_new[:, :, 0]
    return q.shape[0], q.shape[1], k_cache.shape[1], q.shape[3]


def step_with_sdpa(q, k_new, v_new, k_cache, v_cache, length):
    B, h, g, d = _write(q, k_new, v_new, k_cache, v_cache, length)
    folded = q.reshape(B, g, h // g, d)
    return F.scaled_dot_product_attention(folded, k_cache[:, :, :length + 1], v_cache[:, :, :length + 1]).reshape(
        B, h, 1, d)


def step_with_enable_gqa(q, k_new, v_new, k_cache, v_cache, length):
    _write(q, k_new, v_new, k_cache, v_cache, length)
    return F.scaled_dot_product_attention(q, k_cache[:, :, :length + 1], v_cache[:, :, :length + 1], enable_gqa=True)


def step_repeating_kv(q, k_new, v_new, k_cache, v_cache, length):
    B, h, g, d = _write(q, k_new, v_new, k_cache, v_cache, length)
    k, v = (t[:, :, :length + 1].repeat_interleave(h // g, dim=1) for t in (k_cache, v_cache))
    return F.scaled_dot_product_attention(q, k, v)


def step_expanding_kv(q, k_new, v_new, k_cache, v_cache, length):  # expand is free, the reshape after it copies
    B, h, g, d = _write(q, k_new, v_new, k_cache, v_cache, length)
    k, v = (t[:, :, None, :length + 1].expand(B, g, h // g, length + 1, d).reshape(B, h, length + 1, d)
            for t in (k_cache, v_cache))
    return F.scaled_dot_product_attention(q, k, v)


def step_concatenating(q, k_new, v_new, k_cache, v_cache, length):
    B, h, g, d = _write(q, k_new, v_new, k_cache, v_cache, length)
    k = torch.cat((k_cache[:, :, :length], k_new), dim=2)  # a new tensor: the whole filled cache copied
    v = torch.cat((v_cache[:, :, :length], v_new), dim=2)
    return F.scaled_dot_product_attention(q.reshape(B, g, h // g, d), k, v).reshape(B, h, 1, d)


def step_over_the_whole_cache(q, k_new, v_new, k_cache, v_cache, length):
    B, h, g, d = _write(q, k_new, v_new, k_cache, v_cache, length)
    return F.scaled_dot_product_attention(q.reshape(B, g, h // g, d), k_cache, v_cache).reshape(B, h, 1, d)


def step_round_robin(q, k_new, v_new, k_cache, v_cache, length):
    B, h, g, d = _write(q, k_new, v_new, k_cache, v_cache, length)
    folded = q.reshape(B, h // g, g, d).transpose(1, 2)  # group j: heads j, j + g, ...
    out = F.scaled_dot_product_attention(folded, k_cache[:, :, :length + 1], v_cache[:, :, :length + 1])
    return out.transpose(1, 2).reshape(B, h, 1, d)


def step_not_writing(q, k_new, v_new, k_cache, v_cache, length):
    B, h, g, d = q.shape[0], q.shape[1], k_cache.shape[1], q.shape[3]
    out = F.scaled_dot_product_attention(q.reshape(B, g, h // g, d), k_cache[:, :, :length + 1],
                                         v_cache[:, :, :length + 1])  # the new entry never written
    return out.reshape(B, h, 1, d)


def test_the_decode_step_may_call_sdpa_without_enable_gqa():
    assert passes(checks.check_folded_decode_step, step_with_sdpa).startswith("✓ ")


@pytest.mark.parametrize("answer, named", [
    (step_with_enable_gqa, "with enable_gqa=True, which the exercise says not to use"),
    (step_repeating_kv, "calls torch.Tensor.repeat_interleave, which the exercise says not to call")])
def test_the_decode_step_refuses_what_the_exercise_says_not_to_call(answer, named):
    message = fails(checks.check_folded_decode_step, answer)
    assert named in message and "the exercise is to write that step yourself" in message, message


@pytest.mark.parametrize("answer", [step_expanding_kv, step_concatenating])
def test_a_decode_step_that_copies_the_cache_fails_on_its_bytes(answer):
    message = fails(checks.check_folded_decode_step, answer)
    assert "bytes of new tensors at once" in message and "copies the cache or its K/V heads" in message, message
    assert "(twice the output plus four tensors of scores)" in message, message


@pytest.mark.parametrize("answer, named", [
    (step_over_the_whole_cache, "every slot of the preallocated cache"),
    (step_round_robin, "grouped round-robin")])
def test_a_wrong_decode_step_is_told_its_mistake(answer, named):
    message = fails(checks.check_folded_decode_step, answer)
    assert "Likely mistake: " in message and named in message, message


def test_a_decode_step_that_leaves_the_cache_unwritten_fails():
    message = fails(checks.check_folded_decode_step, step_not_writing)
    assert "Likely mistake: the attention read position `length` before the new key" in message, message


def test_repeat_kv_refuses_repeat_interleave():
    message = fails(checks.check_repeat_kv, lambda k, n_heads: k.repeat_interleave(n_heads // k.shape[1], dim=1))
    assert "calls torch.Tensor.repeat_interleave, which the exercise says not to call" in message, message
    message = fails(checks.check_repeat_kv, lambda k, n: torch.repeat_interleave(k, n // k.shape[1], dim=1))
    assert "calls torch.repeat_interleave" in message, message


def test_folded_row_owner_names_round_robin_groups():
    message = fails(checks.check_folded_row_owner, lambda j, row, h, g, L: (j + g * (row // L), row % L))
    assert "Likely mistake: the query heads were given to the groups round-robin" in message, message


# Chapter 9: converting PyTorch's nn.MultiheadAttention.

def _mean(param, h, g):
    return param.unflatten(0, (g, h // g, -1)).mean(dim=1).flatten(0, 1)


def _converted(mha, n_kv_heads, pool=_mean, order=(0, 1, 2)):
    """The conversion, with ``pool`` for the K and V rows and in_proj's blocks read in ``order`` (Q, K, V)."""
    h, d_model = mha.num_heads, mha.embed_dim
    bias = mha.in_proj_bias is not None
    new = GroupedQueryAttention(d_model, h, n_kv_heads, bias=bias).to(mha.in_proj_weight.dtype)
    fused = [("weight", mha.in_proj_weight)] + ([("bias", mha.in_proj_bias)] if bias else [])
    with torch.no_grad():
        for kind, param in fused:
            blocks = [param.chunk(3)[i] for i in order]
            new.q_proj.get_parameter(kind).copy_(blocks[0])
            new.k_proj.get_parameter(kind).copy_(pool(blocks[1], h, n_kv_heads))
            new.v_proj.get_parameter(kind).copy_(pool(blocks[2], h, n_kv_heads))
        new.o_proj.load_state_dict(mha.out_proj.state_dict())
    return new


def convert_summing(mha, n_kv_heads):
    return _converted(mha, n_kv_heads, lambda w, h, g: w.unflatten(0, (g, h // g, -1)).sum(1).flatten(0, 1))


def convert_round_robin(mha, n_kv_heads):
    return _converted(mha, n_kv_heads, lambda w, h, g: w.unflatten(0, (h // g, g, -1)).mean(0).flatten(0, 1))


def convert_with_k_and_v_swapped(mha, n_kv_heads):
    return _converted(mha, n_kv_heads, order=(0, 2, 1))


def convert_with_the_blocks_in_another_order(mha, n_kv_heads):  # as if in_proj stacked K, Q, V
    return _converted(mha, n_kv_heads, order=(1, 0, 2))


def convert_sharing_the_query_weight(mha, n_kv_heads):  # the new q_proj.weight a view of in_proj_weight
    new = _converted(mha, n_kv_heads)
    new.q_proj.weight = torch.nn.Parameter(mha.in_proj_weight[:mha.embed_dim])
    return new


def convert_sharing_the_output_projection(mha, n_kv_heads):
    new = _converted(mha, n_kv_heads)
    new.o_proj = mha.out_proj
    return new


def convert_in_place(mha, n_kv_heads):
    with torch.no_grad():
        mha.in_proj_weight[0] += 1.0  # mha changed
    return _converted(mha, n_kv_heads)


def convert_without_biases(mha, n_kv_heads):
    new = _converted(mha, n_kv_heads)
    if new.k_proj.bias is not None:
        with torch.no_grad():
            new.k_proj.bias.zero_()
    return new


def convert_in_float32(mha, n_kv_heads):
    return _converted(mha, n_kv_heads).float()


def convert_keeping_every_kv_head(mha, n_kv_heads):  # n_kv_heads forgotten: still MHA
    new = GroupedQueryAttention(mha.embed_dim, mha.num_heads, bias=mha.in_proj_bias is not None)
    return new.to(mha.in_proj_weight.dtype)


@pytest.mark.parametrize("answer, named", [
    (convert_summing, "Likely mistake: the heads of a group were added up, not averaged"),
    (convert_round_robin, "Likely mistake: the old heads were grouped round-robin"),
    (convert_with_k_and_v_swapped, "Likely mistake: the K rows were pooled from the wrong block"),
    (convert_with_the_blocks_in_another_order, "Likely mistake: the query rows were taken from the wrong block"),
    (convert_sharing_the_query_weight, "q_proj.weight shares its storage with a tensor of mha"),
    (convert_sharing_the_output_projection, "o_proj.weight shares its storage with a tensor of mha"),
    (convert_in_place, "mha's weights changed"),
    (convert_without_biases, "your layer's k_proj.bias"),
    (convert_in_float32, "expected dtype torch.float64, got torch.float32"),
    (convert_keeping_every_kv_head, "'n_kv_heads'")])
def test_a_wrong_conversion_is_told_what_is_wrong(answer, named):
    message = fails(checks.check_convert_torch_mha, answer)
    assert named in message, message


def test_the_right_conversion_passes():
    assert passes(checks.check_convert_torch_mha, _converted).startswith("✓ ")


@pytest.mark.parametrize("converter", ["attention_book.convert.pool_heads",
                                       "attention_book.torch_interop.from_torch_mha"])
def test_the_conversion_refuses_the_package_converters(converter):
    def with_pool_heads(mha, g):
        return _converted(mha, g, lambda w, h, g: pool_heads(w, h, g, "mean", None, 1))

    def with_from_torch_mha(mha, g):
        layer = from_torch_mha(mha)
        new = _converted(mha, g)
        new.q_proj.load_state_dict(layer.q_proj.state_dict())
        return new

    answer = with_pool_heads if converter.endswith("pool_heads") else with_from_torch_mha
    message = fails(checks.check_convert_torch_mha, answer)
    assert f"calls {converter}" in message, message


# Chapter 10: a decode step's bytes, FLOPs and roofline time.

def _roofline(config, n_params, context, batch, b, bandwidth, flop_rate, combine=max, weight_reads=1):
    cache_per_token = 2 * config.n_layers * config.n_kv_heads * config.d_head * b
    n_bytes = weight_reads * n_params * b + batch * context * cache_per_token
    flops = batch * (2 * n_params + 4 * config.n_heads * context * config.d_head * config.n_layers)
    memory, compute = n_bytes / bandwidth, flops / flop_rate
    return {"bytes": n_bytes, "flops": flops, "seconds": combine(memory, compute),
            "bound": "memory" if memory >= compute else "compute"}


@pytest.mark.parametrize("answer, named", [
    (lambda *a: _roofline(*a, combine=lambda m, c: m + c), "the two bounds were added"),
    (lambda *a: _roofline(*a, combine=min), "the smaller of the two bounds was taken"),
    (lambda *a: _roofline(*a, weight_reads=a[3]), "the weights were counted once per sequence")])
def test_a_wrong_roofline_is_told_its_mistake(answer, named):
    message = fails(checks.check_decode_step_roofline, answer)
    assert f"Likely mistake: {named}" in message, message


def test_the_roofline_refuses_the_package_roofline():
    def with_attainable_rate(config, n_params, context, batch, b, bandwidth, flop_rate):
        result = _roofline(config, n_params, context, batch, b, bandwidth, flop_rate)
        result["seconds"] = result["flops"] / attainable_flop_rate(result["flops"] / result["bytes"], bandwidth,
                                                                   flop_rate)
        return result
    message = fails(checks.check_decode_step_roofline, with_attainable_rate)
    assert "calls attention_book.figures.roofline.attainable_flop_rate" in message, message


def test_largest_batch_names_a_forgotten_weight():
    def without_weights(memory_bytes, weight_bytes, n_layers, n_kv_heads, d_head, context, b, window=None):
        cached = context if window is None else min(context, window)
        return memory_bytes // (kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, b) * cached)
    message = fails(checks.check_largest_batch, without_weights)
    assert "Likely mistake: the weights' bytes were not taken from the memory" in message, message


def test_largest_batch_is_an_int_even_from_a_memory_given_in_floats():
    def without_rounding_to_an_int(memory_bytes, weight_bytes, n_layers, n_kv_heads, d_head, context, b, window=None):
        cached = context if window is None else min(context, window)
        per_sequence = kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, b) * cached
        return max(0, (memory_bytes - weight_bytes) // per_sequence)  # a float when the memory is one
    message = fails(checks.check_largest_batch, without_rounding_to_an_int)
    assert "memory 74.5058 GiB" in message and "Likely mistake: a batch is a whole number of sequences" in message, \
        message


def test_pareto_front_keeps_equal_points():
    def dropping_equal_points(points):
        return sorted({p for p in points
                       if not any(q != p and all(a <= b for a, b in zip(q, p, strict=True)) for q in points)})
    message = fails(checks.check_pareto_front, dropping_equal_points)
    assert "Likely mistake: an equal point was dropped" in message, message


def pool_round_robin(weight, n_heads, n_kv_heads):
    """Old head i into new head i % n_kv_heads: the heads of a group are not consecutive."""
    return weight.unflatten(0, (n_heads // n_kv_heads, n_kv_heads, -1)).mean(dim=0).flatten(0, 1)


def test_pool_projection_names_round_robin_grouping():
    message = fails(checks.check_pool_projection, pool_round_robin)
    assert "Likely mistake: the old heads were grouped round-robin" in message, message
