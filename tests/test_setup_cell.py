"""Every chapter opens with the same setup cell, generated from _config.yml, that never touches torch."""
import subprocess
import sys
import types

import nbformat
import pytest
import yaml
from conftest import ROOT, chapter_paths

from setup_cell import MARKER, SETUP_TAGS, first_code_cell, setup_source


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_first_code_cell_is_the_generated_setup_cell(path):
    cell = first_code_cell(nbformat.read(path, as_version=4))
    assert cell is not None and cell.source == setup_source(), (
        f"{path.name}: setup cell differs; run `python scripts/setup_cell.py`"
    )
    assert cell.source.startswith(MARKER)  # nbval skips it
    assert cell.metadata.get("tags") == SETUP_TAGS


def test_setup_cell_installs_from_the_configured_repository():
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    assert f"git+{repo['url']}@{repo['branch']}#subdirectory=code" in setup_source()


def run_setup_cell(monkeypatch, in_colab, importable):
    """Execute the setup cell with pip replaced by a recorder; return the commands it ran."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object() if importable else None)
    if in_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(setup_source(), {})
    return calls


def test_in_colab_installs_only_the_package(monkeypatch):
    [cmd] = run_setup_cell(monkeypatch, in_colab=True, importable=True)
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    requirements = [arg for arg in cmd[4:] if not arg.startswith("-")]
    assert len(requirements) == 1 and requirements[0].startswith("attention-book @ git+")
    assert not {"--upgrade", "-U", "--force-reinstall", "--no-deps"} & set(cmd)
    assert "torch" not in " ".join(cmd)


def test_installs_when_the_package_is_missing(monkeypatch):
    assert len(run_setup_cell(monkeypatch, in_colab=False, importable=False)) == 1


def test_does_nothing_locally_when_the_package_is_installed(monkeypatch):
    assert run_setup_cell(monkeypatch, in_colab=False, importable=True) == []


def test_package_declares_lower_bounds_only():
    import tomllib

    deps = tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("torch>=") for d in deps)
    assert not [d for d in deps if "==" in d or "<" in d]
