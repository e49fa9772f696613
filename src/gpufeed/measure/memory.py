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
import time

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
    """A context that samples :func:`tree_pss` of ``pid`` on a thread; ``.peak`` is the largest
    reading in bytes (None off Linux).

    A reading is not free: Linux walks the page tables of every mapping to add up PSS, about 0.1 ms
    for a small process but 17 ms for one that has read a 200 MB memmap (measured on the course's
    2-core machine). Sampled every 50 ms, that took a third of a core from the loader being
    measured, so the sampler paces itself: it waits at least ``interval`` s and at least
    ``1 / max_share`` times its last reading's time, to use at most ``max_share`` of one core.

    Args:
        pid: the process (default: this one); its descendants are counted with it.
        interval: the shortest wait between readings, in seconds.
        max_share: the most of one core the readings may take (0.02: 2%).
    """

    def __init__(self, pid: int | None = None, interval: float = 0.05, max_share: float = 0.02):
        if not 0 < max_share <= 1:
            raise ValueError(f"PeakPss(max_share={max_share}): a share of one core, in (0, 1]")
        self.pid, self.interval, self.max_share, self.peak = pid, interval, max_share, None
        self.readings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gpufeed-pss")

    def sample(self) -> float:
        """Takes one reading; returns the seconds it took."""
        start = time.perf_counter()
        v = tree_pss(self.pid)
        if v is not None and (self.peak is None or v > self.peak):
            self.peak = v
        self.readings += 1
        return time.perf_counter() - start

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            wait = max(self.interval, self.sample() / self.max_share)

    def __enter__(self) -> PeakPss:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
