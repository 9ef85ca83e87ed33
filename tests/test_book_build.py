"""The site builds from the stored outputs with no warnings, and each chapter page has its Colab button."""
import pathlib
import subprocess
import sys

import yaml
from conftest import ROOT, chapter_paths


def test_book_builds_without_warnings(tmp_path):
    jupyter_book = pathlib.Path(sys.executable).parent / "jupyter-book"
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), "-W", "-n", "--keep-going",
                             "--path-output", str(tmp_path)], capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert "WARNING" not in log, log[-5000:]
    html = tmp_path / "_build" / "html"
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    slug = repo["url"].removeprefix("https://github.com/")
    for path in chapter_paths():
        page = (html / "book" / f"{path.stem}.html").read_text()
        colab = f"https://colab.research.google.com/github/{slug}/blob/{repo['branch']}/book/{path.name}"
        assert colab in page, f"{path.name}: no Colab button pointing at {colab}"
