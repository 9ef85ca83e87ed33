"""Checks for chapter 3's exercises: the layer's forward from its projections, parameters,
nn.MultiheadAttention."""
import math

import torch

from ..attention_layer import GroupedQueryAttention
from ..masks import causal_mask, real_key_mask
from ..multi_head_attention import MultiHeadAttention
from ._compare import CheckFailed, _call, _compare, _describe, _exercise, _generator, _see_hint, _seeded, _size


REFUSED_LAYER = [  # the package's (and PyTorch's) own solutions of the layer's forward, or of its steps
    "attention_book.multi_head_attention.MultiHeadAttention.forward",
    "attention_book.attention_layer.GroupedQueryAttention.forward",
    "attention_book.grouped_sdpa.attend",
    "attention_book.grouped_sdpa.grouped_query_sdpa",
    "attention_book.masks.layer_mask",
    "attention_book.sdpa.scaled_dot_product_attention",
    ("torch.nn.functional.scaled_dot_product_attention", "PyTorch's own solution of this step"),
    ("torch.nn.MultiheadAttention.forward", "PyTorch's own solution of this step"),
    ("torch.nn.functional.multi_head_attention_forward", "PyTorch's own solution of this step"),
]


def _multi_head(layer, x, kv, mask, *, split=True, merge=True, scale="d_head", empty="zero", invert=False,
                project=True):
    """The layer's output computed from its four projections, in float64: the mistakes the check names. ``split`` /
    ``merge`` False: heads cut by a reshape without the transpose; ``scale``: "d_head", "d_model" or None
    (unscaled); ``empty``: what a query with no visible key gets ("zero", "nan", "uniform" as -1e9 gives);
    ``invert``: the mask read the wrong way round; ``project`` False: the heads' concatenation without o_proj."""
    kv = x if kv is None else kv
    (B, L, _), S, h, d = x.shape, kv.shape[1], layer.n_heads, layer.d_head

    def heads(projection, t, n):  # (B, n, h * d) -> (B, h, n, d)
        t = torch.nn.functional.linear(t.double(), projection.weight.double(),
                                       None if projection.bias is None else projection.bias.double())
        return t.view(B, n, h, d).transpose(1, 2) if split else t.reshape(B, h, n, d)

    q, k, v = heads(layer.q_proj, x, L), heads(layer.k_proj, kv, S), heads(layer.v_proj, kv, S)
    scores = q @ k.transpose(-2, -1)  # (B, h, L, S)
    if scale is not None:
        scores = scores / math.sqrt(d if scale == "d_head" else layer.d_model)
    if mask is not None:
        allowed = mask[:, None] if mask.dim() == 3 else mask
        scores = scores.masked_fill(allowed if invert else ~allowed, float("-inf"))
    hidden = (scores == float("-inf"))
    if empty == "uniform":
        scores = scores.masked_fill(hidden, -1e9)
    if empty == "zero":
        weights = torch.softmax(scores.masked_fill(hidden.all(-1, keepdim=True), 0.0), -1).masked_fill(hidden, 0)
    else:
        weights = torch.softmax(scores, -1)
    out = weights @ v  # (B, h, L, d)
    out = out.transpose(1, 2).reshape(B, L, h * d) if merge else out.reshape(B, L, h * d)
    if project:
        o = layer.o_proj
        out = torch.nn.functional.linear(out, o.weight.double(), None if o.bias is None else o.bias.double())
    return out.to(x.dtype)


