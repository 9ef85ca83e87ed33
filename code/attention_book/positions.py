"""Position information: the sinusoidal encoding of the original Transformer."""
import math

import torch

from .validation import require_positive


def sinusoidal_positions(L, d_model):
    """Sinusoidal position encodings, shape (L, d_model) (Vaswani et al. 2017, section 3.5).

    Position p gets sin(p / 10000^(2i / d_model)) in column 2i and cos of the same angle in
    column 2i + 1, so each pair of columns is a clock turning at its own speed.
    """
    require_positive(L=L, d_model=d_model)
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even: the encoding pairs a sine with a cosine")
    positions = torch.arange(L, dtype=torch.float32)[:, None]  # (L, 1)
    rates = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)  # (d_model / 2,)
    angles = positions * rates  # (L, d_model / 2)
    encoding = torch.zeros(L, d_model)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles)
    return encoding
