"""Checks for chapter 15's exercises: a ring-buffer cache's append and its mask, int8 quantisation of keys per
channel, and the cache bytes of a local/global layer pattern."""
import torch

from ..cache_diet import RingKVCache, cache_bytes_at, layer_windows, quantize_keys_per_channel
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _require_number, _see_hint
from ._watch import NON_FINITE, REPEATED, NonFiniteToInteger, RepeatedIndexWrite


# what the answer may not call: the package's ring and the mask it would give for a whole sequence
_RING_REFUSE = ["attention_book.cache_diet.RingKVCache", "attention_book.cache_diet.ring_caches",
                ("attention_book.cache_diet.window_mask", "which the exercise says not to call")]


def _ring_positions(n_tokens, window, n_sinks, slot_of):
    """The position held by each slot after n_tokens tokens, had each token gone to slot_of(t) (-1: empty)."""
    held = [-1] * (n_sinks + window)
    for t in range(n_tokens):
        slot = slot_of(t)
        if 0 <= slot < len(held):
            held[slot] = t
    return held


def _window_rule(query, key, window, n_sinks, width=None):
    """Which keys (positions (S,), -1: none) each query (positions (L, 1)) may attend to; ``width`` is the window
    as a mistake may read it (p - j <= window instead of < window)."""
    near = query - key < window if width is None else query - key <= width
    return (key >= 0) & (key <= query) & (near | (key < n_sinks))


@_exercise("ring_append",
           task="given buffer (B, g, n_sinks + window, d_head), the keys a ring holds, and positions "
                "(n_sinks + window,), the position of the token in each slot (-1 for an empty slot), both changed in "
                "place; new (B, g, L_new, d_head), the keys of the tokens at positions length .. length + L_new - 1, "
                "where length is how many tokens were appended before them; window and n_sinks: write each new "
                "token to its slot (the first n_sinks tokens keep slots 0 .. n_sinks - 1 for good, the others take "
                "the window slots after them in turn, each overwriting the token window positions before it) and "
                "return (keys, mask): keys (B, g, S, d_head), the slots filled before this call, in slot order and "
                "as they were before it, followed by the new keys (S = slots filled before + L_new); mask (L_new, S) "
                "bool, True where the new token at position p may attend to the key at position j: j <= p, and "
                "p - j < window or j < n_sinks. Do not call window_mask, RingKVCache or ring_caches.",
           hint="Slots 0 .. used - 1 are filled, with used = min(length, n_sinks + window). Take keys = "
                "torch.cat((buffer[:, :, :used], new), dim=2) and their positions torch.cat((positions[:used], "
                "torch.arange(length, length + L_new))) before writing anything: a long chunk overwrites slots its "
                "first tokens still read. The mask compares the queries' positions, a column (L_new, 1), with the "
                "keys' positions, a row: (j <= p) & ((p - j < window) | (j < n_sinks)). Then, for each new token t, "
                "slot = t if t < n_sinks else n_sinks + (t - n_sinks) % window; write buffer[:, :, slot] and "
                "positions[slot] = t, in order, so that later tokens overwrite earlier ones.",
           idea="Read the keys and their positions the call returns before writing anything: a long chunk overwrites "
                "slots its own first tokens still need. The mask is a comparison of positions, never of slot indices. "
                "Then write each new token to its slot in order, so that the last token for a slot keeps it.")