def _multi_head_cases():
    """(layer, x, kv or None, mask or None, what was tried), the smallest first."""
    cases = []
    gen = _generator(5)
    # (seed, d_model, n_heads, d_head or None, bias, B, L, S or None for self-attention, mask kind)
    for seed, d_model, h, d_head, bias, B, L, S, kind in [
            (0, 8, 2, None, True, 1, 3, None, None),
            (1, 8, 2, 3, True, 2, 3, 5, "(L, S) causal"),
            (2, 12, 3, None, True, 2, 4, None, "(B, L, S), the second sequence empty"),
            (3, 16, 4, 6, False, 2, 5, 6, "(B, h, L, S) random, some queries with no visible key"),
            (4, 24, 3, None, True, 3, 6, 7, "(B, 1, L, S) padding")]:
        with _seeded(seed):  # random layers without disturbing the notebook's generator
            layer = MultiHeadAttention(d_model, h, d_head=d_head, bias=bias)
        x = torch.randn(B, L, d_model, generator=gen)
        kv = None if S is None else torch.randn(B, S, d_model, generator=gen)
        S = L if S is None else S
        if kind is None:
            mask = None
        elif kind.startswith("(L, S)"):
            mask = causal_mask(L, S)
        elif kind.startswith("(B, L, S)"):
            mask = causal_mask(L, S).expand(B, L, S).clone()
            mask[1] = False
        elif kind.startswith("(B, h, L, S)"):
            mask = torch.rand(B, h, L, S, generator=gen) > 0.5
            mask[0, 1, 2] = False
            mask[1, :, 0] = False
        else:
            mask = real_key_mask([S, S - 3, 2], S)[:, None].expand(B, 1, L, S)
        what = (f"MultiHeadAttention(d_model={d_model}, n_heads={h}, d_head={layer.d_head}, bias={bias}), "
                f"x {tuple(x.shape)}, " + ("self-attention" if kv is None else f"kv {tuple(kv.shape)}") +
                f", mask {kind or 'None'}")
        cases.append((layer, x, kv, mask, what))
    return sorted(cases, key=lambda case: _size(*(t for t in case[:4] if t is not None)))


@_exercise("my_multi_head",
           task="given a MultiHeadAttention layer, x (B, L, d_model), kv (B, S, d_model) or None (then kv = x) and "
                "mask (None, or boolean with True = may attend, of shape (L, S), (B, L, S) or (B, 1 or h, L, S)), "
                "return the layer's output (B, L, d_model), computed from its four projections q_proj, k_proj, "
                "v_proj, o_proj, its n_heads and its d_head; a query that may see no key gets a zero output from "
                "every head.",
           hint="Project x into queries and kv into keys and values, and cut each (B, n, h * d_head) result into "
                "heads: .view(B, n, h, d_head).transpose(1, 2) gives (B, h, n, d_head). Attend in every head at "
                "once as in chapter 1's exercise 3: scores q kᵀ / √d_head of shape (B, h, L, S); a (B, L, S) mask "
                "needs mask[:, None] to reach every head; -inf where the mask is False, softmax over the keys, and "
                "zeros for the rows that see nothing. Then merge: .transpose(1, 2).reshape(B, L, h * d_head), and "
                "apply o_proj.",
           idea="The layer, step by step: four projections, a cut of each projected vector into h pieces "
                "(one per head), chapter 1's attention run in every head at once, and the pieces glued back together "
                "before the output projection. The mask must reach every head.")
def check_multi_head(fn):
    """fn(layer, x, kv, mask) -> (B, L, d_model): the forward of the MultiHeadAttention ``layer``, written from its
    four projections.

    Tried on 5 random layers and inputs, the smallest first: self- and cross-attention, d_head equal to and different
    from d_model // n_heads, with and without biases, no mask and masks of shapes (L, S), (B, L, S), (B, h, L, S)
    and (B, 1, L, S), with queries that may see no key; compared with the layer's own forward
    (attention_book.MultiHeadAttention, need_weights=True: the package's scaled_dot_product_attention). Calling the
    layer's forward, the package's attend, layer_mask or scaled_dot_product_attention, or PyTorch's
    scaled_dot_product_attention or nn.MultiheadAttention fails.
    """
    cases = _multi_head_cases()
    for layer, x, kv, mask, tried in cases:
        with torch.no_grad():
            expected, _ = layer(x, kv, mask=mask, need_weights=True)  # before the answer: it refuses then
            got = _call(fn, (layer, x, kv, mask), "my_multi_head", refuse=REFUSED_LAYER)
        if isinstance(got, tuple):
            raise CheckFailed(f"my_multi_head on {tried}: expected a tensor of shape {tuple(expected.shape)}, got a "
                              f"tuple: return the layer's output only")

        def mistake(**how):
            return lambda: _multi_head(layer, x, kv, mask, **how)
        mistakes = [
            ("the heads were cut by reshaping (B, n, h * d_head) straight to (B, h, n, d_head), which cuts the "
             "flattened tokens, not each token's columns: head j must get columns j * d_head .. (j + 1) * d_head - 1 "
             "of every token", mistake(split=False)),
            ("the heads were merged by reshaping (B, h, L, d_head) straight to (B, L, h * d_head), without moving "
             "the head dimension after L first: rows mix values of different tokens", mistake(merge=False)),
            ("the scores are scaled by 1/√d_model; each head's are scaled by 1/√d_head, the width of its own "
             "queries and keys", mistake(scale="d_model")),
            ("the scores are not scaled by 1/√d_head", mistake(scale=None)),
            ("the mask is used the wrong way round: True means the query may attend to the key",
             mistake(invert=True)),
            ("a query that may see no key got NaN (a softmax of a row of -inf is 0 / 0); every head must give it a "
             "zero output", mistake(empty="nan")),
            ("a query that may see no key spread its weight evenly over keys it may not see, as masking with -1e9 "
             "does; every head must give it a zero output", mistake(empty="uniform")),
            ("the output projection o_proj was not applied to the concatenated heads", mistake(project=False))]
        _compare("my_multi_head", tried, expected, got, hint=_see_hint("my_multi_head"), atol=1e-5,
                 mistakes=mistakes)
    print(f"✓ my_multi_head matches the layer's forward on {len(cases)} layers: self- and cross-attention, "
          "d_head ≠ d_model / n_heads, masks of 4 shapes and queries with no visible key.")


