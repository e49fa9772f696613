"""The run: the plan made from the step table, each step run under its limit, the report saved
and the archive packed after every step (so a run cut off by the slot's end keeps what it did).

What it writes under the run folder (``build/gpu-run``): ``results/<gpu>/run.json`` (the plan,
every step, notebook and producer with status and seconds, each test, for a failure the cell, its
first line and the error), ``results/<gpu>/`` the references made (with ``references.json``),
``results-quick/`` what the quick notebooks saved (not references), ``executed/quick/`` and
``executed/`` every notebook with its outputs and figures, ``junit/``, ``logs/`` (each step's
output, ``pip-freeze.txt``, ``node-env.log``, ``machine.json``), ``summary.txt``. And into ``$OUT``
(:mod:`gpurun.outbox`), after every step: the archive (under 12 MiB), ``run.json``, ``summary.txt``,
the node-env log and the junit files.

Every pytest it starts runs with plugin autoload off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``) and the
plugins it needs named (``-p xdist.plugin``, ``-p gpurun.plugin``; the tests' own ``cudasan`` comes
from ``conftest.py``): a node's own pytest plugins, one that fails to import or one that changes
collection, then cannot matter. The notebooks run through :mod:`gpurun.notebook` (no pytest).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from gpufeed.measure import references
from gpurun import ROOT, TOOLS, outbox, plan, preflight, report
from gpurun.procs import Child
from gpurun.report import CUT, FAILED, FAILURES, NOT_RUN, NOT_RUN_BECAUSE, PASSED, Entry
from gpurun.steps import STEPS, Producer, Step, order, producers

FORMAT = "gpufeed-gpu-run"
#: What every pytest of the run gets in its environment: only the plugins its command names load.
NO_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


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
        self.lanes = args.jobs or lanes(self.cores)
        self.plan_name = getattr(args, "plan", None) or "default"
        self.order = order(self.plan_name, STEPS)  # this run's table (a test's own, too)
        self.out: Path | None = getattr(args, "out", None)
        self.packer = outbox.Packer()
        self.archive: dict = {}
        self.error: str | None = None
        self.exit_code: int | None = None
        self.need_bytes = 0
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
        env = {**os.environ, **NO_AUTOLOAD, "PYTHONUNBUFFERED": "1", "GPUFEED_QUICK": "1" if quick else "0",
               "GPUFEED_MODE": "quick" if quick else "full",
               "GPUFEED_PROGRESS": "0",  # a log and an executed notebook keep results, not progress bars
               "GPUFEED_RESULTS": str(results), "GPUFEED_CACHE": str(self.cache(quick)),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(TOOLS), os.environ.get("PYTHONPATH")])),
               # a python3 kernel of this python, found before any other (a node's user folder may name another)
               "JUPYTER_PATH": os.pathsep.join(filter(None, [str(self.kernelspec()), os.environ.get("JUPYTER_PATH")]))}
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

    def kernelspec(self) -> Path:
        """A Jupyter data folder whose ``python3`` kernel is this python (``JUPYTER_PATH`` puts it
        first): the notebooks run on the run's own python whatever kernels the node has."""
        folder = self.dir / ".jupyter"
        spec = folder / "kernels" / "python3" / "kernel.json"
        if not spec.is_file():
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text(json.dumps({"argv": [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                                        "display_name": "Python 3 (gpurun)", "language": "python"}))
        return folder

    # --- the report, after every step ------------------------------------------------------
    def document(self) -> dict:
        from gpufeed.measure.lessons import LESSONS

        lessons = {}  # each lesson's statuses (and the other producers'), in the registry's order
        for key, names in [*((x.number, (x.stem, x.owner)) for x in LESSONS), *((p.name, (p.name,)) for p in producers() if p.lesson is None)]:
            found = {e.step: e.status for e in self.items if e.name in names}
            if found:
                lessons.setdefault(key, found)
        return {
            "format": FORMAT, "version": 3, "budget_s": self.args.budget, "elapsed_s": round(self.budget.elapsed(), 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "standin": self.standin, "plan_name": self.plan_name,
            "error": self.error, "cache": {"path": str(self.args.cache), "need_gib": round(self.need_bytes / 2**30, 1),
                                           "candidates": getattr(self.args, "cache_candidates", [])},
            "mode": {"quick": "quick", "references": "quick" if self.quick else "full"}, "measure_s": self.args.measure_s,
            "commit": self.machine.get("commit"), "machine": self.machine, "lanes": self.lanes,
            "plan": [{k: v for k, v in asdict(e).items() if k in ("name", "step", "estimate_s", "basis", "stale", "why", "fits")}
                     for e in self.plan],
            "steps": [asdict(s) for s in sorted(self.steps, key=lambda e: self.order.index(e.name))],
            "items": [asdict(e) for e in self.items],
            "lessons": lessons, "tests": self.tests, "datasets": self.datasets, "archive": self.archive,
        }

    def save(self) -> Path:
        """``run.json``, the junit files of the notebooks and references, ``summary.txt``, the archive
        (what does not fit its cap left out, and named), each also into ``$OUT`` as soon as written."""
        path = self.results() / "run.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        for step in ("quick", "references"):
            entries = [e for e in self.items if e.step == step]
            if entries:
                report.junit(entries, self.dir / "junit" / f"{step}.xml", step)
        for xml in sorted((self.dir / "junit").glob("*.xml")):
            if xml.name in outbox.NAMES:
                outbox.put_file(self.out, xml.name, xml)
        node_log = self.dir / "logs" / "node-env.log"
        if node_log.is_file():
            outbox.put_file(self.out, "node-env.log", node_log)
        self.write_reports(path)  # before the archive, which holds them: a slot that ends while it packs keeps them
        files, left = self.packer.select(self.dir)
        self.archive = {"name": self.args.archive.name, "bytes": None, "left_out": left}
        self.write_reports(path)
        size = self.packer.pack(self.dir, self.args.archive, files)
        self.archive["bytes"] = size
        self.write_reports(path)
        return path

    def write_reports(self, path: Path) -> None:
        doc = self.document()
        text = json.dumps(doc, indent=1) + "\n"
        tmp = path.with_name(".run.json.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        screen = report.summary(doc, self.exit_code) + "\n"
        (self.dir / "summary.txt").write_text(screen)
        outbox.put(self.out, "run.json", text)
        outbox.put(self.out, "summary.txt", screen)

    # --- the plan --------------------------------------------------------------------------
    def make_plan(self, selected: set[str], lessons: list[str]) -> None:
        earlier = list(self.dir.parent.glob(f"{self.dir.name}-*/results/{self.slug()}/run.json"))
        self.plan, self.made = plan.build(order=self.order, selected=selected, lessons=lessons, slug=self.slug(),
                                          standin=bool(self.standin), cores=self.cores, lanes=self.lanes,
                                          left=self.budget.left(), budget=self.args.budget, earlier=earlier,
                                          table=STEPS)
        header = (f" on {self.slug()} ({self.cores} cores, {at_a_time(self.lanes)}), plan "
                  f"{self.plan_name}; estimates: the last run on this GPU, else another GPU's committed run, "
                  "else stated defaults")
        print(plan.describe(self.plan, self.budget.left(), header), flush=True)
        self.items = [Entry(**{**asdict(e), "status": "pending"}) for e in self.plan if e.step != e.name]
        for e in (e for e in self.plan if e.step == e.name and e.name not in [s.name for s in self.steps]):
            self.steps.append(Entry(**asdict(e)))

    def planned_datasets(self) -> list:
        """The datasets of what fits the plan: the quick notebooks' (quick mode; on the stand-in every
        lesson's, which its data step builds) and the references' (full mode on a GPU, quick on the
        stand-in), the bench's where it fits."""
        from gpufeed.measure import pipelines
        from gpufeed.measure.lessons import lesson, workload_dataset

        fits = [i for i in self.items if i.fits]
        mode = "quick" if self.quick else "full"
        quick = self.args.lesson_numbers if self.standin else [i.name[:2] for i in fits if i.step == "quick"]
        out = [d for n in quick for d in lesson(n).datasets("quick", not self.standin)]
        out += [d for i in fits if i.step == "references" and i.name.startswith("lesson")
                for d in lesson(i.name[-2:]).datasets(mode, not self.standin)]
        if any(i.step == "references" and i.name == "bench" for i in fits):
            out.append(workload_dataset("bench", "bench", pipelines.workload(self.quick, "cpu" if self.standin else "cuda")))
        return out

    def cap(self, s: Step) -> float:
        return plan.cap(s, self.args.budget)

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
        """pytest for a ``tests`` step, run with :data:`NO_AUTOLOAD`: every plugin it needs named."""
        workers = max(1, min(8, self.cores // 2)) if not self.standin else max(1, self.cores)
        xdist = ["-p", "xdist.plugin", "-n", str(workers), "--dist", "loadfile"] \
            if preflight.importlib.util.find_spec("xdist") else []
        return [self.python, "-m", "pytest", *args, "-p", "gpurun.plugin", "-p", "no:cacheprovider",
                "-rfEs", "--junitxml", str(self.dir / "junit" / f"{name}.xml"), *xdist]

    def notebook_command(self, src: Path, executed: Path, result: Path, limit_s: float) -> list[str]:
        """One notebook through :mod:`gpurun.notebook`: saved after every cell, so a cut keeps what it did."""
        return [self.python, str(TOOLS / "gpurun"), "notebook", str(src), "--executed", str(executed),
                "--result", str(result), "--cell-timeout", str(int(limit_s) + 60)]

    def quick_command(self, i: Entry) -> list[str]:
        return self.notebook_command(ROOT / "notebooks" / f"{i.name}.ipynb", self.dir / "executed" / "quick" / f"{i.name}.ipynb",
                                     self.dir / "logs" / f"quick-{i.name}.json", i.limit_s)

    def reference_command(self, i: Entry, p: Producer) -> list[str]:
        if p.lesson is not None:
            return self.notebook_command(ROOT / p.lesson.notebook, self.dir / "executed" / f"{p.lesson.stem}.ipynb",
                                         self.dir / "logs" / f"ref-{p.name}.json", i.limit_s)
        return [self.python, "-m", "gpufeed", *p.command, "--device", "cpu" if self.standin else "cuda"] + (
            ["--quick"] if self.quick and p.name == "bench" else [])

    # --- the steps -------------------------------------------------------------------------
    def preflight(self) -> bool:
        """The machine (saved at once), then what it lacks: a line each, in ``self.problems``."""
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
        bad = preflight.problems(self.machine, standin=bool(self.standin), cache=Path(self.args.cache), need_gib=0)
        e.seconds, e.limit_s = round(time.monotonic() - t0, 1), 15
        e.status = FAILED if bad else PASSED
        e.summary = "; ".join(bad) or (f"{self.machine.get('gpu') or self.machine.get('cpu')}, driver "
                                       f"{self.machine['driver']}, torch {self.machine.get('torch')}, CUDA "
                                       f"{self.machine.get('cuda')}, commit {self.machine.get('commit')}")
        self.log(f"preflight: {e.status} in {e.seconds:.1f} s: {e.summary}")
        return not bad

    def check_disk(self) -> bool:
        """The preflight's last check, once the plan says which datasets: room for them on the cache's disk."""
        e = self.step_entry(next(s for s in STEPS if s.kind == "preflight"))
        self.need_bytes = preflight.need_bytes(self.planned_datasets())
        bad = preflight.disk_problems(Path(self.args.cache), self.need_bytes)
        if bad:
            e.status, e.summary = FAILED, bad[0]
            self.log(f"preflight: {FAILED}: {bad[0]}")
        else:
            self.log(f"preflight: the plan's datasets need {self.need_bytes / 2**30:.1f} GiB; the cache "
                     f"{self.args.cache} has {preflight.shutil.disk_usage(preflight.existing(Path(self.args.cache))).free / 2**30:.1f} GiB free")
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

    def started_args(self, s: Step) -> tuple[Entry, tuple[str, ...] | None]:
        """The step's entry and the arguments it runs with here (the stand-in's, on a CPU), or None
        where it does not run: marked ``not run`` with the reason, or not within the budget."""
        e = self.step_entry(s)
        args = s.standin if self.standin else s.args
        if args is None:
            e.status, e.reason = NOT_RUN_BECAUSE, f"{s.needs_cuda_why} (stand-in run)"
            self.log(f"{s.name}: {e.status} ({e.reason})")
            return e, None
        return e, (args if self.limit(e, self.cap(s), s.least) else None)

    def run_tests(self, s: Step) -> None:
        e, args = self.started_args(s)
        if args is None:
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
                rc = child.poll()
                if rc is not None:
                    del running[name]
                    self.notebook_done(i, child, rc, self.dir / "logs" / f"quick-{i.name}.json")
        e.seconds = round(time.monotonic() - t0, 1)
        bad = [i for i in entries if i.status in FAILURES]
        e.status = FAILED if bad else PASSED
        e.summary = report.count([asdict(i) for i in entries])
        self.log(f"quick: {e.summary} in {e.seconds:.0f} s")
        self.save()

    def quick_child(self, i: Entry) -> Child:
        env = self.env(quick=True, results=self.dir / "results-quick", kernel=True)
        i.status = "running"
        return self.start(i, self.quick_command(i), env, log=f"logs/quick-{i.name}.log")

    def notebook_done(self, i: Entry, child: Child, rc: int, result: Path) -> None:
        """A notebook's status from its runner (:mod:`gpurun.notebook`'s result, saved after every
        cell): passed, failed (with its cell and error) or cut (with the cells it finished)."""
        i.seconds = child.seconds  # its wall time, the kernel's start included: what the next plan needs
        i.status = CUT if child.cut else (PASSED if rc == 0 else FAILED)
        if result.is_file():
            doc = json.loads(result.read_text())
            i.cells_done, i.cells_total = doc.get("cells_done", 0), doc.get("cells_total", 0)
            if i.status == FAILED:
                i.cell, i.error = doc.get("cell"), doc.get("error")
        if i.status == FAILED and not i.error:
            i.error = (self.dir / i.log).read_text(errors="replace")[-2000:]
        if i.error:
            i.error_line = ([x for x in i.error.splitlines() if x.strip()] or [""])[-1][:200]
        where = f", cell {i.cell['index']} ({i.cell['first_line']}): {i.error_line}" if i.cell else ""
        self.log(f"{i.step} {i.name}: {i.status} in {i.seconds:.0f} s, {i.cells_done}/{i.cells_total} cells{where}")
        if i.step == "quick":
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
        self.notebook_done(i, child, child.wait(), self.dir / "logs" / f"ref-{p.name}.json")
        if i.status == PASSED:
            files = [f.name for f in out.glob("*") if f.is_file() and f.name not in ("run.json", references.FILE)
                     and before.get(f) != f.stat().st_mtime]
            self.made[p.name] = {**references.record(p.source, files, self.machine.get("commit"), i.seconds,
                                                     time.strftime("%Y-%m-%d")), "mode": "quick" if self.quick else "full"}
            references.save(out, self.made, self.machine.get("gpu"))
        self.save()

    def run_command(self, s: Step) -> None:
        """A ``command`` row: its argv once (``python`` is this run's python), under its limit; its
        output is the step's log, its exit status the verdict."""
        e, argv = self.started_args(s)
        if argv is None:
            return
        argv = [self.python, *argv[1:]] if argv[0] == "python" else list(argv)
        if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
            e.status, e.reason = FAILED, f"{argv[0]} is not on this node's PATH"
            self.log(f"{s.name}: {FAILED} ({e.reason})")
            self.save()
            return
        child = self.start(e, argv, self.env(quick=self.quick, results=self.dir / "results-tests", measured=False))
        rc = child.wait()
        last = (self.dir / e.log).read_text(errors="replace").strip().splitlines()
        self.finish(e, child, rc, f"exit {rc}" + (f": {last[-1][:80]}" if rc and last else ""))

    RUNS = {"data": run_data, "tests": run_tests, "notebooks": run_notebooks, "references": run_references,
            "command": run_command}

    def main(self, selected: set[str], lessons: list[str]) -> int:
        """The whole run: 0 when nothing that ran failed, 1 when something did, 3 when the preflight
        stopped it, 2 when the run itself broke (its error in run.json and summary.txt)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args.lesson_numbers = lessons
        try:
            return self._main(selected, lessons)
        except BaseException as e:  # KeyboardInterrupt too: the slot's end, said in what comes back
            import traceback

            self.error = f"{type(e).__name__}: {e}"
            self.exit_code = 2
            (self.dir / "logs").mkdir(parents=True, exist_ok=True)
            (self.dir / "logs" / "gpurun-error.txt").write_text(traceback.format_exc())
            self.save()
            raise

    def _main(self, selected: set[str], lessons: list[str]) -> int:
        self.log(f"budget {self.args.budget:.0f} s ({self.budget.elapsed():.0f} s spent before this, make node-env "
                 f"included), {self.cores} cores, plan {self.plan_name}, run in {self.dir}, archive {self.args.archive}"
                 + (f", stand-in: {self.standin} (quick mode, the simulator for CUDA)" if self.standin else ""))
        ok = self.preflight()
        if ok:
            self.make_plan(selected, lessons)
            ok = self.check_disk()
        if not ok:
            self.items = []
            for s in STEPS[1:]:
                self.steps = [x for x in self.steps if x.name != s.name]
                self.steps.append(Entry(s.name, s.name, s.estimate_s, status=NOT_RUN_BECAUSE,
                                        reason="the preflight failed: give the GPU back"))
            self.exit_code = 3
            self.save()
            print(f"test-gpu: preflight failed: {self.steps[0].summary}", file=sys.stderr)
            return 3
        self.save()
        for name in self.order[1:]:
            s = next(x for x in STEPS if x.name == name)
            if s.name in selected:
                self.RUNS[s.kind](self, s)
        self.join_data()
        rc = 1 if any(x.status in FAILURES for x in [*self.steps, *self.items]) else 0
        self.exit_code = rc
        path = self.save()
        doc = self.document()
        print(report.table(doc["steps"], doc["items"]))
        self.log(f"done: {path.relative_to(self.dir)} and the archive {self.args.archive}"
                 + (f" ({len(self.archive['left_out'])} files left out of it: summary.txt names them)"
                    if self.archive.get("left_out") else ""))
        print(report.one_line(doc["steps"], doc["items"], rc))
        return rc


def at_a_time(n: int) -> str:
    """``"5 notebooks at a time"``, ``"1 notebook at a time"``."""
    return f"{n} notebook{'s' if n != 1 else ''} at a time"


def lanes(cores: int) -> int:
    """Quick notebooks at a time on a machine with ``cores``: a third of them, 1 to 6.

    Example:
        >>> lanes(16), lanes(2), lanes(64)
        (5, 1, 6)
    """
    return max(1, min(6, cores // 3))


def selection(lessons: str) -> tuple[set[str], list[str]]:
    """The steps and lessons a ``LESSONS`` value asks for: ``all``; or tokens among the step names,
    ``tests`` (cuda and csan), the producers' names (``bench``, ``ceilings``) and lesson numbers.

    Example:
        >>> steps, numbers = selection("tests 08")
        >>> sorted(steps), numbers
        (['csan', 'cuda', 'data', 'preflight', 'quick', 'references', 'topology'], ['08'])
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
    steps = {"preflight", "topology"} | {t for t in tokens if t in names} | ({"cuda", "csan"} if "tests" in tokens else set())
    numbers = [t for t in tokens if t in numbers_all]
    if numbers:
        steps |= {"quick", "references"}
    if numbers or steps & {"bench", "ceilings"}:
        steps |= {"data", "references"}
    return steps - {"tests"}, numbers
