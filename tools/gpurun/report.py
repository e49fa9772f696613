"""What ``make test-gpu`` records: the statuses, each test's result, the notebooks' junit, the
one-line summary and the table printed at the end."""

from __future__ import annotations

import contextlib
import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

PASSED, FAILED, ERROR, SKIPPED, CUT = "passed", "failed", "error", "skipped", "cut"
#: Left out because the budget would not hold it: never a failure (the next slot runs it).
NOT_RUN = "not run (budget)"
#: Not run for a reason other than time (the preflight failed, it needs CUDA): the reason says which.
NOT_RUN_BECAUSE = "not run"
#: A test's worst outcome wins: error > failed > skipped > passed.
TEST_ORDER = (PASSED, SKIPPED, FAILED, ERROR)
#: What makes the run fail: nothing else does (not a cut, not a step not run).
FAILURES = (FAILED, ERROR)


@dataclass
class Entry:
    """A step, a notebook or a reference producer in ``run.json``: the plan's forecast (estimate,
    stale or fresh and why, whether it fits) beside what happened (status, seconds, its limit, for a
    failure the cell, its first line and the error; for a cut, what it finished)."""

    name: str
    step: str
    estimate_s: float = 0.0
    basis: str = ""
    stale: bool | None = None
    why: str = ""
    fits: bool = True
    status: str = "pending"
    seconds: float | None = None
    limit_s: float | None = None
    reason: str = ""
    summary: str = ""
    log: str | None = None
    cell: dict | None = None
    error: str | None = None
    error_line: str | None = None
    cells_done: int = 0
    cells_total: int = 0


def read_tests(path: Path) -> list[dict]:
    """One record per test from the lines the pytest plugin appended (``$GPURUN_TESTS``): status
    (``error`` for a failing fixture, else failed, skipped or passed), seconds, message."""
    tests: dict[str, dict] = {}
    if not path.is_file():
        return []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            r = json.loads(line)
            t = tests.setdefault(r["name"], {"name": r["name"], "status": PASSED, "seconds": 0.0, "message": ""})
            t["seconds"] = round(t["seconds"] + r["duration"], 3)
            status = {FAILED: ERROR if r["when"] != "call" else FAILED}.get(r["outcome"], r["outcome"])
            if TEST_ORDER.index(status) > TEST_ORDER.index(t["status"]):
                t["status"], t["message"] = status, r.get("message", "")
    return list(tests.values())


def count(records: list[dict]) -> str:
    """``"47 passed, 2 failed"`` for records with a ``status``.

    Example:
        >>> count([{"status": "passed"}, {"status": "not run (budget)"}, {"status": "passed"}])
        '2 passed, 1 not run (budget)'
    """
    seen: dict[str, int] = {}
    for r in records:
        seen[r["status"]] = seen.get(r["status"], 0) + 1
    return ", ".join(f"{v} {s}" for s, v in seen.items()) or "nothing ran"


def junit(entries: list[Entry], path: Path, suite_name: str) -> None:
    """A JUnit XML report of notebooks or producers, in the shape ``pytest --junitxml`` writes: a
    ``not run (budget)`` entry is a skip, a cut one a skip that says what it finished."""
    bad = [e for e in entries if e.status in FAILURES]
    skipped = [e for e in entries if e.status not in FAILURES and e.status != PASSED]
    suite = ET.Element("testsuite", name=suite_name, tests=str(len(entries)), failures=str(len(bad)),
                       skipped=str(len(skipped)), errors="0", time=f"{sum(e.seconds or 0 for e in entries):.1f}")
    for e in entries:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=e.name, time=f"{e.seconds or 0:.1f}")
        if e.status in FAILURES:
            where = f"cell {e.cell['index']}: {e.cell['first_line']}" if e.cell else ""
            ET.SubElement(case, "failure", message=f"{e.status} {where}".strip()).text = e.error or ""
        elif e.status != PASSED:
            ET.SubElement(case, "skipped", message=f"{e.status}: {e.reason or e.summary}".rstrip(": "))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def table(steps: list[dict], items: list[dict]) -> str:
    """The run as a table: every step, and under it its notebooks or producers, with status,
    seconds, limit, estimate and what (a failure's cell and error, a cut's progress, a reason)."""
    lines = [f"{'step':24} {'status':16} {'seconds':>7} {'limit':>6} {'est.':>5}  what"]
    for s in steps:
        lines.append(f"{s['name']:24} {s['status']:16} {_secs(s['seconds']):>7} {_secs(s['limit_s']):>6} "
                     f"{s['estimate_s']:5.0f}  {s['summary'] or s['reason']}")
        for e in (e for e in items if e["step"] == s["name"]):
            what = e["why"] if e["stale"] is not None else ""
            if e["status"] in FAILURES and e["cell"]:
                what = f"cell {e['cell']['index']}: {e['cell']['first_line'][:40]}: {(e['error_line'] or '')[:60]}"
            elif e["status"] == CUT:
                what = f"{e['cells_done']}/{e['cells_total']} cells before the cut"
            elif e["reason"]:
                what = e["reason"]
            lines.append(f"  {e['name'][:22]:22} {e['status']:16} {_secs(e['seconds']):>7} {_secs(e['limit_s']):>6} "
                         f"{e['estimate_s']:5.0f}  {what}")
    return "\n".join(lines)


