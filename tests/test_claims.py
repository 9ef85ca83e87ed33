"""claim() prints a stable line when a chapter's sentence holds. When it does not: on a reader's run it prints ✗, what
was measured and what to do (rerun a timing claim; report any other), and the notebook goes on; in the tests (strict,
tests/conftest.py) it raises. Every chapter marks its timing claims."""
import ast
import re

import nbformat
import pytest
import torch
import yaml
from attention_book.experiments.claims import (
    REPORT_FAILURE,
    REPOSITORY_URL,
    RERUN_TIMING,
    STRICT,
    ClaimFailed,
    claim,
    strict,
)
from conftest import ROOT, chapter_paths
from nbclient import NotebookClient

from book import is_claim_cell


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


def test_on_a_readers_run_a_failed_claim_prints_a_cross_the_measurement_and_how_to_report_it(readers_run, capsys):
    assert claim(False, "the outputs agree", measured="diff 0.3") is None
    out = capsys.readouterr().out
    assert out.splitlines() == ["✗ the outputs agree", "  On this run it does not hold (measured: diff 0.3).",
                                f"  {REPORT_FAILURE}"]
    assert f"report it at {REPOSITORY_URL}/issues" in REPORT_FAILURE and "rerun" not in REPORT_FAILURE


def test_on_a_readers_run_a_failed_timing_claim_says_to_rerun_it(readers_run, capsys):
    assert claim(False, "MQA is faster", measured="1.2 ms against 1.1 ms", timing=True) is None
    out = capsys.readouterr().out
    assert out.splitlines() == ["✗ MQA is faster", "  On this run it does not hold (measured: 1.2 ms against 1.1 ms).",
                                f"  {RERUN_TIMING}"]
    assert "rerun the cell above that measures, then this one" in RERUN_TIMING
    assert "close other programs" not in RERUN_TIMING  # nothing a learner in Colab can do
    assert "report" not in RERUN_TIMING


def test_a_strict_timing_claim_raises_as_any_other():
    with pytest.raises(ClaimFailed, match="claims that MQA is faster"):
        claim(False, "MQA is faster", timing=True)


def test_the_package_reports_to_the_repository_of_config_yml():
    """The package cannot read _config.yml in Colab, so it holds the address; a fork changes both."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert url == REPOSITORY_URL, (f"_config.yml's repository.url is {url}, attention_book.experiments.claims."
                                   f"REPOSITORY_URL {REPOSITORY_URL}: make them the same")


# Words of a sentence about measured seconds, speeds, bandwidths or speedups: such a claim is a timing claim.
TIMING_WORDS = re.compile(r"faster|slower|slows? down|as fast|longer|as long|of the time|take times|adds more time|"
                          r"time grows|\bspeed\b|\brate\b|bandwidth|ridge point|compute ceiling|"
                          r"of (?:a|the) (?:decode )?step\b")


def claim_calls(path):
    """(the claim's sentence as written, whether it is marked timing=True) for each claim() call in the chapter."""
    calls = []
    for cell in nbformat.read(path, as_version=4).cells:
        if not is_claim_cell(cell):
            continue
        source = "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line
                           for line in cell.source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "claim" and len(node.args) > 1:
                timing = any(k.arg == "timing" and getattr(k.value, "value", None) is True for k in node.keywords)
                calls.append((ast.get_source_segment(source, node.args[1]), timing))
    return calls


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name[:2])
def test_a_chapters_timing_claims_and_only_those_are_marked_timing(path):
    calls = claim_calls(path)
    unmarked = [sentence for sentence, timing in calls if TIMING_WORDS.search(sentence) and not timing]
    marked = [sentence for sentence, timing in calls if timing and not TIMING_WORDS.search(sentence)]
    assert unmarked == [], f"{path.name}: claims about a time or speed without timing=True: {unmarked}"
    assert marked == [], f"{path.name}: claims marked timing=True that speak of no time or speed: {marked}"


def test_the_chapters_mark_their_timing_claims():
    counts = {path.name[:2]: sum(timing for _, timing in claim_calls(path)) for path in chapter_paths()}
    assert sum(counts.values()) == 45 and counts["06"] == 13 and counts["04"] == 0, counts


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
