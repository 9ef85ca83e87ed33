"""Head ablation: switch heads off and measure how much the loss rises."""
import torch

from .training import lm_loss


@torch.no_grad()
def ablation_losses(model, tokens, targets):
    """The rise in loss when each head alone is switched off: shape (n_layers, n_heads).

    Entry [l, j] is lm_loss with only head j of layer l zeroed, minus the loss of the whole model.
    """
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    base = lm_loss(model, tokens, targets)
    rises = torch.zeros(n_layers, n_heads)
    for layer in range(n_layers):
        for head in range(n_heads):
            head_mask = torch.ones(n_layers, n_heads)
            head_mask[layer, head] = 0.0
            rises[layer, head] = lm_loss(model, tokens, targets, head_mask) - base
    return rises
