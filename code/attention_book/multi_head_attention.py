"""Multi-head attention: h heads side by side, each with its own queries, keys and values.

This is the layer that chapter 3 builds. It has no KV cache and no sharing of key/value heads: chapter 8's
``GroupedQueryAttention`` is the same layer with both added.
"""
from torch import nn

from .grouped_sdpa import attend
from .masks import layer_mask
from .validation import check_layer_inputs, require_divisible, require_positive


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h heads attend side by side, then one projection mixes their outputs.

    Shape letters: B batch, L queries, S keys (S = L in self-attention), h = n_heads.
    Head i owns columns i * d_head ... (i + 1) * d_head - 1 of each of the q, k and v projections.

    Args:
        d_model: size of each token's vector.
        n_heads: number of heads, h.
        d_head: size of each head; defaults to d_model // n_heads, which must then divide exactly. Any other
            value works too: the concatenated heads, n_heads * d_head wide, are mapped back to d_model by o_proj.
        bias: whether the four projections have biases.
    """

    def __init__(self, d_model, n_heads, d_head=None, bias=True):
        super().__init__()
        require_positive(d_model=d_model, n_heads=n_heads)
        if d_head is None:
            require_divisible("d_model", d_model, "n_heads", n_heads)
            d_head = d_model // n_heads
        require_positive(d_head=d_head)
        self.d_model, self.n_heads, self.d_head = int(d_model), int(n_heads), int(d_head)
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)  # every head's W_q, side by side
        self.k_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)

    @property
    def n_kv_heads(self):
        """One key/value head per query head; chapters 7 and 8 let several query heads share one."""
        return self.n_heads

    def forward(self, x, kv=None, *, mask=None, is_causal=False, need_weights=False):
        """Attend from the tokens of x to the tokens of kv (or of x itself).

        Args:
            x: queries' source, shape (B, L, d_model).
            kv: keys' and values' source, shape (B, S, d_model); None means self-attention (kv = x).
            mask: boolean, True = may attend. Shape (L, S), (B, L, S) or (B, 1 or h, L, S).
            is_causal: also apply ``causal_mask(L, S)``: query i may attend to keys up to i + (S - L).
            need_weights: if True, run the book's own ``scaled_dot_product_attention`` and return the weights;
                if False, run ``F.scaled_dot_product_attention``, which can use a fused kernel that never stores
                them, and return None for them. ``attend`` makes that choice, for every layer of the book.

        Returns:
            out: shape (B, L, d_model).
            weights: shape (B, h, L, S), or None. A query with no key to attend to gets zero weights and a
                zero output from every head.
        """
        kv = x if kv is None else kv
        B, L, S = check_layer_inputs(x, kv, self.d_model, self.q_proj.weight)
        mask = layer_mask(mask, is_causal, B, self.n_heads, L, S, x.device)  # None, or broadcasts to (B, h, L, S)
        q = self.q_proj(x).view(B, L, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, L, d_head)
        k = self.k_proj(kv).view(B, S, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, S, d_head)
        v = self.v_proj(kv).view(B, S, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, S, d_head)
        out, weights = attend(q, k, v, mask, need_weights=need_weights)  # (B, h, L, d_head), (B, h, L, S) or None
        out = out.transpose(1, 2).reshape(B, L, self.n_heads * self.d_head)  # concatenate the heads
        return self.o_proj(out), weights

