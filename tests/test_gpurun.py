"""``make test-gpu`` (tools/gpurun/) checked on a CPU: the planner on made-up estimates, the run with
fake steps that sleep (its budget, statuses, plan, references.json, the archive); the notebook runner; the per-test records; the sanitizer's wiring
(tests/cudasan.py) with a stand-in for CSAN; the commit of a checkout without ``.git``; the time cap
of the harness; the bench's partial results; the shared dataset builds."""

import json
import os
import re
import shutil
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
import nodevenv  # noqa: E402  (tests/nodevenv.py: a GPU node's python, made here)
from gpurun import notebook, outbox, plan, preflight, procs, report, runner, steps  # noqa: E402  (tools/gpurun/)
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


@pytest.mark.parametrize("module", [notebook, outbox, plan, preflight, references, report, runner, steps],
                         ids=lambda m: m.__name__)
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
    runs = plan.read_runs([old, new, tmp_path / "missing.json"])
    assert plan.estimates(runs[0]) == {("cuda", "cuda"): (55, ""), ("quick", "08_prefetch"): (21, ""),
                                       ("quick", "11_together"): (148.5, "cut at 99 s there, x1.5")}, (
        "the newest first; a cut one takes longer than it ran")
    est = plan.Estimator("fake", runs, {}, None, cores=2, lanes=1)
    assert est("quick", "08_prefetch", 30) == (21, "last run on fake") and est("quick", "00_setup", 30)[1] == "default (no GPU run timed it)"
    old.write_text(json.dumps({"finished": "2026-11-26T10:00:00", "steps": [], "items": [
        {"step": "quick", "name": "00_setup", "status": "passed", "seconds": 12}]}))
    est = plan.Estimator("fake", plan.read_runs([old, new]), {}, None, cores=2, lanes=1)
    assert est("quick", "00_setup", 30) == (12, "last run on fake"), "what the newest did not time, an older run did"


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


# --- estimates for a GPU never seen: the committed H100 run ------------------------------------

H100 = ROOT / "results" / "h100-80gb-hbm3" / "run.json"


def test_the_committed_h100_run_says_where_each_number_comes_from():
    from gpufeed.measure.lessons import LESSONS

    doc = json.loads(H100.read_text())
    assert doc["format"] == runner.FORMAT and doc["machine"]["cores"] == 16 and doc["lanes"] == 6
    assert doc["commit"] == references.load(H100.parent)["lesson08"]["commit"], "the run that made the references"
    assert sorted(e["name"] for e in doc["items"] if e["step"] == "quick") == [x.stem for x in LESSONS]
    for e in [*doc["steps"], *doc["items"]]:
        assert e["source"] and e["status"] in ("passed", "failed", "finished", "cut", "not run"), e["name"]
        assert (e["seconds"] is None) == (e["status"] == "not run"), e["name"]
    quick = {e["name"]: e["status"] for e in doc["items"] if e["step"] == "quick"}
    assert sorted(quick.values()).count("finished") == 10 and [n for n, v in quick.items() if v == "cut"] == [
        "07_dataloader", "08_prefetch"], "10 of 13 finished before the cut at 200 s; 07 and 08 were cut"


def results_with(tmp_path, runs: dict[str, dict]) -> Path:
    """A checkout root whose results hold the committed H100 run and ``runs`` (``{slug: run.json}``)."""
    (tmp_path / "results" / "h100-80gb-hbm3").mkdir(parents=True)
    shutil.copy(H100, tmp_path / "results" / "h100-80gb-hbm3" / "run.json")
    for slug, doc in runs.items():
        (tmp_path / "results" / slug).mkdir()
        (tmp_path / "results" / slug / "run.json").write_text(json.dumps(doc))
    return tmp_path


def plan_for(root: Path, slug: str = "h200", cores: int = 16, lanes: int = 5, standin: bool = False) -> dict:
    selected, numbers = runner.selection("all")
    rows, _ = plan.build(order=steps.ORDERS["default"], selected=selected, lessons=numbers, slug=slug, standin=standin,
                         cores=cores, lanes=lanes, left=10_000, budget=460, earlier=[], root=root)
    return {e.name: e for e in rows}