def check_ring_append(fn):
    """fn(buffer (B, g, n_sinks + window, d_head), positions (n_sinks + window,), new (B, g, L_new, d_head), length,
    window, n_sinks) -> (keys (B, g, S, d_head), mask (L_new, S)), buffer and positions updated in place.

    Tried on 4 rings (a window of 3 without sinks up to a window of 8 with 2 sinks, as drawn in the chapter), each
    fed a sequence of chunks (single tokens and chunks longer than the window, wrapping around several times);
    compared with RingKVCache: its buffer and slot positions after each append, the keys its append returns for a
    chunk (the old slots then the chunk) and its causal_mask, with the package's ring and window_mask made to
    refuse. An indexed write that writes one slot twice fails: which value stays is not defined.
    """
    gen = _generator(16)
    rings = [(1, 1, 2, 3, 0, [2, 3, 1, 4, 1]), (1, 2, 2, 4, 1, [1, 3, 1, 1, 6, 2]),
             (2, 1, 3, 5, 2, [7, 1, 1, 3, 1, 9]), (1, 2, 4, 8, 2, [6, 1, 6, 12, 1, 1])]
    for B, g, d_head, window, n_sinks, chunks in rings:  # the smallest ring first
        ring = RingKVCache(B, g, d_head, window, n_sinks)
        buffer = torch.zeros(B, g, n_sinks + window, d_head)
        positions = torch.full((n_sinks + window,), -1, dtype=torch.long)
        length = 0
        for L_new in chunks:
            new = torch.randn(B, g, L_new, d_head, generator=gen)
            used = ring.n_slots_used
            old = ring.k[:, :, :used].clone()  # the slots before this call
            key_positions = torch.cat((ring.slot_positions[:used], torch.arange(length, length + L_new)))
            ring.append(new, new.clone())
            expected_keys = torch.cat((old, new), dim=2)  # what RingKVCache.append returns for a chunk
            query = torch.arange(length, length + L_new)[:, None]  # (L_new, 1)
            expected_mask = _window_rule(query, key_positions[None, :], window, n_sinks)
            if L_new > 1:  # the package's own mask, for the keys its append returned
                expected_mask = ring.causal_mask(L_new)
            with RepeatedIndexWrite() as watch:
                got = _call(fn, (buffer, positions, new, length, window, n_sinks), "ring_append",
                            refuse=_RING_REFUSE)
            tried = (f"a ring of window={window}, n_sinks={n_sinks} (B={B}, g={g}, d_head={d_head}) after {length} "
                     f"tokens, appending {L_new} (positions {length} .. {length + L_new - 1})")
            if watch.seen:
                raise CheckFailed(f"ring_append on {tried}: {REPEATED}")
            if not (isinstance(got, (tuple, list)) and len(got) == 2):
                raise CheckFailed(f"ring_append on {tried}: expected a pair (keys, mask), keys of shape "
                                  f"{tuple(expected_keys.shape)} and mask of shape {tuple(expected_mask.shape)}, "
                                  f"got {got!r}")
            keys, mask = got
            after = ring.k[:, :, :used]  # the old slots after the chunk was written: a mistake
            _compare("your keys", tried, expected_keys, keys, hint=_see_hint("ring_append"),
                     mistakes=[("the old slots were taken after the new tokens were written: a chunk overwrites "
                                "slots that its first tokens still read", lambda: torch.cat((after, new), dim=2))])
            stale = torch.cat((ring.slot_positions[:used], key_positions[used:]))
            in_order = torch.arange(length + L_new - expected_keys.shape[2], length + L_new)[None, :]
            mask_mistakes = [("a window of window + 1 positions: p - j must be below window",
                              lambda: _window_rule(query, key_positions[None, :], window, n_sinks, width=window)),
                             ("no key was hidden for being too far back: only the future ones were",
                              lambda: _window_rule(query, key_positions[None, :], window + length + L_new, n_sinks)),
                             ("the mask reads the keys as if they were in position order, the last key at the last "
                              "position: once the ring has wrapped, slot order is not position order",
                              lambda: _window_rule(query, in_order, window, n_sinks)),
                             ("the sinks were not kept: the first n_sinks positions stay visible to every query",
                              lambda: _window_rule(query, key_positions[None, :], window, 0)),
                             ("a new token may see the chunk's later tokens: the mask must be causal (j <= p)",
                              lambda: (key_positions[None, :] >= 0) & ((query - key_positions[None, :] < window)
                                                                       | (key_positions[None, :] < n_sinks))),
                             ("the mask was built from the positions after the new tokens were written",
                              lambda: _window_rule(query, stale[None, :], window, n_sinks))]
            _compare("your mask", tried, expected_mask, mask, mistakes=mask_mistakes)
            held = ring.slot_positions.tolist()
            if not (isinstance(positions, torch.Tensor) and positions.tolist() == held):
                slot_mistakes = {
                    "the sinks were overwritten: they keep their slots for good":
                        lambda t: t % (n_sinks + window),
                    "the ring's index counts from position 0: count from n_sinks":
                        lambda t: t if t < n_sinks else n_sinks + t % window,
                    "the sinks were forgotten: the ring starts after the n_sinks sink slots":
                        lambda t: t % window}
                n = length + L_new
                likely = [what for what, slot_of in slot_mistakes.items()
                          if _ring_positions(n, window, n_sinks, slot_of) == positions.tolist() != held]
                note = f"\nLikely mistake: {likely[0]}" if likely else ""
                raise CheckFailed(f"your positions on {tried}: expected the slots to hold positions {held}, got "
                                  f"{positions.tolist()}{note}")
            _compare("your buffer after the call", tried, ring.k, buffer, hint=_see_hint("ring_append"))
            length += L_new
    print(f"✓ your ring_append fills the ring and masks its keys as RingKVCache does, on {len(rings)} rings fed "
          "single tokens and chunks longer than the window.")


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
    scale / 2); the package's quantisers made to refuse. Turning NaN or inf into integers fails (a division by the
    constant channel's zero scale makes them).
    """
    gen = _generator(15)
    inputs = [torch.randn(S, d, generator=gen) * torch.logspace(-1, 1, d) + torch.randn(d, generator=gen)
              for S, d in [(2, 1), (4, 3), (8, 4), (16, 8)]]
    constant = torch.stack([torch.linspace(-2, 3, 5), torch.full((5,), 0.7), torch.linspace(1, 1.5, 5)], 1)  # (5, 3)
    inputs.insert(2, constant)  # in size order: the checks try the smallest inputs first
    for k in inputs:
        tried = f"k of shape {tuple(k.shape)}"
        where = f"quantize_keys on {tried}"
        expected = quantize_keys_per_channel(k)
        with NonFiniteToInteger() as watch:
            got = _call(fn, (k,), "quantize_keys", refuse=["attention_book.cache_diet.quantize_keys_per_channel",
                                                           "attention_book.cache_diet.quantize_int8"])
        if not (isinstance(got, (tuple, list)) and len(got) == 3):
            raise CheckFailed(f"{where}: expected a tuple (data, scale, zero), got {type(got).__name__}")
        data, scale, zero = got
        if not isinstance(data, torch.Tensor) or data.dtype != torch.int8 or data.shape != k.shape:
            raise CheckFailed(f"{where}: data must be an int8 tensor of shape {tuple(k.shape)}, got "
                              f"{getattr(data, 'dtype', type(data).__name__)} {tuple(getattr(data, 'shape', ()))}")
        if isinstance(scale, torch.Tensor) and tuple(scale.shape) == (k.shape[0], 1) != tuple(expected.scale.shape):
            raise CheckFailed(f"your scale on {tried}: expected shape {tuple(expected.scale.shape)}, got "
                              f"{tuple(scale.shape)}\nLikely mistake: one scale per token (per row): keys are "
                              "quantised per channel, over the tokens")
        if watch.seen:
            raise CheckFailed(f"{where}{' (channel 1 is constant: its scale is 0)' if k is constant else ''}: "
                              f"{NON_FINITE}")
        _compare("your scale", tried, expected.scale, scale, hint=_see_hint("quantize_keys"))
        _compare("your zero", tried, expected.zero, zero, hint=_see_hint("quantize_keys"), atol=1e-4, mistakes=[
            ("zero is each channel's minimum, as for unsigned levels 0 .. 255; with data from -128 to 127, data * "
             "scale + zero is then 128 steps too low", lambda: k.amin(0, keepdim=True))])
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
    compared with ``cache_bytes_at(context, layer_windows(...), ...)``, which the answer may not call.
    """
    cases = [(3, 2, 1, 2, 1, 1, 1), (8, 6, 5, 4, 1, 2, 2), (10, 4, 0, 3, 2, 2, 4), (512, 30, 5, 1024, 3, 64, 2),
             (8192, 30, 5, 1024, 3, 64, 2), (32_768, 34, 5, 1024, 4, 256, 2)]
    for context, n_layers, lpg, window, g, d_head, b in cases:
        expected = cache_bytes_at(context, layer_windows(n_layers, lpg, window), g, d_head, b)
        got = _call(fn, (context, n_layers, lpg, window, g, d_head, b), "local_global_bytes",
                    refuse=["attention_book.cache_diet.cache_bytes_at", "attention_book.cache_diet.layer_windows",
                            "attention_book.cache_diet.cache_bytes_per_token_at",
                            "attention_book.cache_diet.cached_tokens_at"])
        _require_number(fn, f"{context}, {n_layers}, {lpg}, {window}, {g}, {d_head}, {b}", got)
        if got == expected and isinstance(got, int):
            continue
        per_token = 2 * g * d_head * b
        n_global = n_layers // (lpg + 1)
        likely = {per_token * (n_global * context + (n_layers - n_global) * window):
                  "local layers were charged the whole window even when the context is shorter: min(context, window)",
                  expected // 2: "K and V: each cached token costs 2 x n_kv_heads x d_head x bytes_per_element",
                  per_token * ((n_layers - n_global) * context + n_global * min(context, window)):
                  "local and global were swapped: the pattern starts with local layers, and every "
                  "(local_per_global + 1)-th is global",
                  per_token * sum(context if i % (lpg + 1) == 0 else min(context, window) for i in range(n_layers)):
                  "the pattern started with a global layer: it starts with local_per_global local layers"}
        note = f"\nLikely mistake: {likely[got]}" if got in likely and got != expected else ""
        if got == expected:
            note = "\nLikely mistake: the result must be an int"
        raise CheckFailed(f"context={context}, n_layers={n_layers}, local_per_global={lpg}, window={window}, "
                          f"n_kv_heads={g}, d_head={d_head}, bytes_per_element={b}: expected {expected:,} bytes, "
                          f"got {got!r}{note}")
    print(f"✓ local_global_bytes is right on {len(cases)} cases, SmolLM2's and a Gemma-3-like pattern included.")
