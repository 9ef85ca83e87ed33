"""The latent cache of multi-head latent attention: one row [c_KV ; k^R] per token, shared by all heads."""
import torch

from ..validation import require_positive


class LatentCache:
    """The latents and RoPE keys of the tokens seen so far, for one MLA layer.

    One buffer ``latent`` of shape (B, max_len, d_c + d_h^R): row s is token s's latent c_KV (its first d_c =
    ``kv_lora_rank`` numbers) followed by its rotated RoPE key k^R (the last d_h^R = ``qk_rope_head_dim``). Every
    head rebuilds its keys and values from these rows, so a token costs d_c + d_h^R numbers per layer, whatever the
    number of heads: a KVCache (``kv_cache.py``) holds 2 x g x d_head. The first ``length`` rows are real.

    Like ``KVCache``, it is for inference: ``append`` writes in place and refuses tensors that carry gradients.
    """

    def __init__(self, batch_size, kv_lora_rank, qk_rope_head_dim, max_len, dtype=torch.float32, device=None):
        require_positive(batch_size=batch_size, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
                         max_len=max_len)
        self.kv_lora_rank = int(kv_lora_rank)
        self.latent = torch.zeros(batch_size, max_len, kv_lora_rank + qk_rope_head_dim, dtype=dtype, device=device)
        self.length = 0

    @property
    def batch_size(self) -> int:
        return self.latent.shape[0]

    @property
    def max_len(self) -> int:
        return self.latent.shape[1]

    @property
    def numbers_per_token(self) -> int:
        """d_c + d_h^R: the numbers one token takes in this layer's cache."""
        return self.latent.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer."""
        return self.latent.nbytes

    @property
    def c_kv(self):
        """The cached latents, shape (B, S, d_c) with S = length (a view)."""
        return self.latent[:, :self.length, :self.kv_lora_rank]

    @property
    def k_rope(self):
        """The cached rotated RoPE keys, shape (B, S, d_h^R) (a view)."""
        return self.latent[:, :self.length, self.kv_lora_rank:]

    def append(self, c_kv, k_rope):
        """Store new tokens' latents and RoPE keys; return every cached row.

        Args:
            c_kv: the new latents, shape (B, L_new, d_c).
            k_rope: their RoPE keys, already rotated, shape (B, L_new, d_h^R).

        Returns:
            latent: a view of the filled rows, shape (B, S, d_c + d_h^R) with S = length.
        """
        d_c, d_r = self.kv_lora_rank, self.numbers_per_token - self.kv_lora_rank
        for name, t, width in (("c_kv", c_kv, d_c), ("k_rope", k_rope, d_r)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[0] != self.batch_size \
                    or t.shape[2] != width:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape (B, L_new, {width}) with B = the cache's batch_size="
                                 f"{self.batch_size}, got {shape}")
            if t.dtype != self.latent.dtype or t.device != self.latent.device:
                raise ValueError(f"{name} is {t.dtype} on {t.device} but the cache holds {self.latent.dtype} "
                                 f"on {self.latent.device}")
        if c_kv.shape[1] != k_rope.shape[1]:
            raise ValueError(f"c_kv and k_rope must hold the same number of tokens, got {c_kv.shape[1]} and "
                             f"{k_rope.shape[1]}")
        if torch.is_grad_enabled() and (c_kv.requires_grad or k_rope.requires_grad):
            raise ValueError("c_kv and k_rope require grad, but the cache stores them in place and cannot be "
                             "trained through: decode under torch.no_grad() (training needs no cache)")
        start, end = self.length, self.length + c_kv.shape[1]
        if end > self.max_len:
            raise ValueError(f"cache overflow: {self.length} cached + {c_kv.shape[1]} new tokens exceeds "
                             f"max_len={self.max_len}")
        self.latent[:, start:end, :d_c] = c_kv
        self.latent[:, start:end, d_c:] = k_rope
        self.length = end
        return self.latent[:, :end]

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0
