"""Chapter 2's one-head-versus-two-heads experiment over several seeds, as the chapter quotes it.

    python scripts/one_vs_two_heads.py                  # seeds 0-9, 800 steps
    python scripts/one_vs_two_heads.py --steps 20000 --seeds 0 1

Prints, per seed, the test accuracy on x[i-1], on x[i-2] and on both, for one head and for two.
"""
import argparse

import torch

from attention_book.experiments.training import train
from attention_book.experiments.two_positions import PreviousTwoModel, previous_two


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    args = parser.parse_args()
    x_test, y_test = previous_two(torch.Generator().manual_seed(10_000), batch_size=4096)
    for seed in args.seeds:
        row = []
        for n_heads in (1, 2):
            torch.manual_seed(seed)
            model = PreviousTwoModel(n_heads)
            train(model, previous_two, steps=args.steps, lr=3e-3, seed=seed, progress=False)
            with torch.no_grad():
                right = model(x_test).argmax(dim=-1) == y_test
            row.append(f"{n_heads} head(s): x[i-1] {right[..., 0].float().mean():.3f}  "
                       f"x[i-2] {right[..., 1].float().mean():.3f}  both {right.all(dim=-1).float().mean():.3f}")
        print(f"seed {seed}:  " + "  |  ".join(row), flush=True)


if __name__ == "__main__":
    main()
