"""Checks for chapter 15's exercises: the slot of a ring-buffer cache, int8 quantisation of keys per channel, and
the cache bytes of a local/global layer pattern."""
import torch

from ..cache_diet import cache_bytes_at, layer_windows, quantize_keys_per_channel
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint


@_exercise("ring_slot",
           task="given position (the absolute position of a token, from 0), window and n_sinks, return an int: "
                "the slot of a ring-buffer cache of n_sinks + window slots that the token is written to. The first "
                "n_sinks tokens keep slots 0 .. n_sinks - 1 for good; the others take the remaining window slots "
                "in turn, each overwriting the token window positions before it.",
           hint="A sink (position < n_sinks) is written to its own position. Any other token is the "
                "(position - n_sinks)-th token of the ring, which has window slots starting at slot n_sinks: "
                "n_sinks + (position - n_sinks) % window.")
def check_ring_slot(fn):
    """fn(position, window, n_sinks) -> the slot (an int) the token at that position is written to.

    Tried on a grid of small cases (windows 1 to 5, 0 to 3 sinks, positions 0 to 19); compared with
    ``RingKVCache.slot_of``'s formula.
    """
    cases = [(p, w, s) for w in (1, 2, 5) for s in (0, 1, 3) for p in range(20)]
    for position, window, n_sinks in cases:
        expected = position if position < n_sinks else n_sinks + (position - n_sinks) % window
        got = _call(fn, (position, window, n_sinks), "ring_slot")
        if got == expected and isinstance(got, int):
            continue
        likely = {position % window: "the sinks were forgotten: the ring starts after the n_sinks sink slots",
                  n_sinks + position % window: "the ring's index counts from position 0: count from n_sinks",
                  position % (window + n_sinks): "the sinks were overwritten: they keep their slots for good"}
        note = f"\nLikely mistake: {likely[got]}" if got in likely and got != expected else ""
        if got == expected:
            note = "\nLikely mistake: the result must be an int"
        raise CheckFailed(f"position={position}, window={window}, n_sinks={n_sinks}: expected slot {expected}, "
                          f"got {got!r}{note}")
    print(f"✓ ring_slot is right on {len(cases)} cases, with and without sinks.")


@_exercise("quantize_keys",
           task="given k (S, d_head), float keys, return (data, scale, zero): data (S, d_head) int8, scale and zero "
                "(1, d_head) float, one per channel (column), such that data * scale + zero is within scale / 2 "
                "of k. Use the full range: each channel's minimum maps to -128 and its maximum to 127. A constant "
                "channel (minimum = maximum) gets scale 0 and must come back exactly: do not divide by its scale.",
           hint="Per channel (over the S rows, dim=0 with keepdim=True): low = min, high = max, scale = "
                "(high - low) / 255. Then data = round((k - low) / scale) - 128 as int8, and zero = low + 128 * "
                "scale, so that data * scale + zero = low + round(...) * scale. For a constant channel divide by 1 "
                "instead of 0: torch.where(scale > 0, scale, torch.ones_like(scale)).")
