"""`import attention_book` loads the attention code only: no plotting, checks or training helpers."""
import json
import subprocess
import sys

PROBE = """
import json, sys
import torch
before = set(sys.modules)
import attention_book
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_import_adds_nothing_heavy_beyond_torch():
    added = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                      check=True).stdout)
    assert "attention_book.sdpa" in added  # the probe really imported the package
    optional = ("attention_book.figures", "attention_book.checks", "attention_book.bert", "attention_book.experiments",
                "attention_book.llama")
    heavy = [m for m in added if m.split(".")[0] in {"matplotlib", "tqdm", "transformers", "safetensors", "gguf"}
             or m.startswith(optional)]
    assert heavy == []
