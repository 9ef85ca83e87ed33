"""A key/value cache for incremental decoding, preallocated up to a maximum length, and the contract of every cache.

The cache contract: what an attention layer may use of a cache. ``KVCache`` and the caches of chapter 15
(``RingKVCache``, ``Int8KVCache``) keep all of it; MLA's ``LatentCache`` (chapter 14) keeps the same contract for
its own entries, one latent row per token instead of K and V.

- ``append(*entries)``: store this call's entries (for K/V: k and v, each (B, g, L_new, d_head), L_new >= 1) and
  return what this call's queries attend to (for K/V: keys and values (B, g, S, d_head)). It refuses entries of
  another shape, dtype or device, entries that need gradients (a cache writes in place: decode under
  ``torch.no_grad()``), and more tokens than ``max_len`` holds: ``check_entries`` is the one validator.
- ``length``: tokens appended since the last ``reset``, which is also the position of the next token (RoPE's).
- ``causal_mask(L)``: the (L, S) boolean mask (True = may attend) of the last L tokens appended over the keys the
  last ``append`` returned. A cache that drops or reorders keys (a sliding window) says so here.
- ``batch_size``, ``max_len``, ``nbytes`` (bytes of every buffer it holds), ``dtype``, ``device``; a K/V cache also
  says ``n_kv_heads`` and ``d_head``, so that a layer can refuse a cache made for another layer.
- ``reset()``: forget every token; the memory stays allocated.

Its dtype and device are fixed when it is made (a layer's ``new_cache`` gives them the layer's); entries must
already have them: nothing is converted silently.
"""
from typing import Protocol, runtime_checkable

import torch

from .masks import causal_mask
from .validation import require_positive


@runtime_checkable
class Cache(Protocol):
    """The cache contract (see the module docstring): what a layer may use of any cache."""

    length: int

    def append(self, *entries): ...

    def causal_mask(self, L): ...

    def reset(self) -> None: ...


def check_entries(shapes, dtype, device, max_len, length, **entries):
    """Raise a ValueError unless the ``entries`` (name=tensor) fit a cache.

    Args:
        shapes: name -> (the shape the entry must have, with None where the new tokens go, and its letters): for
            k and v ``((B, g, None, d_head), "B, g, L_new, d_head")``. Every entry must hold the same number
            L_new >= 1 of new tokens; the first number is the cache's batch size.
        dtype, device: the cache's; every entry must already have them.
        max_len, length: the cache's capacity and how many tokens it holds (max_len None: no limit, a ring).
    """
    L_new = None  # a quick pass (this runs at every decode step of every layer); the messages come from the slow one
    for name, t in entries.items():
        shape = shapes[name][0]
        if not isinstance(t, torch.Tensor) or t.dim() != len(shape) or t.dtype != dtype or t.device != device:
            break
        new = t.shape[shape.index(None)]
        if (L_new is not None and new != L_new) or any(want is not None and got != want
                                                       for got, want in zip(t.shape, shape, strict=True)):
            break
        L_new = new
    else:
        if L_new and not (torch.is_grad_enabled() and any(t.requires_grad for t in entries.values())) and \
                (max_len is None or length + L_new <= max_len):
            return
    _explain_entries(shapes, dtype, device, max_len, length, **entries)
    raise AssertionError("check_entries found a problem that _explain_entries does not name")  # never reached


def _explain_entries(shapes, dtype, device, max_len, length, **entries):
    """Raise the ValueError that says what is wrong with the entries (``check_entries`` found something)."""
    names = " and ".join(entries)
    for name, t in entries.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{names} must be tensors, got {name} of type {type(t).__name__}")
    if len({shape for shape, _ in shapes.values()}) == 1 and len({t.shape for t in entries.values()}) > 1:
        shown = " and ".join(f"{name} {tuple(t.shape)}" for name, t in entries.items())
        raise ValueError(f"{names} must have the same shape, got {shown}")
    new_tokens = set()
    for name, t in entries.items():
        shape, letters = shapes[name]
        if t.dim() != len(shape):
            raise ValueError(f"{name} must have shape ({letters}), got {t.dim()} dimensions: {tuple(t.shape)}")
        if t.shape[0] != shape[0]:
            raise ValueError(f"batch size {t.shape[0]} does not match the cache's batch_size={shape[0]}: "
                             "make a new cache for a new batch")
        if any(want is not None and got != want for got, want in zip(t.shape, shape, strict=True)):
            wanted = ", ".join("L_new" if size is None else str(size) for size in shape)
            raise ValueError(f"{name} must have shape ({letters}) = ({wanted}) to fit the cache, got {tuple(t.shape)}")
        new_tokens.add(t.shape[shape.index(None)])
        if t.dtype != dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but the cache holds {dtype}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but the cache is on {device}")
    if len(new_tokens) > 1:
        raise ValueError(f"{names} must hold the same number of tokens, got {sorted(new_tokens)}")
    (L_new,) = new_tokens
    if L_new == 0:
        raise ValueError(f"{names} hold no new token (L_new = 0): append at least one")
    if torch.is_grad_enabled() and any(t.requires_grad for t in entries.values()):
        raise ValueError(f"{names} require grad, but the cache stores them in place and cannot be trained "
                         "through: decode under torch.no_grad() (training needs no cache)")
    if max_len is not None and length + L_new > max_len:
        raise ValueError(f"cache overflow: {length} cached + {L_new} new tokens exceeds max_len={max_len}")


def kv_entry_shapes(batch_size, n_kv_heads, d_head):
    """``check_entries``' shapes for the keys and values of a K/V cache: (B, g, L_new, d_head) each."""
    shape = ((batch_size, n_kv_heads, None, d_head), "B, g, L_new, d_head")
    return {"k": shape, "v": shape}


def check_cache_fits(cache, n_kv_heads, d_head):
    """Raise a ValueError unless ``cache`` keeps the K/V cache contract for a layer with these n_kv_heads and
    d_head (a ``KVCache`` from that layer's ``new_cache``, or one of chapter 15's)."""
    if not isinstance(cache, Cache) or not hasattr(cache, "n_kv_heads"):
        raise ValueError(f"cache must be a K/V cache that keeps the contract of attention_book.kv_cache (append, "
                         f"length, causal_mask, n_kv_heads, d_head), such as layer.new_cache(...); got "
                         f"{type(cache).__name__}")
    if (cache.n_kv_heads, cache.d_head) != (n_kv_heads, d_head):
        raise ValueError(f"the cache holds n_kv_heads={cache.n_kv_heads} and d_head={cache.d_head} but the layer "
                         f"makes n_kv_heads={n_kv_heads} and d_head={d_head}: make its cache with layer.new_cache")


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
    def n_kv_heads(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def d_head(self) -> int:
        return self.k.shape[3]

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    @property
    def device(self) -> torch.device:
        return self.k.device

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
        shapes = kv_entry_shapes(self.batch_size, self.n_kv_heads, self.d_head)  # (B, g, L_new, d_head) each
        check_entries(shapes, self.dtype, self.device, self.max_len, self.length, k=k, v=v)
        start, end = self.length, self.length + k.shape[2]
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
