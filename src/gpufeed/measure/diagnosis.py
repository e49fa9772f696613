"""``diagnose(loader, step)``: where your own training loop spends its time, and what to change.

Point it at any iterable that yields batches (a ``DataLoader``, :class:`gpufeed.data.ImageLoader`,
DALI's iterator, a generator; a batch: a tensor, or tuples, lists, named tuples, dicts and other
mappings, TensorDicts or tensorclasses of them, nested) and the function that trains on one batch;
it runs them as they are and measures, as the course does for its own pipelines
(``notebooks/02_profiling.ipynb`` introduces it, ``notebooks/11_together.ipynb`` closes with it):

1. **your loop**: ``batches`` steps of ``next(iterator)`` then ``step(batch)``, after ``warmup``
   untimed ones and with the batches a DataLoader's workers made ahead taken first; per batch, the
   host's time inside ``next()`` and, on a GPU, the device's idle time meanwhile, from events
   around each ``next()`` (:class:`gpufeed.measure.probe.Window`): a step that queues its work and
   returns makes the host wait in ``next()`` while the device still works, and only the device's
   clock tells that from waiting for data;
2. **a look inside** ``probe`` more steps, not timed (:mod:`gpufeed.measure.probe`): the
   host-to-device copies (bytes, dtype, pinned or pageable, blocking or not, which stream), the
   host syncs of the loop's own thread named by kind and by line; on a GPU, ``probe`` further steps
   under the profiler after a warm-up step: the device's time computing, copying and idle;
3. **the two what-ifs** of lesson 11: the loader alone (images/s; the device synchronised before
   and after, the made-ahead batches taken first), and the step on one batch kept on the device.
   They cap what a faster loader could give (:attr:`gpufeed.measure.report.Report.best_speedup`).

Then :mod:`~gpufeed.measure.findings` states what to change, each finding with the numbers that
back it and the lesson that shows how; for a DataLoader the settings it suggests are re-timed
first, within ``fixes`` seconds (:mod:`~gpufeed.measure.dataloaders`), and suggested only with a
measured gain. Nothing is stated that was not measured. Every bad input or failure is one
:class:`~gpufeed.measure.batches.DiagnoseError` line, the original chained. To measure a loop as
it runs instead, without driving it, see :func:`gpufeed.measure.watch`.

**It trains, and it takes batches.** The step runs ``warmup + 2 * batches + probe + 2`` times
(``probe + 1`` more on a GPU). The loader gives ``warmup + 2 * batches + probe + 1`` batches
(``probe + 1`` more on a GPU), up to ``2 * num_workers * prefetch_factor`` more taken and dropped
before the timed windows, and what re-timing a DataLoader's settings takes from it: a one-shot
iterator loses them all, a DataLoader's sampler moves on (a new epoch starts where one ends). Pass copies of your model and optimizer, or name what the step
changes in ``keep=(model, optimizer, scheduler, scaler)``: their ``state_dict`` is kept in host
memory and put back, with torch's CPU and CUDA random states and Python's and NumPy's. Schedulers,
a ``GradScaler``, an EMA are restored only if named. Global state it touches (the sync debug mode,
the warning filters, the profiler, a dispatch mode on the thread) is restored; it sets nothing else.

Example:
    >>> import time
    >>> def loader():  # batches of 4 images, at once
    ...     while True:
    ...         yield torch.zeros(4, 3, 8, 8)
    >>> report = diagnose(loader(), lambda batch: time.sleep(0.010), batches=5, warmup=1)  # a 10 ms step
    >>> report.bound, report.items
    ('compute', 4)
    >>> [f.key for f in report.findings]
    ['loader-fine']
"""

from __future__ import annotations

import contextlib
import random
import statistics
from collections.abc import Callable, Iterable

import torch

from gpufeed.data.movers import batch_size, leaves, to_device, tree_map
from gpufeed.measure import dataloaders
from gpufeed.measure.batches import Batches, DiagnoseError, call, checked, line, out_of_memory
from gpufeed.measure.findings import find
from gpufeed.measure.probe import (
    OUTSIDE,
    DeviceClock,
    Ops,
    SyncLog,
    Window,
    chunks,
    profiled,
    real_cuda,
)
from gpufeed.measure.report import Report


