"""``make test-gpu``: one GPU run that fits a short slot, keeps what it did when cut, and names
every test and notebook with its status.

A GPU is often at hand for about ten minutes (a debug queue, a CI job's limit, a borrowed node),
so the run is a sequence of steps in the order of their value, each under a time limit taken from
what is left of one budget (``--budget``, ``GPU_BUDGET_S=540``):

1. ``doctor``: ``python -m gpufeed doctor``, the machine record, and CUDA (the run stops without it);
2. ``data`` (in the background from here on): ``python -m gpufeed data prepare``, every dataset the
   lessons and the bench generate, built once with the cores the tests leave;
3. ``cuda``: ``pytest -m cuda tests src`` (``pytest-xdist`` workers where it is installed);
4. ``csan``: the same under PyTorch's CUDA Stream Sanitizer (``--cuda-sanitizer``, tests/cudasan.py);
5. ``notebooks``: every lesson in full mode. The lessons whose GPU figures are references
   (``--alone``, by value: 08 11 03 07 09) run one at a time, so nothing else shares the GPU and
   the cores while they measure; their results go to ``results/<gpu>/``. The others then run
   ``--jobs`` at a time, for pass/fail: what they measure shares the machine, so it goes to
   ``results-alongside/<gpu>/``, and ``run.json`` says which ran alongside which;
6. ``bench``: ``python -m gpufeed bench`` (it saves each pipeline as it finishes).

A step starts only if at least its ``least`` seconds are left (else it is ``skipped`` with the
reason), and is stopped at ``min(cap, what is left)``: the whole process tree is killed (a
notebook's kernel and its DataLoader workers included). Measurements are capped per case by time
(``GPUFEED_MEASURE_S``, :func:`gpufeed.measure.harness.measure_cap`; recorded in every result).

What it writes, under ``--run-dir`` (``build/gpu-run``), and packs after every step into one
archive (``--archive``: ``$OUT/gpu-run.tar.gz`` where ``$OUT`` is set), so that a run cut off by
the slot's end still returns its results:

* ``results/<gpu>/run.json``: every step, test and notebook with status and seconds; for a failure
  the message (a notebook's: the cell, its first line and the error); each notebook's cells with
  their seconds, and the datasets lessons built themselves (:func:`run_document`);
* ``results/<gpu>/``: what the lessons that ran alone and the bench saved (full mode: references);
  ``results-alongside/<gpu>/``: what the others saved;
* ``junit/``: ``cuda.xml`` and ``csan.xml`` (``pytest --junitxml``), ``notebooks.xml``;
* ``executed/NN_name.ipynb``: every notebook with its outputs, as far as it got;
* ``logs/``: every step's output.

``--standin cpu`` (``GPUFEED_GPU_STANDIN=cpu``) checks all of this on a machine without CUDA: the
``cuda`` tests run under the CUDA-ordering simulator instead (``-m simcuda``, one schedule), the
sanitizer step is skipped (it needs CUDA), the notebooks and the bench run in quick mode.

Also, for the steps themselves: ``gpurun.py notebook`` runs one notebook with nbclient (as nbmake
does), saving it after every cell; ``gpurun.py doctor`` is step 1; and this module is a pytest
plugin (``-p gpurun``) that appends each test's result to ``$GPURUN_TESTS`` as it finishes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMAT = "gpufeed-gpu-run"
#: Lessons whose GPU figures are references, by value: run first, one at a time.
ALONE = ("08", "11", "03", "07", "09")
#: Seconds kept back from the budget for the last run.json and archive.
RESERVE_S = 10.0
STATUSES = ("passed", "failed", "error", "timeout", "skipped")


# --- the budget and the limited child processes ---------------------------------------------


class Budget:
    """Seconds left of one budget, less a reserve for the last report: what each step's limit is cut from.

    Example:
        >>> clock = iter([0.0, 0.0, 100.0, 530.0]).__next__
        >>> b = Budget(540, reserve=10, clock=clock)
        >>> b.limit(cap=150, least=20)  # 530 s left: the cap
        (150, '')
        >>> b.limit(cap=150, least=20)  # 430 s left
        (150, '')
        >>> b.limit(cap=150, least=20)  # 0 s left
        (None, '0 s of the budget left, the step needs at least 20 s')
    """

    def __init__(self, seconds: float, reserve: float = RESERVE_S, clock=time.monotonic):
        self.clock, self.seconds = clock, seconds
        self.start = clock()
        self.deadline = self.start + seconds - reserve

    def left(self) -> float:
        return max(0.0, self.deadline - self.clock())

    def elapsed(self) -> float:
        return self.clock() - self.start

    def limit(self, cap: float, least: float) -> tuple[float | None, str]:
        """``(min(cap, left), "")``, or ``(None, why)`` when fewer than ``least`` seconds are left."""
        left = self.left()
        if left < least:
            return None, f"{left:.0f} s of the budget left, the step needs at least {least:.0f} s"
        return min(cap, left), ""


def kill_tree(pid: int) -> None:
    """Kills a process, every descendant, and what is left in its process group: a child started
    with ``start_new_session`` leads a group of its own, which keeps a worker that outlived its
    parent (reparented, so no longer its descendant); a kernel in a session of its own is a
    descendant while its parent lives."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]  # all found before any dies
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    psutil.wait_procs(procs, timeout=10)


