"""The package builds without a single warning (Colab builds it from source with the newest setuptools), carries its
licence, and has one version string; the book names both licences."""
import email
import zipfile

import attention_book
from conftest import ROOT


def test_the_wheel_builds_with_warnings_as_errors_and_carries_its_metadata(package_wheel):
    """package_wheel (tests/conftest.py) builds it once a run from a copy of code/, for this test and the simulated
    Colab run."""
    assert package_wheel.returncode == 0, package_wheel.log[-6000:]
    with zipfile.ZipFile(package_wheel.path) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
        licence = archive.read(next(n for n in names if n.endswith("licenses/LICENSE"))).decode()
        notice = archive.read("attention_book/llama/data/README.md").decode()  # KeyError if it is not shipped
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert metadata["Version"] == attention_book.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.11"
    assert "MIT License" in licence
    assert "attention_book/experiments/data/mha_to_gqa.csv" in names  # chapter 9's stored results travel along
    assert "attention_book/llama/data/heldout.txt" in names  # chapter 12's and 15's texts travel with their licence
    assert "attention_book/grading/assignments.json" in names  # the grader's chapters: grading needs no checkout
    assert "attention-book = attention_book.grading.cli:main" in entry_points  # the command
    assert "CC BY 4.0" in notice, notice


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
