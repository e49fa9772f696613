"""``make test-gpu`` (tools/gpurun.py) checked on a CPU: the budget with fake steps that sleep, the
report by name, the archive; the notebook runner; the per-test records; the sanitizer's wiring
(tests/cudasan.py) with a stand-in for CSAN; the commit of a checkout without ``.git``; the time cap
of the harness; the bench's partial results; the shared dataset builds."""

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import gpurun  # noqa: E402  (tools/gpurun.py)

PY = sys.executable


def sleeper(seconds: float, rc: int = 0, write: str | None = None, grandchild: Path | None = None) -> list[str]:
    """A command that sleeps, maybe writes a file or leaves a grandchild in a session of its own
    (as a Jupyter kernel is), then exits with ``rc``."""
    code = "import os, subprocess, sys, time\n"
    if grandchild:
        code += (f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
                 f"open({str(grandchild)!r}, 'w').write(str(p.pid))\n")
    if write:
        code += f"open({write!r}, 'w').write({json.dumps({'commit': 'abc123', 'slug': 'fake-gpu', 'gpu': 'Fake'})!r})\n"
    code += f"time.sleep({seconds}); sys.exit({rc})\n"
    return [PY, "-c", code]


class FakeRun(gpurun.Run):
    """The run with every step replaced by a sleep: doctor 0.2 s, data 0.5 s in the background,
    the cuda tests 0.3 s, the sanitizer 30 s (stopped at its cap of 2 s), the lessons run alone
    1 s each but 11, which fails, and 03, stopped at its cap; the others 1.5 s two at a time, more
    than the budget leaves them; the bench needs a minute."""

    kept: Path
    LEAST = {**gpurun.Run.LEAST, "data": 0.5, "cuda": 0.5, "csan": 0.5, "notebooks": 0.5, "notebook": 0.8}

    def doctor_command(self, record):
        return sleeper(0.2, write=str(record))

    def data_command(self, owners):
        return sleeper(0.5)

    def test_command(self, name, extra):
        return sleeper(30 if name == "csan" else 0.3)

    def notebook_command(self, nb):
        if nb.name.startswith("03"):
            return sleeper(30, grandchild=self.kept)  # stopped at the alone cap, its kernel with it
        return sleeper(1.0 if nb.alone else 1.5, rc=1 if nb.name.startswith("11") else 0)


def fake_args(tmp_path, budget: float, **kw) -> SimpleNamespace:
    args = dict(budget=budget, run_dir=tmp_path / "run", archive=tmp_path / "out" / "gpu-run.tar.gz", standin=None,
                alone="08 11 03", jobs=2, measure_s=5.0, tests_cap=2.0, test_workers=4, alone_cap=2.5,
                notebook_cap=10.0, bench_cap=240.0, cache=tmp_path / "cache")
    return SimpleNamespace(**{**args, **kw})


def test_the_budget_limits_each_step_and_the_report_names_every_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpurun, "RESERVE_S", 1.0)
    run = FakeRun(fake_args(tmp_path, budget=14.0))
    run.budget = gpurun.Budget(14.0, reserve=1.0)
    run.kept = tmp_path / "kernel.pid"
    start = time.monotonic()
    rc = run.main("all")
    elapsed = time.monotonic() - start
    assert elapsed < 14.0 + 3, "the run ends within its budget (and the last pack)"
    assert rc == 1  # a failure and a timeout
    doc = json.loads((tmp_path / "run" / "results" / "fake-gpu" / "run.json").read_text())
    steps = {s["name"]: s for s in doc["steps"]}
    assert list(steps) == ["doctor", "data", "cuda", "csan", "notebooks", "bench"]
    assert [steps[n]["status"] for n in ("doctor", "data", "cuda", "csan")] == ["passed", "passed", "passed", "timeout"]
    assert steps["csan"]["limit_s"] == 2.0 and steps["csan"]["seconds"] < 6
    assert steps["bench"]["status"] == "skipped" and "needs at least 60 s" in steps["bench"]["reason"]
    nbs = {nb["name"]: nb for nb in doc["notebooks"]}
    assert set(nbs) == set(gpurun.lesson_names()), "every notebook is named"
    assert nbs["08_prefetch"]["status"] == "passed" and nbs["08_prefetch"]["alone"]
    assert nbs["11_together"]["status"] == "failed" and nbs["03_dtypes"]["status"] == "timeout"
    assert nbs["03_dtypes"]["limit_s"] == 2.5
    kernel = int(run.kept.read_text())
    assert not _alive(kernel), "the notebook's kernel (its own session) is killed with it"
    together = [nb for nb in doc["notebooks"] if not nb["alone"] and nb["status"] == "passed"]
    assert together and all(nb["alongside"] for nb in together), "run.json says which ran alongside which"
    assert all(not nb["alongside"] for nb in doc["notebooks"] if nb["alone"])
    skipped = [nb for nb in doc["notebooks"] if nb["status"] == "skipped"]
    assert skipped and all("needs at least 1 s" in nb["reason"] for nb in skipped)
    assert doc["commit"] == "abc123" and doc["budget_s"] == 14.0
    with tarfile.open(tmp_path / "out" / "gpu-run.tar.gz") as tar:
        names = tar.getnames()
    assert "run/results/fake-gpu/run.json" in names and "run/junit/notebooks.xml" in names
    assert "run/logs/csan.log" in names
    table = capsys.readouterr().out
    assert "csan         timeout" in table and "03_dtypes  timeout" in table


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has died
        return f.read().split()[2] != "Z"


