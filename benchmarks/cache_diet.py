"""Chapter 15's cache diet on SmolLM2-135M over the whole held-out text: perplexity and cache bytes per policy.

    python benchmarks/cache_diet.py                    # all 6,303 tokens, a window of 1,024 (about 2 minutes)
    python benchmarks/cache_diet.py --tokens 2048 --window 512
    python benchmarks/cache_diet.py --json             # one JSON object per line, for tracking over time

Each policy predicts every token of the text through its own caches (``llama.variants.token_losses``, in chunks
of 512), and reports the perplexity over all the predictions, over those made at the first ``window`` positions
and over those past them, with the fp32 caches that the policy allocates for one sequence of the text's length
and of 8,192 tokens (SmolLM2's context), which match chapter 15's arithmetic. Chapter 15 runs the same policies
on the first 1,024 tokens only, to stay within its run time.
"""
import argparse
import json
import time

import torch

from attention_book.cache_diet import int8_caches, local_global_caches, ring_caches
from attention_book.llama.decoder import load_llama
from attention_book.llama.reference import load_tokenizer
from attention_book.llama.texts import long_heldout_text
from attention_book.llama.variants import token_losses


def cache_mib(new_caches, context):
    """MiB that a policy's caches allocate for one sequence of ``context`` tokens: the sum of their ``nbytes``,
    measured on the caches themselves (a ring allocates its n_sinks + window slots whatever the context)."""
    return sum(cache.nbytes for cache in new_caches(1, context)) / 2**20


def main(argv=None, model=None, tokenizer=None):
    """The command line, also callable in-process (tests/test_benchmarks.py) with SmolLM2 already loaded: ``model``
    the sped-up decoder (``load_llama(fast=True)``), ``tokenizer`` transformers'."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=None, help="score the first N tokens (default: all)")
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    model = load_llama(fast=True) if model is None else model
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    ids = tokenizer(long_heldout_text(), return_tensors="pt")["input_ids"][:, :args.tokens]
    N, W = ids.shape[1], args.window
    if not 2 <= W < N:
        parser.error(f"--window={W} must be at least 2 and less than the {N:,} tokens scored")
    policies = {"full": model.new_caches, "window": ring_caches(model, W),
                "window + 4 sinks": ring_caches(model, W, n_sinks=4),
                "local/global": local_global_caches(model, W, local_per_global=5, n_sinks=4),
                "int8": int8_caches(model, group_size=128)}
    if not args.json:
        print(f"SmolLM2-135M, {N:,} tokens of the held-out text, window {W:,}, {torch.get_num_threads()} threads")
        print(f"{'policy':>17} {'all':>8} {'first W':>8} {'past W':>8} {'MiB at N':>9} {'MiB at 8K':>9} {'s':>6}")
    for name, new_caches in policies.items():
        start = time.perf_counter()
        losses = token_losses(model, ids, chunk=512, new_caches=new_caches)  # (N - 1,)
        row = {"policy": name, "tokens": N, "window": W, "all": losses.mean().exp().item(),
               "first_window": losses[:W].mean().exp().item(), "past_window": losses[W:].mean().exp().item(),
               "cache_mib_at_n": cache_mib(new_caches, N), "cache_mib_at_8192": cache_mib(new_caches, 8192),
               "seconds": time.perf_counter() - start}
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{name:>17} {row['all']:8.2f} {row['first_window']:8.2f} {row['past_window']:8.2f} "
                  f"{row['cache_mib_at_n']:9.1f} {row['cache_mib_at_8192']:9.1f} {row['seconds']:6.1f}")


if __name__ == "__main__":
    main()
