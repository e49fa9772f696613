"""The naive loop and the same loop with loading threads, measured in turns.

:func:`naive_and_workers` runs :func:`gpufeed.course.instrument.naive_loop` twice per round, once
loading on the loop's own thread (``DataLoader(num_workers=0)``) and once with a pool of W threads
that read and decode a batch's files when the loop asks for it (the simulator's "workers" preset:
parallel loading, nothing loaded ahead), for ``rounds`` rounds, one arm after the other (A, B, A,
B, ...), on one model. Each round gives one sample per arm, its mean time per batch, so the two
arms' ratio gets an interval and a verdict (:func:`gpufeed.measure.verdict.compare`, paired by
round). Taught in ``notebooks/01_bottlenecks.ipynb``, section 5.

Example:
    >>> import tempfile, pathlib, torch
    >>> from gpufeed.course.instrument import list_images
    >>> from gpufeed.measure.synth import synth_folder
    >>> folder = synth_folder(pathlib.Path(tempfile.mkdtemp()) / "d", n=4, size=(32, 32), progress=False).path
    >>> files, labels = list_images(folder)
    >>> t = naive_and_workers(files, labels, batch_size=2, batches=2, rounds=2, workers=2, device=torch.device("cpu"))
    >>> [len(m.samples) for m in t.measurements()], t.verdict().kind  # 2 rounds: too few to tell
    ([2, 2], 'cannot tell')
    >>> sorted(t.stage_ms("naive")), 0 < t.coverage("naive") <= 1
    (['collate', 'compute', 'copy', 'decode', 'read'], True)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from gpufeed.course.instrument import Recording, naive_loop, tiny_model, train_step
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import Verdict, compare

NAIVE, WORKERS = "naive", "workers"


@dataclass
class InTurns:
    """What :func:`naive_and_workers` measured: one :class:`~gpufeed.course.instrument.Recording`
    per round and arm, the batch size and the number of loading threads."""

    naive: list[Recording]
    workers: list[Recording]
    batch_size: int
    threads: int

    def recordings(self, arm: str) -> list[Recording]:
        """The recordings of ``arm`` (:data:`NAIVE` or :data:`WORKERS`), one per round."""
        if arm not in (NAIVE, WORKERS):
            raise ValueError(f"no arm {arm!r}: choose {NAIVE!r} or {WORKERS!r}")
        return self.naive if arm == NAIVE else self.workers

    def measurements(self) -> tuple[Measurement, Measurement]:
        """``(naive, workers)``: seconds per batch, one sample per round (the round's mean)."""
        return tuple(Measurement(arm if arm == NAIVE else f"{self.threads} loading threads",
                                 [r.ms_per_batch / 1000.0 for r in self.recordings(arm)], items=self.batch_size,
                                 params={"batch_size": self.batch_size, "threads": 1 if arm == NAIVE else self.threads})
                     for arm in (NAIVE, WORKERS))

    def verdict(self) -> Verdict:
        """The loop with loading threads against the naive loop, paired by round."""
        naive, workers = self.measurements()
        return compare(workers, naive, paired=True)

    def stage_ms(self, arm: str) -> dict[str, float]:
        """The median ms per batch of each stage, over every timed batch of ``arm``: medians, as the
        loop's own time per batch is, so that a stall of a few batches moves neither. With threads,
        read and decode are summed over the threads (time on a core, not on the wall clock)."""
        batches = [b for r in self.recordings(arm) for b in r.per_batch()]
        return {stage: statistics.median(b.get(stage, 0.0) for b in batches) for stage in batches[0]}

    def coverage(self, arm: str) -> float:
        """The median share of a batch's period that its recorded stages cover (1.0: no gaps)."""
        return statistics.median(sum(b.values()) / period for r in self.recordings(arm)
                                 for b, period in zip(r.per_batch(), r.periods_ms()))

    def decode_ms(self, arm: str) -> list[float]:
        """The median ms to decode one image, one sample per round of ``arm``."""
        return [statistics.median(b["decode"] for b in r.per_batch()) / self.batch_size for r in self.recordings(arm)]

    def loading_images_per_s(self, arm: str = NAIVE) -> list[float]:
        """How fast ``arm`` loaded (read, decode, collate, on the wall clock), in images/s, one sample
        per batch of every round."""
        return [self.batch_size * 1000.0 / ms for r in self.recordings(arm) for ms in r.loading_ms()]


def naive_and_workers(files: Sequence[Path], labels: Sequence[int], *, batch_size: int, batches: int, rounds: int,
                      workers: int, device: torch.device,
                      step: Callable[[torch.Tensor, torch.Tensor], float] | None = None) -> InTurns:
    """Times the naive loop and the loop with ``workers`` loading threads in turns.

    Args:
        files, labels: the JPEGs and their classes (:func:`gpufeed.course.instrument.list_images`).
        batch_size: images per batch.
        batches: timed batches per round and arm; each run adds one warm-up batch, left out.
        rounds: rounds, each one run of each arm (naive first); the samples of a verdict.
        workers: loading threads of the second arm (>= 2).
        device: where the model runs.
        step: the training step both arms share; default: one :func:`~gpufeed.course.instrument.tiny_model`.
    """
    if workers < 2 or rounds < 1 or batches < 1:
        raise ValueError("naive_and_workers needs workers >= 2, rounds >= 1 and batches >= 1")
    step = step or train_step(tiny_model(max(labels) + 1).to(device))
    naive, pooled = [], []
    for _ in range(rounds):
        for arm, threads in ((naive, 1), (pooled, workers)):
            arm.append(naive_loop(files, labels, batch_size, batches + 1, device, step=step, workers=threads))
    return InTurns(naive, pooled, batch_size, workers)