def diagnose(loader: Iterable, step: Callable, *, batches: int = 20, warmup: int = 3, probe: int = 3,
             device: str | None = None, keep: Iterable = (), events: Callable | None = None,
             fixes: float = 10.0) -> Report:
    """Measures your loop (``for batch in loader: step(batch)``) and says what to change.

    Args:
        loader: any iterable of batches (the images first, or a TensorDict); started again when it
            ends, if it can be.
        step: trains on one batch as your loop does (copies it to the device itself, or not).
        batches: timed batches of each measurement (at least 2; 5 or more for its verdicts).
        warmup: untimed steps first (allocation, cuDNN autotuning, the workers' start).
        probe: steps watched for copies and syncs (and as many profiled on a GPU), not timed.
        device: where a batch is kept for the what-if "the step on resident batches"; default:
            where the loop copied it (``"cuda:1"`` keeps its index), else where it was.
        keep: a model, an optimizer, a scheduler, a GradScaler...: their ``state_dict`` is restored
            afterwards, with the random states (the step trains).
        events: makes a mark on the device's queue (``torch.cuda.Event(enable_timing=True)``, the
            default on a GPU; None on a CPU: the host's clock); for a device that queues work
            another way, anything with ``record()``, ``synchronize()`` and ``elapsed_time(other)``.
        fixes: seconds a DataLoader's suggested settings may take to be re-timed (0: none).

    Returns:
        A :class:`~gpufeed.measure.report.Report`; ``print(report)`` shows the table and the findings.

    Raises:
        DiagnoseError: in one line, for bad input or a failure of the loader or the step.
    """
    checked(step)
    if batches < 2 or warmup < 0 or probe < 1:
        raise DiagnoseError(f"diagnose: batches must be at least 2 (got {batches}), warmup at least 0 "
                            f"(got {warmup}), probe at least 1 (got {probe})")
    clock, ahead = DeviceClock(events), dataloaders.prefetched(loader)
    with kept(keep):
        feed = Batches(loader, warmup + 2 * batches + 2 * probe + 2 * ahead + 3)
        first = next(feed)
        items, spare = first_batch(first)
        call(step, first, "batch 0")
        for _ in range(1, warmup):
            call(step, next(feed), f"batch {feed.taken - 1}")
        # 1. your loop, timed: what the workers made ahead taken first; the first batch after it not counted
        feed.drain(ahead)
        window = Window(clock)
        for _ in range(batches + 1):
            window.before_next()
            batch = next(feed)
            window.after_next()
            call(step, batch, f"batch {feed.taken - 1}")
        loop = window.end(skip=1)
        del batch
        # 2. a look inside, 3. the what-ifs
        seen = look(feed, step, probe)
        device = device or _device(seen["copies"], first)
        report = loop_report(items, loop, seen, device, start_s=feed.start_s, loader=loader)
        what_ifs(report, feed, step, spare, batches, clock, ahead)
        conclude(report, loader, feed, clock, fixes)
    return report


def first_batch(batch) -> tuple[int, object]:
    """The images per batch, and a copy of the batch for the what-if (a loader may reuse its buffers)."""
    items = batch_size(batch)
    if not items:
        raise DiagnoseError("diagnose: the loader's batch holds no tensor with a batch dimension (got "
                            f"{type(batch).__name__}); yield tensors, or tuples, lists, dicts or TensorDicts of them")
    return items, tree_map(torch.Tensor.clone, batch)


def _device(copies: list, batch) -> str:
    """Where the step computes: where the loop copied its batch (with its index), else where the batch was."""
    if copies:
        return copies[0].device
    return str(next((t.device for t in leaves(batch)), "cpu"))


def look(feed: Batches, step: Callable, n: int) -> dict:
    """``n`` steps watched (:class:`~gpufeed.measure.probe.Ops`, :class:`~gpufeed.measure.probe.SyncLog`):
    the copies, the syncs by kind and by line, per step; on a GPU ``n`` more, profiled
    (:func:`~gpufeed.measure.probe.profiled`)."""
    log = SyncLog()
    ops = Ops(log)
    with log:
        for _ in range(n):
            with ops:
                ops.where = "loader"
                batch = next(feed)
                ops.where = "step"
                call(step, batch, f"batch {feed.taken - 1}")
    out = {"probed": n, "copies": ops.copies, "syncs": None, "sync_sites": {k: v / n for k, v in log.sites.items()}}
    if log.on:
        syncs = dict(ops.syncs)
        if log.count - sum(syncs.values()) - ops.copy_syncs > 0:
            syncs[OUTSIDE] = log.count - sum(syncs.values()) - ops.copy_syncs
        out["syncs"] = {k: v / n for k, v in syncs.items()}
    if real_cuda():
        out.update(profiled(lambda i: call(step, next(feed), f"batch {feed.taken - 1}"), n) or {})
    return out


