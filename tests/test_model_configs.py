"""The model table reproduces the cache sizes in the book's facts, and classifies each model correctly."""
from attention_book.experiments.model_configs import MODELS, kv_cache_table


def by_name():
    return {row["model"]: row for row in kv_cache_table(context=4096)}


def test_published_cache_sizes():
    rows = by_name()
    assert rows["Llama 2 7B"]["per_token"] == 524_288 and rows["Llama 2 7B"]["at_context"] == 2 * 2**30
    assert rows["Llama 2 70B"]["per_token"] == 320 * 2**10 and rows["Llama 2 70B"]["at_context"] == 1.25 * 2**30
    assert rows["Llama 2 70B"]["as_mha_at_context"] == 10 * 2**30  # GQA saves 8x
    assert rows["Llama 3 8B"]["at_context"] == rows["Mistral 7B"]["at_context"] == 2**29  # 0.5 GiB


def test_variants_follow_the_kv_heads():
    variants = {m.name: m.variant for m in MODELS}
    assert variants["Llama 2 7B"] == variants["Llama 2 13B"] == "MHA"  # not GQA, whatever tables say
    assert variants["Llama 2 70B"] == variants["Llama 3 8B"] == variants["Mistral 7B"] == "GQA"
    assert variants["PaLM 540B"] == variants["Falcon 7B"] == variants["Gemma 2B"] == "MQA"
    assert all(m.n_heads % m.n_kv_heads == 0 for m in MODELS)


def test_latent_models_reproduce_deepseek_v2s_cache_arithmetic():
    from attention_book.experiments.model_configs import LATENT_MODELS

    models = {m.name: m for m in LATENT_MODELS}
    v2 = models["DeepSeek-V2"]
    assert v2.cache_numbers_per_token_per_layer == 576  # d_c + d_h^R = 512 + 64
    assert v2.as_mha_bytes_per_token(1) == 60 * 32_768  # 2 n_h d_h per layer
    assert round(v2.as_mha_bytes_per_token() / v2.cache_bytes_per_token(), 1) == 56.9
    assert v2.equivalent_gqa_groups == 2.25  # the paper's Table 1
    assert v2.cache_bytes_per_token(2) == 60 * 576 * 2
    assert models["Kimi K2"].n_heads == 64 and models["DeepSeek-V3"].n_layers == 61
    assert all(m.variant == "MLA" for m in LATENT_MODELS)


def test_latent_models_reject_bad_bytes_per_element():
    import pytest

    from attention_book.experiments.model_configs import LATENT_MODELS

    with pytest.raises(ValueError, match="bytes_per_element"):
        LATENT_MODELS[0].cache_bytes_per_token(0)
