"""KIVI-style int8 K/V (Liu et al. 2024): keys quantised per channel, values per token, and a cache that stores them.

Keys have a few channels with large values in every token (outliers by channel), so each channel gets its own
scale. Values' channels are more even in most heads, though a few value heads have a large channel too (chapter 15
measures both on SmolLM2); KIVI gives each token's values their own scale, and so does this module.

The quantisation here is asymmetric: x is mapped from [min, max] onto the 256 integers -128 .. 127,
x ~ data * scale + zero, with scale = (max - min) / 255 and zero = min + 128 * scale. Each number is then off by at
most scale / 2 (plus float rounding), and a constant row or channel (max = min, scale 0) comes back exactly. The
symmetric variant (zero = 0) would waste half the range on keys whose channel is all positive or all negative.

Shape letters: B batch, g K/V heads, S cached tokens, d_head, G the group of tokens a key scale covers.
"""
import math
from typing import NamedTuple

import torch

from ..kv_cache import check_entries, kv_entry_shapes
from ..masks import causal_mask
from ..validation import require_positive


class Int8Tensor(NamedTuple):
    """A quantised tensor: ``data`` int8, and ``scale`` and ``zero`` (float, broadcasting to data's shape), so that
    x ~ data * scale + zero."""

    data: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.scale.nbytes + self.zero.nbytes


def quantize_int8(x, dim):
    """Asymmetric int8 quantisation of a float tensor x, one scale and zero per slice along ``dim`` (the
    dimension that min and max run over; it has size 1 in scale and zero). Returns an ``Int8Tensor``."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a float tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.numel() == 0:
        raise ValueError(f"x must not be empty, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError("x must be finite: a NaN or an infinity has no int8 scale")
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = (high - low) / 255
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant slice: every number maps to -128
    data = torch.round((x - low) / safe).clamp(0, 255) - 128
    return Int8Tensor(data.to(torch.int8), scale, low + 128 * scale)


def quantize_keys_per_channel(k):
    """Keys (..., S, d_head) -> ``Int8Tensor`` with data (..., S, d_head) and scale, zero (..., 1, d_head): one
    scale per channel, over the S tokens."""
    require_rank_at_least("k", k, 2, "..., S, d_head")
    return quantize_int8(k, dim=-2)


def quantize_values_per_token(v):
    """Values (..., S, d_head) -> ``Int8Tensor`` with data (..., S, d_head) and scale, zero (..., S, 1): one scale
    per token, over its d_head channels."""
    require_rank_at_least("v", v, 2, "..., S, d_head")
    return quantize_int8(v, dim=-1)


def dequantize(q: Int8Tensor):
    """data * scale + zero, in the scale's dtype; same shape as q.data."""
    if not isinstance(q, Int8Tensor):
        raise ValueError(f"q must be an Int8Tensor (data, scale, zero), got {type(q).__name__}")
    return q.data.to(q.scale.dtype) * q.scale + q.zero


def require_rank_at_least(name, x, rank, letters):
    if not isinstance(x, torch.Tensor) or x.dim() < rank:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must have shape ({letters}), got {shape}")


