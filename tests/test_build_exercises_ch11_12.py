"""The build exercises of chapters 11 and 12: RoPE for a left-padded batch after a cache, a fused QKV projection
reordered to the pairs layout, a matrix-vector product straight from Q4_1 bytes, and quantising to Q4_1. Their
checks pass the model solutions, name the usual mistakes, and refuse the package's own solution of the step and
what the exercise says not to call.

``CHEATS`` (collected by tests/test_exercises_build.py): answers that call the package's own solution of the step.
"""

import attention_book.checks as checks
import nbformat
import pytest
import torch
from attention_book.llama.dequantize import _numbers, dequantize
from attention_book.rope import Rope, apply_rope, halves_order, halves_to_pairs_rows, rotate
from conftest import ROOT
from exercise_answers import fails, passes


def cheat_rope(x, mask, offset, base=10_000.0):
    positions = offset[:, None] + mask.long().cumsum(-1) - 1
    return apply_rope(x, positions.clamp(min=0), base)


def cheat_q4_1(raw, x):
    return dequantize(raw, "Q4_1", (raw.shape[0], x.shape[0])) @ x


def cheat_qkv(weight, n_heads, n_kv_heads):
    d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
    q, k, v = weight.split([n_heads * d_head, n_kv_heads * d_head, n_kv_heads * d_head])
    return torch.cat((halves_to_pairs_rows(q, n_heads), halves_to_pairs_rows(k, n_kv_heads), v))


CHEATS = {"check_rope_left_padded": cheat_rope, "check_q4_1_matvec": cheat_q4_1, "check_qkv_to_pairs": cheat_qkv}


# chapter 11: RoPE for a left-padded batch

def rope_with(positions_of, layout="halves", turn=1, in_x_dtype=True):
    """A written-out answer (no package RoPE) that places the tokens with ``positions_of(mask, offset, S)``."""
    def rope_left_padded(x, mask, offset, base=10_000.0):
        d_half = x.shape[-1] // 2
        positions = positions_of(mask, offset, x.shape[2])
        angles = turn * positions[:, None, :, None] * base ** (-torch.arange(d_half) / d_half)
        cos, sin = angles.cos(), angles.sin()
        if in_x_dtype:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        if layout == "halves":
            a, b = x[..., :d_half], x[..., d_half:]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return rope_left_padded


def real_positions(mask, offset, S):
    return offset[:, None] + mask.long().cumsum(-1) - 1


@pytest.mark.parametrize("answer, named", [
    (rope_with(lambda mask, offset, S: offset[:, None] + torch.arange(S)), "the padding was counted"),
    (rope_with(lambda mask, offset, S: mask.long().cumsum(-1) - 1), "the cached tokens were not counted"),
    (rope_with(lambda mask, offset, S: offset[:, None] + mask.long().cumsum(-1)), "one too far"),
    (rope_with(real_positions, layout="pairs"), "(the pairs layout)"),
    (rope_with(real_positions, turn=-1), "each pair turns clockwise")])
def test_a_wrong_padded_rope_gets_its_mistake(answer, named):
    message = fails(checks.check_rope_left_padded, answer)
    assert "Likely mistake: " in message and named in message, message


def test_a_padded_rope_must_keep_xs_dtype():
    fails(checks.check_rope_left_padded, rope_with(real_positions, in_x_dtype=False),
          "torch.bfloat16", "expected dtype torch.bfloat16, got torch.float32")


def test_next_positions_must_be_int64():
    fails(checks.check_next_positions, lambda n, new: torch.arange(n, n + new, dtype=torch.int32),
          "the positions are torch.int32, not int64")


