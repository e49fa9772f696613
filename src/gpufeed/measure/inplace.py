"""``watch(loader)``: your training loop measured as it runs, without changing it or running it again.

:func:`gpufeed.measure.diagnose` drives a loop it is given; this watches the one you have::

    with gpufeed.measure.watch(train_loader) as feed:
        for images, targets in feed:          # your loop, unchanged
            train_step(images, targets)
    print(feed.report())                      # the loop as it ran
    print(feed.what_ifs(train_step_on_batch)) # a second step, when you ask: the loader alone, the step alone

Around each ``next()`` it takes the host's time and, on a GPU, two events
(:class:`gpufeed.measure.probe.Window`): how long the device sat idle waiting for that batch, which
a step that queues its work and returns hides from the host's clock. It counts the host syncs of
the loop's own thread and the line of code that made each (:class:`gpufeed.measure.probe.SyncLog`;
``torch.cuda.set_sync_debug_mode("warn")`` for the block, then restored). Nothing else is added to
the loop: no op-by-op hook, no profiler, no extra step. The first ``skip`` batches are not counted
(the workers' start, allocation, cuDNN's autotuning).

:meth:`Watch.what_ifs` is the explicit second step: it starts the loader again and measures what
:func:`~gpufeed.measure.diagnose` measures besides the loop (a look inside a few steps, the loader
alone, the step on a batch kept on the device, a DataLoader's suggested settings re-timed), and
returns the full report with its findings. It trains: ``keep=`` as for diagnose.

**DDP.** Under ``torch.distributed``, each rank watches its own loader and :meth:`Watch.report`
gathers every rank's numbers (a collective: call it on every rank); rank 0's report names the rank
that waits longest for its batches, the one the others wait for inside the step's all-reduce.

Example:
    >>> import time
    >>> def loader():
    ...     for _ in range(6):
    ...         time.sleep(0.002)  # 2 ms to make a batch
    ...         yield torch.zeros(4, 3, 8, 8)
    >>> with watch(loader()) as feed:
    ...     for batch in feed:
    ...         time.sleep(0.010)  # your 10 ms step
    >>> r = feed.report()
    >>> r.batches, r.items, r.bound
    (5, 4, 'compute')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch

from gpufeed.data.movers import batch_size, leaves
from gpufeed.measure import dataloaders
from gpufeed.measure.batches import Batches, DiagnoseError, checked
from gpufeed.measure.diagnosis import conclude, first_batch, kept, look, loop_report, what_ifs
from gpufeed.measure.probe import DeviceClock, SyncLog, Window
from gpufeed.measure.report import Report

#: The kind of sync counted in place, where no op hook names it (:meth:`Watch.what_ifs` names them).
IN_PLACE = "not named in place"


def watch(loader: Iterable, *, skip: int = 1, events: Callable | None = None) -> Watch:
    """The in-place mode (module docstring): ``with watch(loader) as feed: for batch in feed: ...``.

    Args:
        loader: your loader, as your loop iterates it (each ``for`` over ``feed`` is one ``iter()``).
        skip: the first batches not counted.
        events: the device's marks, as :func:`gpufeed.measure.diagnose` takes them (default: CUDA
            events on a GPU, the host's clock elsewhere).
    """
    if skip < 0:
        raise DiagnoseError(f"watch: skip is 0 or more (got {skip})")
    return Watch(loader, skip, events)


class Watch:
    """What :func:`watch` returns: iterate it as your loader; :meth:`report` and :meth:`what_ifs` after."""

    def __init__(self, loader: Iterable, skip: int = 1, events: Callable | None = None):
        self.loader, self.skip, self.events = loader, skip, events
        self.clock = DeviceClock(events)
        self.window = Window(self.clock)
        self.log, self.loop, self.taken, self.starts = None, None, 0, []
        self.items = self.device = None
        self.ranks: list = []

    def __enter__(self) -> Watch:
        self.log = SyncLog().__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.log.__exit__(*exc)
        try:
            self.loop = self.window.end(self.skip, drain=False)
        except ValueError:  # no batch left to count: report() says so, in one line
            self.loop = None

    def __iter__(self):
        if self.log is None:
            raise DiagnoseError("watch: iterate the feed inside its block: with gpufeed.measure.watch(loader) as "
                                "feed: for batch in feed: ...")
        start = time.perf_counter()
        it = iter(self.loader)
        self.starts.append(time.perf_counter() - start)
        return _Feed(self, it)

    def report(self) -> Report:
        """The loop as it ran: the period, the wait, the device's idle share (on a GPU), the syncs; what-ifs
        not measured. Under ``torch.distributed`` every rank must call it (it gathers the ranks)."""
        if self.loop is None:
            raise DiagnoseError(f"watch: {self.taken} batches seen, {self.skip} of them skipped: nothing to report "
                                "(leave the with block first, and take more batches)")
        r = loop_report(self.items, self.loop, self._seen(), self.device, start_s=self.starts[0], loader=self.loader)
        r.ranks = self.ranks = _gathered(r)
        from gpufeed.measure.findings import find

        r.findings = find(r)
        return r

    def _seen(self) -> dict:
        """What the loop itself showed besides its times: the syncs (not named by kind) and their lines."""
        seen = {"probed": 1, "copies": [], "syncs": None, "sync_sites": {}}
        if self.log.on:
            seen.update(syncs={IN_PLACE: self.log.count / self.taken},
                        sync_sites={k: v / self.taken for k, v in self.log.sites.items()})
        return seen

    def what_ifs(self, step: Callable, *, batches: int = 20, probe: int = 3, device: str | None = None,
                 keep: Iterable = (), fixes: float = 10.0) -> Report:
        """The second step: a look inside ``probe`` steps, the loader alone and the step on a batch kept
        on the device (``batches`` each), a DataLoader's suggested settings re-timed within ``fixes``
        seconds; the full report with its findings. It starts the loader again and trains (``keep=``
        as :func:`gpufeed.measure.diagnose` takes it)."""
        checked(step)
        if self.loop is None:
            self.report()  # says in one line why there is nothing to add to
        ahead = dataloaders.prefetched(self.loader)
        with kept(keep):
            feed = Batches(self.loader, batches + 2 * probe + 2 * ahead + 2)
            _, spare = first_batch(next(feed))
            seen = look(feed, step, probe)  # the copies and the syncs by kind; the syncs' lines from the loop
            seen["sync_sites"] = self._seen()["sync_sites"] or seen["sync_sites"]
            device = device or (seen["copies"][0].device if seen["copies"] else self.device)
            r = loop_report(self.items, self.loop, seen, device, start_s=self.starts[0], loader=self.loader)
            r.ranks = self.ranks
            what_ifs(r, feed, step, spare, batches, self.clock, ahead)
            conclude(r, self.loader, feed, self.clock, fixes)
        return r


class _Feed:
    """One epoch of the loader, each ``next()`` timed by the :class:`Watch`'s window."""

    def __init__(self, owner: Watch, it):
        self.owner, self.it = owner, it

    def __iter__(self):
        return self

    def __next__(self):
        w = self.owner.window
        w.before_next()
        try:
            batch = next(self.it)
        except BaseException:
            w.no_batch()
            raise
        w.after_next()
        owner = self.owner
        owner.taken += 1
        if owner.items is None:
            owner.items = batch_size(batch)
            if not owner.items:
                raise DiagnoseError("watch: the loader's batch holds no tensor with a batch dimension (got "
                                    f"{type(batch).__name__})")
            owner.device = str(next((t.device for t in leaves(batch)), "cpu"))
        return batch


def _gathered(r: Report) -> list:
    """Under ``torch.distributed``: every rank's numbers on rank 0 (an all-gather), else []."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return []
    mine = {"rank": dist.get_rank(), "rate": r.rate, "wait_s": r.wait_s, "wait_fraction": r.wait_fraction,
            "period_s": r.period_s}
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return sorted(every, key=lambda d: d["rank"]) if dist.get_rank() == 0 else []

