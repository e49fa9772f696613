"""``make test-gpu`` (tools/gpurun/) checked on a CPU: the planner on made-up estimates, the run with
fake steps that sleep (its budget, statuses, plan, references.json, the archive); the notebook runner; the per-test records; the sanitizer's wiring
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
from gpurun import notebook, plan, preflight, procs, report, runner, steps  # noqa: E402  (tools/gpurun/)
from gpurun.report import Entry  # noqa: E402

from gpufeed.measure import references  # noqa: E402

PY = sys.executable
pytest_plugins = ["pytester"]  # a pytest run in this process: the sanitizer's wiring
#: The environment of a pytest a test starts: only the plugins its command names (``-p``) load. The
#: installed ones cost every start 3 s: nbmake imports jsonschema, whose URI format checker compiles
#: 38 grammars (rfc3987_syntax) at import.
ONLY_NAMED_PLUGINS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def sleeper(seconds: float, rc: int = 0, write: Path | None = None, grandchild: Path | None = None) -> list[str]:
    """A command that sleeps, maybe writes a file or leaves a grandchild in a session of its own
    (as a Jupyter kernel is), then exits with ``rc``."""
    code = "import os, subprocess, sys, time\n"
    if grandchild:
        code += (f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
                 f"open({str(grandchild)!r}, 'w').write(str(p.pid))\n")
    if write:
        code += f"os.makedirs({str(write.parent)!r}, exist_ok=True); open({str(write)!r}, 'w').write('{{}}')\n"
    code += f"time.sleep({seconds}); sys.exit({rc})\n"
    return [PY, "-c", code]


@pytest.mark.parametrize("module", [notebook, plan, preflight, references, report, runner, steps], ids=lambda m: m.__name__)
def test_the_examples_in_the_docstrings_hold(module):
    """tools/ is outside make test's doctest paths: its examples run here."""
    import doctest

    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE).failed == 0


# --- the planner on made-up estimates ---------------------------------------------------------


def test_the_plan_runs_what_fits_and_the_rest_is_not_run_budget():
    rows = [Entry("cuda", "cuda", 50), Entry("csan", "csan", 50),
            *(Entry(f"{n:02d}_x", "quick", 30) for n in range(6)),  # 3 lanes: 60 s
            Entry("lesson03", "references", 100, stale=True), Entry("lesson08", "references", 30, stale=True),
            Entry("lesson09", "references", 30, stale=False)]
    planned = plan.fit(rows, 230, {"quick": 3})
    assert [e.name for e in planned if not e.fits] == ["lesson03"], "too long for the 70 s left; later ones fit"
    assert [e.name for e in plan.fit(rows, 160, {"quick": 3}) if e.fits] == ["cuda", "csan", *(f"{n:02d}_x" for n in range(6))]
    assert [e.name for e in plan.fit(rows, 150, {"quick": 3}) if e.fits] == ["cuda", "csan", "00_x", "01_x", "02_x"]
    assert [e.name for e in plan.fit(rows, 70, {"quick": 3}) if e.fits] == ["cuda"], "nothing else fits after cuda"


def test_stale_references_come_before_fresh_ones_the_oldest_first():
    refs = [Entry("lesson03", "references", 90, stale=False), Entry("lesson08", "references", 50, stale=True),
            Entry("lesson09", "references", 60, stale=True), Entry("bench", "references", 150, stale=True)]
    made = {"lesson03": {"when": "2026-11-20"}, "lesson08": {"when": "2026-11-26"}, "lesson09": {"when": "2026-11-25"}}
    ordered = plan.order_references(refs, made)
    assert [e.name for e in ordered] == ["bench", "lesson09", "lesson08", "lesson03"], "none made is oldest"
    fitted = plan.fit(ordered, 220)
    assert [(e.name, e.fits) for e in fitted] == [("bench", True), ("lesson09", True), ("lesson08", False),
                                                  ("lesson03", False)]


def test_estimates_come_from_the_last_passed_run_on_that_gpu(tmp_path):
    old, new = tmp_path / "a.json", tmp_path / "b.json"
    old.write_text(json.dumps({"finished": "2026-11-26T10:00:00", "steps": [], "items": [
        {"step": "quick", "name": "08_prefetch", "status": "passed", "seconds": 40}]}))
    new.write_text(json.dumps({"finished": "2026-11-27T10:00:00", "steps": [{"name": "cuda", "status": "passed", "seconds": 55}],
                               "items": [{"step": "quick", "name": "08_prefetch", "status": "passed", "seconds": 21},
                                         {"step": "quick", "name": "11_together", "status": "cut", "seconds": 99}]}))
    known = plan.estimates(plan.last_run([old, new, tmp_path / "missing.json"]))
    assert known == {("cuda", "cuda"): 55, ("quick", "08_prefetch"): 21, ("quick", "11_together"): 148.5}, (
        "a cut one takes longer than it ran")