class Child:
    """One child process with its own process group, output to a log file, stopped at its deadline."""

    def __init__(self, command: list[str], log: Path, env: dict, limit: float, cwd: Path = ROOT):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log, self.limit, self.command = log, limit, command
        self.start = time.monotonic()
        with open(log, "ab") as out:
            out.write(f"$ {shlex.join(command)}  # limit {limit:.0f} s\n".encode())
            out.flush()
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.timed_out = False
        self.seconds: float | None = None

    def poll(self) -> int | None:
        """The exit status once done (the child is killed first if past its limit), else None."""
        rc = self.proc.poll()
        if rc is None and time.monotonic() - self.start >= self.limit:
            kill_tree(self.proc.pid)
            rc, self.timed_out = self.proc.wait(), True
            with open(self.log, "a") as out:
                out.write(f"\n[gpurun] stopped at its limit of {self.limit:.0f} s\n")
        if rc is not None and self.seconds is None:
            self.seconds = round(time.monotonic() - self.start, 1)
            kill_tree(self.proc.pid)  # what it left behind (a worker that outlived its parent)
        return rc

    def wait(self, poll_s: float = 0.2) -> int:
        while (rc := self.poll()) is None:
            time.sleep(poll_s)
        return rc


# --- what the run records -------------------------------------------------------------------


@dataclass
class Entry:
    """What ``run.json`` says of a step or a notebook: status (one of :data:`STATUSES`, or
    pending/running), seconds taken, its limit, and why it was skipped."""

    name: str
    status: str = "pending"
    seconds: float | None = None
    limit_s: float | None = None
    reason: str = ""


@dataclass
class Step(Entry):
    """One step, with its log, its command and a one-line summary (e.g. the tests' counts)."""

    log: str | None = None
    command: str | None = None
    summary: str = ""


@dataclass
class Notebook(Entry):
    """One lesson's run: the failing cell, the slowest cells, who shared the machine."""

    alone: bool = True
    alongside: list[str] = field(default_factory=list)
    cell: dict | None = None
    error: str | None = None
    error_line: str | None = None
    cells_done: int = 0
    cells_total: int = 0
    slowest_cells: list[dict] = field(default_factory=list)
    interval: tuple[float, float] | None = None  # (start, end) seconds into the run


def read_tests(path: Path) -> list[dict]:
    """One record per test from the lines the pytest plugin appended (``$GPURUN_TESTS``): status
    (``error`` for a failing fixture, else failed, skipped or passed), seconds, message."""
    tests: dict[str, dict] = {}
    if not path.is_file():
        return []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            r = json.loads(line)
            t = tests.setdefault(r["name"], {"name": r["name"], "status": "passed", "seconds": 0.0, "message": ""})
            t["seconds"] = round(t["seconds"] + r["duration"], 3)
            status = {"failed": "error" if r["when"] != "call" else "failed"}.get(r["outcome"], r["outcome"])
            if STATUSES.index(status) > STATUSES.index(t["status"]) or status == "skipped" and t["status"] == "passed":
                t["status"], t["message"] = status, r.get("message", "")
    return list(tests.values())


def count(records: list[dict]) -> str:
    """``"47 passed, 2 failed"`` for a list of records with a ``status``."""
    n = {s: sum(r["status"] == s for r in records) for s in STATUSES}
    return ", ".join(f"{v} {s}" for s, v in n.items() if v) or "nothing ran"


