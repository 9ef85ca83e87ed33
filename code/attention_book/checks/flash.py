"""Checks for chapter 13's exercises: the tiled pass of one head with a bounded peak memory, merging two partial
attention outputs by their log-sum-exp, and the largest key block whose tile fits in a memory budget."""
import math

import torch
import torch.nn.functional as F

from ..experiments.tensor_memory import PeakTensorBytes
from ..flash import merge_partials
from ..masks import causal_mask
from ._compare import CheckFailed, _call, _compare, _exercise, _generator, _require_number, _see_hint, _size
from ._watch import EXPONENTIALS, PRODUCTS, OperandShapes


# what the answer may not call: the package's own tiled passes and online softmax, and any attention that holds the
# (L, S) weights
_TILED_REFUSE = ["attention_book.flash.tiled_attention", "attention_book.flash.online_softmax",
                 "attention_book.flash.running_update", "attention_book.flash.split_kv_decode",
                 "attention_book.flash.attend_chunks", "attention_book.flash.merge_partials",
                 ("torch.nn.functional.scaled_dot_product_attention", "which the exercise says not to call"),
                 ("attention_book.sdpa.scaled_dot_product_attention", "which the exercise says not to call")]
_PEAK_NUMBERS = 8  # the bound on new tensors held at once: _PEAK_NUMBERS x L x (block_k + d_v) numbers


def _each_block_alone(q, k, v, block_k, is_causal):
    """A mistake: each block of keys normalised by its own softmax, and the blocks' outputs added up."""
    L, S = q.shape[0], k.shape[0]
    out = torch.zeros(L, v.shape[1], dtype=q.dtype)
    for j0 in range(0, S, block_k):
        s = (q @ k[j0:j0 + block_k].T) / math.sqrt(q.shape[1])
        if is_causal:
            s = s.masked_fill(torch.arange(j0, j0 + s.shape[1]) > torch.arange(L)[:, None] + (S - L), -math.inf)
        out = out + torch.softmax(s, dim=-1).nan_to_num(0.0) @ v[j0:j0 + block_k]
    return out


