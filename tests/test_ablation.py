"""Head ablation measures the rise in loss exactly as switching each head off by hand would."""
import torch

from attention_book.experiments.ablation import ablation_losses
from attention_book.experiments.training import lm_loss
from attention_book.experiments.tasks import repeated_sequence
from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig


def model_and_batch():
    torch.manual_seed(0)
    model = TinyTransformer(TinyTransformerConfig(vocab_size=16, max_len=16, d_model=16, n_layers=2, n_heads=2,
                                                  mlp=False))
    tokens, targets = repeated_sequence(torch.Generator().manual_seed(1), batch_size=8, seq_len=16, vocab_size=16,
                                        min_pattern_len=3)
    return model.eval(), tokens, targets


def test_all_ones_mask_is_the_whole_model():
    model, tokens, targets = model_and_batch()
    assert lm_loss(model, tokens, targets, torch.ones(2, 2)) == lm_loss(model, tokens, targets)


def test_each_entry_is_the_loss_without_that_head_minus_the_loss_with_it():
    model, tokens, targets = model_and_batch()
    rises = ablation_losses(model, tokens, targets)
    assert rises.shape == (2, 2)
    base = lm_loss(model, tokens, targets)
    head_mask = torch.ones(2, 2)
    head_mask[1, 0] = 0
    assert abs(rises[1, 0].item() - (lm_loss(model, tokens, targets, head_mask) - base)) < 1e-6
    assert (rises != 0).all()  # every head of an untrained model changes the loss a little


def test_callback_in_training_sees_every_checkpoint():
    from attention_book.experiments.training import train

    model, _, _ = model_and_batch()
    seen = []
    train(model, lambda g: repeated_sequence(g, batch_size=4, seq_len=16, vocab_size=16, min_pattern_len=3),
          steps=25, seed=0, progress=False, callback=seen.append, every=10)
    assert seen == [0, 10, 20, 25]
