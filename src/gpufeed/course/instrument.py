"""A real naive training loop that records when each of its stages ran.

One process does everything in turn, as ``DataLoader(num_workers=0)`` does: **read** each file's
bytes, **decode** it, **collate** the batch, **copy** it to the device, run one training **compute**
step (forward, backward, optimiser, ``loss.item()``). With ``workers=W`` a pool of W threads reads
and decodes each batch's files when the loop asks for the batch, and the loop waits for them: the
simulator's "workers" preset (no loading ahead), measured. Each stage's start and end go into
:class:`~gpufeed.course.timeline.Interval` records, so the real loop is drawn in the same Gantt chart as
the simulated ones, and its mean stage costs can be fed to the simulator
(:meth:`gpufeed.course.simulator.Costs.from_stage_means`). Taught in ``notebooks/01_bottlenecks.ipynb``,
section 5; ``notebooks/02_profiling.ipynb`` profiles the same model step.

Example:
    >>> import tempfile, pathlib, torch
    >>> from gpufeed.measure.synth import synth_folder
    >>> folder = synth_folder(pathlib.Path(tempfile.mkdtemp()) / "d", n=4, size=(32, 32), progress=False).path
    >>> files, labels = list_images(folder)
    >>> rec = naive_loop(files, labels, batch_size=2, n_batches=3, device=torch.device("cpu"))
    >>> [i.stage for i in rec.intervals if i.batch == 0]
    ['read', 'decode', 'read', 'decode', 'collate', 'copy', 'compute']
    >>> sorted(rec.stage_means()), rec.images_per_s > 0
    (['collate', 'compute', 'copy', 'decode', 'read'], True)
    >>> pooled = naive_loop(files, labels, batch_size=2, n_batches=3, device=torch.device("cpu"), workers=2)
    >>> sorted({i.resource for i in pooled.intervals if i.stage == "decode"}) <= ["worker 1", "worker 2"]
    True
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from gpufeed.course.timeline import Interval
from gpufeed.data.jpeg import collate_images, decode_pil
from gpufeed.measure.harness import Measurement, cuda_sync


def list_images(folder: str | Path) -> tuple[list[Path], list[int]]:
    """The JPEGs of an ImageFolder-layout folder (``class_xx/*.jpg``) and their class indices."""
    folder = Path(folder)
    files = sorted(folder.rglob("*.jpg"))
    if not files:
        raise FileNotFoundError(f"no .jpg files under {folder}: generate some with gpufeed.measure.synth.synth_folder")
    classes = sorted({f.parent.name for f in files})
    return files, [classes.index(f.parent.name) for f in files]


def tiny_model(num_classes: int = 10) -> nn.Module:
    """A small CNN taking ``uint8 [B, 3, H, W]`` images; it converts and scales them itself.

    Small on purpose: the lesson is about feeding it, and on a GPU a small model makes the data
    path the bottleneck, which is what a starved GPU looks like.
    """
    return nn.Sequential(
        _ToFloat(),
        nn.Conv2d(3, 8, 5, stride=4, padding=2), nn.ReLU(),    # [B, 8, H/4, W/4]
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),   # [B, 16, H/8, W/8]
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),                 # [B, 16]
        nn.Linear(16, num_classes),
    )


class _ToFloat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().div_(255)  # uint8 travels, float is made where the model runs (lesson 03)


def train_step(model: nn.Module, lr: float = 0.01,
               sync: bool = True) -> Callable[[torch.Tensor, torch.Tensor], float | torch.Tensor]:
    """One SGD step as a function of ``(images, labels)``; returns the loss.

    Args:
        model: the model to train.
        lr: the learning rate.
        sync: read the loss as a float (``.item()``), which waits for the device to finish the
            step, as loops that log every step do; False returns the loss as a tensor on the
            device, and the host goes on while the device computes (``notebooks/08_prefetch.ipynb``,
            section 5, times both).

    Example:
        >>> model = tiny_model(2)
        >>> x, y = torch.zeros(2, 3, 16, 16, dtype=torch.uint8), torch.tensor([0, 1])
        >>> type(train_step(model)(x, y)).__name__, type(train_step(model, sync=False)(x, y)).__name__
        ('float', 'Tensor')
    """
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> float | torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item() if sync else loss.detach()

    return step


@dataclass
class Recording:
    """What :func:`naive_loop` recorded: intervals (ms from the loop's start) and step ends."""

    intervals: list[Interval]
    batch_size: int
    step_end: list[float]
    skip: int = 1  # batches left out of the means and rates: the first pays for warm-up

    def stage_means(self) -> dict[str, float]:
        """Mean milliseconds per batch spent in each stage, over the batches after ``skip``."""
        batches = self.per_batch()
        return {stage: sum(b.get(stage, 0.0) for b in batches) / len(batches) for stage in batches[0]} if batches else {}

    def per_batch(self) -> list[dict[str, float]]:
        """Each batch after ``skip``: milliseconds spent in each stage (summed over threads), in the
        order of :meth:`periods_ms`."""
        out: dict[int, dict[str, float]] = {}
        for i in self.intervals:
            if i.batch is not None and i.batch >= self.skip:
                stages = out.setdefault(i.batch, {})
                stages[i.stage] = stages.get(i.stage, 0.0) + i.duration
        return [out[b] for b in sorted(out)]

    def loading_ms(self) -> list[float]:
        """How long each batch's loading took on the wall clock, after ``skip``: from its first read's
        start to its collate's end (ms). For a loop that loads on one thread, the sum of its read,
        decode and collate; with worker threads, less."""
        spans: dict[int, list[float]] = {}
        for i in self.intervals:
            if i.batch is not None and i.batch >= self.skip and i.stage in ("read", "decode", "collate"):
                lo_hi = spans.setdefault(i.batch, [i.start, i.end])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], i.start), max(lo_hi[1], i.end)
        return [hi - lo for _, (lo, hi) in sorted(spans.items())]

    def periods_ms(self) -> list[float]:
        """Time between consecutive step ends, after ``skip``: one sample per batch."""
        ends = self.step_end[self.skip - 1:] if self.skip else [0.0, *self.step_end]
        return [b - a for a, b in zip(ends, ends[1:])]

    @property
    def ms_per_batch(self) -> float:
        periods = self.periods_ms()
        return sum(periods) / len(periods)

    @property
    def images_per_s(self) -> float:
        return self.batch_size * 1000.0 / self.ms_per_batch

    def measurement(self, name: str, **params) -> Measurement:
        """The per-batch times as a :class:`~gpufeed.measure.harness.Measurement` (seconds, items = batch)."""
        from gpufeed.measure.machine import machine_info

        return Measurement(name, [p / 1000.0 for p in self.periods_ms()], items=self.batch_size,
                           params={"batch_size": self.batch_size, **params}, machine=machine_info())


def naive_loop(
    files: Sequence[Path],
    labels: Sequence[int],
    batch_size: int,
    n_batches: int,
    device: torch.device,
    step: Callable[[torch.Tensor, torch.Tensor], float] | None = None,
    decode: Callable[[bytes], torch.Tensor] = decode_pil,
    collate: Callable[[list[torch.Tensor]], torch.Tensor] = collate_images,
    workers: int = 1,
) -> Recording:
    """Runs a naive loop over ``files`` and records every stage's interval.

    Args:
        files: JPEG paths (all of one size, so that they stack); cycled if too few.
        labels: one class index per file.
        batch_size: images per batch.
        n_batches: batches to run (the first is reported apart: it pays for warm-up).
        device: where the model runs; the copy stage is ``.to(device)``, a no-op on the CPU.
        step: the training step, ``step(images, labels) -> loss``; default: a :func:`tiny_model`.
        decode: bytes to ``uint8 [3, H, W]``; default: Pillow.
        collate: the decoded images to one batch; default :func:`gpufeed.data.jpeg.collate_images`
            (no transposing copy; ``torch.stack`` is the other choice).
        workers: threads that read and decode a batch's files, when the loop asks for it (1: the
            loop's own thread, as ``DataLoader(num_workers=0)``). Pillow and torchvision release
            Python's lock while they decode, so threads decode in parallel.

    Returns:
        A :class:`Recording`. Rows: ``worker 1`` ... ``worker W`` (with one worker the loop's own
        thread, which also collates; with more, the loop collates on ``loop``), ``copy engine``,
        and ``GPU`` or ``compute (CPU)``.
    """
    if n_batches < 2 or batch_size < 1 or workers < 1 or not files:
        raise ValueError("naive_loop needs files, batch_size >= 1, workers >= 1 and n_batches >= 2 "
                         "(the first one warms up)")
    if step is None:
        step = train_step(tiny_model(max(labels) + 1).to(device))
    compute_row = "GPU" if device.type == "cuda" else "compute (CPU)"
    out: list[Interval] = []
    step_end: list[float] = []
    t0 = time.perf_counter()

    @contextmanager
    def span(row: str, stage: str, b: int):  # records how long the body of a `with` took
        start = (time.perf_counter() - t0) * 1000.0  # ms since the loop started
        yield
        out.append(Interval(row, stage, start, (time.perf_counter() - t0) * 1000.0, b))

    rows: dict[int, str] = {}  # thread id -> its row, "worker 1", "worker 2", ... in order of first use
    lock = threading.Lock()

    def load(k: int, b: int) -> torch.Tensor:  # one sample: read, then decode, on the calling thread
        with lock:
            row = rows.setdefault(threading.get_ident(), f"worker {len(rows) + 1}")
        with span(row, "read", b):
            data = files[k].read_bytes()
        with span(row, "decode", b):
            return decode(data)  # uint8 [3, H, W]

    pool = ThreadPoolExecutor(workers, thread_name_prefix="loader") if workers > 1 else None
    try:
        for b in range(n_batches):
            idx = [(b * batch_size + k) % len(files) for k in range(batch_size)]
            images = list(pool.map(load, idx, [b] * len(idx))) if pool else [load(k, b) for k in idx]
            with span("worker 1" if pool is None else "loop", "collate", b):
                x, y = collate(images), torch.tensor([labels[k] for k in idx])  # [B, 3, H, W], [B]
            with span("copy engine", "copy", b):
                x, y = x.to(device), y.to(device)
                cuda_sync()  # a pageable copy is done when this returns; the sync makes that certain
            with span(compute_row, "compute", b):
                step(x, y)  # ends with loss.item(): the device has finished the step
            step_end.append(out[-1].end)
    finally:
        if pool is not None:
            pool.shutdown()
    return Recording(out, batch_size, step_end)