def junit_notebooks(notebooks: list[Notebook], path: Path) -> None:
    """A JUnit XML report of the notebooks, in the shape ``pytest --junitxml`` writes."""
    suite = ET.Element("testsuite", name="notebooks", tests=str(len(notebooks)),
                       failures=str(sum(nb.status in ("failed", "timeout") for nb in notebooks)),
                       skipped=str(sum(nb.status == "skipped" for nb in notebooks)), errors="0",
                       time=f"{sum(nb.seconds or 0 for nb in notebooks):.1f}")
    for nb in notebooks:
        case = ET.SubElement(suite, "testcase", classname="notebooks", name=f"{nb.name}.ipynb",
                             time=f"{nb.seconds or 0:.1f}")
        if nb.status in ("failed", "timeout"):
            where = f"cell {nb.cell['index']}: {nb.cell['first_line']}" if nb.cell else ""
            ET.SubElement(case, "failure", message=f"{nb.status} {where}".strip()).text = nb.error or ""
        elif nb.status == "skipped":
            ET.SubElement(case, "skipped", message=nb.reason)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def overlaps(notebooks: list[Notebook]) -> None:
    """Fills each notebook's ``alongside``: the others that ran at the same time."""
    for nb in notebooks:
        nb.alongside = sorted(o.name for o in notebooks if o is not nb and nb.interval and o.interval
                              and o.interval[0] < nb.interval[1] and nb.interval[0] < o.interval[1])


# --- one notebook, run in its own process -----------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _cell_seconds(cell) -> float | None:
    from datetime import datetime

    ex = cell.get("metadata", {}).get("execution", {})
    start, end = ex.get("iopub.execute_input") or ex.get("shell.execute_reply.started"), ex.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return round((parse(end) - parse(start)).total_seconds(), 2)


def notebook_progress(nb, running: int | None = None, error: str | None = None) -> dict:
    """What a (partly) executed notebook says: cells done, the seconds of each, the cell that failed
    (``running``: its index among all cells) with its first line, and the error."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    times = [(i, _cell_seconds(c)) for i, c in code]
    done = [(i, s) for i, s in times if s is not None]
    out = {"cells_total": len(code), "cells_done": len(done),
           "cells_s": [{"index": i, "code_cell": n + 1, "seconds": s, "first_line": _first_line(nb.cells[i])}
                       for n, (i, s) in enumerate(times) if s is not None]}
    if running is not None and 0 <= running < len(nb.cells):
        number = next((n + 1 for n, (i, _) in enumerate(code) if i == running), None)
        out["cell"] = {"index": running, "code_cell": number, "first_line": _first_line(nb.cells[running])}
    if error:
        out["error"] = error
    return out


def _first_line(cell) -> str:
    lines = [line for line in "".join(cell.source).splitlines() if line.strip() and not line.startswith("#")]
    return (lines[0] if lines else "".join(cell.source).splitlines()[0] if cell.source else "")[:120]


def run_notebook(src: Path, executed: Path, result: Path, cell_timeout: int) -> int:
    """Executes ``src`` top to bottom (nbclient, as nbmake does, in the notebook's folder), writing
    the executed notebook and ``result`` (JSON: :func:`notebook_progress`) after every cell, so
    that a notebook stopped at its limit keeps what it did. Exit status 1 when a cell fails."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    executed.parent.mkdir(parents=True, exist_ok=True)

    def save(status: str, running: int | None = None, error: str | None = None, notebook: bool = True) -> None:
        if notebook:
            tmp = executed.with_name(f".{executed.name}.tmp")
            nbformat.write(nb, tmp)
            tmp.replace(executed)
        doc = {"name": src.stem, "status": status, **notebook_progress(nb, running, error)}
        result.with_name(f".{result.name}.tmp").write_text(json.dumps(doc, indent=1))
        result.with_name(f".{result.name}.tmp").replace(result)

    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=False, record_timing=True,
                            kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"))
    # before a cell: which one runs (a notebook stopped at its limit names it); after: the outputs
    client.on_cell_execute = lambda cell, cell_index: save("running", cell_index, notebook=False)
    client.on_cell_executed = lambda cell, cell_index, execute_reply: save("running", cell_index)
    try:
        client.execute(cwd=str(src.parent))
    except (CellExecutionError, CellTimeoutError) as e:
        failing = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                        and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        if failing is None:  # a timeout: the first code cell without a reply
            failing = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                            and "shell.execute_reply" not in c.get("metadata", {}).get("execution", {})), None)
        save("failed", failing, ANSI.sub("", str(e))[-4000:])
        return 1
    save("passed")
    return 0


# --- the steps --------------------------------------------------------------------------------


def lesson_names(selected: list[str] | None = None) -> list[str]:
    """``NN_name`` of every notebook (or of the ``NN`` in ``selected``), in lesson order."""
    names = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if selected is None:
        return names
    out = []
    for n in selected:
        match = [name for name in names if name.startswith(f"{n}_")]
        if not match:
            raise SystemExit(f"gpurun: LESSONS: no notebooks/{n}_*.ipynb")
        out += match
    return out


