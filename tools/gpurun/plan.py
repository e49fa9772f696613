"""The budget and the plan: how many seconds are left, what each step, notebook and reference is
expected to take, and what fits.

Estimates come from evidence where there is any (:class:`Estimator`), in this order: the last run on
this GPU (a committed ``results/<gpu>/run.json`` or an earlier run on this machine), this GPU's
``references.json``, the newest committed run on another GPU (today the H100's of 2026-11-26,
``results/h100-80gb-hbm3/run.json``), and only then the registry's stated default (``Lesson.gpu_s``).
A figure from a run with fewer cores per notebook lane than this one is scaled up by the ratio
(never down: a notebook does not use all of its share, and an estimate too low gets a notebook cut,
where one too high only waits until the run finds the time).

The plan is made once (:func:`build`), printed first and kept in ``run.json``; while the run goes,
each step or notebook starts only if its estimate still fits what is left (so a slow step leaves out
what comes after it, and a fast one lets more in), and is stopped at the smaller of its cap and what
is left. Two orders (:data:`gpurun.steps.ORDERS`): ``default`` (the tests, every notebook in quick
mode, then references) and ``references`` (``GPU_PLAN=references``: the tests of ``cuda``, then the
references, those of the lessons whose claims have no GPU number of ours first).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gpurun import ROOT
from gpurun.report import Entry

#: Seconds kept back from the budget for the last run.json and archive.
RESERVE_S = 15.0
#: An item starts only if its estimate times this is left: estimates come from another run.
SAFETY = 1.2
#: The stand-in (a CPU, quick mode, a simulator for CUDA) against an H100's stated defaults, until
#: a stand-in run on the machine timed it: a stated guess for a 2-core machine shared with others.
STANDIN_FACTOR = 4.0
#: A cut item took longer than it ran: the next plan expects this much more.
CUT_FACTOR = 1.5


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


def read_runs(paths: list[Path]) -> list[dict]:
    """The ``run.json`` documents among ``paths`` that can be read (committed ``results/<gpu>/run.json``,
    earlier runs on this machine), newest first (by ``finished``): what the plan takes its estimates from."""
    docs = []
    for path in paths:
        try:
            docs.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(docs, key=lambda d: d.get("finished", ""), reverse=True)


def estimates(last: dict | None) -> dict[tuple[str, str], tuple[float, str]]:
    """``(step, name) -> (seconds, note)`` from a run (a step: ``(name, name)``): what finished took
    its seconds (passed, failed, or ``finished`` where the run could not tell which), what was cut
    more than it ran (:data:`CUT_FACTOR`, and the note says so)."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    if not last:
        return out
    for e in [*({**s, "step": s["name"]} for s in last.get("steps", [])), *last.get("items", [])]:
        if e.get("seconds") and e.get("status") in ("passed", "failed", "finished", "cut"):
            cut = e["status"] == "cut"
            out[(e["step"], e["name"])] = (round(e["seconds"] * (CUT_FACTOR if cut else 1), 1),
                                           f"cut at {e['seconds']:.0f} s there, x{CUT_FACTOR}" if cut else "")
    return out


def lanes_of(doc: dict, step: str) -> int:
    """How many items of ``step`` a run ran side by side (its ``lanes`` for the quick notebooks, else 1)."""
    return int(doc.get("lanes") or 1) if step == "quick" else 1


def scale(doc: dict, step: str, cores: int, lanes: int) -> float:
    """How much longer an item of ``step`` is expected to take here than in the run ``doc``: the
    ratio of the cores each lane had there to the cores each has here, never below 1.

    Example:
        >>> h100 = {"machine": {"cores": 16}, "lanes": 6}
        >>> scale(h100, "quick", cores=16, lanes=5), scale(h100, "quick", cores=8, lanes=4)
        (1.0, 1.33)
        >>> scale(h100, "references", cores=8, lanes=4), scale({}, "quick", cores=8, lanes=4)
        (2.0, 1.0)
    """
    if not (doc.get("machine") or {}).get("cores") or (step == "quick" and not doc.get("lanes")):
        return 1.0  # a run that does not say how it shared its cores: taken as it is
    theirs = doc["machine"]["cores"] / lanes_of(doc, step)
    ours = cores / (lanes if step == "quick" else 1)
    return round(max(1.0, theirs / ours), 2)


