"""Exercises: every check fails on its stub with a message that says what to write, in under a second.

Only the student version's import cell, its stubbed exercise cells and their checks run, in-process: the rest of
the chapter is not needed to call a check on an unwritten function. What this file does not repeat:
- that every check passes on the chapter's solution: nbval compares each check cell's stored "✓" line, natively
  and under foreign numerics (make test);
- that a student version runs top to bottom, its checks failing as they should: nbval over student/ under foreign
  numerics (scripts/numerics.py, run by make test-numerics), and the simulated Colab run (tests/test_colab.py).
"""
import contextlib
import io

import matplotlib

matplotlib.use("Agg")  # in this process only; nbval's kernels keep the inline backend
import matplotlib.pyplot as plt  # noqa: E402
import nbformat
import pytest
from attention_book.checks import CheckFailed
from conftest import chapter_paths
from exercise_answers import import_cell, solutions

from exercises import has_solution, stub_solutions
from student import student_path

EXERCISE_TAGS = {"exercise", "exercise-check"}


def run_stubs(nb, name):
    """Run the import cell, then only the exercise and check cells; return {check cell index: what it raised}."""
    namespace, results = {"__name__": "__chapter__"}, {}
    cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"
             and (c is import_cell(nb) or EXERCISE_TAGS & set(c.metadata.get("tags", [])))]
    for index, cell in cells:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(cell.source, f"{name}[{index}]", "exec"), namespace)
                error = None
            except CheckFailed as exc:
                error = exc
        plt.close("all")
        if "exercise-check" in cell.metadata.get("tags", []):
            results[index] = error
        elif error is not None:
            raise error
    return results


chapters_with_exercises = [p for p in chapter_paths()
                           if any(has_solution(c.source) for c in nbformat.read(p, as_version=4).cells)]


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_checks_fail_on_the_student_stubs(path):
    student = nbformat.read(student_path(path), as_version=4)
    stubbed = run_stubs(student, f"student/{path.name}")
    assert len(stubbed) >= 3, f"{path.name} needs at least 3 checked exercises, has {len(stubbed)}"
    for index, error in stubbed.items():
        assert isinstance(error, CheckFailed), f"student/{path.name} cell {index}: the check passed on the stub"
        message = str(error)
        assert "not written yet: " in message, message
        assert len(message.split("not written yet: ", 1)[1]) > 20, f"no instruction in: {message}"


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_every_check_cell_of_a_chapter_stores_its_pass(path):
    """The chapter's check cells store the "✓" line that nbval compares, so a solution that stops passing fails."""
    chapter = nbformat.read(path, as_version=4)
    for index, cell in enumerate(chapter.cells):
        if "exercise-check" in cell.metadata.get("tags", []):
            shown = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            assert shown.startswith("✓ "), f"{path.name} cell {index}: no stored ✓ line: {shown!r}"
            assert "NBVAL_IGNORE_OUTPUT" not in cell.source and "NBVAL_SKIP" not in cell.source


def test_stub_replaces_only_the_solution_region():
    source = 'def f(x):\n    """doc"""\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n'
    stubbed = stub_solutions(source)
    assert stubbed == ('def f(x):\n    """doc"""\n    # YOUR CODE HERE\n    raise NotImplementedError('
                       '"write the body of f(); the check in the next cell tells you if it is right")\n')
    with pytest.raises(NotImplementedError, match="f()"):
        namespace = {}
        exec(stubbed, namespace)
        namespace["f"](1)


def test_markdown_solutions_become_your_answer_here():
    source = "Why?\n\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\n"
    assert stub_solutions(source, "markdown") == "Why?\n\nYOUR ANSWER HERE\n"


# How big an input of numbers is, for the checks that pass no tensors (the others: the numbers in their tensors and
# modules' parameters, attention_book.checks._compare._size).
SIZE_OF_NUMBERS = {
    "check_causal_mask": lambda L, S: L * S,
    "check_weights_bytes": lambda B, h, L, S, dtype: B * h * L * S,
    "check_param_count": lambda d_model, h, g, bias: d_model,
    "check_kv_bytes_per_token": lambda n_layers, g, d_head, b: n_layers * g * d_head,
    "check_max_context": lambda memory, *model: memory,
    "check_mqa_param_count": lambda d_model, h: d_model,
    "check_tokens_per_second_bound": lambda bandwidth, n_params, *rest: n_params,
    "check_folded_row_owner": lambda j, row, h, g, L: h * L,
    "check_largest_batch": lambda memory, *model: memory,
    "check_decode_step_roofline": lambda config, n_params, context, batch, *rest: n_params + batch * context * (
        config.n_layers * config.n_kv_heads * config.d_head),
    "check_pareto_front": lambda points: len(points),
    "check_next_positions": lambda cache_length, n_new: cache_length + n_new,
    "check_roofline_tokens_per_s": lambda weights, per_token, context, bandwidth: weights + context * per_token,
    "check_latent_tokens_in": lambda budget_bytes, n_layers, d_c, d_rope, b: budget_bytes,
    "check_largest_block_k": lambda budget_bytes, block_q, d_head, b: budget_bytes,
    # a ring is one input, fed several appends: its size is its buffer's
    "check_ring_append": lambda buffer, positions, new, length, window, n_sinks: buffer.numel(),
    "check_local_global_bytes": lambda context, n_layers, lpg, window, g, d_head, b: context * n_layers * g * d_head,
    "check_cache_append": lambda cache, k, v: (cache["length"] + k.shape[2]) * k.shape[0] * k.shape[1] * k.shape[3],
    # chapter 16's layer pieces: one cache fed a prefill then steps; the size is every token attended to
    "check_attention_sublayer": lambda x, layer, cache, config: (
        x.shape[0] * (cache["length"] + x.shape[1]) * x.shape[2]),
    "check_decoder_block": lambda x, layer, cache, config: x.shape[0] * (cache["length"] + x.shape[1]) * x.shape[2],
    "check_decoder_logits": lambda ids, weights, caches: ids.shape[0] * (caches[0]["length"] + ids.shape[1]),
}


@pytest.mark.parametrize("path", chapters_with_exercises, ids=lambda p: p.name)
def test_checks_try_the_smallest_inputs_first(path):
    """So that the first failure a check reports is on the smallest input that shows it: the inputs a check passes
    to the solution never grow smaller from one call to the next."""
    import attention_book.checks as checks
    from attention_book.checks._compare import _size
    from attention_book.grading.assignment import check_calls

    chapter = nbformat.read(path, as_version=4)
    namespace = solutions(chapter, path.name)
    pairs = [pair for c in chapter.cells if "exercise-check" in c.metadata.get("tags", [])
             for pair in check_calls(c.source)]
    for check, written in pairs:
        sizes, size, solution = [], SIZE_OF_NUMBERS.get(check, _size), namespace[written]

        def recorder(*args):
            sizes.append(size(*args))
            return solution(*args)

        recorder.__name__ = written
        with contextlib.redirect_stdout(io.StringIO()) as shown:
            getattr(checks, check)(recorder)
        assert shown.getvalue().startswith("✓ "), f"{check} fails on the solution: {shown.getvalue()}"
        assert sizes == sorted(sizes) and sizes[-1] > 0, f"{check} tries inputs of sizes {sizes}, not smallest first"
        assert len(sizes) >= 2, f"{check} tries a single input: one hard-coded value is not enough"
