"""A CPU stand-in of a GPU's work queue, for the tests of ``gpufeed.measure.diagnose`` and ``watch``.

A real training step on a GPU queues its kernels and returns; the GPU runs them later, in order,
while the host goes on (to ``next(loader)``, say). :class:`DeviceQueue` does the same on the CPU:
one thread runs the work queued on it in order (each piece sleeps its length), and ``launch``
returns at once. :meth:`DeviceQueue.step` is the loop issue 48 describes: it waits for the previous
step's device work (as a blocking copy or a full launch queue makes a real step wait), queues its
own, and returns. :class:`Mark` is its ``torch.cuda.Event``: ``record()`` puts a mark in the
queue, stamped when the queue reaches it; ``elapsed_time`` in milliseconds, ``synchronize()``,
``query()``, the methods diagnose's device clock calls (``events=queue.event``).
:class:`Sleepy` and :class:`PerSample` are a loader and a dataset whose work is a sleep of known length.
:func:`when_quiet` runs a test that reads such sleeps again when a busy machine stretched them.

Example:
    >>> q = DeviceQueue()
    >>> a, b = q.event(), q.event()
    >>> a.record(); q.launch(0.01); b.record(); b.synchronize()
    >>> 9 < a.elapsed_time(b) < 500
    True
    >>> q.close()
"""

from __future__ import annotations

import functools
import queue
import threading
import time

import torch
from torch.utils.data import Dataset


class Mark:
    """A point in a :class:`DeviceQueue`: the time the queue reached it (``torch.cuda.Event``'s
    ``record``, ``query``, ``synchronize`` and ``elapsed_time``)."""

    def __init__(self, device: DeviceQueue):
        self.device, self.at, self.reached = device, None, threading.Event()

    def record(self) -> None:
        self.at, self.reached = None, threading.Event()
        self.device.put(self)

    def query(self) -> bool:
        return self.reached.is_set()

    def synchronize(self) -> None:
        if not self.reached.wait(60):
            raise TimeoutError("the stand-in device never reached this mark")

    def elapsed_time(self, end: Mark) -> float:
        """Milliseconds from this mark to ``end`` (both reached)."""
        return (end.at - self.at) * 1e3


class DeviceQueue:
    """One thread that runs queued work in order: ``launch(seconds)`` queues a piece and returns."""

    def __init__(self):
        self.work: queue.Queue = queue.Queue()
        self.busy_s = 0.0  # the device's busy time, all pieces together
        self.thread = threading.Thread(target=self._run, daemon=True, name="stand-in device")
        self.thread.start()

    def _run(self) -> None:
        while (item := self.work.get()) is not None:
            if isinstance(item, Mark):
                item.at = time.perf_counter()
                item.reached.set()
            else:
                time.sleep(item)
                self.busy_s += item
            self.work.task_done()
        self.work.task_done()

    def put(self, item) -> None:
        self.work.put(item)

    def launch(self, seconds: float) -> None:
        """Queues ``seconds`` of device work; returns at once."""
        self.put(seconds)

    def synchronize(self) -> None:
        """The host waits until everything queued so far has run."""
        self.work.join()

    def event(self) -> Mark:
        """A new mark (diagnose's ``events=`` factory)."""
        return Mark(self)

    def step(self, seconds: float):
        """A training step of ``seconds`` of device work that returns before it is done."""
        def step(batch) -> None:
            self.synchronize()  # the previous step's work first (a blocking copy would wait for it)
            self.launch(seconds)
        return step

    def close(self) -> None:
        self.work.put(None)
        self.thread.join(5)


class Sleepy:
    """A re-iterable loader: ``n`` batches of 4 images, each after ``ms`` milliseconds on the host."""

    def __init__(self, ms: float, n: int = 100):
        self.ms, self.n = ms, n

    def __iter__(self):
        for _ in range(self.n):
            time.sleep(self.ms / 1e3)
            yield torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)


class PerSample(Dataset):
    """A map-style dataset read one sample at a time, each read taking ``ms`` (a sleep: it takes no core,
    so DataLoader workers help)."""

    def __init__(self, n: int = 32, ms: float = 1.0):
        self.n, self.ms = n, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.ms:
            time.sleep(self.ms / 1e3)
        return torch.zeros(3, 8, 8), i % 2


def when_quiet(test, tries: int = 3):
    """Runs ``test`` up to ``tries`` times, until it passes: its loops are sleeps of known length, and
    on a busy machine (the other test worker, a build beside it) a thread woken late stretches a period
    past what the assertions read. A test that fails every time fails as it would have."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        for attempt in range(tries):
            try:
                return test(*args, **kwargs)
            except AssertionError:
                if attempt == tries - 1:
                    raise
                time.sleep(0.5)  # let what stretched it pass

    return run