@dataclass
class Estimator:
    """Seconds expected for an item, and where the number comes from (see the module's docstring).

    Attributes:
        slug: this GPU's folder name. this: the runs on this GPU, newest first (an item takes its time
            from the newest that timed it: a run of a few lessons hides no other's). references: this
            GPU's ``references.json`` entries. other: ``(slug, doc)`` of the newest committed run on
            another GPU, or None (never for the stand-in, whose CPU is no GPU). cores, lanes: here.
        standin: the defaults are multiplied by :data:`STANDIN_FACTOR`.

    Example:
        >>> h100 = {"finished": "2026-11-26", "machine": {"cores": 16}, "lanes": 6, "steps": [],
        ...         "items": [{"step": "quick", "name": "08_prefetch", "status": "cut", "seconds": 200},
        ...                   {"step": "references", "name": "lesson08", "status": "passed", "seconds": 53}]}
        >>> est = Estimator("h200", [], {}, ("h100-80gb-hbm3", h100), cores=8, lanes=4)
        >>> est("quick", "08_prefetch", 30)
        (399.0, 'h100-80gb-hbm3 2026-11-26 (cut at 200 s there, x1.5) x1.33 (4 lanes on 8 cores, there 6 on 16)')
        >>> est("references", "lesson08", 55)
        (106.0, 'h100-80gb-hbm3 2026-11-26 x2.0 (1 lane on 8 cores, there 1 on 16)')
        >>> est("references", "lesson03", 120)
        (120.0, 'default (no GPU run timed it)')
    """

    slug: str
    this: list[dict]
    references: dict
    other: tuple[str, dict] | None
    cores: int
    lanes: int
    standin: bool = False

    def from_run(self, doc: dict, where: str, step: str, name: str) -> tuple[float, str] | None:
        known = estimates(doc).get((step, name))
        if known is None:
            return None
        seconds, note = known
        f = scale(doc, step, self.cores, self.lanes)
        basis = f"{where}{f' ({note})' if note else ''}"
        if f != 1.0:
            lanes, theirs = (self.lanes, lanes_of(doc, step)) if step == "quick" else (1, 1)
            basis += (f" x{f} ({lanes} lane{'s' if lanes > 1 else ''} on {self.cores} cores, "
                      f"there {theirs} on {(doc.get('machine') or {}).get('cores')})")
        return round(seconds * f, 1), basis

    def __call__(self, step: str, name: str, default: float) -> tuple[float, str]:
        for doc in self.this:
            if got := self.from_run(doc, f"last run on {self.slug}", step, name):
                return got
        if step == "references" and (self.references.get(name) or {}).get("seconds"):
            return float(self.references[name]["seconds"]), "references.json"
        if self.other is not None and not self.standin:
            slug, doc = self.other
            if got := self.from_run(doc, f"{slug} {str(doc.get('finished', ''))[:10]}", step, name):
                return got
        if self.standin:
            return round(default * STANDIN_FACTOR, 1), f"default {default:.0f} s x {STANDIN_FACTOR} (stand-in)"
        return float(default), "default (no GPU run timed it)"


def committed_runs(root: Path = ROOT / "results") -> list[tuple[str, dict]]:
    """``(slug, run.json)`` of every machine folder with a committed run, newest first."""
    out = []
    for path in sorted(root.glob("*/run.json")):
        doc = next(iter(read_runs([path])), None)
        if doc is not None:
            out.append((path.parent.name, doc))
    return sorted(out, key=lambda x: x[1].get("finished", ""), reverse=True)


def order_references(entries: list[Entry], made: dict, lacking: set[str] = frozenset()) -> list[Entry]:
    """The references of the lessons whose claims have no GPU number of ours (``lacking``: the
    evidence box's "not yet measured on a GPU") first; then stale before fresh; among each, the
    oldest reference first (none is oldest), then in the producers' order (the registry's)."""
    rank = {e.name: i for i, e in enumerate(entries)}
    return sorted(entries, key=lambda e: (e.name not in lacking, not e.stale, (made.get(e.name) or {}).get("when", ""),
                                          rank[e.name]))