def plan(lessons: str) -> tuple[set[str], list[str]]:
    """The steps and notebooks a ``LESSONS`` value asks for: ``all``; or tokens among ``tests``
    (the ``cuda`` tests and the sanitizer), ``bench`` and lesson numbers.

    Example:
        >>> steps, nbs = plan("tests 08")
        >>> sorted(steps), nbs
        (['csan', 'cuda', 'data', 'doctor', 'notebooks'], ['08_prefetch'])
    """
    tokens = lessons.split()
    if tokens in ([], ["all"]):
        return {"doctor", "data", "cuda", "csan", "notebooks", "bench"}, lesson_names()
    unknown = [t for t in tokens if t not in ("tests", "bench") and not re.fullmatch(r"\d\d", t)]
    if unknown:
        raise SystemExit(f"gpurun: LESSONS: {' '.join(unknown)}: give all, tests, bench or lesson numbers (03 08)")
    steps = {"doctor"} | ({"cuda", "csan"} if "tests" in tokens else set()) | ({"bench"} if "bench" in tokens else set())
    numbers = [t for t in tokens if t.isdigit()]
    if numbers or "bench" in tokens:
        steps.add("data")
    if numbers:
        steps.add("notebooks")
    return steps, lesson_names(numbers) if numbers else []


class Run:
    """The run's state: the budget, the steps, the notebooks, and where everything is written."""

    #: Seconds a step (or one notebook) needs at least to be worth starting.
    LEAST = {"doctor": 10, "data": 20, "cuda": 30, "csan": 30, "notebooks": 20, "notebook": 20, "bench": 60}

    def __init__(self, args):
        self.args = args
        self.budget = Budget(args.budget)
        self.dir: Path = args.run_dir
        self.standin = args.standin
        self.quick = bool(self.standin)
        self.steps: list[Step] = []
        self.notebooks: list[Notebook] = []
        self.tests: dict[str, list[dict]] = {}
        self.machine: dict = {}
        self.datasets: dict = {}
        self.python = sys.executable
        from gpufeed.measure.machine import usable_cores

        self.cores = usable_cores()
        self.jobs = args.jobs or max(1, min(4, self.cores // 4))

    # where things go
    def slug(self) -> str:
        return self.machine.get("slug") or ("cpu-standin" if self.standin else "gpu")

    def results(self, alone: bool = True) -> Path:
        return self.dir / ("results" if alone else "results-alongside")

    def env(self, *, quick: bool, alone: bool = True, measured: bool = True) -> dict:
        """The children's environment: the results and cache folders, the mode, the time cap (not
        for the tests, ``measured=False``: some count the samples they asked for; nor CUDA required)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
               "GPUFEED_QUICK": "1" if quick else "0", "GPUFEED_RESULTS": str(self.results(alone)),
               "GPUFEED_CACHE": str(self.args.cache)}
        env.pop("GPUFEED_MEASURE_S", None)
        if measured:
            env["GPUFEED_MEASURE_S"] = str(self.args.measure_s)
        if self.machine.get("commit"):
            env["GPUFEED_COMMIT"] = self.machine["commit"]
        if measured and not self.standin:
            env["GPUFEED_REQUIRE_CUDA"] = "1"
        env.pop("TORCH_CUDA_SANITIZER", None)
        return env

    def log(self, text: str) -> None:
        print(f"[gpurun +{self.budget.elapsed():4.0f}s] {text}", flush=True)

    # the report, after every step
    def document(self) -> dict:
        overlaps(self.notebooks)
        return {
            "format": FORMAT, "version": 1, "budget_s": self.args.budget, "elapsed_s": round(self.budget.elapsed(), 1),
            "standin": self.standin, "mode": "quick" if self.quick else "full", "measure_s": self.args.measure_s,
            "commit": self.machine.get("commit"), "machine": self.machine, "jobs": self.jobs,
            "alone": [nb.name for nb in self.notebooks if nb.alone],
            "steps": [asdict(s) for s in self.steps],
            "tests": self.tests,
            "notebooks": [{k: v for k, v in asdict(nb).items() if k != "interval"} for nb in self.notebooks],
            "datasets": self.datasets,
        }

    def save(self) -> Path:
        """Writes run.json and the junit report of the notebooks, then packs the archive."""
        path = self.results() / self.slug() / "run.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(".run.json.tmp")
        tmp.write_text(json.dumps(self.document(), indent=1) + "\n")
        tmp.replace(path)
        if self.notebooks:
            junit_notebooks(self.notebooks, self.dir / "junit" / "notebooks.xml")
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

    # the steps
    def step(self, name: str, cap: float, least: float) -> tuple[Step, float | None]:
        s = Step(name)
        self.steps.append(s)
        s.limit_s, s.reason = self.budget.limit(cap, least)
        s.limit_s = None if s.limit_s is None else round(s.limit_s, 1)
        if s.limit_s is None:
            s.status = "skipped"
            self.log(f"{name}: skipped ({s.reason})")
        return s, s.limit_s

    def finish(self, s: Step, child: Child, rc: int, summary: str = "") -> None:
        s.status = "timeout" if child.timed_out else ("passed" if rc == 0 else "failed")
        s.seconds, s.summary = child.seconds, summary
        self.log(f"{s.name}: {s.status} in {s.seconds:.0f} s (limit {s.limit_s:.0f} s){': ' + summary if summary else ''}")
        self.save()

    def start(self, s: Step, command: list[str], env: dict) -> Child:
        s.log = f"logs/{s.name}.log"
        s.command = shlex.join(command)
        return Child(command, self.dir / s.log, env, s.limit_s)

    # the commands (a test replaces them with sleeps)
    def doctor_command(self, record: Path) -> list[str]:
        return [self.python, str(Path(__file__)), "doctor", "--record", str(record)] + ([] if self.standin else ["--need-cuda"])

    def data_command(self, owners: list[str] | None) -> list[str]:
        cmd = [self.python, "-m", "gpufeed", "data", "prepare", "--workers", str(max(1, self.cores - 4)),
               "--device", "cpu" if self.standin else "cuda"]
        return cmd + (["--only", ",".join(owners)] if owners is not None else [])

    def test_command(self, name: str, extra: list[str]) -> list[str]:
        # the stand-in: each on_cuda test under one schedule of the simulator, as the one GPU would run it
        marker = ["-m", "simcuda", "-k", "not simcuda1 and not simcuda2 and not simcuda3"] if self.standin else ["-m", "cuda"]
        xdist = [] if self.standin or not has_module("xdist") else ["-n", str(self.args.test_workers), "--dist", "loadfile"]
        return [self.python, "-m", "pytest", *marker, "tests", "src", "-p", "gpurun", "-p", "no:cacheprovider",
                "-rfEs", "--junitxml", str(self.dir / "junit" / f"{name}.xml"), *xdist, *extra]

    def notebook_command(self, nb: Notebook) -> list[str]:
        return [self.python, str(Path(__file__)), "notebook", str(ROOT / "notebooks" / f"{nb.name}.ipynb"),
                "--executed", str(self.dir / "executed" / f"{nb.name}.ipynb"),
                "--result", str(self.dir / "logs" / f"nb-{nb.name}.json"), "--cell-timeout", str(int(nb.limit_s) + 60)]

    def bench_command(self) -> list[str]:
        return [self.python, "-m", "gpufeed", "bench", "--device", "cpu" if self.standin else "cuda"] + (
            ["--quick"] if self.quick else [])

    # the steps
    def doctor(self) -> bool:
        s, limit = self.step("doctor", cap=90, least=self.LEAST["doctor"])
        if limit is None:
            return False
        record = self.dir / "logs" / "machine.json"
        child = self.start(s, self.doctor_command(record), self.env(quick=self.quick))
        rc = child.wait()
        if record.is_file():
            self.machine = json.loads(record.read_text())
        self.finish(s, child, rc, self.machine.get("gpu") or self.machine.get("cpu", ""))
        return rc == 0

    def data(self, owners: list[str] | None) -> Child | None:
        s, limit = self.step("data", cap=300, least=self.LEAST["data"])
        if limit is None:
            return None
        self.data_step = s
        return self.start(s, self.data_command(owners), self.env(quick=self.quick))

    def join_data(self, child: Child | None) -> None:
        if child is None or self.data_step.status != "pending":
            return
        rc = child.wait()
        log = (self.dir / self.data_step.log).read_text(errors="replace")
        self.datasets["prepared"] = re.findall(r"^(lesson\d\d|bench): (\S+) .*$", log, re.M)
        self.finish(self.data_step, child, rc, f"{len(self.datasets['prepared'])} folders and memmaps")

    def pytest(self, name: str, extra: list[str], cap: float) -> None:
        s, limit = self.step(name, cap=cap, least=self.LEAST[name])
        if limit is None:
            return
        if self.standin and name == "csan":
            s.status, s.reason = "skipped", "the CUDA Stream Sanitizer needs CUDA (stand-in run)"
            self.log(f"{name}: skipped ({s.reason})")
            self.save()
            return
        records = self.dir / "logs" / f"{name}-tests.jsonl"
        env = {**self.env(quick=True, measured=False), "GPURUN_TESTS": str(records),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
        child = self.start(s, self.test_command(name, extra), env)
        rc = child.wait()
        self.tests[name] = read_tests(records)
        selected = re.search(r"(\d+) selected", (self.dir / s.log).read_text(errors="replace"))
        self.finish(s, child, rc, count(self.tests[name]) + (f" of {selected.group(1)} selected" if selected else ""))

    def run_notebooks(self, names: list[str], alone: list[str]) -> None:
        s, limit = self.step("notebooks", cap=self.budget.left(), least=self.LEAST["notebooks"])
        self.notebooks = [Notebook(n, alone=n[:2] in alone) for n in names]
        if limit is None:
            for nb in self.notebooks:
                nb.status, nb.reason = "skipped", s.reason
            self.save()
            return
        t0 = time.monotonic()
        first = sorted((nb for nb in self.notebooks if nb.alone), key=lambda nb: alone.index(nb.name[:2]))
        self.schedule(first, jobs=1, cap=self.args.alone_cap)
        self.schedule([nb for nb in self.notebooks if not nb.alone], jobs=self.jobs, cap=self.args.notebook_cap)
        s.seconds = round(time.monotonic() - t0, 1)
        bad = [nb for nb in self.notebooks if nb.status in ("failed", "timeout")]
        s.status = "failed" if bad else ("passed" if any(nb.status == "passed" for nb in self.notebooks) else "skipped")
        s.summary = count([asdict(nb) for nb in self.notebooks])
        if any(nb.status == "skipped" for nb in self.notebooks):
            s.reason = "not every notebook started: too little of the budget was left"
        self.built_by_lessons()
        self.log(f"notebooks: {s.summary} in {s.seconds:.0f} s")
        self.save()

    def schedule(self, queue: list[Notebook], jobs: int, cap: float) -> None:
        """Runs ``queue`` ``jobs`` at a time, each under ``min(cap, what is left)``; saves as each ends."""
        queue, running = list(queue), {}
        while queue or running:
            while queue and len(running) < jobs:
                nb = queue.pop(0)
                nb.limit_s, nb.reason = self.budget.limit(cap, least=self.LEAST["notebook"])
                nb.limit_s = None if nb.limit_s is None else round(nb.limit_s, 1)
                if nb.limit_s is None:
                    nb.status = "skipped"
                    self.log(f"notebook {nb.name}: skipped ({nb.reason})")
                    continue
                running[nb.name] = (nb, self.notebook_child(nb))
            time.sleep(0.5)
            for name, (nb, child) in list(running.items()):
                rc = child.poll()
                if rc is not None:
                    del running[name]
                    self.notebook_done(nb, child, rc)

    def notebook_child(self, nb: Notebook) -> Child:
        nb.status, t = "running", self.budget.elapsed()
        nb.interval = (t, t)
        cmd = self.notebook_command(nb)
        self.log(f"notebook {nb.name}: started ({'alone' if nb.alone else 'alongside others'}, limit {nb.limit_s:.0f} s)")
        return Child(cmd, self.dir / "logs" / f"nb-{nb.name}.log", self.env(quick=self.quick, alone=nb.alone), nb.limit_s)

    def notebook_done(self, nb: Notebook, child: Child, rc: int) -> None:
        nb.seconds = child.seconds
        nb.interval = (nb.interval[0], self.budget.elapsed())
        result = self.dir / "logs" / f"nb-{nb.name}.json"
        doc = json.loads(result.read_text()) if result.is_file() else {}
        nb.status = "timeout" if child.timed_out else ("passed" if rc == 0 else "failed")
        nb.cells_done, nb.cells_total = doc.get("cells_done", 0), doc.get("cells_total", 0)
        nb.slowest_cells = sorted(doc.get("cells_s", []), key=lambda c: -c["seconds"])[:5]
        if nb.status != "passed":
            nb.cell = doc.get("cell")
            log_tail = (self.dir / "logs" / f"nb-{nb.name}.log").read_text(errors="replace")[-2000:]
            nb.error = doc.get("error") or (f"stopped at its limit of {nb.limit_s:.0f} s" if child.timed_out else log_tail)
            nb.error_line = ([line for line in nb.error.splitlines() if line.strip()] or [""])[-1][:200]
        where = f", cell {nb.cell['index']} ({nb.cell['first_line']})" if nb.cell and nb.status != "passed" else ""
        self.log(f"notebook {nb.name}: {nb.status} in {nb.seconds:.0f} s, {nb.cells_done}/{nb.cells_total} cells{where}")
        self.save()

    def built_by_lessons(self) -> None:
        """The cache's folders that ``data prepare`` did not build: what lessons built themselves."""
        from gpufeed.data.manifest import MANIFEST as MEMMAP_MANIFEST
        from gpufeed.measure.synth import MANIFEST as SYNTH_MANIFEST

        prepared = {path for _, path in self.datasets.get("prepared", [])}
        cache = Path(self.args.cache)
        found = [str(p.relative_to(cache)) for p in sorted(cache.glob("*")) + sorted(cache.glob("*/*"))
                 if p.is_dir() and not p.name.startswith(".")
                 and ((p / SYNTH_MANIFEST).is_file() or (p / MEMMAP_MANIFEST).is_file())]
        self.datasets["built_by_lessons"] = [p for p in found if p not in prepared]

    def bench(self) -> None:
        s, limit = self.step("bench", cap=self.args.bench_cap, least=self.LEAST["bench"])
        if limit is None:
            return
        child = self.start(s, self.bench_command(), self.env(quick=self.quick))
        rc = child.wait()
        self.finish(s, child, rc, "results.json" if rc == 0 else "results.partial.json has what finished")

    def main(self, lessons: str) -> int:
        steps, names = plan(lessons)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log(f"budget {self.args.budget:.0f} s, {self.cores} cores, run in {self.dir}, archive {self.args.archive}"
                 + (f", stand-in: {self.standin} (quick mode, the simulator for CUDA)" if self.standin else ""))
        if not self.doctor():
            for name in ("data", "cuda", "csan", "notebooks", "bench"):
                if name in steps:
                    self.steps.append(Step(name, "skipped", reason="the doctor step failed (no CUDA?): see logs/doctor.log"))
            self.save()
            return 1
        owners = None if lessons.split() in ([], ["all"]) else [f"lesson{n[:2]}" for n in names] + (
            ["bench"] if "bench" in steps else [])
        data = self.data(owners) if "data" in steps else None
        if "cuda" in steps:
            self.pytest("cuda", [], cap=self.args.tests_cap)
        if "csan" in steps:
            self.pytest("csan", ["--cuda-sanitizer"], cap=self.args.tests_cap)
        self.join_data(data)
        if "notebooks" in steps:
            self.run_notebooks(names, self.args.alone.split())
        if "bench" in steps:
            self.bench()
        path = self.save()
        self.log(f"done: {path.relative_to(self.dir)} and the archive {self.args.archive}")
        print(summary(self.document()))
        return 1 if any(s.status in ("failed", "timeout") for s in self.steps) else 0


def has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def summary(doc: dict) -> str:
    """The run as a table: every step, then every notebook, with status and seconds."""
    lines = [f"{'step':12} {'status':8} {'seconds':>8} {'limit':>6}  what"]
    for s in doc["steps"]:
        secs = "-" if s["seconds"] is None else f"{s['seconds']:.0f}"
        limit = "-" if s["limit_s"] is None else f"{s['limit_s']:.0f}"
        lines.append(f"{s['name']:12} {s['status']:8} {secs:>8} {limit:>6}  {s['summary'] or s['reason']}")
    for nb in doc["notebooks"]:
        secs = "-" if nb["seconds"] is None else f"{nb['seconds']:.0f}"
        limit = "-" if nb["limit_s"] is None else f"{nb['limit_s']:.0f}"
        what = "" if nb["status"] == "skipped" else (
            "alone" if nb["alone"] else f"alongside {' '.join(n[:2] for n in nb['alongside']) or 'none'}")
        if nb["cell"] and nb["status"] != "passed":
            what += f"; cell {nb['cell']['index']}: {nb['cell']['first_line'][:40]}: {(nb['error_line'] or '')[:60]}"
        if nb["reason"]:
            what = f"{what}; {nb['reason']}" if what else nb["reason"]
        lines.append(f"  {nb['name'][:10]:10} {nb['status']:8} {secs:>8} {limit:>6}  {what}")
    return "\n".join(lines)


def doctor(record: Path, need_cuda: bool) -> int:
    """Step 1: the course's doctor, then the machine record (with its slug) to ``record``; 3 when CUDA
    is needed and torch sees none."""
    import torch

    from gpufeed.course.doctor import main as doctor_main
    from gpufeed.measure.machine import machine_info, slug

    rc = doctor_main()
    info = machine_info()
    info["slug"] = slug(info)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(info, indent=1))
    print(f"machine: {info.get('gpu') or info['cpu']}, commit {info['commit']}; results go to results/{info['slug']}/")
    if need_cuda and not torch.cuda.is_available():
        print("test-gpu: torch sees no CUDA GPU; this runs on a GPU node (GPUFEED_GPU_STANDIN=cpu checks "
              "the run itself on a CPU)", file=sys.stderr)
        return 3
    return rc


# --- the pytest plugin (-p gpurun): each test's result as it finishes ------------------------

_report_path: Path | None = None


def pytest_configure(config):
    global _report_path
    if os.environ.get("GPURUN_TESTS") and not hasattr(config, "workerinput"):  # not in xdist's workers
        _report_path = Path(os.environ["GPURUN_TESTS"])
        _report_path.parent.mkdir(parents=True, exist_ok=True)


def pytest_runtest_logreport(report):
    if _report_path is None or (report.when != "call" and report.outcome == "passed"):
        return
    message = ""
    if report.outcome == "failed":
        crash = getattr(report.longrepr, "reprcrash", None)
        message = (f"{crash.path}:{crash.lineno}: {crash.message}" if crash else "") + "\n" + report.longreprtext[-3000:]
    elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    with open(_report_path, "a") as f:
        f.write(json.dumps({"name": report.nodeid, "when": report.when, "outcome": report.outcome,
                            "duration": round(report.duration, 3), "message": message.strip()}) + "\n")


# --- the command line -------------------------------------------------------------------------


def default_cache(quick: bool) -> Path:
    """A folder of the course's cache (:func:`gpufeed.config.cache_dir`) for this mode: quick and
    full datasets share folder names, and must not meet."""
    from gpufeed import config

    return config.cache_dir() / f"gpurun-{'quick' if quick else 'full'}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the whole run under one budget")
    r.add_argument("--budget", type=float, default=float(os.environ.get("GPU_BUDGET_S", 540)))
    r.add_argument("--run-dir", type=Path, default=ROOT / "build" / "gpu-run")
    r.add_argument("--archive", type=Path, default=None,
                   help="the archive packed after every step (default: $OUT/gpu-run.tar.gz, else beside --run-dir)")
    r.add_argument("--lessons", default=os.environ.get("LESSONS", "all"))
    r.add_argument("--standin", choices=["cpu"], default=os.environ.get("GPUFEED_GPU_STANDIN") or None)
    r.add_argument("--alone", default=" ".join(ALONE), help="lessons run one at a time, first, in this order")
    r.add_argument("--jobs", type=int, default=None, help="notebooks at a time after those (default: cores / 4, at most 4)")
    r.add_argument("--measure-s", type=float, default=None, help="GPUFEED_MEASURE_S: seconds per measured case (5; 2 stand-in)")
    r.add_argument("--tests-cap", type=float, default=150)
    r.add_argument("--test-workers", type=int, default=4, help="pytest-xdist workers for the cuda tests, where installed")
    r.add_argument("--alone-cap", type=float, default=150, help="seconds at most for a lesson run alone")
    r.add_argument("--notebook-cap", type=float, default=240, help="seconds at most for a lesson run alongside others")
    r.add_argument("--bench-cap", type=float, default=240)
    r.add_argument("--cache", type=Path, default=None)
    n = sub.add_parser("notebook", help="(a step) run one notebook, saving it after every cell")
    n.add_argument("src", type=Path)
    n.add_argument("--executed", type=Path, required=True)
    n.add_argument("--result", type=Path, required=True)
    n.add_argument("--cell-timeout", type=int, default=3600)
    d = sub.add_parser("doctor", help="(a step) the doctor and the machine record")
    d.add_argument("--record", type=Path, required=True)
    d.add_argument("--need-cuda", action="store_true")
    args = parser.parse_args(argv[1:])
    if args.command == "notebook":
        return run_notebook(args.src, args.executed, args.result, args.cell_timeout)
    if args.command == "doctor":
        return doctor(args.record, args.need_cuda)
    if args.archive is None:
        out = os.environ.get("OUT")
        args.archive = Path(out) / "gpu-run.tar.gz" if out else args.run_dir.with_name(f"{args.run_dir.name}.tar.gz")
    args.measure_s = args.measure_s or (2.0 if args.standin else 5.0)
    args.cache = args.cache or default_cache(quick=bool(args.standin))
    if args.run_dir.exists() and any(args.run_dir.iterdir()):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(args.run_dir.stat().st_mtime))
        args.run_dir.rename(args.run_dir.with_name(f"{args.run_dir.name}-{stamp}"))  # an earlier run: kept
    return Run(args).main(args.lessons)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
