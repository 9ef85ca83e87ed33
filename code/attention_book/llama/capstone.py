"""What chapter 16 hands the learner: a ``LlamaDecoder``'s weights as plain tensors, layer by layer.

The learner writes the decoder's pieces as functions of tensors; ``decoder_weights`` gives them the weights of a
loaded model (SmolLM2-135M-Instruct's, from ``load_llama``) in the form those functions take. Every tensor is a view
of the model's own storage, detached from autograd: no weight is copied.

Shape letters: V vocabulary size, h query heads, g K/V heads, d_ff the MLP's width.
"""
from dataclasses import dataclass

import torch

from .decoder import LlamaDecoder
from .loader import LlamaConfig


@dataclass
class LayerWeights:
    """One decoder block's weights, each (out, in) as ``nn.Linear`` stores it."""

    attention_norm: torch.Tensor  # (d_model,): RMSNorm's weight before attention
    w_q: torch.Tensor  # (h d_head, d_model), rows in RoPE's "halves" layout
    w_k: torch.Tensor  # (g d_head, d_model), rows in RoPE's "halves" layout
    w_v: torch.Tensor  # (g d_head, d_model)
    w_o: torch.Tensor  # (d_model, h d_head)
    mlp_norm: torch.Tensor  # (d_model,): RMSNorm's weight before the MLP
    w_gate: torch.Tensor  # (d_ff, d_model)
    w_up: torch.Tensor  # (d_ff, d_model)
    w_down: torch.Tensor  # (d_model, d_ff)


@dataclass
class DecoderWeights:
    """A whole decoder's weights: the token embedding (also the output projection: tied), the blocks', and the
    final RMSNorm's; ``config`` holds its sizes (n_heads, n_kv_heads, d_head, rope_base, rms_eps, eos_id, ...)."""

    config: LlamaConfig
    embedding: torch.Tensor  # (V, d_model)
    layers: list[LayerWeights]
    norm: torch.Tensor  # (d_model,)

    def nbytes(self) -> int:
        """Bytes of the distinct storages the weights are views of (the model's, counted once)."""
        tensors = [self.embedding, self.norm] + [t for layer in self.layers for t in vars(layer).values()]
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def decoder_weights(model: LlamaDecoder) -> DecoderWeights:
    """The weights of a ``LlamaDecoder`` built with layout "halves" and ``nn.Linear`` layers (``load_llama(path)``,
    not ``fast=True``, and no cross-layer sharing), as views of its own tensors, detached."""
    if model.rope.layout != "halves":
        raise ValueError("decoder_weights needs a model with layout='halves': the learner's RoPE rotates halves")
    if model.kv_share != 1 or any(layer.attention.qkv_proj is not None for layer in model.layers):
        raise ValueError("decoder_weights needs a plain model: load_llama(path), not sped up, with no shared K/V")
    d_ff = model.config.d_ff
    layers = []
    for block in model.layers:
        attention, gate_up = block.attention, block.mlp.gate_up.weight.detach()  # gate_up: (2 d_ff, d_model)
        layers.append(LayerWeights(
            attention_norm=block.attention_norm.weight.detach(),
            w_q=attention.q_proj.weight.detach(), w_k=attention.k_proj.weight.detach(),
            w_v=attention.v_proj.weight.detach(), w_o=attention.o_proj.weight.detach(),
            mlp_norm=block.mlp_norm.weight.detach(),
            w_gate=gate_up[:d_ff], w_up=gate_up[d_ff:], w_down=block.mlp.down.weight.detach()))
    return DecoderWeights(model.config, model.embedding.weight.detach(), layers, model.norm.weight.detach())
