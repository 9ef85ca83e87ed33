"""The bytes a computation moves, counted operation by operation (chapter 14).

A ``TorchDispatchMode`` sees every operation torch runs, with its tensor arguments and results. For each operation
that computes something, ``count_traffic`` adds the bytes of the memory its tensor inputs cover (read) and of its
results (written). What it counts, precisely:

- an operation that only relabels memory (a view: ``transpose``, ``view``, a slice, ``expand``) moves nothing;
- a tensor counts the numbers it addresses: a slice of a row its own part, an expanded tensor its distinct numbers
  (an ``expand`` along a dimension repeats the same memory, stride 0);
- a tensor passed twice to one operation (the same key and value, say) counts once;
- an operation that writes into one of its arguments (``copy_``, in place) counts that argument once, as written.

This is traffic at the level of operations: what each operation would move between memory and the processor if
nothing stayed in the processor's caches between operations, or in a kernel's own scratch memory. A real machine
moves less where a tensor written by one operation is still in cache when the next one reads it, and a kernel may
read its inputs more than once. It shows what a computation asks of memory, and which operation asks for what.
"""
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def tensor_bytes(t):
    """Bytes of the distinct memory a tensor addresses: its numbers, each counted once (an expanded dimension,
    stride 0, adds nothing)."""
    numbers = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if size == 0:
            return 0
        if stride != 0:
            numbers *= size
    return numbers * t.element_size()


def _key(t):
    return t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype


class Traffic(TorchDispatchMode):
    """``with Traffic() as traffic: ...`` then ``traffic.read``, ``traffic.written`` (bytes) and ``traffic.by_op``
    ({operation name: (bytes read, bytes written, calls)}), under the rules of this module's docstring."""

    def __init__(self):
        super().__init__()
        self.read = self.written = 0
        self._by_op = defaultdict(lambda: [0, 0, 0])

    @property
    def total(self):
        """Bytes read plus bytes written."""
        return self.read + self.written

    @property
    def by_op(self):
        """{operation name: (bytes read, bytes written, calls)}, largest traffic first."""
        rows = sorted(self._by_op.items(), key=lambda item: -(item[1][0] + item[1][1]))
        return {name: tuple(counts) for name, counts in rows}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view:
            return out
        inputs = {_key(t): t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        outputs = {_key(t): t for t in tree_leaves(out) if isinstance(t, torch.Tensor)}
        input_storages = {t.untyped_storage().data_ptr() for t in inputs.values()}
        if outputs and not func._schema.is_mutable and all(
                t.untyped_storage().data_ptr() in input_storages for t in outputs.values()):
            return out  # a view the schema does not mark as one (``_unsafe_view``, ``alias``): no data moves
        written_keys = outputs.keys() if func._schema.is_mutable else ()
        n_read = sum(tensor_bytes(t) for key, t in inputs.items() if key not in written_keys)
        n_written = sum(tensor_bytes(t) for t in outputs.values())
        self.read += n_read
        self.written += n_written
        counts = self._by_op[str(func.overloadpacket).removeprefix("aten.")]
        counts[0] += n_read
        counts[1] += n_written
        counts[2] += 1
        return out


def count_traffic(fn):
    """Run ``fn()`` under ``torch.no_grad()`` and return its ``Traffic``: bytes read, written and by operation."""
    with torch.no_grad(), Traffic() as traffic:
        fn()
    return traffic
