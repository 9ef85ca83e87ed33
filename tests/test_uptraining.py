"""Chapter 9's experiment: the stored results are what the code produces, and the code is deterministic."""
import pytest
from attention_book.measure import one_thread
from attention_book.uptraining import (FIELDS, UPTRAIN_STEPS, cache_bytes_per_token, convert_and_uptrain, load_results,
                                       pretrain, write_results)


def test_stored_results_cover_the_grid():
    rows = load_results()
    keys = {(r["seed"], r["n_kv_heads"], r["init"], r["uptrain_steps"]) for r in rows}
    assert len(keys) == len(rows) == 5 * 4 * 3 * len(UPTRAIN_STEPS)
    assert all(r["kv_bytes_per_token"] == cache_bytes_per_token(r["n_kv_heads"]) for r in rows)
    for seed in range(5):  # with G = h, mean and first are the MHA model itself
        mha = [r["loss"] for r in rows if r["seed"] == seed and r["n_kv_heads"] == 8 and r["init"] != "random"
               and r["uptrain_steps"] == 0]
        assert len(set(mha)) == 1


@pytest.fixture(scope="module")
def seed0_model():
    with one_thread():
        return pretrain(0)


def test_stored_rows_are_reproduced(seed0_model):
    """Seed 0: every loss right after conversion, and GQA-4 (mean) after 5 % uptraining, as stored."""
    stored = {(r["n_kv_heads"], r["init"], r["uptrain_steps"]): r["loss"] for r in load_results() if r["seed"] == 0}
    with one_thread():
        for g in (8, 4, 2, 1):
            for init in ("mean", "first", "random"):
                assert round(convert_and_uptrain(seed0_model, g, init, (0,))[0], 6) == stored[g, init, 0], (g, init)
        uptrained = convert_and_uptrain(seed0_model, 4, "mean", (0, UPTRAIN_STEPS[1]))
    assert round(uptrained[UPTRAIN_STEPS[1]], 6) == stored[4, "mean", UPTRAIN_STEPS[1]]


def test_a_longer_run_passes_through_the_shorter_one():
    with one_thread():
        model = pretrain(1, steps=10)
        long = convert_and_uptrain(model, 2, "first", (0, 4, 8))
        short = convert_and_uptrain(model, 2, "first", (0, 4))
    assert long[4] == short[4] and long[0] == short[0] and long[8] != long[4]


def test_results_round_trip(tmp_path):
    rows = [{"seed": 3, "n_kv_heads": 2, "init": "random", "uptrain_steps": 30, "loss": 1.234567,
             "kv_bytes_per_token": cache_bytes_per_token(2)}]
    write_results(rows, tmp_path / "r.csv")
    assert load_results(tmp_path / "r.csv") == rows
    assert (tmp_path / "r.csv").read_text().splitlines()[0] == ",".join(FIELDS)
