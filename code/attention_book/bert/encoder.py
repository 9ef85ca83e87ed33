"""A BERT-style encoder built from the book's ``GroupedQueryAttention``, able to run a pretrained model's weights.

Embeddings (token + position + segment, then LayerNorm), then post-norm layers as in BERT:
``x = LayerNorm(x + attention(x))``, then ``x = LayerNorm(x + mlp(x))``. A sentence's embedding is the mean of its
last hidden states over its real (non-padding) tokens, scaled to length 1, as all-MiniLM-L6-v2 does.
Because the attention is a ``GroupedQueryAttention``, ``attention_book.convert.convert_to_gqa`` works on it.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..attention_layer import GroupedQueryAttention
from ..validation import require_rank
from .loader import BertConfig, read_tokenizer, read_weights


class EncoderOutput(NamedTuple):
    """hidden_states: (n_layers + 1, B, L, d_model), the embeddings' output then each layer's.
    attention_weights: (n_layers, B, h, L, L), or None unless asked for."""

    hidden_states: torch.Tensor
    attention_weights: torch.Tensor | None


class BertLayer(nn.Module):
    """One post-norm encoder layer: attention, add and normalise; MLP, add and normalise."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = GroupedQueryAttention(config.d_model, config.n_heads, config.n_kv_heads)
        self.attention_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_ff), nn.GELU(),
                                 nn.Linear(config.d_ff, config.d_model))
        self.mlp_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, x, mask, need_weights=False):
        """x: (B, L, d_model); mask: boolean (B, 1, 1, L), True = may attend. Returns x and weights (B, h, L, L)."""
        attended, weights = self.attention(x, mask=mask, need_weights=need_weights)
        x = self.attention_norm(x + attended)
        return self.mlp_norm(x + self.mlp(x)), weights


class BertEncoder(nn.Module):
    """Embeddings and ``config.n_layers`` ``BertLayer``s. No pooler, no task head."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_len, config.d_model)
        self.segment_embedding = nn.Embedding(config.type_vocab_size, config.d_model)
        self.embedding_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.n_layers))

    def forward(self, ids, is_real=None, need_weights=False) -> EncoderOutput:
        """ids: token ids (B, L); is_real: boolean (B, L), True = a real token (default: all real).

        Every sentence is segment 0. Padding keys are masked out; padding queries still get (unused) outputs.
        """
        require_rank("ids", ids, 2, "B, L")
        B, L = ids.shape
        if L > self.config.max_len:
            raise ValueError(f"ids has L={L} tokens, more than max_len={self.config.max_len}")
        if is_real is not None and is_real.shape != ids.shape:
            raise ValueError(f"is_real must have the shape of ids {tuple(ids.shape)}, got {tuple(is_real.shape)}")
        positions = torch.arange(L, device=ids.device)
        segments = torch.zeros_like(ids)
        x = self.token_embedding(ids) + self.position_embedding(positions) + self.segment_embedding(segments)
        x = self.embedding_norm(x)  # (B, L, d_model)
        mask = None if is_real is None else is_real[:, None, None, :]  # (B, 1, 1, L): keys that may be attended to
        hidden, weights = [x], []
        for layer in self.layers:
            x, w = layer(x, mask, need_weights)
            hidden.append(x)
            weights.append(w)
        return EncoderOutput(torch.stack(hidden), torch.stack(weights) if need_weights else None)


def mean_pool(hidden, is_real):
    """Mean of each sentence's hidden states over its real tokens: (B, L, d_model), (B, L) -> (B, d_model)."""
    require_rank("hidden", hidden, 3, "B, L, d_model")
    if is_real.shape != hidden.shape[:2]:
        raise ValueError(f"is_real must have shape (B, L) = {tuple(hidden.shape[:2])}, got {tuple(is_real.shape)}")
    keep = is_real.to(hidden.dtype)[..., None]  # (B, L, 1): 1 for a real token, 0 for padding
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1e-9)


@torch.no_grad()
def sentence_embeddings(encoder, ids, is_real):
    """Unit-length sentence embeddings, shape (B, d_model): mean pooling of the last layer, then L2 normalising."""
    last = encoder(ids, is_real).hidden_states[-1]  # (B, L, d_model)
    return F.normalize(mean_pool(last, is_real), p=2, dim=-1)


def hf_names(n_layers) -> dict[str, str]:
    """Each parameter of ``BertEncoder`` -> the name of the same tensor in a Hugging Face BERT checkpoint."""
    names = {"token_embedding.weight": "embeddings.word_embeddings.weight",
             "position_embedding.weight": "embeddings.position_embeddings.weight",
             "segment_embedding.weight": "embeddings.token_type_embeddings.weight",
             "embedding_norm.weight": "embeddings.LayerNorm.weight",
             "embedding_norm.bias": "embeddings.LayerNorm.bias"}
    ours_to_theirs = {"attention.q_proj": "attention.self.query", "attention.k_proj": "attention.self.key",
                      "attention.v_proj": "attention.self.value", "attention.o_proj": "attention.output.dense",
                      "attention_norm": "attention.output.LayerNorm", "mlp.0": "intermediate.dense",
                      "mlp.2": "output.dense", "mlp_norm": "output.LayerNorm"}
    for i in range(n_layers):
        for ours, theirs in ours_to_theirs.items():
            for p in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
    return names


def load_hf_weights(encoder, weights):
    """Copy a Hugging Face BERT checkpoint's tensors (a dict name -> tensor) into ``encoder``.

    Names may carry a ``bert.`` prefix. A missing tensor or one of the wrong shape raises ValueError naming it.
    """
    weights = {name.removeprefix("bert."): t for name, t in weights.items()}
    state = {}
    for ours, theirs in hf_names(encoder.config.n_layers).items():
        if theirs not in weights:
            raise ValueError(f"the checkpoint has no tensor {theirs!r} (needed for {ours})")
        expected = encoder.get_parameter(ours).shape
        if weights[theirs].shape != expected:
            raise ValueError(f"tensor {theirs!r} has shape {tuple(weights[theirs].shape)}, but the config asks "
                             f"for {tuple(expected)}")
        state[ours] = weights[theirs]
    encoder.load_state_dict(state)
    return encoder


def load_bert(folder):
    """A ``BertEncoder`` (in eval mode) with the weights of ``folder``, and the folder's tokenizer."""
    from .loader import check_folder

    folder = check_folder(folder)
    encoder = BertEncoder(BertConfig.from_json(folder / "config.json"))
    load_hf_weights(encoder, read_weights(folder))
    return encoder.eval(), read_tokenizer(folder)
