"""Linear layers that read their weights at the memory's speed when decoding one token at a time.

A decode step at batch 1 multiplies one vector by every weight matrix: each number of W is read once and used
once, so the step takes as long as reading the weights, and a matrix-vector product should run at the machine's
read bandwidth. In the book's PyTorch (2.13, x86 CPU build), ``F.linear(x, W)`` with one row x runs its BLAS
library's matrix-vector product on one thread, which reaches about a third of it; other builds may differ.
``SplitLinear`` computes the same product as ``s`` smaller ones that ``torch.bmm`` runs on ``s`` threads at once.
Which way to cut depends on W's shape (N outputs, K inputs):

- N >= K (W_q, W_k, W_v, W_o, gate and up, the output projection): cut the K inputs into s slices. W is stored
  transposed, (K, N), so that each slice is a block of whole rows; each slice of x times its slice of W gives a
  partial result, and the s partial results are added. Only the order of the additions changes, so the outputs
  equal ``F.linear``'s up to float rounding.
- N < K (the MLP's down projection): cut the N outputs into s slices. W stays as ``nn.Linear`` stores it, (N, K);
  each thread computes its outputs in full, and the slices are put side by side.
"""
import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 16  # more sequences than this decoding at once is a matrix product, which BLAS runs on every thread


def default_splits(size, threads=None) -> int:
    """The most slices, at most ``threads`` (default: torch's thread count), that divide ``size`` exactly."""
    threads = torch.get_num_threads() if threads is None else threads
    return max(s for s in range(1, max(threads, 1) + 1) if size % s == 0)


def splits_inputs(out_features, in_features) -> bool:
    """Whether ``SplitLinear`` cuts a weight of shape (out_features, in_features) along its inputs (stored
    transposed) rather than its outputs (stored as it is)."""
    return out_features >= in_features


