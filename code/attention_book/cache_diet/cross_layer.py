"""Cross-layer K/V sharing (CLA; Brandon et al. 2024) for chapter 12's ``LlamaDecoder``: consecutive layers share
one set of keys and values.

With ``share=2``, layer 2i computes its keys and values as usual and layer 2i + 1 attends to them with its own
queries, computing no K/V of its own: the cache holds one K/V per pair, half the bytes. CLA trains a model this
way; applied to a model trained without it (SmolLM2) it changes what layer 2i + 1 sees, and the damage is
measured, not assumed. ``share=1`` shares nothing: the plain decoder.

Shape letters: B batch, L tokens in this call, S keys attended to, h query heads, g K/V heads, V vocabulary.
"""
import torch
from torch import nn

from ..grouped_sdpa import grouped_query_sdpa
from ..validation import require_positive, require_rank


def shared_kv_owners(n_layers, share=2):
    """For each layer, the layer whose keys and values it uses: i - i % share. Layer i computes its own K/V iff
    owners[i] == i. A last group may be shorter."""
    require_positive(n_layers=n_layers, share=share)
    return [i - i % share for i in range(n_layers)]


class CrossLayerDecoder(nn.Module):
    """A ``LlamaDecoder`` run with K/V shared across each group of ``share`` consecutive layers.

    It holds the decoder (its modules, not copies: the weights are the same tensors) and runs its parts: the
    embedding, each block's norms, q_proj, o_proj and MLP, and the K/V projections of the groups' first layers only.
    Keys are rotated by RoPE at their absolute positions before they are cached, as in the decoder.

    Args:
        model: a ``LlamaDecoder`` (chapter 12), or anything with its ``embedding``, ``layers`` (``DecoderBlock``s
            whose attention has a ``Rope``), ``norm`` and ``output``.
        share: how many consecutive layers share one K/V (2 is CLA2; 1 shares nothing).
    """

    def __init__(self, model, share=2):
        super().__init__()
        self.model = model
        self.owners = shared_kv_owners(len(model.layers), share)
        self.share = share
        if any(layer.attention.rope is None for layer in model.layers):
            raise ValueError("model's attention layers must have a Rope: CrossLayerDecoder rotates queries itself")

    @property
    def kv_layers(self):
        """The indices of the layers that compute and cache keys and values."""
        return sorted(set(self.owners))

    def new_caches(self, batch_size, max_len, dtype=None):
        """One ``KVCache`` per group of layers (``len(kv_layers)``), each (batch_size, g, max_len, d_head)."""
        return [self.model.layers[i].attention.new_cache(batch_size, max_len, dtype=dtype) for i in self.kv_layers]

    def forward(self, ids, caches=None, last_only=False):
        """Logits for the next token after each of ``ids``, shape (B, L, V) ((B, 1, V) with last_only).

        Args:
            ids: token ids, shape (B, L).
            caches: None, or one cache per group (``new_caches``; a ``RingKVCache`` or an ``Int8KVCache`` also
                works): ids then sit after the cached tokens, at positions from the caches' length.
        """
        require_rank("ids", ids, 2, "B, L")
        kv_layers = self.kv_layers
        if caches is not None and len(caches) != len(kv_layers):
            raise ValueError(f"caches must hold one cache per group of {self.share} layers ({len(kv_layers)}), "
                             f"got {len(caches)}")
        B, L = ids.shape
        x = self.model.embedding(ids)  # (B, L, d_model)
        start = 0 if caches is None else caches[0].length
        for i, block in enumerate(self.model.layers):
            a = block.attention
            h = block.attention_norm(x)
            if self.owners[i] == i:  # this layer computes the group's keys and values
                k = a.rope(a.k_proj(h).view(B, L, a.n_kv_heads, a.d_head).transpose(1, 2), start)  # (B, g, L, d)
                v = a.v_proj(h).view(B, L, a.n_kv_heads, a.d_head).transpose(1, 2)
                mask = None
                if caches is not None:
                    cache = caches[kv_layers.index(i)]
                    k, v = cache.append(k, v)  # (B, g, S, d_head)
                    mask = cache.causal_mask(L) if L > 1 else None
            q = a.rope(a.q_proj(h).view(B, L, a.n_heads, a.d_head).transpose(1, 2), start)  # (B, h, L, d_head)
            is_causal = caches is None and L > 1  # L == S: PyTorch's causal kernel, as the decoder's layer runs
            out = grouped_query_sdpa(q, k, v, mask, is_causal=is_causal)  # (B, h, L, d_head)
            x = x + a.o_proj(out.transpose(1, 2).reshape(B, L, a.n_heads * a.d_head))
            x = x + block.mlp(block.mlp_norm(x))
        if last_only:
            x = x[:, -1:]
        return self.model.output(self.model.norm(x))

    @torch.no_grad()
    def cache_bytes(self, batch_size, max_len, dtype=None):
        """Bytes of the caches ``new_caches`` would allocate (``len(kv_layers)`` of them)."""
        return sum(cache.nbytes for cache in self.new_caches(batch_size, max_len, dtype))
