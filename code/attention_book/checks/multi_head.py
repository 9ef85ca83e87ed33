"""Checks for chapter 3's exercises: heads, parameters, nn.MultiheadAttention."""
import torch

from ..attention_layer import GroupedQueryAttention
from ..masks import causal_mask
from ._compare import CheckFailed, _call, _compare, _describe


def check_split_heads(fn):
    """fn(x, n_heads): (B, L, d_model) -> (B, h, L, d_head), head j holding columns j*d_head:(j+1)*d_head.

    Tried on 3 random inputs, d_model from 8 to 30; compared with view and transpose.
    """
    task = "cut the last dimension into n_heads slices of d_head, then move the head dimension before L."
    gen = torch.Generator().manual_seed(3)
    cases = [(2, 5, 12, 3), (1, 4, 8, 8), (3, 2, 30, 5)]  # (B, L, d_model, n_heads)
    for B, L, d_model, h in cases:
        x = torch.randn(B, L, d_model, generator=gen)
        expected = x.view(B, L, h, d_model // h).transpose(1, 2)
        _compare("split_heads", f"x {tuple(x.shape)}, n_heads={h}", expected, _call(fn, (x, h), task),
                 hint="view to (B, L, h, d_head) first, then swap the L and h dimensions")
    print(f"✓ split_heads is right on {len(cases)} inputs, d_model from 8 to 30.")


def check_merge_heads(fn):
    """fn(x): (B, h, L, d_head) -> (B, L, h * d_head), the inverse of split_heads.

    Tried on 3 random inputs; compared with transpose and reshape.
    """
    task = "move the head dimension back after L, then join the heads' slices into one dimension."
    gen = torch.Generator().manual_seed(4)
    cases = [(2, 3, 5, 4), (1, 8, 4, 1), (3, 5, 2, 6)]  # (B, h, L, d_head)
    for B, h, L, d in cases:
        x = torch.randn(B, h, L, d, generator=gen)
        expected = x.transpose(1, 2).reshape(B, L, h * d)
        _compare("merge_heads", f"x {tuple(x.shape)}", expected, _call(fn, (x,), task),
                 hint="swap h and L back first; a plain reshape of (B, h, L, d_head) mixes up tokens")
    print(f"✓ merge_heads is right on {len(cases)} inputs and undoes split_heads.")


def check_param_count(fn):
    """fn(d_model, n_heads, n_kv_heads, bias) -> number of parameters of GroupedQueryAttention.

    Tried on 5 configurations (MHA, GQA, MQA, with and without biases); compared with the parameters of
    attention_book.GroupedQueryAttention.
    """
    task = "add up the weights (and biases) of the Q, K, V and O projections."
    cases = [(512, 8, 8, True), (512, 8, 8, False), (64, 4, 1, True), (96, 12, 3, False), (30, 5, 5, True)]
    for d_model, h, g, bias in cases:
        layer = GroupedQueryAttention(d_model, h, g, bias=bias)
        expected = sum(p.numel() for p in layer.parameters())
        got = _call(fn, (d_model, h, g, bias), task)
        if got != expected:
            biases = sum(p.numel() for name, p in layer.named_parameters() if name.endswith("bias"))
            hint = ("did you count the biases?" if bias and got == expected - biases else
                    f"K and V project to n_kv_heads * d_head = {g * (d_model // h)} columns, not d_model")
            raise CheckFailed(f"param_count(d_model={d_model}, n_heads={h}, n_kv_heads={g}, bias={bias}): "
                              f"expected {expected:,}, got {got!r}\nHint: {hint}")
    print(f"✓ param_count matches the layer's parameters for {len(cases)} configurations, MHA, GQA and MQA.")


def check_to_torch_mha(fn):
    """fn(layer) -> nn.MultiheadAttention(batch_first=True) computing what the MHA ``layer`` computes.

    Tried on 3 random layers with a causal mask; the module's output compared with the layer's.
    """
    task = ("build an nn.MultiheadAttention that reads (B, L, d_model) inputs, and copy the layer's four "
            "projections into it (its in_proj_weight stacks three of them).")
    for seed, (d_model, h) in enumerate([(16, 4), (24, 3), (8, 1)]):
        with torch.random.fork_rng():  # random layers without disturbing the notebook's generator
            torch.manual_seed(seed)
            layer = GroupedQueryAttention(d_model, h)
            x = torch.randn(2, 5, d_model)
        mha = _call(fn, (layer,), task)
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
        _compare("your nn.MultiheadAttention", f"d_model={d_model}, n_heads={h}, x {tuple(x.shape)}, causal mask",
                 expected.detach(), got, hint="did you set batch_first=True and copy the biases too?")
    print("✓ your nn.MultiheadAttention computes the same outputs as the book's layer on 3 configurations.")