def one_line(steps: list[dict], items: list[dict], exit_code: int) -> str:
    """The verdict in one line: ``test-gpu: passed; steps: 5 passed, 1 cut; quick: 13 passed; ...``."""
    parts = [f"steps: {count(steps)}"]
    for step in dict.fromkeys(e["step"] for e in items):
        parts.append(f"{step}: {count([e for e in items if e['step'] == step])}")
    return f"test-gpu: {'passed' if exit_code == 0 else 'FAILED'}; " + "; ".join(parts)


def summary(doc: dict, exit_code: int | None, columns: int = 100, rows: int = 24) -> str:
    """The run on one screen (``summary.txt``, at most ``rows`` lines of ``columns``): the verdict,
    the machine, each step, each failure or cut with its cell, and what the archive left out.
    ``exit_code`` None: the run is still going (the file is rewritten after every step).

    Example:
        >>> doc = {"budget_s": 460, "elapsed_s": 300, "plan_name": "default", "machine": {"gpu": "H200", "cores": 16},
        ...        "commit": "abc", "steps": [{"name": "cuda", "status": "passed", "seconds": 80, "summary": "47 passed"}],
        ...        "items": [{"name": "03_dtypes", "step": "quick", "status": "failed", "cells_done": 4,
        ...                   "cells_total": 9, "cell": {"index": 7, "first_line": "f()"}, "error_line": "ValueError: v"}],
        ...        "archive": {"bytes": 2**20, "left_out": []}}
        >>> print(summary(doc, 1))
        test-gpu: FAILED (exit 1), 300 of 460 s, plan default
        H200, 16 cores, commit abc
        cuda         passed              80 s  47 passed
        quick: 1 failed
          failed 03_dtypes: cell 7 (f()): ValueError: v
        archive: 1.0 MiB, nothing left out
    """
    m = doc.get("machine") or {}
    state = "running" if exit_code is None else ("passed" if exit_code == 0 else f"FAILED (exit {exit_code})")
    lines = [f"test-gpu: {state}, {doc.get('elapsed_s', 0):.0f} of {doc.get('budget_s', 0):.0f} s, "
             f"plan {doc.get('plan_name', 'default')}",
             ", ".join(str(x) for x in (m.get("gpu") or m.get("cpu"), f"{m.get('cores')} cores" if m.get("cores") else None,
                                        f"torch {m['torch']}" if m.get("torch") else None,
                                        f"driver {m['driver']}" if m.get("driver") else None,
                                        f"commit {doc.get('commit')}") if x)]
    if doc.get("error"):  # the run itself broke: said before anything else
        lines.append(f"error: {doc['error']}")
    for s in doc.get("steps", []):
        lines.append(f"{s['name']:12} {s['status']:16} {_secs(s.get('seconds')):>5} s  {s.get('summary') or s.get('reason') or ''}")
    items = doc.get("items", [])
    notes = []
    for step in dict.fromkeys(e["step"] for e in items):
        mine = [e for e in items if e["step"] == step]
        lines.append(f"{step}: {count(mine)}")
        for e in mine:
            if e["status"] in FAILURES:
                where = f"cell {e['cell']['index']} ({e['cell']['first_line'][:30]}): " if e.get("cell") else ""
                notes.append(f"  {e['status']} {e['name']}: {where}{e.get('error_line') or ''}")
            elif e["status"] == CUT:
                notes.append(f"  cut {e['name']}: {e.get('cells_done', 0)}/{e.get('cells_total', 0)} cells done")
        lines += notes
        notes = []
    archive = doc.get("archive") or {}
    if archive:
        left = archive.get("left_out") or []
        lines.append(f"archive: {(archive.get('bytes') or 0) / 2**20:.1f} MiB, " + (
            f"left out {len(left)} files ({sum(b for _, b in left) / 2**20:.1f} MiB): " + ", ".join(n for n, _ in left)
            if left else "nothing left out"))
    if len(lines) > rows:  # the failures beyond the screen: run.json names them all
        lines = lines[:rows - 1] + [f"... {len(lines) - rows + 1} more lines: run.json has them all"]
    return "\n".join((x if len(x) <= columns else x[:columns - 3] + "...").rstrip() for x in lines)
