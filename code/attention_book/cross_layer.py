"""Cross-layer K/V sharing (CLA; Brandon et al. 2024): consecutive layers share one set of keys and values.

One rule, for the tiny model (chapter 15's experiment) and the Llama decoder (chapter 15's SmolLM2) alike: the
layers form consecutive groups of ``share`` (a last group may be shorter); the first layer of a group makes the
keys and values from its own input and appends them to the group's cache, and every layer of the group attends to
them with its own queries. Only the first layer of a group has k_proj and v_proj (``GroupedQueryAttention(...,
makes_kv=False)`` for the others), and the model caches one K/V per group: 1 / share of the bytes. ``share=1``
shares nothing.

``run_layers`` is the loop both models run. Each of their blocks offers ``keys_values(x, cache)`` (its attention's
keys and values for the block's input) and takes ``shared_kv`` (those keys and values) in its forward.
"""
from .validation import require_positive


def shared_kv_owners(n_layers, share=2):
    """For each layer, the layer whose keys and values it uses: i - i % share. Layer i makes its own K/V iff
    owners[i] == i, and its group's cache is cache i // share."""
    require_positive(n_layers=n_layers, share=share)
    return [i - i % share for i in range(n_layers)]


def run_layers(blocks, x, caches, share, run):
    """x through ``blocks``, each group of ``share`` consecutive blocks sharing the first one's keys and values.

    Args:
        blocks: the model's blocks, each with ``keys_values(x, cache)`` (used when share > 1).
        x: the first block's input, shape (B, L, d_model).
        caches: None, or one cache per group of blocks (cache i // share for block i).
        share: the group size; 1 shares nothing (every block makes its K/V as usual, shared_kv is None).
        run: ``run(i, block, x, cache, shared_kv)`` calls block i and returns its output x (B, L, d_model).

    Returns:
        the last block's output, shape (B, L, d_model).
    """
    shared_kv = None  # with share > 1: the current group's keys and values, (k, v) each (B, g, S, d_head)
    for i, block in enumerate(blocks):
        cache = None if caches is None else caches[i // share]
        if share > 1 and i % share == 0:  # the group's first block makes them, and appends them to the cache
            shared_kv = block.keys_values(x, cache)
        x = run(i, block, x, cache, shared_kv)
    return x
