"""Time a causal forward pass (training, or a prompt's prefill) of the book's layer, with and without a mask tensor.

    python benchmarks/prefill.py            # a table
    python benchmarks/prefill.py --json     # one JSON object per line

With L == S, no cache and no user mask, ``GroupedQueryAttention(..., is_causal=True)`` builds no mask: it passes
``is_causal=True`` to PyTorch, whose fused kernel then skips the blocks above the diagonal. The same layer given
the mask explicitly (``mask=causal_mask(L)``) computes the same output from a dense (L, L) boolean mask. The ratio
is measured here, in one run, on this machine; nothing is asserted about it.
"""
import argparse
import json

import torch

from attention_book import GroupedQueryAttention, causal_mask
from attention_book.experiments.measure import median_seconds


def main(argv=None):
    """The command line, also callable in-process (tests/test_benchmarks.py): ``argv`` as for the script."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--kv-heads", type=int, nargs="+", default=[8, 2])
    args = parser.parse_args(argv)
    d_model, h = 512, 8
    if not args.json:
        print(f"d_model={d_model}, h={h}, batch 1, fp32, {torch.get_num_threads()} threads")
        print(f"{'L':>6} {'g':>3} {'is_causal ms':>13} {'mask ms':>9} {'speed-up':>9}")
    torch.manual_seed(0)
    with torch.no_grad():
        for g in args.kv_heads:
            layer = GroupedQueryAttention(d_model, h, g)
            for L in args.lengths:
                x, mask = torch.randn(1, L, d_model), causal_mask(L)
                fast = median_seconds(lambda: layer(x, is_causal=True), min_total=0.2)
                masked = median_seconds(lambda: layer(x, mask=mask), min_total=0.2)
                row = {"d_model": d_model, "h": h, "g": g, "L": L, "is_causal_ms": round(1e3 * fast, 4),
                       "mask_ms": round(1e3 * masked, 4), "speedup": round(masked / fast, 3)}
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    print(f"{L:>6} {g:>3} {row['is_causal_ms']:>13.3f} {row['mask_ms']:>9.3f} {row['speedup']:>8.2f}x")


if __name__ == "__main__":
    main()
