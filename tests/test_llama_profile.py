"""profile_decode_step (chapter 12, sections 5 and 6): where a decode step's time goes, by operator."""
import os
import sys

import pytest
import torch

from attention_book.llama.decoder import LlamaDecoder
from attention_book.llama.loader import LlamaConfig
from attention_book.llama.traffic import MATRIX_PRODUCTS, _without_profiler_log, profile_decode_step


def small_decoder():
    torch.manual_seed(0)
    config = LlamaConfig(n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_head=8, d_ff=48, vocab_size=20,
                         rope_base=100.0, rms_eps=1e-5, context_length=32)
    return LlamaDecoder(config).eval()


@pytest.mark.parametrize("sped_up", [False, True])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_the_profile_names_the_matrix_products_and_counts_calls_per_step(sped_up, batch_size):
    model = small_decoder()
    if sped_up:
        model.speed_up(n_splits=2)
    ops = profile_decode_step(model, batch_size, context=5, runs=3)
    seconds = [s for s, _ in ops.values()]
    assert seconds == sorted(seconds, reverse=True), "the most expensive operator first"
    assert all(s >= 0 for s in seconds) and sum(seconds) > 0
    products = [name for name in ops if name in MATRIX_PRODUCTS]
    assert products, f"no matrix product among {list(ops)[:8]}"
    if sped_up:
        assert ops["aten::bmm"][1] == pytest.approx(2 * 4 + 1)  # per block q/k/v, o, gate_up, down; the output
    # calls are per step, not per run: the final norm's rsqrt runs once per layer norm and step (2 per block + 1)
    assert ops["aten::rsqrt"][1] == pytest.approx(2 * 2 + 1)


def test_the_profile_leaves_the_model_unchanged():
    model = small_decoder()
    before = {name: p.clone() for name, p in model.state_dict().items()}
    profile_decode_step(model, 2, context=4)
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())


def test_the_profiler_s_log_lines_are_dropped_and_other_stderr_output_is_kept(capfd):
    with _without_profiler_log():
        os.write(2, b"USDT:2026-12-01 12:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"STAGE:2026-12-01 12:00:00 1:1 Completed Stage: Warm Up\n")
        os.write(2, b"a real warning\n")
    sys.stderr.flush()
    err = capfd.readouterr().err
    assert "a real warning" in err
    assert "USDT" not in err and "STAGE" not in err


def test_profile_decode_step_refuses_zero_runs():
    with pytest.raises(ValueError, match="runs=0"):
        profile_decode_step(small_decoder(), 1, 2, runs=0)
