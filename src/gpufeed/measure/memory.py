"""Peak resident memory of a process and its workers: the proportional set size (PSS), sampled.

PSS counts each page a process maps divided by the number of processes sharing it, so summing it
over a loader's main process and its workers counts a page shared after ``fork`` (the dataset's
memmap, torch's libraries) once, not once per worker: the memory the pipeline really costs.
Linux only (``/proc/<pid>/smaps_rollup``); elsewhere the readings are ``None``.

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
from pathlib import Path


def pss(pid: int) -> int | None:
    """The proportional set size of ``pid`` in bytes, or None (no such process, or no smaps_rollup)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024  # the file says kB
    return None


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (workers, and their own workers), from ``/proc/<pid>/task/*/children``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


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
