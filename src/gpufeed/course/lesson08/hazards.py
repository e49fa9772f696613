"""Lesson 08's stream hazards, played on the CUDA-ordering simulator (:mod:`gpufeed.simcuda`).

Each batch ``k`` is a tensor filled with the number ``k``, so whatever a batch holds when the
consumer reads it says which batch it really was: ``k`` (right), another batch's number (its
memory was overwritten, or it was copied from a reused buffer), or NaN (its copy had not run).
The three hazards of ``notebooks/08_prefetch.ipynb``:

* ``"no wait"``: the in-loop prefetcher of section 2 (:func:`hand_prefetch`) without ``current.wait_stream(side)``:
  the consumer may read a batch before its copy ran;
* ``"no record_stream"``: without ``t.record_stream(current)``: when the consumer drops a batch,
  the caching allocator gives its memory to the side stream's next copy at once, while the
  consumer's work on it may not have run;
* ``"pinned buffer reused"``: each batch copied through one pinned buffer that the program keeps,
  without waiting for the last copy out of it: the host overwrites it while that copy is pending.

:func:`play` runs one under one schedule and says what each batch held and which races the
simulator reported; :func:`overlap` draws the prefetcher's two streams on the nominal timeline.
All of it is "simulated: CUDA's ordering rules, not its speed".

Example:
    >>> right = play("correct", seed=0)
    >>> right.held, right.races
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0)
    >>> wrong = play("no record_stream", seed=1)  # seed 1: the side stream's copies run at once
    >>> wrong.held != right.held, wrong.races > 0
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch

from gpufeed.data.movers import leaves, pin, to_device
from gpufeed.simcuda import simulated_cuda

HAZARDS = ("no wait", "no record_stream", "pinned buffer reused")
SIMULATED = "simulated: CUDA's ordering rules, not its speed"


def numbered_batches(n: int = 6, size: int = 1 << 12) -> list[torch.Tensor]:
    """``n`` batches of ``size`` floats, batch ``k`` filled with ``k`` (on the host, pageable)."""
    return [torch.full((size,), float(k)) for k in range(n)]


def hand_prefetch(batches: Iterable, device, *, convert: Callable | None = None,
                  stream: torch.cuda.Stream | None = None, wait: bool = True,
                  record_stream: bool = True) -> Iterator:
    """Lesson 08's in-loop prefetcher, apex's ``data_prefetcher``: the copy of the next batch (and
    its ``convert``, e.g. to float) issued on a side stream before the current one is handed over.

    Its host work (asking the loader, pinning, issuing the copy) runs in your loop, between two of
    your steps. ``stream``: the side stream (None: a new one; pass one to reuse it every epoch);
    ``wait``: the current stream waits for the side stream before using a batch;
    ``record_stream``: the batch's memory is marked as used by the current stream. The last two
    can be switched off to show what each line prevents.
    """
    stream = stream if stream is not None else torch.cuda.Stream(device)
    current = torch.cuda.current_stream(device)

    def start(batch):  # issue the copy (and conversion) on the side stream: returns at once
        if batch is None:
            return None
        with torch.cuda.stream(stream):
            batch = to_device(pin(batch), device, non_blocking=True)
            return convert(batch) if convert is not None else batch

    source = iter(batches)
    ahead = start(next(source, None))
    while ahead is not None:
        if wait:
            current.wait_stream(stream)  # the GPU waits for the copy before the work that follows
        if record_stream:
            for t in leaves(ahead):
                t.record_stream(current)  # its memory is in use on `current` now
        batch, ahead = ahead, start(next(source, None))  # the next copy overlaps the work on `batch`
        yield batch


def through_one_pinned_buffer(batches: Iterable[torch.Tensor], device, *,
                              wait: bool = True) -> Iterator[torch.Tensor]:
    """Each batch copied to the device through one pinned buffer the program keeps (a ring of one,
    as :class:`gpufeed.data.streams.BufferRing` keeps ``k``). ``wait``: before refilling the buffer,
    the host waits for an event recorded after the last copy out of it."""
    buffer, copied = None, None
    for batch in batches:
        if buffer is None:
            buffer = torch.empty(batch.shape, dtype=batch.dtype, pin_memory=True)
        if wait and copied is not None:
            copied.synchronize()
        buffer.copy_(batch)
        out = buffer.to(device, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        yield out


@dataclass
class Outcome:
    """What one play gave: the number each batch ``held`` when the consumer read it, the races the
    simulator reported, and the host syncs."""

    hazard: str
    seed: int
    held: list[float]
    races: int
    syncs: int


def play(hazard: str, seed: int = 0, n: int = 6, step_ms: float = 1.0) -> Outcome:
    """Runs the consumer over ``n`` numbered batches delivered with ``hazard`` (or ``"correct"``)
    under the simulator's schedule ``seed``. The consumer does what a training loop does: queues
    its work on each batch (a step of ``step_ms`` nominal ms and a read of the batch) and drops
    the batch, without waiting; at the end it reads what every batch held."""
    if hazard not in (*HAZARDS, "correct"):
        raise ValueError(f"play: hazard must be one of {HAZARDS} or 'correct', got {hazard!r}")
    with simulated_cuda(seed, races="record") as sim:
        batches = numbered_batches(n)
        if hazard == "pinned buffer reused":
            delivered = through_one_pinned_buffer(batches, "cuda", wait=False)
        else:
            delivered = hand_prefetch(batches, "cuda", wait=hazard != "no wait",
                                      record_stream=hazard != "no record_stream")
        means = []
        for x in delivered:
            sim.busy(step_ms, "model step")
            means.append(x.mean())  # the consumer's read of the batch, queued behind the step
            del x
        held = torch.stack(means).cpu().tolist()
        return Outcome(hazard, seed, held, len(sim.races), len(sim.syncs))


def overlap(n: int = 4, batch_mb: float = 24.0, step_ms: float = 1.0, prefetch: bool = True):
    """The nominal timeline of ``n`` batches of ``batch_mb`` MB copied and used: with ``prefetch``,
    through :class:`gpufeed.data.prefetch.CudaPrefetcher` (the next batch's copy on its side
    stream under the current step); without, copied on the default stream before each step.
    Returns the intervals (:mod:`gpufeed.course.timeline`) and the nominal ms per batch."""
    from gpufeed.course.timeline import Interval  # matplotlib: loaded only for the drawing
    from gpufeed.data.prefetch import CudaPrefetcher

    size = int(batch_mb * 1e6 / 4)
    with simulated_cuda() as sim:
        host = [torch.full((size,), float(k)).pin_memory() for k in range(n)]
        source = CudaPrefetcher(host, "cuda") if prefetch else (x.to("cuda", non_blocking=True) for x in host)
        for x in source:
            sim.busy(step_ms, "model step")
            del x
        torch.cuda.synchronize()
        intervals = [Interval(s.resource, s.stage, s.start, s.end) for s in sim.timeline()]
    return intervals, max(i.end for i in intervals) / n
