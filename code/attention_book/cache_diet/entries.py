"""The checks every cache of the diet runs on the keys and values it is given, as ``KVCache.append`` does."""
import torch


def check_entries(k, v, batch_size, n_kv_heads, d_head, dtype, device):
    """Raise a ValueError unless k and v, shape (B, g, L_new, d_head) each, fit a cache of these sizes, dtype and
    device, and carry no gradients (a cache writes in place: decode under ``torch.no_grad()``)."""
    if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor):
        raise ValueError(f"k and v must be tensors, got {type(k).__name__} and {type(v).__name__}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if k.dim() != 4 or k.shape[2] == 0:
        raise ValueError(f"k must have shape (B, g, L_new, d_head) with L_new >= 1, got {tuple(k.shape)}")
    if k.shape[0] != batch_size:
        raise ValueError(f"batch size {k.shape[0]} does not match the cache's batch_size={batch_size}: "
                         "make a new cache for a new batch")
    if k.shape[1] != n_kv_heads or k.shape[3] != d_head:
        raise ValueError(f"k of shape {tuple(k.shape)} does not fit a cache of n_kv_heads={n_kv_heads} "
                         f"and d_head={d_head}")
    if k.dtype != dtype or v.dtype != dtype:
        raise ValueError(f"k and v have dtype {k.dtype} and {v.dtype} but the cache takes {dtype}")
    if k.device != device:
        raise ValueError(f"k is on {k.device} but the cache is on {device}")
    if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
        raise ValueError("k and v require grad, but the cache stores them in place and cannot be trained "
                         "through: decode under torch.no_grad() (training needs no cache)")
