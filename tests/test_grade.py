"""The gradebook, ``attention-book grade``: checks record their outcome for the grader, ``--variant`` gives them other
inputs, and each kind of broken submission gets its reason in the CSV and on the learner's feedback page.

The scenario submissions are chapter 1's student version with cells changed as a learner (or Colab) would change
them; they are graded in one ``attention-book grade`` call (marker notebook: each runs in a kernel)."""
import contextlib
import copy
import csv
import io
import json
import subprocess
import sys

import attention_book.checks as checks
import nbformat
import pytest
import torch
from attention_book.checks import CheckFailed
from attention_book.checks._compare import _generator, _seed
from attention_book.grading import assignment as assignments
from attention_book.grading import cli, results
from attention_book.grading.report import feedback_page, reasons, write_csv
from attention_book.grading.run import ExerciseGrade, SubmissionGrade
from attention_book.grading.submission import find_answers, other_chapter
from conftest import ROOT

STUDENT, BOOK = ROOT / "student" / "01_single_head.ipynb", ROOT / "book" / "01_single_head.ipynb"


@pytest.fixture
def recording(tmp_path, monkeypatch):
    """The file the checks record to while the test runs (the public inputs: no variant)."""
    path = tmp_path / "results.jsonl"
    monkeypatch.setenv(results.RESULTS_VARIABLE, str(path))
    monkeypatch.delenv(results.VARIANT_VARIABLE, raising=False)
    return path


def run_check(check, answer):
    """What ``check(answer)`` printed, and the error it raised (or None)."""
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        try:
            check(answer)
        except Exception as error:  # the test looks at what it was
            return shown.getvalue(), error
    return shown.getvalue(), None


def manual_softmax(x):
    exps = (x - x.amax(dim=-1, keepdim=True)).exp()
    return exps / exps.sum(dim=-1, keepdim=True)


def not_written(*args):
    raise NotImplementedError("write the body of not_written()")


def calls_torch(x):
    return torch.softmax(x, dim=-1)


def wrong(x):
    return x.exp() / x.exp().sum(dim=-1, keepdim=True) * 2


def breaks(x):
    return x.nonexistent


def test_each_check_run_records_its_outcome_and_message(recording):
    for answer in (manual_softmax, not_written, calls_torch, wrong, breaks):
        run_check(checks.check_stable_softmax, answer)
    recorded = results.read_results(recording)
    assert [(r.check, r.exercise) for r in recorded] == [("check_stable_softmax", "stable_softmax")] * 5
    assert [(r.passed, r.outcome) for r in recorded] == [
        (True, results.PASSED), (False, results.NOT_WRITTEN), (False, results.REFUSED), (False, results.WRONG),
        (False, results.ERROR)]
    passed, stub, refused, mistaken, error = (r.message for r in recorded)
    assert passed.startswith("✓ stable_softmax matches torch.softmax on 5 inputs")
    assert stub.startswith("not_written is not written yet: return the softmax of x")
    assert refused == ("calls_torch calls torch.softmax, which the exercise says not to call: the exercise is to "
                       "write that step yourself")
    assert mistaken.startswith("stable_softmax on x of shape (1, 7)") and "values differ" in mistaken
    assert error == "AttributeError: 'Tensor' object has no attribute 'nonexistent'"
    assert all(r.variant == 0 and r.seconds >= 0 for r in recorded)