BUILT_LAYERS = ["attention_book.attention_layer.GroupedQueryAttention",
                "attention_book.multi_head_attention.MultiHeadAttention", "torch.nn.MultiheadAttention"]


@_exercise("param_count",
           task="return the number of parameters (an int) of GroupedQueryAttention(d_model, n_heads, n_kv_heads, "
                "bias=bias): every weight and bias of the layer.",
           hint="Add up the four projections. W_q and W_o map d_model to d_model; W_k and W_v map d_model to "
                "n_kv_heads * d_head columns only (d_head = d_model // n_heads). With bias=True each projection also "
                "has one bias per output column.")
def check_param_count(fn):
    """fn(d_model, n_heads, n_kv_heads, bias) -> number of parameters of GroupedQueryAttention.

    Tried on 5 configurations (MHA, GQA, MQA, with and without biases); compared with the parameters of
    attention_book.GroupedQueryAttention. Building a layer (the package's or nn.MultiheadAttention) fails.
    """
    cases = [(30, 5, 5, True), (64, 4, 1, True), (96, 12, 3, False), (512, 8, 8, False), (512, 8, 8, True)]
    for d_model, h, g, bias in cases:
        layer = GroupedQueryAttention(d_model, h, g, bias=bias)
        expected = sum(p.numel() for p in layer.parameters())
        got = _call(fn, (d_model, h, g, bias), "param_count", refuse=[(name, "which the exercise says not to build")
                                                                     for name in BUILT_LAYERS])
        if got != expected:
            biases = sum(p.numel() for name, p in layer.named_parameters() if name.endswith("bias"))
            hint = ("did you count the biases?" if bias and got == expected - biases else
                    f"K and V project to n_kv_heads * d_head = {g * (d_model // h)} columns, not d_model")
            raise CheckFailed(f"param_count(d_model={d_model}, n_heads={h}, n_kv_heads={g}, bias={bias}): "
                              f"expected {expected:,}, got {f'{got:,}' if isinstance(got, int) else repr(got)}"
                              f"\nHint: {hint}")
    print(f"✓ param_count matches the layer's parameters for {len(cases)} configurations, MHA, GQA and MQA.")


@_exercise("my_to_torch_mha",
           task="given a MultiHeadAttention layer, return an nn.MultiheadAttention "
                "with batch_first=True, so it reads (B, L, d_model) inputs, that computes the same outputs as the "
                "layer.",
           hint="Build nn.MultiheadAttention(layer.d_model, layer.n_heads, bias=..., batch_first=True), with biases "
                "if the layer's projections have them (layer.q_proj.bias is not None), then, under torch.no_grad(), "
                "copy the layer's weights into it: its in_proj_weight stacks W_q, W_k and W_v (torch.cat of the "
                "three, in that order), in_proj_bias their biases, and out_proj is W_o.")
