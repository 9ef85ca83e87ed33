"""Chapters 2 and 3: the checks name the mistakes a learner makes in exercises weights_bytes and my_to_torch_mha, and
the weights_bytes check answers the 1 GiB question once the answer is right."""
import pytest
import torch
from attention_book import checks
from attention_book.checks import CheckFailed


def weights_bytes_as_a_count(B, h, L, S, dtype):
    return B * h * L * S


def weights_bytes_always_fp32(B, h, L, S, dtype):
    return B * h * L * S * 4


def weights_bytes_in_bits(B, h, L, S, dtype):
    return B * h * L * S * torch.finfo(dtype).bits


def my_to_torch_mha_transposed(layer):
    mha = torch.nn.MultiheadAttention(layer.d_model, layer.n_heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([p.weight.T for p in (layer.q_proj, layer.k_proj, layer.v_proj)]))
        mha.in_proj_bias.copy_(torch.cat([p.bias for p in (layer.q_proj, layer.k_proj, layer.v_proj)]))
        mha.out_proj.weight.copy_(layer.o_proj.weight)
        mha.out_proj.bias.copy_(layer.o_proj.bias)
    return mha


@pytest.mark.parametrize("check, mistaken, named", [
    (checks.check_weights_bytes, weights_bytes_as_a_count, "that is the number of weights"),
    (checks.check_weights_bytes, weights_bytes_always_fp32, "4 bytes per weight"),
    (checks.check_weights_bytes, weights_bytes_in_bits, "that counts bits, not bytes"),
    (checks.check_to_torch_mha, my_to_torch_mha_transposed, "transposed weights"),
])
def test_named(check, mistaken, named):
    with pytest.raises(CheckFailed) as error:
        check(mistaken)
    message = str(error.value)
    assert f"Likely mistake: {named}" in message, message


def test_other_wrong_answers_are_pointed_to_the_hint_not_given_the_method():
    with pytest.raises(CheckFailed) as error:
        checks.check_weights_bytes(lambda B, h, L, S, dtype: B * h * L * S * 3)
    assert 'checks.hint("weights_bytes") gives a hint' in str(error.value)
    assert "finfo" not in str(error.value)


def test_the_check_prints_the_answer_to_the_question(capsys):
    checks.check_weights_bytes(lambda B, h, L, S, dtype: B * h * L * S * torch.empty((), dtype=dtype).element_size())
    assert "up to L = 23,170" in capsys.readouterr().out
    assert 23170**2 * 2 <= 2**30 < 23171**2 * 2
