"""What the chapters measure with: toy tasks, training, head scores, ablation, timing, model tables, the
experiments of chapters 2 and 9 (with chapter 9's stored results in ``data/``), and claim checks.

Nothing here is attention itself; the attention library is the package's top level.
"""
