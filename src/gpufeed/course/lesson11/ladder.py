"""The ladder of ``notebooks/11_together.ipynb``: the course's techniques added one at a time.

Each rung is a loader that yields what every pipeline of :mod:`gpufeed.measure.pipelines` yields,
``(float32 [B, 3, crop, crop] normalised, int64 [B])`` on the device, with the same augmentation
(resize the short side, random crop, random flip); each adds one technique to the rung before:

========================  =======  ===============================================================
rung                      lesson   what changes
========================  =======  ===============================================================
naive                     01       ImageFolder, Pillow, per-sample float transforms, no workers
\\+ workers               07       one DataLoader worker process per core
\\+ uint8 on the wire     03, 04   torchvision decode, uint8 until the device, normalise there
\\+ decode once           05       the memmap read per sample in the workers: nothing to decode
\\+ batched fetching      06       FastLoader: one gather per batch, crops cut on the host
\\+ prefetching           08       the next batch made on a thread (CUDA: copied on a side stream)
\\+ batched augmentation  09       crop, flip, normalise the whole batch on the device: the course
========================  =======  ===============================================================

DALI (lesson 10) is a side rung where it is installed. The pieces that DataLoader workers pickle
(:func:`memmap_samples`, with the library's :class:`~gpufeed.data.transforms.CropFlip`) live here;
the rest comes from :mod:`gpufeed.measure.pipelines`.
:func:`rows`, :func:`read` and :func:`plot` turn the rungs' measurements into the ladder's records, the
sentences that read them (each step a verdict of :func:`step_verdicts`) and the chart; :class:`Busy`
counts the cores each rung keeps busy. Loader efficiency is in :mod:`gpufeed.course.lesson11.efficiency`.

Example:
    >>> [r.label for r in LADDER][:3]
    ['naive', '+ workers', '+ uint8 on the wire']
    >>> image = torch.arange(3 * 4 * 5, dtype=torch.uint8).view(3, 4, 5)
    >>> CropFlip(3, seed=0)(image).shape
    torch.Size([3, 3, 3])
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from gpufeed.course.lesson11.reading import against
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, CropFlip, crop_flip, draw_crops
from gpufeed.measure import pipelines
from gpufeed.measure.pipelines import Data, Workload
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, NOT_MEASURED, SAME, SLOWER, Verdict, advice


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: its key, its label in charts, the lesson that teaches it, and the
    likely cause when it gains nothing on a machine like this one (``{cores}`` is filled in; the
    page words it as a cause not measured there)."""

    key: str
    label: str
    lesson: str
    slower_because: str


LADDER = (
    Rung("naive", "naive", "01", "it is the baseline"),
    Rung("workers", "+ workers", "07", "{cores} worker processes share the {cores} cores with the main process, "
         "which collates and copies, and each batch crosses between processes"),
    Rung("uint8", "+ uint8 on the wire", "03, 04", "torchvision's decode and tensor resize cost about what Pillow's "
         "do, and the bytes saved matter only where a bus is the bottleneck"),
    Rung("memmap", "+ decode once", "05", "the per-sample Python of the DataLoader, not the decoding, "
         "was what the workers spent their time on"),
    Rung("batched", "+ batched fetching", "06", "the FastLoader runs in one thread, while the DataLoader "
         "before it had {cores} worker processes"),
    Rung("prefetch", "+ prefetching", "08", "a loader timed alone has no model step to overlap with, so the "
         "thread only adds a hand-off (section 5 times prefetching in training)"),
    Rung("course", "+ batched augmentation", "09", "the per-sample crops were already cheap next to the "
         "gather; batching them pays most where a GPU does the work"),
)
DALI = Rung("dali", "DALI (side rung)", "10", "DALI decodes every JPEG in every epoch, where the course "
            "pipeline reads them decoded from the memmap")
RUNGS = {r.key: r for r in (*LADDER, DALI)}


