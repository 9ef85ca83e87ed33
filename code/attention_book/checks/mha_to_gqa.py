"""Checks for chapter 9's exercises: mean-pooling a projection (pool_projection), converting PyTorch's
nn.MultiheadAttention to GQA (convert_torch_mha), and pooling with a weight per head."""
import torch
from torch import nn

from ..attention_layer import GroupedQueryAttention
from ..convert import pool_heads, pool_kv_heads
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _see_hint, _seeded, _size


@_exercise("pool_projection",
           task="given a K or V projection weight (n_heads * d_head, d_model), in which old head i owns rows "
                "i * d_head up to (i + 1) * d_head, return (n_kv_heads * d_head, d_model): for each new K/V head j, "
                "the mean of the rows of the old heads it pools, the n_heads // n_kv_heads heads whose query heads "
                "read K/V head j, row by row.",
           hint="weight.view(n_kv_heads, n_heads // n_kv_heads, d_head, d_model) puts each group's heads along the "
                "second dimension (d_head = weight.shape[0] // n_heads); .mean(dim=1) averages them, and "
                ".reshape(n_kv_heads * d_head, d_model) stacks the new heads' rows again.")
def check_pool_projection(fn):
    """fn(weight (n_heads * d_head, d_model), n_heads, n_kv_heads) -> (n_kv_heads * d_head, d_model).

    Tried on 4 seeded random weights, (n_heads, n_kv_heads, d_head, d_model) = (8, 4, 4, 32), (8, 1, 2, 6),
    (6, 3, 5, 7) and (4, 4, 3, 5), MHA and MQA included; compared with the mean pooling of
    attention_book.convert.convert_to_gqa.
    """
    gen = _generator(9)
    inputs = [(torch.randn(h * d_head, d_model, generator=gen), h, g)
              for h, g, d_head, d_model in [(8, 4, 4, 32), (8, 1, 2, 6), (6, 3, 5, 7), (4, 4, 3, 5)]]
    for weight, h, g in sorted(inputs, key=lambda whg: _size(whg[0])):  # the smallest first
        d_model = weight.shape[1]
        expected = pool_heads(weight, h, g, "mean", None, fan_in=d_model)  # what convert_to_gqa does
        _compare("your pool_projection", f"a weight {tuple(weight.shape)} with n_heads={h}, n_kv_heads={g}", expected,
                 _call(fn, (weight, h, g), "pool_projection", refuse=["attention_book.convert.pool_heads"]),
                 hint=_see_hint("pool_projection"), mistakes=_pooling_mistakes(weight, h, g))
    print("✓ your pool_projection matches the package's pooling on 4 weights, MHA and MQA included.")


