"""A tiny decoder-only transformer built from GroupedQueryAttention, small enough to train on a CPU in seconds.

Tokens and positions are embedded, pass through ``n_layers`` pre-norm blocks, and are unembedded into logits over
the vocabulary. Two extras make the heads visible: ``attention_weights`` returns every head's pattern, and
``head_mask`` switches heads off one by one (ablation). For generation, ``new_caches`` makes one KVCache per
layer and ``forward(tokens, caches=...)`` runs only the new tokens against everything cached. With ``kv_share``,
consecutive layers share one set of keys and values (cross-layer attention, Brandon et al. 2024): the model then
has, and caches, K/V for only one layer in every ``kv_share``.

Shape letters: B batch, L sequence length (of this call's tokens), S tokens attended to (cached and new),
h query heads, g K/V heads, d_model model width, d_head head size.
"""
from contextlib import contextmanager
from dataclasses import dataclass, fields

import torch
from torch import nn

from .attention_layer import GroupedQueryAttention
from .cross_layer import run_layers, shared_kv_owners
from .kv_cache import Cache, KVCache
from .validation import require_divisible, require_positive, require_rank


@dataclass(frozen=True)
class TinyTransformerConfig:
    """Sizes of a TinyTransformer. Bad sizes raise ValueError when the config is made."""

    vocab_size: int
    max_len: int  # the longest sequence L the position embedding covers
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None  # None: one K/V head per query head (MHA)
    mlp: bool = True  # False: an attention-only transformer
    # None: every layer makes its own keys and values. k: the layers, in consecutive groups of k (a last group may
    # be shorter), attend to the keys and values made by their group's first layer (cross_layer.py); the other
    # layers have no k/v projections (1 = no sharing).
    kv_share: int | None = None

    def __post_init__(self):
        require_positive(vocab_size=self.vocab_size, max_len=self.max_len, d_model=self.d_model,
                         n_layers=self.n_layers, n_heads=self.n_heads)
        require_divisible("d_model", self.d_model, "n_heads", self.n_heads)
        if self.n_kv_heads is not None:
            require_positive(n_kv_heads=self.n_kv_heads)
            require_divisible("n_heads", self.n_heads, "n_kv_heads", self.n_kv_heads)
        if not isinstance(self.mlp, bool):
            raise ValueError(f"mlp={self.mlp!r} must be True or False")
        if self.kv_share is not None:
            require_positive(kv_share=self.kv_share)

    def __repr__(self):  # kv_share is shown only when set, so the configs of earlier chapters print as they did
        shown = (f for f in fields(self) if f.name != "kv_share" or self.kv_share is not None)
        return f"{type(self).__name__}({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in shown)})"

    @property
    def kv_layers(self) -> int:
        """How many layers make (and cache) keys and values: n_layers, or one per group of kv_share with sharing."""
        return len(set(shared_kv_owners(self.n_layers, self.kv_share or 1)))

    def makes_kv(self, layer) -> bool:
        """Whether layer ``layer`` makes its own keys and values (the first layer of its group, with sharing)."""
        return shared_kv_owners(self.n_layers, self.kv_share or 1)[layer] == layer


@contextmanager
def masked_heads(attn, head_mask):
    """Inside the ``with``, ``attn`` multiplies head i's output by ``head_mask[i]`` before ``o_proj`` mixes the heads.

    ``head_mask`` has shape (h,); None changes nothing. The input of the output projection is the heads' outputs
    side by side, (B, L, h * d_head), so a forward pre-hook on ``o_proj`` can scale each head's slice of it without
    changing GroupedQueryAttention. A 0 removes the head's contribution entirely: an ablation. The same result as
    zeroing head i's d_head columns of ``o_proj.weight``, without touching the weights.
    """
    if head_mask is None:
        yield
        return

    def mask_input(o_proj, inputs):
        (heads,) = inputs  # (B, L, h * d_head)
        B, L, _ = heads.shape
        heads = heads.view(B, L, attn.n_heads, attn.d_head) * head_mask[:, None]  # (B, L, h, d_head)
        return (heads.view(B, L, attn.n_heads * attn.d_head),)

    handle = attn.o_proj.register_forward_pre_hook(mask_input)
    try:
        yield
    finally:
        handle.remove()


