"""The build exercises of chapters 13 to 15: the tiled loop for one head, the absorbed decode step of MLA, and the
ring buffer's append with its mask. Their checks pass the model solutions, name the usual mistakes, refuse the
package's own solution and what the exercise says not to call, and measure the memory the exercise bounds.

``CHEATS`` (collected by tests/test_exercises_build.py): answers that call the package's own solution of the step,
for the build exercises and for the chapters' other exercises whose step the package solves.
"""

import math

import attention_book.checks as checks
import pytest
import torch
import torch.nn.functional as F
from attention_book.cache_diet import (RingKVCache, cache_bytes_at, layer_windows, quantize_keys_per_channel,
                                       window_mask)
from attention_book.flash import merge_partials, tiled_attention
from attention_book.masks import causal_mask
from attention_book.mla import absorbed_attention
from exercise_answers import fails, model_solution


def cheat_tiled(q, k, v, block_k, is_causal=False):
    return tiled_attention(q[None, None], k[None, None], v[None, None], is_causal=is_causal, block_k=block_k)[0, 0]


def cheat_absorbed(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
    out = absorbed_attention(q_nope[:, :, None], q_rope[:, :, None], latent, w_uk, w_uv, scale)  # (B, h, 1, d_v)
    return out.transpose(1, 2).reshape(q_nope.shape[0], -1) @ w_o.T


def cheat_ring(buffer, positions, new, length, window, n_sinks):
    ring = RingKVCache(buffer.shape[0], buffer.shape[1], buffer.shape[3], window, n_sinks)
    return ring.append(new, new)[0], ring.causal_mask(new.shape[2])


def cheat_merge_two(out_a, lse_a, out_b, lse_b):
    return merge_partials(torch.stack((out_a, out_b)), torch.stack((lse_a, lse_b)))


def cheat_quantize_keys(k):
    q = quantize_keys_per_channel(k)
    return q.data, q.scale, q.zero


def cheat_local_global_bytes(context, n_layers, local_per_global, window, n_kv_heads, d_head, bytes_per_element):
    return cache_bytes_at(context, layer_windows(n_layers, local_per_global, window), n_kv_heads, d_head,
                          bytes_per_element)


CHEATS = {"check_tiled_one_head": cheat_tiled, "check_absorbed_decode_step": cheat_absorbed,
          "check_ring_append": cheat_ring, "check_merge_two": cheat_merge_two,
          "check_quantize_keys": cheat_quantize_keys, "check_local_global_bytes": cheat_local_global_bytes}


# chapter 13: the tiled loop for one head

def tiled_without_rescaling_the_output(q, k, v, block_k, is_causal=False):
    L, S = q.shape[0], k.shape[0]
    q = q / q.shape[1] ** 0.5
    top, total, out = torch.full((L, 1), float("-inf")), torch.zeros(L, 1), torch.zeros(L, v.shape[1])
    for start in range(0, S, block_k):
        tile = q @ k[start:start + block_k].T
        if is_causal:
            tile = tile.masked_fill(torch.arange(start, start + tile.shape[1]) > torch.arange(L)[:, None] + S - L,
                                    float("-inf"))
        new_top = torch.maximum(top, tile.amax(1, keepdim=True))
        weights = torch.exp(tile - new_top)
        total = total * torch.exp(top - new_top) + weights.sum(1, keepdim=True)
        out = out + weights @ v[start:start + block_k]  # the mistake: not rescaled
        top = new_top
    return out / total


def tiled_materialising(q, k, v, block_k, is_causal=False):
    """Right values, but through the whole (L, S) matrix of scores."""
    scores = q @ k.T / q.shape[1] ** 0.5
    if is_causal:
        scores = scores.masked_fill(~causal_mask(q.shape[0], k.shape[0]), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def tiled_top_left(q, k, v, block_k, is_causal=False):
    return tiled_materialising(q, k, v, block_k, False) if not is_causal else torch.softmax(
        (q @ k.T / q.shape[1] ** 0.5).masked_fill(~torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril(),
                                                  float("-inf")), -1) @ v


def test_a_tiled_loop_that_does_not_rescale_its_output_is_told_so():
    assert "Likely mistake: the running output was not rescaled" in fails(checks.check_tiled_one_head,
                                                                          tiled_without_rescaling_the_output)


def test_a_top_left_causal_mask_is_told_so():
    assert "Likely mistake: the causal mask is aligned top-left" in fails(checks.check_tiled_one_head,
                                                                          tiled_top_left)


def test_a_loop_that_holds_the_whole_score_matrix_fails_on_its_memory():
    message = fails(checks.check_tiled_one_head, tiled_materialising)
    assert "bytes of new tensors at once" in message and "(L, S) matrix" in message, message


def test_a_tiled_loop_may_not_call_sdpa():
    def blockwise_sdpa(q, k, v, block_k, is_causal=False):
        mask = causal_mask(q.shape[0], k.shape[0]) if is_causal else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    message = fails(checks.check_tiled_one_head, blockwise_sdpa)
    assert "calls torch.nn.functional.scaled_dot_product_attention, which the exercise says not to call" in message


# chapter 14: the absorbed decode step

def absorbed_without_rope(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
    B, h, d_nope = q_nope.shape
    d_c = w_uk.shape[1]
    absorbed = torch.einsum("bhn,hnc->bhc", q_nope, w_uk.view(h, d_nope, d_c))
    weights = torch.softmax(absorbed @ latent[..., :d_c].transpose(1, 2) * scale, dim=-1)
    heads = torch.einsum("bhc,hvc->bhv", weights @ latent[..., :d_c], w_uv.view(h, -1, d_c))
    return heads.reshape(B, -1) @ w_o.T


def rebuilding_every_key(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
    """Right values, the naive way written by hand: every head's keys and values rebuilt."""
    B, h, d_nope = q_nope.shape
    S, d_c = latent.shape[1], w_uk.shape[1]
    keys = (latent[..., :d_c] @ w_uk.T).view(B, S, h, d_nope).transpose(1, 2)  # (B, h, S, d_nope)
    values = (latent[..., :d_c] @ w_uv.T).view(B, S, h, -1).transpose(1, 2)  # (B, h, S, d_v)
    scores = (keys @ q_nope[..., None])[..., 0] + q_rope @ latent[..., d_c:].transpose(1, 2)  # (B, h, S)
    out = (torch.softmax(scores * scale, dim=-1)[:, :, None] @ values)[:, :, 0]  # (B, h, d_v)
    return out.reshape(B, -1) @ w_o.T


def test_an_absorbed_step_without_the_rope_part_is_told_so():
    assert "Likely mistake: the scores left out the RoPE part" in fails(checks.check_absorbed_decode_step,
                                                                        absorbed_without_rope)


def test_an_absorbed_step_that_rebuilds_the_keys_fails_on_its_memory():
    message = fails(checks.check_absorbed_decode_step, rebuilding_every_key)
    assert "as much as one key per head per cached token" in message, message


def test_an_absorbed_step_may_not_call_sdpa():
    def folded_through_sdpa(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
        B, h, d_nope = q_nope.shape
        d_c = w_uk.shape[1]
        q = torch.cat((torch.einsum("bhn,hnc->bhc", q_nope, w_uk.view(h, d_nope, d_c)), q_rope), -1)[:, None]
        mixed = F.scaled_dot_product_attention(q, latent[:, None], latent[:, None], scale=scale)[:, 0, :, :d_c]
        return torch.einsum("bhc,hvc->bhv", mixed, w_uv.view(h, -1, d_c)).reshape(B, -1) @ w_o.T

    message = fails(checks.check_absorbed_decode_step, folded_through_sdpa)
    assert "calls torch.nn.functional.scaled_dot_product_attention, which the exercise says not to call" in message


# chapter 15: the ring's append and its mask

def ring_writing_first(buffer, positions, new, length, window, n_sinks):
    """Writes the chunk, then returns the old slots: the chunk has overwritten some."""
    L_new = new.shape[2]
    filled = min(length, n_sinks + window)
    old_positions = positions[:filled].clone()
    for t in range(length, length + L_new):
        slot = t if t < n_sinks else n_sinks + (t - n_sinks) % window
        buffer[:, :, slot], positions[slot] = new[:, :, t - length], t
    key_at = torch.cat((old_positions, torch.arange(length, length + L_new)))[None, :]
    query_at = torch.arange(length, length + L_new)[:, None]
    mask = (key_at <= query_at) & ((query_at - key_at < window) | (key_at < n_sinks))
    return torch.cat((buffer[:, :, :filled], new), dim=2), mask


def ring_keys_and_mask(buffer, positions, new, length, window, n_sinks):
    """The keys and mask a ring's append returns, read before anything is written (the model solution's way)."""
    L_new = new.shape[2]
    filled = min(length, n_sinks + window)
    keys = torch.cat((buffer[:, :, :filled], new), dim=2)
    key_at = torch.cat((positions[:filled], torch.arange(length, length + L_new)))[None, :]
    query_at = torch.arange(length, length + L_new)[:, None]
    return keys, (key_at <= query_at) & ((query_at - key_at < window) | (key_at < n_sinks))


def ring_overwriting_the_sinks(buffer, positions, new, length, window, n_sinks):
    keys, mask = ring_keys_and_mask(buffer, positions, new, length, window, n_sinks)
    for t in range(length, length + new.shape[2]):
        slot = t % (n_sinks + window)  # the mistake
        buffer[:, :, slot], positions[slot] = new[:, :, t - length], t
    return keys, mask


def test_a_ring_that_writes_before_it_returns_the_old_slots_is_told_so():
    assert "Likely mistake: the old slots were taken after the new tokens were written" in fails(
        checks.check_ring_append, ring_writing_first)


def test_a_ring_that_overwrites_its_sinks_is_told_so():
    assert "Likely mistake: the sinks were overwritten" in fails(checks.check_ring_append, ring_overwriting_the_sinks)


def test_a_ring_may_not_call_window_mask():
    solution = model_solution("15_cache_diet", "ring_append")

    def ring_with_window_mask(buffer, positions, new, length, window, n_sinks):
        window_mask(new.shape[2], length + new.shape[2], window, n_sinks)
        return solution(buffer, positions, new, length, window, n_sinks)

    message = fails(checks.check_ring_append, ring_with_window_mask)
    assert "calls attention_book.cache_diet.window_mask, which the exercise says not to call" in message


def test_the_package_ring_is_refused_with_the_packages_reason():
    message = fails(checks.check_ring_append, cheat_ring)
    assert "calls attention_book.cache_diet.RingKVCache, the package's own solution of this step" in message


def test_a_block_size_that_never_goes_below_one_is_told_so():
    def at_least_one_key(budget_bytes, block_q, d_head, bytes_per_number):
        return max(1, budget_bytes // ((block_q + 2 * d_head) * bytes_per_number))

    message = fails(checks.check_largest_block_k, at_least_one_key)
    assert message.startswith("budget_bytes=64,") and "expected block_k = 0, got 1" in message, message
    assert "not even one key per block fits in this budget" in message.split("Likely mistake: ")[1], message


def test_an_absorbed_step_whose_product_broadcasts_the_cache_over_the_heads_is_told_why():
    """The 4-D form (B, h, 1, d_c) @ (B, 1, d_c, S): torch.matmul expands the cache to h copies before multiplying."""
    def broadcasting(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
        B, h, d_nope = q_nope.shape
        d_c = w_uk.shape[1]
        absorbed = torch.einsum("bhn,hnc->bhc", q_nope, w_uk.view(h, d_nope, d_c))[:, :, None]  # (B, h, 1, d_c)
        rows = latent[:, None]  # (B, 1, S, d_c + d_rope): one "head" for all
        scores = absorbed @ rows[..., :d_c].transpose(-1, -2) + q_rope[:, :, None] @ rows[..., d_c:].transpose(-1, -2)
        mixed = (torch.softmax(scores * scale, dim=-1) @ rows[..., :d_c])[:, :, 0]  # (B, h, d_c)
        return torch.einsum("bhc,hvc->bhv", mixed, w_uv.view(h, -1, d_c)).reshape(B, -1) @ w_o.T

    message = fails(checks.check_absorbed_decode_step, broadcasting)
    assert "as much as one key per head per cached token" in message, message
    assert "torch.matmul broadcasting an operand" in message and "h copies of the cache" in message, message


def test_an_absorbed_step_that_rebuilds_the_keys_one_head_at_a_time_fails_on_its_products():
    """One head's keys at a time never holds B × h × S × d_nope numbers: the FLOPs of its products tell."""
    def head_by_head(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale):
        B, h, d_nope = q_nope.shape
        d_c, d_v = w_uk.shape[1], w_uv.shape[0] // h
        c_kv, k_rope = latent[..., :d_c], latent[..., d_c:]
        outs = []
        for i in range(h):
            k = c_kv @ w_uk[i * d_nope:(i + 1) * d_nope].T  # (B, S, d_nope): head i's keys, rebuilt
            v = c_kv @ w_uv[i * d_v:(i + 1) * d_v].T
            scores = (q_nope[:, i:i + 1] @ k.transpose(1, 2) + q_rope[:, i:i + 1] @ k_rope.transpose(1, 2)) * scale
            outs.append(torch.softmax(scores, dim=-1) @ v)  # (B, 1, d_v)
        return torch.cat(outs, dim=-1)[:, 0] @ w_o.T

    fails(checks.check_absorbed_decode_step, head_by_head, "its matrix products did",
          "rebuilding one key per head per cached token")


def ring_by_one_indexed_write(buffer, positions, new, length, window, n_sinks):
    """The model solution's keys and mask, but the chunk written in one indexed write: a chunk longer than the window
    writes some slots twice."""
    keys, mask = ring_keys_and_mask(buffer, positions, new, length, window, n_sinks)
    t = torch.arange(length, length + new.shape[2])
    slots = torch.where(t < n_sinks, t, n_sinks + (t - n_sinks) % window)
    buffer[:, :, slots], positions[slots] = new, t
    return keys, mask


def test_a_ring_that_writes_one_slot_twice_in_one_indexed_write_fails():
    fails(checks.check_ring_append, ring_by_one_indexed_write, "wrote two values to the same place",
          "appending 4")


@pytest.mark.parametrize("order, named", [
    ("slots", "no key was hidden for being too far back"),
    ("as if in position order", "once the ring has wrapped, slot order is not position order")])
def test_a_ring_mask_that_ignores_the_keys_positions_is_told_so(order, named):
    solution = model_solution("15_cache_diet", "ring_append")

    def ring(buffer, positions, new, length, window, n_sinks):
        keys, _ = solution(buffer, positions, new, length, window, n_sinks)
        L_new, S = new.shape[2], keys.shape[2]
        if order == "slots":
            return keys, causal_mask(L_new, S)
        key_at = torch.arange(length + L_new - S, length + L_new)[None, :]
        query_at = torch.arange(length, length + L_new)[:, None]
        return keys, (key_at <= query_at) & ((query_at - key_at < window) | (key_at < n_sinks))

    assert named in fails(checks.check_ring_append, ring).split("Likely mistake: ")[1]


def test_quantize_keys_that_divides_by_a_zero_scale_fails_though_this_machine_gives_the_right_bytes():
    def dividing(k):
        low, high = k.amin(0, keepdim=True), k.amax(0, keepdim=True)
        scale = (high - low) / 255
        return (torch.round((k - low) / scale) - 128).to(torch.int8), scale, low + 128 * scale

    fails(checks.check_quantize_keys, dividing, "(channel 1 is constant: its scale is 0)", "turned NaN or inf into")


def test_a_tiled_loop_over_query_blocks_with_whole_rows_of_scores_fails_on_its_products():
    """Blocks of queries, each with a whole row of scores and a plain softmax: it fits the memory bound but never
    walks over the keys."""
    def query_blocks(q, k, v, block_k, is_causal=False):
        L, S = q.shape[0], k.shape[0]
        out = torch.empty(L, v.shape[1])
        for i0 in range(0, L, 16):
            s = q[i0:i0 + 16] @ k.T / q.shape[1] ** 0.5
            if is_causal:
                s = s.masked_fill(torch.arange(S) > torch.arange(i0, i0 + s.shape[0])[:, None] + S - L, -math.inf)
            out[i0:i0 + 16] = torch.softmax(s, dim=-1) @ v
        return out

    fails(checks.check_tiled_one_head, query_blocks, "all S = 1024 keys at once", "block_k = 16 rows at a time")


def test_a_tiled_loop_that_normalises_each_block_alone_is_told_so():
    def each_block(q, k, v, block_k, is_causal=False):
        L, S = q.shape[0], k.shape[0]
        out = torch.zeros(L, v.shape[1])
        for j0 in range(0, S, block_k):
            s = q @ k[j0:j0 + block_k].T / q.shape[1] ** 0.5
            if is_causal:
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[1]) > torch.arange(L)[:, None] + S - L, -math.inf)
            out = out + torch.softmax(s, dim=-1).nan_to_num(0.0) @ v[j0:j0 + block_k]
        return out

    assert "normalised by a softmax of its own" in fails(checks.check_tiled_one_head, each_block)


def test_merge_two_that_exponentiates_each_lse_overflows_and_is_told_so():
    def by_exp(out_a, lse_a, out_b, lse_b):
        a, b = torch.exp(lse_a), torch.exp(lse_b)
        total = a + b
        return (a * out_a + b * out_b) / total, torch.log(total)

    message = fails(checks.check_merge_two, by_exp, "lse_a [100.0]")
    assert "overflows fp32" in message.split("Likely mistake: ")[1], message


def test_quantize_keys_with_the_unsigned_zero_point_is_told_so():
    def unsigned_zero(k):
        low, high = k.amin(0, keepdim=True), k.amax(0, keepdim=True)
        scale = (high - low) / 255
        step = torch.where(scale > 0, scale, torch.ones_like(scale))
        return (torch.round((k - low) / step) - 128).to(torch.int8), scale, low

    assert "as for unsigned levels 0 .. 255" in fails(checks.check_quantize_keys, unsigned_zero)


def test_local_global_bytes_that_starts_with_a_global_layer_is_told_so():
    def global_first(context, n_layers, local_per_global, window, n_kv_heads, d_head, bytes_per_element):
        per_token = 2 * n_kv_heads * d_head * bytes_per_element
        return sum(per_token * (context if i % (local_per_global + 1) == 0 else min(context, window))
                   for i in range(n_layers))

    assert "the pattern started with a global layer" in fails(checks.check_local_global_bytes, global_first)


def test_a_loop_over_queries_with_a_softmax_over_all_keys_fails_on_its_exponentials():
    """No matrix product and one (S,) row at a time: under the memory bound, but not tiled over the keys."""
    def row_by_row(q, k, v, block_k, is_causal=False):
        L, S = q.shape[0], k.shape[0]
        out = torch.empty(L, v.shape[1])
        for i in range(L):
            scores = (q[i][None] * k).sum(-1) / q.shape[1] ** 0.5  # (S,)
            if is_causal:
                scores = scores.masked_fill(torch.arange(S) > i + S - L, -math.inf)
            out[i] = (torch.softmax(scores, dim=-1)[:, None] * v).sum(0)
        return out

    fails(checks.check_tiled_one_head, row_by_row, "an exponential (exp, softmax) of a tensor of shape (1024,)")


def test_merge_two_without_a_guard_for_minus_infinity_is_told_only_that():
    def unguarded(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse

    likely = fails(checks.check_merge_two, unguarded).split("Likely mistake: ")[1]
    assert "exp(-inf + inf) is NaN" in likely and "overflows" not in likely, likely


def test_largest_block_k_rounded_up_names_the_zero_case_first():
    message = fails(checks.check_largest_block_k,
                    lambda budget, block_q, d_head, b: -(-budget // ((block_q + 2 * d_head) * b)))
    likely = message.split("Likely mistake: ")[1]
    assert likely.startswith("not even one key per block fits") and "rounded up" in likely, message


def absorbed(q_nope, q_rope, latent, w_uk, w_uv, w_o, scale, nope_scale=None, uv_view="(h, d_v, d_c)", clone=False):
    """The absorbed step, right by default, or with the scale on one term, w_uv's blocks read transposed, or the
    cache cloned for each head."""
    (_, h, d_nope), d_c = q_nope.shape, w_uk.shape[1]
    d_v = w_uv.shape[0] // h
    uv = w_uv.view(h, d_v, d_c) if uv_view == "(h, d_v, d_c)" else w_uv.reshape(h, d_c, d_v).transpose(1, 2)
    outs = []
    for i in range(h):
        rows = latent.clone() if clone else latent
        c_kv, k_rope = rows[..., :d_c], rows[..., d_c:]
        absorbed_q = q_nope[:, i] @ w_uk[i * d_nope:(i + 1) * d_nope]  # (B, d_c)
        nope = (absorbed_q[:, None] @ c_kv.transpose(1, 2))[:, 0] * (scale if nope_scale is None else nope_scale)
        rope = (q_rope[:, i:i + 1] @ k_rope.transpose(1, 2))[:, 0] * scale
        mixed = (torch.softmax(nope + rope, dim=-1)[:, None] @ c_kv)[:, 0]  # (B, d_c)
        outs.append(mixed @ uv[i].T)  # (B, d_v)
    return torch.cat(outs, dim=-1) @ w_o.T


@pytest.mark.parametrize("how, named", [
    (dict(), None),
    (dict(nope_scale=1.0), "scale multiplied only the RoPE term"),
    (dict(uv_view="(h, d_c, d_v)"), "each head's block of w_uv was read as (d_c, d_v)"),
    (dict(clone=True), "the cache was copied for one head after another"),
])
def test_the_absorbed_step_names_the_learners_mistakes(how, named):
    def answer(*args):
        return absorbed(*args, **how)
    if named is None:
        checks.check_absorbed_decode_step(answer)  # a head loop without copies passes
    else:
        assert named in fails(checks.check_absorbed_decode_step, answer)
