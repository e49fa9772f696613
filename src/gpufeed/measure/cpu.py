"""How many cores a pipeline keeps busy: CPU seconds of a process and its workers over wall seconds.

A loader that makes 5,000 images/s on 8 cores with 1.2 of them busy has 6.8 cores left to give
it; one at 7.9 of 8 is bound by the CPU. :class:`CoresBusy` counts the CPU time of every thread of
the process (torch's, DALI's, a prefetch thread) and of its descendants (DataLoader workers, their
own workers), those still running (``/proc/<pid>/stat``) and those already ended and reaped
(``getrusage(RUSAGE_CHILDREN)``). Linux reads the workers; elsewhere only this process counts.

Example:
    >>> with CoresBusy() as busy:
    ...     _ = sum(i * i for i in range(200_000))  # one thread, busy the whole time
    >>> 0.3 < busy.cores < 1.5 and busy.cpu_s > 0 and busy.wall_s > 0
    True
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

from gpufeed.measure.memory import children

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc's unit of CPU time, per second


def proc_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of ``pid`` and of its children it has already waited for, from
    ``/proc/<pid>/stat`` in clock ticks (10 ms); None if there is no such process or no ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": the name may hold spaces
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])  # fields 14-17 of proc(5)
    return (utime + stime + cutime + cstime) / _TICK


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process (every thread), the children it has reaped, and the
    descendants still running: a count that only grows while a pipeline runs, whatever its workers do.

    A worker alive at the start and reaped before the end is counted both times, once live and
    once reaped, so a difference of two readings holds exactly its time in between.
    """
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # ended workers that were waited for
    live = sum(v for v in map(proc_cpu_seconds, children(os.getpid())) if v is not None)  # none without /proc
    return me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime + live


class CoresBusy:
    """A context that measures the cores this process and its workers kept busy while it was open.

    After the block: ``cpu_s`` (CPU seconds of the process tree), ``wall_s`` and ``cores``
    (``cpu_s / wall_s``: 2.0 means two cores busy the whole time). Reading ``/proc`` costs well
    under a millisecond, at the start and the end only.
    """

    def __init__(self):
        self.cpu_s = self.wall_s = self.cores = None

    def __enter__(self) -> CoresBusy:
        self._cpu0, self._t0 = tree_cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = max(0.0, tree_cpu_seconds() - self._cpu0)
        self.cores = self.cpu_s / self.wall_s if self.wall_s > 0 else None