class TransformerBlock(nn.Module):
    """One pre-norm block: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)) if the config has an MLP.

    The attention is causal: position i sees positions 0 .. i. The MLP is d_model -> 4 d_model -> GELU -> d_model.
    """

    def __init__(self, config: TinyTransformerConfig, makes_kv=True):
        super().__init__()
        d_model = config.d_model
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = GroupedQueryAttention(d_model, config.n_heads, config.n_kv_heads, makes_kv=makes_kv)
        self.mlp_norm = nn.LayerNorm(d_model) if config.mlp else None
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        ) if config.mlp else None

    def forward(self, x, head_mask=None, need_weights=False, cache=None, shared_kv=None):
        """x (B, L, d_model), head_mask (h,) or None -> x (B, L, d_model), weights (B, h, L, S) or None.

        cache: this layer's KVCache (chapter 6) or None. With a cache, x holds the tokens after the cached ones, and
        S = the cached tokens plus these L; without, S = L. shared_kv: None, or keys and values that an earlier layer
        made (its ``keys_values``) for this one to attend to: cross-layer sharing, chapter 15.
        """
        with masked_heads(self.attn, head_mask):
            attended, weights = self.attn(self.attn_norm(x), is_causal=True, need_weights=need_weights, cache=cache,
                                          shared_kv=shared_kv)
        x = x + attended
        if self.mlp is not None:
            x = x + self.mlp(self.mlp_norm(x))
        return x, weights

    def keys_values(self, x, cache=None):
        """The keys and values this block's attention makes for x (B, L, d_model), each (B, g, S, d_head)."""
        return self.attn.keys_values(self.attn_norm(x), cache)


