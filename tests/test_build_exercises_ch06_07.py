"""The build exercises of chapters 6 and 7 and the rules their checks enforce.

Chapter 6, my_cached_decode: the cached decode loop through key and value buffers the learner allocates once, one
token or one chunk per call; the package's cache and the layer's own steps refuse to run, the projections must run
one call at a time, and a cache copied as it grows fails on its bytes.
Chapter 7, mqa_attention and my_mqa_forward: MQA's attention and a whole MQA layer that never copy the one K/V head
(the tensors made from the keys or values alone are measured), without any scaled_dot_product_attention.
``CHEATS`` (collected by tests/test_exercises_build.py): answers that call the package's own solution of the step.
"""
import math

import attention_book.checks as checks
import torch
import torch.nn.functional as F
from attention_book import causal_mask
from attention_book.grouped_sdpa import grouped_query_sdpa
from attention_book.kv_cache import KVCache
from exercise_answers import fails, model_solution


# Chapter 6 ------------------------------------------------------------------------------------------------------

def decode_with_the_package_cache(layer, x, chunk):
    cache = layer.new_cache(batch_size=x.shape[0], max_len=x.shape[1])
    with torch.no_grad():
        out = torch.cat([layer(x[:, s:s + chunk], cache=cache, is_causal=True)[0]
                         for s in range(0, x.shape[1], chunk)], dim=1)
    return out, cache.k, cache.v


def decode_with_kvcache_append(layer, x, chunk):
    B, L, _ = x.shape
    h, d = layer.n_heads, layer.d_head
    cache = KVCache(B, h, d, L)
    outputs = []
    for s in range(0, L, chunk):
        x_new = x[:, s:s + chunk]
        n = x_new.shape[1]
        q = layer.q_proj(x_new).view(B, n, h, d).transpose(1, 2)
        k, v = cache.append(layer.k_proj(x_new).view(B, n, h, d).transpose(1, 2),
                            layer.v_proj(x_new).view(B, n, h, d).transpose(1, 2))
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=cache.causal_mask(n))
        outputs.append(layer.o_proj(heads.transpose(1, 2).reshape(B, n, h * d)))
    return torch.cat(outputs, dim=1), cache.k, cache.v


def decode(layer, x, chunk, grow=False, copy_filled=False, mask="bottom-right", all_at_once=False):
    """A cached decode loop, right by default, or with one of the faults the check must catch."""
    B, L, _ = x.shape
    h, d = layer.n_heads, layer.d_head
    k_buffer, v_buffer = x.new_zeros(B, h, L, d), x.new_zeros(B, h, L, d)
    if all_at_once:  # projects every token before the first output: not a decode loop
        k_buffer[:] = layer.k_proj(x).view(B, L, h, d).transpose(1, 2)
        v_buffer[:] = layer.v_proj(x).view(B, L, h, d).transpose(1, 2)
    k_grown = v_grown = x.new_zeros(B, h, 0, d)
    outputs = []
    for start in range(0, L, chunk):
        x_new = x[:, start:start + chunk]
        n, end = x_new.shape[1], start + x_new.shape[1]
        q = layer.q_proj(x_new).view(B, n, h, d).transpose(1, 2)
        if not all_at_once:
            k_buffer[:, :, start:end] = layer.k_proj(x_new).view(B, n, h, d).transpose(1, 2)
            v_buffer[:, :, start:end] = layer.v_proj(x_new).view(B, n, h, d).transpose(1, 2)
        k, v = k_buffer[:, :, :end], v_buffer[:, :, :end]
        if grow:  # a second cache, grown by torch.cat: everything cached is copied at every call
            k_grown = k = torch.cat([k_grown, k_buffer[:, :, start:end]], dim=2)
            v_grown = v = torch.cat([v_grown, v_buffer[:, :, start:end]], dim=2)
        if copy_filled:
            k, v = k.clone(), v.clone()
        masks = {"bottom-right": causal_mask(n, end), "top-left": torch.ones(n, end, dtype=torch.bool).tril(),
                 "none": torch.ones(n, end, dtype=torch.bool)}
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[mask])
        outputs.append(layer.o_proj(heads.transpose(1, 2).reshape(B, n, h * d)))
    return torch.cat(outputs, dim=1), k_buffer, v_buffer


