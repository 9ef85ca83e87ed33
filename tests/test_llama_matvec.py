"""SplitLinear: the same products as nn.Linear, computed as slices on several threads."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.llama.matvec import SplitLinear, default_splits, split_linears


@pytest.mark.parametrize("shape,split", [((96, 32), "inputs"), ((32, 96), "outputs"), ((48, 48), "inputs")])
@pytest.mark.parametrize("n_splits", [1, 2, 4])
def test_equals_f_linear_for_decode_steps_and_prefills(shape, split, n_splits):
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(shape, generator=gen)
    layer = SplitLinear(weight, n_splits)
    assert layer.split == split and layer.weight.shape == shape and torch.equal(layer.weight, weight)
    for x_shape in [(1, 1, shape[1]), (5, 1, shape[1]), (2, 7, shape[1])]:  # decode steps, then a prefill
        x = torch.randn(x_shape, generator=gen)
        torch.testing.assert_close(layer(x), F.linear(x, weight), rtol=1e-5, atol=1e-5)


def test_fused_parts_share_the_fused_storage():
    q, k = nn.Linear(32, 32, bias=False), nn.Linear(32, 8, bias=False)
    fused, (q_part, k_part) = SplitLinear.fuse([q, k], n_splits=2)
    assert fused.weight.shape == (40, 32) and q_part.weight.untyped_storage().data_ptr() == \
        fused.weight.untyped_storage().data_ptr()
    x = torch.randn(1, 1, 32)
    torch.testing.assert_close(fused(x), torch.cat([q(x), k(x)], dim=-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(k_part(x), k(x), rtol=1e-5, atol=1e-6)


def test_split_linears_keeps_a_tied_embedding_tied():
    model = nn.Module()
    model.embedding, model.output = nn.Embedding(50, 16), nn.Linear(16, 50, bias=False)
    model.output.weight = model.embedding.weight
    model.mlp = nn.Linear(16, 16, bias=True)  # with a bias: left as it is
    ids = torch.tensor([[3, 7]])
    with torch.no_grad():
        expected = model.output(model.embedding(ids))
        split_linears(model, n_splits=2)
        assert isinstance(model.output, SplitLinear) and type(model.mlp) is nn.Linear
        assert model.embedding.weight is model.output.weight
        torch.testing.assert_close(model.output(model.embedding(ids)), expected)


def test_default_splits_divide_the_size():
    assert default_splits(576, threads=2) == 2 and default_splits(576, threads=5) == 4
    assert default_splits(7, threads=4) == 1
    with pytest.raises(ValueError, match="must divide"):
        SplitLinear(torch.randn(8, 6), n_splits=4)


@pytest.mark.parametrize("split", ["inputs", "outputs"])
def test_casting_the_layer_casts_what_a_decode_step_reads(split):
    layer = SplitLinear(torch.randn(12, 8), n_splits=2, split=split)
    x = torch.randn(1, 1, 8)  # one token: the split path
    layer.double()
    torch.testing.assert_close(layer(x.double()), F.linear(x.double(), layer.weight))
    layer.half().float()
    layer.weight.zero_()
    assert torch.equal(layer(x), torch.zeros(1, 1, 12))


def test_split_linears_keeps_two_parameters_over_one_tensor_tied():
    model = nn.Module()
    model.embedding, model.output = nn.Embedding(50, 16), nn.Linear(16, 50, bias=False)
    model.output.weight = nn.Parameter(model.embedding.weight.detach())  # as load_state_dict(assign=True) leaves it
    split_linears(model, n_splits=2)
    assert model.embedding.weight is model.output.weight