class Int8KVCache:
    """A KV cache that stores K and V in int8, KIVI's way, for one attention layer.

    Values are quantised per token as they arrive: ``v_data`` (B, g, max_len, d_head) int8, ``v_scale`` and
    ``v_zero`` (B, g, max_len, 1). Keys are quantised per channel over groups of ``group_size`` tokens:
    ``k_data`` (B, g, max_len, d_head) int8, ``k_scale`` and ``k_zero`` (B, g, max_len / group_size, d_head); the
    keys of the group not yet full wait in float in ``k_residual`` (B, g, group_size, d_head) (KIVI's residual),
    because a channel's scale needs several tokens. ``nbytes`` counts all of these buffers.

    ``append`` returns the cached keys and values dequantised, (B, g, S, d_head) each, so that the attention layer
    runs unchanged: that is a float copy of the whole cache at every step, ``last_copy_nbytes`` bytes, transient
    but real. ``int8_decode_attention`` reads the int8 buffers instead, for a decode step.
    """

    def __init__(self, batch_size, n_kv_heads, d_head, max_len, group_size=32, dtype=torch.float32, device=None):
        require_positive(batch_size=batch_size, n_kv_heads=n_kv_heads, d_head=d_head, max_len=max_len,
                         group_size=group_size)
        if not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} must be a float dtype: the dtype of the keys and values given")
        B, g, n_groups = batch_size, n_kv_heads, math.ceil(max_len / group_size)
        self.k_data = torch.zeros(B, g, max_len, d_head, dtype=torch.int8, device=device)
        self.v_data = torch.zeros(B, g, max_len, d_head, dtype=torch.int8, device=device)
        self.k_scale = torch.zeros(B, g, n_groups, d_head, dtype=dtype, device=device)
        self.k_zero = torch.zeros(B, g, n_groups, d_head, dtype=dtype, device=device)
        self.v_scale = torch.zeros(B, g, max_len, 1, dtype=dtype, device=device)
        self.v_zero = torch.zeros(B, g, max_len, 1, dtype=dtype, device=device)
        self.k_residual = torch.zeros(B, g, group_size, d_head, dtype=dtype, device=device)
        self.group_size, self.dtype, self.length, self.last_copy_nbytes = group_size, dtype, 0, 0

    @property
    def batch_size(self) -> int:
        return self.k_data.shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.k_data.shape[1]

    @property
    def max_len(self) -> int:
        return self.k_data.shape[2]

    @property
    def d_head(self) -> int:
        return self.k_data.shape[3]

    @property
    def device(self) -> torch.device:
        return self.k_data.device

    @property
    def nbytes(self) -> int:
        """Bytes of every buffer: int8 K and V, their scales and zeros, and the float residual keys."""
        return sum(t.nbytes for t in (self.k_data, self.v_data, self.k_scale, self.k_zero, self.v_scale,
                                      self.v_zero, self.k_residual))

    @property
    def n_full_groups(self) -> int:
        """Groups of keys quantised so far; the length % group_size keys after them are in ``k_residual``."""
        return self.length // self.group_size

    def append(self, k, v):
        """Quantise and store new keys and values (B, g, L_new, d_head); return every cached token's, dequantised,
        (B, g, S, d_head) each with S = length (keys of the unfinished group exactly as given)."""
        shapes = kv_entry_shapes(self.batch_size, self.n_kv_heads, self.d_head)
        check_entries(shapes, self.dtype, self.device, self.max_len, self.length, k=k, v=v)
        start, end = self.length, self.length + k.shape[2]
        values = quantize_values_per_token(v)
        self.v_data[:, :, start:end], self.v_scale[:, :, start:end], self.v_zero[:, :, start:end] = values
        G, position = self.group_size, start
        while position < end:  # fill the residual group by group; quantise each group when it is full
            offset = position % G
            n = min(G - offset, end - position)
            self.k_residual[:, :, offset:offset + n] = k[:, :, position - start:position - start + n]
            position += n
            if position % G == 0 or position == self.max_len:  # a full group (or the cache's last, shorter one)
                first, group = position - offset - n, position // G - (position % G == 0)
                keys = quantize_keys_per_channel(self.k_residual[:, :, :position - first])
                self.k_data[:, :, first:position] = keys.data
                self.k_scale[:, :, group:group + 1], self.k_zero[:, :, group:group + 1] = keys.scale, keys.zero
        self.length = end
        keys, values = self.dequantized()
        self.last_copy_nbytes = keys.nbytes + values.nbytes
        return keys, values

    def dequantized(self):
        """Every cached key and value as floats, (B, g, S, d_head) each: a new tensor, not a view."""
        B, g, _, d = self.k_data.shape
        G, n, S = self.group_size, self.n_full_groups, self.length
        full = self.k_data[:, :, :n * G].view(B, g, n, G, d).to(self.dtype)  # (B, g, n, G, d_head)
        full = full * self.k_scale[:, :, :n, None] + self.k_zero[:, :, :n, None]
        tail = self.k_data[:, :, n * G:S].to(self.dtype) * self.k_scale[:, :, n:n + 1] + self.k_zero[:, :, n:n + 1]
        if S % G and S != self.max_len:  # the unfinished group: still in float
            tail = self.k_residual[:, :, :S - n * G]
        keys = torch.cat((full.reshape(B, g, n * G, d), tail), dim=2)
        values = self.v_data[:, :, :S].to(self.dtype) * self.v_scale[:, :, :S] + self.v_zero[:, :, :S]
        return keys, values

    def causal_mask(self, L):
        """``causal_mask(L, length)``: the (L, S) mask of the last L tokens appended, True = may attend."""
        return causal_mask(L, self.length, device=self.k_data.device)

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0


