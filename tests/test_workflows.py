"""The forge's workflows (.github/workflows): test.yml runs `make test` on every push and pull request, and
site.yml builds the site and publishes it with GitHub Pages from main. actionlint (with shellcheck on their run:
steps) accepts them, as `make lint` checks, and rejects a broken one. Under a second."""
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
BIN = pathlib.Path(sys.executable).parent  # requirements.txt installs actionlint and shellcheck beside python


def tool(name):
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert path, f"{name} is not installed: requirements.txt pins it (run `make lint`, which installs it)"
    return str(path)


def actionlint(folder):
    """actionlint's exit status and report on the workflows of the repository at ``folder``."""
    done = subprocess.run([tool("actionlint"), f"-shellcheck={tool('shellcheck')}", "-no-color"], cwd=folder,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def load(name):
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
    return workflow


def steps(job):
    return job["steps"]


def runs(job):
    return [step.get("run", "") for step in steps(job)]


def uses(job):
    return [step.get("uses", "").split("@")[0] for step in steps(job)]


def test_actionlint_accepts_the_repositorys_workflows():
    returncode, report = actionlint(ROOT)
    assert (returncode, report) == (0, ""), report


def test_actionlint_rejects_a_broken_workflow(tmp_path):
    (tmp_path / ".git").mkdir()  # the root of a repository, for actionlint
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "broken.yml").write_text(
        "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v7\n        with:\n          depth: 1\n"  # checkout's input is fetch-depth
        "      - run: cd $HOME/code && make test\n")  # shellcheck: unquoted $HOME
    returncode, report = actionlint(tmp_path)
    assert returncode == 1
    assert 'input "depth" is not defined in action "actions/checkout@v7"' in report
    assert "SC2086" in report, "shellcheck did not check the run: step"


def test_the_tests_run_make_test_on_every_push_and_pull_request_and_keep_the_logs():
    workflow = load("test.yml")
    assert {"push", "pull_request"} <= set(workflow["on"])
    assert workflow["on"]["push"] is None, "a push to any branch must run the tests"
    job = workflow["jobs"]["test"]
    assert job["runs-on"] == "ubuntu-latest" and job["timeout-minutes"] > 0
    assert "make test" in runs(job)
    upload = next(step for step in steps(job) if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    assert {"_build/colab.log", "_build/chapter-times.md"} <= set(upload["with"]["path"].split())
    assert "make test-slow" in runs(workflow["jobs"]["test-slow"])


def test_the_site_is_built_and_published_from_main_with_pages_actions():
    workflow = load("site.yml")
    assert workflow["on"]["push"] == {"branches": ["main"]} and "workflow_dispatch" in workflow["on"]
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert "make book" in runs(build)
    assert uses(build)[-2:] == ["actions/configure-pages", "actions/upload-pages-artifact"]
    assert steps(build)[-1]["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and uses(deploy) == ["actions/deploy-pages"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert workflow["permissions"] == {"contents": "read"}, "only the deploy job may write"
    assert workflow["concurrency"]["cancel-in-progress"] is False


@pytest.mark.parametrize("name", ["test.yml", "site.yml"])
def test_every_action_is_pinned_by_its_major_version(name):
    for job in load(name)["jobs"].values():
        for step in steps(job):
            if "uses" in step:
                _, _, version = step["uses"].partition("@")
                assert version.startswith("v") and version[1:].isdigit(), f"{name}: {step['uses']} is not @vN"
