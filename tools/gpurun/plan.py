"""The budget and the plan: how many seconds are left, what each step and notebook is expected to
take (from the last run on that GPU, else a stated default), and what fits.

The plan is made once, printed first and kept in ``run.json``; while the run goes, each step or
notebook starts only if its estimate still fits what is left (so a slow step leaves out what comes
after it, and a fast one lets more in), and is stopped at the smaller of its cap and what is left.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from gpurun.report import Entry

#: Seconds kept back from the budget for the last run.json and archive.
RESERVE_S = 15.0
#: An item starts only if its estimate times this is left: estimates come from another run.
SAFETY = 1.2
#: The stand-in (a CPU, quick mode, a simulator for CUDA) against an H100's stated defaults, until
#: a stand-in run on the machine timed it: a stated guess for a 2-core machine shared with others.
STANDIN_FACTOR = 4.0


class Budget:
    """Seconds left of one budget counted from ``started`` (when ``make`` began, so that
    ``make node-env`` is inside it), less a reserve for the last report.

    Example:
        >>> clock = iter([130.0, 700.0]).__next__
        >>> b = Budget(540, reserve=10, started=100.0, clock=clock)
        >>> b.limit(cap=150, least=20)  # 400 s left: the cap
        (150, '')
        >>> b.limit(cap=150, least=20)  # none left
        (None, '0 s of the budget left, the step needs at least 20 s')
    """

    def __init__(self, seconds: float, reserve: float = RESERVE_S, started: float | None = None, clock=time.time):
        self.clock, self.seconds = clock, seconds
        self.start = clock() if started is None else started
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


def last_run(candidates: list[Path]) -> dict | None:
    """The newest ``run.json`` among ``candidates`` (committed ``results/<gpu>/run.json``, earlier
    runs on this machine): what the plan takes its estimates from."""
    docs = []
    for path in candidates:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        docs.append(doc)
    return max(docs, key=lambda d: d.get("finished", ""), default=None)


#: A cut item took longer than it ran: the next plan expects this much more.
CUT_FACTOR = 1.5


def estimates(last: dict | None) -> dict[tuple[str, str], float]:
    """``(step, name) -> seconds`` from the last run (a step: ``(name, name)``): what finished took
    its seconds (passed or failed), what was cut more than it ran (:data:`CUT_FACTOR`)."""
    out: dict[tuple[str, str], float] = {}
    if not last:
        return out
    for e in [*({**s, "step": s["name"]} for s in last.get("steps", [])), *last.get("items", [])]:
        if e.get("seconds") and e.get("status") in ("passed", "failed", "cut"):
            out[(e["step"], e["name"])] = round(e["seconds"] * (CUT_FACTOR if e["status"] == "cut" else 1), 1)
    return out


def estimate(step: str, name: str, default: float, known: dict, references: dict, factor: float,
             where: str) -> tuple[float, str]:
    """Seconds expected, and where the number comes from: the last run on this GPU, else the
    reference's own time (references.json), else the stated default (times ``factor`` on the stand-in).

    Example:
        >>> estimate("quick", "08_prefetch", 30, {("quick", "08_prefetch"): 21.5}, {}, 1.0, "h100")
        (21.5, 'last run on h100')
        >>> estimate("references", "lesson08", 55, {}, {"lesson08": {"seconds": 51.2}}, 1.0, "h100")
        (51.2, 'references.json')
        >>> estimate("references", "lesson03", 120, {}, {}, 4.0, "cpu")
        (480.0, 'default 120 s x 4.0 (stand-in)')
    """
    if (step, name) in known:
        return round(known[(step, name)], 1), f"last run on {where}"
    if references.get(name, {}).get("seconds"):
        return float(references[name]["seconds"]), "references.json"
    if factor != 1.0:
        return round(default * factor, 1), f"default {default:.0f} s x {factor} (stand-in)"
    return float(default), "default"


def order_references(entries: list[Entry], made: dict) -> list[Entry]:
    """Stale before fresh; among each, the oldest reference first (none is oldest), then in the
    producers' order (the registry's)."""
    rank = {e.name: i for i, e in enumerate(entries)}
    return sorted(entries, key=lambda e: (not e.stale, (made.get(e.name) or {}).get("when", ""), rank[e.name]))


def fit(entries: list[Entry], seconds: float, lanes: dict[str, int] | None = None) -> list[Entry]:
    """Marks what fits ``seconds``, in order: each entry after the ones before it, the entries of a
    step with several lanes (``lanes[step]``, e.g. notebooks three at a time) sharing them; what
    does not fit is ``not run (budget)`` in the plan, and later, smaller entries may still fit.

    Example:
        >>> rows = [Entry("cuda", "cuda", 60), Entry("a", "quick", 50), Entry("b", "quick", 50),
        ...         Entry("c", "quick", 50), Entry("lesson08", "references", 100), Entry("bench", "references", 20)]
        >>> [(e.name, e.fits) for e in fit(rows, 200, {"quick": 2})]
        [('cuda', True), ('a', True), ('b', True), ('c', True), ('lesson08', False), ('bench', True)]
    """
    lanes = lanes or {}
    t, out = 0.0, []
    i = 0
    while i < len(entries):
        step = entries[i].step
        group = []
        while i < len(entries) and entries[i].step == step:
            group.append(entries[i])
            i += 1
        ends = [t] * max(1, lanes.get(step, 1))
        for e in group:
            lane = min(range(len(ends)), key=ends.__getitem__)
            fits = ends[lane] + e.estimate_s <= seconds
            if fits:
                ends[lane] += e.estimate_s
            out.append(replace(e, fits=fits))
        t = max(ends)
    return out


def describe(plan: list[Entry], seconds: float) -> str:
    """The plan as printed before the run: each step and item, its estimate and where it comes
    from, stale or fresh and why, and what does not fit."""
    lines = [f"plan for {seconds:.0f} s (estimates: the last run on this GPU, else stated defaults):"]
    for e in plan:
        indent = "" if e.step == e.name else "  "
        verdict = "runs" if e.fits else "not run (budget)"
        why = f"; {e.why}" if e.why else ""
        lines.append(f"  {indent}{e.name:24} {e.estimate_s:6.0f} s  {verdict:16} ({e.basis}{why})")
    return "\n".join(lines)
