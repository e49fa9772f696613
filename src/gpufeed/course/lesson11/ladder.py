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
:func:`rows`, :func:`read` and :func:`plot` turn measured rates into the ladder's records, the
sentences that read them and the chart; loader efficiency is in :mod:`gpufeed.course.lesson11.efficiency`.

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

from gpufeed.course.prose import times
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, CropFlip, crop_flip, draw_crops
from gpufeed.measure import pipelines
from gpufeed.measure.pipelines import Data, Workload


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: its key, its label in charts, the lesson that teaches it, and why
    it can lose on a machine like this one (``{cores}`` is filled in)."""

    key: str
    label: str
    lesson: str
    slower_because: str


LADDER = (
    Rung("naive", "naive", "01", "it is the baseline"),
    Rung("workers", "+ workers", "07", "{cores} worker processes share the {cores} cores with the main process, "
         "which collates and copies, and each batch crosses between processes"),
    Rung("uint8", "+ uint8 on the wire", "03, 04", "torchvision's decode and tensor resize cost about what Pillow's "
         "do on small JPEGs, and the bytes saved matter only where a bus is the bottleneck"),
    Rung("memmap", "+ decode once", "05", "the per-sample Python of the DataLoader, not the decoding, "
         "was the bottleneck"),
    Rung("batched", "+ batched fetching", "06", "the FastLoader runs in one thread, while the DataLoader "
         "before it had {cores} worker processes"),
    Rung("prefetch", "+ prefetching", "08", "a loader timed alone has nothing to overlap with: the thread only "
         "adds a hand-off (prefetching pays when the model computes, as in the training measurement)"),
    Rung("course", "+ batched augmentation", "09", "the per-sample crops were already cheap next to the "
         "gather; batching them pays most where a GPU does the work"),
)
DALI = Rung("dali", "DALI (side rung)", "10", "DALI decodes every JPEG in every epoch, where the course "
            "pipeline decoded them once into the memmap")
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


def read(ladder: list[dict], cores: int, flat: float = 0.05, spread: dict[str, float] | None = None) -> str:
    """Sentences that read the ladder: the whole gain, the biggest step, and every step that lost
    (or changed less than its band) with the reason it can on a machine with ``cores`` cores.

    Args:
        ladder: :func:`rows`.
        cores: the cores the loaders shared.
        flat: the narrowest band around 1 within which a step reads as "changed little".
        spread: rung key -> the spread (IQR over median) of its measurement, where known: a step's
            band is then the wider of ``flat`` and the spreads of the two rungs it compares.
    """
    spread = spread or {}

    def band(*keys: str) -> float:
        return max([flat, *(spread.get(k, 0.0) for k in keys)])

    main = [r for r in ladder if r["key"] != DALI.key]
    first, last = main[0], main[-1]
    f = band(first["key"], last["key"])
    total = times(last["total"], flat=f, same="")  # "" inside the band
    text = [f"From naive ({first['images_per_s']:,.0f} images/s) to '{last['label']}' "
            f"({last['images_per_s']:,.0f} images/s) " + (f"the loader got {total}." if total else
                                                          f"the loader's rate stayed within the runs' spread ({f:.0%}).")]
    if len(main) > 1:
        best = max(main[1:], key=lambda r: r["step"])
        text.append(f"The biggest step was '{best['label']}' (lesson {best['lesson']}): {times(best['step'])}."
                    if best["step"] > 1 else f"No rung gained here: the least loss was '{best['label']}' "
                    f"(lesson {best['lesson']}), {times(best['step'])}.")
    for above, r in zip(main, main[1:]):
        why, f = RUNGS[r["key"]].slower_because.format(cores=cores), band(above["key"], r["key"])
        if r["step"] * (1 + f) < 1:
            text.append(f"'{r['label']}' made it {times(r['step'])} here: {why}.")
        elif r["step"] <= 1 + f:
            text.append(f"'{r['label']}' changed little here ({times(r['step'])}, within the runs' spread of "
                        f"{f:.0%}): {why}.")
    dali = next((r for r in ladder if r["key"] == DALI.key), None)
    if dali is not None:
        f = band(DALI.key, "course")
        text.append(f"DALI, as a side rung: {dali['images_per_s']:,.0f} images/s, {times(dali['total'], 'naive')} "
                    f"and {times(dali['step'], 'the course pipeline', flat=f)}"
                    + (f": {DALI.slower_because}." if dali["step"] * (1 + f) < 1 else "."))
    return " ".join(text)


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
