"""One head of self-attention with learned query, key and value projections."""
from torch import nn

from .sdpa import scaled_dot_product_attention
from .validation import require_positive, require_rank


class SelfAttentionHead(nn.Module):
    """A single attention head whose queries, keys and values are learned from the same sequence.

    Each token's vector x_i (size d_model) is projected three ways, q_i = x_i W_q, k_i = x_i W_k
    and v_i = x_i W_v (each of size d_head), and the head returns softmax(q kᵀ / √d_head) v.
    Parameters: 3 x d_model x d_head weights, plus 3 x d_head biases if ``bias``.
    """

    def __init__(self, d_model, d_head, bias=False):
        super().__init__()
        require_positive(d_model=d_model, d_head=d_head)
        self.d_model, self.d_head = d_model, d_head
        self.q_proj = nn.Linear(d_model, d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, d_head, bias=bias)

    def forward(self, x, mask=None):
        """x (B, L, d_model), mask broadcastable to (B, L, L) -> out (B, L, d_head), weights (B, L, L)."""
        require_rank("x", x, 3, "B, L, d_model")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has last dimension {x.shape[-1]} but the head has d_model={self.d_model}")
        q = self.q_proj(x)  # (B, L, d_head): what each token looks for
        k = self.k_proj(x)  # (B, L, d_head): what each token offers
        v = self.v_proj(x)  # (B, L, d_head): what each token hands over
        return scaled_dot_product_attention(q, k, v, mask)