def test_without_the_variable_a_check_records_nothing_and_prints_as_before(tmp_path, monkeypatch):
    monkeypatch.delenv(results.RESULTS_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    shown, error = run_check(checks.check_stable_softmax, manual_softmax)
    assert error is None and shown == ("✓ stable_softmax matches torch.softmax on 5 inputs, including values up to "
                                       "±1000 and rows near -1000.\n")
    shown, error = run_check(checks.check_stable_softmax, not_written)
    assert shown == "" and isinstance(error, CheckFailed) and error.kind == results.NOT_WRITTEN
    assert list(tmp_path.iterdir()) == []


def test_chapter_16s_last_check_is_recorded_under_its_exercise(recording):
    from attention_book.checks.capstone import _tiny_model

    model, weights = _tiny_model(1701)
    _, error = run_check(lambda fn: checks.same_tokens_as_package(fn, weights, model, torch.tensor([[1, 2]]), 3),
                         not_written)
    assert isinstance(error, CheckFailed)
    [result] = results.read_results(recording)
    assert (result.check, result.exercise, result.outcome) == (
        "same_tokens_as_package", "greedy_generate", results.NOT_WRITTEN)


def test_a_line_that_is_not_a_result_is_skipped(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"check": "check_x", "passed": true}\nnot json\n' + json.dumps(
        {"check": "check_f", "exercise": "f", "passed": False, "outcome": "wrong answer", "message": "m",
         "seconds": 0.5, "variant": 2}) + "\n")
    assert results.read_results(path) == [results.CheckResult("check_f", "f", False, "wrong answer", "m", 0.5, 2)]
    assert results.read_results(tmp_path / "missing.jsonl") == []


def test_variant_zero_keeps_the_public_seeds_and_others_move_them(monkeypatch):
    monkeypatch.delenv(results.VARIANT_VARIABLE, raising=False)
    assert [_seed(n) for n in (0, 5, 1712)] == [0, 5, 1712]
    public = torch.randn(4, generator=_generator(5))
    assert torch.equal(public, torch.randn(4, generator=torch.Generator().manual_seed(5)))
    monkeypatch.setenv(results.VARIANT_VARIABLE, "1")
    assert len({_seed(n) for n in (0, 5, 1712)} | {0, 5, 1712}) == 6
    assert not torch.equal(public, torch.randn(4, generator=_generator(5)))
    monkeypatch.setenv(results.VARIANT_VARIABLE, "one")
    with pytest.raises(ValueError, match="ATTENTION_BOOK_CHECK_VARIANT must be an integer.*'one'"):
        _seed(0)


def public_softmax_table():
    """The public inputs that check_stable_softmax tries, and their softmaxes: what an answer could hard-code."""
    table = {}

    def recorder(x):
        table[tuple(x.flatten().tolist())] = manual_softmax(x).tolist()
        return manual_softmax(x)

    recorder.__name__ = "stable_softmax"
    run_check(checks.check_stable_softmax, recorder)
    return table


def hard_coded_answer(table):
    """A stable_softmax cell that looks up the public inputs' outputs and returns zeros for any other input."""
    return (f"import torch\n\n_PUBLIC = {table!r}\n\n\ndef stable_softmax(x):\n"
            "    key = tuple(x.flatten().tolist())\n"
            "    return torch.tensor(_PUBLIC[key]) if key in _PUBLIC else torch.zeros_like(x)\n")


def test_an_answer_that_hard_codes_the_public_outputs_passes_variant_0_only(monkeypatch):
    monkeypatch.delenv(results.VARIANT_VARIABLE, raising=False)
    monkeypatch.delenv(results.RESULTS_VARIABLE, raising=False)
    namespace = {}
    exec(hard_coded_answer(public_softmax_table()), namespace)
    shown, error = run_check(checks.check_stable_softmax, namespace["stable_softmax"])
    assert error is None and shown.startswith("✓ ")
    monkeypatch.setenv(results.VARIANT_VARIABLE, "1")
    shown, error = run_check(checks.check_stable_softmax, namespace["stable_softmax"])
    assert isinstance(error, CheckFailed) and "values differ" in str(error) and shown == ""


def test_the_shipped_assignments_are_those_of_the_student_versions():
    written = assignments._as_json(assignments.assignments_from_folder(ROOT / "student"))
    assert assignments.DATA.read_text(encoding="utf-8") == written, (
        "code/attention_book/grading/assignments.json is out of date: run python -m attention_book.grading.assignment")


def test_each_exercise_is_graded_by_its_own_check():
    loaded = assignments.load_assignments()
    assert sorted(loaded) == list(range(1, 17))
    for assignment in loaded.values():
        for exercise in assignment.exercises:
            assert getattr(checks, exercise.check).exercise == exercise.name
            assert exercise.name in exercise.defines and f"checks.{exercise.check}({exercise.name})" in (
                exercise.check_cell)
    with pytest.raises(ValueError, match="chapter must be one of the chapters with exercises, 1, 2, .*got 17"):
        assignments.load_assignment(17)