def test_without_cuda_the_run_stops_after_the_doctor(tmp_path):
    class NoCuda(FakeRun):
        def doctor_command(self, record):
            return sleeper(0.1, rc=3)

    run = NoCuda(fake_args(tmp_path, budget=30.0))
    assert run.main("all") == 1
    doc = json.loads((tmp_path / "run" / "results" / "gpu" / "run.json").read_text())
    assert [(s["name"], s["status"]) for s in doc["steps"]] == [
        ("doctor", "failed"), ("data", "skipped"), ("cuda", "skipped"), ("csan", "skipped"), ("notebooks", "skipped"),
        ("bench", "skipped")]


def test_a_step_that_ends_leaves_no_process_behind(tmp_path):
    """A worker that outlived its parent is reparented (no longer a descendant) but stays in the
    step's process group: it is killed with the step."""
    import psutil

    pid_file = tmp_path / "orphan.pid"
    child = gpurun.Child(["bash", "-c", f"sleep 300 & echo $! > {pid_file}; exit 0"], tmp_path / "log", dict(os.environ), 60)
    assert child.wait() == 0 and not child.timed_out
    try:  # SIGKILL is sent by then; give the kernel a moment to deliver it
        orphan = psutil.Process(int(pid_file.read_text()))
        psutil.wait_procs([orphan], timeout=5)
        assert orphan.status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        pass


def test_lessons_chooses_the_parts():
    assert gpurun.plan("tests")[0] == {"doctor", "cuda", "csan"}
    steps, names = gpurun.plan("03 bench")
    assert steps == {"doctor", "data", "notebooks", "bench"} and names == ["03_dtypes"]
    with pytest.raises(SystemExit, match="give all, tests, bench or lesson numbers"):
        gpurun.plan("everything")
    with pytest.raises(SystemExit, match="no notebooks/99_"):
        gpurun.plan("99")


