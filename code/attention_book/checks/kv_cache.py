"""Checks for chapter 6's exercises: cache sizes, cached decoding, and the longest context that fits."""
import torch

from ..attention_layer import GroupedQueryAttention
from ..experiments.model_configs import MODELS as MODEL_TABLE
from ..kv_cache import kv_cache_bytes_per_token
from ._compare import CheckFailed, _call, _compare

# (name, n_layers, n_kv_heads, d_head) of five models of the package's table (MHA, GQA and MQA among them)
MODELS = [(m.name, m.n_layers, m.n_kv_heads, m.d_head) for m in MODEL_TABLE
          if m.name in ("Llama 2 7B", "Llama 2 70B", "Llama 3 8B", "Falcon 7B", "Gemma 2B")]


def check_kv_bytes_per_token(fn):
    """fn(n_layers, n_kv_heads, d_head, bytes_per_element) -> bytes of K and V cached per token.

    Tried on 5 real models (Llama 2 7B and 70B, Llama 3 8B, Falcon 7B, Gemma 2B) in fp16 and fp32; compared with
    attention_book.kv_cache.kv_cache_bytes_per_token.
    """
    task = "count the numbers stored per token (keys and values, every layer, every K/V head) times their size."
    for name, n_layers, g, d_head in MODELS:
        for bytes_per_element in (2, 4):
            expected = kv_cache_bytes_per_token(n_layers, g, d_head, bytes_per_element)
            got = _call(fn, (n_layers, g, d_head, bytes_per_element), task)
            if got != expected:
                raise CheckFailed(f"{name} (n_layers={n_layers}, n_kv_heads={g}, d_head={d_head}) at "
                                  f"{bytes_per_element} bytes per element: expected {expected:,} bytes, got {got!r}"
                                  "\nHint: don't forget the factor 2 for keys and values")
    print(f"✓ kv_bytes_per_token is right for {len(MODELS)} real models, in fp16 and fp32.")


def check_decode_with_cache(fn):
    """fn(layer, x) -> outputs (B, L, d_model) of feeding x to the layer one token at a time through a cache.

    Tried on 3 random layers (MHA, GQA, MQA) and inputs; compared with the layer's full causal forward.
    """
    task = ("make a cache with layer.new_cache(B, L), then call layer(x[:, t:t + 1], cache=cache, is_causal=True) "
            "for each t.")
    for seed, (d_model, h, g, B, L) in enumerate([(16, 4, 4, 2, 5), (24, 6, 2, 1, 7), (8, 4, 1, 3, 4)]):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            layer = GroupedQueryAttention(d_model, h, g)
            x = torch.randn(B, L, d_model)
        with torch.no_grad():
            expected, _ = layer(x, is_causal=True)
            got = _call(fn, (layer, x), task)
        _compare("your cached decoding", f"a layer with n_heads={h}, n_kv_heads={g}, x {tuple(x.shape)}", expected,
                 got, hint="each step must see every earlier token: pass is_causal=True (bottom-right aligned)")
    print("✓ your cached decoding equals the full causal forward for MHA, GQA and MQA layers.")


def check_max_context(fn):
    """fn(memory_bytes, n_layers, n_kv_heads, d_head, bytes_per_element, batch) -> longest context that fits.

    Tried on 4 memory budgets and models; compared with the memory divided by the batch's cache bytes per token
    (attention_book.kv_cache.kv_cache_bytes_per_token).
    """
    task = "divide the memory by the bytes one token takes for the whole batch, rounding down."
    cases = [(16 * 2**30, "Llama 2 7B", 2, 1), (16 * 2**30, "Llama 3 8B", 2, 1), (80 * 2**30, "Llama 2 70B", 2, 8),
             (2**30, "Gemma 2B", 4, 3)]
    sizes = {name: (n_layers, g, d_head) for name, n_layers, g, d_head in MODELS}
    for memory, name, bytes_per_element, batch in cases:
        n_layers, g, d_head = sizes[name]
        expected = memory // (kv_cache_bytes_per_token(n_layers, g, d_head, bytes_per_element) * batch)
        got = _call(fn, (memory, n_layers, g, d_head, bytes_per_element, batch), task)
        if got != expected:
            raise CheckFailed(f"max_context(memory_bytes={memory} ({memory / 2**30:.0f} GiB), n_layers={n_layers}, "
                              f"n_kv_heads={g}, d_head={d_head}, bytes_per_element={bytes_per_element}, batch={batch}) "
                              f"for {name}: expected {expected:,} tokens, got {got!r}\nHint: use integer division //")
    print(f"✓ max_context is right for {len(cases)} memory budgets and models.")