def _pooling_mistakes(param, h, g):
    """(description, what it gives) for the common wrong poolings of a K or V weight (h * d_head, ...) or bias."""
    grouped = param.unflatten(0, (g, h // g, -1))  # (g, heads per group, d_head, ...)
    return [("the old heads were grouped round-robin (head i into K/V head i % n_kv_heads); a new K/V head pools "
             "consecutive old heads", lambda: param.unflatten(0, (h // g, g, -1)).mean(dim=0).flatten(0, 1)),
            ("the heads of a group were added up, not averaged", lambda: grouped.sum(dim=1).flatten(0, 1)),
            ("the first head of each group was kept (the \"first\" initialisation), not the mean of the group",
             lambda: grouped[:, 0].flatten(0, 1))]


def _torch_mha(seed, d_model, n_heads, bias, dtype):
    """A seeded random nn.MultiheadAttention, leaving the global random state as it was."""
    with _seeded(seed):
        mha = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=dtype)
        if bias:  # nn.MultiheadAttention's biases start at 0: make them as large as the weights, so a missed one shows
            with torch.no_grad():
                mha.in_proj_bias.normal_()
                mha.out_proj.bias.normal_()
    return mha


def _block_mistakes(mha, name, h, g):
    """(description, what it gives) for the usual wrong readings of in_proj_weight (or in_proj_bias) for ``name``,
    one of the new layer's q_proj.weight, k_proj.bias, ..."""
    module, kind = name.split(".")
    if module == "o_proj":
        return []
    fused = mha.in_proj_weight if kind == "weight" else mha.in_proj_bias
    blocks = dict(zip(("q_proj", "k_proj", "v_proj"), fused.detach().chunk(3), strict=True))
    order = ("in_proj_weight's three blocks of d_model rows are the query, key and value weights, in that order"
             if kind == "weight" else "in_proj_bias's three blocks are the query, key and value biases, in that order")
    if module == "q_proj":
        return [(f"the query rows were taken from the wrong block: {order}", lambda other=other: blocks[other])
                for other in ("k_proj", "v_proj")]
    mine = blocks[module]
    others = [other for other in ("q_proj", "k_proj", "v_proj") if other != module]
    return ([(f"the {module[0].upper()} rows were pooled from the wrong block: {order}",
              lambda other=other: blocks[other].unflatten(0, (g, h // g, -1)).mean(dim=1).flatten(0, 1))
             for other in others] + _pooling_mistakes(mine, h, g))


@_exercise("convert_torch_mha",
           task="given PyTorch's nn.MultiheadAttention `mha` (embed_dim = d_model, num_heads = n_heads, "
                "in_proj_weight (3 * d_model, d_model) stacking the query, key and value weights in that order, "
                "in_proj_bias (3 * d_model,) or None, out_proj an nn.Linear) and n_kv_heads, which divides n_heads, "
                "return a new GroupedQueryAttention with the same d_model and n_heads, d_head = d_model // n_heads, "
                "n_kv_heads K/V heads, biases where mha has them and parameters of mha's dtype and device: its query "
                "and output projections equal to mha's, and each new K/V head's key and value rows (weights and "
                "biases) the mean of those of the n_heads // n_kv_heads old heads of its group; `mha` left "
                "unchanged, and no tensor or storage shared between the two; without the package's converters "
                "(from_torch_mha, pool_kv_heads, pool_heads, convert_to_gqa).",
           hint="Build GroupedQueryAttention(mha.embed_dim, mha.num_heads, n_kv_heads, bias=...) and move it to "
                "in_proj_weight's dtype and device with .to(...). in_proj_weight.chunk(3) gives the query, key and "
                "value weights. Under torch.no_grad(), copy_ the query weight and out_proj's weight as they are, and "
                "your pool_projection of exercise 1 of the key and value weights; then the biases the same way, "
                "from in_proj_bias.chunk(3): a bias (n_heads * d_head,) pools as a weight with one column, "
                "bias[:, None], and column 0 of the result is the pooled bias.",
           idea="nn.MultiheadAttention keeps its three input projections stacked in one matrix: cut it into three, "
                "keep the query and output weights as they are, and pool the key and value weights group by group "
                "with exercise 1's function. The biases follow the same path as their weights.")
def check_convert_torch_mha(fn):
    """fn(mha, n_kv_heads) -> a new GroupedQueryAttention with n_kv_heads mean-pooled K/V heads.

    Tried on 5 seeded random nn.MultiheadAttention layers, with and without biases, one in float64, converted to
    GQA, to MQA and to g = h; compared with attention_book.convert.pool_kv_heads, parameter by parameter and on an
    input; from_torch_mha, pool_kv_heads, pool_heads and convert_to_gqa refuse while the answer runs.
    """
    refused = ["attention_book.torch_interop.from_torch_mha", "attention_book.convert.pool_kv_heads",
               "attention_book.convert.pool_heads", "attention_book.convert.convert_to_gqa",
               "attention_book.convert.shared_kv_layer"]
    layers = [(_torch_mha(90 + i, d_model, h, bias, dtype), g) for i, (d_model, h, bias, g, dtype) in
              enumerate([(6, 2, True, 1, torch.float32), (8, 4, True, 4, torch.float32),
                         (12, 6, False, 3, torch.float32), (16, 8, True, 2, torch.float64),
                         (24, 8, True, 1, torch.float32)])]
    gen = _generator(91)
    for mha, g in sorted(layers, key=lambda mg: _size(mg[0])):  # the smallest first
        h, d_model = mha.num_heads, mha.embed_dim
        bias = mha.in_proj_bias is not None
        dtype = mha.in_proj_weight.dtype
        tried = (f"an nn.MultiheadAttention (embed_dim={d_model}, num_heads={h}, "
                 f"{'with' if bias else 'without'} biases, {dtype}) converted to n_kv_heads={g}")
        with torch.no_grad():
            expected = pool_kv_heads(mha, g)
            x = torch.randn(2, 5, d_model, generator=gen).to(dtype)  # (B, L, d_model)
            expected_out = expected(x, is_causal=True)[0]
        before = {name: p.clone() for name, p in mha.state_dict().items()}
        got = _call(fn, (mha, g), "convert_torch_mha", refuse=refused)
        if not isinstance(got, GroupedQueryAttention):
            raise CheckFailed(f"convert_torch_mha on {tried}: expected a GroupedQueryAttention, got "
                              f"{type(got).__name__}")
        if any(not torch.equal(p, before[name]) for name, p in mha.state_dict().items()):
            raise CheckFailed(f"convert_torch_mha on {tried}: mha's weights changed; it must be left as it was")
        sizes = {"n_heads": h, "n_kv_heads": g, "d_head": d_model // h, "d_model": d_model}
        wrong = {name: getattr(got, name, None) for name, size in sizes.items() if getattr(got, name, None) != size}
        if wrong:
            raise CheckFailed(f"convert_torch_mha on {tried}: expected a layer with {sizes}, got one with {wrong}")
        old_storage = {p.untyped_storage().data_ptr() for p in mha.parameters()}
        for name, param in expected.named_parameters():
            module, kind = name.split(".")
            mine = getattr(getattr(got, module, None), kind, None)
            if not isinstance(mine, torch.Tensor):
                raise CheckFailed(f"convert_torch_mha on {tried}: the new layer has no {name}")
            if mine.untyped_storage().data_ptr() in old_storage:
                raise CheckFailed(f"convert_torch_mha on {tried}: the new layer's {name} shares its storage with a "
                                  "tensor of mha (a view or a slice of it): training one of the two layers would "
                                  "change the other")
            _compare(f"your layer's {name}", tried, param.detach(), mine.detach(),
                     hint=_see_hint("convert_torch_mha"), mistakes=_block_mistakes(mha, name, h, g))
        with torch.no_grad():
            out = got(x, is_causal=True)[0]
        _compare("your layer's output", f"{tried}, x {tuple(x.shape)}", expected_out, out,
                 hint=_see_hint("convert_torch_mha"))
    print("✓ your convert_torch_mha matches the package's mean pooling on 5 layers, with and without biases, "
          "float64, GQA, MQA and g = h included.")


def _weighted_pool(weight, n_heads, n_kv_heads, importance):
    shares = importance.view(n_kv_heads, -1)  # (g, heads per group)
    shares = shares / shares.sum(dim=1, keepdim=True)
    grouped = weight.unflatten(0, (n_kv_heads, n_heads // n_kv_heads, -1))  # (g, heads per group, d_head, d_model)
    return (grouped * shares[:, :, None, None]).sum(dim=1).flatten(0, 1)


@_exercise("weighted_pool_projection",
           task="given a K or V projection weight (n_heads * d_head, d_model), in which old head i owns rows "
                "i * d_head up to (i + 1) * d_head, and importance (n_heads,), positive, one number per old head, "
                "return (n_kv_heads * d_head, d_model): for each new K/V head, the weighted average of the rows of "
                "the old heads of its group (the n_heads // n_kv_heads consecutive heads whose query heads read "
                "it), each old head weighing in proportion to its importance, the weights of a group adding up "
                "to 1.",
           hint="importance.view(n_kv_heads, n_heads // n_kv_heads) puts each group's importances in a row; divide "
                "each row by its sum, so that it adds up to 1. weight.view(n_kv_heads, n_heads // n_kv_heads, "
                "d_head, d_model) puts the group's heads along the second dimension: multiply by the shares "
                "(shares[:, :, None, None]), .sum(dim=1), and reshape to (n_kv_heads * d_head, d_model).")
def check_weighted_pool_projection(fn):
    """fn(weight (n_heads * d_head, d_model), n_heads, n_kv_heads, importance (n_heads,)) -> (g * d_head, d_model).

    Tried on 5 seeded random weights and importances, MQA and g = h included, one with equal importances
    (which must give the package's mean pooling); compared with the weighted mean of each group's rows.
    """
    gen = _generator(92)
    inputs = []
    for h, g, d_head, d_model in [(4, 2, 1, 3), (6, 3, 2, 4), (8, 1, 2, 5), (8, 4, 4, 16), (4, 4, 3, 6)]:
        importance = 0.05 + torch.rand(h, generator=gen) * 2  # positive, as ablation rises mostly are
        inputs.append((torch.randn(h * d_head, d_model, generator=gen), h, g, importance))
    inputs[3] = inputs[3][:3] + (torch.full((8,), 0.7),)  # equal importances: the plain mean
    for weight, h, g, importance in sorted(inputs, key=lambda i: _size(*i)):  # the smallest first
        expected = _weighted_pool(weight, h, g, importance)
        if importance.unique().numel() == 1:
            expected = pool_heads(weight, h, g, "mean", None, fan_in=weight.shape[1])
        grouped = weight.unflatten(0, (g, h // g, -1))
        shares = importance.view(g, -1)
        mistakes = [
            ("the importances were normalised over all the heads, not within each group: a group's weights do not "
             "add up to 1", lambda: (grouped * (shares / importance.sum())[:, :, None, None]).sum(1).flatten(0, 1)),
            ("the importances were not divided by their group's total", lambda: (grouped * shares[:, :, None, None])
             .sum(1).flatten(0, 1)),
            ("the importances were left out: that is the plain mean", lambda: grouped.mean(dim=1).flatten(0, 1)),
            ("the old heads were grouped round-robin (head i into K/V head i % n_kv_heads); a new K/V head pools "
             "consecutive old heads", lambda: _weighted_pool(weight.unflatten(0, (h // g, g, -1)).transpose(0, 1)
                                                             .flatten(0, 2), h, g,
                                                             importance.view(h // g, g).T.flatten())),
        ]
        _compare("your weighted_pool_projection", f"a weight {tuple(weight.shape)} with n_heads={h}, "
                 f"n_kv_heads={g}, importance {[round(x, 2) for x in importance.tolist()]}", expected,
                 _call(fn, (weight, h, g, importance), "weighted_pool_projection",
                       refuse=["attention_book.convert.pool_heads"]),
                 hint=_see_hint("weighted_pool_projection"), mistakes=mistakes)
    print("✓ your weighted_pool_projection is right on 5 weights, equal importances giving the package's mean "
          "pooling.")
