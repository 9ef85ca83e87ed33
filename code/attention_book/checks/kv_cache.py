"""Checks for chapter 6's exercises: cache sizes, cached decoding, and the longest context that fits."""
import numbers

import torch

from ..attention_layer import GroupedQueryAttention
from ..experiments.model_configs import MODELS as MODEL_TABLE
from ..kv_cache import kv_cache_bytes_per_token
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint

# (name, n_layers, n_kv_heads, d_head) of five models of the package's table (MHA, GQA and MQA among them)
MODELS = [(m.name, m.n_layers, m.n_kv_heads, m.d_head) for m in MODEL_TABLE
          if m.name in ("Llama 2 7B", "Llama 2 70B", "Llama 3 8B", "Falcon 7B", "Gemma 2B")]


@_exercise("kv_bytes_per_token",
           task="return the number of bytes (an int) that the K/V cache of a model with n_layers layers and "
                "n_kv_heads K/V heads of size d_head holds for one token, at bytes_per_element bytes per number.",
           hint="Per token, every layer caches one key and one value vector for each K/V head, each of d_head "
                "numbers: 2 * n_layers * n_kv_heads * d_head numbers, times bytes_per_element.")
def check_kv_bytes_per_token(fn):
    """fn(n_layers, n_kv_heads, d_head, bytes_per_element) -> bytes of K and V cached per token.

    Tried on 5 real models (Llama 2 7B and 70B, Llama 3 8B, Falcon 7B, Gemma 2B) in fp16 and fp32; compared with
    attention_book.kv_cache.kv_cache_bytes_per_token.
    """
    # the smallest cache per token first; fp32 before fp16, where the two mistakes below give different numbers
    for name, n_layers, g, d_head in sorted(MODELS, key=lambda model: model[1] * model[2] * model[3]):
        for bytes_per_element in (4, 2):
            expected = kv_cache_bytes_per_token(n_layers, g, d_head, bytes_per_element)
            got = _call(fn, (n_layers, g, d_head, bytes_per_element), "kv_bytes_per_token")
            if got != expected:
                likely = {expected // 2: "only keys or only values were counted: each token leaves both behind",
                          expected // bytes_per_element: "that counts numbers, not bytes"}
                note = (f"\nLikely mistake: {likely[got]}" if _is_number(got) and got in likely else
                        f"\n{_see_hint('kv_bytes_per_token')}")
                raise CheckFailed(f"{name} (n_layers={n_layers}, n_kv_heads={g}, d_head={d_head}) at "
                                  f"{bytes_per_element} bytes per element: expected {expected:,} bytes, got {got!r}"
                                  f"{note}")
    print(f"✓ kv_bytes_per_token is right for {len(MODELS)} real models, in fp16 and fp32.")


@_exercise("decode_with_cache",
           task="given a GroupedQueryAttention layer and x (B, L, d_model), return (B, L, d_model): the layer's "
                "outputs when x is fed to it one token at a time, each step reusing the keys and values of the "
                "earlier steps from the layer's K/V cache (the same as its full causal forward).",
           hint="Make a cache with layer.new_cache(batch_size=B, max_len=L). For each t, call "
                "layer(x[:, t:t + 1], cache=cache, is_causal=True): it returns (output, weights) for that one token "
                "and appends its K and V to the cache. Concatenate the L outputs along dimension 1 (under "
                "torch.no_grad()).")
def check_decode_with_cache(fn):
    """fn(layer, x) -> outputs (B, L, d_model) of feeding x to the layer one token at a time through a cache.

    Tried on 3 random layers (MHA, GQA, MQA) and inputs; compared with the layer's full causal forward.
    """
    # (seed, (d_model, n_heads, n_kv_heads, B, L)), the smallest layer and input first
    for seed, (d_model, h, g, B, L) in [(2, (8, 4, 1, 3, 4)), (0, (16, 4, 4, 2, 5)), (1, (24, 6, 2, 1, 7))]:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            layer = GroupedQueryAttention(d_model, h, g)
            x = torch.randn(B, L, d_model)
        with torch.no_grad():
            expected, _ = layer(x, is_causal=True)
            got = _call(fn, (layer, x), "decode_with_cache")
        _compare("your cached decoding", f"a layer with n_heads={h}, n_kv_heads={g}, x {tuple(x.shape)}", expected,
                 got, hint=_see_hint("decode_with_cache"))
    print("✓ your cached decoding equals the full causal forward for MHA, GQA and MQA layers.")


@_exercise("max_context",
           task="return the largest number of tokens (an int) such that the K/V caches of `batch` sequences of that "
                "many tokens each fit in memory_bytes, for a model with n_layers, n_kv_heads, d_head at "
                "bytes_per_element bytes per number.",
           hint="One token of one sequence takes 2 * n_layers * n_kv_heads * d_head * bytes_per_element bytes (your "
                "kv_bytes_per_token); one token for the whole batch takes batch times that. Divide memory_bytes by "
                "it with integer division, //, which rounds down.")
def check_max_context(fn):
    """fn(memory_bytes, n_layers, n_kv_heads, d_head, bytes_per_element, batch) -> longest context that fits.

    Tried on 4 memory budgets and models; compared with the memory divided by the batch's cache bytes per token
    (attention_book.kv_cache.kv_cache_bytes_per_token).
    """
    cases = [(2**30, "Gemma 2B", 4, 3), (16 * 2**30, "Llama 2 7B", 2, 1), (16 * 2**30, "Llama 3 8B", 2, 1),
             (80 * 2**30, "Llama 2 70B", 2, 8)]  # the smallest memory first
    sizes = {name: (n_layers, g, d_head) for name, n_layers, g, d_head in MODELS}
    for memory, name, bytes_per_element, batch in cases:
        n_layers, g, d_head = sizes[name]
        per_token = kv_cache_bytes_per_token(n_layers, g, d_head, bytes_per_element)  # one sequence's token
        expected = memory // (per_token * batch)
        got = _call(fn, (memory, n_layers, g, d_head, bytes_per_element, batch), "max_context")
        if got != expected or not _is_number(got, integer=True):
            likely = {memory // per_token: "the batch was left out: the memory holds the caches of all `batch` "
                                           "sequences",
                      memory / (per_token * batch): "a context is a whole number of tokens, and a token that does "
                                                    "not fit whole does not fit",
                      expected + 1: "rounded up: a token that does not fit whole does not fit"}
            note = (f"\nLikely mistake: {likely[got]}" if _is_number(got) and got in likely and got != expected else
                    "\nLikely mistake: the result must be an int" if got == expected else
                    f"\n{_see_hint('max_context')}")
            raise CheckFailed(f"max_context(memory_bytes={memory} ({memory / 2**30:.0f} GiB), n_layers={n_layers}, "
                              f"n_kv_heads={g}, d_head={d_head}, bytes_per_element={bytes_per_element}, batch={batch}) "
                              f"for {name}: expected {expected:,} tokens, got {got!r}{note}")
    # the last case is the question of the exercise: Llama 2 70B in fp16, 8 conversations, 80 GiB
    print(f"✓ max_context is right for {len(cases)} memory budgets and models. Your answer to the question: "
          f"{got:,} tokens for each of the {batch} conversations with {name}.")


def _is_number(value, integer=False):
    """Whether value is a plain number (an integer, if ``integer``): not a bool, a tensor or a string."""
    kind = numbers.Integral if integer else numbers.Real
    return isinstance(value, kind) and not isinstance(value, bool)
