"""A plain training loop: AdamW, cross-entropy, a fixed seed, a progress bar and a loss history.

Imported only when a chapter trains something, so ``import attention_book`` stays light.
"""
import warnings

import torch
import torch.nn.functional as F
from tqdm import TqdmWarning

from .measure import threads as cpu_threads

with warnings.catch_warnings():
    warnings.simplefilter("ignore", TqdmWarning)  # without ipywidgets, fall back to a text bar quietly
    from tqdm.auto import tqdm


def train(model, make_batch, steps, lr=3e-3, seed=0, desc="training", progress=True, threads=1,
          callback=None, every=10):
    """Train ``model`` with AdamW on a cross-entropy loss for ``steps`` steps; return the loss of every step.

    Args:
        model: maps a batch of inputs to logits of shape (..., n_classes).
        make_batch: ``make_batch(generator) -> (inputs, targets)``, targets of shape (...) holding class
            indices. It draws its randomness from the generator, so the data is the same on every run.
        seed: seeds the data and any randomness during training (such as dropout). The model is already
            built, so seed its initialisation yourself: ``torch.manual_seed(0)`` before creating it.
        callback: if given, ``callback(step)`` is called before step 0 and after every ``every`` steps, to
            measure something as training goes (it should not use the global random generator).
        threads: CPU threads while training. The book's models are so small that one thread is fastest.
    """
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)  # the data's own random numbers
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    with cpu_threads(threads):
        for step in tqdm(range(steps), desc=desc, disable=not progress):
            if callback is not None and step % every == 0:
                callback(step)
            inputs, targets = make_batch(generator)
            logits = model(inputs)  # (..., n_classes)
            loss = F.cross_entropy(logits.flatten(0, -2), targets.flatten())  # averaged over every target
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        if callback is not None:
            callback(steps)
    model.eval()
    return losses


@torch.no_grad()
def lm_loss(model, tokens, targets, head_mask=None):
    """Cross-entropy of a TinyTransformer on (tokens, targets), both (B, L), as a float.

    Targets equal to -100 are left out, as in training. head_mask: (n_layers, n_heads) of 1 (keep) and 0 (switch
    the head off), or None for the whole model (chapter 4's ablation switches heads off).
    """
    logits = model(tokens, head_mask=head_mask)  # (B, L, vocab_size)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()


def accuracy(model, inputs, targets):
    """Fraction of positions where the model's most likely class is the target."""
    return (model(inputs).argmax(dim=-1) == targets).float().mean().item()


def smoothed(losses, half_window=10):
    """A centred moving average of a loss history: entry i averages losses[i - half_window : i + half_window + 1]."""
    windows = [losses[max(0, i - half_window):i + half_window + 1] for i in range(len(losses))]
    return [sum(window) / len(window) for window in windows]
