"""Every exercise check gives feedback: on a wrong answer it says which input it tried, what it expected and what
came back; in Jupyter it shows that message, not a traceback. (On a stub it says what to write: tests/test_hints.py;
that it tries several inputs, smallest first: tests/test_exercises.py.)"""
import inspect

import attention_book.checks as checks
import pytest
import torch
from attention_book.checks import CheckFailed

ALL_CHECKS = [getattr(checks, name) for name in checks.__all__ if name.startswith("check_")]


def returns_none(*args):
    return None


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_a_wrong_answer_is_told_the_input_the_expectation_and_the_result(check):
    with pytest.raises(CheckFailed) as error:
        check(returns_none)
    message = str(error.value)
    assert "expected" in message and "got" in message and "None" in message, message
    assert " on " in message or "=" in message, f"no input named in: {message}"


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_checks_say_what_they_try(check):
    """The instructor guide's exercise table (scripts/course_map.py) shows each check's docstring: its first
    line says what the function must do, its second paragraph which inputs it tries and against what."""
    paragraphs = inspect.getdoc(check).split("\n\n")
    assert len(paragraphs) >= 2 and paragraphs[1].startswith("Tried on") and "compared with" in paragraphs[1], (
        f"{check.__name__}: add a second docstring paragraph 'Tried on ...; compared with ...'")


def test_an_error_in_the_learners_code_keeps_its_traceback_and_names_the_input():
    def broken(x):
        return x.nonexistent

    with pytest.raises(AttributeError) as error:
        checks.check_stable_softmax(broken)
    notes = getattr(error.value, "__notes__", [])
    assert any("broken on input: tensor of shape" in note for note in notes)


def test_ipython_shows_the_message_without_a_traceback():
    error = CheckFailed("f on x (2, 3): expected shape (2,), got (3,)\nHint: sum over the last dimension")
    lines = error._render_traceback_()
    assert "CheckFailed" in lines[0] and "expected shape (2,)" in lines[0]
    assert lines[1] == "Hint: sum over the last dimension"
    assert not any("Traceback" in line or "File " in line for line in lines)


def test_refusing_takes_a_method_and_its_class_in_any_order_and_restores_both():
    from attention_book.checks._compare import refusing
    from attention_book.rope import Rope

    call = Rope.__call__
    for names in (["attention_book.rope.Rope", "attention_book.rope.Rope.__call__"],
                  ["attention_book.rope.Rope.__call__", "attention_book.rope.Rope"]):
        with refusing(names, answer=len):
            import attention_book.rope as rope
            with pytest.raises(CheckFailed, match="calls attention_book.rope.Rope"):
                rope.Rope(8)
        assert rope.Rope is Rope and Rope.__call__ is call


def test_refusing_with_a_condition_refuses_only_the_calls_it_names():
    import torch
    import torch.nn.functional as F
    from attention_book.checks._compare import refusing

    q = torch.randn(1, 2, 3, 4)
    with refusing([("torch.nn.functional.scaled_dot_product_attention", "with is_causal",
                    lambda *a, **k: k.get("is_causal", False))], answer=len):
        assert F.scaled_dot_product_attention(q, q, q).shape == q.shape
        with pytest.raises(CheckFailed, match="with is_causal"):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_refusing_skips_what_is_not_loaded_but_not_a_misspelt_package_name():
    from attention_book.checks._compare import refusing

    with refusing(["surely_not_a_loaded_package.f", "torch.nn.functional.no_such_function"], answer=len):
        pass
    with pytest.raises(AttributeError):
        with refusing(["attention_book.rope.no_such_function"], answer=len):
            pass


@pytest.mark.parametrize("check", ["check_latent_tokens_in", "check_local_global_bytes", "check_largest_block_k",
                                   "check_largest_batch"])
@pytest.mark.parametrize("answer", [[1], torch.ones(2), "1"], ids=["list", "tensor", "string"])
def test_a_check_of_a_whole_number_says_what_came_back_instead(check, answer):
    with pytest.raises(CheckFailed, match="expected a number"):
        getattr(checks, check)(lambda *args: answer)
