"""Chapter 9's experiment: train a tiny MHA model, convert it to GQA, uptrain it, and measure its loss.

The model is chapter 4's two-layer, attention-only transformer with 8 heads instead of 4, trained on the same
repeated-sequence task. ``convert_and_uptrain`` converts it with ``convert_to_gqa`` and continues training it
(Ainslie et al. call this uptraining) with the pretraining recipe, measuring the loss on a fixed probe batch at
chosen step counts. Everything is seeded and runs on one CPU thread, so a run repeats exactly on the same
machine and PyTorch version. ``scripts/mha_to_gqa_experiment.py`` runs the whole grid and writes
``data/mha_to_gqa.csv``, which ``load_results`` reads.

On another CPU a run does not repeat exactly: PyTorch and MKL pick other float kernels, which sum in another
order, and hundreds of training steps carry the difference in the last bits into the losses.
``agrees_with_stored`` compares a rerun with the stored results with a tolerance that allows for that.
"""
import csv
import math
from pathlib import Path

import torch

from ..convert import convert_to_gqa
from ..kv_cache import kv_cache_bytes_per_token
from ..tiny_transformer import TinyTransformer, TinyTransformerConfig
from .measure import one_thread
from .tasks import repeated_sequence
from .training import lm_loss, train

CONFIG = TinyTransformerConfig(vocab_size=16, max_len=16, d_model=32, n_layers=2, n_heads=8, mlp=False)
LR = 1e-2  # chapter 4's learning rate, for pretraining and uptraining alike
PRETRAIN_STEPS = 600
UPTRAIN_STEPS = (0, 30, 60, 150)  # 0, 5, 10 and 25 % of the pretraining steps
UPTRAIN_SEED = 1000  # the uptraining batches: the same for every variant
RANDOM_INIT_SEED = 1  # the generator of init="random"
RESULTS = Path(__file__).parent / "data" / "mha_to_gqa.csv"
FIELDS = ("seed", "n_kv_heads", "init", "uptrain_steps", "loss", "kv_bytes_per_token")
# How far a rerun on another CPU may land from the stored results. Rerunning seeds 0-4 with other kernel choices
# (ATEN_CPU_CAPABILITY, MKL_CBWR) moved the losses above 0.1 nats, right after conversion and after 30 steps of
# uptraining, by up to 22 %; the losses below 0.1 nats (the pretrained model's 0.004, say) moved by up to 0.02 nats,
# which can be several times themselves. The tolerance leaves twice that room.
RERUN_RTOL = 0.5
RERUN_ATOL = 0.05  # nats


def task_batch(generator, batch_size=64):
    """Chapter 4's task: filler, a pattern of 3 to 8 distinct tokens, the pattern again. (B, L) tokens, targets."""
    return repeated_sequence(generator, batch_size=batch_size, seq_len=CONFIG.max_len,
                             vocab_size=CONFIG.vocab_size, min_pattern_len=3)


def probe_batch():
    """The fixed batch every loss is measured on: 512 sequences, tokens and targets of shape (512, 16)."""
    return task_batch(torch.Generator().manual_seed(123), batch_size=512)


def probe_loss(model):
    """The cross-entropy of ``model`` on the probe batch, on one thread."""
    with one_thread():
        return lm_loss(model, *probe_batch())


def pretrain(seed, steps=PRETRAIN_STEPS, progress=False):
    """A TinyTransformer(CONFIG) with MHA, initialised with ``torch.manual_seed(seed)`` and trained ``steps`` steps."""
    torch.manual_seed(seed)
    model = TinyTransformer(CONFIG)
    train(model, task_batch, steps, lr=LR, seed=seed, desc="pretraining", progress=progress)
    return model


def cache_bytes_per_token(n_kv_heads, bytes_per_element=4):
    """Bytes of KV cache per token of the experiment's model with n_kv_heads K/V heads (fp32 by default)."""
    return kv_cache_bytes_per_token(CONFIG.n_layers, n_kv_heads, CONFIG.d_model // CONFIG.n_heads, bytes_per_element)


def convert_and_uptrain(model, n_kv_heads, init, checkpoints=UPTRAIN_STEPS):
    """Convert ``model`` to ``n_kv_heads`` K/V heads, uptrain it, and return {steps: probe loss} at ``checkpoints``.

    The loss at 0 steps is the loss right after conversion. One run of max(checkpoints) steps gives every
    checkpoint: the learning rate is constant, so the loss after 30 steps of a 150-step run is the loss of a
    30-step run. ``model`` is left untouched.
    """
    converted = convert_to_gqa(model, n_kv_heads, init, torch.Generator().manual_seed(RANDOM_INIT_SEED))
    tokens, targets = probe_batch()
    losses = {}

    def measure(step):
        if step in checkpoints:
            losses[step] = lm_loss(converted, tokens, targets)

    every = math.gcd(*checkpoints) or 1
    train(converted, task_batch, max(checkpoints), lr=LR, seed=UPTRAIN_SEED, desc="uptraining", progress=False,
          callback=measure, every=every)
    return losses


def experiment_rows(seed, n_kv_heads=(8, 4, 2, 1), inits=("mean", "first", "random"), checkpoints=UPTRAIN_STEPS):
    """Pretrain one model with ``seed``, then convert and uptrain it for each n_kv_heads and init: a list of dicts
    with the keys of FIELDS, losses rounded to 6 decimals. A row with n_kv_heads = 8 and 0 steps is the MHA model."""
    model = pretrain(seed)
    rows = []
    for g in n_kv_heads:
        for init in inits:
            for steps, loss in sorted(convert_and_uptrain(model, g, init, checkpoints).items()):
                rows.append({"seed": seed, "n_kv_heads": g, "init": init, "uptrain_steps": steps,
                             "loss": round(loss, 6), "kv_bytes_per_token": cache_bytes_per_token(g)})
    return rows


def load_results(path=RESULTS):
    """The stored results as a list of dicts (the keys of FIELDS), numbers as int or float."""
    with open(path, newline="") as f:
        return [{"seed": int(r["seed"]), "n_kv_heads": int(r["n_kv_heads"]), "init": r["init"],
                 "uptrain_steps": int(r["uptrain_steps"]), "loss": float(r["loss"]),
                 "kv_bytes_per_token": int(r["kv_bytes_per_token"])} for r in csv.DictReader(f)]


def agrees_with_stored(loss, stored_loss):
    """Whether a rerun's ``loss`` matches ``stored_loss`` up to another CPU's rounding: within RERUN_RTOL of it
    (relative), or within RERUN_ATOL nats, whichever is looser."""
    return math.isclose(loss, stored_loss, rel_tol=RERUN_RTOL, abs_tol=RERUN_ATOL)


def write_results(rows, path=RESULTS):
    """Write rows (dicts with the keys of FIELDS) as CSV."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
