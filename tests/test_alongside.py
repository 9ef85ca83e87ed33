"""make test's second pytest process (tests/alongside.py): which tests it takes, and in what order."""
import alongside
from alongside import BALANCE, balance_line, native_runs_not_needed, split
from conftest import ROOT


class Item:
    """What split() and native_runs_not_needed() read of a pytest item: its node id, its path, whether it is marked
    colab, and a colab test's chapter (its parameter, a path)."""

    def __init__(self, nodeid, colab=False):
        self.nodeid, self.colab = nodeid, colab
        self.path = ROOT / nodeid.split("::")[0]
        if colab:
            self.callspec = type("CallSpec", (), {"params": {}})()

    def get_closest_marker(self, name):
        return object() if name == "colab" and self.colab else None


def test_the_second_process_runs_the_balance_files_first_then_the_colab_tests(monkeypatch):
    monkeypatch.setattr(alongside, "BALANCE", ("tests/test_grade.py",))  # empty today: the colab tests alone
    grading = "tests/test_grade.py::test_grading_a_correct_and_an_unchanged_notebook"
    colab = ["tests/test_colab.py::test_c[01]", "tests/test_colab.py::test_c[12]"]
    items = [Item("tests/test_ablation.py::test_a"), Item(colab[0], colab=True), Item(grading),
             Item(colab[1], colab=True), Item("book/01_single_head.ipynb::Cell 0")]
    kept, moved = split(items)
    assert [item.nodeid for item in kept] == ["tests/test_ablation.py::test_a", "book/01_single_head.ipynb::Cell 0"]
    assert [item.nodeid for item in moved] == [grading, *colab]


def test_without_colab_tests_nothing_moves(monkeypatch):
    """-m "not colab" (make test-fast): no second process, so the balance files stay in the only one."""
    monkeypatch.setattr(alongside, "BALANCE", ("tests/test_grade.py",))
    items = [Item("tests/test_grade.py::test_x"), Item("tests/test_ablation.py::test_a")]
    assert split(items) == (items, [])


def test_the_balance_files_exist():
    """A renamed file would silently stop moving."""
    assert [path for path in BALANCE if not (ROOT / path).is_file()] == []


def test_the_balance_line_says_which_process_ran_alone_and_where_work_should_move():
    assert balance_line(12.4) == "the two processes ended within 12 s of each other"
    assert balance_line(95.0).startswith("the second pytest process ended 95 s after the first, and ran alone")
    assert balance_line(95.0).endswith("move a test file to the first (BALANCE in tests/alongside.py)")
    assert balance_line(-140.0).startswith("the first pytest process ended 140 s after the second")
    assert "move a test file to the second" in balance_line(-140.0)


def test_nbval_runs_natively_only_the_chapters_that_load_a_reference_model_or_whose_colab_run_is_not_selected():
    """Chapter 1 loads no transformers model and its Colab run moved: its nbval items leave; chapter 12 loads one:
    they stay; chapter 2's Colab run is not selected: its native run stays."""
    colab = [Item("tests/test_colab.py::test_c[01_single_head]", colab=True),
             Item("tests/test_colab.py::test_c[12_real_llm]", colab=True)]
    colab[0].callspec.params["chapter"] = ROOT / "book" / "01_single_head.ipynb"
    colab[1].callspec.params["chapter"] = ROOT / "book" / "12_real_llm.ipynb"
    native = [Item("book/01_single_head.ipynb::Cell 0"), Item("book/12_real_llm.ipynb::Cell 0"),
              Item("book/02_self_attention.ipynb::Cell 0"), Item("tests/test_ablation.py::test_a")]
    assert [item.nodeid for item in native_runs_not_needed(native, colab)] == ["book/01_single_head.ipynb::Cell 0"]
