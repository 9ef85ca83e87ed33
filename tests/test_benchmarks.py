"""The benchmarks run and print one JSON object per configuration (their timings are not asserted).

Each benchmark's ``main(argv, ...)`` runs in this process, as its command line would with those arguments; the ones
on SmolLM2 get the session's models (tests/conftest.py) instead of loading their own."""
import importlib.util
import json

import pytest
from conftest import ROOT


def benchmark(name):
    """benchmarks/<name>.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def json_rows(capsys, name, argv, **models):
    benchmark(name).main(argv, **models)
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_json_output_has_the_documented_keys(capsys):
    rows = json_rows(capsys, "decode", ["--json", "--lengths", "64", "--kv-heads", "32", "4", "1"])
    assert [row["g"] for row in rows] == [32, 4, 1]
    keys = {"h", "g", "S", "ms_per_step", "gb_per_s", "bandwidth_fraction", "speedup_vs_mha"}
    assert all(set(row) == keys for row in rows)
    assert rows[0]["speedup_vs_mha"] == 1.0 and all(row["ms_per_step"] > 0 for row in rows)


def test_prefill_benchmark_prints_the_fast_path_ratio(capsys):
    rows = json_rows(capsys, "prefill", ["--json", "--lengths", "16", "--kv-heads", "8", "1"])
    assert [row["g"] for row in rows] == [8, 1]
    assert all(set(row) == {"d_model", "h", "g", "L", "is_causal_ms", "mask_ms", "speedup"} for row in rows)
    assert all(row["is_causal_ms"] > 0 and row["mask_ms"] > 0 for row in rows)


def test_generate_benchmark_prints_tokens_per_second_against_transformers_and_the_roofline(
        capsys, smollm2_fast, smollm2_reference, smollm2_tokenizer):
    """SmolLM2 through the book's decoder and through transformers, both loaded once a session."""
    rows = json_rows(capsys, "generate", ["--json", "--n-new", "4", "--runs", "1"], model=smollm2_fast,
                     reference=smollm2_reference, tokenizer=smollm2_tokenizer)
    assert len(rows) == 1
    assert set(rows[0]) == {"tokens_per_s", "transformers_tokens_per_s", "speedup_vs_transformers",
                            "roofline_tokens_per_s", "roofline_fraction"}
    assert all(value > 0 for value in rows[0].values())


def test_cache_diet_benchmark_prints_one_row_per_policy(capsys, smollm2_fast, smollm2_tokenizer):
    """SmolLM2 on 48 tokens with a window of 16."""
    rows = json_rows(capsys, "cache_diet", ["--json", "--tokens", "48", "--window", "16"], model=smollm2_fast,
                     tokenizer=smollm2_tokenizer)
    assert [row["policy"] for row in rows] == ["full", "window", "window + 4 sinks", "local/global", "int8"]
    by_policy = {row["policy"]: row for row in rows}
    # the first 16 tokens see what the full cache shows them under every window
    assert all(row["first_window"] == pytest.approx(by_policy["full"]["first_window"], rel=1e-3)
               for name, row in by_policy.items() if name != "int8")
    assert by_policy["window"]["cache_mib_at_8192"] < by_policy["local/global"]["cache_mib_at_8192"] \
        < by_policy["int8"]["cache_mib_at_8192"] < by_policy["full"]["cache_mib_at_8192"]