def memmap_samples(data: Data, w: Workload):
    """The memmap dataset read one sample at a time, each cropped and flipped by :class:`CropFlip`."""
    from gpufeed.data.arrays import MemmapDataset

    return MemmapDataset(data.memmap, CropFlip(w.crop), batched=False)  # the DataLoader collates samples


class HostCrops:
    """The memmap fetched a batch at a time (:class:`~gpufeed.data.loader.FastLoader`, one gather per
    batch), each batch cropped and flipped on the host in ``uint8``: yields ``(uint8 [B, 3, crop,
    crop], int64 [B])`` on the CPU (pinned where ``device`` is CUDA, so the copy can be asynchronous).

    Each ``iter()`` is one epoch. The order is the FastLoader's (``self.loader.indices(epoch)``).
    """

    def __init__(self, data: Data, w: Workload, device, seed: int = 0):
        from gpufeed.data.loader import FastLoader
        from gpufeed.data.memmap import load_memmap

        # 2 reused gather buffers (no page fault per 4 KiB): each batch is cropped out of its buffer at once
        self.loader = FastLoader(load_memmap(data.memmap), w.batch, seed=seed, drop_last=True, reuse_buffers=2)
        self.crop, self.pin = w.crop, torch.device(device).type == "cuda"
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for b in self.loader:
            n, c = b.images.shape[:2]
            corners, flips = draw_crops(n, tuple(b.images.shape[-2:]), self.crop, self.generator)
            # a new batch each time: the consumer may hold it (and, on CUDA, copy from it) while we go on
            out = torch.empty((n, c, self.crop, self.crop), dtype=torch.uint8, pin_memory=self.pin)
            yield crop_flip(b.images, corners, flips, self.crop, out=out), b.targets.clone()


def prefetched(batches, device):
    """``uint8`` host batches made one ahead: on a thread (converted and normalised there) or, on
    CUDA, copied, converted and normalised on a side stream (lesson 08's :func:`~gpufeed.data.prefetch.prefetch`)."""
    from gpufeed.data.prefetch import prefetch

    return prefetch(batches, device, torch.float32, IMAGENET_MEAN, IMAGENET_STD)


def rungs(data: Data, w: Workload, device, *, workers: int, dali: bool = False) -> dict[str, Callable[[], Iterator]]:
    """``key -> epoch()`` for every rung in order (and ``"dali"`` last with ``dali=True``): each
    call starts one pass and returns an iterator of device batches. Loaders with workers keep them
    between passes (persistent workers), so a pass costs what an epoch of training costs."""
    naive_workers = pipelines.naive_loader(data, w, workers)
    tuned = pipelines.tuned_loader(data, w, device, workers)
    per_sample = pipelines.tuned_loader(data, w, device, workers, dataset=memmap_samples(data, w))
    host_crops = HostCrops(data, w, device)
    course = pipelines.Course(data, w, device)
    out = {"naive": lambda: pipelines.naive(data, w, device),
           "workers": lambda: pipelines.naive(data, w, device, loader=naive_workers),
           "uint8": lambda: pipelines.tuned(tuned, device),
           "memmap": lambda: pipelines.tuned(per_sample, device),
           "batched": lambda: pipelines.tuned(host_crops, device),
           "prefetch": lambda: iter(prefetched(host_crops, device)),
           "course": lambda: iter(course)}
    if dali:
        out["dali"] = _lazy_dali(data, w, device, workers)
    return out


def _lazy_dali(data: Data, w: Workload, device, threads: int) -> Callable[[], Iterator]:
    """DALI's epoch, its pipeline built at the first call: after the DataLoaders timed before it
    have forked their workers (a fork while DALI's C++ threads may hold a lock can hang the child)."""
    from gpufeed.measure.suite import dali_source

    made: list[Callable[[], Iterator]] = []

    def epoch() -> Iterator:
        if not made:
            made.append(dali_source(data, w, device, threads))
        return made[0]()

    return epoch


