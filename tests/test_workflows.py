"""The GitHub Actions workflows: the CPU one runs what `.ci/run` runs, the GPU one `make test-gpu`."""

import re
from pathlib import Path

import pytest
import yaml
from test_environment import pyproject_lists  # tests/test_environment.py

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


def steps(doc: dict) -> list[dict]:
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


def runs(doc: dict) -> list[str]:
    return [s["run"].strip() for s in steps(doc) if "run" in s]


def uploads(doc: dict) -> list[dict]:
    return [s for s in steps(doc) if s.get("uses", "").startswith("actions/upload-artifact@")]


@pytest.mark.parametrize("name", ["ci.yml", "gpu.yml", "pages.yml"])
def test_workflows_need_no_secrets_and_pin_their_actions(name):
    text = (WORKFLOWS / name).read_text()
    doc = load(name)
    assert "secrets." not in text and "secrets[" not in text, f"{name} must run without secrets"
    assert doc["permissions"] == {"contents": "read"}
    for step in steps(doc):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", step["uses"]), (
                f"{name}: pin {step['uses']} to a major version (@v4) or a commit")
    for step in uploads(doc):
        assert step.get("if") == "always()", f"{name}: upload the artifacts when the tests fail, too"


def test_cpu_workflow_runs_ci_run_on_python_311_and_keeps_the_screenshots():
    doc = load("ci.yml")
    assert {"push", "pull_request"} <= set(doc["on"]) and doc["on"]["push"]["branches"] == ["main"]
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["container"]["image"].startswith("python:3.11-"), "Python 3.11 in a Debian container"
    assert str(job["env"]["UV_PYTHON"]) == "3.11", "uv builds .venv with that same Python"
    assert "bash .ci/run" in runs(doc), "CI runs what .ci/run runs"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line.removeprefix("step ") for line in ci if line.startswith(("make ", "step make "))]
    assert commands == ['make test PYTEST_ARGS="--ignore-glob=notebooks/*.ipynb"', "make slides", "make book BOOK_JOBS=2", "make test-peers",
                        "make test-oldest", "make test-browser"], (
        "the README's test command (its notebooks run once, in make book), the deck and the site, the peer "
        "loaders, the oldest supported versions, then the browser tests (the site's among them)")
    assert "make test " in (ROOT / "README.md").read_text()
    assert [u["with"]["path"] for u in uploads(doc)] == ["out/test-artifacts"]


def test_gpu_workflow_runs_make_test_gpu_on_the_self_hosted_gpu_runner():
    doc = load("gpu.yml")
    assert set(doc["on"]) == {"workflow_dispatch", "schedule", "push"}
    assert doc["on"]["push"]["branches"] == ["main"] and doc["on"]["schedule"][0]["cron"]
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert str(job["env"]["UV_PYTHON"]) == "3.11"
    assert [r.split()[-1] for r in runs(doc)] == ["test-gpu"] and runs(doc)[0].startswith("GPU_BUDGET_S=")
    makefile = (ROOT / "Makefile").read_text()
    run_dir = re.search(r"^GPU_RUN \?= \$\(CURDIR\)/(.*)$", makefile, re.M).group(1)
    assert [u["with"]["path"].rstrip("/") for u in uploads(doc)] == [run_dir], "it uploads the run folder"
    target = makefile[makefile.index("\ntest-gpu:"):].split("\n\n")[0]
    assert "tools/gpurun run --budget $(GPU_BUDGET_S) --started $(GPU_STARTED)" in target and "--run-dir $(GPU_RUN)" in target
    assert re.search(r"^GPU_BUDGET_S \?= 460$", makefile, re.M), "one short GPU slot by default, make node-env included"
    assert re.search(r"^GPU_STARTED := \$\(shell date \+%s\)$", makefile, re.M), "the budget counts from make's start"
    budget = re.search(r"GPU_BUDGET_S=(\d+) make test-gpu", str(job)).group(1)
    assert int(budget) >= 3600, "CI has no slot: a budget that does everything"
    gpurun = "".join(p.read_text() for p in (ROOT / "tools" / "gpurun").glob("*.py"))
    assert "torch sees no CUDA GPU" in gpurun and 'env["GPUFEED_REQUIRE_CUDA"] = "1"' in gpurun, (
        "make test-gpu fails without CUDA instead of running on the CPU (unless asked for the stand-in)")


def test_make_test_oldest_installs_the_floors_of_pyproject():
    """`make test-oldest` pins torch, torchvision and tensordict to the lowest versions pyproject allows."""
    deps = pyproject_lists()[0]
    floors = {m.group(1): m.group(2) for d in deps if (m := re.fullmatch(r"([\w-]+)>=([\d.]+)", d))}
    makefile = (ROOT / "Makefile").read_text()
    oldest = re.search(r"^OLDEST := (.*)$", makefile, re.M).group(1).split()
    assert oldest == [f"{name}=={floors[name]}.*" for name in ("torch", "torchvision", "tensordict")]


def test_pages_workflow_builds_the_site_and_deploys_it_on_pushes_to_main():
    doc = load("pages.yml")
    assert doc["on"]["push"]["branches"] == ["main"]
    build, deploy = doc["jobs"]["build"], doc["jobs"]["deploy"]
    assert build["container"]["image"].startswith("python:3.11-") and str(build["env"]["UV_PYTHON"]) == "3.11"
    assert "make slides book" in [s["run"].strip() for s in build["steps"] if "run" in s]
    (upload,) = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "build/book/html"
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
    cached = [s["with"]["path"] for s in build["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert "build/book/cache" in cached, "unchanged lessons are not run again on the next push"