def test_a_gpu_never_seen_plans_with_the_h100_run_scaled_by_the_lanes_not_with_defaults(tmp_path):
    doc = json.loads(H100.read_text())
    timed = {e["name"] for e in [*doc["steps"], *doc["items"]] if e.get("seconds")}
    rows = plan_for(results_with(tmp_path, {}))
    for name, e in rows.items():  # Lesson.gpu_s only where the H100 timed nothing
        assert e.basis.startswith("h100-80gb-hbm3 2026-11-26") if name in timed else e.basis == "default (no GPU run timed it)"
    assert sorted(n for n, e in rows.items() if e.basis.startswith("default")) == [
        "09_augment", "lesson01", "lesson02", "lesson04", "lesson05", "lesson10", "lesson12", "topology"]
    assert {n: rows[n].estimate_s for n in ("00_setup", "07_dataloader", "08_prefetch", "lesson08", "bench", "cuda")} == {
        "00_setup": 100, "07_dataloader": 150, "08_prefetch": 300, "lesson08": 53, "bench": 225,
        "cuda": 115}, "finished as timed, cut x1.5, a step at most its cap (a quarter of 460 s)"
    fewer = plan_for(results_with(tmp_path / "b", {}), cores=8, lanes=4)  # 2 cores a lane, there 16 / 6
    assert (fewer["00_setup"].estimate_s, fewer["lesson08"].estimate_s) == (133.0, 106.0)
    assert fewer["00_setup"].basis.endswith("x1.33 (4 lanes on 8 cores, there 6 on 16)")
    roomier = plan_for(results_with(tmp_path / "c", {}), cores=64, lanes=6)
    assert roomier["00_setup"].estimate_s == 100, "never scaled down: a notebook does not use all its share"


def test_a_run_on_the_same_gpu_wins_and_the_stand_in_never_takes_a_gpus_figures(tmp_path):
    own = {"finished": "2026-12-01", "machine": {"cores": 16}, "lanes": 5, "steps": [],
           "items": [{"step": "quick", "name": "08_prefetch", "status": "passed", "seconds": 40}]}
    rows = plan_for(results_with(tmp_path, {"h200": own}))
    assert (rows["08_prefetch"].estimate_s, rows["08_prefetch"].basis) == (40, "last run on h200")
    assert rows["00_setup"].basis.startswith("h100-80gb-hbm3"), "what this GPU's run did not time, the H100's did"
    standin = plan_for(results_with(tmp_path / "b", {}), slug="cpu-x", cores=2, lanes=1, standin=True)
    assert all("(stand-in)" in e.basis for e in standin.values())
    assert standin["lesson08"].estimate_s == steps.producers()[6].lesson.gpu_s[0] * plan.STANDIN_FACTOR, (
        "the stand-in's references run in quick mode: their quick default")


def test_the_references_of_lessons_without_a_gpu_number_come_first():
    refs = [Entry("lesson03", "references", 90, stale=True), Entry("lesson08", "references", 50, stale=True),
            Entry("lesson09", "references", 60, stale=False), Entry("lesson12", "references", 60, stale=True)]
    made = {"lesson03": {"when": "2026-11-20"}, "lesson08": {"when": "2026-11-26"}, "lesson09": {"when": "2026-11-25"}}
    ordered = plan.order_references(refs, made, lacking={"lesson03", "lesson12"})
    assert [e.name for e in ordered] == ["lesson12", "lesson03", "lesson08", "lesson09"], (
        "no GPU number first (none made is oldest), then stale, then fresh")
    lacking = plan.lacking_numbers()
    from gpufeed.measure import evidence
    from gpufeed.measure.lessons import LESSONS

    assert {x.owner for x in LESSONS if x.references and evidence.lacks_gpu_number(x)} <= lacking
    assert "ceilings" not in lacking and "lesson08" not in lacking, "lesson 00's GPU claim names the committed ceilings"


