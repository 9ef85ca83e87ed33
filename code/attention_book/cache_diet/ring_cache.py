"""A sliding-window KV cache: a ring buffer of n_sinks + window slots, whose bytes stop growing.

The first ``n_sinks`` tokens keep their slots forever (StreamingLLM's attention sinks, Xiao et al. 2023); every
later token takes the slot of the token ``window`` positions before it, which no query will read again. Decoding
through it gives what ``window_mask`` gives for the whole sequence at once.

Positions: the book keeps each token's absolute position in the text. The attention layer rotates keys by RoPE
at ``start = cache.length`` *before* they are cached (chapter 11's rule: the cache stores rotated keys), and
``length`` counts every token seen, so the score of a query and a key depends on their true distance however often
the ring has wrapped. StreamingLLM makes another choice: it caches keys *unrotated*, numbers the cached tokens
0, 1, 2, ... in their order in the text (the sinks first, then the window) and, at every step, rotates each cached
key by its number and the query by the next one. No distance then exceeds the cache's size, a distance the model
saw in training, however long the text; but a key's number drops by one each time the window slides, so its
rotation cannot be stored once: every step rotates the whole cache again. With absolute positions a model is
asked about distances up to the length of the text for the sinks (only they are that far), which suits a model
trained on that context (SmolLM2: 8,192) and is the simpler cache; chapter 15 discusses the difference.
"""
import torch

from ..kv_cache import KVCache, check_entries, kv_entry_shapes
from ..validation import require_positive


class RingKVCache(KVCache):
    """Keys and values of the sinks and the last ``window`` tokens, for one attention layer: a ``KVCache`` of
    n_sinks + window slots (its ``max_len``) whose ``append`` and ``causal_mask`` reuse the slots.

    Buffers ``k`` and ``v`` have shape (B, g, n_sinks + window, d_head); ``slot_positions`` (n_sinks + window,) holds
    the absolute position of the token in each slot (-1: empty). ``length`` counts every token appended (it is the
    RoPE position of the next one), ``n_slots_used`` the slots filled, ``nbytes`` the buffers' bytes, which do not
    grow with ``length``.

    ``append`` returns the keys that the new tokens may need, in slot order, not in position order (attention
    does not care about order, only the mask does): for one new token, the filled slots, views of the buffers
    (its own included, in the slot it just took: S = n_slots_used); for a chunk of L_new > 1 tokens, the slots
    as they were and then the chunk, concatenated (a temporary of S = n_slots_used before + L_new rows), since
    later tokens of the chunk overwrite keys its first tokens still read. ``causal_mask(L)`` gives the (L, S)
    mask of those keys for the chunk's queries, so ``GroupedQueryAttention(..., is_causal=True, cache=...)``
    applies the window and the sinks.
    """

    def __init__(self, batch_size, n_kv_heads, d_head, window, n_sinks=0, dtype=torch.float32, device=None):
        require_positive(window=window)
        if isinstance(n_sinks, bool) or not isinstance(n_sinks, int) or n_sinks < 0:
            raise ValueError(f"n_sinks={n_sinks!r} must be a non-negative integer (the first tokens kept forever)")
        super().__init__(batch_size, n_kv_heads, d_head, n_sinks + window, dtype=dtype, device=device)
        self.window, self.n_sinks = int(window), n_sinks
        self.slot_positions = torch.full((n_sinks + window,), -1, dtype=torch.long, device=self.k.device)
        self._key_positions = self.slot_positions[:0]  # the positions of the keys the last append returned

    @property
    def n_slots_used(self) -> int:
        return min(self.length, self.max_len)

    def slot_of(self, position: int) -> int:
        """The slot that the token at absolute ``position`` is written to: itself for a sink, else the ring's."""
        if position < self.n_sinks:
            return position
        return self.n_sinks + (position - self.n_sinks) % self.window

    def append(self, k, v):
        """Store new keys and values (B, g, L_new, d_head); return the keys and values they may attend to,
        (B, g, S, d_head) each (see the class docstring for S and the order)."""
        shapes = kv_entry_shapes(self.batch_size, self.n_kv_heads, self.d_head)
        check_entries(shapes, self.dtype, self.device, None, self.length, k=k, v=v)  # no limit: the ring reuses slots
        L_new, start = k.shape[2], self.length
        new_positions = torch.arange(start, start + L_new, device=self.k.device)
        if L_new > 1:  # the old slots and the chunk, before the chunk overwrites any of them
            used = self.n_slots_used
            keys = torch.cat((self.k[:, :, :used], k), dim=2)
            values = torch.cat((self.v[:, :, :used], v), dim=2)
            key_positions = torch.cat((self.slot_positions[:used], new_positions))
        kept = [i for i in range(L_new) if start + i < self.n_sinks or start + L_new - 1 - (start + i) < self.window]
        slots = torch.tensor([self.slot_of(start + i) for i in kept], dtype=torch.long, device=self.k.device)
        kept = torch.tensor(kept, dtype=torch.long, device=self.k.device)
        self.k[:, :, slots] = k[:, :, kept]  # each token to its slot (only the last `window` of a long chunk)
        self.v[:, :, slots] = v[:, :, kept]
        self.slot_positions[slots] = new_positions[kept]
        self.length = start + L_new
        if L_new == 1:  # the filled slots, its own included: views, no copy
            used = self.n_slots_used
            keys, values, key_positions = self.k[:, :, :used], self.v[:, :, :used], self.slot_positions[:used]
        self._key_positions = key_positions.clone()
        return keys, values

    def causal_mask(self, L):
        """Which of the keys the last ``append`` returned its last L tokens may attend to: key at position j, for
        the query at position p, iff j <= p and (p - j < window or j < n_sinks). Shape (L, S), True = may attend."""
        require_positive(L=L)
        if L > self.length:
            raise ValueError(f"L={L} queries, but only {self.length} tokens were appended")
        query = torch.arange(self.length - L, self.length, device=self.k.device)[:, None]  # (L, 1)
        key = self._key_positions[None, :]  # (1, S)
        return (key >= 0) & (key <= query) & ((query - key < self.window) | (key < self.n_sinks))

    def reset(self) -> None:
        """Forget every cached token (the memory stays allocated)."""
        super().reset()
        self.slot_positions.fill_(-1)
        self._key_positions = self.slot_positions[:0]
