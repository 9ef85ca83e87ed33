"""Checks for chapter 7's exercises: MQA's parameters, attention with one shared K/V head that never copies it, a
decode-speed bound that reads the weights and the cache, and a whole MQA layer's forward."""
import math
import weakref

import torch
from torch.utils._pytree import tree_leaves

from ..attention_layer import GroupedQueryAttention
from ..experiments.tensor_memory import PeakTensorBytes
from ..grouped_sdpa import grouped_query_sdpa
from ..kv_cache import kv_cache_bytes_per_token
from .multi_head import BUILT_LAYERS
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _seeded, _size


@_exercise("mqa_param_count",
           task="return the number of parameters (an int), biases included, of a multi-query attention layer: "
                "GroupedQueryAttention(d_model, n_heads, n_kv_heads=1).",
           hint="W_q and W_o are d_model x d_model, each with d_model biases; W_k and W_v produce one head only, "
                "d_head = d_model // n_heads columns: d_model x d_head, each with d_head biases. Add the four up.")
def check_mqa_param_count(fn):
    """fn(d_model, n_heads) -> parameters of GroupedQueryAttention(d_model, n_heads, n_kv_heads=1) (with biases).

    Tried on 4 sizes; compared with the parameters of GroupedQueryAttention(d_model, n_heads, 1). Building a layer
    to count its parameters fails.
    """
    for d_model, h in [(30, 5), (64, 4), (96, 12), (512, 8)]:  # the smallest first
        expected = sum(p.numel() for p in GroupedQueryAttention(d_model, h, 1).parameters())
        got = _call(fn, (d_model, h), "mqa_param_count",
                    refuse=[(name, "which the exercise says not to build") for name in BUILT_LAYERS])
        if got != expected:
            d_head = d_model // h
            note = ("Likely mistake: the biases were left out: each projection has one per output"
                    if got == 2 * d_model * (d_model + d_head) else f"Hint: d_head = d_model // n_heads = {d_head}")
            raise CheckFailed(f"mqa_param_count(d_model={d_model}, n_heads={h}): expected {expected:,}, got {got!r}"
                              f"\n{note}")
    print("✓ mqa_param_count matches the layer for 4 sizes.")