# --- the whole run, every command a sleep -----------------------------------------------------

#: The table of a run a test can wait for: the same kinds with caps of seconds.
FAKE_STEPS = (
    steps.Step("preflight", "preflight", "", 0, 15, 1),
    steps.Step("topology", "command", "", 0.5, 5, 0.2, ("python", "-c", "print('GPU0 X')"), ("python", "-c", "print(1)")),
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
        return sleeper(30, grandchild=self.kept) if name == "csan" else sleeper(NAP, write=self.dir / "junit" / "cuda.xml")

    def quick_command(self, i):
        return sleeper(NAP, rc=1 if self.fail and i.name.startswith("11") else 0)

    def reference_command(self, i, p):
        return sleeper(NAP, write=self.results() / "lesson08.json" if p.name == "lesson08" else None)


def fake_args(tmp_path, budget: float, plan: str = "default") -> SimpleNamespace:
    return SimpleNamespace(budget=budget, started=None, run_dir=tmp_path / "run", archive=tmp_path / "out" / "gpu-run.tar.gz",
                           out=tmp_path / "out", standin=None, jobs=3, measure_s=5.0, cache=tmp_path / "cache",
                           lessons="all", plan=plan)


@pytest.fixture
def room(monkeypatch):
    """Disk enough for any plan: the fake runs plan full-mode datasets they never build (12 GiB)."""
    monkeypatch.setattr(preflight, "disk_problems", lambda cache, need: [])


def earlier_run(tmp_path, quick_s: float, reference_s: dict) -> None:
    """A run.json of an earlier run on the fake GPU: where the plan takes its estimates."""
    from gpufeed.measure.lessons import LESSONS

    items = [{"step": "quick", "name": x.stem, "status": "passed", "seconds": quick_s} for x in LESSONS]
    items += [{"step": "references", "name": n, "status": "passed", "seconds": s} for n, s in reference_s.items()]
    path = tmp_path / "run-20261126-100000" / "results" / "fake-gpu" / "run.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"finished": "2026-11-26T10:00:00", "steps": [], "items": items}))


@pytest.mark.parametrize("fail", [False, True], ids=["all-passed", "a-notebook-fails"])
def test_the_run_keeps_to_its_budget_and_names_every_step_and_lesson(tmp_path, monkeypatch, capsys, room, fail):
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
        "preflight": "passed", "topology": "passed", "data": "passed", "cuda": "passed", "csan": "cut",
        "quick": "failed" if fail else "passed", "references": "passed"}
    assert "GPU0 X" in (tmp_path / "run" / st["topology"]["log"]).read_text(), "a command row's output is its log"
    assert not _alive(int(run.kept.read_text())), "a cut step's process tree is killed, its kernel's session too"
    quick = {e["name"]: e for e in doc["items"] if e["step"] == "quick"}
    assert list(quick) == [x.stem for x in LESSONS]
    assert all(e["status"] == ("failed" if fail and n.startswith("11") else "passed") for n, e in quick.items())
    refs = {e["name"]: e for e in doc["items"] if e["step"] == "references"}
    assert [n for n, e in refs.items() if e["status"] == "not run (budget)"] == ["lesson03", "ceilings"], (
        "what does not fit is not run; what does fits after it")
    assert list(doc["lessons"]) == [x.number for x in LESSONS] + ["bench", "ceilings"]
    assert doc["lessons"]["08"] == {"quick": "passed", "references": "passed"} and doc["lessons"]["06"] == {"quick": "passed"}
    assert [p["name"] for p in doc["plan"]][:4] == ["topology", "cuda", "csan", "00_setup"] and "lesson03" in [p["name"] for p in doc["plan"]]
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
    # $OUT: at most 8 files, each readable without the archive; run.json as in the run folder
    got = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert got == sorted(["gpu-run.tar.gz", "run.json", "summary.txt", "cuda.xml", "quick.xml", "references.xml"]), (
        "the fakes write no csan.xml (cut) and no node-env log")
    assert set(got) <= set(outbox.NAMES) and len(outbox.NAMES) <= 8
    assert json.loads((tmp_path / "out" / "run.json").read_text()) == doc
    screen = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert len(screen) <= 24 and max(map(len, screen)) <= 100
    assert screen[0].startswith(f"test-gpu: {'FAILED (exit 1)' if fail else 'passed'}")
    assert [x.split(":")[0] for x in screen if x.startswith("  failed ")] == (["  failed 11_together"] if fail else [])
    assert doc["archive"]["left_out"] == [] and doc["archive"]["bytes"] == (tmp_path / "out" / "gpu-run.tar.gz").stat().st_size


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