def test_each_test_is_recorded_as_it_finishes(tmp_path):
    (tmp_path / "test_some.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_ok():
            pass

        def test_bad():
            assert 1 == 2, "one is not two"

        def test_error(broken):
            pass

        @pytest.mark.skip(reason="not here")
        def test_skip():
            pass
        """))
    records = tmp_path / "tests.jsonl"
    env = {**os.environ, "GPURUN_TESTS": str(records), "PYTHONPATH": str(ROOT / "tools")}
    subprocess.run([PY, "-m", "pytest", "-p", "gpurun", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
                    "--rootdir", str(tmp_path), str(tmp_path / "test_some.py")], env=env, cwd=tmp_path,
                   capture_output=True, timeout=120)
    tests = {t["name"].split("::")[1]: t for t in gpurun.read_tests(records)}
    assert {n: t["status"] for n, t in tests.items()} == {
        "test_ok": "passed", "test_bad": "failed", "test_error": "error", "test_skip": "skipped"}
    assert "one is not two" in tests["test_bad"]["message"] and "fixture broke" in tests["test_error"]["message"]
    assert gpurun.count(list(tests.values())) == "1 passed, 1 failed, 1 error, 1 skipped"


@pytest.mark.slow
def test_a_notebook_run_names_the_failing_cell_and_keeps_what_it_did(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("# the failing cell\nprint(x)\n1 / 0"), nbformat.v4.new_code_cell("y = 2")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "t.ipynb")
    rc = gpurun.run_notebook(tmp_path / "t.ipynb", tmp_path / "ex" / "t.ipynb", tmp_path / "ex" / "t.json", 60)
    doc = json.loads((tmp_path / "ex" / "t.json").read_text())
    assert rc == 1 and doc["status"] == "failed"
    assert doc["cell"] == {"index": 2, "code_cell": 2, "first_line": "print(x)"}
    assert "ZeroDivisionError" in doc["error"] and doc["cells_done"] == 2 and doc["cells_total"] == 3
    executed = nbformat.read(tmp_path / "ex" / "t.ipynb", as_version=4)
    assert executed.cells[2].outputs[0]["text"] == "1\n"  # the outputs up to the failure are kept


def test_junit_of_the_notebooks_has_the_cell_and_the_error(tmp_path):
    nbs = [gpurun.Notebook("01_a", "passed", 3.0), gpurun.Notebook("02_b", "skipped", reason="no time"),
           gpurun.Notebook("03_c", "failed", 4.0, cell={"index": 5, "first_line": "f()"}, error="Traceback\nValueError: v")]
    gpurun.junit_notebooks(nbs, tmp_path / "nb.xml")
    text = (tmp_path / "nb.xml").read_text()
    assert 'tests="3" failures="1" skipped="1"' in text and 'message="failed cell 5: f()"' in text
    assert "ValueError: v" in text


# --- the sanitizer's wiring, with a stand-in for CSAN -----------------------------------------

FAKE_CSAN = """
import torch
import torch.cuda._sanitizer as csan

LOG = []


class Handler:
    def _handle_kernel_launch(self, *args):
        return list(args)  # the test passes the errors it wants found


class Tool:
    enabled = False

    def __init__(self):
        self.dispatch = type("Dispatch", (), {"event_handler": Handler()})()

    def enable(self):
        self.enabled = True
        LOG.append("on")

    def disable(self):
        self.enabled = False
        LOG.append("off")


csan.cuda_sanitizer = Tool()
torch.cuda.is_available = lambda: True
"""

FAKE_TESTS = """
import pytest
import torch
from torch.cuda import _sanitizer as csan

from conftest import LOG


@pytest.fixture(scope="module")
def made():
    LOG.append(f"fixture with it {'on' if csan.cuda_sanitizer.enabled else 'off'}")
    return 1


def test_body_runs_with_it_on(made):
    assert csan.cuda_sanitizer.enabled and LOG[-1] == "on" and "fixture with it off" in LOG


def test_memmap_builds_pause_it():
    from tensordict import MemoryMappedTensor

    LOG.clear()
    MemoryMappedTensor.from_tensor(torch.zeros(3))
    assert LOG == ["off", "on"] and csan.cuda_sanitizer.enabled


def test_a_race_swallowed_still_fails():
    try:
        raise RuntimeError(csan.cuda_sanitizer.dispatch.event_handler._handle_kernel_launch("RACE on tensor 7"))
    except RuntimeError:
        pass


def test_a_race_raised_fails():
    raise csan.CUDASanitizerErrors(["RACE raised"])
"""


def test_the_sanitizer_is_on_for_test_bodies_only_and_its_report_fails_the_test(tmp_path):
    (tmp_path / "conftest.py").write_text(FAKE_CSAN)
    (tmp_path / "test_fake.py").write_text(FAKE_TESTS)
    records = tmp_path / "tests.jsonl"
    env = {**os.environ, "GPURUN_TESTS": str(records), "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "tools")])}
    env.pop("TORCH_CUDA_SANITIZER", None)
    out = subprocess.run([PY, "-m", "pytest", "-p", "cudasan", "-p", "gpurun", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--rootdir", str(tmp_path), "--cuda-sanitizer", "-q", "test_fake.py"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    tests = {t["name"].split("::")[1]: t for t in gpurun.read_tests(records)}
    assert {n: t["status"] for n, t in tests.items()} == {
        "test_body_runs_with_it_on": "passed", "test_memmap_builds_pause_it": "passed",
        "test_a_race_swallowed_still_fails": "failed", "test_a_race_raised_fails": "failed"}, out.stdout[-3000:]
    assert "SanitizerReport" in tests["test_a_race_swallowed_still_fails"]["message"]
    assert "RACE on tensor 7" in tests["test_a_race_swallowed_still_fails"]["message"]


def test_the_sanitizer_option_refuses_a_machine_without_cuda_and_the_environment_switch(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "CUDA_VISIBLE_DEVICES": ""}
    run = lambda env: subprocess.run(  # noqa: E731
        [PY, "-m", "pytest", "-p", "cudasan", "-o", "addopts=", "--rootdir", str(tmp_path), "--cuda-sanitizer", "test_x.py"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "TORCH_CUDA_SANITIZER" in run({**env, "TORCH_CUDA_SANITIZER": "1"}).stderr
    out = run({k: v for k, v in env.items() if k != "TORCH_CUDA_SANITIZER"})
    assert out.returncode != 0 and "torch sees no CUDA GPU" in out.stderr


# --- the commit of a checkout without .git -----------------------------------------------------


def test_a_copy_without_git_reports_the_commit_it_was_packed_at(tmp_path, monkeypatch):
    from gpufeed import config
    from gpufeed.measure import machine

    repo = tmp_path / "course"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("A = 1\n")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True).stdout  # noqa: E731
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    commit = git("rev-parse", "--short=12", "HEAD").strip()
    monkeypatch.setattr(config, "repo_root", lambda: repo)
    monkeypatch.delenv(machine.ENV_COMMIT, raising=False)
    assert machine.git_commit() == commit
    machine.write_commit_file(repo)
    subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)  # the node's copy has no .git
    machine._commit_from_file.cache_clear()
    assert machine.git_commit() == commit
    (repo / "src" / "a.py").write_text("A = 2\n")
    machine._commit_from_file.cache_clear()
    assert machine.git_commit() == f"{commit}+modified"
    monkeypatch.setenv(machine.ENV_COMMIT, "given")
    assert machine.git_commit() == "given"


# --- the time cap of the harness, and the bench under it ------------------------------------


def test_a_time_cap_stops_sampling_and_is_recorded(monkeypatch):
    from gpufeed.measure import harness
    from gpufeed.measure.machine import machine_info

    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.05)

    monkeypatch.setenv(harness.ENV_MEASURE_S, "0.1")
    m = harness.benchmark(slow, repeats=50, warmup=5)
    assert len(m.samples) == harness.MIN_SAMPLES and len(calls) == 2 + harness.MIN_SAMPLES  # warm-up cut too
    assert m.machine["measure_s"] == 0.1 and machine_info()["measure_s"] == 0.1
    ms = harness.interleave({"a": slow, "b": slow}, repeats=50, warmup=1)
    assert [len(m.samples) for m in ms] == [harness.MIN_SAMPLES] * 2
    monkeypatch.setenv(harness.ENV_MEASURE_S, "soon")
    with pytest.raises(ValueError, match="GPUFEED_MEASURE_S='soon'"):
        harness.measure_cap()
    monkeypatch.delenv(harness.ENV_MEASURE_S)
    assert len(harness.benchmark(lambda: None, repeats=7, warmup=0, with_machine=False).samples) == 7


@pytest.mark.slow
def test_the_bench_keeps_each_pipeline_as_it_finishes(tmp_path, monkeypatch):
    from gpufeed.measure import harness, pipelines
    from gpufeed.measure import suite as pb

    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(harness.ENV_MEASURE_S, "0.3")

    def cut(*args, **kwargs):  # the slot ends after the loaders, before the training step
        raise KeyboardInterrupt

    monkeypatch.setattr(pb, "make_model", cut)
    with pytest.raises(KeyboardInterrupt):
        pb.run(tmp_path / "out", quick=True, device="cpu", workload=pipelines.TINY, dali=False, log=lambda s: None)
    ms, doc = harness.load(tmp_path / "out" / pb.PARTIAL)
    assert not (tmp_path / "out" / pb.FILE).exists()
    assert [m.params["pipeline"] for m in ms] == ["naive", "tuned", "course", "course_uint8"]
    assert doc["measure_s"] == 0.3 and doc["machine"]["measure_s"] == 0.3
    assert all(1 <= doc["passes"][m.params["pipeline"]] <= pipelines.TINY.n // pipelines.TINY.batch for m in ms)


# --- the shared dataset builds ----------------------------------------------------------------


def test_prepare_builds_what_pipelines_prepare_would_find(tmp_path):
    from gpufeed.measure import datasets, pipelines

    spec = datasets._workload_dataset("bench", "bench", pipelines.TINY)
    extra = datasets.Dataset("lesson99", "lesson99/jpeg", 6, (48, 40), classes=2, memmaps=(("lesson99/mm", (24, 20)),))
    done = datasets.prepare(tmp_path, [spec, extra], workers=2, log=lambda s: None)
    assert [d["reused"] for d in done] == [False] * 4
    data = pipelines.prepare(pipelines.TINY, tmp_path / "bench", progress=False)
    assert data.synth_s == 0.0 and data.memmap_s == 0.0, "the bench finds its dataset built"
    assert [d["reused"] for d in datasets.prepare(tmp_path, [extra], workers=1, log=lambda s: None)] == [True, True]


def lesson_source(owner: str) -> str:
    """The percent-format source of lesson ``owner`` (``"lesson07"``)."""
    return next((ROOT / "notebooks").glob(f"{owner[-2:]}_*.py")).read_text()


def name_patterns(source: str) -> list:
    """Every string literal and f-string of ``source`` that could name a folder, as a regex: an
    f-string's fields match any text without a slash. F-strings that begin with a field are left
    out (``f"{w}x{h}"`` would match almost any name)."""
    import ast
    import re

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
            out.append(re.compile(re.escape(node.value)))
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            out.append(re.compile("".join(re.escape(v.value) if isinstance(v, ast.Constant) else "[^/]+"
                                          for v in node.values)))
    return out


def test_name_patterns_match_a_folder_only_in_the_shape_its_f_string_makes():
    pats = name_patterns('side, n = 224, 64\nhere / f"jpeg-{side}-{n}"\nf"{side}x{n}"\n"lesson07"\n')
    made = lambda name: any(p.fullmatch(name) for p in pats)  # noqa: E731
    assert made("jpeg-224-2000") and made("lesson07")
    assert not made("mm-224-2000") and not made("jpeg-224") and not made("224x64") and not made("lesson08")


def lesson11_workloads(cuda: bool):
    """``(QUICK, FULL)`` as lesson 11's source defines them, on a machine with or without CUDA."""
    import ast

    from gpufeed.measure import pipelines

    ns = {"pipelines": pipelines, "S": SimpleNamespace(cuda=cuda)}
    for node in ast.parse(lesson_source("lesson11")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in ("QUICK", "FULL") for t in node.targets):
            exec(compile(ast.Module([node], type_ignores=[]), "11_together.py", "exec"), ns)
    return ns["QUICK"], ns["FULL"]


def test_every_lesson_and_the_bench_have_their_datasets_listed_in_both_modes():
    from gpufeed.measure.datasets import _workload_dataset, datasets

    for quick, cuda in ((True, True), (False, True), (False, False)):
        specs = datasets(quick=quick, cuda=cuda)
        quick11, full11 = lesson11_workloads(cuda)
        assert {d.owner for d in specs} >= {"bench", "lesson05", "lesson07", "lesson09", "lesson10", "lesson11", "lesson12"}
        folders = [d.folder for d in specs]
        assert len(folders) == len(set(folders)), "no folder built twice"
        for d in specs:
            if d.owner == "lesson11":  # named by pipelines.prepare from the lesson's workload
                want = _workload_dataset("lesson11", "lesson11", quick11 if quick else full11)
                assert (d.folder, d.memmaps) == (want.folder, want.memmaps), "lesson 11's workload changed"
            elif d.owner.startswith("lesson"):  # each part of each path is a string or f-string of the lesson
                pats = name_patterns(lesson_source(d.owner))
                for path in (d.folder, *(m for m, _ in d.memmaps)):
                    for part in path.split("/"):
                        assert any(p.fullmatch(part) for p in pats), f"{d.owner}: {part!r} of {path!r} is not in the lesson"
