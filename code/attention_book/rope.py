"""Rotary position embeddings (RoPE; Su et al. 2021): rotate each pair of a query's and a key's coordinates.

Pair i of a vector at position m is turned by the angle m * theta_i, with theta_i = base ** (-2i / d_head). A query
at position m and a key at position n then score q_m . k_n = q . R((n - m) theta) k: the score depends on where they
are only through m - n.

Two layouts say which coordinates form pair i:

- ``"halves"``: coordinates i and i + d_head / 2 (``rotate_half``: GPT-NeoX and Hugging Face transformers' Llama
  code);
- ``"pairs"``: coordinates 2i and 2i + 1 (the paper, GPT-J, Meta's Llama code, and W_q and W_k as llama.cpp stores
  them in the GGUF files of llama-architecture models; the architectures it runs with "NeoX" RoPE, such as Qwen2
  and Gemma, keep the halves layout in their files).

Both rotate the same pairs by the same angles once the coordinates are reordered: ``halves_order`` gives the
order, and ``pairs_to_halves_rows`` reorders a projection's rows so that its outputs come out in it.
"""
import torch

from .validation import require_positive

LAYOUTS = ("halves", "pairs")


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}: 'halves' pairs coordinate i with "
                         "i + d_head/2 (Hugging Face's Llama code), 'pairs' pairs 2i with 2i + 1 (the paper, and "
                         "W_q and W_k in the GGUF files of llama-architecture models)")


def _check_d_head(d_head):
    require_positive(d_head=d_head)
    if d_head % 2:
        raise ValueError(f"d_head={d_head} must be even: RoPE rotates coordinates in pairs")


def rope_frequencies(d_head, base=10_000.0):
    """theta_i = base ** (-2i / d_head) for i = 0 .. d_head/2 - 1, shape (d_head / 2,), float32.

    Computed as Hugging Face's ``LlamaRotaryEmbedding`` does (in float32), so that the angles match it bit for bit.
    """
    _check_d_head(d_head)
    if not base > 1:
        raise ValueError(f"base={base!r} must be greater than 1")
    return 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.int64).float() / d_head))


def rope_cos_sin(positions, d_head, base=10_000.0):
    """Cosines and sines of the angles position * theta_i.

    Args:
        positions: integer positions, shape (S,) or (B, S).
    Returns:
        cos, sin: each of shape (S, d_head / 2) or (B, S, d_head / 2), float32, on positions' device.
    """
    theta = rope_frequencies(d_head, base).to(positions.device)  # (d_head / 2,)
    angles = positions.float()[..., None] * theta  # (..., S, d_head / 2)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin, layout="halves"):
    """Turn each pair (a, b) of x's last dimension into (a cos - b sin, a sin + b cos).

    Args:
        x: shape (..., S, d_head), for example (B, h, S, d_head).
        cos, sin: shape (S, d_head / 2), or anything that broadcasts with x's pairs, such as (B, 1, S, d_head / 2).
        layout: which coordinates pair up, ``"halves"`` or ``"pairs"`` (see the module's docstring).
    Returns:
        the rotated x, same shape and dtype.
    """
    _check_layout(layout)
    if x.shape[-1] % 2:
        raise ValueError(f"x's last dimension d_head={x.shape[-1]} must be even: RoPE rotates coordinates in pairs")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if layout == "halves":
        a, b = x.chunk(2, dim=-1)  # each (..., S, d_head / 2)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def apply_rope(x, positions, base=10_000.0, layout="halves"):
    """RoPE for tensors of heads.

    Args:
        x: queries or keys, shape (B, heads, S, d_head).
        positions: each token's position, shape (S,) (the same for every sequence) or (B, S).
    Returns:
        shape (B, heads, S, d_head).
    """
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, heads, S, d_head), got {x.dim()} dimensions: {tuple(x.shape)}")
    if positions.shape[-1] != x.shape[2] or positions.dim() not in (1, 2):
        raise ValueError(f"positions must have shape (S,) or (B, S) with S = {x.shape[2]}, "
                         f"got {tuple(positions.shape)}")
    cos, sin = rope_cos_sin(positions, x.shape[-1], base)
    if positions.dim() == 2:  # (B, S, d_head / 2) -> (B, 1, S, d_head / 2): the same angles for every head
        cos, sin = cos[:, None], sin[:, None]
    return rotate(x, cos, sin, layout)


