"""The latent cache of multi-head latent attention: one row [c_KV ; k^R] per token, shared by all heads."""
import torch

from ..kv_cache import check_entries
from ..masks import causal_mask
from ..validation import require_positive


class LatentCache:
    """The latents and RoPE keys of the tokens seen so far, for one MLA layer.

    One buffer ``latent`` of shape (B, max_len, d_c + d_h^R): row s is token s's latent c_KV (its first d_c =
    ``kv_lora_rank`` numbers) followed by its rotated RoPE key k^R (the last d_h^R = ``qk_rope_head_dim``). Every
    head rebuilds its keys and values from these rows, so a token costs d_c + d_h^R numbers per layer, whatever the
    number of heads: a KVCache (``kv_cache.py``) holds 2 x g x d_head. The first ``length`` rows are real.

    It keeps the cache contract of ``kv_cache.py`` for its own entries (``append(c_kv, k_rope)``, ``length``,
    ``nbytes``, ``reset``...): for inference, ``append`` writes in place and refuses tensors that carry gradients.
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
    def dtype(self) -> torch.dtype:
        return self.latent.dtype

    @property
    def device(self) -> torch.device:
        return self.latent.device

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
        B = self.batch_size
        shapes = {"c_kv": ((B, None, d_c), f"B, L_new, {d_c}"), "k_rope": ((B, None, d_r), f"B, L_new, {d_r}")}
        check_entries(shapes, self.dtype, self.device, self.max_len, self.length, c_kv=c_kv, k_rope=k_rope)
        start, end = self.length, self.length + c_kv.shape[1]
        self.latent[:, start:end, :d_c] = c_kv
        self.latent[:, start:end, d_c:] = k_rope
        self.length = end
        return self.latent[:, :end]

    def causal_mask(self, L):
        """``causal_mask(L, length)``: the (L, S) mask of the last L tokens appended, True = may attend."""
        return causal_mask(L, self.length, device=self.latent.device)

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        self.length = 0
