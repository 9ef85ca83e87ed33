"""What the attention-layer tests share (test_attention_layer.py, test_multi_head_attention.py): a layer's
configuration and inputs, the tolerances, Hypothesis examples, and the mask a layer should build."""
from dataclasses import dataclass

import torch
from hypothesis import example

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10)}
MASK_SHAPES = {  # the mask forms a layer accepts, by name: (B, h, L, S) -> the mask's shape, or None
    "none": lambda B, h, L, S: None,
    "L,S": lambda B, h, L, S: (L, S),
    "B,L,S": lambda B, h, L, S: (B, L, S),
    "1,L,S": lambda B, h, L, S: (1, L, S),
    "B,1,L,S": lambda B, h, L, S: (B, 1, L, S),
    "B,h,L,S": lambda B, h, L, S: (B, h, L, S),
}


@dataclass(frozen=True)
class LayerConfig:
    B: int
    L: int
    S: int  # key length; equals L for self-attention
    n_heads: int
    d_model: int
    d_head: int | None  # None: the layer's default d_model // n_heads
    bias: bool
    cross: bool  # cross-attention (kv given) or self-attention (kv = x)
    mask_kind: str
    is_causal: bool
    dtype: torch.dtype
    seed: int
    n_kv_heads: int | None = None  # None: one K/V head per query head (MHA)

    @property
    def head_size(self):
        return self.d_model // self.n_heads if self.d_head is None else self.d_head

    @property
    def has_torch_counterpart(self):
        """nn.MultiheadAttention needs n_heads * d_head == d_model."""
        return self.d_head is None or self.n_heads * self.d_head == self.d_model

    def build_with(self, make_layer, open_key_0=False):
        """The layer ``make_layer(self)``, x (B, L, d_model), kv (B, S, d_model; None for self-attention) and the
        caller's mask (None or boolean, True = may attend), all from this configuration's seed.

        open_key_0: let every query attend to key 0, for nn.MultiheadAttention (NaN for a query with no key).
        """
        torch.manual_seed(self.seed)
        layer = make_layer(self).to(self.dtype)
        x = torch.randn(self.B, self.L, self.d_model, dtype=self.dtype)
        kv = torch.randn(self.B, self.S, self.d_model, dtype=self.dtype) if self.cross else None
        shape = MASK_SHAPES[self.mask_kind](self.B, self.n_heads, self.L, self.S)
        mask = None if shape is None else torch.rand(shape) < 0.7
        if mask is not None and open_key_0:
            mask[..., 0] = True
        return layer, x, kv, mask


def with_examples(test, examples, keep=lambda config: True, **fixed):
    """Add the ``examples`` that ``keep`` accepts to a Hypothesis test, with its other arguments ``fixed``."""
    for config in examples:
        if keep(config):
            test = example(config=config, **fixed)(test)
    return test


def full_mask(config, mask):
    """The mask the layer should use, built by hand: (B or 1, h or 1, L, S), or None."""
    if mask is not None and mask.dim() == 3:
        mask = mask[:, None]
    if config.is_causal:
        causal = torch.ones(config.L, config.S, dtype=torch.bool).tril(config.S - config.L)  # bottom-right
        mask = causal if mask is None else mask & causal
    return mask