def check_quantize_keys(fn):
    """fn(k (S, d_head)) -> (data (S, d_head) int8, scale (1, d_head), zero (1, d_head)), per channel.

    Tried on 4 random key tensors (S 2 to 16) whose channels have very different ranges, as real keys do, and one
    with a constant channel (scale 0, which must come back exactly); scale and
    zero compared with ``quantize_keys_per_channel``'s, and the round trip data * scale + zero with k (within
    scale / 2).
    """
    gen = torch.Generator().manual_seed(15)
    inputs = [torch.randn(S, d, generator=gen) * torch.logspace(-1, 1, d) + torch.randn(d, generator=gen)
              for S, d in [(2, 1), (4, 3), (8, 4), (16, 8)]]
    constant = torch.stack([torch.linspace(-2, 3, 5), torch.full((5,), 0.7), torch.linspace(1, 1.5, 5)], 1)  # (5, 3)
    inputs.insert(2, constant)  # in size order: the checks try the smallest inputs first
    for k in inputs:
        tried = f"k of shape {tuple(k.shape)}"
        where = f"quantize_keys on {tried}"
        got = _call(fn, (k,), "quantize_keys")
        if not (isinstance(got, (tuple, list)) and len(got) == 3):
            raise CheckFailed(f"{where}: expected a tuple (data, scale, zero), got {type(got).__name__}")
        data, scale, zero = got
        if not isinstance(data, torch.Tensor) or data.dtype != torch.int8 or data.shape != k.shape:
            raise CheckFailed(f"{where}: data must be an int8 tensor of shape {tuple(k.shape)}, got "
                              f"{getattr(data, 'dtype', type(data).__name__)} {tuple(getattr(data, 'shape', ()))}")
        expected = quantize_keys_per_channel(k)
        if isinstance(scale, torch.Tensor) and tuple(scale.shape) == (k.shape[0], 1) != tuple(expected.scale.shape):
            raise CheckFailed(f"your scale on {tried}: expected shape {tuple(expected.scale.shape)}, got "
                              f"{tuple(scale.shape)}\nLikely mistake: one scale per token (per row): keys are "
                              "quantised per channel, over the tokens")
        _compare("your scale", tried, expected.scale, scale, hint=_see_hint("quantize_keys"))
        _compare("your zero", tried, expected.zero, zero, hint=_see_hint("quantize_keys"), atol=1e-4)
        error = (data.to(k.dtype) * scale + zero - k).abs()
        if not bool(torch.isfinite(error).all() and (error <= scale / 2 + 1e-5).all()):
            raise CheckFailed(f"{where}: data * scale + zero is off k by up to {error.max().item():.3g}, more than "
                              f"scale / 2 somewhere\nHint: {_see_hint('quantize_keys')}")
    print(f"✓ quantize_keys quantises each channel to int8 within half a step, on {len(inputs)} inputs, one with a "
          "constant channel.")


@_exercise("local_global_bytes",
           task="given context (tokens of one sequence), n_layers, local_per_global, window, n_kv_heads, d_head "
                "and bytes_per_element, return an int: the bytes of K and V cached for that sequence by a model "
                "whose layers repeat local_per_global local layers (each caching at most the last window tokens) "
                "then one global layer (caching every token), starting with local ones.",
           hint="Layer i is global when (i + 1) % (local_per_global + 1) == 0. A global layer caches context "
                "tokens, a local one min(context, window). Each cached token costs 2 (K and V) x n_kv_heads x "
                "d_head x bytes_per_element in each layer. Sum over the layers.")
def check_local_global_bytes(fn):
    """fn(context, n_layers, local_per_global, window, n_kv_heads, d_head, bytes_per_element) -> the cache's bytes.

    Tried on toy models, SmolLM2's sizes and a Gemma-3-like pattern, at contexts below and above the window;
    compared with ``cache_bytes_at(context, layer_windows(...), ...)``.
    """
    cases = [(3, 2, 1, 2, 1, 1, 1), (8, 6, 5, 4, 1, 2, 2), (10, 4, 0, 3, 2, 2, 4), (512, 30, 5, 1024, 3, 64, 2),
             (8192, 30, 5, 1024, 3, 64, 2), (32_768, 34, 5, 1024, 4, 256, 2)]
    for context, n_layers, lpg, window, g, d_head, b in cases:
        expected = cache_bytes_at(context, layer_windows(n_layers, lpg, window), g, d_head, b)
        got = _call(fn, (context, n_layers, lpg, window, g, d_head, b), "local_global_bytes")
        if got == expected and isinstance(got, int):
            continue
        per_token = 2 * g * d_head * b
        n_global = n_layers // (lpg + 1)
        likely = {per_token * (n_global * context + (n_layers - n_global) * window):
                  "local layers were charged the whole window even when the context is shorter: min(context, window)",
                  expected // 2: "K and V: each cached token costs 2 x n_kv_heads x d_head x bytes_per_element",
                  per_token * ((n_layers - n_global) * context + n_global * min(context, window)):
                  "local and global were swapped: the pattern starts with local layers, and every "
                  "(local_per_global + 1)-th is global"}
        note = f"\nLikely mistake: {likely[got]}" if got in likely and got != expected else ""
        if got == expected:
            note = "\nLikely mistake: the result must be an int"
        raise CheckFailed(f"context={context}, n_layers={n_layers}, local_per_global={lpg}, window={window}, "
                          f"n_kv_heads={g}, d_head={d_head}, bytes_per_element={b}: expected {expected:,} bytes, "
                          f"got {got!r}{note}")
    print(f"✓ local_global_bytes is right on {len(cases)} cases, SmolLM2's and a Gemma-3-like pattern included.")
