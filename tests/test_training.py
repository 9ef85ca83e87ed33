"""The training loop is deterministic, learns an easy task, and reports accuracy."""
import torch
from torch import nn

from attention_book.experiments.training import accuracy, train


def copy_task(generator, batch_size=64):
    x = torch.randint(0, 5, (batch_size, 4), generator=generator)
    return x, x  # predict each token itself


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(5, 8), nn.Linear(8, 5))


def test_same_seeds_give_the_same_losses():
    first = train(model(), copy_task, steps=30, seed=3, progress=False)
    second = train(model(), copy_task, steps=30, seed=3, progress=False)
    assert first == second and len(first) == 30


def test_a_different_data_seed_changes_the_losses():
    assert train(model(), copy_task, steps=5, seed=1, progress=False) != \
        train(model(), copy_task, steps=5, seed=2, progress=False)


def test_it_learns_and_accuracy_measures_it():
    net = model()
    x, y = copy_task(torch.Generator().manual_seed(99), 256)
    before = accuracy(net, x, y)
    losses = train(net, copy_task, steps=200, lr=3e-2, seed=0, progress=False)
    assert losses[-1] < losses[0] / 10
    assert before < 0.9 and accuracy(net, x, y) == 1.0
    assert not net.training  # left in eval mode


def test_smoothed_is_a_centred_moving_average():
    from attention_book.experiments.training import smoothed

    assert smoothed([0, 3, 6, 9], half_window=1) == [1.5, 3.0, 6.0, 7.5]
    assert smoothed([4.0, 4.0, 4.0]) == [4.0, 4.0, 4.0]
