"""Greedy generation with a ``LlamaDecoder`` through one ``KVCache`` per layer: a prefill, then decode steps.

Shape letters: B batch, L0 prompt length, V vocabulary size.
"""
import torch

from ..validation import require_rank


def check_lengths(model, prompt, n_new, max_len=None) -> int:
    """The caches' length (default L0 + n_new); a ValueError, saying what to change, if the prompt (B, L0) and its
    n_new new tokens do not fit in it."""
    require_rank("prompt", prompt, 2, "B, L0")
    if prompt.dtype.is_floating_point or prompt.dtype == torch.bool:
        raise ValueError(f"prompt must hold integer token ids, got {prompt.dtype}")
    L0 = prompt.shape[1]
    if L0 < 1:
        raise ValueError("prompt must hold at least one token: the first new token is predicted from its last one")
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new={n_new!r} must be an integer >= 0")
    max_len = L0 + n_new if max_len is None else max_len
    if L0 > max_len:
        raise ValueError(f"the prompt has {L0} tokens, more than the cache holds (max_len={max_len}): make the cache "
                         "longer or the prompt shorter")
    if L0 + n_new > max_len:
        raise ValueError(f"the prompt's {L0} tokens + n_new={n_new} new ones exceed the cache (max_len={max_len}): "
                         f"ask for at most {max_len - L0} new tokens or make the cache longer")
    if max_len > model.config.context_length:
        raise ValueError(f"max_len={max_len} exceeds the model's context length {model.config.context_length}")
    return max_len


@torch.inference_mode()
def generate_greedy(model, prompt, n_new, *, max_len=None, stop_at_eos=True, on_token=None) -> torch.Tensor:
    """Greedy decoding: append the model's most likely next token, up to n_new times.

    Args:
        model: a ``LlamaDecoder``.
        prompt: token ids, shape (B, L0), on the model's device.
        n_new: how many tokens to generate at most.
        max_len: the caches' length; default L0 + n_new. The prompt and the new tokens must fit in it.
        stop_at_eos: stop once every sequence has produced ``model.config.eos_id``; a sequence that is done gets
            eos again while the others go on (as transformers' ``generate`` pads it).
        on_token: None, or a function ``on_token(step, tokens)`` called after each new token, with tokens of shape
            (B,): to stream the answer as it is made.

    Returns:
        shape (B, L0 + n), the prompt then the n <= n_new new tokens.
    """
    max_len = check_lengths(model, prompt, n_new, max_len)
    B, L0 = prompt.shape
    eos = model.config.eos_id if stop_at_eos else None
    caches = model.new_caches(B, max_len)  # one KVCache per layer, allocated once
    out = torch.empty(B, L0 + n_new, dtype=torch.long, device=prompt.device)
    out[:, :L0] = prompt
    done = torch.zeros(B, dtype=torch.bool, device=prompt.device)
    logits = model(prompt, caches, last_only=True)[:, -1]  # the prefill: (B, V), the prediction after the prompt
    for step in range(n_new):
        token = logits.argmax(dim=-1)  # (B,): greedy, the most likely token
        if eos is not None:
            token = token.masked_fill(done, eos)
            done |= token == eos
        out[:, L0 + step] = token
        if on_token is not None:
            on_token(step, token)
        if eos is not None and bool(done.all()):  # bool() waits for the device: only when it can stop
            return out[:, :L0 + step + 1]
        if step + 1 < n_new:
            logits = model(token[:, None], caches)[:, -1]  # one decode step: (B, 1) in, (B, V) out
    return out