def test_a_reference_is_stale_when_the_lesson_or_the_package_changed():
    files = {"src/gpufeed/a.py": b"A = 1\n", "notebooks/08_x.py": b"x = 1\n"}
    tree = (["src/gpufeed/a.py"], files.__getitem__)
    ref = references.record("notebooks/08_x.py", ["lesson08.json"], "abc", 50.0, "2026-11-26", tree)
    assert references.staleness(ref, "notebooks/08_x.py", tree) == (False, "fresh: made at abc, nothing changed since")
    files["src/gpufeed/a.py"] = b"A = 2\n"
    assert references.staleness(ref, "notebooks/08_x.py", tree) == (True, "stale: the package changed since abc")


def test_the_committed_h100_references_are_indexed_at_the_commit_they_name():
    folder = ROOT / "results" / "h100-80gb-hbm3"
    made = references.load(folder)
    assert set(made) == {"lesson08", "lesson09", "ceilings"}
    for name, entry in made.items():
        doc = json.loads((folder / f"{name}.json").read_text())
        assert entry["commit"] == doc["machine"]["commit"], f"{name}: hashed at the commit its machine record names"
        assert entry["mode"] == "full" and entry["seconds"] > 0 and all((folder / f).is_file() for f in entry["files"])
    if subprocess.run(["git", "cat-file", "-e", made["lesson08"]["commit"]], cwd=ROOT).returncode == 0:
        tree = references.commit_files(made["lesson08"]["commit"])
        assert references.record(made["lesson08"]["source"], [], None, None, "", tree)["package_sha256"] == \
            made["lesson08"]["package_sha256"]


# --- the whole run, every command a sleep -----------------------------------------------------

#: The table of a run a test can wait for: the same kinds with caps of seconds.
FAKE_STEPS = (
    steps.Step("preflight", "preflight", "", 0, 15, 1),
    steps.Step("data", "data", "", 0.5, 5, 1),
    steps.Step("cuda", "tests", "", 0.5, 3, 0.3, ("-m", "cuda")),
    steps.Step("csan", "tests", "", 0.5, 1, 0.5, ("-m", "cuda", "--cuda-sanitizer")),  # sleeps 30 s: cut at 1 s
    steps.Step("quick", "notebooks", "", 0.5, 60, 5),
    steps.Step("references", "references", "", 0.5, 10_000, 0),
)


#: Seconds each fake command sleeps: a process still running when the runner first looks, and short,
#: since a test's sleep holds a worker of `make test` (every time in the run is made up: the plan reads
#: estimates, the budget and caps are seconds, and the one step meant to outlive its cap sleeps 30 s).
NAP = 0.05


class FakeRun(runner.Run):
    """The run with every command a sleep: the sanitizer's tests outlive their cap (cut), quick
    notebooks take :data:`NAP` (11 fails when ``fail``), references too (lesson 08 writes its JSON)."""

    fail = False
    kept: Path
    poll_s = NAP  # looks at the running notebooks as often as they end

    def preflight(self):
        self.machine = {"slug": "fake-gpu", "gpu": "Fake", "commit": "abc123"}
        self.steps.append(Entry("preflight", "preflight", 1, "default", status=report.PASSED, seconds=0.1))
        return True

    def data_command(self, owners):
        return sleeper(NAP)

    def test_command(self, name, args):
        return sleeper(30, grandchild=self.kept) if name == "csan" else sleeper(NAP)

    def quick_command(self, i, copy):
        return sleeper(NAP, rc=1 if self.fail and i.name.startswith("11") else 0)

    def reference_command(self, i, p):
        return sleeper(NAP, write=self.results() / "lesson08.json" if p.name == "lesson08" else None)


def fake_args(tmp_path, budget: float) -> SimpleNamespace:
    return SimpleNamespace(budget=budget, started=None, run_dir=tmp_path / "run", archive=tmp_path / "out" / "gpu-run.tar.gz",
                           standin=None, jobs=3, measure_s=5.0, cache=tmp_path / "cache", lessons="all")


def earlier_run(tmp_path, quick_s: float, reference_s: dict) -> None:
    """A run.json of an earlier run on the fake GPU: where the plan takes its estimates."""
    from gpufeed.measure.lessons import LESSONS

    items = [{"step": "quick", "name": x.stem, "status": "passed", "seconds": quick_s} for x in LESSONS]
    items += [{"step": "references", "name": n, "status": "passed", "seconds": s} for n, s in reference_s.items()]
    path = tmp_path / "run-20261126-100000" / "results" / "fake-gpu" / "run.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"finished": "2026-11-26T10:00:00", "steps": [], "items": items}))


