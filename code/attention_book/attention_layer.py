"""One attention layer for MHA, GQA and MQA: n_heads query heads share n_kv_heads key/value heads."""
import torch
from torch import nn

from .grouped_sdpa import attend
from .kv_cache import KVCache, check_cache_fits
from .masks import layer_mask
from .rope import Rope
from .validation import check_layer_inputs, require_divisible, require_positive


class GroupedQueryAttention(nn.Module):
    """Multi-head attention in which groups of query heads share key/value heads.

    ``n_kv_heads == n_heads`` is multi-head attention (MHA), ``n_kv_heads == 1`` is multi-query
    attention (MQA), and anything in between is grouped-query attention (GQA). Query head i reads
    K/V head ``i // (n_heads // n_kv_heads)``: the grouping of ``torch.repeat_interleave`` along the
    head dimension and of ``F.scaled_dot_product_attention(..., enable_gqa=True)``.

    Args:
        d_model: size of each token's vector.
        n_heads: number of query heads, h.
        n_kv_heads: number of key/value heads, g; defaults to n_heads (MHA). Must divide n_heads.
        d_head: size of each head; defaults to d_model // n_heads, which must then divide exactly.
        bias: whether the four projections have biases.
        rope: a ``Rope`` with the same d_head, to rotate queries and keys by their positions (chapter 11), or
            None for no positions inside the layer. Positions count from 0, or from the number of tokens already
            in the cache, so keys are cached after rotation.
        makes_kv: False for a layer with no k_proj and v_proj, which attends to the keys and values of another
            layer (cross-layer sharing, ``cross_layer.py``).
    """

    def __init__(self, d_model, n_heads, n_kv_heads=None, d_head=None, bias=True, rope=None, makes_kv=True):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        require_positive(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads)
        if d_head is None:
            require_divisible("d_model", d_model, "n_heads", n_heads)
            d_head = d_model // n_heads
        require_positive(d_head=d_head)
        require_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
        # int() also turns numpy integers into Python ones.
        d_model, n_heads, n_kv_heads, d_head = map(int, (d_model, n_heads, n_kv_heads, d_head))
        self.d_model, self.n_heads, self.n_kv_heads, self.d_head = d_model, n_heads, n_kv_heads, d_head
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)
        if not makes_kv:  # drawn, then dropped: a seed gives the same other weights with or without sharing
            self.k_proj = self.v_proj = None
        self.qkv_proj = None  # None, or q_proj, k_proj and v_proj as one projection (see forward)
        if rope is not None and (not isinstance(rope, Rope) or rope.d_head != d_head):
            raise ValueError(f"rope must be None or a Rope with d_head={d_head}, got {rope!r}")
        self.rope = rope

    @property
    def makes_kv(self) -> bool:
        """Whether the layer makes keys and values; False: it attends to another layer's (``shared_kv``)."""
        return self.k_proj is not None

    def forward(self, x, kv=None, *, mask=None, is_causal=False, cache=None, need_weights=False, shared_kv=None):
        """Attend from the tokens of x to the tokens of kv (or of x itself).

        Args:
            x: queries' source, shape (B, L, d_model).
            kv: keys' and values' source, shape (B, S, d_model); None means self-attention (kv = x).
            mask: boolean, True = may attend. Shape (L, S), (B, L, S) or (B, 1 or h, L, S).
            is_causal: also apply ``causal_mask(L, S)``, aligned bottom-right so that it stays
                correct when a cache makes S > L; with a cache, the cache's own ``causal_mask(L)`` (a
                sliding-window cache also hides the keys that left the window).
            cache: a cache (``new_cache``, or any that keeps the contract of ``kv_cache.py``), for self-attention
                only, under ``torch.no_grad()``. This call's keys and values are appended to it and the queries
                attend to everything cached, so S = cache.length afterwards.
            need_weights: if True, run the book's own ``scaled_dot_product_attention`` and return the
                per-head weights; if False, run PyTorch's fused kernel (``grouped_query_sdpa``, which reads
                each K/V head once, not once per query head) and return None for them. Causal attention with
                no cache and no mask then builds no mask at all: PyTorch's ``is_causal`` skips the masked part.
            shared_kv: None, or (k, v), each (B, g, S, d_head): keys and values made by another layer for these
                tokens (``keys_values``; cross-layer sharing, ``cross_layer.py``), which this layer attends to
                instead of making its own. ``cache`` is then the cache they were appended to, which already
                holds this call's tokens: it gives their positions and mask, and nothing is appended.

        Returns:
            out: shape (B, L, d_model).
            weights: shape (B, h, L, S), or None.

        With ``qkv_proj`` set (a projection whose outputs are q_proj's, k_proj's and v_proj's side by side, as
        chapter 12's fast decoder sets it), self-attention makes q, k and v in one product.
        """
        if cache is not None and kv is not None:
            raise ValueError("cache is for self-attention (kv=None): with kv given, the same keys and values "
                             "would be appended at every step; compute them once and pass kv without a cache")
        if self.rope is not None and kv is not None:
            raise ValueError("rope is for self-attention (kv=None): queries and keys from two sequences have no "
                             "shared positions to rotate by")
        if shared_kv is None and not self.makes_kv:
            raise ValueError("this layer makes no keys and values of its own (it shares another layer's): pass "
                             "shared_kv=(k, v), made by that layer's keys_values (see attention_book.cross_layer)")
        kv = x if kv is None else kv
        B, L, S = check_layer_inputs(x, kv, self.d_model, self.q_proj.weight)
        if cache is not None and (getattr(cache, "n_kv_heads", None), getattr(cache, "d_head", None)) != \
                (self.n_kv_heads, self.d_head):
            check_cache_fits(cache, self.n_kv_heads, self.d_head)  # says what does not fit
        if shared_kv is not None:  # already made, rotated and cached: only the queries are this layer's
            q, (k, v) = self.queries(x, 0 if cache is None else cache.length - L), shared_kv
        elif self.qkv_proj is not None and kv is x:
            q, k, v = self.fused_queries_keys_values(x, 0 if cache is None else cache.length)
            if cache is not None:
                k, v = cache.append(k, v)
        else:  # positions start after the cached tokens; keys are cached rotated
            q, (k, v) = self.queries(x, 0 if cache is None else cache.length), self.keys_values(kv, cache)
        S = k.shape[2]  # with a cache: every cached token
        no_mask = is_causal and mask is None and cache is None and L == S and not need_weights
        if not no_mask:  # PyTorch's is_causal needs no mask tensor; anything else gets one
            causal = cache.causal_mask(L) if is_causal and cache is not None else None  # the cache knows its keys
            mask = layer_mask(mask, is_causal, B, self.n_heads, L, S, x.device, causal)  # None, or (B, h, L, S)
        out, weights = attend(q, k, v, mask, is_causal=no_mask, need_weights=need_weights)  # (B, h, L, d_head)
        out = out.transpose(1, 2).reshape(B, L, self.n_heads * self.d_head)  # concatenate the heads
        return self.o_proj(out), weights

    def queries(self, x, start=0):
        """The queries of x's tokens (B, L, d_model), rotated from position ``start``: shape (B, h, L, d_head)."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, L, d_head)
        return q if self.rope is None else self.rope(q, start)

    def keys_values(self, x, cache=None):
        """The keys and values of x's tokens (B, S, d_model), each (B, g, S, d_head), keys rotated from position
        ``cache.length`` (0 without a cache); with a cache, appended to it, and then every cached token's."""
        B, S, _ = x.shape
        if not self.makes_kv:
            raise ValueError("this layer makes no keys and values of its own (it shares another layer's)")
        k = self.k_proj(x).view(B, S, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, g, S, d_head)
        v = self.v_proj(x).view(B, S, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, g, S, d_head)
        if self.rope is not None:
            k = self.rope(k, 0 if cache is None else cache.length)
        return (k, v) if cache is None else cache.append(k, v)

    def fused_queries_keys_values(self, x, start=0):
        """q (B, h, L, d_head), k and v (B, g, L, d_head) of x's tokens from one product, ``qkv_proj``'s, with
        the h query heads and g key heads rotated in one call."""
        B, L, _ = x.shape
        h, g = self.n_heads, self.n_kv_heads
        qkv = self.qkv_proj(x).view(B, L, h + 2 * g, self.d_head).transpose(1, 2)  # (B, h + 2g, L, d_head)
        qk = qkv[:, :h + g] if self.rope is None else self.rope(qkv[:, :h + g], start)
        return qk[:, :h], qk[:, h:], qkv[:, h + g:]

    def new_cache(self, batch_size, max_len, dtype=None, device=None) -> KVCache:
        """An empty cache sized for this layer: buffers of shape (batch_size, n_kv_heads, max_len, d_head).

        Its dtype is the one the layer's keys will have: the weights' dtype, or autocast's (for example
        bfloat16 inside ``torch.autocast("cpu", dtype=torch.bfloat16)``).
        """
        weight = self.q_proj.weight
        if not self.makes_kv:
            raise ValueError("this layer makes no keys and values of its own: the cache of its group's first "
                             "layer holds them")
        if dtype is None and torch.is_autocast_enabled(weight.device.type):
            dtype = torch.get_autocast_dtype(weight.device.type)
        return KVCache(batch_size, self.n_kv_heads, self.d_head, max_len,
                       dtype=dtype or weight.dtype, device=device or weight.device)

