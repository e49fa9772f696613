"""Peak resident memory of a process and its workers: the proportional set size (PSS), sampled.

PSS counts each page a process maps divided by the number of processes sharing it, so summing it
over a loader's main process and its workers counts a page shared after ``fork`` (the dataset's
memmap, torch's libraries) once, not once per worker: the memory the pipeline really costs.
Read with psutil (``memory_full_info``, which reads Linux's ``/proc/<pid>/smaps_rollup``). Only
Linux reports PSS: elsewhere the readings are ``None`` (see :func:`pss` for why not another number).

Example:
    >>> import os
    >>> pss(os.getpid()) is None or pss(os.getpid()) > 0
    True
    >>> with PeakPss() as peak:
    ...     block = bytearray(8 << 20)  # 8 MiB touched: it counts once written
    >>> peak.peak is None or peak.peak > 8 << 20
    True
"""

from __future__ import annotations

import os
import threading

import psutil

#: what a process that ended, or that we may not read, raises
GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def pss(pid: int) -> int | None:
    """The proportional set size of ``pid`` in bytes, or None (no such process, or the OS reports no PSS).

    Only Linux has PSS. macOS and Windows give the USS (pages no other process maps) and the RSS
    instead; summed over workers the first leaves out every shared page and the second counts each
    once per worker, so neither reads as what PSS means here: None says "not measured" honestly.
    """
    try:
        return getattr(psutil.Process(pid).memory_full_info(), "pss", None)
    except GONE:
        return None


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (workers, and their own workers), running now; [] if ``pid`` is gone."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except GONE:
        return []


def tree_pss(pid: int | None = None) -> int | None:
    """PSS of ``pid`` (default: this process) plus all its descendants, in bytes; None off Linux."""
    pid = os.getpid() if pid is None else pid
    own = pss(pid)
    if own is None:
        return None
    return own + sum(v for v in map(pss, children(pid)) if v is not None)


class PeakPss:
    """A context that samples :func:`tree_pss` of ``pid`` every ``interval`` s on a thread; ``.peak``
    is the largest reading in bytes (None off Linux). Sampling reads a small file: ~0.1 ms a read."""

    def __init__(self, pid: int | None = None, interval: float = 0.05):
        self.pid, self.interval, self.peak = pid, interval, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gpufeed-pss")

    def sample(self) -> None:
        v = tree_pss(self.pid)
        if v is not None and (self.peak is None or v > self.peak):
            self.peak = v

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakPss:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
