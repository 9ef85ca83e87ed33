"""Head ablation: switch heads off and measure how much the loss rises."""
import torch
import torch.nn.functional as F


@torch.no_grad()
def masked_loss(model, tokens, targets, head_mask=None):
    """Cross-entropy of a TinyTransformer on (tokens, targets), both (B, L), with heads switched off by head_mask.

    head_mask: (n_layers, n_heads) of 1 (keep) and 0 (ablate), or None for the whole model. Targets equal to
    -100 are left out, as in training.
    """
    logits = model(tokens, head_mask=head_mask)  # (B, L, vocab_size)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


@torch.no_grad()
def ablation_losses(model, tokens, targets):
    """The rise in loss when each head alone is switched off: shape (n_layers, n_heads).

    Entry [l, j] is masked_loss with only head j of layer l zeroed, minus the loss of the whole model.
    """
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    base = masked_loss(model, tokens, targets)
    rises = torch.zeros(n_layers, n_heads)
    for layer in range(n_layers):
        for head in range(n_heads):
            head_mask = torch.ones(n_layers, n_heads)
            head_mask[layer, head] = 0.0
            rises[layer, head] = masked_loss(model, tokens, targets, head_mask) - base
    return rises