def test_qkv_to_pairs_that_leaves_the_keys_is_told_so():
    def queries_only(weight, n_heads, n_kv_heads):
        d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
        q, k, v = weight.split([n_heads * d_head, n_kv_heads * d_head, n_kv_heads * d_head])
        q = q.view(n_heads, 2, d_head // 2, -1).transpose(1, 2).reshape(n_heads * d_head, -1)
        return torch.cat((q, k, v))

    assert "the key rows were left as they are" in fails(checks.check_qkv_to_pairs, queries_only)


def test_the_padding_tokens_outputs_are_not_compared():
    right = rope_with(real_positions)

    def garbage_at_the_padding(x, mask, offset, base=10_000.0):
        return torch.where(mask[:, None, :, None], right(x, mask, offset, base), float("nan"))

    assert passes(checks.check_rope_left_padded, garbage_at_the_padding).startswith("✓ ")


@pytest.mark.parametrize("refused, call", [
    ("attention_book.rope.Rope", lambda x, mask, offset, base: Rope(x.shape[-1], base)(x, 0)),
    ("attention_book.rope.rotate", lambda x, mask, offset, base: rotate(x, torch.ones(x.shape[-1] // 2),
                                                                          torch.zeros(x.shape[-1] // 2)))])
def test_the_padded_rope_check_refuses_the_package_rope(refused, call):
    message = fails(checks.check_rope_left_padded, call)
    assert f"calls {refused}" in message and "the exercise is to write that step yourself" in message, message
    assert torch.equal(apply_rope(torch.ones(1, 1, 1, 2), torch.tensor([0])), torch.ones(1, 1, 1, 2))  # restored


def test_a_rope_instance_made_earlier_is_refused_too():
    made_before = Rope(2)

    def with_an_old_rope(x, mask, offset, base=10_000.0):
        return made_before(x, 0)

    assert "calls attention_book.rope.Rope.__call__" in fails(checks.check_rope_left_padded, with_an_old_rope)
    assert made_before(torch.ones(1, 1, 1, 2), 0).shape == (1, 1, 1, 2)  # restored


# chapter 11: a fused projection back to pairs

def qkv_values_too(weight, n_heads, n_kv_heads):
    d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
    return weight.reshape(-1, 2, d_head // 2, weight.shape[1]).transpose(1, 2).reshape(weight.shape)


def qkv_the_other_way(weight, n_heads, n_kv_heads):
    d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
    n_qk = (n_heads + n_kv_heads) * d_head
    qk = weight[:n_qk].reshape(-1, d_head // 2, 2, weight.shape[1]).transpose(1, 2).reshape(n_qk, -1)
    return torch.cat((qk, weight[n_qk:]))


@pytest.mark.parametrize("answer, named", [(qkv_values_too, "the values' rows were reordered too"),
                                           (qkv_the_other_way, "the other direction")])
def test_a_wrong_qkv_reorder_gets_its_mistake(answer, named):
    message = fails(checks.check_qkv_to_pairs, answer)
    assert "Likely mistake: " in message and named in message, message


def test_the_qkv_check_refuses_what_the_exercise_says_not_to_call():
    def with_halves_order(weight, n_heads, n_kv_heads):
        d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
        back = torch.argsort(halves_order(d_head))
        n_qk = (n_heads + n_kv_heads) * d_head
        return torch.cat((weight[:n_qk].reshape(-1, d_head, weight.shape[1])[:, back].reshape(n_qk, -1),
                          weight[n_qk:]))

    message = fails(checks.check_qkv_to_pairs, with_halves_order)
    assert "calls attention_book.rope.halves_order, which the exercise says not to call" in message, message


# chapter 12: a matrix-vector product from Q4_1 bytes

def matvec_reading(order="low first", swap=False, without_m=False, signed=False):
    def q4_1_matvec(raw, x):
        blocks = raw.reshape(raw.shape[0], -1, 20)
        d, m = (blocks[..., s:s + 2].contiguous().view(torch.float16).float() for s in (0, 2))
        d, m = (m, d) if swap else (d, m)
        low, high = blocks[..., 4:] & 0x0F, blocks[..., 4:] >> 4
        if order == "interleaved":
            q = torch.stack((low, high), dim=-1).flatten(-2)
        else:
            q = torch.cat((low, high) if order == "low first" else (high, low), dim=-1)
        q = q.float() - (8 if signed else 0)
        return (d * q + (0 if without_m else m)).reshape(raw.shape[0], -1) @ x
    return q4_1_matvec


def matvec_adding_m_once(raw, x):
    blocks = raw.reshape(raw.shape[0], -1, 20)
    d, m = (blocks[..., s:s + 2].contiguous().view(torch.float16).float()[..., 0] for s in (0, 2))
    q = torch.cat((blocks[..., 4:] & 0x0F, blocks[..., 4:] >> 4), dim=-1).float()
    return (d * (q * x.reshape(-1, 32)).sum(-1) + m).sum(-1)


@pytest.mark.parametrize("answer, named", [
    (matvec_reading("interleaved"), "byte j was read as numbers 2j and 2j + 1"),
    (matvec_reading("high first"), "the low ones come first"),
    (matvec_reading(swap=True), "d and m were swapped"),
    (matvec_reading(without_m=True), "the minimum m was left out"),
    (matvec_adding_m_once, "m was added once per block"),
    (matvec_reading(signed=True), "read as signed")])
def test_a_wrong_q4_1_reading_gets_its_mistake(answer, named):
    message = fails(checks.check_q4_1_matvec, answer)
    assert "Likely mistake: " in message and named in message, message


def test_the_q4_1_check_refuses_the_package_private_numbers_too():
    def with_numbers(raw, x):
        return _numbers(raw.reshape(-1), "Q4_1").view(raw.shape[0], -1) @ x

    message = fails(checks.check_q4_1_matvec, with_numbers)
    assert "calls attention_book.llama.dequantize._numbers" in message, message


def test_the_q4_1_check_refuses_gguf():
    quants = pytest.importorskip("gguf.quants")
    import gguf

    def with_gguf(raw, x):
        numbers = quants.dequantize(raw.numpy(), gguf.GGMLQuantizationType.Q4_1)
        return torch.from_numpy(numbers).reshape(raw.shape[0], -1) @ x

    assert "calls gguf.quants.dequantize" in fails(checks.check_q4_1_matvec, with_gguf)


# chapter 12: quantising to Q4_1

def quantizer(order="low first", swap=False, levels=15, rounding=torch.round):
    def quantize_q4_1(w):
        blocks = w.reshape(w.shape[0], -1, 32)
        low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
        d = (high - low) / levels
        q = rounding((blocks - low) / torch.where(d == 0, 1.0, d)).clamp(0, 15).to(torch.uint8)
        if order == "interleaved":
            packed = q[..., 0::2] | (q[..., 1::2] << 4)
        elif order == "high first":
            packed = q[..., 16:] | (q[..., :16] << 4)
        else:
            packed = q[..., :16] | (q[..., 16:] << 4)
        scale_min = torch.cat((low, d) if swap else (d, low), dim=-1).half().view(torch.uint8)
        return torch.cat((scale_min, packed), dim=-1).reshape(w.shape[0], -1)
    return quantize_q4_1


@pytest.mark.parametrize("answer, named", [
    (quantizer("interleaved"), "numbers 2j and 2j + 1 went into byte j"),
    (quantizer("high first"), "the low ones come first"),
    (quantizer(swap=True), "d and m were stored the other way round"),
    (quantizer(levels=16), "16 levels have 15 steps"),
    (quantizer(rounding=torch.floor), "rounded down")])
def test_a_wrong_quantiser_gets_its_mistake(answer, named):
    message = fails(checks.check_quantize_q4_1, answer)
    assert "Likely mistake: " in message and named in message, message


def test_the_quantiser_check_says_which_number_came_back_wrong():
    def all_zero(w):
        return torch.zeros(w.shape[0], w.shape[1] // 32 * 20, dtype=torch.uint8)

    message = fails(checks.check_quantize_q4_1, all_zero)
    assert message.startswith("your quantize_q4_1 on w of shape (1, 32): number (0, ") and "is allowed" in message
    assert "expected a uint8 tensor of shape (1, 20)" in fails(checks.check_quantize_q4_1,
                                                               lambda w: quantizer()(w).to(torch.int8))


def test_nan_turned_into_integers_on_a_block_of_equal_numbers_fails():
    """1 / d with d = 0 on a block of equal numbers: 0 * inf is NaN, and NaN as uint8 is not defined (0 on some
    machines, so the bytes may even come out right)."""
    def unguarded(w):
        blocks = w.reshape(w.shape[0], -1, 32)
        low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
        d = (high - low) / 15
        q = ((blocks - low) * (1 / d)).round().clamp(0, 15).to(torch.uint8)
        packed = q[..., :16] | (q[..., 16:] << 4)
        return torch.cat((torch.cat((d, low), -1).half().view(torch.uint8), packed), -1).reshape(w.shape[0], -1)

    message = fails(checks.check_quantize_q4_1, unguarded)
    assert "(2, 64) (row 1, numbers 32 to 63: a block of 32 equal numbers" in message, message
    assert "it turned NaN or inf into integers" in message, message


def test_nan_replaced_before_the_conversion_passes():
    def where_after_dividing(w):
        blocks = w.reshape(w.shape[0], -1, 32)
        low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
        d = (high - low) / 15
        q = torch.where(d == 0, 0.0, (blocks - low) / d).round().clamp(0, 15).to(torch.uint8)
        packed = q[..., :16] | (q[..., 16:] << 4)
        return torch.cat((torch.cat((d, low), -1).half().view(torch.uint8), packed), -1).reshape(w.shape[0], -1)

    passes(checks.check_quantize_q4_1, where_after_dividing)


def test_the_quantiser_check_refuses_gguf():
    quants = pytest.importorskip("gguf.quants")
    import gguf

    def with_gguf(w):
        return torch.from_numpy(quants.quantize(w.numpy(), gguf.GGMLQuantizationType.Q4_1))

    message = fails(checks.check_quantize_q4_1, with_gguf)
    assert "calls gguf.quants.quantize" in message and "the exercise is to write that step yourself" in message


@pytest.mark.parametrize("chapter, listed, check, answer", [
    ("11_rope", "rotate", checks.check_rope_left_padded,
     "def answer(x, mask, offset, base=10_000.0):\n    return rotate(x, torch.ones(1), torch.zeros(1))\n"),
    ("12_real_llm", "_numbers", checks.check_q4_1_matvec,
     "def answer(raw, x):\n    return _numbers(raw.reshape(-1), 'Q4_1').view(raw.shape[0], -1) @ x\n")])
def test_the_copy_a_listing_defines_in_the_notebook_is_refused_too(chapter, listed, check, answer):
    """A package-source cell defines the package's function in the notebook as well: calling that copy is calling
    the package's solution."""
    nb = nbformat.read(ROOT / "book" / f"{chapter}.ipynb", as_version=4)
    cell, = [c for c in nb.cells if "package-source" in c.metadata.get("tags", []) and f"def {listed}(" in c.source]
    namespace = {}
    exec(compile(cell.source, chapter, "exec"), namespace)
    exec(answer, namespace)
    assert f".{listed}, the package's own solution of this step" in fails(check, namespace["answer"])
    assert namespace[listed].__code__.co_filename == chapter  # the notebook's copy is back in place


def matvec_through_fp32_w(raw, x):
    """Right, but the way section 1's listing reads Q4_1: the whole of W in fp32 first, then W @ x."""
    blocks = raw.reshape(-1, 20)
    d, m = (blocks[:, s:s + 2].contiguous().view(torch.float16).float() for s in (0, 2))
    q = torch.cat((blocks[:, 4:] & 0x0F, blocks[:, 4:] >> 4), dim=-1)
    return (d * q + m).reshape(raw.shape[0], -1) @ x


def matvec_rows_at_a_time(rows):
    """Right, the factored product d (q . x_b) + m (sum of x_b) on ``rows`` rows of W at a time."""
    def q4_1_matvec(raw, x):
        parts = []
        for chunk in raw.split(rows):
            blocks = chunk.reshape(chunk.shape[0], -1, 20)
            d, m = (blocks[..., s:s + 2].contiguous().view(torch.float16).float()[..., 0] for s in (0, 2))
            q = torch.cat((blocks[..., 4:] & 0x0F, blocks[..., 4:] >> 4), dim=-1).float()
            x_blocks = x.reshape(-1, 32)
            parts.append((d * (q * x_blocks).sum(-1) + m * x_blocks.sum(-1)).sum(-1))
        return torch.cat(parts)
    return q4_1_matvec


def test_the_q4_1_check_fails_an_answer_that_makes_w_in_fp32():
    message = fails(checks.check_q4_1_matvec, matvec_through_fp32_w)
    assert message.startswith("your q4_1_matvec on W (256, 1024) in Q4_1") and "bytes of new tensors at once" in message
    assert "W in fp32 is 1,048,576 bytes: the answer held about that much" in message, message
    assert "fewer" not in message and "loop" not in message  # what is wrong, not how to fix it


def test_the_q4_1_check_counts_the_bytes_of_a_factored_answer_too():
    assert passes(checks.check_q4_1_matvec, matvec_rows_at_a_time(16)).startswith("✓ ")
    message = fails(checks.check_q4_1_matvec, matvec_rows_at_a_time(256))  # the factored form on all of W at once
    assert "not under the 262,144 bytes (N × K, a quarter of W in fp32)" in message, message


def test_a_padded_rope_whose_angles_are_in_bfloat16_is_told_so():
    def angles_in_x_dtype(x, mask, offset, base=10_000.0):
        d_half = x.shape[-1] // 2
        positions = offset[:, None] + mask.long().cumsum(-1) - 1
        angles = positions.to(x.dtype)[:, None, :, None] * (base ** (-torch.arange(d_half) / d_half)).to(x.dtype)
        a, b = x[..., :d_half], x[..., d_half:]
        return torch.cat((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), dim=-1)

    message = fails(checks.check_rope_left_padded, angles_in_x_dtype)
    assert "the angles were computed in bfloat16" in message.split("Likely mistake: ")[1], message


def test_next_positions_as_a_list_is_told_it_is_not_a_tensor():
    fails(checks.check_next_positions, lambda n, new: list(range(n, n + new)), "Likely mistake: a list, not a tensor")


def test_qkv_to_pairs_that_cuts_w_k_into_n_heads_heads_is_told_so():
    def by_query_heads(weight, n_heads, n_kv_heads):
        d_head = weight.shape[0] // (n_heads + 2 * n_kv_heads)
        q, k, v = weight.split([n_heads * d_head, n_kv_heads * d_head, n_kv_heads * d_head])

        def pairs(w, heads):  # each head's first half interleaved with its second
            return w.view(heads, 2, w.shape[0] // heads // 2, -1).transpose(1, 2).reshape(w.shape)
        return torch.cat((pairs(q, n_heads), pairs(k, n_heads), v))

    assert "cut into n_heads heads" in fails(checks.check_qkv_to_pairs, by_query_heads)