def test_a_cached_decode_with_fp32_buffers_fails_on_an_fp64_layer():
    def fp32_buffers(layer, x, chunk):
        out, k, v = decode(layer, x, chunk)
        return out, k.float(), v.float()

    fails(checks.check_cached_decode, fp32_buffers, "expected dtype torch.float64, got torch.float32")


def test_max_context_rounded_to_the_nearest_is_told_so():
    def rounded(memory_bytes, n_layers, n_kv_heads, d_head, bytes_per_element, batch):
        return round(memory_bytes / (2 * n_layers * n_kv_heads * d_head * bytes_per_element * batch))

    fails(checks.check_max_context, rounded, "expected 76,293 tokens, got 76294", "rounded up (or to the nearest)")


def test_the_model_cached_decode_passes(capsys):
    checks.check_cached_decode(model_solution("06_kv_cache.ipynb", "my_cached_decode"))
    assert capsys.readouterr().out.startswith("✓ ")


def test_a_right_loop_of_ones_own_passes(capsys):
    checks.check_cached_decode(decode)
    assert capsys.readouterr().out.startswith("✓ ")


def test_the_package_cache_and_the_layer_refuse_to_run():
    fails(checks.check_cached_decode, decode_with_the_package_cache, "GroupedQueryAttention.new_cache",
          "the exercise is to write that step yourself")
    fails(checks.check_cached_decode, decode_with_kvcache_append, "calls attention_book.kv_cache.KVCache")

    def by_the_layers_forward(layer, x, chunk):
        return layer(x, is_causal=True)[0], *layer.keys_values(x)
    fails(checks.check_cached_decode, by_the_layers_forward, "GroupedQueryAttention.forward")


def test_a_cache_copied_as_it_grows_fails_on_its_bytes():
    message = fails(checks.check_cached_decode, lambda layer, x, chunk: decode(layer, x, chunk, grow=True),
                    "bytes of new tensors over the 64 calls", "something that grows with the calls is copied")
    assert "n_heads=2, x (1, 64, 64), chunk=1" in message  # right on every input, too many bytes on the long one
    fails(checks.check_cached_decode, lambda layer, x, chunk: decode(layer, x, chunk, copy_filled=True),
          "something that grows with the calls is copied")


def test_the_masks_mistakes_are_named():
    fails(checks.check_cached_decode, lambda layer, x, chunk: decode(layer, x, chunk, mask="top-left"),
          "Likely mistake: the mask is aligned top-left")
    fails(checks.check_cached_decode, lambda layer, x, chunk: decode(layer, x, chunk, mask="none"),
          "chunk=3", "Likely mistake: the tokens of a chunk also see the later tokens")

    def whole_buffer(layer, x, chunk):  # every position of the buffers, written or not
        B, L, _ = x.shape
        h, d = layer.n_heads, layer.d_head
        k_buffer, v_buffer = x.new_zeros(B, h, L, d), x.new_zeros(B, h, L, d)
        outputs = []
        for start in range(0, L, chunk):
            x_new = x[:, start:start + chunk]
            n, end = x_new.shape[1], start + x_new.shape[1]
            q = layer.q_proj(x_new).view(B, n, h, d).transpose(1, 2)
            k_buffer[:, :, start:end] = layer.k_proj(x_new).view(B, n, h, d).transpose(1, 2)
            v_buffer[:, :, start:end] = layer.v_proj(x_new).view(B, n, h, d).transpose(1, 2)
            mask = torch.cat([causal_mask(n, end), torch.ones(n, L - end, dtype=torch.bool)], dim=1)
            heads = F.scaled_dot_product_attention(q, k_buffer, v_buffer, attn_mask=mask)
            outputs.append(layer.o_proj(heads.transpose(1, 2).reshape(B, n, h * d)))
        return torch.cat(outputs, dim=1), k_buffer, v_buffer
    fails(checks.check_cached_decode, whole_buffer, "Likely mistake: the queries also attend to the positions of the "
                                                    "buffers not written yet")


def test_projecting_every_token_first_is_not_a_decode_loop():
    fails(checks.check_cached_decode, lambda layer, x, chunk: decode(layer, x, chunk, all_at_once=True),
          "the layer's projections ran on these numbers of tokens, in this order: k_proj(3), v_proj(3), q_proj(1)")


