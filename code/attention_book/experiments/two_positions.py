"""Chapter 2's experiment: a task whose answer needs two positions, and a one-layer model to try it on."""
import torch
from torch import nn

from ..attention_layer import GroupedQueryAttention


def previous_two(generator, batch_size=128, vocab_size=32, length=8):
    """Random tokens (B, L) and targets (B, L - 2, 2): x[i-1] and x[i-2] for every position i >= 2."""
    x = torch.randint(0, vocab_size, (batch_size, length), generator=generator)
    return x, torch.stack([x[:, 1:-1], x[:, :-2]], dim=-1)


class OneLayer(nn.Module):
    """Embeddings -> one attention layer with n_heads heads -> a linear readout of two tokens.

    No residual connection and no MLP: both answers must be read, linearly, off the attention output.
    """

    def __init__(self, n_heads, vocab_size=32, length=8, d_model=16):
        super().__init__()
        self.vocab_size, self.length = vocab_size, length
        self.tok = nn.Embedding(vocab_size, d_model)  # a learned vector per token
        self.pos = nn.Embedding(length, d_model)  # a learned vector per position
        self.attn = GroupedQueryAttention(d_model, n_heads)  # no mask: every position may look anywhere
        self.readout = nn.Linear(d_model, 2 * vocab_size)  # logits for x[i-1] and for x[i-2]

    def forward(self, x, need_weights=False):
        """x (B, L) -> logits (B, L - 2, 2, vocab_size), and the weights (B, h, L, L) if asked."""
        hidden = self.tok(x) + self.pos.weight  # (B, L, d_model)
        out, weights = self.attn(hidden, need_weights=need_weights)  # (B, L, d_model)
        logits = self.readout(out[:, 2:]).view(x.shape[0], self.length - 2, 2, self.vocab_size)
        return (logits, weights) if need_weights else logits
