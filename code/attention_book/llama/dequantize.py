"""Dequantise a GGUF tensor's raw bytes to fp32, in torch.

GGUF quantisation types cut a tensor's numbers, row by row, into blocks of 32 and store each block in a few bytes:

- ``Q8_0``: 34 bytes per block: a scale d (fp16), then 32 signed bytes q; the numbers are q * d.
- ``Q4_1``: 20 bytes per block: a scale d (fp16), a minimum m (fp16), then 16 bytes of 4-bit q (low nibbles are
  numbers 0-15, high nibbles 16-31); the numbers are q * d + m.
- ``F16`` and ``F32``: plain floats, 2 and 4 bytes each.

The results equal ``gguf.quants.dequantize`` (numpy) bit for bit: the same products and sums, in the same order.
"""
import math

import torch

BLOCK = 32  # numbers per block in Q4_1 and Q8_0
BYTES_PER_BLOCK = {"Q8_0": 34, "Q4_1": 20}
SUPPORTED = ("F32", "F16", "Q8_0", "Q4_1")
CHUNK = 1 << 20  # numbers dequantised at a time when writing into ``out``


def _fp16(raw):
    """Pairs of bytes (n_blocks, 2) as one fp16 number each, in fp32: shape (n_blocks, 1)."""
    return raw.contiguous().view(torch.float16).float()


def dequantize(raw, qtype, shape, out=None) -> torch.Tensor:
    """Turn a tensor's raw bytes into fp32 numbers.

    Args:
        raw: the tensor's bytes as stored in the file, a uint8 tensor of any shape (it is flattened).
        qtype: "F32", "F16", "Q8_0" or "Q4_1".
        shape: the tensor's shape, in torch's order (rows, then the numbers of a row); for Q4_1 and Q8_0 the
            numbers of a row come in whole blocks of 32.
        out: None, or an fp32 tensor of that shape (1 or 2 dimensions) to write into, with any strides (for
            example a transposed view):
            large tensors are then dequantised a few rows at a time, with no full-size temporary.

    Returns:
        fp32 tensor of that shape (``out`` if given).
    """
    if qtype not in SUPPORTED:
        raise NotImplementedError(f"quantisation type {qtype!r} is not supported; supported: {', '.join(SUPPORTED)}")
    if raw.dtype != torch.uint8:
        raise ValueError(f"raw must hold bytes (torch.uint8), got {raw.dtype}")
    shape = tuple(shape)
    row = shape[-1] if shape else 1  # numbers per row
    n = math.prod(shape)
    if qtype in BYTES_PER_BLOCK and row % BLOCK:
        raise ValueError(f"a {qtype} tensor stores rows of whole blocks of {BLOCK} numbers, but shape {shape} has "
                         f"rows of {row}")
    if qtype in BYTES_PER_BLOCK:
        row_bytes = row // BLOCK * BYTES_PER_BLOCK[qtype]
    else:
        row_bytes = row * (4 if qtype == "F32" else 2)
    raw = raw.reshape(-1)
    if raw.numel() != n // row * row_bytes:
        raise ValueError(f"{raw.numel()} bytes do not hold a {qtype} tensor of shape {shape} "
                         f"({n // row * row_bytes} bytes)")
    if out is None:
        return _numbers(raw, qtype).reshape(shape)
    if tuple(out.shape) != shape or out.dtype != torch.float32 or out.dim() > 2:
        raise ValueError(f"out must be an fp32 tensor of shape {shape} (1 or 2 dimensions), got {out.dtype} "
                         f"{tuple(out.shape)}")
    rows, flat_out = n // row, out.view(1, -1) if out.dim() == 1 else out  # (rows, row)
    step = max(1, CHUNK // row)
    for start in range(0, rows, step):
        end = min(start + step, rows)
        flat_out[start:end] = _numbers(raw[start * row_bytes:end * row_bytes], qtype).view(end - start, row)
    return out


def _numbers(raw, qtype):
    """The numbers of whole rows' bytes, flat, fp32."""
    if qtype == "F32":
        return raw.view(torch.float32).clone()
    if qtype == "F16":
        return raw.view(torch.float16).float()
    blocks = raw.reshape(-1, BYTES_PER_BLOCK[qtype])  # (n_blocks, bytes per block)
    if qtype == "Q8_0":
        d = _fp16(blocks[:, :2])  # (n_blocks, 1)
        q = blocks[:, 2:].contiguous().view(torch.int8).float()  # (n_blocks, 32)
        return (q * d).reshape(-1)
    d, m = _fp16(blocks[:, 0:2]), _fp16(blocks[:, 2:4])  # (n_blocks, 1) each
    packed = blocks[:, 4:]  # (n_blocks, 16): two 4-bit numbers per byte
    q = torch.cat((packed & 0x0F, packed >> 4), dim=1).float()  # (n_blocks, 32): low nibbles first
    return (d * q + m).reshape(-1)
