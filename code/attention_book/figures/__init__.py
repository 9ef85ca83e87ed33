"""The book's figures, all in one visual language, each redrawable with the reader's own sizes.

- ``style``: the language itself: a colour per head, a colour family per role, the book's fonts and lines.
- ``blocks``: tensors drawn as blocks in proportion to their shapes.
- ``plotting``: heatmaps of attention weights, masks and head scores.
- ``diagrams``: multi-head attention's flow and shapes, and which query heads share which K/V head.
- One module per diagram: ``sdpa_matrices`` (ch 1), ``head_split`` and ``decoder_block`` (ch 3),
  ``kv_cache_steps`` (ch 6), ``roofline`` (ch 7, 10 and 14), ``gqa_fold`` (ch 8), ``kv_pooling`` (ch 9),
  ``rope_rotation`` (ch 11), ``tiled_loop`` (ch 13), ``latent_attention`` (ch 14), ``ring_cache`` (ch 15).
- Charts of measurements: ``tradeoffs`` (ch 10: cache, step time and quality against g), ``decode_speed`` and
  ``cache_crossover`` (ch 12: tokens/s against the roofline; step time against bytes read, and where the cache costs
  as much as the weights), ``peak_memory`` (ch 13), ``cache_diet`` (ch 15: cache bytes against perplexity).
- Interactive views (``interactive`` is their frame: self-contained HTML with a PNG fallback, no request):
  ``attention_explorer`` (ch 1, 4, 5), ``cache_calculator`` and ``head_sharing_explorer`` (ch 8).

These are the only modules that import matplotlib, so ``import attention_book`` stays light.
"""
