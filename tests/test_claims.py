"""claim() prints a stable line when a chapter's sentence holds. When it does not: on a reader's run it prints ✗, what
was measured and what to do, and the notebook goes on; in the tests (strict, tests/conftest.py) it raises."""
import nbformat
import pytest
import torch
from attention_book.experiments.claims import STRICT, WHAT_TO_DO, ClaimFailed, claim, strict
from nbclient import NotebookClient


@pytest.fixture
def readers_run(monkeypatch):
    """Claims as a reader's run has them: not strict."""
    monkeypatch.delenv(STRICT, raising=False)


def test_the_tests_make_claims_strict():
    assert strict()


def test_a_claim_that_holds_prints_only_the_statement(capsys):
    claim(0.94 > 0.8, "a layer-1 head scores above 0.8 on induction", measured="best 0.94")
    assert capsys.readouterr().out == "✓ a layer-1 head scores above 0.8 on induction\n"


def test_a_claim_accepts_a_one_element_tensor(capsys):
    claim(torch.tensor(True), "the outputs agree")
    assert capsys.readouterr().out == "✓ the outputs agree\n"


def test_a_strict_claim_that_fails_names_the_statement_and_the_measurement(capsys):
    with pytest.raises(ClaimFailed, match=r"claims that MQA is faster, but on this run it does not hold "
                                          r"\(measured: 1.2 ms against 1.1 ms\)"):
        claim(False, "MQA is faster", measured="1.2 ms against 1.1 ms")
    assert capsys.readouterr().out == ""


def test_a_failed_strict_claim_is_an_assertion_error():
    with pytest.raises(AssertionError):
        claim(1 > 2, "one is more than two")


def test_on_a_readers_run_a_failed_claim_prints_a_cross_the_measurement_and_what_to_do(readers_run, capsys):
    assert claim(False, "MQA is faster", measured="1.2 ms against 1.1 ms") is None
    out = capsys.readouterr().out
    assert out.splitlines() == ["✗ MQA is faster", "  On this run it does not hold (measured: 1.2 ms against 1.1 ms).",
                                f"  {WHAT_TO_DO}"]
    assert "run this cell" in WHAT_TO_DO and "report it" in WHAT_TO_DO  # a timing: again; otherwise: report


@pytest.mark.parametrize("value", ["", "0"])
def test_only_a_set_variable_makes_claims_strict(monkeypatch, value):
    monkeypatch.setenv(STRICT, value)
    assert not strict()


def test_a_notebook_runs_on_past_a_claim_that_does_not_hold(readers_run):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from attention_book.experiments.claims import claim\n"
                                  "claim(1 > 2, 'one is more than two', measured='1 and 2')"),
        nbformat.v4.new_code_cell("print('the next cell ran')")])
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    first, second = ("".join(o.get("text", "") for o in cell.outputs) for cell in nb.cells)
    assert first.startswith("✗ one is more than two\n  On this run it does not hold (measured: 1 and 2).")
    assert second == "the next cell ran\n"


@pytest.mark.parametrize("statement", ["", "   ", None])
def test_a_claim_needs_a_sentence(statement):
    with pytest.raises(ValueError, match="statement must be a non-empty sentence"):
        claim(True, statement)
