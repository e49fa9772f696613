"""What :func:`gpufeed.measure.diagnose` tells you to change, and the numbers that say so.

Each :class:`Finding` carries its evidence: the measured numbers it rests on (none of them None),
and the lessons that show the fix. A rule states its finding only when the report holds those
numbers: on a CPU-only machine no copy or sync was measured, so no copy or sync finding appears;
a loop that hardly waits for data gets one finding, that the loader is not the bottleneck, and
nothing about its loader. The thresholds are named below; each is a share of a measured time.

A DataLoader setting a finding suggests is re-timed first where it can be
(:mod:`gpufeed.measure.dataloaders`): the finding is made only when the copy with that setting
measured faster, and then says by how much; a setting that measured no gain, or that this run
cannot tell apart, is not suggested (the report's table says what was re-timed and what it gave).

Example:
    >>> from gpufeed.measure.report import Report
    >>> r = Report(items=32, batches=10, device="cpu", period_s=0.025, host_wait_s=0.020,
    ...            loader_rate=1600.0, model_rate=6400.0, loader_settings={"num_workers": 0}, cores=8)
    >>> [(f.key, f.lessons) for f in find(r)]
    [('workers', ('07',)), ('overlap', ('07', '08'))]
    >>> find(r)[0].evidence
    {'num_workers': 0, 'wait_fraction': 0.8, 'cores': 8}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from gpufeed.measure.units import format_time

#: The loop waits for data at least this share of its period: data bound.
DATA_BOUND = 0.5
#: ... at most this share: compute bound (the loader-side findings are not worth stating below it).
COMPUTE_BOUND = 0.2
#: The course's lessons, by number, as the findings name them.
LESSONS = {"00": "setup", "02": "profiling", "03": "dtypes", "04": "jpeg", "05": "memmap", "06": "batched",
           "07": "dataloader", "08": "prefetch", "09": "augment", "11": "together"}
#: A per-image part (decode, transform) worth naming: at least this share of the time ``dataset[i]`` takes.
PART = 0.25
#: Per-sample calls worth naming: at least this share of the loader's time per batch.
PER_SAMPLE = 0.5
#: A DataLoader's start (``iter(loader)``) worth naming: at least this share of an epoch.
START = 0.05
#: Overlap worth naming: the longer of the loader alone and the step at least this share shorter than the period.
OVERLAP_GAP = 0.1
#: A faster loader's most (:attr:`~gpufeed.measure.report.Report.best_speedup`) worth naming: at least this many times.
WORTH = 1.05


def efficiency_bounds(loader_rate: float, model_rate: float) -> tuple[float, float]:
    """The loader efficiency to expect from two rates alone (images/s): the loader timed alone and
    the model on resident batches. Returns ``(serial, overlapped)``:

    * serial, ``1 / (1 + model_rate / loader_rate)``: the loader's work adds to the model's (they
      share one processor and nothing overlaps: the CPU-only worst case);
    * overlapped, ``min(1, loader_rate / model_rate)``: the two run at the same time (the CPU
      loads while the GPU computes: the best case), and only a loader slower than the model costs.

    Lesson 11 reads them as ``gpufeed.course.lesson11.efficiency.bounds``.

    Example:
        >>> efficiency_bounds(loader_rate=1000.0, model_rate=100.0), efficiency_bounds(loader_rate=50.0, model_rate=100.0)
        ((0.909, 1.0), (0.333, 0.5))
    """
    return round(1 / (1 + model_rate / loader_rate), 3), round(min(1.0, loader_rate / model_rate), 3)


@dataclass(frozen=True)
class Finding:
    """One thing to change: ``key`` (e.g. ``"workers"``), the sentence, its measured ``evidence``
    (name -> number or setting), and the ``lessons`` that show the fix."""

    key: str
    text: str
    evidence: dict
    lessons: tuple[str, ...]

    def __post_init__(self):
        if not self.evidence or any(v is None for v in self.evidence.values()):
            raise ValueError(f"finding {self.key!r} without measured evidence: {self.evidence}")

    def __str__(self) -> str:
        seen = ", ".join(f"{k}={_shown(v)}" for k, v in self.evidence.items())
        where = ", ".join(f"{n} ({LESSONS[n]})" for n in self.lessons)
        return f"- {self.text} [measured: {seen}]" + (f" Lessons {where}." if where else "")


def _shown(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def say_all(findings: list[Finding]) -> str:
    """The findings, one line each."""
    return "\n".join(str(f) for f in findings) if findings else "- Nothing to change that was measured."


def _mb(copies) -> float:
    return round(sum(c.nbytes for c in copies) / 1e6, 3)


def find(r) -> list[Finding]:
    """The findings a :class:`~gpufeed.measure.report.Report`'s numbers support, loader side first, then
    copies and syncs; a suggested setting that was re-timed only with its measured gain."""
    fine = r.wait_fraction <= COMPUTE_BOUND or r.best_speedup < WORTH  # little wait, or none a loader could take
    out = [] if not fine else [Finding(
        "loader-fine", f"The loader is not the bottleneck: your loop waits for data {r.wait_fraction:.0%} of its "
        "period, and a loader that never kept it waiting would make it " + (
            f"at most {r.best_speedup:.2f}x faster" if r.best_speedup >= WORTH else "no faster")
        + ("" if r.wait_fraction <= COMPUTE_BOUND else " (the step alone takes about the whole period)")
        + "; look at the step (the model, its precision, torch.compile).",
        {"wait_fraction": round(r.wait_fraction, 3), "best_speedup": round(r.best_speedup, 3)}, ("11",))]
    if not out:
        side = _loader_side(r)
        evidence = {"wait_fraction": round(r.wait_fraction, 3)} | ({} if r.loader_rate is None else {
            "loader_images_per_s": round(r.loader_rate, 1), "model_images_per_s": round(r.model_rate, 1)})
        out += side or [Finding(
            "loader-slow", f"The loader keeps your loop waiting {r.wait_fraction:.0%} of its period, and nothing "
            "measured here says which of its stages is slow: profile them (record_function around read, decode, "
            "augment and collate) and take the slowest first.", evidence, ("02",))]
    out += _settings(r) + _copies(r) + _syncs(r)
    return _measured(out, r.retimed)


def _measured(out: list[Finding], retimed: list) -> list[Finding]:
    """Each finding whose setting was re-timed: kept, with the measured gain, only if there was one."""
    by = {t.finding: t for t in retimed}
    kept = []
    for f in out:
        t = by.get(f.key)
        if t is None:
            kept.append(f)
        elif t.note:  # not re-timed: the suggestion stands, unmeasured, and says so
            kept.append(replace(f, text=f"{f.text} (Not re-timed: {t.note}.)"))
        elif t.gain:
            kept.append(replace(f, text=f"{f.text} Re-timed {t.words()}.",
                                evidence=f.evidence | {"retimed_ratio": round(t.verdict.ratio, 3)}))
    return kept


def _loader_side(r) -> list[Finding]:
    out, s, d = [], r.loader_settings, r.dataset_ms
    wait = round(r.wait_fraction, 3)
    if s.get("num_workers") == 0:
        out.append(Finding("workers", f"DataLoader(num_workers=0) makes every batch in the training process, and "
                           f"your loop waits for it {wait:.0%} of its period: workers (up to one per core, "
                           f"{r.cores} here) make batches in parallel, while the step runs.",
                           {"num_workers": 0, "wait_fraction": wait, "cores": r.cores}, ("07",)))
    if r.loader_rate is None:
        return out
    if "sample" in d and not d.get("getitems") and s.get("batch_size"):
        loader_ms = r.items / r.loader_rate * 1e3 * max(1, s.get("num_workers") or 0)  # worker-ms per batch
        share = round(d["sample"] * s["batch_size"] / loader_ms, 3)
        if share >= PER_SAMPLE:
            out.append(Finding("per-sample", f"Your dataset is read one image at a time: {s['batch_size']} calls of "
                               f"__getitem__ a batch at {d['sample']:.2f} ms each, {min(share, 1.0):.0%} of the "
                               "loader's work; a dataset that fetches a whole batch at once pays the per-call cost "
                               "once.", {"sample_ms": round(d["sample"], 3), "share_of_loader": share}, ("06",)))
    for part, text, lessons in (("decode", "Every epoch decodes every image again", ("04", "05")),
                                ("transform", "The per-image CPU transforms (augmentation) are heavy", ("09",))):
        if part in d and d["sample"] > 0 and d[part] / d["sample"] >= PART:
            share = round(d[part] / d["sample"], 3)
            out.append(Finding(part, f"{text}: {d[part]:.2f} ms an image, {min(share, 1.0):.0%} of the "
                               f"{d['sample']:.2f} ms that dataset[i] takes.",
                               {f"{part}_ms": round(d[part], 3), "sample_ms": round(d["sample"], 3)}, lessons))
    loader_s, step_s = r.items / r.loader_rate, r.items / r.model_rate  # the two what-ifs, per batch
    overlapped_s = max(loader_s, step_s)
    if overlapped_s <= (1 - OVERLAP_GAP) * r.period_s:
        out.append(Finding("overlap", f"Loading does not overlap the step: a batch takes {format_time(r.period_s)}, "
                           f"the loader alone {format_time(loader_s)} and the step alone {format_time(step_s)}; with "
                           "the loader working while the step runs it would take the longer of the two, at most "
                           f"{r.period_s / overlapped_s:.2f}x faster. Prefetch the next batches on a thread or in "
                           "workers" + (f" (prefetch_factor={s['prefetch_factor']})" if s.get("prefetch_factor")
                                        else "") + ".",
                           {"period_ms": round(r.period_s * 1e3, 3), "loader_ms": round(loader_s * 1e3, 3),
                            "step_ms": round(step_s * 1e3, 3)}, ("07", "08")))
    return out


def _settings(r) -> list[Finding]:
    out, s = [], r.loader_settings
    workers = s.get("num_workers") or 0
    if workers > r.cores:
        out.append(Finding("too-many-workers", f"DataLoader(num_workers={workers}) on {r.cores} cores: the workers "
                           "take turns on the cores (and with the step's threads), each switch a cost.",
                           {"num_workers": workers, "cores": r.cores}, ("07",)))
    if workers and not s.get("persistent_workers") and r.start_s is not None and s.get("length"):
        epoch_s = s["length"] * r.period_s
        if r.start_s >= START * epoch_s:
            out.append(Finding("persistent-workers", f"Starting the workers took {format_time(r.start_s)}, "
                               f"{r.start_s / epoch_s:.0%} of an epoch of {s['length']} batches, and without "
                               "persistent_workers=True it is paid again every epoch.",
                               {"start_s": round(r.start_s, 4), "epoch_s": round(epoch_s, 4)}, ("07",)))
    return out


def _copies(r) -> list[Finding]:
    out, n = [], max(1, r.probed)
    copy_ms = {} if r.copy_s is None else {"copy_ms_per_step": round(r.copy_s * 1e3, 3)}
    pageable = [c for c in r.copies if not c.pinned]
    if pageable:
        pin = "" if "pin_memory" not in r.loader_settings else f" (DataLoader pin_memory={r.loader_settings['pin_memory']})"
        out.append(Finding("pageable", f"{_mb(pageable) / n:.2f} MB a step go to the GPU from pageable memory{pin}: "
                           "the host stages them through a pinned buffer and waits; copy from pinned memory "
                           "with non_blocking=True.",
                           {"pageable_mb_per_step": round(_mb(pageable) / n, 3), **copy_ms}, ("00", "07")))
    blocking = [c for c in r.copies if c.pinned and not c.non_blocking]
    if blocking:
        out.append(Finding("blocking-copy", f"{len(blocking) / n:g} copies a step go to the GPU from pinned memory "
                           "without non_blocking=True: the host waits for each (and for the work queued before "
                           "it); pass non_blocking=True.", {"blocking_copies_per_step": len(blocking) / n}, ("07", "08")))
    inline = [c for c in r.copies if c.default_stream]
    if inline:
        where = sorted({c.where for c in inline})
        out.append(Finding("copy-in-line", f"The {' and the '.join(where)} copies {_mb(inline) / n:.2f} MB a step to "
                           "the GPU on the stream the step computes on: the copy waits for the last step's "
                           "compute and the next step waits for it; copy the next batch on a side stream while "
                           "this one trains.", {"copied_mb_per_step": round(_mb(inline) / n, 3), **copy_ms}, ("08",)))
    floats = [c for c in r.copies if c.dtype.startswith(("float", "double")) and len(c.shape) == 4]
    if floats:
        out.append(Finding("float-on-the-wire", f"Images cross to the GPU as {floats[0].dtype}: "
                           f"{_mb(floats) / n:.2f} MB a step, where uint8 would carry the same pixels in "
                           f"{_mb(floats) / n / 4:.2f} MB (4x "
                           "fewer bytes to collate, pin and copy); convert and normalise on the device.",
                           {"float_mb_per_step": round(_mb(floats) / n, 3), "dtype": floats[0].dtype}, ("03", "09")))
    return out


#: What to do about a sync, by its kind (:mod:`gpufeed.measure.probe`); ops of data-dependent size share one.
ADVICE = {".item()": "read the loss every few steps, or after the next step is queued",
          "copy to the host": "keep results on the device, or copy them with non_blocking=True into pinned memory "
                              "and read them after an event",
          "outside an op": "a stream's synchronize() in the loop waits for all its work: wait on an event recorded "
                           "where the result is needed, or not at all",
          "op": "an op whose output size depends on the data ({ops}) waits for the result: give it a size (torch.where, "
                "a mask multiplied in) or move it out of the step"}


def _syncs(r) -> list[Finding]:
    total = sum(r.syncs.values()) if r.syncs else 0
    if total < 1:
        return []
    ops = [k for k in r.syncs if k not in ADVICE]
    advice = [ADVICE[k] for k in r.syncs if k in ADVICE] + ([ADVICE["op"].format(ops=", ".join(ops))] if ops else [])
    kinds = ", ".join(f"{v:g} {k}" for k, v in r.syncs.items())
    site = Counter(r.sync_sites).most_common(1)
    where = f" (the most at {site[0][0]})" if site else ""
    waited = {} if r.sync_s is None else {"sync_ms_per_step": round(r.sync_s * 1e3, 3)}
    return [Finding("sync", f"The loop makes the host wait for the GPU {total:g} times a step ({kinds}){where}: while "
                    "it waits it cannot queue the next step's work or copy, so host and GPU take turns; "
                    + "; ".join(advice) + ".", {"syncs_per_step": total, **r.syncs, **waited}, ("02", "08"))]
