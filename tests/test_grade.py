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
import time
import types

import attention_book.checks as checks
import nbformat
import pytest
import torch
from attention_book.checks import CheckFailed
from attention_book.checks._compare import _generator, _seed
from attention_book.grading import assignment as assignments
from attention_book.grading import cli, results, run
from attention_book.grading.report import feedback_page, reasons, write_csv, write_feedback
from attention_book.grading.run import ExerciseGrade, SubmissionGrade
from attention_book.grading.submission import Answer, find_answers, other_chapter
from conftest import ROOT
from exercise_answers import answered, model_answers

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
    assert results.read_results(path) == [results.CheckResult("check_f", "f", "wrong answer", "m", 0.5, 2)]
    assert results.read_results(tmp_path / "missing.jsonl") == []


def test_variant_zero_keeps_the_public_seeds_and_others_move_them(monkeypatch):
    monkeypatch.delenv(results.VARIANT_VARIABLE, raising=False)
    assert [_seed(n) for n in (0, 5, 1712)] == [0, 5, 1712]
    public = torch.randn(4, generator=_generator(5))
    assert torch.equal(public, torch.randn(4, generator=torch.Generator().manual_seed(5)))
    monkeypatch.setenv(results.VARIANT_VARIABLE, "1")
    assert len({_seed(n) for n in (0, 5, 1712)} | {0, 5, 1712}) == 6
    assert not torch.equal(public, torch.randn(4, generator=_generator(5)))
    for wrong in ("one", "-1", str(results.MAX_VARIANT + 1)):
        monkeypatch.setenv(results.VARIANT_VARIABLE, wrong)
        with pytest.raises(ValueError, match=f"ATTENTION_BOOK_CHECK_VARIANT must be a whole number from 0 to "
                                             f"1,000,000 .*got '{wrong}'"):
            _seed(0)


def test_the_variant_option_says_its_rule(capsys, monkeypatch):
    for wrong in ("-1", "10000000000000000000", "1.5"):
        with pytest.raises(SystemExit) as stopped:
            cli.main(["grade", "--chapter", "1", "x.ipynb", "--variant", wrong])
        assert stopped.value.code == 2
        assert (f"argument --variant: --variant must be a whole number from 0 to 1,000,000 (the variant of the "
                f"checks' inputs; 0 gives the public ones), got '{wrong}'") in capsys.readouterr().err
    monkeypatch.setenv(results.VARIANT_VARIABLE, str(results.MAX_VARIANT))  # the largest one still seeds torch
    from attention_book.checks._compare import _seeded

    with _seeded(10_000):
        torch.randn(1)
    _generator(10_000)


def test_the_checks_seed_the_cpu_generator_only_and_give_it_back(monkeypatch):
    from attention_book.checks._compare import _seeded

    monkeypatch.delenv(results.VARIANT_VARIABLE, raising=False)
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    with _seeded(7):
        drawn = torch.randn(3)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert torch.equal(drawn, torch.randn(3, generator=torch.Generator().manual_seed(7)))


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
            assert exercise.name in assignments.defined_names(exercise.stub)
            assert f"checks.{exercise.check}({exercise.name})" in exercise.check_cell
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