def test_the_buffers_are_checked_and_returned():
    fails(checks.check_cached_decode, lambda layer, x, chunk: decode(layer, x, chunk)[0], "expected a tuple")

    def buffers_swapped(layer, x, chunk):
        out, k_buffer, v_buffer = decode(layer, x, chunk)
        return out, v_buffer, k_buffer
    fails(checks.check_cached_decode, buffers_swapped, "your cached decoding's k_buffer")


# Chapter 7 ------------------------------------------------------------------------------------------------------

def mqa_broadcast(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def test_the_model_mqa_attention_passes_and_so_do_other_ways_without_copies(capsys):
    checks.check_mqa_attention(model_solution("07_multi_query.ipynb", "mqa_attention"))

    def by_einsum(q, k, v):
        scores = torch.einsum("bhld,bsd->bhls", q, k[:, 0]) / math.sqrt(q.shape[-1])
        return torch.einsum("bhls,bsd->bhld", torch.softmax(scores, dim=-1), v[:, 0])
    checks.check_mqa_attention(by_einsum)

    def head_by_head(q, k, v):
        return torch.stack([mqa_broadcast(q[:, i], k[:, 0], v[:, 0]) for i in range(q.shape[1])], dim=1)
    checks.check_mqa_attention(head_by_head)
    assert capsys.readouterr().out.count("✓ ") == 3


def test_mqa_attention_refuses_what_its_text_forbids():
    fails(checks.check_mqa_attention, lambda q, k, v: grouped_query_sdpa(q, k, v), "grouped_query_sdpa",
          "the exercise is to write that step yourself")
    fails(checks.check_mqa_attention, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
          "torch.nn.functional.scaled_dot_product_attention, which the exercise says not to call")
    h = lambda q: q.shape[1]  # noqa: E731
    fails(checks.check_mqa_attention,
          lambda q, k, v: mqa_broadcast(q, k.repeat_interleave(h(q), dim=1), v.repeat_interleave(h(q), dim=1)),
          "calls torch.Tensor.repeat_interleave")
    fails(checks.check_mqa_attention,
          lambda q, k, v: mqa_broadcast(q, torch.repeat_interleave(k, h(q), dim=1), v), "torch.repeat_interleave")
    fails(checks.check_mqa_attention, lambda q, k, v: mqa_broadcast(q, k.repeat(1, h(q), 1, 1), v),
          "calls torch.Tensor.repeat,")


def test_mqa_attention_that_copies_the_kv_head_fails_on_its_bytes():
    # broadcasting in @ gives the right numbers, but torch.matmul copies k (and v) for the h heads: not at B = 1,
    # where it multiplies all the heads' rows by k at once, and so on the second input, the first with B > 1
    message = fails(checks.check_mqa_attention, mqa_broadcast, "from the keys or values alone", "4 times the 448 "
                    "bytes of the one K/V head")
    assert message.startswith("mqa_broadcast on q (2, 4, 1, 8)"), message
    fails(checks.check_mqa_attention,
          lambda q, k, v: mqa_broadcast(q, k.expand(-1, q.shape[1], -1, -1).contiguous(), v), "aten.clone")
    fails(checks.check_mqa_attention, lambda q, k, v: mqa_broadcast(q, k[:, [0] * q.shape[1]], v), "aten.index")

    def copied_into_a_buffer(q, k, v):
        buffer = torch.empty(q.shape[0], q.shape[1], *k.shape[2:])
        buffer.copy_(k.expand_as(buffer))
        return mqa_broadcast(q, buffer, v[:, 0])
    fails(checks.check_mqa_attention, copied_into_a_buffer, "from the keys or values alone (aten.copy_")


def test_mqa_attention_mistakes_are_named():
    def heads_interleaved(q, k, v):
        B, h, L, d = q.shape
        rows = q.transpose(1, 2).reshape(B, L * h, d)
        return mqa_broadcast(rows, k[:, 0], v[:, 0]).reshape(B, h, L, d)
    fails(checks.check_mqa_attention, heads_interleaved, "Likely mistake: the query heads' rows were stacked in one "
                                                         "order and put back in another")


def mqa_forward(layer, x, attention=None, causal=True, merge=True):
    """An MQA layer's causal forward from its projections; ``attention(q, k, v, mask)`` replaces the folded one."""
    B, L, _ = x.shape
    h, d = layer.n_heads, layer.d_head
    q = layer.q_proj(x).view(B, L, h, d).transpose(1, 2)
    k, v = layer.k_proj(x), layer.v_proj(x)  # (B, L, d)
    mask = torch.ones(L, L, dtype=torch.bool).tril() if causal else torch.ones(L, L, dtype=torch.bool)
    if attention is None:
        scores = (q.reshape(B, h * L, d) @ k.transpose(1, 2) / math.sqrt(d)).view(B, h, L, L)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        heads = (weights.view(B, h * L, L) @ v).view(B, h, L, d)
    else:
        heads = attention(q, k[:, None], v[:, None], mask)
    merged = heads.transpose(1, 2).reshape(B, L, h * d) if merge else heads.reshape(B, L, h * d)
    return layer.o_proj(merged)


def broadcast_attention(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_the_model_mqa_forward_passes(capsys):
    checks.check_mqa_forward(model_solution("07_multi_query.ipynb", "my_mqa_forward"))
    checks.check_mqa_forward(mqa_forward)
    assert capsys.readouterr().out.count("✓ ") == 2


def test_mqa_forward_refuses_the_layer_and_sdpa():
    fails(checks.check_mqa_forward, lambda layer, x: layer(x, is_causal=True)[0],
          "calls attention_book.attention_layer.GroupedQueryAttention.forward")
    fails(checks.check_mqa_forward,
          lambda layer, x: mqa_forward(layer, x, lambda q, k, v, mask: F.scaled_dot_product_attention(
              q, k, v, attn_mask=mask, enable_gqa=True)), "scaled_dot_product_attention, which the exercise says")

    def from_keys_values(layer, x):
        k, v = layer.keys_values(x)
        return mqa_forward(layer, x, lambda q, _k, _v, mask: broadcast_attention(q, k, v, mask))
    fails(checks.check_mqa_forward, from_keys_values, "GroupedQueryAttention.keys_values")


def test_mqa_forward_that_copies_the_kv_head_fails_on_its_bytes():
    fails(checks.check_mqa_forward, lambda layer, x: mqa_forward(layer, x, broadcast_attention),
          "from the keys or values alone (aten.clone", "is copied for them")

    def expanded(q, k, v, mask):
        return broadcast_attention(q, k.expand(-1, q.shape[1], -1, -1).contiguous(), v, mask)
    fails(checks.check_mqa_forward, lambda layer, x: mqa_forward(layer, x, expanded), "4 times the 24 bytes")


def test_mqa_forward_mistakes_are_named():
    fails(checks.check_mqa_forward, lambda layer, x: mqa_forward(layer, x, causal=False),
          "Likely mistake: no causal mask")
    fails(checks.check_mqa_forward, lambda layer, x: mqa_forward(layer, x, merge=False),
          "Likely mistake: the heads were merged without moving the head dimension after L")


# Answers that call the package's own solution of the build exercise's step: each check must refuse them.
CHEATS = {
    "check_cached_decode": decode_with_the_package_cache,
    "check_mqa_attention": lambda q, k, v: grouped_query_sdpa(q, k, v),
    "check_mqa_forward": lambda layer, x: layer(x, is_causal=True)[0],
}


def test_a_fifth_learners_mistakes_in_chapter_7_are_named():
    assert "Likely mistake: the biases were left out" in fails(
        checks.check_mqa_param_count, lambda d_model, n_heads: 2 * d_model * (d_model + d_model // n_heads))

    def one_triangle_over_the_stacked_rows(layer, x):
        B, L, _ = x.shape
        h, d = layer.n_heads, layer.d_head
        q = layer.q_proj(x).view(B, L, h, d).transpose(1, 2).reshape(B, h * L, d)
        scores = q @ layer.k_proj(x).transpose(1, 2) / math.sqrt(d)  # (B, h L, L)
        scores = scores.masked_fill(~torch.ones(h * L, L, dtype=torch.bool).tril(), float("-inf"))
        heads = (torch.softmax(scores, dim=-1) @ layer.v_proj(x)).view(B, h, L, d)
        return layer.o_proj(heads.transpose(1, 2).reshape(B, L, h * d))

    assert "the (L, L) mask applies to each head's L rows" in fails(checks.check_mqa_forward,
                                                                     one_triangle_over_the_stacked_rows)
