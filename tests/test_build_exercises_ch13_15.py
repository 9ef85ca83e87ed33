"""The build exercises of chapters 13 to 15: the tiled loop for one head, the absorbed decode step of MLA, and the
ring buffer's append with its mask. Their checks pass the model solutions, name the usual mistakes, refuse the
package's own solution and what the exercise says not to call, and measure the memory the exercise bounds.

``CHEATS`` (collected by tests/test_exercises_build.py): answers that call the package's own solution of the step,
for the build exercises and for the chapters' other exercises whose step the package solves.
"""

import attention_book.checks as checks
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


def ring_overwriting_the_sinks(buffer, positions, new, length, window, n_sinks):
    L_new = new.shape[2]
    filled = min(length, n_sinks + window)
    keys = torch.cat((buffer[:, :, :filled], new), dim=2)
    key_at = torch.cat((positions[:filled], torch.arange(length, length + L_new)))[None, :]
    query_at = torch.arange(length, length + L_new)[:, None]
    mask = (key_at <= query_at) & ((query_at - key_at < window) | (key_at < n_sinks))
    for t in range(length, length + L_new):
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
    assert "Likely mistake: not even one key per block fits in this budget" in message, message


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
    assert "torch.matmul copies an operand it broadcasts" in message and "h copies of the cache" in message, message