def loop_report(items: int, loop: dict, seen: dict, device: str, **more) -> Report:
    """A report of the loop's window (:meth:`gpufeed.measure.probe.Window.end`) and what ``look`` saw."""
    loader = more.pop("loader", None)
    mean = statistics.fmean
    return Report(items=items, batches=loop["batches"], device=device, period_s=mean(loop["period"]),
                  host_wait_s=mean(loop["host_wait"]),
                  device_wait_s=None if loop["device_wait"] is None else mean(loop["device_wait"]),
                  loop_s=chunks(loop["period"]), probed=seen["probed"], copies=seen["copies"],
                  syncs=seen["syncs"], sync_sites=seen["sync_sites"], copy_s=seen.get("copy_s"),
                  compute_s=seen.get("compute_s"), sync_s=seen.get("sync_s"), gpu_idle=seen.get("gpu_idle"),
                  loader_settings=dataloaders.settings(loader), cores=_cores(), **more)


def _cores() -> int:
    from gpufeed.measure.machine import usable_cores

    return usable_cores()


def what_ifs(report: Report, feed: Batches, step: Callable, batch, batches: int, clock: DeviceClock,
             ahead: int) -> None:
    """Fills in ``report``'s two what-ifs: the loader alone (``batches`` batches, the made-ahead ones
    taken first, the device synchronised before and after) and the step on ``batch`` kept on
    ``report.device`` (as yielded if the step refuses it there; out of memory is an error)."""
    feed.drain(ahead)
    clock.sync()
    window = Window(clock)
    for _ in range(batches):
        window.before_next()
        next(feed)
        window.after_next()
    alone = window.end()["period"]
    resident = to_device(batch, report.device)
    try:
        step(resident)
    except Exception as e:
        if out_of_memory(e):
            raise DiagnoseError(f"diagnose: your step ran out of memory on a batch kept on {report.device} (the "
                                f"what-if): {line(e)}; pass a smaller batch, or device='cpu'") from e
        report.resident, report.resident_note = False, f"{type(e).__name__}: {line(e)}"
        resident = batch
        call(step, resident, "the batch kept for the what-if")
    window = Window(clock)
    for _ in range(batches):
        window.before_next()
        window.after_next()
        call(step, resident, f"the batch kept on {report.device} (the what-if)")
    model = window.end()["period"]
    report.loader_s, report.model_s = chunks(alone), chunks(model)
    report.loader_rate, report.model_rate = report.items / statistics.fmean(alone), report.items / statistics.fmean(model)
    report.dataset_ms = dataloaders.dataset_ms(feed.loader) if report.loader_settings else {}


def conclude(report: Report, loader, feed: Batches, clock: DeviceClock, fixes: float) -> None:
    """The findings; the DataLoader settings they suggest re-timed within ``fixes`` seconds, then the
    findings again (a setting that measured no gain is not suggested)."""
    report.findings = find(report)
    todo = dataloaders.candidates(loader, [f.key for f in report.findings], report.cores, real_cuda())
    if todo and fixes > 0 and report.loader_rate:
        report.retimed = dataloaders.retime(loader, todo, feed, items=report.items,
                                            batch_s=report.items / report.loader_rate, start_s=feed.start_s,
                                            device=report.device, sync=clock.sync, budget_s=fixes)
        report.findings = find(report)


@contextlib.contextmanager
def kept(objects: Iterable):
    """Puts back, on leaving, the ``state_dict`` of each object (a model, an optimizer, a scheduler,
    a GradScaler; kept in host memory) and, when any is named, the random states: torch's CPU and
    CUDA generators, Python's and NumPy's."""
    objects = list(objects)
    for o in objects:
        if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict")):
            raise DiagnoseError(f"diagnose: keep= takes objects with state_dict() and load_state_dict() (a model, "
                                f"an optimizer, a scheduler, a GradScaler; got {type(o).__name__})")
    saved = [(o, _on_host(o.state_dict())) for o in objects]
    states = _random_states() if objects else None
    try:
        yield
    finally:
        for o, state in saved:
            o.load_state_dict(state)
        if states is not None:
            _set_random_states(states)


def _on_host(state):
    """A ``state_dict`` with every tensor copied to host memory (its mappings' types and attributes
    kept: a module's ``_metadata``)."""
    return tree_map(lambda t: t.detach().cpu() if t.device.type != "cpu" else t.detach().clone(), state)


def _random_states() -> dict:
    import numpy as np

    cuda = real_cuda() and torch.cuda.is_initialized()
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if cuda else None,
            "python": random.getstate(), "numpy": np.random.get_state()}


def _set_random_states(states: dict) -> None:
    import numpy as np

    torch.set_rng_state(states["torch"])
    if states["cuda"] is not None:
        torch.cuda.set_rng_state_all(states["cuda"])
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