def epoch_pass(epoch: Callable[[], Iterator]) -> int:
    """Runs one whole pass of ``epoch()`` and returns the images seen. A whole pass, not a few
    batches: a DataLoader left mid-epoch goes on prefetching in its workers while the next case is
    timed, stealing its cores and starting its own next turn with batches already made."""
    from gpufeed.measure.suite import consume

    return consume(epoch(), sys.maxsize)


def first_batches(epoch: Callable[[], Iterator], batches: int) -> Callable[[], Iterator]:
    """``epoch`` cut to the first ``batches`` batches of each pass: for a loader **without worker
    processes** only (lesson 11's naive rung), which leaves nothing running when it is stopped
    (:func:`epoch_pass` says why a DataLoader with workers must run whole passes)."""
    import itertools

    return lambda: itertools.islice(epoch(), batches)


def batches_within(epoch: Callable[[], Iterator], seconds: float, total: int, probe: int = 2) -> int:
    """How many batches of a pass of ``epoch()`` fit in about ``seconds`` (at least 1, at most
    ``total``), from the time its first ``probe`` batches take, start-up included (so the count
    errs short). One pass is started and stopped: for loaders without worker processes only.

    Example:
        >>> import time
        >>> def slow():
        ...     for _ in range(100):
        ...         time.sleep(0.01)
        ...         yield torch.zeros(1), torch.zeros(1)
        >>> 5 <= batches_within(slow, 0.1, total=100) <= 10
        True
    """
    import time

    from gpufeed.measure.suite import consume

    start = time.perf_counter()
    consume(epoch(), probe)
    per_batch = (time.perf_counter() - start) / probe
    return max(1, min(total, int(seconds / per_batch)))


def rows(rates: dict[str, float]) -> list[dict]:
    """The ladder as records, in rung order, from ``key -> images/s`` (rungs not measured are left
    out): each rung's ``step`` (its gain over the rung above: 1.25 is 25% faster) and ``total``
    (its ratio to naive). The DALI side rung's ``step`` is against the course pipeline.

    Example:
        >>> [(r["key"], r["step"], r["total"]) for r in rows({"naive": 100.0, "workers": 80.0, "uint8": 400.0})]
        [('naive', 1.0, 1.0), ('workers', 0.8, 0.8), ('uint8', 5.0, 4.0)]
    """
    if "naive" not in rates:
        raise ValueError(f"ladder.rows: the naive rung is missing (got {sorted(rates)}); it is the baseline")
    out, prev = [], None
    for rung in (*LADDER, DALI):
        if rung.key not in rates:
            continue
        rate = float(rates[rung.key])
        above = rates.get("course", prev) if rung is DALI else prev
        out.append({"key": rung.key, "label": rung.label, "lesson": rung.lesson, "images_per_s": rate,
                    "step": round(rate / above, 3) if above else 1.0, "total": round(rate / rates["naive"], 3)})
        prev = rate if rung is not DALI else prev
    return out


def step_verdicts(ms) -> dict[str, Verdict]:
    """The verdict on every rung's images/s against the rung above it (DALI's: against the course
    pipeline and, as ``"dali/naive"`` and ``"dali/uint8"``, against naive and against the tuned JPEG
    DataLoader, which decodes every JPEG as DALI does), and ``"total"``: the last rung against naive.
    ``ms``: the rungs' measurements, timed in turns (:func:`gpufeed.measure.harness.interleave`), so
    each comparison pairs the samples of one round.

    Example:
        >>> from gpufeed.measure.harness import Measurement
        >>> ms = [Measurement("naive", [1.0, 1.1, 0.9, 1.0, 1.05], items=10),
        ...       Measurement("workers", [0.5, 0.52, 0.48, 0.5, 0.51], items=10)]
        >>> v = step_verdicts(ms)
        >>> v["workers"].kind, round(v["workers"].ratio, 2), v["total"].kind
        ('faster', 2.0, 'faster')
    """
    by = {m.name: m for m in ms}
    if "naive" not in by:
        raise ValueError(f"ladder.step_verdicts: the naive rung is missing (got {sorted(by)}); it is the baseline")
    out, above = {}, None
    for rung in LADDER:
        if rung.key in by:
            if above is not None:
                out[rung.key] = against(by[rung.key], by[above])
            above = rung.key
    out["total"] = against(by[above], by["naive"])
    if DALI.key in by:
        out[DALI.key] = against(by[DALI.key], by.get("course"))
        out["dali/naive"] = against(by[DALI.key], by["naive"])
        out["dali/uint8"] = against(by[DALI.key], by.get("uint8"))  # both decode every JPEG, every epoch
    return out


