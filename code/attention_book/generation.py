"""Greedy generation with a TinyTransformer, with one KV cache per layer or without any.

Shape letters: B batch, L0 prompt length, V vocabulary size.
"""
import numbers

import torch


def generate(model, prompt, n_new, use_cache=True):
    """Greedy decoding: append the model's most likely next token, n_new times.

    Args:
        model: a TinyTransformer.
        prompt: integer token ids, shape (B, L0), with L0 >= 1 and L0 + n_new <= model.config.max_len.
        n_new: how many tokens to generate, an integer >= 0.
        use_cache: True runs the prompt once, then only the newest token at each step, through one KVCache per
            layer; False runs the whole sequence so far through the model at every step.

    Returns:
        tokens: shape (B, L0 + n_new), the prompt followed by the new tokens.
        logits: shape (B, n_new, V), the logits that each new token was chosen from.
    """
    check_generate_inputs(model, prompt, n_new, use_cache)
    B, L0 = prompt.shape
    caches = model.new_caches(B, L0 + n_new) if use_cache else None  # one KVCache per layer
    tokens = prompt
    logits = torch.empty(B, 0, model.config.vocab_size, device=prompt.device)  # (B, steps so far, V)
    with torch.no_grad():  # the caches write in place: nothing here is trained
        for step in range(n_new):
            if use_cache:  # the whole prompt at step 0 (the prefill), then only the token chosen last
                step_logits = model(prompt if step == 0 else tokens[:, -1:], caches=caches)  # (B, L0 or 1, V)
            else:  # the whole sequence so far, again
                step_logits = model(tokens)  # (B, L0 + step, V)
            next_logits = step_logits[:, -1:]  # (B, 1, V): the prediction after the last token
            next_token = next_logits.argmax(dim=-1)  # (B, 1): greedy, the most likely token
            tokens = torch.cat([tokens, next_token], dim=1)
            logits = torch.cat([logits, next_logits], dim=1)
    return tokens, logits


def check_generate_inputs(model, prompt, n_new, use_cache):
    """Raise a ValueError (TypeError for a prompt that is no tensor) naming the argument and the rule it broke."""
    if not isinstance(prompt, torch.Tensor):
        raise TypeError(f"prompt must be a torch.Tensor of token ids, shape (B, L0), got {type(prompt).__name__}")
    if prompt.dim() != 2:
        raise ValueError(f"prompt must have shape (B, L0), got {prompt.dim()} dimensions: {tuple(prompt.shape)}")
    if prompt.dtype.is_floating_point or prompt.dtype.is_complex or prompt.dtype == torch.bool:
        raise ValueError(f"prompt must hold integer token ids, got {prompt.dtype}")
    if prompt.shape[0] < 1 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must hold at least one token in at least one row, got shape {tuple(prompt.shape)}: "
                         "the first new token is predicted from the prompt's last one")
    if isinstance(n_new, bool) or not isinstance(n_new, numbers.Integral) or n_new < 0:
        raise ValueError(f"n_new={n_new!r} must be an integer >= 0")
    if not isinstance(use_cache, bool):
        raise ValueError(f"use_cache={use_cache!r} must be True or False")
    max_len = model.config.max_len
    if prompt.shape[1] + n_new > max_len:
        raise ValueError(f"prompt length L0={prompt.shape[1]} + n_new={n_new} exceeds the model's max_len={max_len}: "
                         "the model has no position embedding beyond it")
    vocab_size = model.config.vocab_size
    if prompt.min() < 0 or prompt.max() >= vocab_size:
        raise ValueError(f"prompt must hold token ids in 0 .. vocab_size - 1 = {vocab_size - 1}, "
                         f"got values from {prompt.min().item()} to {prompt.max().item()}")
