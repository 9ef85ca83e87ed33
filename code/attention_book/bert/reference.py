"""The reference the book's ``BertEncoder`` is checked against: Hugging Face ``transformers``' ``BertModel``.

It loads the same local folder (no network) with the plain ("eager") attention, which returns every head's weights.
Needs the ``real`` extra: ``pip install "attention-book[real]"``.
"""
import warnings
from typing import NamedTuple

import torch


class ReferenceOutput(NamedTuple):
    """hidden_states: (n_layers + 1, B, L, d_model); attention_weights: (n_layers, B, h, L, L)."""

    hidden_states: torch.Tensor
    attention_weights: torch.Tensor


def load_reference(folder):
    """``transformers.BertModel`` with the weights of ``folder``, eager attention, no pooler, in eval mode."""
    with warnings.catch_warnings():  # importing transformers can warn about notebook progress bars; none are used
        warnings.simplefilter("ignore")
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager",
                                                       add_pooling_layer=False, local_files_only=True)
    return model.eval()


@torch.no_grad()
def reference_outputs(model, ids, is_real) -> ReferenceOutput:
    """Run the reference on token ids (B, L) with is_real (B, L), True = a real token."""
    out = model(input_ids=ids, attention_mask=is_real.long(), output_hidden_states=True, output_attentions=True)
    return ReferenceOutput(torch.stack(out.hidden_states), torch.stack(out.attentions))
