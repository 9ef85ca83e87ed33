"""A key/value cache for incremental decoding, preallocated up to a maximum length."""
import torch

from .masks import causal_mask
from .validation import require_positive


class KVCache:
    """Keys and values of the tokens seen so far, for one attention layer.

    Buffers ``k`` and ``v`` have shape (B, g, max_len, d_head), where g = n_kv_heads; the first
    ``length`` positions hold real entries. Memory is allocated once, up front:
    2 (K and V) x B x g x max_len x d_head x bytes per element.

    The cache is for inference: it writes into its buffers in place, which autograd cannot train through,
    so ``append`` refuses keys and values that carry gradients: decode under ``torch.no_grad()``.
    """

    def __init__(self, batch_size, n_kv_heads, d_head, max_len, dtype=torch.float32, device=None):
        require_positive(batch_size=batch_size, n_kv_heads=n_kv_heads, d_head=d_head, max_len=max_len)
        shape = (batch_size, n_kv_heads, max_len, d_head)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def batch_size(self) -> int:
        return self.k.shape[0]

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the K and V buffers together."""
        return self.k.nbytes + self.v.nbytes

    def append(self, k, v):
        """Store new keys and values and return everything cached so far.

        Args:
            k, v: the new entries, shape (B, g, L_new, d_head).

        Returns:
            k, v: views of the filled part of the buffers, shape (B, g, S, d_head) with S = length.
        """
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
        if k.dim() != 4:
            raise ValueError(f"k must have shape (B, g, L_new, d_head), got {k.dim()} dimensions: {tuple(k.shape)}")
        if k.shape[0] != self.batch_size:
            raise ValueError(
                f"batch size {k.shape[0]} does not match the cache's batch_size={self.batch_size}: "
                "make a new cache for a new batch"
            )
        if k.shape[1] != self.k.shape[1] or k.shape[3] != self.k.shape[3]:
            raise ValueError(
                f"k of shape {tuple(k.shape)} does not fit a cache of n_kv_heads={self.k.shape[1]} "
                f"and d_head={self.k.shape[3]}"
            )
        if k.dtype != self.k.dtype:
            raise ValueError(f"k has dtype {k.dtype} but the cache holds {self.k.dtype}")
        if k.device != self.k.device:
            raise ValueError(f"k is on {k.device} but the cache is on {self.k.device}")
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            raise ValueError("k and v require grad, but the cache stores them in place and cannot be trained "
                             "through: decode under torch.no_grad() (training needs no cache)")
        start, end = self.length, self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"cache overflow: {self.length} cached + {k.shape[2]} new tokens exceeds max_len={self.max_len}"
            )
        self.k[:, :, start:end] = k
        self.v[:, :, start:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def causal_mask(self, L):
        """Which keys that ``append`` returned the last L tokens appended may attend to (True = may attend):
        ``causal_mask(L, length)``, shape (L, S). A cache that drops keys (a sliding window) says so here."""
        return causal_mask(L, self.length, device=self.k.device)

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0


def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_element):
    """Bytes of cache one token takes in a whole model: 2 (K and V) x n_layers x n_kv_heads x d_head x bytes."""
    require_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, d_head=d_head, bytes_per_element=bytes_per_element)
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_element
