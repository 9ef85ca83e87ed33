"""Checks for chapter 6's exercises: cache sizes, cached decoding with buffers of one's own, and the longest context
that fits."""
import math

import torch

from ..attention_layer import GroupedQueryAttention
from ..experiments.model_configs import MODELS as MODEL_TABLE
from ..experiments.tensor_memory import PeakTensorBytes
from ..kv_cache import kv_cache_bytes_per_token
from ..masks import causal_mask
from ._compare import CheckFailed, _call, _compare, _exercise, _is_number, _see_hint, _seeded

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


# What the cached decoding exercise may not call: the package's cache and the layer's own ways to run the step.
CACHE_STEP = [
    ("attention_book.attention_layer.GroupedQueryAttention.forward", "the layer's own forward (with or without a "
                                                                     "cache)"),
    ("attention_book.attention_layer.GroupedQueryAttention.queries", "the layer's own query step"),
    ("attention_book.attention_layer.GroupedQueryAttention.keys_values", "the layer's own key and value step"),
    ("attention_book.attention_layer.GroupedQueryAttention.new_cache", "the package's cache"),
    ("attention_book.kv_cache.KVCache.append", "the package's cache"),
    ("attention_book.kv_cache.KVCache", "the package's cache"),
]
# On the long input, new tensors of up to 8 times the buffers and the outputs (a loop that writes into its buffers
# makes about 3 times, a cache copied at every call about 25 times)
COPIES_ALLOWED = 8


def _chunked_decode(layer, x, chunk, mask_kind):
    """Cached decoding written out, right ("bottom-right") or with a known mistake in the mask of each chunk:
    "top-left" (PyTorch's is_causal), "none" (a chunk's tokens see each other), "whole" (every position of the
    zero-filled buffers, written or not, is attended)."""
    B, L, _ = x.shape
    h, d = layer.n_heads, layer.d_head
    k_all = layer.k_proj(x).view(B, L, h, d).transpose(1, 2)  # (B, h, L, d_head)
    v_all = layer.v_proj(x).view(B, L, h, d).transpose(1, 2)
    outputs = []
    for start in range(0, L, chunk):
        end = min(start + chunk, L)
        n = end - start
        q = layer.q_proj(x[:, start:end]).view(B, n, h, d).transpose(1, 2)  # (B, h, n, d_head)
        k, v = k_all[:, :, :end], v_all[:, :, :end]
        mask = {"bottom-right": causal_mask(n, end), "none": torch.ones(n, end, dtype=torch.bool),
                "top-left": torch.ones(n, end, dtype=torch.bool).tril()}.get(mask_kind)
        if mask_kind == "whole":  # the unwritten positions are zeros, and nothing hides them
            k, v = (torch.cat([t, t.new_zeros(B, h, L - end, d)], dim=2) for t in (k, v))
            mask = torch.cat([causal_mask(n, end), torch.ones(n, L - end, dtype=torch.bool)], dim=1)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~mask, float("-inf"))  # (B, h, n, S)
        heads = torch.softmax(scores, dim=-1) @ v  # (B, h, n, d_head)
        outputs.append(layer.o_proj(heads.transpose(1, 2).reshape(B, n, h * d)))
    return torch.cat(outputs, dim=1)


