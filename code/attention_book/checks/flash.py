"""Checks for chapter 13's exercises: one step of the online softmax, merging two partial attention outputs by their
log-sum-exp, and the largest key block whose tile fits in a memory budget."""
import math

import torch

from ..flash import merge_partials, running_update
from ._compare import CheckFailed, _call, _compare, _exercise, _see_hint, _size


@_exercise("update_max_and_sum",
           task="given the running maximum m (..., 1) and running sum sum_exp (..., 1) of a softmax read so far "
                "(m = -inf and sum_exp = 0 before anything was read), and the next block of scores (..., n), "
                "return (m_new, sum_new), each (..., 1): the maximum of everything read, and the sum of "
                "exp(score - m_new) over everything read, as if the softmax's normaliser had been computed over all "
                "of it at once.",
           hint="m_new = torch.maximum(m, scores_block.amax(-1, keepdim=True)). The old sum was taken relative to "
                "m, so multiply it by exp(m - m_new) before adding exp(scores_block - m_new).sum(-1, keepdim=True). "
                "Where m_new is still -inf (nothing finite read yet), use 0 instead of m_new in both exponents, or "
                "you get NaN.")
def check_update_max_and_sum(fn):
    """fn(m (..., 1), sum_exp (..., 1), scores_block (..., n)) -> (m_new, sum_new).

    Tried on 4 inputs (a first block, a block that raises the maximum, one that does not, rows still all -inf);
    compared with attention_book.flash.running_update.
    """
    gen = torch.Generator().manual_seed(31)
    inf = math.inf
    inputs = [(torch.tensor([[-inf]]), torch.tensor([[0.0]]), torch.tensor([[1.0, 3.0]])),
              (torch.tensor([[2.0]]), torch.tensor([[1.5]]), torch.tensor([[4.0, 0.5, 1.0]])),
              (torch.tensor([[5.0], [-inf]]), torch.tensor([[2.0], [0.0]]), torch.tensor([[1.0, -inf], [-inf, -inf]])),
              (3 * torch.randn(2, 3, 1, generator=gen), 1 + torch.rand(2, 3, 1, generator=gen),
               3 * torch.randn(2, 3, 5, generator=gen))]
    for m, sum_exp, block in sorted(inputs, key=lambda i: _size(*i)):  # the smallest first
        m_new, sum_new = running_update(m, sum_exp, block)
        got = _call(fn, (m, sum_exp, block), "update_max_and_sum")
        tried = f"m {m.flatten().tolist()}, sum_exp {sum_exp.flatten().tolist()}, scores_block {tuple(block.shape)}"
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"update_max_and_sum on {tried}: expected a pair (m_new, sum_new) of tensors of shape "
                              f"{tuple(m_new.shape)}, got {got!r}")
        _compare("your m_new", tried, m_new, got[0], hint=_see_hint("update_max_and_sum"))
        shift = m_new.nan_to_num(neginf=0.0)
        mistakes = [("the old sum was not rescaled: it was taken relative to the old maximum m",
                     lambda: sum_exp + torch.exp(block - shift).sum(-1, keepdim=True)),
                    ("the old sum was rescaled the wrong way, by exp(m_new - m) instead of exp(m - m_new)",
                     lambda: sum_exp * torch.exp(shift - m) + torch.exp(block - shift).sum(-1, keepdim=True))]
        _compare("your sum_new", tried, sum_new, got[1], hint=_see_hint("update_max_and_sum"), mistakes=mistakes)
    print("✓ your update_max_and_sum keeps the running maximum and sum as the package's running_update does, "
          "on 4 inputs.")


@_exercise("merge_two",
           task="given two partial attention outputs out_a and out_b (..., d_v), each a query's softmax-weighted "
                "average of the values of its own disjoint set of keys, and lse_a, lse_b (..., 1), the log of the sum "
                "of exp(score) over each set, return (out, lse): the query's attention output over both sets of keys "
                "together, and the log of the sum of exp(score) over both. A set whose keys are all masked comes "
                "with out zeros and lse -inf; where both are, return zeros and lse = -inf, without NaN.",
           hint="lse = torch.logaddexp(lse_a, lse_b). Set a holds a share exp(lse_a - lse) of the whole softmax's "
                "mass, set b exp(lse_b - lse); the shares add up to 1, so out = exp(lse_a - lse) * out_a + "
                "exp(lse_b - lse) * out_b. Where lse is -inf (both sets fully masked), use 0 in place of lse in "
                "both exponents, as merge_partials does, or you get exp(-inf + inf) = NaN.")
