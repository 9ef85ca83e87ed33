"""Time one decode step of attention for MHA, GQA and MQA, against the machine's memory bandwidth.

    python benchmarks/decode.py            # a table
    python benchmarks/decode.py --json     # one JSON object per line, for tracking over time
    python benchmarks/decode.py --impl enable_gqa    # PyTorch's SDPA with enable_gqa=True instead

One new token (L = 1 query) of h = 32 query heads of width 128 attends to a cache of S keys and values
held in g K/V heads (fp32, batch 1). Each step must read the whole cache, 2 * g * S * 128 * 4 bytes, so the
fastest a step can be is those bytes divided by the read bandwidth (measured here too, by summing a large
tensor). Every g does the same arithmetic, 4 * h * S * 128 FLOPs, so as g shrinks each byte serves h / g query
heads: MHA is memory-bound, while at small g (MQA) the step can become limited by arithmetic instead.
"""
import argparse
import json

import torch

from attention_book.grouped_sdpa import gqa_by_repeating_kv, gqa_with_enable_gqa, grouped_query_sdpa
from attention_book.experiments.measure import median_seconds, read_bandwidth

IMPLEMENTATIONS = {
    "folded": grouped_query_sdpa,  # the package's: query heads of a group stacked along L
    "enable_gqa": gqa_with_enable_gqa,
    "repeat_interleave": gqa_by_repeating_kv,
}


def main(argv=None):
    """The command line, also callable in-process (tests/test_benchmarks.py): ``argv`` as for the script."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--impl", choices=sorted(IMPLEMENTATIONS), default="folded")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--kv-heads", type=int, nargs="+", default=[32, 8, 4, 1])
    args = parser.parse_args(argv)
    h, d = 32, 128
    attend = IMPLEMENTATIONS[args.impl]
    bandwidth = read_bandwidth()
    if not args.json:
        threads = torch.get_num_threads()
        print(f"read bandwidth (sum of a 512 MiB tensor): {bandwidth / 1e9:.1f} GB/s, {threads} threads")
        print(f"implementation: {args.impl}; h={h}, d_head={d}, fp32, batch 1, one query token")
        print(f"{'S':>6} {'g':>3} {'ms/step':>8} {'GB/s':>6} {'of bandwidth':>12} {'speed-up vs MHA':>16}")
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, h, 1, d, generator=gen)  # (B, h, L = 1, d)
    with torch.no_grad():
        for S in args.lengths:
            mha_seconds = None
            for g in args.kv_heads:
                k = torch.randn(1, g, S, d, generator=gen)  # (B, g, S, d): the cache
                v = torch.randn(1, g, S, d, generator=gen)
                seconds = median_seconds(lambda: attend(q, k, v))
                mha_seconds = seconds if g == h else mha_seconds
                gb_per_s = (k.nbytes + v.nbytes) / seconds / 1e9
                row = {"h": h, "g": g, "S": S, "ms_per_step": round(1e3 * seconds, 4),
                       "gb_per_s": round(gb_per_s, 2), "bandwidth_fraction": round(gb_per_s * 1e9 / bandwidth, 3),
                       "speedup_vs_mha": round(mha_seconds / seconds, 2) if mha_seconds else None}
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    speedup = f"{row['speedup_vs_mha']:.1f}x" if row["speedup_vs_mha"] else "-"
                    print(f"{S:>6} {g:>3} {row['ms_per_step']:>8.3f} {row['gb_per_s']:>6.1f} "
                          f"{row['bandwidth_fraction']:>12.0%} {speedup:>16}", flush=True)


if __name__ == "__main__":
    main()
