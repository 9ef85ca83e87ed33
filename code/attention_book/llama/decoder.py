"""A Llama-style decoder built from the book's ``GroupedQueryAttention`` (with RoPE) and ``KVCache``.

Pre-norm blocks, as in Llama: ``x = x + attention(RMSNorm(x))``, then ``x = x + SwiGLU(RMSNorm(x))``; a final RMSNorm;
and the logits are the hidden states times the token embedding (tied input and output embeddings).
``load_llama`` fills it with the weights of a GGUF file, SmolLM2-135M-Instruct's by default.

Shape letters: B batch, L tokens in this call, S tokens attended to (cached ones included), V vocabulary size.
"""
import torch
import torch.nn.functional as F
from torch import nn

from ..attention_layer import GroupedQueryAttention
from ..cross_layer import run_layers, shared_kv_owners
from ..rope import Rope, pairs_to_halves_rows
from ..validation import require_rank
from .loader import GGUFModel, LlamaConfig
from .matvec import SplitLinear, split_linears, splits_inputs


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension: LayerNorm without the mean and the bias.

    Shape (..., d_model) in and out. The same operations, in the same order, as transformers' ``LlamaRMSNorm``.
    """
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class RMSNorm(nn.Module):
    """``rms_norm`` with a learned weight of shape (d_model,). Shape (..., d_model) in and out."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    """The feed-forward block: down(silu(gate(x)) * up(x)), shape (..., d_model) in and out.

    gate and up are stored as one (2 d_ff, d_model) projection, ``gate_up``: one matrix product instead of two.
    """

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_up = nn.Linear(d_model, 2 * d_ff, bias=False)  # rows 0 .. d_ff - 1: gate; d_ff .. 2 d_ff - 1: up
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.d_ff = d_ff

    def forward(self, x):
        gate_up = self.gate_up(x)  # (..., 2 d_ff)
        return self.down(F.silu(gate_up[..., :self.d_ff]) * gate_up[..., self.d_ff:])


class DecoderBlock(nn.Module):
    """One pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)). Shape (B, L, d_model) in and out.

    makes_kv=False: the block's attention has no k_proj and v_proj and attends to keys and values that an earlier block
    made (cross-layer sharing, chapter 15, ``attention_book.cross_layer``).
    """

    def __init__(self, config: LlamaConfig, rope: Rope, makes_kv=True):
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model, config.rms_eps)
        self.attention = GroupedQueryAttention(config.d_model, config.n_heads, config.n_kv_heads, config.d_head,
                                               bias=False, rope=rope, makes_kv=makes_kv)
        self.mlp_norm = RMSNorm(config.d_model, config.rms_eps)
        self.mlp = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x, cache=None, shared_kv=None):
        """x: (B, L, d_model). cache: this layer's cache or None. Causal: token i sees tokens up to i.
        shared_kv: None, or keys and values that an earlier block made (``keys_values``) for this one to attend to."""
        attended, _ = self.attention(self.attention_norm(x), is_causal=x.shape[1] > 1, cache=cache,
                                     shared_kv=shared_kv)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x))

    def keys_values(self, x, cache=None):
        """The keys and values this block's attention makes for x (B, L, d_model), each (B, g, S, d_head)."""
        return self.attention.keys_values(self.attention_norm(x), cache)


def fuse_qkv(attention, n_splits=None):
    """Give ``attention`` (a ``GroupedQueryAttention``) its ``qkv_proj``: one ``SplitLinear`` for W_q, W_k and W_v
    stacked, ((h + 2g) d_head, d_model), so that a step makes q, k and v in one product; its q_proj, k_proj and
    v_proj then read their rows of it (the weights are stored once)."""
    a = attention
    a.qkv_proj, (a.q_proj, a.k_proj, a.v_proj) = SplitLinear.fuse((a.q_proj, a.k_proj, a.v_proj), n_splits)


