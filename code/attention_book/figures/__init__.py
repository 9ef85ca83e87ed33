"""The book's figures: heatmaps of attention (``plotting``) and diagrams of heads and shapes (``diagrams``).

The only modules that import matplotlib, so ``import attention_book`` stays light.
"""