class SplitLinear(nn.Module):
    """``x @ W.T`` without bias, as ``nn.Linear(K, N, bias=False)``, for x of shape (..., K): shape (..., N) out.

    Args:
        weight: W, shape (N, K), as ``nn.Linear`` stores it. Stored as the split needs it: transposed, (K, N), to
            split the inputs (copied once, unless ``weight.t()`` already has contiguous rows: a slice of another
            ``SplitLinear``'s weight, which then shares its memory, see ``fuse``); as it is to split the outputs.
        n_splits: s, the number of slices (default: ``default_splits`` of the size that is split).
        split: "inputs" or "outputs"; default: "inputs" if ``splits_inputs(N, K)``, else "outputs".

    ``weight`` stays an (N, K) tensor, a view of the storage, so the layer reads like an ``nn.Linear``
    (``layer.weight.dtype``, ``layer.weight.shape``, its state dict) and can share its weight with an ``nn.Embedding``.
    For inference only. ``forward`` reads ``weight`` through an (s, K / s, N) or (s, N / s, K) view (``slices``, no
    copy), made again whenever ``.to()``, ``.half()`` and the like move ``weight``, so it never reads stale numbers.
    """

    def __init__(self, weight, n_splits=None, split=None):
        super().__init__()
        N, K = weight.shape
        self.split = split or ("inputs" if splits_inputs(N, K) else "outputs")
        if self.split not in ("inputs", "outputs"):
            raise ValueError(f"split={split!r} must be 'inputs' or 'outputs'")
        size = K if self.split == "inputs" else N
        self.n_splits = default_splits(size) if n_splits is None else n_splits
        if size % self.n_splits:
            raise ValueError(f"n_splits={self.n_splits} must divide the {size} {self.split}")
        if self.split == "inputs":
            stored = weight.detach().t()  # (K, N)
            if stored.stride(1) != 1:
                stored = stored.contiguous()  # row k holds input k's weights, for all N outputs
            self.weight = nn.Parameter(stored.t(), requires_grad=False)  # (N, K), a view of the (K, N) storage
        else:
            self.weight = nn.Parameter(weight.detach().contiguous(), requires_grad=False)  # (N, K)
        self.in_features, self.out_features = K, N
        self.bias = None  # as an nn.Linear(..., bias=False)

    def forward(self, x):
        """x: (..., L, K) -> (..., L, N). Split only for one token per sequence (L = 1, a decode step) and at most
        MAX_ROWS sequences; anything else (a prefill) is ``F.linear``, exactly as ``nn.Linear`` computes it."""
        K, N, s = self.in_features, self.out_features, self.n_splits
        rows = x.numel() // K
        if s == 1 or x.dim() < 2 or x.shape[-2] != 1 or rows > MAX_ROWS:
            return F.linear(x, self.weight)
        w_slices = self.slices()
        if self.split == "inputs":
            x_slices = x.reshape(rows, s, K // s).transpose(0, 1)  # (s, rows, K / s)
            return torch.bmm(x_slices, w_slices).sum(dim=0).view(*x.shape[:-1], N)  # partial results, added
        y = torch.bmm(x.reshape(1, rows, K).expand(s, rows, K), w_slices.transpose(1, 2))  # (s, rows, N / s)
        return y.transpose(0, 1).reshape(*x.shape[:-1], N)  # the slices side by side

    def slices(self):
        """The view of ``weight`` that ``forward`` reads: (s, K / s, N) when splitting the inputs (of the (K, N)
        storage), (s, N / s, K) when splitting the outputs. No copy; made again only when ``weight`` moves to other
        memory (``.to()``, ``.half()``, ``.double()``), so a decode step never reads stale weights."""
        weight = self.weight
        key = (weight.data_ptr(), weight.dtype, weight.device)
        if getattr(self, "_slices_key", None) != key:
            K, N, s = self.in_features, self.out_features, self.n_splits
            self._slices = weight.t().view(s, K // s, N) if self.split == "inputs" else weight.view(s, N // s, K)
            self._slices_key = key
        return self._slices

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, n_splits={self.n_splits}, "
                f"split={self.split!r}")

    @classmethod
    def fuse(cls, layers, n_splits=None):
        """One ``SplitLinear`` whose outputs are those of ``layers`` (linear layers with the same K) side by side,
        and one ``SplitLinear`` per layer that reads its part of the fused storage (no second copy of the weights).
        All split their inputs.

        Returns:
            fused: N = the layers' N added; parts: a list, one per layer, each equal to its layer.
        """
        fused = cls(torch.cat([layer.weight for layer in layers]), n_splits, split="inputs")
        sizes = [layer.weight.shape[0] for layer in layers]
        return fused, [cls(part, fused.n_splits, split="inputs") for part in fused.weight.split(sizes)]


def split_linears(model, n_splits=None):
    """Replace every bias-free ``nn.Linear`` of ``model`` (in place) by a ``SplitLinear`` with the same weight.

    A weight that several layers share (a tied embedding and output projection) stays shared. Returns ``model``.
    """
    # the memory of an old weight -> its SplitLinear, so that tied weights stay one tensor. An old weight is freed as
    # soon as its layer is replaced (only one extra copy at a time); the weights looked up were all alive before, so
    # none of them can sit in memory that a freed one left.
    replaced = {}
    names = [name for name, module in model.named_modules() if type(module) is nn.Linear and module.bias is None]
    for name in names:
        module = model.get_submodule(name)
        key = _memory_of(module.weight)
        new = replaced.get(key) or SplitLinear(module.weight, n_splits)
        replaced[key] = new
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
    for module in model.modules():  # an nn.Embedding tied to a replaced weight now reads the new storage
        if isinstance(module, nn.Embedding) and _memory_of(module.weight) in replaced:
            module.weight = replaced[_memory_of(module.weight)].weight
    return model


def _memory_of(weight):
    """The numbers a weight reads: its storage and where in it. Two Parameters over one tensor (as
    ``load_state_dict(assign=True)`` leaves a tied weight) give the same key. A "meta" tensor has no memory: itself."""
    if weight.is_meta:
        return id(weight)
    return weight.untyped_storage().data_ptr(), weight.storage_offset(), tuple(weight.shape), weight.stride()