def test_the_csv_has_a_column_per_exercise_a_total_the_variant_and_the_reasons(tmp_path):
    def exercise(name, outcome, detail=""):
        return ExerciseGrade(name, f"check_{name}", outcome, f"{name}: {outcome}", detail=detail)

    grades = [SubmissionGrade("ada.ipynb", 1, [exercise("f", results.PASSED), exercise("g", results.PASSED)], None, 3),
              SubmissionGrade("bo.ipynb", 1, [exercise("f", results.SYNTAX_ERROR, "line 3"),
                                              exercise("g", results.WRONG)], None, 3)]
    rows = write_csv(grades, tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as file:
        assert list(csv.reader(file)) == rows == [
            ["submission", "f", "g", "total", "out_of", "variant", "reasons"],
            ["ada.ipynb", "1", "1", "2", "2", "3", ""],
            ["bo.ipynb", "0", "0", "0", "2", "3", "f: syntax error (line 3); g: wrong answer"]]
    page = feedback_page(grades[1], "One head")
    assert page.startswith("# Chapter 1: One head\n\nFeedback on `bo.ipynb`: **0 of 2**, checked on variant 3 of the "
                           "checks' inputs.")
    assert "## Exercise 2, `g`: wrong answer (0 of 1)\n\n```text\ng: wrong answer\n```" in page
    assert 'In the chapter\'s notebook, `checks.hint("g")` gives a hint.' in page
    with pytest.raises(ValueError, match="grades is empty"):
        write_csv([], tmp_path / "none.csv")
    other = SubmissionGrade("x.ipynb", 1, [exercise("f", results.OTHER_CHAPTER)], "not chapter 1")
    assert reasons(other) == "not chapter 1"
    assert feedback_page(other) == ("# Chapter 1\n\nFeedback on `x.ipynb`: **0 of 1**, checked on the checks' public "
                                    "inputs.\n\nNothing was graded: not chapter 1.\n")


def test_chapter_16_grades_the_whole_decoder_as_one_more_column_worth_its_nbgrader_points(tmp_path):
    assignment = assignments.load_assignment(16)
    nb = nbformat.read(ROOT / "student" / assignment.notebook, as_version=4)
    uses = [c for c in nb.cells if "uses-exercises" in c.metadata.get("tags", [])]
    assert assignment.combined_checks == (assignments.CombinedCheck("same_tokens_as_package", "greedy_generate", 12.0),)
    assert uses[0].metadata.nbgrader.points == len(assignment.exercises) == 12
    assert assignment.after_exercises[-len(uses):] == tuple(c.source for c in uses)
    inputs = assignment.after_exercises[:-len(uses)]  # the chapter's cells that load the model and make the prompt
    assert any("model = load_llama(" in source for source in inputs)
    assert any("prompt = chat_ids(" in source for source in inputs)
    learners = {e.stub for e in assignment.exercises} | {e.check_cell for e in assignment.exercises}
    assert not learners & set(assignment.after_exercises) and assignment.imports not in assignment.after_exercises
    assert assignments.load_assignment(1).after_exercises == assignments.load_assignment(1).combined_checks == ()
    grade = SubmissionGrade("ada.ipynb", 16, run.ungraded(assignment, results.NOT_WRITTEN, "not written"))
    header, row = write_csv([grade], tmp_path / "grades.csv")
    assert header == ["submission", *(e.name for e in assignment.exercises), "same_tokens_as_package", "total",
                      "out_of", "variant", "reasons"]
    assert row[-5:-1] == ["0", "0", "24", "0"]
    page = feedback_page(grade)
    assert "## Exercise 12, `greedy_generate`: not written yet (0 of 1)" in page
    assert "## Your functions together, `checks.same_tokens_as_package`: not written yet (0 of 12)" in page
    assert 'checks.hint("same_tokens_as_package")' not in page


def test_learners_folders_name_their_rows_and_feedback_pages(tmp_path):
    paths = [tmp_path / "ada" / "03_multi_head.ipynb", tmp_path / "ben" / "03_multi_head.ipynb"]
    assert cli.submission_names(paths) == ["ada/03_multi_head.ipynb", "ben/03_multi_head.ipynb"]
    assert cli.submission_names([tmp_path / "a.ipynb", tmp_path / "b.ipynb"]) == ["a.ipynb", "b.ipynb"]
    grades = [SubmissionGrade(name, 3, []) for name in cli.submission_names(paths)]
    assert write_feedback(grades, tmp_path / "feedback") == [tmp_path / "feedback" / "ada" / "03_multi_head.md",
                                                              tmp_path / "feedback" / "ben" / "03_multi_head.md"]
    assert "Feedback on `ben/03_multi_head.ipynb`" in (tmp_path / "feedback" / "ben" / "03_multi_head.md").read_text()


def test_a_submission_the_grader_fails_on_still_gets_its_row(tmp_path, monkeypatch, capsys):
    """No submission stops the batch: a cell without a source is read as an empty cell, a file whose cells are not
    cells gets its reason, and an error of the grader itself on one file gets a row that says so."""
    nb = nbformat.read(STUDENT, as_version=4)
    del nb.cells[next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")]["source"]
    assert find_answers(nb, assignments.load_assignment(1))["stable_softmax"].source == (
        assignments.load_assignment(1).exercise("stable_softmax").stub)
    (tmp_path / "cells.ipynb").write_text(json.dumps({"cells": ["print(1)"], "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    (tmp_path / "fine.ipynb").write_text("{}")
    (tmp_path / "crash.ipynb").write_text("{}")
    grade_submission = run.grade_submission

    def grade_or_crash(path, assignment, **options):
        if path.name == "crash.ipynb":
            raise RuntimeError("a bug in the grader")
        if path.name == "fine.ipynb":
            return SubmissionGrade(options["name"], 1, run.ungraded(assignment, results.PASSED, "✓"))
        return grade_submission(path, assignment, **options)

    monkeypatch.setattr(run, "grade_submission", grade_or_crash)
    assert cli.main(["grade", "--chapter", "1", str(tmp_path), "--csv", str(tmp_path / "grades.csv")]) == 0
    with open(tmp_path / "grades.csv", newline="") as file:
        rows = {row["submission"]: row for row in csv.DictReader(file)}
    assert list(rows) == ["cells.ipynb", "crash.ipynb", "fine.ipynb"] and rows["fine.ipynb"]["total"] == "3"
    assert rows["cells.ipynb"]["reasons"].startswith("cells.ipynb is not a notebook that can be read (")
    assert rows["crash.ipynb"]["reasons"] == ("the grader failed on this submission (RuntimeError: a bug in the "
                                              "grader); the others were graded")
    assert "crash.ipynb: 0 of 3; the grader failed on this submission" in capsys.readouterr().out


def test_the_kernel_is_the_graders_own_python_whatever_kernel_specs_are_installed(tmp_path, monkeypatch):
    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": ["/another/python", "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "display_name": "Another",
                                                  "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == "/another/python"  # what kernel_name would pick
    assert run._own_python_kernel()(kernel_name="python3").kernel_spec.argv[0] == sys.executable


class FakeClient:
    """nbclient's NotebookClient as _Kernel uses it, on a clock that each cell moves by its cost (``COSTS``); a check
    cell records a pass."""
    clock, costs = None, {}

    def __init__(self, nb, **options):
        self.nb, self.km, self.kc, self.timeout, self.startup_timeout, self.env = nb, None, None, 1, 1, {}

    @contextlib.contextmanager
    def setup_kernel(self, env, **options):
        self.env = env
        FakeClient.clock.now += 1  # starting a kernel
        yield

    def execute_cell(self, cell, index):
        from nbclient.exceptions import CellTimeoutError

        cost = FakeClient.costs[cell.source]
        if cost > self.timeout:
            FakeClient.clock.now += self.timeout
            raise CellTimeoutError("timed out")
        FakeClient.clock.now += cost
        if cell.source.startswith("checks."):
            name = cell.source.split("(")[1].rstrip(")")
            with open(self.env[results.RESULTS_VARIABLE], "a") as file:
                file.write(json.dumps({"check": f"check_{name}", "exercise": name, "outcome": results.PASSED,
                                       "message": "✓", "seconds": cost}) + "\n")


@pytest.mark.parametrize("total, b_detail, c_outcome", [
    (15, "15 s in all", results.NOT_RUN),  # b's loop is cut by the submission's limit: no fresh kernel, c not run
    (20, "10 s", results.NOT_RUN),  # b's loop is cut at 10 s, and the fresh kernel's start uses the time left
    (24, "10 s", results.NOT_RUN),  # ... and rerunning the imports, and a's answer until the limit
    (40, "10 s", results.PASSED)])  # ... and then c runs in the time left
def test_the_time_limit_of_a_submission_counts_every_cell_rerun_in_a_fresh_kernel(tmp_path, monkeypatch, total,
                                                                                  b_detail, c_outcome):
    import nbclient

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(run, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(nbclient, "NotebookClient", FakeClient)
    monkeypatch.setattr(FakeClient, "clock", clock)
    monkeypatch.setattr(FakeClient, "costs", {"imports": 3, "answer a": 4, "answer b": float("inf"), "answer c": 1,
                                              "checks.check_a(a)": 1, "checks.check_b(b)": 1, "checks.check_c(c)": 1})
    exercises = tuple(assignments.Exercise(n, f"check_{n}", "", f"checks.check_{n}({n})") for n in "abc")
    assignment = assignments.Assignment(1, "x.ipynb", "x", "imports", exercises)
    answers = {n: Answer(n, f"answer {n}", 0) for n in "abc"}
    grade = run._run("x.ipynb", answers, assignment, tmp_path, 0, 10.0, float(total))
    assert clock.now <= total
    assert [(e.outcome, e.detail) for e in grade.exercises] == [
        (results.PASSED, ""), (results.TIME_LIMIT, b_detail),
        (c_outcome, "time limit" if c_outcome == results.NOT_RUN else "")]
    if c_outcome == results.NOT_RUN:
        assert grade.exercises[2].message == f"not run: the submission's time limit of {total} s was used up before it"


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
SCENARIOS = {"correct.ipynb": {}, "loop.ipynb": {"stable_softmax": LOOP},  # (a kernel each: two scenarios to a file)
             "wrong.ipynb": {"my_causal_mask": WRONG_MASK, "my_attention_with_masks": CALLS_THE_PACKAGE},
             "deleted.ipynb": {"my_causal_mask": None, "my_attention_with_masks": RAISES}}


def unclosed_softmax():
    """The model stable_softmax with a parenthesis opened on its return line and never closed."""
    return model_answers(BOOK)["stable_softmax"].replace("return ", "return (", 1)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every scenario graded in one ``attention-book grade --variant 1`` call: (its printed lines, the CSV's rows by
    submission, the feedback pages by submission). Two learners' files, with the name every Colab download of the
    chapter has, are in folders of their own: kim's (given as a folder) and lee's."""
    folder = tmp_path_factory.mktemp("grade")
    student = as_colab_downloads(nbformat.read(STUDENT, as_version=4))
    correct = as_colab_downloads(answered(STUDENT, BOOK))
    submissions = {name: correct for name in SCENARIOS}
    for name, changes in SCENARIOS.items():
        for exercise, source in changes.items():
            submissions[name] = replace_cell(submissions[name], exercise, source)
    submissions["unchanged.ipynb"] = student
    submissions["deleted.ipynb"] = replace_cell(submissions["deleted.ipynb"], "stable_softmax", unclosed_softmax())
    submissions["hard_coded.ipynb"] = replace_cell(correct, "stable_softmax", hard_coded_answer(public_softmax_table()))
    submissions["kim/01_single_head.ipynb"] = as_colab_downloads(nbformat.read(ROOT / "student" / "03_multi_head.ipynb",
                                                                               as_version=4))
    paths = []
    for name, nb in submissions.items():
        (folder / name).parent.mkdir(exist_ok=True)
        nbformat.write(nb, folder / name)
        paths.append(str(folder / name) if "/" not in name else str((folder / name).parent))
    (folder / "lee").mkdir()
    (folder / "lee" / "01_single_head.ipynb").write_text("{not json")
    paths.append(str(folder / "lee" / "01_single_head.ipynb"))
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        status = cli.main(["grade", "--chapter", "1", *paths, "--csv", str(folder / "grades.csv"), "--feedback",
                           str(folder / "feedback"), "--variant", "1", "--cell-timeout", "10", "--jobs", "2"])
    assert status == 0, shown.getvalue()
    with open(folder / "grades.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    pages = {p.relative_to(folder / "feedback").with_suffix(".ipynb").as_posix(): p.read_text()
             for p in (folder / "feedback").rglob("*.md")}
    return shown.getvalue(), {row["submission"]: row for row in rows}, pages


def points(row):
    return [row[name] for name in ("stable_softmax", "my_causal_mask", "my_attention_with_masks", "total", "out_of")]


@pytest.mark.notebook
def test_grading_a_correct_and_an_unchanged_notebook(graded):
    shown, rows, pages = graded
    assert list(rows)[:2] == ["correct.ipynb", "loop.ipynb"] and len(rows) == len(pages) == 8
    assert points(rows["correct.ipynb"]) == ["1", "1", "1", "3", "3"] and rows["correct.ipynb"]["reasons"] == ""
    assert {row["variant"] for row in rows.values()} == {"1"}
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
    assert points(rows["wrong.ipynb"]) == ["1", "0", "0", "1", "3"]
    assert rows["wrong.ipynb"]["reasons"] == ("my_causal_mask: wrong answer; my_attention_with_masks: calls a function "
                                              "it may not")
    assert "Likely mistake: the mask is aligned top-left" in pages["wrong.ipynb"]
    assert ("my_attention_with_masks calls attention_book.sdpa.scaled_dot_product_attention, the package's own "
            "solution of this step") in pages["wrong.ipynb"]


@pytest.mark.notebook
def test_grading_a_syntax_error_an_infinite_loop_a_deleted_cell_and_one_that_raises(graded):
    _, rows, pages = graded
    line = next(n for n, text in enumerate(unclosed_softmax().splitlines(), start=1) if "return (" in text)
    assert f"has a syntax error, line {line}: '(' was never closed" in pages["deleted.ipynb"]
    assert points(rows["loop.ipynb"]) == ["0", "1", "1", "2", "3"]
    assert rows["loop.ipynb"]["reasons"] == "stable_softmax: time limit (10 s)"
    assert "the check did not finish within 10 s: does stable_softmax loop forever" in pages["loop.ipynb"]
    assert points(rows["deleted.ipynb"]) == ["0", "0", "0", "0", "3"]
    assert rows["deleted.ipynb"]["reasons"] == (f"stable_softmax: syntax error (line {line}); my_causal_mask: answer "
                                                "cell missing; my_attention_with_masks: error (NameError)")
    assert "no code cell defines my_causal_mask" in pages["deleted.ipynb"]
    assert ("your cell that defines my_attention_with_masks raised NameError: name 'undefined_name' is not defined"
            in pages["deleted.ipynb"])


@pytest.mark.notebook
def test_grading_another_chapter_a_broken_file_and_a_hard_coded_answer(graded):
    _, rows, pages = graded
    kim, lee = "kim/01_single_head.ipynb", "lee/01_single_head.ipynb"  # named after their folders
    assert points(rows[kim]) == ["0", "0", "0", "0", "3"]
    assert rows[kim]["reasons"] == ("this is chapter 3's notebook (Multi-head attention), not chapter 1's: grade it "
                                    "with --chapter 3")
    assert pages[kim].endswith("Nothing was graded: this is chapter 3's notebook (Multi-head attention), not "
                               "chapter 1's: grade it with --chapter 3.\n")  # and no exercise's heading
    assert points(rows[lee]) == ["0", "0", "0", "0", "3"]
    assert rows[lee]["reasons"].startswith("01_single_head.ipynb is not a notebook that can be read")
    assert points(rows["hard_coded.ipynb"]) == ["0", "1", "1", "2", "3"]  # passes variant 0 (the test above)
    assert rows["hard_coded.ipynb"]["reasons"] == "stable_softmax: wrong answer"


@pytest.mark.notebook
def test_a_small_time_limit_still_gives_a_row(tmp_path):
    """--timeout bounds the whole submission, the kernel's start and the imports included."""
    nbformat.write(as_colab_downloads(answered(STUDENT, BOOK)), tmp_path / "ada.ipynb")
    start = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["grade", "--chapter", "1", str(tmp_path / "ada.ipynb"), "--csv", str(tmp_path / "g.csv"),
                         "--timeout", "1"]) == 0
    assert time.monotonic() - start < 1 + 5  # the limit, and the kernel's shutdown
    with open(tmp_path / "g.csv", newline="") as file:
        [row] = csv.DictReader(file)
    assert points(row) == ["0", "0", "0", "0", "3"]
    assert row["reasons"] == ("the submission's time limit of 1 s ran out before the chapter's imports had run: give "
                              "it more time (--timeout)")


@pytest.mark.slow
@pytest.mark.model
def test_chapter_16_grades_the_learners_decoder_on_smollm2(tmp_path):
    """Chapter 16's own cells (the model, the prompt, then checks.same_tokens_as_package) run after the exercises:
    the model solutions earn the column's 12 points; without greedy_generate written, it and the column get nothing."""
    student, book = ROOT / "student" / "16_your_decoder.ipynb", ROOT / "book" / "16_your_decoder.ipynb"
    stub = assignments.load_assignment(16).exercise("greedy_generate").stub
    nbformat.write(as_colab_downloads(answered(student, book)), tmp_path / "ada.ipynb")
    nbformat.write(as_colab_downloads(answered(student, book, {"greedy_generate": stub})), tmp_path / "ben.ipynb")
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        assert cli.main(["grade", "--chapter", "16", str(tmp_path / "ada.ipynb"), str(tmp_path / "ben.ipynb"),
                         "--csv", str(tmp_path / "grades.csv"), "--feedback", str(tmp_path / "feedback"),
                         "--cell-timeout", "300", "--jobs", "2"]) == 0
    with open(tmp_path / "grades.csv", newline="") as file:
        rows = {row["submission"]: row for row in csv.DictReader(file)}
    assert [rows["ada.ipynb"][c] for c in ("same_tokens_as_package", "total", "out_of", "reasons")] == [
        "12", "24", "24", ""], shown.getvalue()
    assert [rows["ben.ipynb"][c] for c in ("greedy_generate", "same_tokens_as_package", "total", "reasons")] == [
        "0", "0", "11", "greedy_generate: not written yet; same_tokens_as_package: not written yet"]
    page = (tmp_path / "feedback" / "ada.md").read_text()
    assert ("## Your functions together, `checks.same_tokens_as_package`: passed (12 of 12)\n\n```text\n✓ your "
            "decoder") in page