class TinyTransformer(nn.Module):
    """A decoder-only transformer: embeddings, ``n_layers`` TransformerBlocks, a final LayerNorm, an unembedding.

    Positions use a learned embedding, one vector per position 0 .. max_len - 1. With ``config.kv_share`` = k > 1,
    layers 0, k, 2k, ... make keys and values and the layers after each, up to the next, attend to them (their
    attention has no k_proj or v_proj; ``cross_layer.py``); the weights are drawn as without sharing, so the same
    seed gives the same other weights.
    """

    def __init__(self, config: TinyTransformerConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList(TransformerBlock(config, makes_kv=config.makes_kv(layer))
                                    for layer in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.unembed = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, tokens, head_mask=None, return_weights=False, caches=None):
        """Next-token logits for every position.

        Args:
            tokens: integer token ids, shape (B, L), with L <= max_len (minus the cached tokens, with caches).
            head_mask: optional, shape (n_layers, n_heads). Head j of layer l has its output multiplied by
                head_mask[l, j] before the layer's output projection: 1 keeps the head, 0 ablates it.
            return_weights: also return every head's attention weights (slower: the book's own attention).
            caches: None, or one KVCache per layer (see ``new_caches``; per group of kv_share layers, with
                sharing), all holding the same number of earlier tokens, P. The tokens are then positions
                P .. P + L - 1: each layer appends their keys and values to its cache and attends to all S = P + L
                tokens. Decode under ``torch.no_grad()``.

        Returns:
            logits: shape (B, L, vocab_size); logits[:, i] depend only on tokens[:, :i + 1] (and the cached ones).
            weights (only with return_weights): shape (n_layers, B, h, L, S).
        """
        self._check_tokens(tokens)
        head_mask = self._check_head_mask(head_mask)
        start = self._check_caches(caches, tokens)  # P, the number of cached tokens (0 without caches)
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (L,)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (B, L, d_model)
        all_weights = []

        def run(layer, block, x, cache, shared_kv):
            layer_head_mask = None if head_mask is None else head_mask[layer]  # (h,)
            x, weights = block(x, layer_head_mask, return_weights, cache, shared_kv)
            all_weights.append(weights)
            return x

        x = run_layers(self.blocks, x, caches, self.config.kv_share or 1, run)
        logits = self.unembed(self.final_norm(x))  # (B, L, vocab_size)
        if return_weights:
            return logits, torch.stack(all_weights)  # (n_layers, B, h, L, S)
        return logits

    def new_caches(self, batch_size, max_len=None) -> list[KVCache]:
        """One empty KVCache per layer that makes keys and values (config.kv_layers), for ``forward(..., caches=...)``.

        Each has buffers of shape (batch_size, g, max_len, d_head), g = n_kv_heads; max_len defaults to the
        model's and may not exceed it (no position beyond it has an embedding).
        """
        max_len = self.config.max_len if max_len is None else max_len
        require_positive(batch_size=batch_size, max_len=max_len)
        if max_len > self.config.max_len:
            raise ValueError(f"max_len={max_len} must be <= the model's max_len={self.config.max_len}")
        return [block.attn.new_cache(batch_size, max_len)
                for layer, block in enumerate(self.blocks) if self.config.makes_kv(layer)]

    @torch.no_grad()
    def attention_weights(self, tokens, head_mask=None):
        """Every layer's per-head attention weights for tokens (B, L): shape (n_layers, B, h, L, L)."""
        return self(tokens, head_mask, return_weights=True)[1]

    def _check_tokens(self, tokens):
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"tokens must be a torch.Tensor of shape (B, L), got {type(tokens).__name__}")
        require_rank("tokens", tokens, 2, "B, L")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must hold integer token ids, got {tokens.dtype}")
        if tokens.shape[1] > self.config.max_len:
            raise ValueError(f"tokens have length L={tokens.shape[1]} but the model has max_len={self.config.max_len}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.config.vocab_size):
            raise ValueError(f"tokens must lie in 0 .. vocab_size - 1 = {self.config.vocab_size - 1}, "
                             f"got values from {tokens.min().item()} to {tokens.max().item()}")

    def _check_caches(self, caches, tokens):
        """The number of tokens every cache holds (0 for None), after checking caches against the model and tokens."""
        if caches is None:
            return 0
        if not isinstance(caches, (list, tuple)) or len(caches) != self.config.kv_layers or \
                not all(isinstance(cache, Cache) for cache in caches):
            count = "one per layer" if (self.config.kv_share or 1) == 1 else "one per group of kv_share layers"
            raise ValueError(f"caches must be a list of {self.config.kv_layers} KV caches, {count} "
                             f"(model.new_caches(batch_size)), got {type(caches).__name__}")
        lengths = {cache.length for cache in caches}
        if len(lengths) != 1:
            raise ValueError(f"the caches must all hold the same number of tokens, got lengths {sorted(lengths)}")
        (start,) = lengths
        B, L = tokens.shape
        if caches[0].batch_size != B:
            raise ValueError(f"tokens have batch size B={B} but the caches were made for batch_size="
                             f"{caches[0].batch_size}: make new caches with model.new_caches({B})")
        if start + L > caches[0].max_len:
            raise ValueError(f"{start} cached + L={L} new tokens exceeds the caches' max_len={caches[0].max_len}")
        if start + L > self.config.max_len:
            raise ValueError(f"{start} cached + L={L} new tokens exceeds the model's max_len={self.config.max_len}")
        return start

    def _check_head_mask(self, head_mask):
        """None, or head_mask as a float tensor of shape (n_layers, n_heads) on the model's device."""
        if head_mask is None:
            return None
        weight = self.unembed.weight
        head_mask = torch.as_tensor(head_mask, dtype=weight.dtype, device=weight.device)
        expected = (self.config.n_layers, self.config.n_heads)
        if head_mask.shape != expected:
            raise ValueError(f"head_mask must have shape (n_layers, n_heads) = {expected}, "
                             f"got {tuple(head_mask.shape)}")
        return head_mask