def test_the_references_plan_runs_references_after_the_cuda_tests_and_before_the_notebooks(tmp_path, monkeypatch, capsys,
                                                                                          room):
    """GPU_PLAN=references: the cuda tests, then the references (those whose lessons have no GPU
    number of ours first), then the sanitizer and the quick notebooks with what is left."""
    monkeypatch.setattr(runner, "STEPS", FAKE_STEPS)
    earlier_run(tmp_path, 0.5, {p.name: 0.5 for p in steps.producers()})
    run = FakeRun(fake_args(tmp_path, budget=120.0, plan="references"))
    run.kept = tmp_path / "kernel.pid"
    assert run.main(*runner.selection("all")) == 0
    started = [line.split("] ", 1)[1].split(":")[0] for line in capsys.readouterr().out.splitlines()
               if ": started, limit" in line]
    refs = [p.name for p in steps.producers()]
    first_ref = min(started.index(n) for n in refs)
    assert started.index("cuda") < first_ref and max(started.index(n) for n in refs) < started.index("csan")
    assert started.index("csan") < min(started.index(n) for n in started if n[:2].isdigit())
    lacking = plan.lacking_numbers()
    assert [n for n in started if n in refs] == [n for n in refs if n in lacking] + [n for n in refs if n not in lacking]
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    assert doc["plan_name"] == "references" and [s["name"] for s in doc["steps"]] == list(steps.ORDERS["references"])


def test_a_run_that_breaks_still_returns_why(tmp_path, monkeypatch, room):
    monkeypatch.setattr(runner, "STEPS", FAKE_STEPS)

    def broken(self, s):
        raise RuntimeError("the step broke")

    monkeypatch.setitem(runner.Run.RUNS, "notebooks", broken)
    run = FakeRun(fake_args(tmp_path, budget=60.0))
    run.kept = tmp_path / "kernel.pid"
    with pytest.raises(RuntimeError, match="the step broke"):
        run.main(*runner.selection("all"))
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    assert doc["error"] == "RuntimeError: the step broke" and doc["steps"][3]["status"] == "passed", "cuda ran before"
    assert (tmp_path / "out" / "summary.txt").read_text().splitlines()[2] == "error: RuntimeError: the step broke"
    assert "raise RuntimeError" in (tmp_path / "run" / "logs" / "gpurun-error.txt").read_text()


def test_the_preflight_asks_for_the_disk_the_plans_datasets_need(tmp_path, monkeypatch, capsys):
    from gpufeed.measure.lessons import lesson

    monkeypatch.setattr(runner, "STEPS", FAKE_STEPS)
    earlier_run(tmp_path, 0.5, {p.name: 0.5 for p in steps.producers()})
    free = SimpleNamespace(free=3 * 2**30, total=2**40, used=0)
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda path: free)
    everything = FakeRun(fake_args(tmp_path, budget=120.0))
    assert everything.main(*runner.selection("all")) == 3, "the bench's and the lessons' full datasets: 12 GiB"
    assert everything.need_bytes > 10 * 2**30
    line = capsys.readouterr().err.strip()
    assert line == (f"test-gpu: preflight failed: 3.0 GiB free at {tmp_path / 'cache'}, the plan needs "
                    f"{everything.need_bytes / 2**30:.1f} GiB: free some, set GPUFEED_CACHE to a larger disk, or plan "
                    "less (LESSONS=...)").replace(f"at {tmp_path / 'cache'}", f"at {preflight.existing(tmp_path / 'cache')}")
    (tmp_path / "run").rename(tmp_path / "failed")
    one = FakeRun(fake_args(tmp_path, budget=120.0))
    assert one.main(*runner.selection("08")) == 0, "lesson 08's datasets fit in 3 GiB"
    assert one.need_bytes == preflight.need_bytes([*lesson("08").datasets("quick", True), *lesson("08").datasets("full", True)])