@pytest.mark.parametrize("fail", [False, True], ids=["all-passed", "a-notebook-fails"])
def test_the_run_keeps_to_its_budget_and_names_every_step_and_lesson(tmp_path, monkeypatch, capsys, fail):
    from gpufeed.measure.lessons import LESSONS

    monkeypatch.setattr(runner, "STEPS", FAKE_STEPS)
    earlier_run(tmp_path, 0.5, {**{p.name: 0.5 for p in steps.producers()}, "lesson03": 500, "ceilings": 400})
    run = FakeRun(fake_args(tmp_path, budget=120.0))
    run.fail, run.kept = fail, tmp_path / "kernel.pid"
    start = time.monotonic()
    rc = run.main(*runner.selection("all"))
    assert time.monotonic() - start < 120, "the run ends within its budget"
    assert rc == (1 if fail else 0), "a cut step and lessons not run (budget) are no failure; a failed notebook is"
    doc = json.loads((tmp_path / "run" / "results" / "fake-gpu" / "run.json").read_text())
    st = {s["name"]: s for s in doc["steps"]}
    assert list(st) == [s.name for s in FAKE_STEPS], "every step, in the table's order"
    assert {n: s["status"] for n, s in st.items()} == {
        "preflight": "passed", "data": "passed", "cuda": "passed", "csan": "cut", "quick": "failed" if fail else "passed",
        "references": "passed"}
    assert not _alive(int(run.kept.read_text())), "a cut step's process tree is killed, its kernel's session too"
    quick = {e["name"]: e for e in doc["items"] if e["step"] == "quick"}
    assert list(quick) == [x.stem for x in LESSONS]
    assert all(e["status"] == ("failed" if fail and n.startswith("11") else "passed") for n, e in quick.items())
    refs = {e["name"]: e for e in doc["items"] if e["step"] == "references"}
    assert [n for n, e in refs.items() if e["status"] == "not run (budget)"] == ["lesson03", "ceilings"], (
        "what does not fit is not run; what does fits after it")
    assert list(doc["lessons"]) == [x.number for x in LESSONS] + ["bench", "ceilings"]
    assert doc["lessons"]["08"] == {"quick": "passed", "references": "passed"} and doc["lessons"]["06"] == {"quick": "passed"}
    assert [p["name"] for p in doc["plan"]][:3] == ["cuda", "csan", "00_setup"] and "lesson03" in [p["name"] for p in doc["plan"]]
    assert next(p for p in doc["plan"] if p["name"] == "lesson03")["fits"] is False
    assert next(p for p in doc["plan"] if p["name"] == "08_prefetch")["basis"] == "last run on fake-gpu"
    made = references.load(tmp_path / "run" / "results" / "fake-gpu")
    assert made["lesson08"]["files"] == ["lesson08.json"] and made["lesson08"]["commit"] == "abc123"
    with tarfile.open(tmp_path / "out" / "gpu-run.tar.gz") as tar:
        names = tar.getnames()
    assert {"run/results/fake-gpu/run.json", "run/junit/quick.xml", "run/junit/references.xml", "run/logs/csan.log"} <= set(names)
    out = capsys.readouterr().out
    assert out.index("plan for") < out.index("cuda: started"), "the plan is printed before anything runs"
    assert out.strip().splitlines()[-1].startswith(f"test-gpu: {'FAILED' if fail else 'passed'}; steps: ")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has died
        return f.read().split()[2] != "Z"


def test_a_preflight_that_fails_stops_the_run_with_one_line(tmp_path, monkeypatch, capsys):
    from gpurun import preflight

    monkeypatch.setattr(preflight, "problems", lambda *a, **k: ["torch sees no CUDA GPU: this runs on a GPU node"])
    run = runner.Run(fake_args(tmp_path, budget=30.0))
    assert run.main(*runner.selection("all")) == 3
    doc = json.loads(next((tmp_path / "run" / "results").glob("*/run.json")).read_text())
    assert [(s["name"], s["status"]) for s in doc["steps"]] == [("preflight", "failed")] + [
        (s.name, "not run") for s in steps.STEPS[1:]]
    assert capsys.readouterr().err.strip() == "test-gpu: preflight failed: torch sees no CUDA GPU: this runs on a GPU node"
    assert (tmp_path / "run" / "logs" / "pip-freeze.txt").read_text().count("==") > 20


