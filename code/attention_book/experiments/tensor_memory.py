"""The peak bytes of the tensors a computation allocates, counted exactly, on any device (chapter 13).

A ``TorchDispatchMode`` sees every operation torch runs and the tensors it returns. Each storage seen for the first
time as an operation's output is new memory: its bytes are added to a running total, and subtracted again when the
storage is freed (a weakref finaliser). The largest value the total reaches is the peak. Storages that already
existed (the inputs) and views, which share their base's storage, add nothing. What it does not see: scratch memory a
kernel allocates and frees inside itself, and memory outside torch's tensors.
"""
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class PeakTensorBytes(TorchDispatchMode):
    """``with PeakTensorBytes() as counter: ...`` then ``counter.peak``: the most bytes of new tensors alive at once
    (``counter.total``: the bytes of all the new tensors made, freed or not)."""

    def __init__(self):
        super().__init__()
        self.now = self.peak = 0
        self.total = 0  # every new tensor's bytes, freed or not
        self._known = weakref.WeakSet()  # storages already accounted for, new or not

    def _freed(self, n_bytes):
        self.now -= n_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in tree_leaves((args, kwargs)):  # a storage first met as an input existed before: it is not counted
            if isinstance(t, torch.Tensor):
                self._known.add(t.untyped_storage())
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                if storage not in self._known:
                    self._known.add(storage)
                    self.now += storage.nbytes()
                    self.total += storage.nbytes()
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(storage, self._freed, storage.nbytes())
        return out


def peak_tensor_bytes(fn):
    """The peak bytes of the tensors that ``fn()`` allocates (its result included, while it is alive), under
    ``torch.no_grad()``."""
    with torch.no_grad(), PeakTensorBytes() as counter:
        fn()
    return counter.peak
