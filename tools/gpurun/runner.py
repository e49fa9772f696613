"""The run: the plan made from the step table, each step run under its limit, the report saved
and the archive packed after every step (so a run cut off by the slot's end keeps what it did).

What it writes under the run folder (``build/gpu-run``): ``results/<gpu>/run.json`` (the plan,
every step, notebook and producer with status and seconds, each test, for a failure the cell, its
first line and the error), ``results/<gpu>/`` the references made (with ``references.json``),
``results-quick/`` what the quick notebooks saved (not references), ``executed/quick/`` and
``executed/`` every notebook with its outputs and figures, ``junit/``, ``logs/`` (each step's
output, ``pip-freeze.txt``, ``node-env.log``, ``machine.json``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tarfile
import time
from dataclasses import asdict
from pathlib import Path

from gpufeed.measure import references
from gpurun import ROOT, TOOLS, plan, preflight, report
from gpurun.procs import Child
from gpurun.report import CUT, FAILED, FAILURES, NOT_RUN, NOT_RUN_BECAUSE, PASSED, Entry
from gpurun.steps import STEPS, Producer, Step, producers

FORMAT = "gpufeed-gpu-run"
#: Seconds a pytest that has reported its notebook may take to exit before it is stopped.
GRACE_S = 5.0


class Run:
    """The run's state: the budget, the plan, the entries, and where everything is written."""

    #: Seconds between two looks at the notebooks running side by side (each look reads their records).
    poll_s = 0.5

    def __init__(self, args):
        from gpufeed.measure.machine import usable_cores

        self.args = args
        self.budget = plan.Budget(args.budget, started=args.started)
        self.dir: Path = args.run_dir
        self.standin = args.standin
        self.quick = bool(self.standin)
        self.python = sys.executable
        self.cores = usable_cores()
        self.lanes = args.jobs or max(1, min(6, self.cores // 3))
        self.steps: list[Entry] = []
        self.items: list[Entry] = []
        self.plan: list[Entry] = []
        self.tests: dict[str, list[dict]] = {}
        self.machine: dict = {}
        self.datasets: dict = {}
        self.data_child: Child | None = None
        self.made: dict = {}  # references.json of this GPU, as committed, then as this run adds to it

    # --- where things go -------------------------------------------------------------------
    def slug(self) -> str:
        return self.machine.get("slug") or ("cpu-standin" if self.standin else "gpu")

    def results(self) -> Path:
        return self.dir / "results" / self.slug()

    def log(self, text: str) -> None:
        print(f"[gpurun +{self.budget.elapsed():4.0f}s] {text}", flush=True)

    def env(self, *, quick: bool, results: Path, measured: bool = True, kernel: bool = False) -> dict:
        """A child's environment: its mode, results and cache folders, the time cap per measured
        case, the commit. No ``MPLBACKEND`` for a notebook (``kernel``): ipykernel then uses its
        inline backend, and the executed notebooks keep their figures."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUFEED_QUICK": "1" if quick else "0",
               "GPUFEED_RESULTS": str(results), "GPUFEED_CACHE": str(self.cache(quick)),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS), os.environ.get("PYTHONPATH")]))}
        for name in ("GPUFEED_MEASURE_S", "TORCH_CUDA_SANITIZER", "GPUFEED_REQUIRE_CUDA", "MPLBACKEND"):
            env.pop(name, None)
        if not kernel:
            env["MPLBACKEND"] = "Agg"
        if measured:
            env["GPUFEED_MEASURE_S"] = str(self.args.measure_s)
        if self.machine.get("commit"):
            env["GPUFEED_COMMIT"] = self.machine["commit"]
        if measured and not self.standin:
            env["GPUFEED_REQUIRE_CUDA"] = "1"
        return env

    def cache(self, quick: bool) -> Path:
        """Quick and full datasets share folder names, so each mode has a cache folder of its own."""
        return Path(self.args.cache) / f"gpurun-{'quick' if quick else 'full'}"

    # --- the report, after every step ------------------------------------------------------
    def document(self) -> dict:
        from gpufeed.measure.lessons import LESSONS

        lessons = {}  # each lesson's statuses (and the other producers'), in the registry's order
        for key, names in [*((x.number, (x.stem, x.owner)) for x in LESSONS), *((p.name, (p.name,)) for p in producers() if p.lesson is None)]:
            found = {e.step: e.status for e in self.items if e.name in names}
            if found:
                lessons.setdefault(key, found)
        return {
            "format": FORMAT, "version": 2, "budget_s": self.args.budget, "elapsed_s": round(self.budget.elapsed(), 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "standin": self.standin,
            "mode": {"quick": "quick", "references": "quick" if self.quick else "full"}, "measure_s": self.args.measure_s,
            "commit": self.machine.get("commit"), "machine": self.machine, "lanes": self.lanes,
            "plan": [{k: v for k, v in asdict(e).items() if k in ("name", "step", "estimate_s", "basis", "stale", "why", "fits")}
                     for e in self.plan],
            "steps": [asdict(s) for s in sorted(self.steps, key=lambda e: [s.name for s in STEPS].index(e.name))],
            "items": [asdict(e) for e in self.items],
            "lessons": lessons, "tests": self.tests, "datasets": self.datasets,
        }

    def save(self) -> Path:
        path = self.results() / "run.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(".run.json.tmp")
        tmp.write_text(json.dumps(self.document(), indent=1) + "\n")
        tmp.replace(path)
        for step in ("quick", "references"):
            entries = [e for e in self.items if e.step == step]
            if entries:
                report.junit(entries, self.dir / "junit" / f"{step}.xml", step)
        self.pack()
        return path

    def pack(self) -> None:
        archive: Path = self.args.archive
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_name(f".{archive.name}.tmp")
        with tarfile.open(tmp, "w:gz", compresslevel=3) as tar:
            for path in sorted(self.dir.rglob("*")):
                if path.is_file() and not path.name.startswith("."):
                    tar.add(path, arcname=f"{self.dir.name}/{path.relative_to(self.dir)}")
        tmp.replace(archive)

    # --- the plan --------------------------------------------------------------------------
    def make_plan(self, selected: set[str], lessons: list[str]) -> None:
        from gpufeed.measure.lessons import LESSONS

        committed = ROOT / "results" / self.slug()
        self.made = references.load(committed)
        earlier = [committed / "run.json", *self.dir.parent.glob(f"{self.dir.name}-*/results/{self.slug()}/run.json")]
        known = plan.estimates(plan.last_run(earlier))
        factor = plan.STANDIN_FACTOR if self.standin else 1.0
        est = lambda step, name, default: plan.estimate(step, name, default, known,  # noqa: E731
                                                        self.made if step == "references" else {}, factor, self.slug())
        rows: list[Entry] = []
        for s in STEPS:
            if s.name not in selected:
                continue
            if s.kind == "notebooks":  # the quickest first: as many pass or fail by name as the time allows
                quick = [Entry(x.stem, s.name, *est(s.name, x.stem, x.gpu_s[0])) for x in LESSONS if x.number in lessons]
                rows += sorted(quick, key=lambda e: e.estimate_s)
            elif s.kind == "references":
                refs = []
                for p in producers():
                    if p.lesson is not None and p.lesson.number not in lessons or p.lesson is None and p.name not in selected:
                        continue
                    stale, why = references.staleness(self.made.get(p.name), p.source)
                    refs.append(Entry(p.name, s.name, *est(s.name, p.name, p.estimate_s), stale=stale, why=why))
                rows += plan.order_references(refs, self.made)
            elif s.kind == "tests" and (s.standin if self.standin else s.args) is not None:
                seconds, basis = est(s.name, s.name, s.estimate_s)
                rows.append(Entry(s.name, s.name, min(seconds, self.cap(s)), basis))  # stopped at its cap at the latest
        self.plan = plan.fit(rows, self.budget.left(), {"quick": self.lanes})
        print(plan.describe(self.plan, self.budget.left()), flush=True)
        self.items = [Entry(**{**asdict(e), "status": "pending"}) for e in self.plan if e.step != e.name]
        for e in (e for e in self.plan if e.step == e.name and e.name not in [s.name for s in self.steps]):
            self.steps.append(Entry(**asdict(e)))

    def cap(self, s: Step) -> float:
        return min(s.cap, s.share * self.args.budget)

    def step_entry(self, s: Step) -> Entry:
        entry = next((e for e in self.steps if e.name == s.name), None)
        if entry is None:
            entry = Entry(s.name, s.name, s.estimate_s, "default")
            self.steps.append(entry)
        return entry

    # --- the commands (a test replaces them with sleeps) ------------------------------------
    def data_command(self, owners: list[str]) -> list[str]:
        return [self.python, "-m", "gpufeed", "data", "prepare", "--workers", str(max(1, self.cores // 2)),
                "--device", "cpu" if self.standin else "cuda", "--only", ",".join(owners)]

    def test_command(self, name: str, args: tuple[str, ...]) -> list[str]:
        workers = max(1, min(8, self.cores // 2)) if not self.standin else max(1, self.cores)
        xdist = ["-n", str(workers), "--dist", "loadfile"] if preflight.importlib.util.find_spec("xdist") else []
        return [self.python, "-m", "pytest", *args, "-p", "gpurun.plugin", "-p", "no:cacheprovider",
                "-rfEs", "--junitxml", str(self.dir / "junit" / f"{name}.xml"), *xdist]

    def quick_command(self, i: Entry, copy: Path) -> list[str]:
        return [self.python, "-m", "pytest", "--nbmake", "--overwrite", f"--nbmake-timeout={int(i.limit_s) + 30}",
                "-p", "gpurun.plugin", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
                "--junitxml", str(self.dir / "junit" / f"quick-{i.name}.xml"), str(copy)]

    def reference_command(self, i: Entry, p: Producer) -> list[str]:
        if p.lesson is not None:
            return [self.python, str(TOOLS / "gpurun"), "notebook", str(ROOT / p.lesson.notebook),
                    "--executed", str(self.dir / "executed" / f"{p.lesson.stem}.ipynb"),
                    "--result", str(self.dir / "logs" / f"ref-{p.name}.json"), "--cell-timeout", str(int(i.limit_s) + 60)]
        return [self.python, "-m", "gpufeed", *p.command, "--device", "cpu" if self.standin else "cuda"] + (
            ["--quick"] if self.quick and p.name == "bench" else [])

    # --- the steps -------------------------------------------------------------------------
    def preflight(self) -> bool:
        from gpufeed.measure.machine import machine_info, slug

        e = Entry("preflight", "preflight", 8, "default")
        self.steps.append(e)
        t0 = time.monotonic()
        self.machine = machine_info()
        self.machine["slug"] = slug(self.machine)
        self.machine["driver"] = preflight.driver_version()
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "machine.json").write_text(json.dumps(self.machine, indent=1))
        (logs / "pip-freeze.txt").write_text(preflight.freeze())
        node_log = os.environ.get("GPURUN_NODE_ENV_LOG")
        if node_log and Path(node_log).is_file():
            shutil.copy(node_log, logs / "node-env.log")
        bad = preflight.problems(self.machine, standin=bool(self.standin), cache=Path(self.args.cache),
                                 need_gib=2 if self.standin else 20)
        e.seconds, e.limit_s = round(time.monotonic() - t0, 1), 15
        e.status = FAILED if bad else PASSED
        e.summary = "; ".join(bad) or (f"{self.machine.get('gpu') or self.machine.get('cpu')}, driver "
                                       f"{self.machine['driver']}, torch {self.machine.get('torch')}, CUDA "
                                       f"{self.machine.get('cuda')}, commit {self.machine.get('commit')}")
        self.log(f"preflight: {e.status} in {e.seconds:.1f} s: {e.summary}")
        return not bad

    def finish(self, e: Entry, child: Child, rc: int, summary: str = "", failed: bool | None = None) -> None:
        failed = rc != 0 if failed is None else failed
        e.status = FAILED if failed else (CUT if child.cut else PASSED)
        e.seconds, e.summary = child.seconds, summary
        self.log(f"{e.name}: {e.status} in {e.seconds:.0f} s (limit {e.limit_s:.0f} s){': ' + summary if summary else ''}")
        self.save()

    def start(self, e: Entry, command: list[str], env: dict, log: str | None = None, cwd: Path = ROOT) -> Child:
        e.log = log or f"logs/{e.name}.log"
        self.log(f"{e.name}: started, limit {e.limit_s:.0f} s")
        return Child(command, self.dir / e.log, env, e.limit_s, cwd=cwd)

    def limit(self, e: Entry, cap: float, least: float) -> bool:
        """Sets the entry's limit, or marks it ``not run (budget)`` when its estimate (or ``least``)
        no longer fits what is left."""
        need = max(least, e.estimate_s * plan.SAFETY if e.step != e.name else least)
        e.limit_s, e.reason = self.budget.limit(cap, need)
        if e.limit_s is None:
            e.status = NOT_RUN
            self.log(f"{e.name}: {NOT_RUN} ({e.reason})")
            return False
        e.limit_s = round(e.limit_s, 1)
        return True

    def run_data(self, s: Step) -> None:
        e = self.step_entry(s)
        owners = [f"lesson{x}" for x in self.args.lesson_numbers] if self.standin else \
            [i.name for i in self.items if i.step == "references" and i.fits]
        if not owners:
            e.status, e.reason = NOT_RUN_BECAUSE, "no dataset to build: no reference fits the plan"
            return
        if not self.limit(e, self.cap(s), s.least):
            return
        self.data_child = self.start(e, self.data_command(owners), self.env(quick=self.quick, results=self.dir / "results-data", measured=False))
        e.status = "running"

    def join_data(self) -> None:
        if self.data_child is None:
            return
        e, child, self.data_child = self.step_entry(next(s for s in STEPS if s.kind == "data")), self.data_child, None
        rc = child.wait()
        text = (self.dir / e.log).read_text(errors="replace")
        self.datasets["prepared"] = re.findall(r"^(lesson\d\d|bench): (\S+) .*$", text, re.M)
        self.finish(e, child, rc, f"{len(self.datasets['prepared'])} folders and memmaps")

    def run_tests(self, s: Step) -> None:
        e = self.step_entry(s)
        args = s.standin if self.standin else s.args
        if args is None:
            e.status, e.reason = NOT_RUN_BECAUSE, f"{s.needs_cuda_why} (stand-in run)"
            self.log(f"{s.name}: {e.status} ({e.reason})")
            return
        if not self.limit(e, self.cap(s), s.least):
            return
        records = self.dir / "logs" / f"{s.name}-tests.jsonl"
        cmd = self.test_command(s.name, args)
        env = {**self.env(quick=True, results=self.dir / "results-tests", measured=False), "GPURUN_TESTS": str(records)}
        child = self.start(e, cmd, env)
        rc = child.wait()
        self.tests[s.name] = report.read_tests(records)
        selected = re.search(r"(\d+) selected", (self.dir / e.log).read_text(errors="replace"))
        done = report.count(self.tests[s.name]) + (f" of {selected.group(1)} selected" if selected else "")
        bad = any(t["status"] in FAILURES for t in self.tests[s.name]) or (rc not in (0, 5) and not child.cut)
        self.finish(e, child, rc, done + (" before the cut" if child.cut else ""), failed=bad)

    def run_notebooks(self, s: Step) -> None:
        e = self.step_entry(s)
        if self.standin:
            self.join_data()  # the stand-in's data step builds the quick datasets these read
        entries = [i for i in self.items if i.step == s.name]
        if not self.limit(e, self.cap(s), s.least):
            for i in entries:
                i.status, i.reason = NOT_RUN, e.reason
            return
        t0 = time.monotonic()
        step_deadline = time.monotonic() + e.limit_s
        queue, running = list(entries), {}
        while queue or running:
            while queue and len(running) < self.lanes:
                i = queue.pop(0)
                left = step_deadline - time.monotonic()
                if i.estimate_s * plan.SAFETY > min(left, self.budget.left()):
                    i.status, i.reason = NOT_RUN, f"needs about {i.estimate_s:.0f} s, {min(left, self.budget.left()):.0f} s left"
                    self.log(f"quick {i.name}: {NOT_RUN} ({i.reason})")
                    continue
                i.limit_s = round(min(left, self.budget.left(), max(3 * i.estimate_s, i.estimate_s + 120)), 1)
                running[i.name] = (i, self.quick_child(i))
            time.sleep(self.poll_s)
            for name, (i, child) in list(running.items()):
                if report.read_tests(self.dir / "logs" / f"quick-{i.name}.jsonl"):  # pytest said: done
                    child.limit = min(child.limit, time.monotonic() - child.start + GRACE_S)  # however slow its exit
                rc = child.poll()
                if rc is not None:
                    del running[name]
                    self.quick_done(i, child, rc)
        e.seconds = round(time.monotonic() - t0, 1)
        bad = [i for i in entries if i.status in FAILURES]
        e.status = FAILED if bad else PASSED
        e.summary = report.count([asdict(i) for i in entries])
        self.log(f"quick: {e.summary} in {e.seconds:.0f} s")
        self.save()

    def quick_child(self, i: Entry) -> Child:
        copy = self.dir / "executed" / "quick" / f"{i.name}.ipynb"
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "notebooks" / f"{i.name}.ipynb", copy)
        records = self.dir / "logs" / f"quick-{i.name}.jsonl"
        cmd = self.quick_command(i, copy)
        env = {**self.env(quick=True, results=self.dir / "results-quick", kernel=True), "GPURUN_TESTS": str(records)}
        i.status = "running"
        return self.start(i, cmd, env, log=f"logs/quick-{i.name}.log")

    def quick_done(self, i: Entry, child: Child, rc: int) -> None:
        from gpurun.notebook import outcome

        copy = self.dir / "executed" / "quick" / f"{i.name}.ipynb"
        doc = outcome(copy)
        i.cells_done, i.cells_total = doc["cells_done"], doc["cells_total"]
        said = report.read_tests(self.dir / "logs" / f"quick-{i.name}.jsonl")  # nbmake's verdict, if it gave one
        i.seconds = child.seconds  # its wall time, pytest's start included: what the next plan needs
        if said:
            i.status = PASSED if said[0]["status"] == PASSED else FAILED
            i.summary = f"nbmake: {said[0]['seconds']:.0f} s executing"
        else:
            i.status = CUT if child.cut else PASSED if rc == 0 else FAILED
        if i.status == FAILED:
            i.cell, i.error = doc.get("cell"), doc.get("error") or (self.dir / i.log).read_text(errors="replace")[-2000:]
            i.error_line = ([x for x in i.error.splitlines() if x.strip()] or [""])[-1][:200]
        where = f", cell {i.cell['index']} ({i.cell['first_line']}): {i.error_line}" if i.cell else ""
        self.log(f"quick {i.name}: {i.status} in {i.seconds:.0f} s, {i.cells_done}/{i.cells_total} cells{where}")
        self.save()

    def run_references(self, s: Step) -> None:
        e = self.step_entry(s)
        self.join_data()
        entries = [i for i in self.items if i.step == s.name]
        t0 = time.monotonic()
        table = {p.name: p for p in producers()}
        for i in entries:
            if not self.limit(i, cap=max(2 * i.estimate_s, i.estimate_s + 60), least=s.least):
                continue
            self.make_reference(i, table[i.name])
        e.seconds = round(time.monotonic() - t0, 1)
        e.status = FAILED if any(i.status in FAILURES for i in entries) else PASSED
        e.summary = report.count([asdict(i) for i in entries])
        self.save()

    def make_reference(self, i: Entry, p: Producer) -> None:
        out = self.results()
        before = {f: f.stat().st_mtime for f in out.glob("*") if f.is_file()} if out.is_dir() else {}
        env = self.env(quick=self.quick, results=self.dir / "results", kernel=p.lesson is not None)
        i.status = "running"
        child = self.start(i, self.reference_command(i, p), env, log=f"logs/ref-{p.name}.log")
        rc = child.wait()
        i.seconds = child.seconds
        i.status = CUT if child.cut else (PASSED if rc == 0 else FAILED)
        result = self.dir / "logs" / f"ref-{p.name}.json"
        if result.is_file():
            doc = json.loads(result.read_text())
            i.cells_done, i.cells_total = doc.get("cells_done", 0), doc.get("cells_total", 0)
            if i.status == FAILED:
                i.cell, i.error = doc.get("cell"), doc.get("error")
        if i.status == FAILED and not i.error:
            i.error = (self.dir / i.log).read_text(errors="replace")[-2000:]
        if i.error:
            i.error_line = ([x for x in i.error.splitlines() if x.strip()] or [""])[-1][:200]
        if i.status == PASSED:
            files = [f.name for f in out.glob("*") if f.is_file() and f.name not in ("run.json", references.FILE)
                     and before.get(f) != f.stat().st_mtime]
            self.made[p.name] = {**references.record(p.source, files, self.machine.get("commit"), i.seconds,
                                                     time.strftime("%Y-%m-%d")), "mode": "quick" if self.quick else "full"}
            references.save(out, self.made, self.machine.get("gpu"))
        self.log(f"reference {p.name}: {i.status} in {i.seconds:.0f} s")
        self.save()

    RUNS = {"data": run_data, "tests": run_tests, "notebooks": run_notebooks, "references": run_references}

    def main(self, selected: set[str], lessons: list[str]) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args.lesson_numbers = lessons
        self.log(f"budget {self.args.budget:.0f} s ({self.budget.elapsed():.0f} s spent before this, make node-env "
                 f"included), {self.cores} cores, run in {self.dir}, archive {self.args.archive}"
                 + (f", stand-in: {self.standin} (quick mode, the simulator for CUDA)" if self.standin else ""))
        if not self.preflight():
            for s in STEPS[1:]:
                self.steps.append(Entry(s.name, s.name, s.estimate_s, status=NOT_RUN_BECAUSE,
                                        reason="the preflight failed: give the GPU back"))
            self.save()
            print(f"test-gpu: preflight failed: {self.steps[0].summary}", file=sys.stderr)
            return 3
        self.make_plan(selected, lessons)
        self.save()
        for s in STEPS[1:]:
            if s.name in selected:
                self.RUNS[s.kind](self, s)
        self.join_data()
        path = self.save()
        rc = 1 if any(x.status in FAILURES for x in [*self.steps, *self.items]) else 0
        doc = self.document()
        print(report.table(doc["steps"], doc["items"]))
        self.log(f"done: {path.relative_to(self.dir)} and the archive {self.args.archive}")
        print(report.one_line(doc["steps"], doc["items"], rc))
        return rc


def selection(lessons: str) -> tuple[set[str], list[str]]:
    """The steps and lessons a ``LESSONS`` value asks for: ``all``; or tokens among the step names,
    ``tests`` (cuda and csan), the producers' names (``bench``, ``ceilings``) and lesson numbers.

    Example:
        >>> steps, numbers = selection("tests 08")
        >>> sorted(steps), numbers
        (['csan', 'cuda', 'data', 'preflight', 'quick', 'references'], ['08'])
    """
    from gpufeed.measure.lessons import LESSONS

    numbers_all = [x.number for x in LESSONS]
    tokens = lessons.split()
    if tokens in ([], ["all"]):
        return {s.name for s in STEPS} | {p.name for p in producers() if p.lesson is None}, numbers_all
    names = {s.name for s in STEPS} | {"tests"} | {p.name for p in producers() if p.lesson is None}
    unknown = [t for t in tokens if t not in names and t not in numbers_all]
    if unknown:
        raise SystemExit(f"gpurun: LESSONS: {' '.join(unknown)}: give all, tests, step names "
                         f"({', '.join(s.name for s in STEPS)}), bench, ceilings or lesson numbers (03 08)")
    steps = {"preflight"} | {t for t in tokens if t in names} | ({"cuda", "csan"} if "tests" in tokens else set())
    numbers = [t for t in tokens if t in numbers_all]
    if numbers:
        steps |= {"quick", "references"}
    if numbers or steps & {"bench", "ceilings"}:
        steps |= {"data", "references"}
    return steps - {"tests"}, numbers