def test_a_step_that_ends_leaves_no_process_behind(tmp_path):
    """A worker that outlived its parent is reparented (no longer a descendant) but stays in the
    step's process group: it is killed with the step."""
    import psutil

    pid_file = tmp_path / "orphan.pid"
    child = procs.Child(["bash", "-c", f"sleep 300 & echo $! > {pid_file}; exit 0"], tmp_path / "log", dict(os.environ), 60)
    assert child.wait() == 0 and not child.cut
    orphan = psutil.Process(int(pid_file.read_text()))
    deadline = time.monotonic() + 5  # SIGKILL is sent by then; give the kernel a moment to deliver it
    while procs._running(orphan) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not procs._running(orphan)  # gone, or a zombie: dead, not yet reaped by its new parent


def test_lessons_chooses_the_parts():
    assert runner.selection("tests")[0] == {"preflight", "cuda", "csan"}
    chosen, numbers = runner.selection("03 bench")
    assert chosen == {"preflight", "data", "quick", "references", "bench"} and numbers == ["03"]
    with pytest.raises(SystemExit, match="give all, tests, step names"):
        runner.selection("everything")
    with pytest.raises(SystemExit, match="99"):
        runner.selection("99")


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
    env = {**os.environ, **ONLY_NAMED_PLUGINS, "GPURUN_TESTS": str(records), "PYTHONPATH": str(ROOT / "tools")}
    subprocess.run([PY, "-m", "pytest", "-p", "gpurun.plugin", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
                    "--rootdir", str(tmp_path), str(tmp_path / "test_some.py")], env=env, cwd=tmp_path,
                   capture_output=True, timeout=120)
    tests = {t["name"].split("::")[1]: t for t in report.read_tests(records)}
    assert {n: t["status"] for n, t in tests.items()} == {
        "test_ok": "passed", "test_bad": "failed", "test_error": "error", "test_skip": "skipped"}
    assert "one is not two" in tests["test_bad"]["message"] and "fixture broke" in tests["test_error"]["message"]
    assert report.count(list(tests.values())) == "1 passed, 1 failed, 1 error, 1 skipped"


@pytest.mark.slow
def test_a_notebook_run_names_the_failing_cell_and_keeps_what_it_did(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("# the failing cell\nprint(x)\n1 / 0"), nbformat.v4.new_code_cell("y = 2")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "t.ipynb")
    rc = notebook.run_notebook(tmp_path / "t.ipynb", tmp_path / "ex" / "t.ipynb", tmp_path / "ex" / "t.json", 60)
    doc = json.loads((tmp_path / "ex" / "t.json").read_text())
    assert rc == 1 and doc["status"] == "failed"
    assert doc["cell"] == {"index": 2, "code_cell": 2, "first_line": "print(x)"}
    assert "ZeroDivisionError" in doc["error"] and doc["cells_done"] == 2 and doc["cells_total"] == 3
    executed = nbformat.read(tmp_path / "ex" / "t.ipynb", as_version=4)
    assert executed.cells[2].outputs[0]["text"] == "1\n"  # the outputs up to the failure are kept


def test_junit_names_each_notebook_a_failure_with_its_cell_and_what_was_not_run():
    nbs = [Entry("01_a", "quick", status="passed", seconds=3.0), Entry("02_b", "quick", status="not run (budget)", reason="no time"),
           Entry("03_c", "quick", status="failed", seconds=4.0, cell={"index": 5, "first_line": "f()"}, error="Traceback\nValueError: v")]
    report.junit(nbs, Path(os.environ.get("TMPDIR", "/tmp")) / "gpurun-nb.xml", "quick")
    text = (Path(os.environ.get("TMPDIR", "/tmp")) / "gpurun-nb.xml").read_text()
    assert 'tests="3" failures="1" skipped="1"' in text and 'message="failed cell 5: f()"' in text
    assert "ValueError: v" in text and 'message="not run (budget): no time"' in text


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


@pytest.fixture
def pytest_here(request, monkeypatch):
    """A pytest run on ``pytester.path`` in this process, with only the plugins its arguments name:
    torch and tensordict are imported already, where a pytest of its own would spend 6 s importing
    them. They are imported before pytester notes which modules this process holds, so that they
    stay (a second torch in one process aborts it); what the fake CSAN of :data:`FAKE_CSAN` and the
    plugins replace in them is put back when the test ends."""
    import inspect

    import gpurun.plugin
    import torch
    from tensordict import MemoryMappedTensor
    from torch.cuda import _sanitizer as csan

    monkeypatch.setattr(csan, "cuda_sanitizer", csan.cuda_sanitizer)
    monkeypatch.setattr(torch.cuda, "is_available", torch.cuda.is_available)
    monkeypatch.setattr(MemoryMappedTensor, "from_tensor", inspect.getattr_static(MemoryMappedTensor, "from_tensor"))
    monkeypatch.setattr(gpurun.plugin, "_report_path", None)
    for name, value in ONLY_NAMED_PLUGINS.items():
        monkeypatch.setenv(name, value)
    pytester = request.getfixturevalue("pytester")
    pytester.run_here = lambda *args: pytester.runpytest_inprocess("-p", "no:cacheprovider", "-o", "addopts=", *args)
    return pytester


