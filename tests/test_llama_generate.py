"""Greedy generation and the decode timings on a tiny random LlamaDecoder (no weights file): the tensors they make
live on the model's device, and a decode speed is a positive rate whatever the clock reads."""
import itertools
import time
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from attention_book.llama.decoder import LlamaDecoder
from attention_book.llama.generate import generate_greedy
from attention_book.llama.loader import LlamaConfig
from attention_book.llama import traffic
from attention_book.llama.traffic import decode_step_seconds, decode_step_seconds_added, decode_tokens_per_s

TINY = LlamaConfig(n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_head=8, d_ff=48, vocab_size=50,
                   rope_base=10_000.0, rms_eps=1e-5, context_length=64, eos_id=2)


class MetaModel(nn.Module):
    """Stands for a model on another device: its weights and logits live on "meta", which refuses nothing but
    records where ids come from. (``LlamaDecoder`` itself cannot make caches on "meta".)"""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(eos_id=2, context_length=64)
        self.embedding = nn.Embedding(TINY.vocab_size, 4, device="meta")
        self.ids_devices = set()

    def new_caches(self, batch_size, max_len):
        return [SimpleNamespace(length=0)]

    def forward(self, ids, caches=None, last_only=False):
        self.ids_devices.add(ids.device.type)
        return torch.zeros(ids.shape[0], 1 if last_only else ids.shape[1], TINY.vocab_size, device="meta")


def test_generate_greedy_makes_its_tensors_on_the_prompts_device():
    model = MetaModel()
    out = generate_greedy(model, torch.zeros(1, 3, dtype=torch.long, device="meta"), 4, stop_at_eos=False)
    assert out.device.type == "meta" and out.shape == (1, 7) and model.ids_devices == {"meta"}


def test_decode_step_seconds_feeds_ids_on_the_models_device():
    model = MetaModel()
    decode_step_seconds(model, 2, 8, runs=1)
    assert model.ids_devices == {"meta"}


def test_decode_tokens_per_s_is_a_positive_rate_whatever_the_clock(monkeypatch):
    torch.manual_seed(0)
    model, prompt = LlamaDecoder(TINY).eval(), torch.tensor([[1, 5, 7]])
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))  # one tick per new token
    assert decode_tokens_per_s(model, prompt, 4, runs=2) == 1.0
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    with pytest.raises(RuntimeError, match="did not advance"):
        decode_tokens_per_s(model, prompt, 4, runs=2)
    with pytest.raises(ValueError, match="n_new=0"):
        decode_tokens_per_s(model, prompt, 0)


def test_decode_step_seconds_added_is_the_median_of_paired_differences(monkeypatch):
    clock = [0.0]
    # the long step takes 3 ticks more than the short one, except in one pair, where another program held the core
    # during the short step: a difference of two separate best times could not tell; the median of pairs ignores it
    extra = iter([0.0, 0.0] + [0.0] * 4 + [50.0] + [0.0] * 4)  # warm-ups, then the short steps' delays in turn

    def step_after(model, batch_size, context):
        def step():
            clock[0] += (1.0 if context == 8 else 4.0) + (next(extra) if context == 8 else 0.0)
        return step
    monkeypatch.setattr(traffic, "_decode_step_after", step_after)
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    assert decode_step_seconds_added(None, 1, 8, 64, pairs=9) == 3.0
    with pytest.raises(ValueError, match="short=64, long=8"):
        decode_step_seconds_added(None, 1, 64, 8)
    with pytest.raises(ValueError, match="pairs=0"):
        decode_step_seconds_added(None, 1, 8, 64, pairs=0)
