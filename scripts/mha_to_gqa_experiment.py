"""Chapter 9's experiment: convert a trained 8-head MHA model to GQA and MQA, uptrain it, and store the losses.

    python scripts/mha_to_gqa_experiment.py      # seeds 0-4, writes code/attention_book/experiments/data/mha_to_gqa.csv
    python scripts/mha_to_gqa_experiment.py --seeds 0 --out /tmp/seed0.csv

For each seed: pretrain on chapter 4's task for 600 steps, then for n_kv_heads in {8, 4, 2, 1} and K/V
initialisation in {mean, first, random}, measure the probe loss right after conversion and after 30, 60 and 150
steps of uptraining (5, 10 and 25 % of pretraining). Deterministic: one torch thread, every generator seeded.
"""
import argparse
import time

from attention_book.experiments.measure import one_thread
from attention_book.experiments.uptraining import RESULTS, experiment_rows, write_results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    with one_thread():
        for seed in args.seeds:
            seed_rows = experiment_rows(seed)
            rows += seed_rows
            mha = next(r["loss"] for r in seed_rows if r["n_kv_heads"] == 8 and r["init"] == "mean")
            print(f"seed {seed}: pretrained loss {mha:.4f}, {time.perf_counter() - start:.0f} s so far", flush=True)
    write_results(rows, args.out)
    print(f"{len(rows)} rows written to {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