def halves_order(d_head):
    """The index that reorders a "pairs"-layout vector into the "halves" layout, shape (d_head,).

    ``x_pairs[..., halves_order(d)]`` puts coordinates 0, 2, 4, ... first and 1, 3, 5, ... second, so the pair
    (2i, 2i + 1) lands at (i, i + d/2). ``torch.argsort`` of it is the way back.
    """
    _check_d_head(d_head)
    return torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))


def pairs_to_halves_rows(weight, n_heads):
    """Reorder a query or key projection's rows, head by head, from the "pairs" to the "halves" layout.

    Args:
        weight: shape (n_heads * d_head, d_in), as ``nn.Linear`` stores it. llama.cpp stores W_q and W_k in the
            "pairs" layout in the GGUF files of llama-architecture models (not in those of architectures it runs
            with "NeoX" RoPE, such as Qwen2 and Gemma, which keep the halves layout).
        n_heads: heads in this projection (n_heads for W_q, n_kv_heads for W_k).
    Returns:
        shape (n_heads * d_head, d_in): the projection whose outputs, rotated in the "halves" layout, give the
        same scores as the original's rotated in the "pairs" layout.
    """
    require_positive(n_heads=n_heads)
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight has {weight.shape[0]} rows, which is not divisible by n_heads={n_heads}")
    d_head = weight.shape[0] // n_heads
    per_head = weight.reshape(n_heads, d_head, -1)
    return per_head[:, halves_order(d_head)].reshape(weight.shape)


def halves_to_pairs_rows(weight, n_heads):
    """The inverse of ``pairs_to_halves_rows``: shape (n_heads * d_head, d_in) in, same shape out."""
    require_positive(n_heads=n_heads)
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight has {weight.shape[0]} rows, which is not divisible by n_heads={n_heads}")
    d_head = weight.shape[0] // n_heads
    per_head = weight.reshape(n_heads, d_head, -1)
    return per_head[:, torch.argsort(halves_order(d_head))].reshape(weight.shape)


class Rope:
    """RoPE with a table of cosines and sines, for an attention layer.

    Args:
        d_head: size of each head (even).
        base: the base of the frequencies; 10,000 in the paper, 100,000 in SmolLM2, 500,000 in Llama 3.
        layout: ``"halves"`` or ``"pairs"``.

    ``rope(x, start)`` rotates x of shape (B, heads, S, d_head) as if its tokens sat at positions start ..
    start + S - 1: during decoding, start is the number of tokens already cached. The table grows on demand, and is
    copied once to each device and dtype that x comes in.
    """

    def __init__(self, d_head, base=10_000.0, layout="halves"):
        _check_d_head(d_head)
        _check_layout(layout)
        self.d_head, self.base, self.layout = int(d_head), float(base), layout
        self.cos, self.sin = rope_cos_sin(torch.arange(0), self.d_head, self.base)  # (0, d_head / 2): grown below
        self._copies = {}  # (device, dtype) -> the table's cos and sin there

    def __repr__(self):
        return f"Rope(d_head={self.d_head}, base={self.base:g}, layout={self.layout!r})"

    def _table(self, n_positions, device, dtype):
        """cos and sin, each (P, d_head / 2) with P >= n_positions, on device and in dtype. Made outside inference
        mode, so that a table grown while generating can still be used in training."""
        if n_positions > self.cos.shape[0] or (device, dtype) not in self._copies:
            with torch.inference_mode(False):
                if n_positions > self.cos.shape[0]:
                    size = max(n_positions, 2 * self.cos.shape[0], 256)
                    self.cos, self.sin = rope_cos_sin(torch.arange(size), self.d_head, self.base)
                    self._copies = {}
                self._copies[device, dtype] = self.cos.to(device, dtype), self.sin.to(device, dtype)
        return self._copies[device, dtype]

    def __call__(self, x, start=0):
        """Rotate x, shape (B, heads, S, d_head), for positions start .. start + S - 1; same shape out."""
        if x.dim() != 4 or x.shape[-1] != self.d_head:
            raise ValueError(f"x must have shape (B, heads, S, d_head={self.d_head}), got {tuple(x.shape)}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"start={start!r} must be a non-negative integer (the position of x's first token)")
        end = start + x.shape[2]
        cos, sin = self._table(end, x.device, x.dtype)
        return rotate(x, cos[start:end], sin[start:end], self.layout)
