"""Chapter 2's experiment: a task whose answer needs two positions, and a model of heads side by side to try it on."""
import torch
from torch import nn

from ..self_attention import SelfAttentionHead


def previous_two(generator, batch_size=128, vocab_size=32, length=8):
    """Random tokens (B, L) and targets (B, L - 2, 2): x[i-1] and x[i-2] for every position i >= 2."""
    x = torch.randint(0, vocab_size, (batch_size, length), generator=generator)
    return x, torch.stack([x[:, 1:-1], x[:, :-2]], dim=-1)


class HeadsSideBySide(nn.Module):
    """n_heads SelfAttentionHeads of width d_head, run on the same input; their outputs are concatenated."""

    def __init__(self, d_model, n_heads, d_head):
        super().__init__()
        self.heads = nn.ModuleList([SelfAttentionHead(d_model, d_head) for _ in range(n_heads)])

    def forward(self, x):
        """x (B, L, d_model) -> out (B, L, n_heads * d_head), weights (B, n_heads, L, L)."""
        pairs = [head(x) for head in self.heads]  # n_heads pairs: out (B, L, d_head), weights (B, L, L)
        return torch.cat([out for out, _ in pairs], dim=-1), torch.stack([w for _, w in pairs], dim=1)


class PreviousTwoModel(nn.Module):
    """Embeddings -> n_heads heads side by side -> a linear readout of two tokens.

    No residual connection and no MLP: both answers must be read, linearly, off the heads' joined output.
    """

    def __init__(self, n_heads, vocab_size=32, length=8, d_model=16, d_head=None):
        super().__init__()
        d_head = d_head or d_model // n_heads  # by default the heads share the width d_model
        self.vocab_size, self.length = vocab_size, length
        self.tok = nn.Embedding(vocab_size, d_model)  # a learned vector per token
        self.pos = nn.Embedding(length, d_model)  # a learned vector per position
        self.attn = HeadsSideBySide(d_model, n_heads, d_head)  # no mask: every position may look anywhere
        self.readout = nn.Linear(n_heads * d_head, 2 * vocab_size)  # logits for x[i-1] and for x[i-2]

    def forward(self, x, need_weights=False):
        """x (B, L) -> logits (B, L - 2, 2, vocab_size), and the weights (B, n_heads, L, L) if asked."""
        hidden = self.tok(x) + self.pos.weight  # (B, L, d_model) + (L, d_model): positions broadcast over B
        out, weights = self.attn(hidden)  # (B, L, n_heads * d_head), (B, n_heads, L, L)
        logits = self.readout(out[:, 2:]).view(x.shape[0], self.length - 2, 2, self.vocab_size)
        return (logits, weights) if need_weights else logits