def _projection_calls(layer, batch_size, record):
    """Forward hooks that append (projection name, tokens per sequence in the call) to ``record``; returns their
    handles."""
    def hook(module, inputs, output, name):
        record.append((name, inputs[0].numel() // (module.in_features * batch_size)))
    return [getattr(layer, name).register_forward_hook(lambda m, i, o, name=name: hook(m, i, o, name))
            for name in ("q_proj", "k_proj", "v_proj", "o_proj")]


@_exercise("my_cached_decode",
           task="given an MHA layer, GroupedQueryAttention(d_model, n_heads), x (B, L, d_model) and chunk (an int "
                "from 1 to L), process x chunk tokens per call (the last call may hold fewer), each call projecting "
                "only its own tokens and each of its queries attending to the keys and values of every token up to "
                "its own position, kept in two buffers of shape (B, n_heads, L, d_head), of x's dtype and device, "
                "that you allocate once; return (out, k_buffer, v_buffer): out (B, L, "
                "d_model), equal to the layer's full causal forward, and the two buffers after the last call, "
                "holding the keys and values of all L tokens.",
           hint="Allocate k_buffer and v_buffer with torch.zeros(B, h, L, d_head) before the loop. For each chunk "
                "x[:, start:end] (n = end - start tokens): q = layer.q_proj(chunk).view(B, n, h, d_head)"
                ".transpose(1, 2), and the same view of layer.k_proj(chunk) and layer.v_proj(chunk) written into "
                "k_buffer[:, :, start:end] and v_buffer[:, :, start:end]. Attend with the filled part, "
                "k_buffer[:, :, :end] and v_buffer[:, :, :end], under causal_mask(n, end): the chunk's queries "
                "are the last n of the end positions (bottom-right). Merge the heads, (B, n, h * d_head), apply "
                "layer.o_proj, and torch.cat the chunks' outputs along dimension 1 at the end.",
           idea="Picture the cache of section 1: two buffers with a row per position, filled left to right. Each call "
                "projects only its own chunk, writes the chunk's keys and values into the next rows, and lets the "
                "chunk's queries attend to every row filled so far, causally, the chunk's queries being the last "
                "positions.")
def check_cached_decode(fn):
    """fn(layer, x (B, L, d_model), chunk) -> (out (B, L, d_model), k_buffer, v_buffer (B, h, L, d_head)), feeding x
    to an MHA layer chunk tokens at a time through buffers allocated once.

    Tried on 4 random MHA layers and inputs, one token and several per call, one in fp64 (the buffers take x's
    dtype); out compared with the layer's full
    causal forward and the buffers with its keys and values. The layer's forward, queries, keys_values and
    new_cache, and the package's KVCache, refuse to run; the projections must be called one chunk at a time, in
    order; on the longest input, 64 tokens one per call, the bytes of all the new tensors the answer makes are
    added up (experiments.tensor_memory): a cache copied at every call makes far more than the buffers and outputs.
    """
    # (seed, (d_model, n_heads, B, L, chunk)), the smallest layer and input first; the last, a long one-token-per-call
    # decode, is where copying the cache as it grows costs the most bytes: its bytes are counted
    cases = [(0, (8, 2, 1, 3, 1)), (1, (16, 4, 2, 7, 3)), (2, (24, 3, 2, 10, 4)), (3, (64, 2, 1, 64, 1))]
    for seed, (d_model, h, B, L, chunk) in cases:
        long = L == cases[-1][1][3]
        with _seeded(seed):
            layer = GroupedQueryAttention(d_model, h)
            x = torch.randn(B, L, d_model)
        if seed == 1:  # one layer and input in fp64: the buffers must take x's dtype
            layer, x = layer.double(), x.double()
        with torch.no_grad():  # everything expected, before the answer runs
            expected, _ = layer(x, is_causal=True)
            k_expected, v_expected = layer.keys_values(x)  # (B, h, L, d_head)
        tried = f"an MHA layer with d_model={d_model}, n_heads={h}, x {tuple(x.shape)}, chunk={chunk}"
        calls = []
        hooks = _projection_calls(layer, B, calls)
        try:
            with torch.no_grad(), PeakTensorBytes() as counter:
                got = _call(fn, (layer, x, chunk), "my_cached_decode", refuse=CACHE_STEP)
        finally:
            for hook in hooks:
                hook.remove()
        if not (isinstance(got, tuple) and len(got) == 3):
            raise CheckFailed(f"{fn.__name__} on {tried}: expected a tuple (out, k_buffer, v_buffer), got "
                              f"{type(got).__name__}")
        out, k_buffer, v_buffer = got
        _check_calls(fn, tried, calls, L, chunk)
        with torch.no_grad():
            mistakes = [(description, lambda kind=kind: _chunked_decode(layer, x, chunk, kind)) for kind, description
                        in [("top-left", "the mask is aligned top-left (PyTorch's is_causal=True): a chunk's queries "
                                         "are the last positions of the tokens so far, not the first"),
                            ("none", "the tokens of a chunk also see the later tokens of the same chunk"),
                            ("whole", "the queries also attend to the positions of the buffers not written yet")]]
            _compare("your cached decoding's out", tried, expected, out, hint=_see_hint("my_cached_decode"),
                     mistakes=mistakes)
        for name, buffer, wanted in [("k_buffer", k_buffer, k_expected), ("v_buffer", v_buffer, v_expected)]:
            _compare(f"your cached decoding's {name}", tried, wanted, buffer,
                     hint=f"after the last call it holds the {'keys' if name[0] == 'k' else 'values'} of all L "
                          "tokens, token t at position t of dimension 2")
        needed = 2 * k_expected.nbytes + expected.nbytes  # the two buffers and the outputs
        if long and counter.total > COPIES_ALLOWED * needed:
            raise CheckFailed(f"{fn.__name__} on {tried}: it made {counter.total:,} bytes of new tensors over the "
                              f"{L} calls, against {needed:,} for the two buffers and the outputs (up to "
                              f"{COPIES_ALLOWED} times that passes): something that grows with the calls is "
                              f"copied at every call (the keys and values grown with torch.cat, the filled part of "
                              f"the buffers copied, or the outputs concatenated step by step)")
    print("✓ your cached decoding equals the full causal forward, one token per call and in chunks, and fills its "
          "buffers once.")


def _check_calls(fn, tried, calls, L, chunk):
    """Fail unless the projections ran one chunk at a time, in order: q, k and v on a chunk, then o on it."""
    expected = []
    for start in range(0, L, chunk):
        expected.append(min(chunk, L - start))
    chunks, pending = [], {}
    for name, n in calls:
        if name == "o_proj":
            if set(pending) != {"q_proj", "k_proj", "v_proj"} or len(set(pending.values())) != 1 or \
                    pending["q_proj"] != n:
                break
            chunks.append(n)
            pending = {}
        elif name in pending:
            break
        else:
            pending[name] = n
    else:
        if chunks == expected and not pending:
            return
    shown = ", ".join(f"{name}({n})" for name, n in calls[:12]) + (", ..." if len(calls) > 12 else "")
    raise CheckFailed(f"{fn.__name__} on {tried}: the layer's projections ran on these numbers of tokens, in this "
                      f"order: {shown or 'never'}. Fed {chunk} token{'s' * (chunk > 1)} per call, each call "
                      f"projects its tokens with q_proj, k_proj and v_proj, then their attention output with "
                      f"o_proj, before the next call: calls of {expected} tokens")


@_exercise("max_context",
           task="return the largest number of tokens (an int) such that the K/V caches of `batch` sequences of that "
                "many tokens each fit in memory_bytes, for a model with n_layers, n_kv_heads, d_head at "
                "bytes_per_element bytes per number.",
           hint="One token of one sequence takes 2 * n_layers * n_kv_heads * d_head * bytes_per_element bytes (your "
                "kv_bytes_per_token); one token for the whole batch takes batch times that. Divide memory_bytes by "
                "it with integer division, //, which rounds down.")
def check_max_context(fn):
    """fn(memory_bytes, n_layers, n_kv_heads, d_head, bytes_per_element, batch) -> longest context that fits.

    Tried on 5 memory budgets and models, one whose division leaves more than half a token; compared with the memory
    divided by the batch's cache bytes per token (attention_book.kv_cache.kv_cache_bytes_per_token).
    """
    cases = [(2**30, "Gemma 2B", 4, 3), (10**10, "Llama 3 8B", 2, 1), (16 * 2**30, "Llama 2 7B", 2, 1),
             (16 * 2**30, "Llama 3 8B", 2, 1), (80 * 2**30, "Llama 2 70B", 2, 8)]  # the smallest memory first
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
                      expected + 1: "rounded up (or to the nearest): a token that does not fit whole does not fit"}
            note = (f"\nLikely mistake: {likely[got]}" if _is_number(got) and got in likely and got != expected else
                    "\nLikely mistake: the result must be an int" if got == expected else
                    f"\n{_see_hint('max_context')}")
            raise CheckFailed(f"max_context(memory_bytes={memory} ({memory / 2**30:.3g} GiB), n_layers={n_layers}, "
                              f"n_kv_heads={g}, d_head={d_head}, bytes_per_element={bytes_per_element}, batch={batch}) "
                              f"for {name}: expected {expected:,} tokens, got {got!r}{note}")
    # the last case is the question of the exercise: Llama 2 70B in fp16, 8 conversations, 80 GiB
    print(f"✓ max_context is right for {len(cases)} memory budgets and models. Your answer to the question: "
          f"{got:,} tokens for each of the {batch} conversations with {name}.")