def check_merge_two(fn):
    """fn(out_a, lse_a, out_b, lse_b) -> (out, lse) over both sets of keys.

    Tried on 4 inputs (one query with equal and with unequal log-sum-exps; two queries, one with set a fully masked
    and one with both sets fully masked; then a batch of heads); compared with attention_book.flash.merge_partials.
    """
    gen = torch.Generator().manual_seed(32)
    inf = math.inf
    inputs = [(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5]]), torch.tensor([[3.0, -1.0]]), torch.tensor([[0.5]])),
              (torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0]]), torch.tensor([[3.0, -1.0]]), torch.tensor([[0.0]])),
              (torch.zeros(2, 2), torch.tensor([[-inf], [-inf]]),  # fully masked sets: out zeros, lse -inf
               torch.tensor([[3.0, -1.0], [0.0, 0.0]]), torch.tensor([[0.5], [-inf]])),
              (torch.randn(2, 4, 1, 8, generator=gen), 4 * torch.randn(2, 4, 1, 1, generator=gen),
               torch.randn(2, 4, 1, 8, generator=gen), 4 * torch.randn(2, 4, 1, 1, generator=gen))]
    for out_a, lse_a, out_b, lse_b in sorted(inputs, key=lambda i: _size(*i)):  # the smallest first
        out, lse = merge_partials(torch.stack((out_a, out_b)), torch.stack((lse_a, lse_b)))
        got = _call(fn, (out_a, lse_a, out_b, lse_b), "merge_two")
        tried = (f"out_a {tuple(out_a.shape)}, lse_a {lse_a.flatten().tolist()[:4]}, "
                 f"lse_b {lse_b.flatten().tolist()[:4]}")
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"merge_two on {tried}: expected a pair (out, lse) of tensors of shapes "
                              f"{tuple(out.shape)} and {tuple(lse.shape)}, got {got!r}")
        mistakes = [("the two outputs were averaged with equal weights; a set of keys with a larger log-sum-exp "
                     "holds more of the softmax's mass", lambda: (out_a + out_b) / 2),
                    ("the weights exp(lse_a) and exp(lse_b) were not divided by their sum",
                     lambda: torch.exp(lse_a) * out_a + torch.exp(lse_b) * out_b),
                    ("where both sets are fully masked, lse = -inf and exp(lse_a - lse) = exp(-inf + inf) is NaN: "
                     "use 0 in place of lse there, as merge_partials does",
                     lambda: (torch.exp(lse_a - torch.logaddexp(lse_a, lse_b)) * out_a
                              + torch.exp(lse_b - torch.logaddexp(lse_a, lse_b)) * out_b))]
        _compare("your out", tried, out, got[0], hint=_see_hint("merge_two"), mistakes=mistakes)
        _compare("your lse", tried, lse, got[1], hint=_see_hint("merge_two"),
                 mistakes=[("lse is not the sum of the two lses: the sums of exp(score) add, not their logs",
                            lambda: lse_a + lse_b)])
    print("✓ your merge_two gives the attention over both sets of keys, as merge_partials does, on 4 inputs.")


def _largest_block_k(budget_bytes, block_q, d_head, bytes_per_number):
    return budget_bytes // ((block_q + 2 * d_head) * bytes_per_number)


@_exercise("largest_block_k",
           task="given a memory budget in bytes, block_q, d_head and the bytes per number, return the largest "
                "integer block_k for which one step of a tiled pass for one head fits in the budget: its tile of "
                "scores (block_q, block_k) together with the block of keys (block_k, d_head) and the block of "
                "values (block_k, d_head) it reads.",
           hint="The step holds block_q * block_k + 2 * block_k * d_head numbers, that is block_k * (block_q + "
                "2 * d_head) numbers of bytes_per_number bytes each. Divide the budget by the bytes per unit of "
                "block_k, rounding down: budget_bytes // ((block_q + 2 * d_head) * bytes_per_number).")
def check_largest_block_k(fn):
    """fn(budget_bytes, block_q, d_head, bytes_per_number) -> the largest block_k that fits.

    Tried on 5 budgets, from 1 KiB to 228 KiB; compared with the count of what one step holds.
    """
    cases = [(1024, 4, 8, 4), (4096, 16, 32, 2), (65_536, 64, 64, 2), (100_000, 64, 128, 4), (233_472, 128, 128, 2)]
    for budget, block_q, d_head, b in cases:  # the smallest first
        expected = _largest_block_k(budget, block_q, d_head, b)
        got = _call(fn, (budget, block_q, d_head, b), "largest_block_k")
        if isinstance(got, int) and not isinstance(got, bool) and got == expected:
            continue
        likely = ""
        if got == budget // (block_q * b):
            likely = "\nLikely mistake: only the tile of scores was counted; the key and value blocks take room too"
        elif got == budget // ((block_q + d_head) * b):
            likely = "\nLikely mistake: the keys were counted but not the values (or the other way round)"
        elif isinstance(got, float):
            likely = "\nLikely mistake: a block size is a whole number of keys: round down to an int"
        raise CheckFailed(f"budget_bytes={budget:,}, block_q={block_q}, d_head={d_head}, bytes_per_number={b}: "
                          f"expected block_k = {expected:,}, got {got!r}{likely}")
    print("✓ largest_block_k is right for 5 budgets, from 1 KiB to 228 KiB.")