class _CopiesOfKV(PeakTensorBytes):
    """PeakTensorBytes that also finds copies of the shared K/V head: the largest tensor made from the keys or
    values alone (every floating-point input of the operation that made it comes from them, or from ``neutral``
    tensors such as the layer's input or freshly allocated memory), in ``largest`` as (bytes, operation).

    ``sources``: the tensors the keys and values are, or are made from (k and v, or k_proj's and v_proj's
    parameters). A product of the queries with the keys is not made from the keys alone; a copy of the keys for
    every query head is, whether by repeat_interleave, expand and reshape, or a matrix product that broadcasts them.
    """

    def __init__(self, sources, neutral=()):
        super().__init__()
        self._from_kv = weakref.WeakSet(t.untyped_storage() for t in sources)
        self._neutral = weakref.WeakSet(t.untyped_storage() for t in neutral)
        self.largest = (0, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        storages = [t.untyped_storage() for t in tree_leaves((args, kwargs))
                    if isinstance(t, torch.Tensor) and t.is_floating_point()]
        from_kv = any(s in self._from_kv for s in storages) and all(
            s in self._from_kv or s in self._neutral for s in storages)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                storage = t.untyped_storage()
                if from_kv:
                    # new memory, or memory made from nothing written into; not a view of the keys or values
                    if storage not in self._from_kv or storage in self._neutral:
                        self.largest = max(self.largest, (storage.nbytes(), str(func)), key=lambda pair: pair[0])
                    self._from_kv.add(storage)
                elif not storages:  # made from nothing (torch.empty, torch.zeros): memory to copy into
                    self._neutral.add(storage)
        return out


def _refuse_copies(fn, tried, counter, head_bytes, h):
    """Fail if the answer made a tensor from the keys or values alone as large as 2 of their heads or more (a head:
    ``head_bytes``; ``h`` query heads)."""
    n_bytes, operation = counter.largest
    if n_bytes >= 2 * head_bytes:
        raise CheckFailed(f"{fn.__name__} on {tried}: it made a tensor of {n_bytes:,} bytes from the keys or values "
                          f"alone ({operation}), {n_bytes / head_bytes:g} times the {head_bytes:,} bytes of the one "
                          f"K/V head: the head shared by the {h} query heads is copied for them. (A matrix product "
                          "that broadcasts a tensor of 1 head against h heads makes that copy too, inside "
                          "torch.matmul.)")


# What the MQA exercises may not call: the package's own attention and the copies of K/V the exercises avoid.
NOT_YOURS = "the package's own attention"
ATTENTION = [
    ("attention_book.grouped_sdpa.grouped_query_sdpa", NOT_YOURS),
    ("attention_book.grouped_sdpa.attend", NOT_YOURS),
    ("attention_book.grouped_sdpa.gqa_by_repeating_kv", NOT_YOURS),
    ("attention_book.grouped_sdpa.gqa_with_enable_gqa", NOT_YOURS),
    ("attention_book.sdpa.scaled_dot_product_attention", "which the exercise says not to call"),
    ("torch.nn.functional.scaled_dot_product_attention", "which the exercise says not to call"),
]
REPEATS = [(name, "which copies the K/V head for every query head") for name in
           ("torch.repeat_interleave", "torch.Tensor.repeat_interleave", "torch.Tensor.repeat")]


def _mqa_unscaled(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def _mqa_heads_interleaved(q, k, v):
    """The fold done with the rows in (L, h) order and undone in (h, L) order: the heads come back mixed up."""
    B, h, L, d = q.shape
    rows = q.transpose(1, 2).reshape(B, L * h, d)
    return (torch.softmax(rows @ k[:, 0].transpose(-2, -1) / math.sqrt(d), dim=-1) @ v[:, 0]).reshape(B, h, L, d)


@_exercise("mqa_attention",
           task="given q (B, h, L, d) and k, v (B, 1, S, d), one K/V head shared by all h query heads, return "
                "(B, h, L, d): each query head's scaled dot-product attention with that K/V head, without making "
                "copies of k and v for the query heads and without calling any scaled_dot_product_attention.",
           hint="All h heads meet the same keys, so their queries can be stacked as rows of one matrix: "
                "q.reshape(B, h * L, d) is a view, (B, h * L, d). Multiply it by k[:, 0].transpose(-2, -1), "
                "(B, d, S): one product reads the keys once and gives (B, h * L, S). Divide by math.sqrt(d), "
                "softmax over the last dimension, multiply by v[:, 0] and reshape to (B, h, L, d). (q @ "
                "k.transpose(-2, -1) with k's head dimension of 1 gives the same numbers, but torch.matmul "
                "expands k to h heads and copies it first.)")
def check_mqa_attention(fn):
    """fn(q (B, h, L, d), k (B, 1, S, d), v (B, 1, S, d)) -> (B, h, L, d), without copying K and V per head.

    Tried on 4 random inputs; compared with attention_book.grouped_sdpa.grouped_query_sdpa. The package's attention
    functions, both scaled_dot_product_attention and repeat_interleave / repeat refuse to run, and no tensor made
    from k or v alone may be as large as 2 K/V heads (experiments.tensor_memory counts them).
    """
    gen = _generator(10)
    inputs = []
    for B, h, L, S, d in [(2, 4, 1, 7, 8), (1, 8, 3, 5, 4), (3, 2, 4, 4, 16), (1, 8, 1, 64, 32)]:
        q = torch.randn(B, h, L, d, generator=gen)
        k, v = (torch.randn(B, 1, S, d, generator=gen) for _ in range(2))
        inputs.append((q, k, v))
    for q, k, v in sorted(inputs, key=lambda qkv: _size(*qkv)):  # the smallest first
        expected = grouped_query_sdpa(q, k, v)
        tried = f"q {tuple(q.shape)}, k and v {tuple(k.shape)}"
        with torch.no_grad(), _CopiesOfKV([k, v]) as counter:
            got = _call(fn, (q, k, v), "mqa_attention", refuse=ATTENTION + REPEATS)
        _compare("your MQA attention", tried, expected, got, hint=_see_hint("mqa_attention"),
                 mistakes=[("not scaled by 1/√d", lambda: _mqa_unscaled(q, k, v)),
                           ("the query heads' rows were stacked in one order and put back in another: query head "
                            "i's rows come back as another head's", lambda: _mqa_heads_interleaved(q, k, v))])
        _refuse_copies(fn, tried, counter, k.nbytes, q.shape[1])
    print("✓ your MQA attention matches grouped_query_sdpa on 4 inputs, and never copies the shared K/V head.")


def _mqa_forward_reference(layer, x, causal=True, merge="transpose", stacked_mask=False):
    """The MQA layer's causal forward written out, or with a known mistake: causal=False (no mask), merge="reshape"
    (the heads merged without moving them after L), stacked_mask (one (h L, L) lower triangle over the queries of
    all heads stacked as rows)."""
    B, L, _ = x.shape
    h, d = layer.n_heads, layer.d_head
    q = layer.q_proj(x).view(B, L, h, d).transpose(1, 2)  # (B, h, L, d)
    k, v = layer.k_proj(x)[:, None], layer.v_proj(x)[:, None]  # (B, 1, L, d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if stacked_mask:
        rows = torch.ones(h * L, L, dtype=torch.bool).tril().view(h, L, L)
        scores = scores.masked_fill(~rows, float("-inf"))
    elif causal:
        scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v  # (B, h, L, d)
    merged = heads.transpose(1, 2).reshape(B, L, h * d) if merge == "transpose" else heads.reshape(B, L, h * d)
    return layer.o_proj(merged)


LAYER_STEPS = [
    ("attention_book.attention_layer.GroupedQueryAttention.forward", "the layer's own forward"),
    ("attention_book.attention_layer.GroupedQueryAttention.queries", "the layer's own query step"),
    ("attention_book.attention_layer.GroupedQueryAttention.keys_values", "the layer's own key and value step"),
    ("attention_book.torch_interop.to_torch_mha", "which copies the K/V head into every head of an MHA module"),
]


@_exercise("my_mqa_forward",
           task="given a multi-query layer, GroupedQueryAttention(d_model, n_heads, n_kv_heads=1), and x (B, L, "
                "d_model), return (B, L, d_model): the layer's causal self-attention (its output for "
                "layer(x, is_causal=True)), computed from its four projections, without making copies of the one "
                "K/V head for the query heads and without calling any scaled_dot_product_attention or the layer's "
                "forward.",
           hint="q = layer.q_proj(x).view(B, L, h, d_head).transpose(1, 2) is (B, h, L, d_head); k = layer.k_proj(x) "
                "and v = layer.v_proj(x) are (B, L, d_head), the one head. Stack the queries as rows, "
                "q.reshape(B, h * L, d_head), multiply by k.transpose(1, 2) and divide by math.sqrt(d_head): "
                "(B, h * L, L). View it as (B, h, L, L) to mask it, with torch.ones(L, L, dtype=torch.bool).tril() "
                "(True = may attend; masked_fill(~mask, float('-inf'))), softmax over the last dimension, view it "
                "back as (B, h * L, L) and multiply by v: (B, h * L, d_head). View that as (B, h, L, d_head), "
                "move the heads after L, .transpose(1, 2).reshape(B, L, h * d_head), and apply layer.o_proj.",
           idea="MQA has one key head and one value head for all the query heads, so there is nothing to repeat: "
                "treat the h query heads as h times as many query rows against the same keys, and separate them again "
                "after attending.")
def check_mqa_forward(fn):
    """fn(layer, x (B, L, d_model)) -> (B, L, d_model): an MQA layer's causal forward from its projections.

    Tried on 3 random MQA layers and inputs; compared with the layer's own causal forward. The layer's forward,
    queries and keys_values, the package's attention functions, both scaled_dot_product_attention and to_torch_mha
    refuse to run, and no tensor made from the keys or values alone (from k_proj's and v_proj's weights and x)
    may be as large as 2 K/V heads (experiments.tensor_memory counts them).
    """
    # (seed, (d_model, n_heads, B, L)), the smallest layer and input first
    for seed, (d_model, h, B, L) in [(0, (8, 4, 1, 3)), (1, (16, 4, 2, 5)), (2, (48, 8, 2, 6))]:
        with _seeded(seed):
            layer = GroupedQueryAttention(d_model, h, 1)
            x = torch.randn(B, L, d_model)
        with torch.no_grad():
            expected, _ = layer(x, is_causal=True)
        tried = f"an MQA layer with d_model={d_model}, n_heads={h}, x {tuple(x.shape)}"
        kv_weights = [p for proj in (layer.k_proj, layer.v_proj) for p in proj.parameters()]
        with torch.no_grad(), _CopiesOfKV(kv_weights, neutral=[x]) as counter:
            got = _call(fn, (layer, x), "my_mqa_forward", refuse=LAYER_STEPS + ATTENTION)
        with torch.no_grad():
            _compare("your MQA layer", tried, expected, got, hint=_see_hint("my_mqa_forward"),
                     mistakes=[("no causal mask: each token also attends to the tokens after it",
                                lambda: _mqa_forward_reference(layer, x, causal=False)),
                               ("the lower triangle was laid over the h · L stacked query rows as one: the (L, L) "
                                "mask applies to each head's L rows",
                                lambda: _mqa_forward_reference(layer, x, stacked_mask=True)),
                               ("the heads were merged without moving the head dimension after L",
                                lambda: _mqa_forward_reference(layer, x, merge="reshape"))])
        _refuse_copies(fn, tried, counter, B * L * layer.d_head * x.element_size(), h)
    print("✓ your MQA layer matches GroupedQueryAttention(n_kv_heads=1) on 3 layers, and never copies its K/V head.")


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