def test_the_sanitizer_is_on_for_test_bodies_only_and_its_report_fails_the_test(pytest_here, monkeypatch):
    pytester = pytest_here
    pytester.makeconftest(FAKE_CSAN)
    pytester.makepyfile(test_fake=FAKE_TESTS)
    records = pytester.path / "tests.jsonl"
    monkeypatch.setenv("GPURUN_TESTS", str(records))
    monkeypatch.delenv("TORCH_CUDA_SANITIZER", raising=False)
    out = pytester.run_here("-p", "cudasan", "-p", "gpurun.plugin", "--cuda-sanitizer", "-q", "test_fake.py")
    tests = {t["name"].split("::")[1]: t for t in report.read_tests(records)}
    assert {n: t["status"] for n, t in tests.items()} == {
        "test_body_runs_with_it_on": "passed", "test_memmap_builds_pause_it": "passed",
        "test_a_race_swallowed_still_fails": "failed", "test_a_race_raised_fails": "failed"}, out.stdout.str()[-3000:]
    assert "SanitizerReport" in tests["test_a_race_swallowed_still_fails"]["message"]
    assert "RACE on tensor 7" in tests["test_a_race_swallowed_still_fails"]["message"]


def test_the_sanitizer_option_refuses_a_machine_without_cuda_and_the_environment_switch(pytest_here, monkeypatch):
    import torch

    pytest_here.makepyfile(test_x="def test_x():\n    pass\n")
    run = lambda: pytest_here.run_here("-p", "cudasan", "--cuda-sanitizer", "test_x.py")  # noqa: E731
    monkeypatch.setenv("TORCH_CUDA_SANITIZER", "1")
    out = run()
    assert out.ret != 0 and "unset TORCH_CUDA_SANITIZER" in out.stderr.str()
    monkeypatch.delenv("TORCH_CUDA_SANITIZER")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as where CUDA_VISIBLE_DEVICES is empty
    out = run()
    assert out.ret != 0 and "torch sees no CUDA GPU" in out.stderr.str()


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

    spec = datasets.workload_dataset("bench", "bench", pipelines.TINY)
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
    """``{"quick": QUICK, "site": SITE, "full": FULL}`` as lesson 11's source defines them, on a machine
    with or without CUDA."""
    import ast

    from gpufeed.measure import pipelines

    ns = {"pipelines": pipelines, "S": SimpleNamespace(cuda=cuda)}
    for node in ast.parse(lesson_source("lesson11")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in ("QUICK", "SITE", "FULL") for t in node.targets):
            exec(compile(ast.Module([node], type_ignores=[]), "11_together.py", "exec"), ns)
    return {"quick": ns["QUICK"], "site": ns["SITE"], "full": ns["FULL"]}


def test_every_lesson_and_the_bench_have_their_datasets_listed_in_every_mode():
    from gpufeed.measure.datasets import datasets, workload_dataset

    for mode, cuda in (("quick", True), ("full", True), ("full", False), ("site", False)):
        specs = datasets(mode, cuda=cuda)
        workloads11 = lesson11_workloads(cuda)
        assert {d.owner for d in specs} >= {"bench", "lesson05", "lesson07", "lesson09", "lesson10", "lesson11", "lesson12"}
        folders = [d.folder for d in specs]
        assert len(folders) == len(set(folders)), "no folder built twice"
        for d in specs:
            if d.owner == "lesson11":  # named by pipelines.prepare from the lesson's workload
                want = workload_dataset("lesson11", "lesson11", workloads11[mode])
                assert (d.folder, d.memmaps) == (want.folder, want.memmaps), "lesson 11's workload changed"
            elif d.owner.startswith("lesson"):  # each part of each path is a string or f-string of the lesson
                pats = name_patterns(lesson_source(d.owner))
                for path in (d.folder, *(m for m, _ in d.memmaps)):
                    for part in path.split("/"):
                        assert any(p.fullmatch(part) for p in pats), f"{d.owner}: {part!r} of {path!r} is not in the lesson"

