"""What a check watches an answer do, operation by operation (a ``TorchDispatchMode`` sees every operation torch runs
with its arguments): things that give a right answer on this machine by luck."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode


NON_FINITE = ("it turned NaN or inf into integers; what NaN or inf becomes as an integer is not defined (0 on some "
              "machines, other values on others), so what it gives depends on the machine")
REPEATED = ("one indexed write of it wrote two values to the same place; which of them stays is not defined (the "
            "last on this machine, either on others)")


class _Noticing(TorchDispatchMode):
    """While active, ``seen`` turns true at the first operation for which ``notices(func, args, out)`` is true."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def notices(self, func, args, out):
        raise NotImplementedError

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen = self.seen or bool(self.notices(func, args, out))
        return out


class NonFiniteToInteger(_Noticing):
    """While active, notes whether an operation turned a float tensor holding NaN or inf into integers (``.to``,
    ``.byte()``, ``.long()``, a copy into an integer tensor): what those become is not defined."""

    def notices(self, func, args, out):
        if func not in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            return False
        source = args[1] if func is torch.ops.aten.copy_.default else args[0]
        return (isinstance(source, torch.Tensor) and source.is_floating_point() and isinstance(out, torch.Tensor)
                and not out.is_floating_point() and not out.is_complex() and out.dtype != torch.bool
                and not torch.isfinite(source).all())


_INDEX_WRITES = {torch.ops.aten.index_put_.default, torch.ops.aten.index_put.default,
                 torch.ops.aten._index_put_impl_.default}


def _repeats(indices):
    """Whether advanced indices (a list of index tensors or None, as index_put takes them) name one place twice."""
    given = [i for i in indices if i is not None]
    if not given or any(i.dtype == torch.bool for i in given):
        return False  # a boolean mask names each place at most once
    places = torch.stack(torch.broadcast_tensors(*given)).reshape(len(given), -1).T  # (n, number of index tensors)
    return places.unique(dim=0).shape[0] < places.shape[0]


class RepeatedIndexWrite(_Noticing):
    """While active, notes whether an indexed write (``t[index] = values``, ``index_put_``, ``index_copy_``) wrote one
    place twice: which of the two values stays is not defined (the last one on some machines, either on others)."""

    def notices(self, func, args, out):
        if func in _INDEX_WRITES:
            return _repeats(args[1])
        return func in (torch.ops.aten.index_copy_.default, torch.ops.aten.index_copy.default) and _repeats([args[2]])


PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.addmm.default,
            torch.ops.aten.baddbmm.default, torch.ops.aten.mv.default, torch.ops.aten.dot.default}  # @, matmul, einsum
EXPONENTIALS = {torch.ops.aten.exp.default, torch.ops.aten._softmax.default, torch.ops.aten._log_softmax.default,
                torch.ops.aten.logsumexp.default}  # exp, softmax, log_softmax, logsumexp


class OperandShapes(TorchDispatchMode):
    """While active, records the shape of every tensor operand of the operations ``ops`` (a set of aten overloads,
    PRODUCTS or EXPONENTIALS): ``shapes``, a list of tuples."""

    def __init__(self, ops):
        super().__init__()
        self.ops, self.shapes = ops, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.ops:
            self.shapes += [tuple(a.shape) for a in args if isinstance(a, torch.Tensor) and a.dim() >= 1]
        return func(*args, **(kwargs or {}))
