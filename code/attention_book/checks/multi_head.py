"""Checks for chapter 3's exercises: heads, parameters, nn.MultiheadAttention."""
import torch

from ..attention_layer import GroupedQueryAttention
from ..masks import causal_mask
from ..multi_head_attention import MultiHeadAttention
from ._compare import CheckFailed, _call, _compare, _describe, _exercise, _see_hint, _size


@_exercise("split_heads",
           task="given x (B, L, d_model) and n_heads, return (B, n_heads, L, d_head) with d_head = d_model // "
                "n_heads, where [:, j] holds head j: columns j * d_head up to (j + 1) * d_head of every token.",
           hint="x.view(B, L, n_heads, d_head) cuts each token's d_model columns into n_heads slices; then "
                ".transpose(1, 2) moves the head dimension before L.")
def check_split_heads(fn):
    """fn(x, n_heads): (B, L, d_model) -> (B, h, L, d_head), head j holding columns j*d_head:(j+1)*d_head.

    Tried on 3 random inputs, d_model from 8 to 30; compared with view and transpose.
    """
    gen = torch.Generator().manual_seed(3)
    cases = [(2, 5, 12, 3), (1, 4, 8, 8), (3, 2, 30, 5)]  # (B, L, d_model, n_heads)
    inputs = [(torch.randn(B, L, d_model, generator=gen), h) for B, L, d_model, h in cases]
    for x, h in sorted(inputs, key=lambda xh: _size(xh[0])):  # the smallest first
        B, L, d_model = x.shape
        expected = x.view(B, L, h, d_model // h).transpose(1, 2)
        no_transpose = ("reshaping (B, L, d_model) straight to (B, h, L, d_head) cuts the flattened tokens, not "
                        "each token's columns: head j must get columns j * d_head .. (j + 1) * d_head - 1 of every "
                        "token", lambda: x.reshape(B, h, L, d_model // h))
        _compare("split_heads", f"x {tuple(x.shape)}, n_heads={h}", expected, _call(fn, (x, h), "split_heads"),
                 hint=_see_hint("split_heads"), mistakes=[no_transpose])
    print(f"✓ split_heads is right on {len(cases)} inputs, d_model from 8 to 30.")


@_exercise("merge_heads",
           task="given x (B, h, L, d_head), return (B, L, h * d_head) in which token i's row holds its h heads' "
                "d_head values side by side, head 0 first: the inverse of split_heads.",
           hint="Move the head dimension back after L with x.transpose(1, 2), giving (B, L, h, d_head), then join "
                "the last two dimensions with .reshape(B, L, h * d_head) (reshape, not view: the transpose is not "
                "contiguous).")
def check_merge_heads(fn):
    """fn(x): (B, h, L, d_head) -> (B, L, h * d_head), the inverse of split_heads.

    Tried on 3 random inputs; compared with transpose and reshape.
    """
    gen = torch.Generator().manual_seed(4)
    cases = [(2, 3, 5, 4), (1, 8, 4, 1), (3, 5, 2, 6)]  # (B, h, L, d_head)
    inputs = [torch.randn(B, h, L, d, generator=gen) for B, h, L, d in cases]
    for x in sorted(inputs, key=_size):  # the smallest first
        B, h, L, d = x.shape
        expected = x.transpose(1, 2).reshape(B, L, h * d)
        no_transpose = ("reshaping (B, h, L, d_head) straight to (B, L, h * d_head), without moving the head "
                        "dimension after L first, puts values of different tokens in one row",
                        lambda: x.reshape(B, L, h * d))
        _compare("merge_heads", f"x {tuple(x.shape)}", expected, _call(fn, (x,), "merge_heads"),
                 hint=_see_hint("merge_heads"),
                 mistakes=[no_transpose])
    print(f"✓ merge_heads is right on {len(cases)} inputs and undoes split_heads.")


@_exercise("param_count",
           task="return the number of parameters (an int) of GroupedQueryAttention(d_model, n_heads, n_kv_heads, "
                "bias=bias): every weight and bias of the layer.",
           hint="Add up the four projections. W_q and W_o map d_model to d_model; W_k and W_v map d_model to "
                "n_kv_heads * d_head columns only (d_head = d_model // n_heads). With bias=True each projection also "
                "has one bias per output column.")
def check_param_count(fn):
    """fn(d_model, n_heads, n_kv_heads, bias) -> number of parameters of GroupedQueryAttention.

    Tried on 5 configurations (MHA, GQA, MQA, with and without biases); compared with the parameters of
    attention_book.GroupedQueryAttention.
    """
    cases = [(30, 5, 5, True), (64, 4, 1, True), (96, 12, 3, False), (512, 8, 8, False), (512, 8, 8, True)]
    for d_model, h, g, bias in cases:
        layer = GroupedQueryAttention(d_model, h, g, bias=bias)
        expected = sum(p.numel() for p in layer.parameters())
        got = _call(fn, (d_model, h, g, bias), "param_count")
        if got != expected:
            biases = sum(p.numel() for name, p in layer.named_parameters() if name.endswith("bias"))
            hint = ("did you count the biases?" if bias and got == expected - biases else
                    f"K and V project to n_kv_heads * d_head = {g * (d_model // h)} columns, not d_model")
            raise CheckFailed(f"param_count(d_model={d_model}, n_heads={h}, n_kv_heads={g}, bias={bias}): "
                              f"expected {expected:,}, got {got!r}\nHint: {hint}")
    print(f"✓ param_count matches the layer's parameters for {len(cases)} configurations, MHA, GQA and MQA.")


@_exercise("my_to_torch_mha",
           task="given a MultiHeadAttention layer, return an nn.MultiheadAttention "
                "with batch_first=True, so it reads (B, L, d_model) inputs, that computes the same outputs as the "
                "layer.",
           hint="Build nn.MultiheadAttention(layer.d_model, layer.n_heads, batch_first=True), then, under "
                "torch.no_grad(), copy the layer's weights into it: its in_proj_weight stacks W_q, W_k and W_v "
                "(torch.cat of the three, in that order), in_proj_bias their biases, and out_proj is W_o.")
def check_to_torch_mha(fn):
    """fn(layer) -> nn.MultiheadAttention(batch_first=True) computing what the MultiHeadAttention ``layer`` computes.

    Tried on 3 random layers with a causal mask; the module's output compared with the layer's.
    """
    for seed, (d_model, h) in [(2, (8, 1)), (0, (16, 4)), (1, (24, 3))]:  # the smallest layer first
        with torch.random.fork_rng():  # random layers without disturbing the notebook's generator
            torch.manual_seed(seed)
            layer = MultiHeadAttention(d_model, h)
            x = torch.randn(2, 5, d_model)
        mha = _call(fn, (layer,), "my_to_torch_mha")
        if not isinstance(mha, torch.nn.MultiheadAttention):
            raise CheckFailed(f"your function on a layer with d_model={d_model}, n_heads={h}: expected an "
                              f"nn.MultiheadAttention, got {_describe(mha)}")
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
        _compare("your nn.MultiheadAttention", f"d_model={d_model}, n_heads={h}, x {tuple(x.shape)}, causal mask",
                 expected.detach(), got, hint=_see_hint("my_to_torch_mha"), mistakes=mistakes)
    print("✓ your nn.MultiheadAttention computes the same outputs as the book's layer on 3 configurations.")


def _transposed_copy(layer, x, mask, in_proj=True, out_proj=True):
    """What nn.MultiheadAttention computes when the weights of ``layer`` are copied into it transposed (W.T for W):
    those of in_proj_weight, of out_proj.weight, or both."""
    mha = torch.nn.MultiheadAttention(layer.d_model, layer.n_heads, batch_first=True)
    q, k, v, o = (p.weight for p in (layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj))
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([q.T, k.T, v.T] if in_proj else [q, k, v]))
        mha.in_proj_bias.copy_(torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias]))
        mha.out_proj.weight.copy_(o.T if out_proj else o)
        mha.out_proj.bias.copy_(layer.o_proj.bias)
        return mha(x, x, x, attn_mask=~mask)[0]
