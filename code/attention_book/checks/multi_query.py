"""Checks for chapter 7's exercises: MQA's parameters, attention with one shared K/V head, a decode-speed bound
that reads the weights and the cache."""
import torch

from ..attention_layer import GroupedQueryAttention
from ..grouped_sdpa import grouped_query_sdpa
from ..kv_cache import kv_cache_bytes_per_token
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint, _size


@_exercise("mqa_param_count",
           task="return the number of parameters (an int), biases included, of a multi-query attention layer: "
                "GroupedQueryAttention(d_model, n_heads, n_kv_heads=1).",
           hint="W_q and W_o are d_model x d_model, each with d_model biases; W_k and W_v produce one head only, "
                "d_head = d_model // n_heads columns: d_model x d_head, each with d_head biases. Add the four up.")
def check_mqa_param_count(fn):
    """fn(d_model, n_heads) -> parameters of GroupedQueryAttention(d_model, n_heads, n_kv_heads=1) (with biases).

    Tried on 4 sizes; compared with the parameters of GroupedQueryAttention(d_model, n_heads, 1).
    """
    for d_model, h in [(30, 5), (64, 4), (96, 12), (512, 8)]:  # the smallest first
        expected = sum(p.numel() for p in GroupedQueryAttention(d_model, h, 1).parameters())
        got = _call(fn, (d_model, h), "mqa_param_count")
        if got != expected:
            raise CheckFailed(f"mqa_param_count(d_model={d_model}, n_heads={h}): expected {expected:,}, got {got!r}"
                              f"\nHint: d_head = d_model // n_heads = {d_model // h}")
    print("✓ mqa_param_count matches the layer for 4 sizes.")


@_exercise("mqa_attention",
           task="given q (B, h, L, d) and k, v (B, 1, S, d), one K/V head shared by all h query heads, return "
                "(B, h, L, d): each query head's scaled dot-product attention with that K/V head, without making "
                "h copies of k and v.",
           hint="Matrix products broadcast over the leading dimensions: q @ k.transpose(-2, -1) multiplies "
                "(B, h, L, d) by (B, 1, d, S) and gives (B, h, L, S), the size-1 head dimension of k standing for "
                "all h heads. Divide by math.sqrt(d), softmax over the last dimension, and multiply by v, which "
                "broadcasts the same way.")
def check_mqa_attention(fn):
    """fn(q (B, h, L, d), k (B, 1, S, d), v (B, 1, S, d)) -> (B, h, L, d), without copying K and V per head.

    Tried on 3 random inputs; compared with attention_book.grouped_sdpa.grouped_query_sdpa.
    """
    gen = torch.Generator().manual_seed(10)
    inputs = []
    for B, h, L, S, d in [(2, 4, 1, 7, 8), (1, 8, 3, 5, 4), (3, 2, 4, 4, 16)]:
        q = torch.randn(B, h, L, d, generator=gen)
        k, v = (torch.randn(B, 1, S, d, generator=gen) for _ in range(2))
        inputs.append((q, k, v))
    for q, k, v in sorted(inputs, key=lambda qkv: _size(*qkv)):  # the smallest first
        _compare("your MQA attention", f"q {tuple(q.shape)}, k and v {tuple(k.shape)}", grouped_query_sdpa(q, k, v),
                 _call(fn, (q, k, v), "mqa_attention"),
                 hint=_see_hint("mqa_attention"))
    print("✓ your MQA attention matches grouped_query_sdpa on 3 inputs.")


@_exercise("tokens_per_second_bound",
           task="return the most tokens per second (a float) that decoding can produce for a batch of `batch` "
                "sequences of `context` tokens each, on a machine that reads `bandwidth` bytes per second, if each "
                "decode step is limited by reading memory: the model's n_params weights (bytes_per_element each) "
                "and the sequences' K/V caches.",
           hint="One step reads the weights once for the whole batch, n_params * bytes_per_element bytes, and each "
                "sequence's cache once, 2 * n_layers * n_kv_heads * d_head * bytes_per_element * context bytes per "
                "sequence. It takes (weight bytes + batch * cache bytes) / bandwidth seconds and makes one token per "
                "sequence, batch tokens: the rate is batch divided by that time.")
def check_tokens_per_second_bound(fn):
    """fn(bandwidth, n_params, n_layers, n_kv_heads, d_head, context, bytes_per_element, batch) -> fastest decode rate.

    Tried on 5 models, machines and batch sizes; compared with the batch size times the bandwidth, divided by the
    bytes one step must read: the weights once for the whole batch, plus each sequence's cache
    (attention_book.kv_cache.kv_cache_bytes_per_token).
    """
    cases = [(50e9, 1e9, 24, 16, 64, 1024, 2, 64), (25e9, 2.5e9, 18, 1, 256, 2048, 4, 4),
             (25e9, 6.74e9, 32, 32, 128, 4096, 2, 1), (25e9, 6.74e9, 32, 1, 128, 4096, 2, 32),
             (900e9, 7e10, 80, 8, 128, 8192, 2, 16)]  # the smallest model first
    for bandwidth, n_params, n_layers, g, d_head, context, b, batch in cases:
        weight_bytes = n_params * b
        cache_bytes = kv_cache_bytes_per_token(n_layers, g, d_head, b) * context  # one sequence
        expected = batch * bandwidth / (weight_bytes + batch * cache_bytes)
        got = _call(fn, (bandwidth, n_params, n_layers, g, d_head, context, b, batch), "tokens_per_second_bound")
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-6 * expected:
            hint = ""
            if isinstance(got, (int, float)):
                if abs(got - bandwidth / cache_bytes) <= 1e-6 * got:
                    hint = "\nHint: the weights must be read too, once per step for the whole batch"
                elif abs(got * batch - expected) <= 1e-6 * expected:
                    hint = "\nHint: count the tokens of the whole batch: each step makes one token per sequence"
            raise CheckFailed(f"bandwidth {bandwidth / 1e9:.0f} GB/s, n_params={n_params:.3g}, n_layers={n_layers}, "
                              f"n_kv_heads={g}, d_head={d_head}, context {context}, {b} bytes per element, "
                              f"batch={batch}: expected {expected:.3f} tokens per second, got {got!r}{hint}")
    print(f"✓ tokens_per_second_bound is right for {len(cases)} models, machines and batch sizes.")