def test_the_cache_goes_to_the_largest_free_disk_that_is_not_in_memory(tmp_path, monkeypatch):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    gib = {a: 5, b: 50, c: 500}
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda p: SimpleNamespace(free=gib[Path(p)] * 2**30))
    chosen, said = preflight.choose_cache([a / "x", b / "x", c / "x"], mounts=f"tmpfs {c} tmpfs rw 0 0\n")
    assert chosen == b / "x"
    assert said == [f"{a / 'x'}: 5.0 GiB free", f"{b / 'x'}: 50.0 GiB free", f"{c / 'x'}: in memory (tmpfs): not used"]


def test_the_archive_keeps_under_its_cap_leaving_out_the_least_useful_first(tmp_path):
    run = tmp_path / "gpu-run"
    files = {"results/h200/run.json": b"{}", "results/h200/lesson08.json": os.urandom(300_000),
             "logs/cuda.log": b"ok\n" * 1000, "executed/08_prefetch.ipynb": os.urandom(300_000),
             "executed/quick/00_setup.ipynb": os.urandom(200_000), "executed/quick/04_jpeg.ipynb": os.urandom(600_000)}
    for name, data in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    packer = outbox.Packer(cap=1_000_000, margin=10_000)
    kept, left = packer.select(run)
    assert left == [("executed/quick/04_jpeg.ipynb", 600_000)], "a quick notebook's figures go first, the largest first"
    size = packer.pack(run, tmp_path / "out" / "a.tar.gz", kept)
    assert size == (tmp_path / "out" / "a.tar.gz").stat().st_size <= 1_000_000
    with tarfile.open(tmp_path / "out" / "a.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(f"gpu-run/{n}" for n in files if n != "executed/quick/04_jpeg.ipynb")
    assert outbox.put_file(tmp_path / "out", "node-env.log", run / "logs" / "cuda.log", cap=30) is None
    assert (tmp_path / "out" / "node-env.log").read_text() == "[the first 2970 of 3000 bytes left out]\n" + "ok\n" * 10
    with pytest.raises(ValueError, match="holds only"):
        outbox.put(tmp_path / "out", "extra.txt", "no")


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
    assert runner.selection("tests")[0] == {"preflight", "topology", "cuda", "csan"}
    chosen, numbers = runner.selection("03 bench")
    assert chosen == {"preflight", "topology", "data", "quick", "references", "bench"} and numbers == ["03"]
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


@pytest.mark.slow
def test_a_quick_notebook_cut_at_its_limit_keeps_the_cells_it_finished(tmp_path):
    """A quick notebook runs through the course's notebook runner (saved after every cell), with a
    kernel of the run's own python: cut in its second cell, it keeps the first's output."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"),
                                         nbformat.v4.new_code_cell("import time\ntime.sleep(600)"),
                                         nbformat.v4.new_code_cell("print('never')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "t.ipynb")
    run = runner.Run(fake_args(tmp_path, budget=600.0))
    i = Entry("t", "quick", 5, limit_s=600)
    executed, result = tmp_path / "run" / "executed" / "quick" / "t.ipynb", tmp_path / "run" / "logs" / "quick-t.json"
    env = {**run.env(quick=True, results=tmp_path / "results", kernel=True), "JUPYTER_DATA_DIR": str(tmp_path / "user")}
    child = run.start(i, run.notebook_command(tmp_path / "t.ipynb", executed, result, 600), env, log="logs/quick-t.log")
    deadline = time.monotonic() + 300
    while not (result.is_file() and json.loads(result.read_text())["cells_done"] == 1) and time.monotonic() < deadline:
        assert child.poll() is None, (tmp_path / "run" / "logs" / "quick-t.log").read_text()
        time.sleep(0.2)
    child.limit = 0  # the slot's limit, now
    run.notebook_done(i, child, child.wait(), result)
    assert (i.status, i.cells_done, i.cells_total) == ("cut", 1, 3)
    kept = nbformat.read(executed, as_version=4)
    assert kept.cells[0].outputs[0]["text"].strip() == sys.executable, "the kernel is the run's python"
    assert json.loads((tmp_path / "run" / "results" / "gpu" / "run.json").read_text())["items"] == [], "saved"


#: Two pytest plugins a GPU node might have installed: one fails to import, one deselects every test.
NODE_PLUGINS = {"nodeplug_broken": "raise RuntimeError('a plugin of the node that fails to import')\n",
                "nodeplug_greedy": ("def pytest_collection_modifyitems(config, items):\n"
                                    "    config.hook.pytest_deselected(items=list(items))\n    items.clear()\n")}


@pytest.mark.slow
def test_the_nodes_own_pytest_plugins_cannot_break_the_run(tmp_path):
    """A node-like python: a venv whose site folder reaches a second, "node" site-packages through a
    .pth, holding pytest plugins of its own (one raises at import, one deselects everything), and
    this environment's (torch, pytest, Jupyter). Through ``make node-env``'s venv, a bare pytest
    dies of the broken plugin; the run's own commands collect the ``cuda`` tests and run a lesson."""
    site = tmp_path / "node-site"
    for name, code in NODE_PLUGINS.items():
        nodevenv.dist_folder(site, name, code, entry_points=f"[pytest11]\n{name} = {name}\n")
    python = nodevenv.node_python(tmp_path / "opt-venv", [site])
    house = nodevenv.wheelhouse_of(tmp_path / "wheelhouse", have=["pyyaml"], requires=[])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    made = subprocess.run([str(python), str(ROOT / "tools" / "wheelhouse.py"), "node-env", "--venv", str(tmp_path / "venv"),
                           "--wheelhouse", str(house)], capture_output=True, text=True, env=env, timeout=600)
    assert made.returncode == 0, made.stderr
    node = tmp_path / "venv" / "bin" / "python"
    bare = subprocess.run([str(node), "-m", "pytest", "--collect-only", "-q", "tests/test_config.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert bare.returncode != 0 and "a plugin of the node that fails to import" in bare.stdout + bare.stderr

    run = runner.Run(SimpleNamespace(**{**vars(fake_args(tmp_path, budget=600.0)), "standin": "cpu"}))  # no CUDA here
    run.python = str(node)
    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the run sets it itself (conftest restores the environment)
    collect = run.test_command("cuda", (*steps.step("cuda").args, "--collect-only", "-q"))
    child = procs.Child(collect, tmp_path / "cuda.log", run.env(quick=True, results=tmp_path / "r", measured=False), 300)
    assert child.wait() == 0, (tmp_path / "cuda.log").read_text()[-3000:]
    collected = re.search(r"(\d+)/\d+ tests collected", (tmp_path / "cuda.log").read_text())
    assert collected and int(collected.group(1)) > 20, "the cuda tests, none deselected by the node's plugin"

    i = Entry("01_bottlenecks", "quick", 30, limit_s=600)
    run.notebook_done(i, child := run.quick_child(i), child.wait(), tmp_path / "run" / "logs" / "quick-01_bottlenecks.json")
    assert (i.status, i.cells_done) == ("passed", i.cells_total), (tmp_path / "run" / i.log).read_text()[-3000:]


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
    subprocess.run(["mv", str(repo / ".git"), str(tmp_path / "elsewhere")], check=True)
    (repo / ".git").write_text(f"gitdir: {tmp_path / 'gone'}\n")  # .git travelled, but git cannot answer
    machine._commit_from_file.cache_clear()
    assert machine.git_commit() == commit
    (repo / ".git").unlink()  # the node's copy has no .git
    machine._commit_from_file.cache_clear()
    assert machine.git_commit() == commit
    (repo / "src" / "a.py").write_text("A = 2\n")
    machine._commit_from_file.cache_clear()
    assert machine.git_commit() == f"{commit}+modified"
    monkeypatch.setenv(machine.ENV_COMMIT, "given")
    assert machine.git_commit() == "given"


# --- the time cap of the harness, and the bench under it ------------------------------------


def test_a_time_cap_stops_sampling_and_is_recorded(monkeypatch):
    from gpufeed.config import ENV_MEASURE_S, measure_cap
    from gpufeed.measure import harness
    from gpufeed.measure.machine import machine_info

    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.05)

    monkeypatch.setenv(ENV_MEASURE_S, "0.1")
    m = harness.benchmark(slow, repeats=50, warmup=5)
    assert len(m.samples) == harness.MIN_SAMPLES and len(calls) == 2 + harness.MIN_SAMPLES  # warm-up cut too
    assert m.machine["measure_s"] == 0.1 and machine_info()["measure_s"] == 0.1
    ms = harness.interleave({"a": slow, "b": slow}, repeats=50, warmup=1)
    assert [len(m.samples) for m in ms] == [harness.MIN_SAMPLES] * 2
    monkeypatch.setenv(ENV_MEASURE_S, "soon")
    with pytest.raises(ValueError, match="GPUFEED_MEASURE_S='soon'"):
        measure_cap()
    monkeypatch.delenv(ENV_MEASURE_S)
    assert len(harness.benchmark(lambda: None, repeats=7, warmup=0, with_machine=False).samples) == 7


@pytest.mark.slow
def test_the_bench_keeps_each_pipeline_as_it_finishes(tmp_path, monkeypatch):
    from gpufeed.config import ENV_MEASURE_S
    from gpufeed.measure import harness as bench
    from gpufeed.measure import pipelines
    from gpufeed.measure import suite as pb

    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(ENV_MEASURE_S, "0.3")

    def cut(*args, **kwargs):  # the slot ends after the loaders, before the training step
        raise KeyboardInterrupt

    monkeypatch.setattr(pb, "make_model", cut)
    with pytest.raises(KeyboardInterrupt):
        pb.run(tmp_path / "out", quick=True, device="cpu", workload=pipelines.TINY, dali=False, log=lambda s: None)
    ms, doc = bench.load(tmp_path / "out" / pb.PARTIAL)
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



def test_a_command_row_is_one_row_and_a_missing_tool_fails_in_one_line(tmp_path, monkeypatch, room):
    """The `command` kind: a step that runs its own argv (`nvidia-smi topo -m` on a node) is one row of
    the table; a tool the node lacks fails that step by name, and the run goes on."""
    table = (FAKE_STEPS[0], steps.Step("links", "command", "", 0.5, 5, 0.2, ("no-such-tool-gpufeed", "-m"),
                                       ("no-such-tool-gpufeed", "-m")), *FAKE_STEPS[2:4])
    monkeypatch.setattr(runner, "STEPS", table)
    run = FakeRun(fake_args(tmp_path, budget=60.0))
    run.kept = tmp_path / "kernel.pid"
    assert run.main({"preflight", "links", "cuda"}, []) == 1
    st = {s["name"]: s for s in json.loads((tmp_path / "out" / "run.json").read_text())["steps"]}
    assert st["links"]["status"] == "failed" and st["links"]["reason"] == "no-such-tool-gpufeed is not on this node's PATH"
    assert st["cuda"]["status"] == "passed", "the steps after it still run"