def int8_decode_attention(q, cache: Int8KVCache):
    """One decode step's attention read straight from an ``Int8KVCache``'s int8 buffers, with no float copy of the
    keys. Call it after ``cache.append`` of the step's own key and value.

    Args:
        q: the step's queries, rotated, shape (B, h, 1, d_head), h a multiple of the cache's g, float32, on the
            CPU (as the cache).
    Returns:
        out: shape (B, h, 1, d_head), what ``grouped_query_sdpa(q, *cache.dequantized())`` gives, up to rounding.

    How: a key is k[s, c] ~ data[s, c] * scale[c] + zero[c] (per channel, for its group of G tokens), so
    q . k[s] = (q * scale) . data[s] + q . zero: the product needs float x int8. Plain torch 2.13 on a CPU has no
    float x int8 matmul (``q @ data.T`` raises "expected m1 and m2 to have the same dtype"), and int8 x int8
    (``@``) returns int8, which overflows; ``torch._int_mm`` (int8 x int8 -> int32) would need q quantised too.
    ``torch._weight_int8pack_mm(A, W, s)`` computes A @ (W * s[:, None]).T for A float32/16 (M, K) and W int8
    (N, K), contiguous: a private op (an underscore: it may change without notice), which this function uses with
    s = 1, one call per group of G tokens per K/V head (each group has its own channel scales). The values are per
    token, v[s, c] ~ data[s, c] * scale[s] + zero[s], so p @ v = (p * scale) @ data + p . zero, and the op needs
    data.T contiguous: one int8 copy of the values per step (a quarter of a float32 copy's bytes). The loops over
    B, g and the groups are Python loops, so in plain torch this is slower than dequantising, not faster: a real
    kernel (KIVI's) fuses them. It shows that the arithmetic needs no float copy of the cache.
    """
    require_rank_at_least("q", q, 4, "B, h, 1, d_head")
    B, g, _, d = cache.k_data.shape
    if q.dim() != 4 or q.shape[0] != B or q.shape[2] != 1 or q.shape[3] != d or q.shape[1] % g:
        raise ValueError(f"q must have shape (B={B}, h, 1, d_head={d}) with h a multiple of g={g}, "
                         f"got {tuple(q.shape)}")
    if q.dtype != torch.float32 or cache.dtype != torch.float32:
        raise ValueError(f"q and the cache must be float32 here, got {q.dtype} and {cache.dtype}")
    if q.device.type != "cpu" or cache.k_data.device.type != "cpu":
        raise ValueError(f"q and the cache must be on the CPU, got {q.device} and {cache.k_data.device}: "
                         "torch._weight_int8pack_mm, the op this uses, has no kernel for other devices")
    if cache.length == 0:
        raise ValueError("the cache is empty: append the step's key and value first")
    S, G, group = cache.length, cache.group_size, q.shape[1] // g
    n_quantized = S // G if S % G and S != cache.max_len else math.ceil(S / G)  # groups held in int8
    out = torch.empty_like(q)
    for b in range(B):
        for j in range(g):
            queries = q[b, j * group:(j + 1) * group, 0] / math.sqrt(d)  # (group, d_head): this K/V head's queries
            scores = []
            for n in range(n_quantized):
                data = cache.k_data[b, j, n * G:min(n * G + G, S)]  # (G, d_head) int8, read in place
                ones = torch.ones(data.shape[0], dtype=q.dtype)
                scores.append(torch._weight_int8pack_mm(queries * cache.k_scale[b, j, n], data, ones)
                              + (queries @ cache.k_zero[b, j, n])[:, None])  # (group, G)
            scores.append(queries @ cache.k_residual[b, j, :S - min(n_quantized * G, S)].T)  # the float residual keys
            p = torch.cat(scores, dim=1).softmax(dim=-1)  # (group, S)
            values_t = cache.v_data[b, j, :S].T.contiguous()  # (d_head, S) int8: the op wants W contiguous
            ones = torch.ones(d, dtype=q.dtype)
            out[b, j * group:(j + 1) * group, 0] = (
                torch._weight_int8pack_mm(p * cache.v_scale[b, j, :S, 0], values_t, ones)
                + p @ cache.v_zero[b, j, :S])  # (group, d_head)
    return out