class LlamaDecoder(nn.Module):
    """Token embedding, ``config.n_layers`` ``DecoderBlock``s, a final RMSNorm, and the output projection, whose
    weight is the token embedding's (tied).

    Every block's attention shares one ``Rope`` (``layout`` "halves", as transformers computes it, or "pairs", as the
    GGUF file stores W_q and W_k). ``kv_share`` > 1 shares keys and values across consecutive layers (chapter 15;
    ``llama.variants.with_shared_kv`` makes such a model from a trained one).
    """

    def __init__(self, config: LlamaConfig, layout="halves", kv_share=1):
        super().__init__()
        self.config, self.kv_share = config, kv_share
        self.rope = Rope(config.d_head, config.rope_base, layout)
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        owners = shared_kv_owners(config.n_layers, kv_share)
        self.layers = nn.ModuleList(DecoderBlock(config, self.rope, owners[i] == i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.rms_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.output.weight = self.embedding.weight  # tied: (V, d_model), one tensor

    def forward(self, ids, caches=None, last_only=False):
        """Logits for the next token after each of ``ids``.

        Args:
            ids: token ids, shape (B, L).
            caches: None, or one cache per layer (``new_caches``; one per group of kv_share layers): the tokens of
                ``ids`` then sit after the cached ones (their positions start at the caches' length) and are
                appended to them.
            last_only: compute the logits after the last token only (a prefill needs no others): shape (B, 1, V).
        Returns:
            logits: shape (B, L, V), or (B, 1, V) with last_only.
        """
        require_rank("ids", ids, 2, "B, L")
        n_caches = sum(layer.attention.makes_kv for layer in self.layers)
        if caches is not None and len(caches) != n_caches:
            per = "per layer" if self.kv_share == 1 else f"per group of {self.kv_share} layers"
            raise ValueError(f"caches must hold one cache {per} ({n_caches}), got {len(caches)}")
        x = self.embedding(ids)  # (B, L, d_model)
        x = run_layers(self.layers, x, caches, self.kv_share, lambda i, layer, x, cache, kv: layer(x, cache, kv))
        if last_only:
            x = x[:, -1:]  # (B, 1, d_model)
        return self.output(self.norm(x))  # (B, L, V)

    def speed_up(self, n_splits=None):
        """Make decoding fast, in place: every ``nn.Linear`` becomes a ``SplitLinear`` and every attention layer gets
        its fused ``qkv_proj`` (``fuse_qkv``). The outputs stay the same up to float rounding. Returns the model."""
        split_linears(self, n_splits)
        for layer in self.layers:
            if layer.attention.makes_kv:
                fuse_qkv(layer.attention, n_splits)
        return self

    def new_caches(self, batch_size, max_len, dtype=None):
        """One empty ``KVCache`` per layer that makes keys and values (all of them unless kv_share > 1), each with
        buffers (batch_size, n_kv_heads, max_len, d_head)."""
        if max_len > self.config.context_length:
            raise ValueError(f"max_len={max_len} exceeds the model's context length {self.config.context_length}")
        return [layer.attention.new_cache(batch_size, max_len, dtype=dtype) for layer in self.layers
                if layer.attention.makes_kv]

    def weight_bytes(self) -> int:
        """Bytes of all weights, each stored tensor counted once (the tied embedding, the fused projections): what
        a decode step reads at batch 1."""
        storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in self.parameters()}
        return sum(storages.values())


GGUF_NAMES = {  # our name in a DecoderBlock -> the tensor's name in a GGUF file's block i ("blk.{i}."), except
    # W_q and W_k (attn_q, attn_k: their rows are reordered) and gate_up (ffn_gate and ffn_up stacked)
    "attention_norm.weight": "attn_norm.weight",
    "attention.v_proj.weight": "attn_v.weight",
    "attention.o_proj.weight": "attn_output.weight",
    "mlp_norm.weight": "ffn_norm.weight",
    "mlp.down.weight": "ffn_down.weight",
}


def state_from_gguf(file: GGUFModel, layout="halves", transposed=False) -> dict[str, torch.Tensor]:
    """The decoder's state dict, in fp32, from a GGUF file's tensors.

    With layout "halves", the rows of W_q and W_k are reordered from the file's "pairs" layout, head by head
    (``pairs_to_halves_rows``); with "pairs" they stay as stored, and the decoder rotates pairs instead.
    With transposed=True, each matrix W (N, K) that ``SplitLinear`` splits along its inputs is a view of a (K, N)
    tensor, the storage it reads, written one matrix at a time (so that loading a sped-up model never holds two
    copies of the weights).
    """
    def read(name):  # a tensor of the file, in the storage asked for (a missing one: file.tensor names it)
        shape = file.tensors[name].shape if name in file.tensors else ()
        out = torch.empty(shape[::-1]).t() if transposed and len(shape) == 2 and splits_inputs(*shape) else None
        return file.tensor(name, out)

    def store(weight):  # a matrix computed here, in the storage asked for
        return weight.t().contiguous().t() if transposed and splits_inputs(*weight.shape) else weight

    config = file.config
    if "output.weight" in file.tensors:
        raise ValueError(f"{file.path.name} has an untied output projection 'output.weight'; the book's decoder "
                         "ties it to the token embedding")
    state = {"embedding.weight": read("token_embd.weight"), "norm.weight": read("output_norm.weight")}
    for i in range(config.n_layers):
        ours = {name: read(f"blk.{i}.{theirs}") for name, theirs in GGUF_NAMES.items()}
        q, k = file.tensor(f"blk.{i}.attn_q.weight"), file.tensor(f"blk.{i}.attn_k.weight")
        if layout == "halves":
            q, k = pairs_to_halves_rows(q, config.n_heads), pairs_to_halves_rows(k, config.n_kv_heads)
        gate, up = file.tensor(f"blk.{i}.ffn_gate.weight"), file.tensor(f"blk.{i}.ffn_up.weight")
        ours |= {"attention.q_proj.weight": store(q), "attention.k_proj.weight": store(k),
                 "mlp.gate_up.weight": store(torch.cat((gate, up)))}  # gate_up: (2 d_ff, d_model)
        state.update({f"layers.{i}.{name}": t for name, t in ours.items()})
    return state


def load_llama(path=None, layout="halves", fast=False) -> LlamaDecoder:
    """A ``LlamaDecoder`` in eval mode with the weights of a GGUF file (default: SmolLM2-135M-Instruct's).

    Args:
        path: a .gguf file of architecture "llama", or a ``GGUFModel`` already opened.
        layout: "halves" (W_q, W_k rows reordered; transformers' RoPE) or "pairs" (as stored; the paper's RoPE).
        fast: False keeps ``nn.Linear`` and the attention layer's own forward everywhere: the same operations as
            transformers' in the same order, so the same logits bit for bit. True returns it sped up
            (``speed_up()``: ``SplitLinear``s and fused q/k/v projections), loaded straight into the
            storage ``SplitLinear`` reads; its logits differ from transformers' by float rounding (about 1e-4).
    """
    file = path if isinstance(path, GGUFModel) else GGUFModel(path)
    state = state_from_gguf(file, layout, transposed=fast)
    with torch.device("meta"):  # no memory and no random initialisation for weights that are replaced at once
        model = LlamaDecoder(file.config, layout)
    model.rope = Rope(file.config.d_head, file.config.rope_base, layout)  # its table must not live on "meta"
    for layer in model.layers:
        layer.attention.rope = model.rope
    model.load_state_dict(state | {"output.weight": state["embedding.weight"]}, assign=True)
    model.output.weight = model.embedding.weight  # tied again: assign=True made two parameters of one tensor
    if fast:
        model.speed_up()
    return model.eval()
