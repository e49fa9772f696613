"""A pipeline simulator: one training loop's data path as a small discrete-event model.

Per batch of ``B`` samples: **read** and **decode** each sample on one of ``W`` workers, **collate**
the batch (on the worker that finished its last sample), **pin** it (one pin-memory thread), **copy**
it host to device (the copy engine), **compute** the step (the GPU). The loop reads the loss every
step (``loss.item()``, as loops that log do), so the host waits for each step to finish. Two knobs
let work overlap:

* ``prefetch``: how many batches the workers may load ahead of the one the loop asks for. With 0,
  a batch is loaded only when the loop asks for it: with one worker that is exactly
  ``DataLoader(num_workers=0)``.
* ``gpu_prefetch``: a prefetch thread of its own takes each batch from the loader and issues its
  copy on a side stream, one batch ahead of the loop (a queue of one), so the copy of batch
  ``i + 1`` overlaps the compute of batch ``i`` and the loop never waits for the loader between two
  steps, only for a batch's copy: lesson 08's ``CudaPrefetcher``. (The classic apex prefetcher took
  the next batch on the loop's own thread before launching the step, so a loader that fell behind
  held up the step's launch; lesson 08 shows what that cost on a real GPU.)

Copies from pageable memory are slower, and they block the host thread that issues them (the
driver stages them through a pinned buffer of its own); pinned copies are asynchronous.

The workers share a batch's samples like a thread pool. PyTorch's DataLoader workers build whole
batches each instead (``num_workers * prefetch_factor`` of them in flight); once at least ``W``
batches are in flight both reach the same steady rate. The model is deterministic: costs are
inputs (milliseconds), with optional jitter from a seeded generator. Taught in
``notebooks/01_bottlenecks.ipynb``.

Example:
    >>> naive = simulate(preset("naive"))
    >>> round(naive.images_per_s)  # 32 images every 3*32 + 2 + 6 + 30 = 134 ms
    239
    >>> fast = simulate(preset("GPU prefetch"))
    >>> round(fast.images_per_s / naive.images_per_s, 2)
    4.47
    >>> slowest_stage(preset("GPU prefetch"))
    ('compute', 30.0)
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field

from gpufeed.course.timeline import Interval, busy


@dataclass(frozen=True)
class Costs:
    """What each stage costs, in milliseconds. The defaults are illustrative.

    They are order-of-magnitude figures for a batch of 32 images of 224x224 RGB that a naive loop
    sends as float32 (``ToTensor``): 19 MB per batch. Section 5 of ``notebooks/01_bottlenecks``
    measures the real ones on the learner's machine and feeds them back in.

    Attributes:
        read_ms: per sample: read a ~100 KB JPEG from the page cache or a fast SSD, with open/close.
        decode_ms: per sample: decode a ~500x375 JPEG with libjpeg-turbo (~2 ms) then crop, resize
            and convert it (~0.7 ms), on one core.
        collate_ms: per batch: ``torch.stack`` of 19 MB at ~10 GB/s.
        pin_ms: per batch: copying 19 MB into page-locked memory (the pin-memory thread).
        copy_pageable_ms: per batch: host to device from pageable memory, ~3 GB/s through the
            driver's staging buffer.
        copy_pinned_ms: per batch: host to device from pinned memory, ~12 GB/s (PCIe 3/4 x16).
        compute_ms: per batch: forward and backward of a ResNet-50-sized model on 32 images on a
            mid-range GPU (~1,000 images/s).
    """

    read_ms: float = 0.3
    decode_ms: float = 2.7
    collate_ms: float = 2.0
    pin_ms: float = 2.0
    copy_pageable_ms: float = 6.0
    copy_pinned_ms: float = 1.6
    compute_ms: float = 30.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Costs.{f.name} = {value!r}: give a finite number of milliseconds >= 0")

    @classmethod
    def from_stage_means(cls, per_batch_ms: dict, batch_size: int, base: Costs | None = None) -> Costs:
        """Costs from measured mean milliseconds *per batch* of each stage (e.g. a measured loop).

        ``read`` and ``decode`` are divided by ``batch_size`` (the model takes them per sample).
        ``copy`` is a copy from *pageable* memory (what a naive loop does): it sets
        ``copy_pageable_ms``. The pinned costs were not measured, so unless ``pin`` or
        ``copy_pinned`` are given they are scaled with it: ``pin_ms`` and ``copy_pinned_ms`` keep
        their ratio to ``base``'s pageable copy (with the defaults, a pin costs 1/3 and a pinned
        copy 0.27 of a pageable copy of the same batch). A batch of uint8 images then gets a pin
        sized for uint8, not base's 19 MB float32 batch. Stages not measured keep ``base``'s costs.

        Example:
            >>> Costs.from_stage_means({"read": 8.0, "decode": 40.0, "compute": 5.0}, batch_size=8).decode_ms
            5.0
            >>> c = Costs.from_stage_means({"copy": 0.6}, batch_size=8)  # a tenth of the default copy
            >>> round(c.pin_ms, 2), round(c.copy_pinned_ms, 2)
            (0.2, 0.16)
        """
        base = base or cls()
        per_sample = {"read": "read_ms", "decode": "decode_ms"}
        per_batch = {"collate": "collate_ms", "pin": "pin_ms", "compute": "compute_ms",
                     "copy_pinned": "copy_pinned_ms"}
        changes = {}
        for stage, ms in per_batch_ms.items():
            if stage in per_sample:
                changes[per_sample[stage]] = ms / batch_size
            elif stage in per_batch:
                changes[per_batch[stage]] = ms
            elif stage == "copy":
                changes["copy_pageable_ms"] = ms
                scale = ms / base.copy_pageable_ms if base.copy_pageable_ms else 1.0
                for name in ("pin_ms", "copy_pinned_ms"):  # measured values (if any) win below
                    changes.setdefault(name, getattr(base, name) * scale)
        for stage, name in (("pin", "pin_ms"), ("copy_pinned", "copy_pinned_ms")):
            if stage in per_batch_ms:
                changes[name] = per_batch_ms[stage]
        return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class Pipeline:
    """A loop's data path: batch size, workers, prefetch depth, pinning, GPU prefetch, and costs.

    Attributes:
        batch_size: samples per batch (B).
        workers: worker processes or threads that read and decode (W >= 1).
        prefetch: batches the workers may load ahead of the one the loop asks for (>= 0).
        pin: pin each batch on the pin-memory thread, so the copy is from pinned memory.
        gpu_prefetch: a prefetch thread issues the next batch's copy on a side stream while this
            batch computes (lesson 08's ``CudaPrefetcher``).
        costs: the stage costs in ms.
    """

    batch_size: int = 32
    workers: int = 1
    prefetch: int = 0
    pin: bool = False
    gpu_prefetch: bool = False
    costs: Costs = field(default_factory=Costs)

    def __post_init__(self):
        for name, least in (("batch_size", 1), ("workers", 1), ("prefetch", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"Pipeline.{name} = {value!r}: give a whole number >= {least}")

    @property
    def copy_ms(self) -> float:
        return self.costs.copy_pinned_ms if self.pin else self.costs.copy_pageable_ms

    def but(self, **changes) -> Pipeline:
        """A copy with some fields changed; cost fields (``compute_ms=...``) may be given directly."""
        cost_names = {f.name for f in dataclasses.fields(Costs)}
        costs = {k: changes.pop(k) for k in list(changes) if k in cost_names}
        if costs:
            changes["costs"] = dataclasses.replace(changes.get("costs", self.costs), **costs)
        return dataclasses.replace(self, **changes)


#: The five classic timelines, each adding one change to the one before it.
PRESETS: dict[str, dict] = {
    "naive": {},
    "pinned": {"pin": True},
    "workers": {"pin": True, "workers": 4},
    "CPU prefetch": {"pin": True, "workers": 4, "prefetch": 2},
    "GPU prefetch": {"pin": True, "workers": 4, "prefetch": 2, "gpu_prefetch": True},
}


def preset(name: str, costs: Costs | None = None, **changes) -> Pipeline:
    """One of :data:`PRESETS` as a :class:`Pipeline` (with ``costs`` and other ``changes``)."""
    if name not in PRESETS:
        raise KeyError(f"no preset {name!r}: choose one of {list(PRESETS)}")
    return Pipeline(costs=costs or Costs()).but(**{**PRESETS[name], **changes})


def slowest_stage(p: Pipeline) -> tuple[str, float]:
    """The stage that bounds a fully overlapped pipeline, and its ms per batch.

    Workers share the read, decode and collate work (divided by W); pin, copy and compute have one
    resource each. No pipeline runs faster than ``batch_size`` images per this many ms.
    """
    c = p.costs
    per_batch = {
        "read+decode+collate": (p.batch_size * (c.read_ms + c.decode_ms) + c.collate_ms) / p.workers,
        "pin": c.pin_ms if p.pin else 0.0,
        "copy": p.copy_ms,
        "compute": c.compute_ms,
    }
    name = max(per_batch, key=per_batch.get)
    return name, per_batch[name]


@dataclass
class SimResult:
    """What :func:`simulate` returns: the intervals and each step's end (ms)."""

    pipeline: Pipeline
    intervals: list[Interval]
    step_end: list[float]

    @property
    def window(self) -> tuple[float, float]:
        """The steady state: from the end of the middle step to the end of the last but one.

        The first half is left out (the pipeline fills up) and so is the last step (with GPU
        prefetch it has no next batch to wait for, so it ends early).
        """
        n = len(self.step_end)
        return self.step_end[n // 2], self.step_end[n - 2]

    @property
    def ms_per_batch(self) -> float:
        """Steady-state time per batch."""
        start, end = self.window
        return (end - start) / (len(self.step_end) - 2 - len(self.step_end) // 2)

    @property
    def images_per_s(self) -> float:
        return self.pipeline.batch_size * 1000.0 / self.ms_per_batch

    def utilisation(self) -> dict[str, float]:
        """Fraction of the steady-state window each resource was busy (1.0: the bottleneck)."""
        start, end = self.window
        rows = dict.fromkeys(i.resource for i in self.intervals)
        return {r: busy(self.intervals, r, start, end) / (end - start) if end > start else 0.0 for r in rows}


def simulate(p: Pipeline, n_batches: int = 40, jitter: float = 0.0, seed: int = 0) -> SimResult:
    """Runs the pipeline for ``n_batches`` and returns every stage's intervals.

    Args:
        p: the pipeline.
        n_batches: how many batches; the steady state is read from the second half.
        jitter: relative standard deviation of each cost (0: every cost exactly as given).
        seed: seeds the jitter, so a run can be repeated exactly.
    """
    if n_batches < 4:
        raise ValueError(f"n_batches = {n_batches}: simulate at least 4 batches (the steady state is "
                         "read from the second half)")
    c, n, B, W = p.costs, n_batches, p.batch_size, p.workers
    rng = random.Random(seed)

    def cost(ms: float) -> float:
        return ms * max(0.0, rng.gauss(1.0, jitter)) if jitter else ms

    out: list[Interval] = []
    worker_free, pin_free, copy_free, gpu_free = [0.0] * W, 0.0, 0.0, 0.0
    asked, ready, copied, step_end = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    loaded = 0  # batches whose loading is scheduled

    def load_up_to(last: int) -> None:  # schedules batches loaded..last, in order
        nonlocal loaded, pin_free
        while loaded <= min(last, n - 1):
            b = loaded
            release = asked[max(0, b - p.prefetch)]  # may start once the loop asked for batch b - prefetch
            last_end, last_w = release, 0
            for _ in range(B):  # each sample goes to the worker that is free first
                w = min(range(W), key=worker_free.__getitem__)
                t = max(worker_free[w], release)
                for stage, ms in (("read", c.read_ms), ("decode", c.decode_ms)):
                    d = cost(ms)
                    out.append(Interval(f"worker {w + 1}", stage, t, t + d, b))
                    t += d
                worker_free[w] = t
                if t >= last_end:
                    last_end, last_w = t, w
            done = last_end + cost(c.collate_ms)  # the worker that finished last collates
            out.append(Interval(f"worker {last_w + 1}", "collate", last_end, done, b))
            worker_free[last_w] = done
            if p.pin:
                start = max(done, pin_free)
                pin_free = done = start + cost(c.pin_ms)
                out.append(Interval("pin thread", "pin", start, done, b))
            ready[b] = done
            loaded += 1

    def take_and_copy(b: int, t: float, after: float) -> float:
        """The host takes batch b at time t and issues its copy; returns when the host is free."""
        nonlocal copy_free
        got = max(t, ready[b])
        start = max(got, copy_free, after)
        copy_free = copied[b] = start + cost(p.copy_ms)
        out.append(Interval("copy engine", "copy", start, copy_free, b))
        return got if p.pin else copy_free  # a pageable copy holds the host until it is done

    def compute(b: int, t: float) -> float:
        nonlocal gpu_free
        start = max(t, copied[b], gpu_free)
        gpu_free = step_end[b] = start + cost(c.compute_ms)
        out.append(Interval("GPU", "compute", start, gpu_free, b))
        return gpu_free  # loss.item(): the host waits for the step

    t = 0.0  # the host (main thread) clock
    if p.gpu_prefetch:
        # The prefetch thread's clock: it asks for batch b as soon as it has put batch b - 1 in the
        # queue (one slot), and may put batch b once the loop has taken batch b - 1.
        free, taken = 0.0, [0.0] * n
        for i in range(n):
            asked[i] = free
            load_up_to(i + p.prefetch)
            made = take_and_copy(i, free, after=0.0)
            free = max(made, taken[i - 1]) if i else made  # put into the queue
            taken[i] = max(t, free)  # the loop takes it: it waits for the copy on the GPU only
            t = compute(i, taken[i])
    else:
        for i in range(n):
            asked[i] = t
            load_up_to(i + p.prefetch)
            t = take_and_copy(i, t, after=gpu_free)  # same stream: the copy waits for the last step
            t = compute(i, t)
    return SimResult(p, out, step_end)