def check_to_torch_mha(fn):
    """fn(layer) -> nn.MultiheadAttention(batch_first=True) computing what the MultiHeadAttention ``layer`` computes.

    Tried on 4 random layers, with and without biases, with a causal mask; the module's output compared with the
    layer's, and its biases with the layer's (none where the layer has none). Calling the package's to_torch_mha
    fails.
    """
    cases = [(2, 8, 1, True), (3, 12, 2, False), (0, 16, 4, True), (1, 24, 3, False)]  # the smallest layer first
    for seed, d_model, h, bias in cases:
        with _seeded(seed):  # random layers without disturbing the notebook's generator
            layer = MultiHeadAttention(d_model, h, bias=bias)
            x = torch.randn(2, 5, d_model)
        mha = _call(fn, (layer,), "my_to_torch_mha", refuse=["attention_book.torch_interop.to_torch_mha"])
        if not isinstance(mha, torch.nn.MultiheadAttention):
            raise CheckFailed(f"your function on a layer with d_model={d_model}, n_heads={h}: expected an "
                              f"nn.MultiheadAttention, got {_describe(mha)}")
        biases = [name for name, t in (("in_proj_bias", mha.in_proj_bias), ("out_proj.bias", mha.out_proj.bias))
                  if t is not None]
        if not bias and biases:
            raise CheckFailed(f"your function on a layer with d_model={d_model}, n_heads={h}, bias=False: the layer "
                              f"has no biases, but your nn.MultiheadAttention has {' and '.join(biases)}: it has "
                              "parameters the layer does not have")
        if bias and len(biases) < 2:
            raise CheckFailed(f"your function on a layer with d_model={d_model}, n_heads={h}, bias=True: the layer's "
                              "projections have biases, but your nn.MultiheadAttention has no "
                              f"{' or '.join(n for n in ('in_proj_bias', 'out_proj.bias') if n not in biases)}")
        mask = causal_mask(5)
        expected, _ = layer(x, mask=mask)
        try:
            with torch.no_grad():
                got, _ = mha(x, x, x, attn_mask=~mask)  # nn.MultiheadAttention: True = blocked
        except RuntimeError as error:
            raise CheckFailed(f"your nn.MultiheadAttention on x {tuple(x.shape)} with a (5, 5) causal mask "
                              f"raised: {error}\nHint: did you set batch_first=True?") from None
        layout = "rows are outputs, (out, in), as in an nn.Linear's weight"
        transposed = [  # (what was copied transposed, which weights were), the whole copy first
            (f"transposed weights: in_proj_weight and out_proj.weight were filled with W.T; their {layout}",
             (True, True)),
            (f"transposed weights: in_proj_weight was filled with W_q.T, W_k.T, W_v.T; its {layout}", (True, False)),
            (f"transposed weights: out_proj.weight was filled with W_o.T; its {layout}", (False, True))]
        mistakes = [(text, lambda which=which: _transposed_copy(layer, x, mask, *which)) for text, which in transposed]
        _compare("your nn.MultiheadAttention",
                 f"d_model={d_model}, n_heads={h}, bias={bias}, x {tuple(x.shape)}, causal mask",
                 expected.detach(), got, hint=_see_hint("my_to_torch_mha"), mistakes=mistakes)
    print(f"✓ your nn.MultiheadAttention computes the same outputs as the book's layer on {len(cases)} "
          "configurations, with and without biases.")


def _transposed_copy(layer, x, mask, in_proj=True, out_proj=True):
    """What nn.MultiheadAttention computes when the weights of ``layer`` are copied into it transposed (W.T for W):
    those of in_proj_weight, of out_proj.weight, or both."""
    bias = layer.q_proj.bias is not None
    mha = torch.nn.MultiheadAttention(layer.d_model, layer.n_heads, bias=bias, batch_first=True)
    q, k, v, o = (p.weight for p in (layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj))
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([q.T, k.T, v.T] if in_proj else [q, k, v]))
        mha.out_proj.weight.copy_(o.T if out_proj else o)
        if bias:
            mha.in_proj_bias.copy_(torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias]))
            mha.out_proj.bias.copy_(layer.o_proj.bias)
        return mha(x, x, x, attn_mask=~mask)[0]