def _busy(busy: dict[str, float] | None, key: str, other: str, whose: str) -> str:
    """`` (1.8 cores busy, against 1.0 for the rung above)``, where both were counted."""
    if not busy or busy.get(key) is None or busy.get(other) is None:
        return ""
    return f" ({busy[key]:.1f} cores busy, against {busy[other]:.1f} for {whose})"


def read(ms, cores: int, busy: dict[str, float] | None = None) -> str:
    """Sentences that read the ladder from its measurements (``ms``, timed in turns): the whole gain,
    the biggest step this run tells, every step that lost or tied (with the likely cause, as one not
    measured here), the steps this run cannot tell apart, and DALI beside the course pipeline.

    Args:
        ms: the rungs' :class:`~gpufeed.measure.harness.Measurement` objects, named by rung key.
        cores: the cores the loaders shared.
        busy: rung key -> the cores it kept busy (:class:`Busy`), where measured.
    """
    v, main = step_verdicts(ms), rows({m.name: m.items_per_s for m in ms})
    main = [r for r in main if r["key"] != DALI.key]
    first, last = main[0], main[-1]
    total = v["total"]
    change = {FASTER: f"got {total.words()}", SLOWER: f"got {total.words()}",
              SAME: f"stayed {total.words(same='the same')}"}.get(total.kind, f"was {total.words()}")
    text = [f"From naive ({first['images_per_s']:,.0f} images/s) to '{last['label']}' ({last['images_per_s']:,.0f} "
            f"images/s) the loader's rate {change}."]
    gains = [r for r in main[1:] if v[r["key"]].kind == FASTER]
    if len(main) > 1:
        best = max(gains, key=lambda r: v[r["key"]].ratio) if gains else None
        text.append(f"The biggest step this run tells was '{best['label']}' (lesson {best['lesson']}): "
                    f"{v[best['key']].words()}." if best else "No rung was told faster than the rung above it.")
    unsure = []
    for above, r in zip(main, main[1:]):
        step, why = v[r["key"]], RUNGS[r["key"]].slower_because.format(cores=cores)
        if step.kind in (SLOWER, SAME):
            text.append(f"'{r['label']}'{_busy(busy, r['key'], above['key'], 'the rung above')} "
                        f"{step.ran('the rung above')}; one likely cause, not measured here: {why}.")
        elif step.kind == CANNOT_TELL:
            unsure.append(f"'{r['label']}' ({step.why()})")
    if unsure:
        text.append(f"This run cannot tell {', '.join(unsure)} from the rung above.")
    dali = next((r for r in rows({m.name: m.items_per_s for m in ms}) if r["key"] == DALI.key), None)
    if dali is not None:
        side, tuned = v[DALI.key], v["dali/uint8"]
        uint8 = f"'{RUNGS['uint8'].label}', the tuned DataLoader that also decodes every JPEG in every epoch on these cores"
        like = "" if tuned.kind == NOT_MEASURED else f" {tuned.ran(uint8)},"
        text.append(f"DALI, as a side rung, made {dali['images_per_s']:,.0f} images/s"
                    f"{_busy(busy, DALI.key, 'course', 'the course pipeline')}: it {v['dali/naive'].ran('naive')},{like} "
                    f"and {side.ran('the course pipeline')}.")
        if side.kind == SLOWER:
            text.append(f"One likely cause of the last, not measured here: {DALI.slower_because}."
                        + (f" In the DataLoader, skipping the decode (the '+ decode once' rung) {v['memmap'].ran('the rung above')}."
                           if "memmap" in v else ""))
        elif side.kind == FASTER:
            text.append("It decodes every JPEG in every epoch, where the course pipeline reads them decoded: "
                        "what makes it faster here is not measured on this page.")
    said = advice([total, *(v[r["key"]] for r in main[1:]),
                   *((v[DALI.key], v["dali/naive"], v["dali/uint8"]) if dali is not None else ())])
    if said:
        text.append(said)
    return " ".join(text)