def lacking_numbers() -> set[str]:
    """The producers whose references would give a lesson's GPU claim its first GPU number of ours
    (:func:`gpufeed.measure.evidence.lacks_gpu_number`; a claim that names another reference, e.g.
    ``ceilings``, names that producer)."""
    from gpufeed.measure import evidence
    from gpufeed.measure.lessons import LESSONS

    out = set()
    for x in LESSONS:
        for c in x.claims:
            stem = c.reference or x.owner
            if c.gpu and evidence.gpu_reference(stem) is None:
                out.add(stem)
    return out


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


def build(*, order: tuple[str, ...], selected: set[str], lessons: list[str], slug: str, standin: bool, cores: int,
          lanes: int, left: float, budget: float, earlier: list[Path], root: Path = ROOT,
          table: tuple | None = None) -> tuple[list[Entry], dict]:
    """The plan for ``left`` seconds: every selected step of ``order`` and its items with their
    estimates, in the order they run, each marked whether it fits (:func:`fit`). Returns it with
    this GPU's ``references.json`` entries (what the run adds to).

    Args:
        order: the steps' names in the order they run (:data:`gpurun.steps.ORDERS`). selected, lessons:
            what ``LESSONS`` asks for (:func:`gpurun.runner.selection`). slug: this GPU's folder name.
        standin: a CPU stands in (quick-mode references, no sanitizer, no other GPU's figures).
        cores, lanes: this machine's cores and its quick notebooks at a time. budget: the whole
            budget (the steps' shares). earlier: this machine's earlier runs' ``run.json``.
        table: the steps (default :data:`gpurun.steps.STEPS`).
    """
    from gpufeed.measure import references
    from gpufeed.measure.lessons import LESSONS
    from gpurun.steps import STEPS, producers

    committed = root / "results" / slug
    made = references.load(committed)
    this = read_runs([committed / "run.json", *earlier])
    other = next(((s, d) for s, d in committed_runs(root / "results") if s != slug), None)
    est = Estimator(slug, this, made, other, cores, lanes, standin)
    lacking = lacking_numbers()
    table = {s.name: s for s in (STEPS if table is None else table)}
    rows: list[Entry] = []
    for s in (table[n] for n in order):
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
                stale, why = references.staleness(made.get(p.name), p.source)
                if p.name in lacking:
                    why = f"no GPU number of ours for a claim of its lesson; {why}"
                # the stand-in runs references in quick mode: its default is the quick one
                default = p.lesson.gpu_s[0] if standin and p.lesson is not None else p.estimate_s
                refs.append(Entry(p.name, s.name, *est(s.name, p.name, default), stale=stale, why=why))
            rows += order_references(refs, made, lacking)
        elif s.kind in ("tests", "command") and (s.standin if standin else s.args) is not None:
            seconds, basis = est(s.name, s.name, s.estimate_s)
            if seconds > cap(s, budget):  # stopped at its cap at the latest
                basis += f"; {seconds:.0f} s, capped at {cap(s, budget):.0f} s"
            rows.append(Entry(s.name, s.name, min(seconds, cap(s, budget)), basis))
    return fit(rows, left, {"quick": lanes}), made


def cap(s, budget: float) -> float:
    """A step's limit at most: its own cap, and its share of the budget."""
    return min(s.cap, s.share * budget)


def describe(plan: list[Entry], seconds: float, header: str = "") -> str:
    """The plan as printed before the run: each step and item, its estimate and where it comes
    from, stale or fresh and why, and what does not fit."""
    lines = [f"plan for {seconds:.0f} s{header}:"]
    for e in plan:
        indent = "" if e.step == e.name else "  "
        verdict = "runs" if e.fits else "not run (budget)"
        why = f"; {e.why}" if e.why else ""
        lines.append(f"  {indent}{e.name:24} {e.estimate_s:6.0f} s  {verdict:16} ({e.basis}{why})")
    return "\n".join(lines)