def as_colab_downloads(nb):
    """``nb`` without its cells' metadata (tags included), as a notebook downloaded from Colab may be."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata = {}
    return nb


def replace_cell(nb, name, source):
    """``nb`` with the code cell that defines ``name`` holding ``source`` instead (None: the cell deleted)."""
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and f"def {name}(" in c.source)
    if source is None:
        del nb.cells[index]
    else:
        nb.cells[index].source = source
    return nb


def test_answers_are_found_by_the_functions_their_cells_define():
    assignment = assignments.load_assignment(1)
    nb = as_colab_downloads(nbformat.read(STUDENT, as_version=4))
    nb = replace_cell(nb, "stable_softmax", "def stable_softmax(x):\n    return (x\n")
    nb = replace_cell(nb, "my_causal_mask", None)
    nb.cells.append(nbformat.v4.new_code_cell("%time 1 + 1\ndef my_attention_with_masks(q, k, v, mask=None):\n"
                                              "    return 'the later one'"))
    found = find_answers(nb, assignment)
    assert found["my_causal_mask"] is None
    assert (found["stable_softmax"].line, found["stable_softmax"].syntax_error) == (2, "line 2: '(' was never "
                                                                                       "closed (return (x)")
    assert found["my_attention_with_masks"].cell == len(nb.cells) - 1
    assert found["my_attention_with_masks"].syntax_error is None


def test_in_every_student_version_the_answer_found_is_the_exercise_cell():
    """No other cell of a chapter defines an exercise's function after its exercise cell (the grader takes the
    last cell that defines it)."""
    for assignment in assignments.load_assignments().values():
        nb = nbformat.read(ROOT / "student" / assignment.notebook, as_version=4)
        for name, answer in find_answers(nb, assignment).items():
            assert answer.source == assignment.exercise(name).stub, (
                f"{assignment.notebook}: cell {answer.cell} defines {name} after its exercise cell")


def test_another_chapters_notebook_is_recognised_with_or_without_its_metadata():
    assignment, every = assignments.load_assignment(1), assignments.load_assignments()
    chapter3 = as_colab_downloads(nbformat.read(ROOT / "student" / "03_multi_head.ipynb", as_version=4))
    assert other_chapter(chapter3, assignment, every) == 3
    del chapter3.metadata["attention_book"]
    assert other_chapter(chapter3, assignment, every) == 3
    assert other_chapter(nbformat.read(STUDENT, as_version=4), assignment, every) is None


def test_the_csv_has_a_column_per_exercise_a_total_and_the_reasons(tmp_path):
    def exercise(name, outcome, detail=""):
        return ExerciseGrade(name, f"check_{name}", outcome, f"{name}: {outcome}", float(outcome == results.PASSED),
                             detail=detail)

    grades = [SubmissionGrade("ada.ipynb", 1, [exercise("f", results.PASSED), exercise("g", results.PASSED)]),
              SubmissionGrade("bo.ipynb", 1, [exercise("f", results.SYNTAX_ERROR, "line 3"),
                                              exercise("g", results.WRONG)])]
    rows = write_csv(grades, tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as file:
        assert list(csv.reader(file)) == rows == [
            ["submission", "f", "g", "total", "out_of", "reasons"], ["ada.ipynb", "1", "1", "2", "2", ""],
            ["bo.ipynb", "0", "0", "0", "2", "f: syntax error (line 3); g: wrong answer"]]
    page = feedback_page(grades[1], "One head")
    assert page.startswith("# Chapter 1: One head\n\nFeedback on `bo.ipynb`: **0 of 2**, checked on the checks' "
                           "public inputs.")
    assert "## Exercise 2, `g`: wrong answer (0 of 1)\n\n```text\ng: wrong answer\n```" in page
    assert 'In the chapter\'s notebook, `checks.hint("g")` gives a hint.' in page
    with pytest.raises(ValueError, match="grades is empty"):
        write_csv([], tmp_path / "none.csv")
    assert reasons(SubmissionGrade("x.ipynb", 1, [exercise("f", results.OTHER_CHAPTER)], "not chapter 1")) == (
        "not chapter 1")


def test_the_command_names_the_chapters_it_can_grade(capsys):
    assert cli.main(["grade", "--chapter", "0", "x.ipynb"]) == 2
    assert "chapter must be one of the chapters with exercises, 1, 2, 3" in capsys.readouterr().err
    shown = subprocess.run([sys.executable, "-m", "attention_book.grading", "grade", "--help"], capture_output=True,
                           text=True, check=True).stdout
    assert "--variant SEED" in shown and "--feedback DIR" in shown


# The scenarios: file name -> (the learner's change: exercise -> its cell's new source, None to delete it)
WRONG_MASK = "def my_causal_mask(L, S):\n    return torch.arange(S)[None, :] <= torch.arange(L)[:, None]\n"
LOOP = "def stable_softmax(x):\n    while True:\n        pass\n"
CALLS_THE_PACKAGE = ("from attention_book.sdpa import scaled_dot_product_attention\n\n\n"
                     "def my_attention_with_masks(q, k, v, mask=None):\n"
                     "    return scaled_dot_product_attention(q, k, v, mask)\n")
RAISES = "def my_attention_with_masks(q, k, v, mask=None):\n    return q\n\n\nprint(undefined_name)\n"
SCENARIOS = {"correct.ipynb": {}, "wrong.ipynb": {"my_causal_mask": WRONG_MASK}, "loop.ipynb": {"stable_softmax": LOOP},
             "solution.ipynb": {"my_attention_with_masks": CALLS_THE_PACKAGE},
             "deleted.ipynb": {"my_causal_mask": None, "my_attention_with_masks": RAISES}}


def model_solutions():
    """{exercise: its cell in the chapter, the model solution}."""
    return {name: c.source for c in nbformat.read(BOOK, as_version=4).cells
            if "exercise" in c.metadata.get("tags", []) for name in assignments.defined_names(c.source)}


def unclosed_softmax():
    """The model stable_softmax with a parenthesis opened on its return line and never closed."""
    return model_solutions()["stable_softmax"].replace("return ", "return (", 1)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every scenario graded in one ``attention-book grade --variant 1`` call: (its printed lines, the CSV's rows by
    submission, the feedback pages by submission)."""
    folder = tmp_path_factory.mktemp("grade")
    student = as_colab_downloads(nbformat.read(STUDENT, as_version=4))
    solutions = model_solutions()
    correct = student
    for name, source in solutions.items():
        correct = replace_cell(correct, name, source)
    submissions = {name: correct for name in SCENARIOS}
    for name, changes in SCENARIOS.items():
        for exercise, source in changes.items():
            submissions[name] = replace_cell(submissions[name], exercise, source)
    submissions["unchanged.ipynb"] = student
    submissions["syntax.ipynb"] = replace_cell(correct, "stable_softmax", unclosed_softmax())
    submissions["hard_coded.ipynb"] = replace_cell(correct, "stable_softmax", hard_coded_answer(public_softmax_table()))
    submissions["chapter3.ipynb"] = as_colab_downloads(nbformat.read(ROOT / "student" / "03_multi_head.ipynb",
                                                                     as_version=4))
    paths = []
    for name, nb in submissions.items():
        nbformat.write(nb, folder / name)
        paths.append(str(folder / name))
    (folder / "broken.ipynb").write_text("{not json")
    paths.append(str(folder / "broken.ipynb"))
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        status = cli.main(["grade", "--chapter", "1", *paths, "--csv", str(folder / "grades.csv"), "--feedback",
                           str(folder / "feedback"), "--variant", "1", "--cell-timeout", "15", "--jobs", "2"])
    assert status == 0, shown.getvalue()
    with open(folder / "grades.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    pages = {p.stem + ".ipynb": p.read_text() for p in (folder / "feedback").iterdir()}
    return shown.getvalue(), {row["submission"]: row for row in rows}, pages


def points(row):
    return [row[name] for name in ("stable_softmax", "my_causal_mask", "my_attention_with_masks", "total", "out_of")]


@pytest.mark.notebook
def test_grading_a_correct_and_an_unchanged_notebook(graded):
    shown, rows, pages = graded
    assert list(rows)[:2] == ["correct.ipynb", "wrong.ipynb"] and len(rows) == len(pages) == 10
    assert points(rows["correct.ipynb"]) == ["1", "1", "1", "3", "3"] and rows["correct.ipynb"]["reasons"] == ""
    assert "correct.ipynb: 3 of 3\n" in shown
    assert "checked on variant 1 of the checks' inputs" in pages["correct.ipynb"]
    assert "✓ your causal mask matches attention_book.causal_mask" in pages["correct.ipynb"]
    assert points(rows["unchanged.ipynb"]) == ["0", "0", "0", "0", "3"]
    assert rows["unchanged.ipynb"]["reasons"] == ("stable_softmax: not written yet; my_causal_mask: not written yet; "
                                                  "my_attention_with_masks: not written yet")
    assert "stable_softmax is not written yet: return the softmax of x" in pages["unchanged.ipynb"]


@pytest.mark.notebook
def test_grading_a_wrong_answer_and_one_that_calls_the_packages_solution(graded):
    _, rows, pages = graded
    assert points(rows["wrong.ipynb"]) == ["1", "0", "1", "2", "3"]
    assert rows["wrong.ipynb"]["reasons"] == "my_causal_mask: wrong answer"
    assert "Likely mistake: the mask is aligned top-left" in pages["wrong.ipynb"]
    assert points(rows["solution.ipynb"]) == ["1", "1", "0", "2", "3"]
    assert rows["solution.ipynb"]["reasons"] == "my_attention_with_masks: calls a function it may not"
    assert ("my_attention_with_masks calls attention_book.sdpa.scaled_dot_product_attention, the package's own "
            "solution of this step") in pages["solution.ipynb"]


@pytest.mark.notebook
def test_grading_a_syntax_error_an_infinite_loop_a_deleted_cell_and_one_that_raises(graded):
    _, rows, pages = graded
    assert points(rows["syntax.ipynb"]) == ["0", "1", "1", "2", "3"]
    line = next(n for n, text in enumerate(unclosed_softmax().splitlines(), start=1) if "return (" in text)
    assert rows["syntax.ipynb"]["reasons"] == f"stable_softmax: syntax error (line {line})"
    assert f"has a syntax error, line {line}: '(' was never closed" in pages["syntax.ipynb"]
    assert points(rows["loop.ipynb"]) == ["0", "1", "1", "2", "3"]
    assert rows["loop.ipynb"]["reasons"] == "stable_softmax: time limit (15 s)"
    assert "the check did not finish within 15 s: does stable_softmax loop forever" in pages["loop.ipynb"]
    assert points(rows["deleted.ipynb"]) == ["1", "0", "0", "1", "3"]
    assert rows["deleted.ipynb"]["reasons"] == ("my_causal_mask: answer cell missing; my_attention_with_masks: error "
                                                "(NameError)")
    assert "no code cell defines my_causal_mask" in pages["deleted.ipynb"]
    assert ("your cell that defines my_attention_with_masks raised NameError: name 'undefined_name' is not defined"
            in pages["deleted.ipynb"])


@pytest.mark.notebook
def test_grading_another_chapter_a_broken_file_and_a_hard_coded_answer(graded):
    _, rows, pages = graded
    assert points(rows["chapter3.ipynb"]) == ["0", "0", "0", "0", "3"]
    assert rows["chapter3.ipynb"]["reasons"] == ("this is chapter 3's notebook (Multi-head attention), not chapter "
                                                 "1's: grade it with --chapter 3")
    assert points(rows["broken.ipynb"]) == ["0", "0", "0", "0", "3"]
    assert rows["broken.ipynb"]["reasons"].startswith("broken.ipynb is not a notebook that can be read")
    assert points(rows["hard_coded.ipynb"]) == ["0", "1", "1", "2", "3"]  # passes variant 0 (the test above)
    assert rows["hard_coded.ipynb"]["reasons"] == "stable_softmax: wrong answer"
