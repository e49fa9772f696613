"""How many cores a pipeline keeps busy: CPU seconds of a process and its workers over wall seconds.

A loader that makes 5,000 images/s on 8 cores with 1.2 of them busy has 6.8 cores left to give
it; one at 7.9 of 8 is bound by the CPU. :class:`CoresBusy` counts the CPU time of every thread of
the process (torch's, DALI's, a prefetch thread) and of its descendants (DataLoader workers, their
own workers), those still running (psutil's ``cpu_times``, on Linux, macOS and Windows) and those
already ended and reaped (``getrusage(RUSAGE_CHILDREN)``, on Linux and macOS).

Example (CPU time asserted, not wall time: a busy machine may give the spin only part of a core):
    >>> import time
    >>> with CoresBusy() as busy:
    ...     start = time.process_time()
    ...     while time.process_time() - start < 0.2:  # one thread spins for 0.2 s of CPU
    ...         pass
    >>> busy.cpu_s >= 0.19, busy.cores <= 1.5, busy.wall_s >= busy.cpu_s / 1.5
    (True, True, True)
"""

from __future__ import annotations

import os
import time

import psutil

from gpufeed.measure.memory import GONE, children

try:
    import resource  # not on Windows
except ImportError:
    resource = None


def proc_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of ``pid`` and of its children it has already waited for (on
    Linux; macOS reports those as 0); None if there is no such process or we may not read it."""
    try:
        t = psutil.Process(pid).cpu_times()
    except GONE:
        return None
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


def _own_and_reaped_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for.

    ``getrusage`` rather than psutil's ``cpu_times`` of this process: it counts in microseconds
    rather than 10 ms clock ticks (a short block would read 0 or 0.01 s), and on macOS it has the
    reaped children, which psutil reports as 0 there.
    """
    if resource is None:  # Windows: no reaped children to ask about
        t = psutil.Process().cpu_times()
        return t.user + t.system
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # ended workers that were waited for
    return me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process (every thread), the children it has reaped, and the
    descendants still running: a count that only grows while a pipeline runs, whatever its workers do.

    A worker alive at the start and reaped before the end is counted both times, once live and
    once reaped, so a difference of two readings holds exactly its time in between.
    """
    live = sum(v for v in map(proc_cpu_seconds, children(os.getpid())) if v is not None)
    return _own_and_reaped_seconds() + live


class CoresBusy:
    """A context that measures the cores this process and its workers kept busy while it was open.

    After the block: ``cpu_s`` (CPU seconds of the process tree), ``wall_s`` and ``cores``
    (``cpu_s / wall_s``: 2.0 means two cores busy the whole time). Reading the process table costs
    well under a millisecond, at the start and the end only.
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