class Busy:
    """The cores each rung keeps busy while it runs (:class:`gpufeed.measure.cpu.CoresBusy` around
    every pass, warm-up included): ``run(key, epoch)`` is :func:`epoch_pass` counted for ``key``,
    ``cores()`` the CPU seconds over the wall seconds of each key's passes."""

    def __init__(self):
        self.cpu_s: dict[str, float] = {}
        self.wall_s: dict[str, float] = {}

    def run(self, key: str, epoch: Callable[[], Iterator]) -> int:
        from gpufeed.measure.cpu import CoresBusy

        with CoresBusy() as c:
            seen = epoch_pass(epoch)
        self.cpu_s[key] = self.cpu_s.get(key, 0.0) + c.cpu_s
        self.wall_s[key] = self.wall_s.get(key, 0.0) + c.wall_s
        return seen

    def cores(self) -> dict[str, float]:
        return {k: round(self.cpu_s[k] / w, 2) for k, w in self.wall_s.items() if w > 0}


def plot(ladder: list[dict], machine: dict | None, title: str = "", note: str = ""):
    """The ladder as a horizontal waterfall on a log scale: each rung a bar from the rung above to
    its own images/s (green: a gain, red: a loss), labelled with its step and its ratio to naive.
    Returns ``(figure, axes)``."""
    import matplotlib.pyplot as plt

    from gpufeed.measure import plotting

    fig, ax = plt.subplots(figsize=(8.0, 0.9 + 0.45 * len(ladder)))
    rates = [r["images_per_s"] for r in ladder]
    floor = min(rates) / 3  # where the first bar starts on a log axis (0 has no place there)
    prev = None
    for y, r in enumerate(ladder):
        rate, side = r["images_per_s"], r["key"] == DALI.key
        start = floor if prev is None or side else prev
        gain = rate >= start
        color = (plotting.COLORS["other"] if side else plotting.COLORS["baseline"] if prev is None
                 else plotting.COLORS["collate"] if gain else plotting.COLORS["compute"])
        ax.barh(y, rate - floor, left=floor, color=color, alpha=0.18)  # the whole rung, faint
        ax.barh(y, abs(rate - start), left=min(rate, start), color=color, hatch="//" if side else None)
        step = "" if prev is None else f", {r['step'] - 1:+.0%} on {'the course' if side else 'the rung above'}"
        ax.annotate(f"{rate:,.0f}/s{step}", (max(rate, start), y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
        prev = prev if side else rate
    ax.set_xscale("log")
    ax.set_xlim(floor, max(rates) * 4)  # room for the labels
    ax.set_yticks(range(len(ladder)), [plotting.ratio_label(f"{r['label']} [{r['lesson']}]", r["total"])
                                        for r in ladder])
    ax.invert_yaxis()  # naive on top, the course at the bottom
    ax.set_xlabel("images/s, loader alone (log scale; in brackets: the lesson, the ratio to naive)")
    ax.set_title(title or "the ladder: one technique added per rung")
    plotting.caption(fig, machine, note)
    return fig, ax