def _tiled(q, k, v, block_k, is_causal, rescale_out=True, rescale_sum=True):
    """One head's tiled pass, or one of its two usual mistakes (a running value not rescaled)."""
    L, S = q.shape[0], k.shape[0]
    m = torch.full((L, 1), -math.inf, dtype=q.dtype)
    total, acc = torch.zeros(L, 1, dtype=q.dtype), torch.zeros(L, v.shape[1], dtype=q.dtype)
    for j0 in range(0, S, block_k):
        s = (q @ k[j0:j0 + block_k].T) / math.sqrt(q.shape[1])
        if is_causal:
            s = s.masked_fill(torch.arange(j0, j0 + s.shape[1]) > torch.arange(L)[:, None] + (S - L), -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p, factor = torch.exp(s - m_new), torch.exp(m - m_new)
        total = (total * factor if rescale_sum else total) + p.sum(-1, keepdim=True)
        acc = (acc * factor if rescale_out else acc) + p @ v[j0:j0 + block_k]
        m = m_new
    return acc / total


@_exercise("tiled_one_head",
           task="given one head's q (L, d_head), k (S, d_head) and v (S, d_v), block_k and is_causal, return "
                "(L, d_v): softmax(q kᵀ / √d_head) v, where with is_causal=True query i may attend to keys "
                "0 .. i + S - L only (aligned bottom-right, L <= S), reading k and v block_k rows at a time. Besides "
                "q, k and v, it must never hold more than 8 × L × (block_k + d_v) fp32 numbers (4 bytes each) in new "
                "tensors at once, "
                "the output included, however long S is: no (L, S) matrix of scores, weights or mask. Do not call "
                "F.scaled_dot_product_attention, the book's scaled_dot_product_attention or the functions of "
                "attention_book.flash.",
           hint="Keep three running values per query: the maximum m (L, 1), starting at -inf; the sum l (L, 1) of "
                "exp(score - m), starting at 0; and the output o (L, d_v) = sum of exp(score - m) v, starting at 0, "
                "not yet divided by l. For each block of keys: s = (q / √d_head) @ k_blockᵀ, (L, n), with -inf where "
                "the causal mask forbids (key j > i + S - L); m_new = torch.maximum(m, s.amax(1, keepdim=True)); "
                "p = exp(s - m_new); factor = exp(m - m_new) rescales what was summed under the old maximum: "
                "l = l * factor + p.sum(1, keepdim=True) and o = o * factor + p @ v_block; then m = m_new. Return "
                "o / l. The first block holds key 0, which every query may see, so m is finite from then on.",
           idea="Section 2's picture: walk over the keys one block at a time, keeping for each query a running "
                "maximum, a running sum of exponentials and a running weighted sum of values. When a block raises the "
                "maximum, what was summed so far was weighted by the old maximum: rescale it before adding the block.")
def check_tiled_one_head(fn):
    """fn(q (L, d_head), k (S, d_head), v (S, d_v), block_k, is_causal) -> (L, d_v), tiled over the keys.

    Tried on 6 random inputs (causal or not, L < S or L = S, block_k dividing S or not), the last two with
    L = 768 and 1,024 and S = 1,024, where the new tensors it holds at once are counted (PeakTensorBytes) against
    8 L (block_k + d_v) numbers, and (at L = 768) no matrix product, exp or softmax may take all S keys at once
    (OperandShapes); compared with F.scaled_dot_product_attention (with causal_mask(L, S) when causal), with the
    package's tiled and SDPA functions made to refuse.
    """
    gen = _generator(33)
    inputs = []
    for L, S, d_head, d_v, block_k, is_causal in [(1, 1, 2, 2, 1, False), (3, 5, 4, 4, 2, True),
                                                   (4, 9, 8, 4, 4, False), (6, 11, 8, 8, 3, True),
                                                   (768, 1024, 8, 8, 16, True), (1024, 1024, 8, 8, 16, False)]:
        q, k, v = (3 * torch.randn(n, d, generator=gen) for n, d in ((L, d_head), (S, d_head), (S, d_v)))
        inputs.append((q, k, v, block_k, is_causal))
    for q, k, v, block_k, is_causal in sorted(inputs, key=lambda i: _size(*i[:3])):  # the smallest first
        (L, d_head), (S, d_v) = q.shape, v.shape
        mask = causal_mask(L, S) if is_causal else None
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        mistakes = [("the running output was not rescaled when a block raised the maximum: what it summed was "
                     "weighted by the old maximum", lambda: _tiled(q, k, v, block_k, is_causal, rescale_out=False)),
                    ("the running sum was not rescaled when a block raised the maximum",
                     lambda: _tiled(q, k, v, block_k, is_causal, rescale_sum=False)),
                    ("each block of keys was normalised by a softmax of its own and the blocks' outputs added up: "
                     "the weights of a query must sum to 1 over all its keys, not over each block",
                     lambda: _each_block_alone(q, k, v, block_k, is_causal)),
                    ("the scores were not scaled by 1/√d_head",
                     lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)),
                    ("the causal mask is aligned top-left (query i sees keys 0 .. i); here the L queries are the "
                     "last L of the S positions, so query i sees keys 0 .. i + S - L",
                     lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))]
        if not is_causal:
            mistakes.pop()
        with torch.no_grad(), PeakTensorBytes() as counter, OperandShapes(PRODUCTS) as products, \
                OperandShapes(EXPONENTIALS) as exponentials:
            got = _call(fn, (q, k, v, block_k, is_causal), "tiled_one_head", refuse=_TILED_REFUSE)
        tried = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, block_k={block_k}, is_causal={is_causal}"
        _compare("your tiled_one_head", tried, expected, got, hint=_see_hint("tiled_one_head"), atol=1e-4,
                 mistakes=mistakes)
        bound = _PEAK_NUMBERS * L * (block_k + d_v) * q.element_size()
        if L >= 512 and counter.peak > bound:
            raise CheckFailed(f"your tiled_one_head on {tried}: it held {counter.peak:,} bytes of new tensors at "
                              f"once, more than the {bound:,} bytes the exercise allows (8 × L × (block_k + d_v) "
                              f"fp32 numbers, the output included); one (L, S) matrix of fp32 scores is "
                              f"{L * S * 4:,} bytes, and an (L, S) boolean mask {L * S:,}")
        for watched, what in ((products, "one of its matrix products took an operand"),
                              (exponentials, "it took an exponential (exp, softmax) of a tensor")):
            whole = [shape for shape in watched.shapes if S in shape]  # S differs from L, d_head, d_v at L = 768
            if L >= 512 and S not in (L, d_head, d_v) and whole:
                raise CheckFailed(f"your tiled_one_head on {tried}: {what} of shape {whole[0]}, all S = {S} keys at "
                                  f"once; the exercise walks over the keys and values block_k = {block_k} rows at a "
                                  "time, with running values")
    print("✓ your tiled_one_head equals SDPA on 6 inputs, causal or not, and at L = 768 and 1,024 with S = 1,024 "
          "it never held more than 8 × L × (block_k + d_v) numbers at once.")


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

    Tried on 4 inputs (one query with equal log-sum-exps, and with unequal ones near 100, whose exp overflows fp32;
    two queries, one with set a fully masked
    and one with both sets fully masked; then a batch of heads); compared with attention_book.flash.merge_partials,
    which the answer may not call.
    """
    gen = _generator(32)
    inf = math.inf
    inputs = [(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5]]), torch.tensor([[3.0, -1.0]]), torch.tensor([[0.5]])),
              (torch.tensor([[1.0, 2.0]]), torch.tensor([[100.0]]), torch.tensor([[3.0, -1.0]]),
               torch.tensor([[98.0]])),  # exp(100) overflows fp32
              (torch.zeros(2, 2), torch.tensor([[-inf], [-inf]]),  # fully masked sets: out zeros, lse -inf
               torch.tensor([[3.0, -1.0], [0.0, 0.0]]), torch.tensor([[0.5], [-inf]])),
              (torch.randn(2, 4, 1, 8, generator=gen), 4 * torch.randn(2, 4, 1, 1, generator=gen),
               torch.randn(2, 4, 1, 8, generator=gen), 4 * torch.randn(2, 4, 1, 1, generator=gen))]
    for out_a, lse_a, out_b, lse_b in sorted(inputs, key=lambda i: _size(*i)):  # the smallest first
        out, lse = merge_partials(torch.stack((out_a, out_b)), torch.stack((lse_a, lse_b)))
        got = _call(fn, (out_a, lse_a, out_b, lse_b), "merge_two",
                    refuse=[("attention_book.flash.merge_partials", "which the exercise says not to call")])
        tried = (f"out_a {tuple(out_a.shape)}, lse_a {lse_a.flatten().tolist()[:4]}, "
                 f"lse_b {lse_b.flatten().tolist()[:4]}")
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"merge_two on {tried}: expected a pair (out, lse) of tensors of shapes "
                              f"{tuple(out.shape)} and {tuple(lse.shape)}, got {got!r}")
        mistakes = [("the two outputs were averaged with equal weights; a set of keys with a larger log-sum-exp "
                     "holds more of the softmax's mass", lambda: (out_a + out_b) / 2),
                    ("the weights exp(lse_a) and exp(lse_b) were not divided by their sum",
                     lambda: torch.exp(lse_a) * out_a + torch.exp(lse_b) * out_b),
                    *([("exp(lse_a) and exp(lse_b) were computed on their own: above about 88.7 an exp overflows "
                        "fp32 to inf, and inf / inf is NaN",
                        lambda: (torch.exp(lse_a) * out_a + torch.exp(lse_b) * out_b)
                        / (torch.exp(lse_a) + torch.exp(lse_b)))]
                      if bool((torch.stack((lse_a, lse_b)) > 88).any()) else []),
                    ("where both sets are fully masked, lse = -inf and exp(lse_a - lse) = exp(-inf + inf) is NaN",
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
                "values (block_k, d_head) it reads; an int, 0 if not even block_k = 1 fits.",
           hint="The step holds block_q * block_k + 2 * block_k * d_head numbers, that is block_k * (block_q + "
                "2 * d_head) numbers of bytes_per_number bytes each. Divide the budget by the bytes per unit of "
                "block_k, rounding down: budget_bytes // ((block_q + 2 * d_head) * bytes_per_number).")
def check_largest_block_k(fn):
    """fn(budget_bytes, block_q, d_head, bytes_per_number) -> the largest block_k that fits.

    Tried on 6 budgets, from 64 bytes (where not even one key fits) to 228 KiB; compared with the count of what one
    step holds.
    """
    cases = [(64, 4, 8, 4), (1024, 4, 8, 4), (4096, 16, 32, 2), (65_536, 64, 64, 2), (100_000, 64, 128, 4),
             (233_472, 128, 128, 2)]
    for budget, block_q, d_head, b in cases:  # the smallest first
        expected = _largest_block_k(budget, block_q, d_head, b)
        got = _call(fn, (budget, block_q, d_head, b), "largest_block_k")
        _require_number(fn, f"{budget}, {block_q}, {d_head}, {b}", got)
        if isinstance(got, int) and not isinstance(got, bool) and got == expected:
            continue
        found = [why for wrong, why in [
            (1 if expected == 0 else None, "not even one key per block fits in this budget, yet block_k = 1 came "
                                           "back"),
            (-(-budget // ((block_q + 2 * d_head) * b)), "rounded up: a block of keys that does not fit whole does "
                                                         "not fit"),
            (budget // (block_q * b), "only the tile of scores was counted; the key and value blocks take room too"),
            (budget // ((block_q + d_head) * b), "the keys were counted but not the values (or the other way round)"),
            (budget // (block_q + 2 * d_head), "the bytes per number were left out: the budget is in bytes"),
            ((budget // b - 2 * d_head) // block_q, "the key and value blocks were counted as one row each, not "
                                                     "block_k rows each")] if got == wrong != expected]
        if isinstance(got, float):
            found = ["a block size is a whole number of keys: round down to an int"]
        likely = "\nLikely mistake: " + "\nor: ".join(found) if found else ""
        raise CheckFailed(f"budget_bytes={budget:,}, block_q={block_q}, d_head={d_head}, bytes_per_number={b}: "
                          f"expected block_k = {expected:,}, got {got!r}{likely}")
    print("✓ largest_block_k is right for 6 budgets, from 64 bytes to 228 KiB.")
