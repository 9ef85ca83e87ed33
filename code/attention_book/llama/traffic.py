"""What a decode step reads from memory, weights against KV cache, and how long it takes.

Every decode step reads every weight once, whatever the batch (one matrix-vector product per sequence, and the
sequences share the read), plus the cache of every sequence: B x S tokens x ``kv_cache_bytes_per_token``. At small
B x S the weights dominate and the step time barely moves; past the crossover, S* = weight bytes / (B x cache bytes
per token), the cache does. Shape letters: B batch, S context (tokens in the cache).
"""
import contextlib
import os
import sys
import tempfile
import time

import torch

from ..experiments.measure import median_added_seconds
from ..validation import require_positive
from .generate import generate_greedy


def decode_step_bytes(model, batch_size, context, bytes_per_element=None) -> dict[str, int]:
    """Bytes one decode step reads: {"weights": all weights once (tied ones once), "kv_cache": the K and V of
    batch_size x context cached tokens}. bytes_per_element defaults to the weights' (4 for fp32)."""
    if bytes_per_element is None:
        bytes_per_element = model.embedding.weight.element_size()
    cache = batch_size * context * model.config.kv_cache_bytes_per_token(bytes_per_element)
    return {"weights": model.weight_bytes(), "kv_cache": cache}


def crossover_context(model, batch_size, bytes_per_element=None) -> float:
    """The context S at which a decode step reads as many bytes of cache as of weights, at this batch size."""
    if bytes_per_element is None:
        bytes_per_element = model.embedding.weight.element_size()
    return model.weight_bytes() / (batch_size * model.config.kv_cache_bytes_per_token(bytes_per_element))


@torch.inference_mode()
def decode_step_seconds(model, batch_size, context, runs=5) -> float:
    """The best of ``runs`` timed decode steps (one new token per sequence) after ``context`` cached tokens.

    The caches hold zeros marked as filled up to ``context`` (the step reads them as if they were real: the time
    does not depend on their values), so no prefill of batch_size x context tokens is needed. Memory: the caches
    take batch_size x (context + 1) x ``kv_cache_bytes_per_token`` bytes.
    """
    step = _decode_step_after(model, batch_size, context)
    best = float("inf")
    for _ in range(runs + 1):  # the first run warms up
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return best


@torch.inference_mode()
def decode_step_seconds_added(model, batch_size, short, long, pairs=9) -> float:
    """How many seconds longer a decode step takes after ``long`` cached tokens than after ``short``: the median of
    ``pairs`` differences, the two steps timed back to back (``measure.median_added_seconds``), so that a moment when
    another program takes the core spoils one pair, not the estimate. Memory: the caches of both contexts (see
    ``decode_step_seconds``).
    """
    if not 0 <= short < long:
        raise ValueError(f"short and long must satisfy 0 <= short < long, got short={short}, long={long}")
    steps = _decode_step_after(model, batch_size, short), _decode_step_after(model, batch_size, long)
    return median_added_seconds(*steps, pairs)


def _decode_step_after(model, batch_size, context):
    """A function that runs one decode step (one new token per sequence) after ``context`` cached tokens, as often
    as it is called: caches of zeros marked as filled up to ``context``, reset before every step."""
    caches = model.new_caches(batch_size, context + 1)
    token = torch.zeros(batch_size, 1, dtype=torch.long, device=model.embedding.weight.device)

    def step():
        for cache in caches:
            cache.length = context
        model(token, caches)

    return step


MATRIX_PRODUCTS = ("aten::bmm", "aten::mm", "aten::addmm", "aten::mv", "aten::addmv")  # where the weights are read


@torch.inference_mode()
def profile_decode_step(model, batch_size, context, runs=2) -> dict[str, tuple[float, float]]:
    """Where a decode step's time goes, by operator, from ``torch.profiler``.

    Runs one step to warm up, then ``runs`` steps under the profiler, after ``context`` cached tokens (zeros, as in
    ``decode_step_seconds``). Returns {operator name: (seconds per step spent in the operator itself, not in the
    operators it calls; calls per step)}, the most expensive first. The profiler adds a little time to each call,
    so the shares of the many small operators come out a little larger than they are. ``MATRIX_PRODUCTS`` names
    the operators that multiply by the weights (``torch.bmm`` in a sped-up model, the others in ``nn.Linear``).
    """
    from torch.profiler import ProfilerActivity, profile

    require_positive(runs=runs)
    step = _decode_step_after(model, batch_size, context)
    step()  # warm-up
    with _without_profiler_log(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(runs):
            step()
    ops = {e.key: (e.self_cpu_time_total / 1e6 / runs, e.count / runs) for e in prof.key_averages()}
    return dict(sorted(ops.items(), key=lambda item: -item[1][0]))


@contextlib.contextmanager
def _without_profiler_log():
    """Drop the lines that the profiler's C++ library (libkineto) writes to the process's stderr when it starts and
    stops ("USDT: ... profiler_start"), which a notebook would show under the cell; anything else written to stderr
    meanwhile is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            log.seek(0)
            lines = log.read().decode(errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if not line.startswith(("USDT:", "STAGE:"))]
            if kept:
                sys.stderr.write("".join(kept))


class TokenTimes(list):
    """The times at which new tokens arrive: ``on_token`` for ``generate_greedy``, a streamer for transformers'
    ``generate`` (which calls ``put`` with the prompt, then with each new token)."""

    def __call__(self, *tokens):
        self.append(time.perf_counter())

    put = __call__

    def end(self):
        pass


def decode_tokens_per_s(model, prompt, n_new, runs=3, reference=None) -> float:
    """Decode speed of greedy generation, prompt (1, L0) in: n_new / the time from the first new token (the
    prefill's) to the (n_new + 1)-th, so that the prefill is left out; the best of ``runs`` after a warm-up run.
    With ``reference`` (transformers' model), its ``generate`` is timed instead, forced to make every token
    (``min_new_tokens``), as the package's is (``stop_at_eos=False``)."""
    require_positive(n_new=n_new, runs=runs)
    n = n_new + 1
    seconds = []
    with torch.inference_mode():
        for _ in range(runs + 1):  # the first run warms up
            times = TokenTimes()
            if reference is None:
                generate_greedy(model, prompt, n, stop_at_eos=False, on_token=times)
            else:
                reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, pad_token_id=reference.config.eos_token_id, streamer=times)
            seconds.append(times[-1] - times[-n])
    best = min(seconds[1:])
    if not best > 0:
        raise RuntimeError(f"the clock read {best} s for {n_new} decode steps: time.perf_counter did not advance")
    return n_new / best
