"""Watching a training loop without changing it: the device's clock, the host's syncs and copies, a trace.

What :func:`gpufeed.measure.diagnose` and :func:`gpufeed.measure.watch` measure a loop with:

* :class:`DeviceClock` and :class:`Window`: marks in the device's queue (``torch.cuda.Event`` on a
  GPU) before and after each ``next(loader)``. A mark recorded while the device still runs the
  previous step completes when that work ends, so the time between the two marks of one batch is
  the time the **device** sat idle waiting for it, whatever the host's clock says: a step that
  queues its work and returns makes the host wait in ``next()`` while the device is busy, and only
  the device's clock tells the two apart. Without a GPU the host's clock is the device's.
* :class:`SyncLog`: the syncs ``torch.cuda.set_sync_debug_mode("warn")`` reports, counted on the
  loop's own thread only (a prefetcher's thread waits for events as part of its job), with the line
  of code that made each one (:attr:`SyncLog.sites`).
* :class:`Ops`: a dispatch mode over a few steps, not timed: every host-to-device copy (bytes,
  dtype, pinned or pageable, blocking or not, which stream, :class:`Copy`), and each sync named by
  its kind (:data:`ITEM`, :data:`TO_HOST`, an op whose output size depends on the data, or a wait
  outside any op); a blocking copy is counted as a copy, not as a sync.
* :func:`profiled`: on a GPU, a few more steps under ``torch.profiler``, after a warm-up step of
  its own, stopped before the final drain; the device's time split into compute, copies and idle
  (:func:`gpufeed.measure.traces.device_split`).

Example:
    >>> clock = DeviceClock()  # no GPU: the host's clock
    >>> w = Window(clock)
    >>> for _ in range(3):
    ...     w.before_next(); w.after_next()
    >>> t = w.end(skip=1)  # the first batch is not counted; the last ends now
    >>> t["batches"], t["device_wait"] is None
    (2, True)
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpufeed.measure.harness import cuda_sync

#: torch's words for a sync that ``set_sync_debug_mode("warn")`` reports (c10/cuda/CUDAFunctions.cpp).
SYNC_WARNING = "called a synchronizing CUDA operation"
#: The kinds of sync :class:`Ops` names (besides ``"<op>()"``, an op whose output size depends on the data).
ITEM, TO_HOST, OUTSIDE = ".item()", "copy to the host", "outside an op"
#: Samples a window's time is split into for the verdict method (:mod:`gpufeed.measure.verdict`).
PARTS = 5


def real_cuda() -> bool:
    """A GPU this process can time and profile (the CUDA simulator makes torch.cuda say available; the
    driver's own device count does not change)."""
    return torch.cuda.is_available() and getattr(torch._C, "_cuda_getDeviceCount", lambda: 0)() > 0


class DeviceClock:
    """Marks in the device's queue: ``events()`` makes one (``torch.cuda.Event(enable_timing=True)``
    on a GPU; anything with ``record()``, ``synchronize()`` and ``elapsed_time(other)`` in ms for a
    device of your own); None: the host's clock (a CPU, or the CUDA simulator, whose times are nominal)."""

    def __init__(self, events: Callable[[], object] | None = None):
        if events is None and real_cuda():
            events = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self.events = events

    @property
    def device(self) -> bool:
        """Whether marks come from the device (else the host's clock stands for it)."""
        return self.events is not None

    def mark(self):
        """A mark recorded now on the device's (current) queue, or None on the host's clock."""
        if self.events is None:
            return None
        e = self.events()
        e.record()
        return e

    def sync(self) -> None:
        """Waits for the device's queued work (all of CUDA's, and the clock's own queue)."""
        cuda_sync()
        if self.events is not None:
            self.mark().synchronize()


def chunks(values: list[float], parts: int = PARTS) -> list[float]:
    """``values`` (seconds per batch) as ``parts`` samples, each the mean of consecutive batches (fewer
    batches: one sample each), for :func:`gpufeed.measure.verdict.compare`.

    Example:
        >>> chunks([1.0, 3.0, 2.0, 2.0, 5.0, 5.0, 1.0, 1.0, 4.0, 0.0])
        [2.0, 2.0, 5.0, 1.0, 2.0]
    """
    if len(values) <= parts:
        return list(values)
    size = len(values) / parts
    bounds = [round(i * size) for i in range(parts + 1)]
    return [statistics.fmean(values[a:b]) for a, b in zip(bounds, bounds[1:])]


class Window:
    """One timed window of a loop: per batch, the host's time inside ``next()`` and the batch's period,
    from its ``next()`` to the next one, on the host's clock and, with a device clock, on the
    device's. A ``next()`` that finds no batch (:meth:`no_batch`) still ends the period before it, so
    a window can span epochs (the time ``iter()`` takes between them is in no batch)."""

    def __init__(self, clock: DeviceClock):
        self.clock = clock
        self.done: list[tuple] = []  # (before mark, start, wait, after mark, end mark, end time) per batch
        self.open = None  # the batch being stepped: (before mark, start, wait, after mark)
        self.pending = None  # the next() in progress: (before mark, start)

    def before_next(self) -> None:
        mark, now = self.clock.mark(), time.perf_counter()
        if self.open is not None:  # this next() ends the last batch's period
            self.done.append((*self.open, mark, now))
            self.open = None
        self.pending = (mark, now)

    def after_next(self) -> None:
        now = time.perf_counter()
        mark, start = self.pending
        self.open, self.pending = (mark, start, now - start, self.clock.mark()), None

    def no_batch(self) -> None:
        """The ``next()`` in progress found no batch (the epoch ended)."""
        self.pending = None

    def end(self, skip: int = 0, drain: bool = True) -> dict:
        """Closes the window; returns per-batch seconds for the batches after the first ``skip``:
        ``period``, ``host_wait`` and, with a device clock, ``device_wait`` (the device idle while the
        host waited; else None); and ``batches``.

        Args:
            skip: batches not counted (the first, which follows a warm-up or a drain).
            drain: the batch being stepped ends now, once the device has done its work (diagnose's
                loops); False: a batch whose period nothing ended (a ``break``) is not counted.
        """
        if self.open is not None and drain:
            mark = self.clock.mark()
            self.clock.sync()
            self.done.append((*self.open, mark, time.perf_counter()))
        else:
            self.clock.sync()  # the marks are read below
        self.open = None
        rows = self.done[skip:]
        if not rows:
            raise ValueError(f"a window of {len(self.done)} batches has none left after skipping {skip}")
        out = {"batches": len(rows), "host_period": [r[5] - r[1] for r in rows], "host_wait": [r[2] for r in rows],
               "device_wait": None}
        if self.clock.device:
            out["device_period"] = [r[0].elapsed_time(r[4]) / 1e3 for r in rows]
            out["device_wait"] = [max(0.0, r[0].elapsed_time(r[3]) / 1e3) for r in rows]
        out["period"] = out.get("device_period", out["host_period"])
        return out


class SyncLog:
    """Counts the syncs ``set_sync_debug_mode("warn")`` reports on the thread that opens it (the loop's
    own), with the source line of each (:attr:`sites`); other warnings go on as they would have.
    On a machine without CUDA it counts nothing (:attr:`on` is False). Restores the debug mode and
    the warning filters on leaving."""

    def __init__(self):
        self.count, self.sites, self.on = 0, Counter(), torch.cuda.is_available()
        self.order: list[str] = []  # the site of each sync, in order
        self.thread = threading.get_ident()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SyncLog:
        if not self.on:
            return self
        stack = self._stack
        mode = torch.cuda.get_sync_debug_mode()
        stack.callback(torch.cuda.set_sync_debug_mode, mode)
        stack.enter_context(warnings.catch_warnings())
        shown = warnings.showwarning
        warnings.filterwarnings("always", message=".*" + re.escape(SYNC_WARNING))  # each one, not once a line

        def show(message, category, filename, lineno, file=None, line=None):
            if SYNC_WARNING not in str(message):
                return shown(message, category, filename, lineno, file, line)
            if threading.get_ident() == self.thread:  # another thread's waits are its own business
                self.count += 1
                self.order.append(_site(sys._getframe(1)))
                self.sites[self.order[-1]] += 1
            return None

        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()


#: Folders whose frames are not "the line that made a sync": torch's, the simulator's, diagnose's, warnings'.
_INTERNAL = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch,)) + tuple(
    str(Path(__file__).parent.parent / room) + os.sep for room in ("simcuda", "measure")) + (warnings.__file__,)


