"""The cache diet's edges: the cache policies build their caches on the model's device, ``int8_decode_attention``
refuses tensors its CPU op cannot read, and ``token_losses`` refuses a text longer than the model's context."""
import pytest
import torch

from attention_book.cache_diet import (Int8KVCache, int8_caches, int8_decode_attention, local_global_caches,
                                       ring_caches)
from attention_book.llama.decoder import LlamaDecoder
from attention_book.llama.loader import LlamaConfig
from attention_book.llama.variants import token_losses

TINY = LlamaConfig(n_layers=3, d_model=32, n_heads=4, n_kv_heads=2, d_head=8, d_ff=48, vocab_size=50,
                   rope_base=10_000.0, rms_eps=1e-5, context_length=16)


@pytest.mark.parametrize("policy", [lambda model: ring_caches(model, 4, n_sinks=1),
                                    lambda model: local_global_caches(model, 4, local_per_global=1),
                                    lambda model: int8_caches(model, group_size=4)],
                         ids=["ring", "local_global", "int8"])
def test_policies_build_their_caches_on_the_models_device(policy):
    model = LlamaDecoder(TINY).to("meta")
    caches = policy(model)(1, 8)
    buffers = [t for cache in caches for t in vars(cache).values() if isinstance(t, torch.Tensor)]
    assert buffers and {t.device.type for t in buffers} == {"meta"}


def test_int8_decode_attention_refuses_tensors_off_the_cpu():
    cache = Int8KVCache(1, 1, 4, 2, device="meta")
    cache.length = 1  # as after an append, which a "meta" cache cannot run (it reads the values)
    with pytest.raises(ValueError, match="must be on the CPU, got meta and meta"):
        int8_decode_attention(torch.zeros(1, 2, 1, 4, device="meta"), cache)


def test_token_losses_refuses_a_text_longer_than_the_context_even_through_a_ring():
    torch.manual_seed(0)
    model, ids = LlamaDecoder(TINY).eval(), torch.randint(0, 50, (17,))
    assert token_losses(model, ids[:16], new_caches=ring_caches(model, 4)).shape == (15,)
    with pytest.raises(ValueError, match="ids holds N=17 tokens, more than the model's context length 16"):
        token_losses(model, ids, new_caches=ring_caches(model, 4))
