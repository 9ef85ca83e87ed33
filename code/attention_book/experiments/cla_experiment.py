"""Cross-layer K/V sharing on chapter 4's tiny model: trained with it from the start, or imposed on a trained model.

Cross-layer attention (CLA, Brandon et al. 2024) lets adjacent layers share one set of keys and values, which halves
the KV cache for pairs of layers. ``cross_layer_experiment`` trains chapter 4's two-layer, attention-only model on
chapter 4's repeated-sequence task twice, with the same seed, steps and batches: once with every layer making its
own K/V, once with ``kv_share=2`` (layer 1 attends to layer 0's keys and values), and, for the same cache size
as sharing, once with grouped-query attention (half as many K/V heads, chapter 8). Then it converts the first model
with ``share_kv`` (layer 2i + 1 reads layer 2i's K/V, with no training), which shows the damage of sharing that the
model was not trained for, and retrains the converted model for a few steps, as chapter 9 uptrains a converted GQA
model. Everything runs on one CPU thread and is seeded; losses are measured on one fixed probe batch.
"""
import dataclasses
import time

import torch

from ..kv_cache import kv_cache_bytes_per_token
from ..tiny_transformer import TinyTransformer, TinyTransformerConfig
from .measure import one_thread
from .tasks import IGNORE_INDEX
from .training import lm_loss, train
from .uptraining import probe_batch, task_batch  # chapter 4's task, and chapter 9's probe batch of 512 sequences

CONFIG = TinyTransformerConfig(vocab_size=16, max_len=16, d_model=32, n_layers=2, n_heads=4, mlp=False)  # chapter 4's
LR = 1e-2  # chapter 4's learning rate
STEPS = 400  # chapter 4's training steps
RETRAIN_STEPS = 100  # 25 % of the training steps
RETRAIN_SEED = 1000  # the retraining batches, other than the training ones
VARIANTS = ("separate", "shared", "gqa", "converted", "retrained")
KEYS = ("loss", "accuracy", "parameters", "kv_bytes_per_token", "train_seconds")


@torch.no_grad()
def probe_accuracy(model, tokens, targets):
    """Fraction of the predictable positions (targets != IGNORE_INDEX) whose most likely next token is right."""
    predicted = model(tokens).argmax(dim=-1)  # (B, L)
    scored = targets != IGNORE_INDEX  # (B, L)
    return (predicted[scored] == targets[scored]).float().mean().item()


def config_kv_bytes_per_token(config, bytes_per_element=4):
    """Bytes of KV cache one token takes in a model with ``config`` (fp32 by default): only the layers that make
    keys and values (config.kv_layers) cache them."""
    n_kv_heads = config.n_kv_heads or config.n_heads
    return kv_cache_bytes_per_token(config.kv_layers, n_kv_heads, config.d_model // config.n_heads, bytes_per_element)


def share_kv(model, kv_share=2):
    """A copy of TinyTransformer ``model`` whose layers share keys and values in groups of ``kv_share``, no training.

    Layer l of a group attends to the keys and values of the group's first layer (layer kv_share * (l // kv_share));
    its own k/v projections are dropped, every other weight is copied. ``model`` is left untouched.
    """
    if model.config.kv_share not in (None, 1):
        raise ValueError(f"model already shares K/V (kv_share={model.config.kv_share}); convert an unshared model")
    shared = TinyTransformer(dataclasses.replace(model.config, kv_share=kv_share))
    wanted = shared.state_dict()
    shared.load_state_dict({name: value for name, value in model.state_dict().items() if name in wanted})
    return shared.eval()


def _measure(model, train_seconds, probe):
    with one_thread():
        return {"loss": lm_loss(model, *probe), "accuracy": probe_accuracy(model, *probe),
                "parameters": sum(p.numel() for p in model.parameters()),
                "kv_bytes_per_token": config_kv_bytes_per_token(model.config), "train_seconds": train_seconds}


def _train_timed(model, steps, seed):
    start = time.perf_counter()
    train(model, task_batch, steps, lr=LR, seed=seed, progress=False)
    return time.perf_counter() - start


def cross_layer_experiment(seed=0, steps=STEPS, retrain_steps=RETRAIN_STEPS, kv_share=2):
    """Train, share and retrain chapter 4's model; return {variant: {key: value}} for the VARIANTS and KEYS.

    Variants:
        "separate": every layer makes its own K/V; trained ``steps`` steps.
        "shared": ``kv_share`` layers share one K/V, trained from the start, with the same seed (so the same
            initial weights, less the dropped k/v projections), the same batches and steps.
        "gqa": no sharing, but n_heads // kv_share K/V heads per layer: the same cache bytes as "shared", the
            same seed, batches and steps.
        "converted": "separate" converted with ``share_kv``, no training: the damage of untrained sharing.
        "retrained": "converted" trained ``retrain_steps`` more steps on other batches (train_seconds: those).
    Keys: "loss" (cross-entropy in nats) and "accuracy" (of the next token where it is predictable) on the probe
    batch; "parameters"; "kv_bytes_per_token" (fp32); "train_seconds" (wall time of the training, on one thread).
    """
    probe = probe_batch()
    results = {}
    torch.manual_seed(seed)
    separate = TinyTransformer(CONFIG)
    results["separate"] = _measure(separate, _train_timed(separate, steps, seed), probe)
    torch.manual_seed(seed)
    shared = TinyTransformer(dataclasses.replace(CONFIG, kv_share=kv_share))
    results["shared"] = _measure(shared, _train_timed(shared, steps, seed), probe)
    torch.manual_seed(seed)
    gqa = TinyTransformer(dataclasses.replace(CONFIG, n_kv_heads=CONFIG.n_heads // kv_share))
    results["gqa"] = _measure(gqa, _train_timed(gqa, steps, seed), probe)
    converted = share_kv(separate, kv_share)
    results["converted"] = _measure(converted, 0.0, probe)
    results["retrained"] = _measure(converted, _train_timed(converted, retrain_steps, RETRAIN_SEED), probe)
    return results