def _site(frame) -> str:
    """``"train.py:42 loss.item()"``: the innermost frame of the stack outside torch, the CUDA simulator,
    this room and the warnings machinery (the line of your code that made the sync)."""
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
    if frame is None:
        return "inside torch"
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    code = (linecache.getline(filename, lineno) or "").strip()
    return f"{Path(filename).name}:{lineno}" + (f" {code}" if code else "")


@dataclass(frozen=True)
class Copy:
    """One host-to-device copy seen by :class:`Ops`: where it was made (``"loader"`` or ``"step"``), its
    bytes, dtype and shape, whether its source was pinned, ``non_blocking``, whether it was issued on
    the default stream (where the step's compute runs, unless the loop made a side stream), and the
    device it went to (``"cuda:1"``)."""

    where: str
    nbytes: int
    dtype: str
    shape: tuple
    pinned: bool
    non_blocking: bool
    default_stream: bool
    device: str = "cuda"


class Ops(TorchDispatchMode):
    """Notes every host-to-device copy (:class:`Copy`) and names every sync the :class:`SyncLog` counts
    by the op that made it (:attr:`syncs`, kind -> count); changes nothing. An op-by-op Python hook:
    use it on steps that are not timed."""

    def __init__(self, log: SyncLog):
        super().__init__()
        self.log, self.where, self.copies, self.syncs, self.copy_syncs = log, "step", [], Counter(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        src = dst = None
        if func is torch.ops.aten._to_copy.default and isinstance(kwargs.get("device"), torch.device):
            src, dst, blocking = args[0], kwargs["device"], not kwargs.get("non_blocking", False)
        elif func is torch.ops.aten.copy_.default:
            src, dst = args[1], args[0].device
            blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        to_device = src is not None and src.device.type == "cpu" and dst.type == "cuda"
        if to_device:
            self.copies.append(Copy(self.where, src.nbytes, str(src.dtype).replace("torch.", ""), tuple(src.shape),
                                    bool(src.is_pinned()), not blocking,
                                    torch.cuda.current_stream() == torch.cuda.default_stream(), str(dst)))
        before = self.log.count
        out = func(*args, **kwargs)
        if self.log.count > before and to_device:  # a blocking copy to the device is counted as a copy
            self.copy_syncs += self.log.count - before
            self.log.sites.subtract(self.log.order[before:])
            self.log.sites += Counter()  # drops the sites left at zero
        elif self.log.count > before:
            self.syncs[self._kind(func, src, dst)] += self.log.count - before
        return out

    @staticmethod
    def _kind(func, src, dst) -> str:
        if func is torch.ops.aten._local_scalar_dense.default:
            return ITEM
        if src is not None and dst.type == "cpu":
            return TO_HOST
        return f"{func.overloadpacket.__name__}()"  # nonzero(), masked_select(), ...: data-dependent sizes


def profiled(run: Callable[[int], None], n: int, cuda: bool = True) -> dict | None:
    """``run(i)`` (one batch: ``next()`` and the step) for a warm-up step and ``n`` profiled ones under
    ``torch.profiler``, stopped before the device is drained; returns per step ``copy_s`` (host-to-device
    copies on the device), ``sync_s`` (the host inside a ``*Synchronize`` call) and the device's split
    of the window (:func:`gpufeed.measure.traces.device_split`: ``gpu_idle``, the share in which no
    kernel and no copy ran), or None without GPU events (``cuda=False``: CPU activity only, a test)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from gpufeed.measure import traces

    docs = []

    def keep(prof) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            docs.append(traces.load(path))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    cuda_sync()
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                 on_trace_ready=keep) as prof:
        for i in range(n + 1):
            run(i)
            prof.step()  # after step n the trace is taken: the drain below is not in it
    cuda_sync()
    if not docs:
        return None
    split = traces.device_split(docs[0])
    if split is None:
        return None
    return {"copy_s": traces.durations(docs[0], ["gpu_memcpy"], "HtoD") / 1e3 / n,
            "sync_s": traces.durations(docs[0], ["cuda_runtime"], "Synchronize") / 1e3 / n,
            "compute_s": split["compute_ms"] / 1e3 / n, "gpu_idle": split["idle"]}
