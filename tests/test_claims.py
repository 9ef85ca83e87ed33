"""claim() prints a stable line when a chapter's sentence holds, and says what was measured when it does not."""
import pytest
import torch
from attention_book.experiments.claims import ClaimFailed, claim


def test_a_claim_that_holds_prints_only_the_statement(capsys):
    claim(0.94 > 0.8, "a layer-1 head scores above 0.8 on induction", measured="best 0.94")
    assert capsys.readouterr().out == "✓ a layer-1 head scores above 0.8 on induction\n"


def test_a_claim_accepts_a_one_element_tensor(capsys):
    claim(torch.tensor(True), "the outputs agree")
    assert capsys.readouterr().out == "✓ the outputs agree\n"


def test_a_claim_that_fails_names_the_statement_and_the_measurement(capsys):
    with pytest.raises(ClaimFailed, match=r"claims that MQA is faster, but on this run it does not hold "
                                          r"\(measured: 1.2 ms against 1.1 ms\)"):
        claim(False, "MQA is faster", measured="1.2 ms against 1.1 ms")
    assert capsys.readouterr().out == ""


def test_a_failed_claim_is_an_assertion_error():
    with pytest.raises(AssertionError):
        claim(1 > 2, "one is more than two")


@pytest.mark.parametrize("statement", ["", "   ", None])
def test_a_claim_needs_a_sentence(statement):
    with pytest.raises(ValueError, match="statement must be a non-empty sentence"):
        claim(True, statement)
