"""What :func:`gpufeed.measure.diagnose` and :func:`gpufeed.measure.watch` report: the numbers, the table,
the sentences, the bar.

**Whose clock.** On a GPU the loop's period and its wait come from the device's clock
(:class:`gpufeed.measure.probe.Window`): ``wait_s`` is the time the device sat idle while the host
waited for the next batch, and the host's own time inside ``next()`` (``host_wait_s``) is shown
beside it. Without a device clock the host's time inside ``next()`` is all there is, and the bound
reads it. What a faster loader could take away is capped by the what-ifs on either clock: the loop
cannot run faster than the step on a batch already on the device, so no more than ``period - that
step`` of the wait is the loader's (:attr:`Report.removable_s`, :attr:`Report.best_speedup`); where
the cap takes most of a host's wait away, the sentences say that a step which returns before its
device work ends waits in ``next()`` too, and that a device clock tells the two apart. A step alone
that measured slower than the whole loop (the verdict method says so) ran on a busier machine: the
cap still holds (a gain is never claimed past what the what-ifs allow), and the sentences say the
two measurements disagree.

**Verdicts.** The comparisons the sentences word (the loader alone against the step alone, your
loop against the step alone) go through :func:`gpufeed.measure.verdict.compare`, on each
window's time split into :data:`~gpufeed.measure.probe.PARTS` samples.

Example:
    >>> r = Report(items=32, batches=10, device="cpu", period_s=0.025, host_wait_s=0.020,
    ...            loader_rate=1600.0, model_rate=6400.0)
    >>> r.bound, round(r.wait_fraction, 2), round(r.best_speedup, 2)  # the step alone: 5 ms of the 25
    ('data', 0.8, 5.0)
    >>> r = Report(items=32, batches=10, device="cpu", period_s=0.025, host_wait_s=0.020, loader_rate=1600.0,
    ...            model_rate=1280.0)  # the step alone takes the whole period: none of the wait is the loader's
    >>> r.bound, r.removable_s, r.best_speedup
    ('data', 0.0, 1.0)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpufeed.measure.findings import COMPUTE_BOUND, DATA_BOUND, WORTH, efficiency_bounds, say_all
from gpufeed.measure.units import format_rate, format_time
from gpufeed.measure.verdict import FASTER, compare


def _verdict(a: list, b: list):
    """A on B (seconds per batch, :func:`gpufeed.measure.verdict.compare`); not measured where a side is
    missing or holds a zero (two device marks that completed together)."""
    if not a or not b or min(a + b) <= 0:
        return compare(None, None)
    return compare(a, b)


#: The bound in words.
BOUND_WORDS = {"data": "data bound", "compute": "compute bound", "balanced": "between data and compute bound"}


@dataclass
class Report:
    """What was measured (seconds per batch unless named otherwise) and found.

    Attributes:
        items: images per batch (a TensorDict's batch size, else the first dimension of the first tensor).
        batches: timed batches of your loop.
        device: where the step computes (``"cuda:0"`` when the loop copies there, else the batch's device).
        period_s: your loop's time per batch (on the device's clock where there is one).
        host_wait_s: the host's time inside ``next()`` per batch.
        device_wait_s: the device idle while the host waited (its clock's marks); None without one.
        loader_rate, model_rate: the two what-ifs, images/s: the loader alone; the step on a resident
            batch. None: not measured (:meth:`gpufeed.measure.watch.Watch.what_ifs` measures them).
        loop_s, loader_s, model_s: the three windows' seconds per batch, as samples for the verdicts.
        resident: the model rate was measured on a batch kept on the device (False: as yielded;
            ``resident_note`` says why).
        copies: the host-to-device copies of the ``probed`` steps (:class:`gpufeed.measure.probe.Copy`).
        syncs: host syncs per probed step by kind (``".item()"``, ``"copy to the host"``,
            ``"nonzero()"``, ``"outside an op"``); None without CUDA. Blocking copies are copies.
        sync_sites: syncs per step by the line of code that made them.
        copy_s, compute_s, sync_s, gpu_idle: from a profiler trace on a real GPU (None elsewhere):
            host-to-device copy time on the device, kernel time, the host inside ``*Synchronize`` calls,
            and the share of the profiled steps in which neither a kernel nor a copy ran.
        start_s: the time ``iter(loader)`` took (worker start-up, for a DataLoader).
        loader_settings, dataset_ms: a DataLoader's settings and its dataset's per-image costs.
        retimed: suggested settings re-timed (:class:`gpufeed.measure.dataloaders.Retimed`).
        ranks: under DDP, on rank 0: each rank's ``rank``, ``rate``, ``wait_s`` and ``wait_fraction``.
        findings: what to change (:class:`gpufeed.measure.findings.Finding`), each with its evidence.
    """

    items: int
    batches: int
    device: str
    period_s: float
    host_wait_s: float
    device_wait_s: float | None = None
    loader_rate: float | None = None
    model_rate: float | None = None
    loop_s: list = field(default_factory=list)
    loader_s: list = field(default_factory=list)
    model_s: list = field(default_factory=list)
    resident: bool = True
    resident_note: str = ""
    probed: int = 1
    copies: list = field(default_factory=list)
    syncs: dict | None = None
    sync_sites: dict = field(default_factory=dict)
    copy_s: float | None = None
    compute_s: float | None = None
    sync_s: float | None = None
    gpu_idle: float | None = None
    start_s: float | None = None
    loader_settings: dict = field(default_factory=dict)
    dataset_ms: dict = field(default_factory=dict)
    cores: int = 1
    retimed: list = field(default_factory=list)
    ranks: list = field(default_factory=list)
    findings: list = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """Whether the step alone measured slower than your whole loop, which holds it
        (:func:`~gpufeed.measure.verdict.compare` on the two windows): the machine was busier for one."""
        return bool(self.model_rate) and _verdict(self.loop_s, self.model_s).kind == FASTER

    @property
    def clock(self) -> str:
        """``"device"`` or ``"host"``: whose clock ``wait_s`` is."""
        return "device" if self.device_wait_s is not None else "host"

    @property
    def step_s(self) -> float:
        """The period less the host's wait: the step and the rest of the loop, per batch."""
        return max(0.0, self.period_s - self.host_wait_s)

    @property
    def wait_s(self) -> float:
        """The wait for data per batch: the device idle while the host waited, on a device clock; else the
        host's time inside ``next()``."""
        return self.device_wait_s if self.device_wait_s is not None else self.host_wait_s

    @property
    def removable_s(self) -> float:
        """The most of :attr:`wait_s` a faster loader could take away, per batch: no more than the period
        less the step alone on a resident batch, where that was measured."""
        if not self.model_rate:
            return self.wait_s
        return max(0.0, min(self.wait_s, self.period_s - self.items / self.model_rate))

    @property
    def wait_fraction(self) -> float:
        """The share of the period spent waiting for the next batch (:attr:`wait_s`)."""
        return self.wait_s / self.period_s

    @property
    def bound(self) -> str:
        """``"data"`` (waits at least :data:`~gpufeed.measure.findings.DATA_BOUND` of the period),
        ``"compute"`` (at most :data:`~gpufeed.measure.findings.COMPUTE_BOUND`) or ``"balanced"``."""
        return "data" if self.wait_fraction >= DATA_BOUND else "compute" if self.wait_fraction <= COMPUTE_BOUND \
            else "balanced"

    @property
    def rate(self) -> float:
        """Your loop's images/s."""
        return self.items / self.period_s

    @property
    def efficiency(self) -> float | None:
        """Loader efficiency: your loop's rate over the step's on a resident batch (1.0: never waits)."""
        return self.rate / self.model_rate if self.model_rate else None

    @property
    def best_speedup(self) -> float:
        """The most any faster loader could speed your loop up: to the period without its wait, and never
        past the step alone on a resident batch (the what-ifs' cap, where they were measured)."""
        return self.period_s / max(self.period_s - self.removable_s, 1e-12)

    def table(self) -> str:
        """The period, split, the device's view, the syncs and copies, the what-ifs, as a short text table."""
        p, rows = self.period_s, []
        rows += [(f"your loop, per batch ({'the device' if self.clock == 'device' else 'the host'}'s clock)",
                  format_time(p), format_rate(self.rate, "images/s")),
                 ("  waiting for the next batch (the host, in next())", format_time(self.host_wait_s), f"{self.host_wait_s / p:.0%}")]
        if self.device_wait_s is not None:
            rows.append(("  the device idle meanwhile (waiting for data)", format_time(self.wait_s), f"{self.wait_fraction:.0%}"))
        if self.removable_s < self.wait_s and self.wait_fraction > COMPUTE_BOUND:  # the cap takes some of a real wait
            rows.append(("  of it, the most a faster loader could take", format_time(self.removable_s),
                         f"{self.removable_s / p:.0%}"))
        rows.append(("  the step and the rest of the loop", format_time(self.step_s), f"{self.step_s / p:.0%}"))
        if self.gpu_idle is not None:
            rows += [("the device, profiled steps: computing", format_time(self.compute_s), ""),
                     ("  copying to the device", format_time(self.copy_s), ""),
                     ("  idle (no kernel, no copy)", f"{self.gpu_idle:.0%}", ""),
                     ("  the host inside *Synchronize calls", format_time(self.sync_s), "")]
        if self.syncs is not None:
            kinds = ", ".join(f"{v:g} {k}" for k, v in self.syncs.items())
            rows.append(("host syncs per step", f"{sum(self.syncs.values()):g}", kinds))
        if self.copies:
            blocking = sum(not c.non_blocking for c in self.copies) / self.probed
            rows.append(("copies to the device per step", f"{len(self.copies) / self.probed:g}",
                         f"{sum(c.nbytes for c in self.copies) / self.probed / 1e6:.2f} MB, {blocking:g} blocking"))
        if self.loader_rate is not None:
            rows += [("what-if: the loader alone", format_rate(self.loader_rate, "images/s"), ""),
                     ("what-if: the step on one batch " + (f"kept on {self.device}" if self.resident else "as yielded"),
                      format_rate(self.model_rate, "images/s"), ""),
                     ("loader efficiency", f"{self.efficiency:.2f}", BOUND_WORDS[self.bound]),
                     ("  from the two what-ifs alone", "{:.2f} to {:.2f}".format(*efficiency_bounds(
                         self.loader_rate, self.model_rate)), "nothing overlapping, to all of it")]
        else:
            rows.append(("bound", BOUND_WORDS[self.bound], "what-ifs not measured"))
        rows += [(f"re-timed: {r.setting}", "", r.words()) for r in self.retimed]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{a.ljust(width)}  {b:>14}  {c}".rstrip() for a, b, c in rows)

    def sentences(self) -> str:
        """What the numbers mean, in a few sentences; comparisons through the verdict method."""
        head = (f"Your loop trains {format_rate(self.rate, 'images/s')} and waits for the next batch "
                f"{self.wait_fraction:.0%} of the time: {BOUND_WORDS[self.bound]}")
        if self.clock == "device":
            head += f" (the device's clock; the host spent {self.host_wait_s / self.period_s:.0%} of it inside next())"
        if self.wait_fraction > COMPUTE_BOUND and self.best_speedup < WORTH:  # findings: "loader-fine"
            head += (f"; but the step alone on a batch already there takes {format_time(self.items / self.model_rate)} "
                     f"of the {format_time(self.period_s)}, so at most {format_time(self.removable_s)} of that wait is "
                     "the loader's: a step that returns before its device work ends waits in next() too"
                     + ("" if self.clock == "device" else ", and only a device clock (events=) tells the two apart"))
        head += ". "
        if self.loader_rate is None:
            return head + ("The what-ifs were not measured (feed.what_ifs(step) measures the loader alone and the step "
                           "on a batch kept on the device)." + self._ranks() + "\n" + say_all(self.findings))
        v = _verdict(self.loader_s, self.model_s)
        alone = (f"The loader alone makes {format_rate(self.loader_rate, 'images/s')} and the step on a batch already "
                 f"there {format_rate(self.model_rate, 'images/s')}: the loader is {v.words('the step')}; ")
        gain = (f"a loader that never kept it waiting would make your loop at most {self.best_speedup:.2f}x faster."
                if self.best_speedup >= WORTH else "a faster loader would not speed your loop up.")
        noise = (" (The step alone measured slower than your whole loop: the machine was busier for one of them, "
                 "and the two disagree; take more batches.)" if self.busy else "")
        refused = (f" (The step refused a batch kept on {self.device}: {self.resident_note}; the step alone was timed "
                   "on batches as the loader yields them.)" if not self.resident else "")
        return head + alone + gain + noise + refused + self._ranks() + "\n" + say_all(self.findings)

    def _ranks(self) -> str:
        if len(self.ranks) < 2:
            return ""
        slow = max(self.ranks, key=lambda r: r["wait_s"])
        return (f" Of {len(self.ranks)} ranks, rank {slow['rank']} waits longest for its batches: "
                f"{format_time(slow['wait_s'])} a batch, {slow['wait_fraction']:.0%} of its period (the others: "
                + ", ".join(f"rank {r['rank']} {r['wait_fraction']:.0%}" for r in self.ranks if r is not slow)
                + "); under DDP the other ranks wait for it inside the step.")

    def __str__(self) -> str:
        return self.table() + "\n\n" + self.sentences()

    def plot(self, ax=None, title: str = ""):
        """Your loop's period as one stacked bar (milliseconds per batch): waiting for data, the rest of the
        host's time in ``next()`` (the device busy meanwhile), the step. Returns ``(figure, axes)``."""
        import matplotlib.pyplot as plt

        from gpufeed.measure.plotting import COLORS

        parts = [("waiting for the next batch", self.wait_s, COLORS["read"]),
                 ("inside next(), the device busy", max(0.0, self.host_wait_s - self.wait_s), COLORS["other"]),
                 ("the step and the rest", self.step_s, COLORS["compute"])]
        fig, ax = plt.subplots(figsize=(7.0, 1.6)) if ax is None else (ax.figure, ax)
        left = 0.0
        for name, s, color in parts:
            if s > 0:
                ax.barh(0, s * 1e3, left=left, color=color, label=f"{name} ({s / self.period_s:.0%})")
                left += s * 1e3
        ax.set_yticks([])
        ax.set_xlabel("ms per batch")
        eff = f", loader efficiency {self.efficiency:.2f}" if self.efficiency is not None else ""
        ax.set_title(title or f"your loop: {self.bound} bound{eff}")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize=8, frameon=False)
        return fig, ax

    def to_dict(self) -> dict:
        """JSON-ready: the measurements, the derived numbers and the findings."""
        d = asdict(self)
        d.update(wait_s=self.wait_s, removable_s=self.removable_s, wait_fraction=self.wait_fraction, bound=self.bound,
                 rate=self.rate,
                 efficiency=self.efficiency, best_speedup=self.best_speedup, clock=self.clock)
        return d
