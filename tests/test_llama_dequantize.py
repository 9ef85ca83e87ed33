"""Dequantisation of GGUF tensors in torch, against gguf's own numpy reference (bit for bit)."""
import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from attention_book.llama.dequantize import SUPPORTED, dequantize  # noqa: E402

QTYPES = ["F32", "F16", "Q8_0", "Q4_1"]


def quantised(qtype, shape, seed=0):
    """Bytes of a random tensor of ``shape`` quantised by gguf, as a uint8 tensor."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    data = gguf.quants.quantize(x, gguf.GGMLQuantizationType[qtype])
    return torch.from_numpy(np.ascontiguousarray(data).view(np.uint8).reshape(-1).copy())


def reference(raw, qtype, shape):
    numbers = gguf.quants.dequantize(raw.numpy(), gguf.GGMLQuantizationType[qtype])
    return torch.from_numpy(np.asarray(numbers, dtype=np.float32).reshape(shape).copy())


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("shape", [(96,), (3, 64), (17, 256)])
def test_equals_gguf_on_quantised_random_tensors(qtype, shape):
    raw = quantised(qtype, shape)
    ours = dequantize(raw, qtype, shape)
    assert ours.dtype == torch.float32 and ours.shape == shape
    assert torch.equal(ours, reference(raw, qtype, shape))


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1"])
def test_equals_gguf_on_random_blocks(qtype):
    """Any bytes, not only those a quantiser writes: random scales, minima and 4-bit or 8-bit numbers."""
    bytes_per_block = {"Q8_0": 34, "Q4_1": 20}[qtype]
    gen = torch.Generator().manual_seed(1)
    raw = torch.randint(0, 256, (500, bytes_per_block), dtype=torch.uint8, generator=gen)
    scales = torch.randn(500, 2 if qtype == "Q4_1" else 1, generator=gen).half()  # finite fp16 d (and m)
    raw[:, :2 * scales.shape[1]] = scales.view(torch.uint8).reshape(500, -1)
    ours = dequantize(raw, qtype, (500, 32))
    torch.testing.assert_close(ours, reference(raw, qtype, (500, 32)), rtol=0, atol=0)


@pytest.mark.parametrize("qtype", QTYPES)
def test_writing_into_a_transposed_out_gives_the_same_numbers(qtype, monkeypatch):
    import attention_book.llama.dequantize as module

    monkeypatch.setattr(module, "CHUNK", 128)  # several chunks even for a small tensor
    raw = quantised(qtype, (40, 64))
    out = torch.empty(64, 40).t()  # (40, 64), a view of (64, 40) storage
    assert dequantize(raw, qtype, (40, 64), out=out) is out
    assert torch.equal(out, dequantize(raw, qtype, (40, 64)))


def test_an_unsupported_type_is_named_with_the_supported_ones():
    with pytest.raises(NotImplementedError, match=r"'Q5_0'.*F32, F16, Q8_0, Q4_1"):
        dequantize(torch.zeros(22, dtype=torch.uint8), "Q5_0", (32,))
    assert SUPPORTED == ("F32", "F16", "Q8_0", "Q4_1")


def test_wrong_sizes_are_refused():
    with pytest.raises(ValueError, match="bytes do not hold"):
        dequantize(torch.zeros(30, dtype=torch.uint8), "Q8_0", (32,))
    with pytest.raises(ValueError, match="whole blocks of 32"):
        dequantize(torch.zeros(34, dtype=torch.uint8), "Q8_0", (2, 16))


def test_equals_gguf_on_real_tensors(smollm2_file):
    file = smollm2_file
    for name in ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"]:
        raw = file._raw[name]
        expected = gguf.quants.dequantize(raw.data, raw.tensor_type).reshape(file.tensors[name].shape)
        assert torch.equal(file.tensor(name), torch.from_numpy(np.array(expected, dtype=np.float32)))
