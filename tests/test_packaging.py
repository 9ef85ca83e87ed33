"""The package builds without a single warning (Colab builds it from source with the newest setuptools), carries its
licence, and has one version string; the book names both licences."""
import email
import shutil
import subprocess
import sys
import zipfile

import attention_book
from conftest import ROOT

BUILD = """
import sys, warnings
import setuptools.build_meta as backend
warnings.simplefilter("error")  # a deprecation today is a broken install later
print(backend.build_wheel(sys.argv[1]))
"""


def test_the_wheel_builds_with_warnings_as_errors_and_carries_its_metadata(tmp_path):
    source = tmp_path / "code"
    shutil.copytree(ROOT / "code", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = subprocess.run([sys.executable, "-W", "error", "-c", BUILD, str(tmp_path / "dist")], cwd=source,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheel = tmp_path / "dist" / result.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
        licence = archive.read(next(n for n in names if n.endswith("licenses/LICENSE"))).decode()
    assert metadata["Version"] == attention_book.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.11"
    assert "MIT License" in licence
    assert "attention_book/experiments/data/mha_to_gqa.csv" in names  # chapter 9's stored results travel along


def test_the_version_is_written_once():
    pyproject = (ROOT / "code" / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject.split("[tool.setuptools.dynamic]")[0]


def test_the_package_ships_the_same_licence_as_the_repository():
    assert (ROOT / "code" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()


def test_readme_and_site_footer_name_both_licences():
    readme = (ROOT / "README.md").read_text()
    config = (ROOT / "_config.yml").read_text()
    for text in (readme, config):
        assert "MIT" in text and "CC BY 4.0" in text
