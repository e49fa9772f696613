"""``diagnose(loader, step)``: where your own training loop spends its time, and what to change.

Point it at any iterable that yields batches (a ``DataLoader``, :class:`gpufeed.data.ImageLoader`,
DALI's iterator, a generator) and the function that trains on one batch; it runs them as they are
and measures, as the course does for its own pipelines (``notebooks/02_profiling.ipynb`` introduces
it, ``notebooks/11_together.ipynb`` closes with it):

1. **your loop**: ``batches`` steps of ``next(iterator)`` then ``step(batch)``, after ``warmup``
   untimed ones; the period per batch, split into waiting for the next batch (the time inside
   ``next``), the step's call, and the rest (the loop itself; on CUDA the GPU's queued work, which
   the final synchronisation waits for);
2. **a look inside** a few more steps (``probe``), not timed: the host-to-device copies the loader
   and the step make (bytes, dtype, from pinned or pageable memory, on which stream), the host
   syncs (``torch.cuda.set_sync_debug_mode("warn")``, restored after: on a GPU and under the CUDA
   simulator alike) and, on a real GPU, a profiler trace: copy time, time the host waited, GPU idle;
3. **the two what-ifs** of lesson 11: the loader alone (images/s), and the step on one batch kept
   on the device (images/s), from which the loader efficiency and the most a faster loader could
   give (:func:`~gpufeed.measure.findings.efficiency_bounds`).

Then :mod:`~gpufeed.measure.findings` states what to change, each finding with the numbers that
back it and the lesson that shows how; nothing is stated that was not measured.

**It trains**: the step runs about ``warmup + 2 * batches + probe + 1`` times. Pass a copy of your
model and optimizer, or name them in ``keep=(model, optimizer)`` and their ``state_dict`` is put
back afterwards. Global state it touches (the sync debug mode, the profiler, an inspection mode on
the thread) is restored; it sets nothing else.

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
import copy
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpufeed.measure.findings import COMPUTE_BOUND, DATA_BOUND, efficiency_bounds, find, say_all
from gpufeed.measure.harness import cuda_sync, format_rate, format_time
from gpufeed.measure.wording import times

#: The bound in words.
BOUND_WORDS = {"data": "data bound", "compute": "compute bound", "balanced": "between data and compute bound"}
#: torch's words for a sync that ``set_sync_debug_mode("warn")`` reports (c10/cuda/CUDAFunctions.cpp).
SYNC_WARNING = "called a synchronizing CUDA operation"


class DiagnoseError(ValueError):
    """Bad input to :func:`diagnose`: an empty loader, a step that raises, too few batches."""


@dataclass(frozen=True)
class Copy:
    """One host-to-device copy seen during the probe: where it was made (``"loader"`` or ``"step"``),
    its bytes and dtype, whether its source was pinned, ``non_blocking``, and whether it was issued
    on the default stream (where the step's compute runs, unless the loop made a side stream)."""

    where: str
    nbytes: int
    dtype: str
    shape: tuple
    pinned: bool
    non_blocking: bool
    default_stream: bool


class _Watch(TorchDispatchMode):
    """Notes every host-to-device copy and every ``.item()`` on a device tensor, and changes nothing."""

    def __init__(self):
        super().__init__()
        self.where, self.copies, self.items = "step", [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        src = dst = None
        if func is torch.ops.aten._to_copy.default and isinstance(kwargs.get("device"), torch.device):
            src, dst, blocking = args[0], kwargs["device"], not kwargs.get("non_blocking", False)
        elif func is torch.ops.aten.copy_.default:
            src, dst = args[1], args[0].device
            blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if src is not None and src.device.type == "cpu" and dst.type == "cuda":
            self.copies.append(Copy(self.where, src.nbytes, str(src.dtype).replace("torch.", ""), tuple(src.shape),
                                    bool(src.is_pinned()), not blocking,
                                    torch.cuda.current_stream() == torch.cuda.default_stream()))
        elif func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "cuda":
            self.items += 1
        return func(*args, **kwargs)


@dataclass
class Report:
    """What :func:`diagnose` measured (seconds per batch unless named otherwise) and found.

    Attributes:
        items: images per batch (the first dimension of the batch's first tensor).
        batches: timed batches of your loop.
        device: where the step computes (``"cuda"`` when the loop copies there, else the batch's device).
        period_s, wait_s, step_s: your loop's time per batch, the time inside ``next()``, inside ``step()``.
        loader_rate, model_rate: the two what-ifs, images/s: the loader alone; the step on a resident batch.
        resident: the model rate was measured on a batch kept on the device (False: as yielded,
            because the step refused a device batch).
        copies: the host-to-device copies of the ``probed`` steps (:class:`Copy`).
        syncs_per_step, item_calls_per_step: host syncs the debug mode reported, and ``.item()`` calls,
            per probed step (None without CUDA).
        copy_s, sync_s, gpu_idle: from the profiler trace on a real GPU, per step (None elsewhere).
        start_s: the time ``iter(loader)`` took (worker start-up, for a DataLoader).
        loader_settings: a DataLoader's settings, read from the object (empty for other loaders).
        dataset_ms: per-image milliseconds of a DataLoader's dataset: ``sample`` (``dataset[i]``),
            ``decode`` and ``transform`` where the dataset exposes them (a torchvision ``ImageFolder``).
        findings: what to change (:class:`gpufeed.measure.findings.Finding`), each with its evidence.
    """

    items: int
    batches: int
    device: str
    period_s: float
    wait_s: float
    step_s: float
    loader_rate: float
    model_rate: float
    resident: bool = True
    probed: int = 1
    copies: list[Copy] = field(default_factory=list)
    syncs_per_step: float | None = None
    item_calls_per_step: float | None = None
    copy_s: float | None = None
    sync_s: float | None = None
    gpu_idle: float | None = None
    start_s: float | None = None
    loader_settings: dict = field(default_factory=dict)
    dataset_ms: dict = field(default_factory=dict)
    cores: int = 1
    findings: list = field(default_factory=list)

    @property
    def wait_fraction(self) -> float:
        """The share of the period spent waiting for the next batch."""
        return self.wait_s / self.period_s

    @property
    def bound(self) -> str:
        """``"data"`` (waits at least :data:`DATA_BOUND` of the period), ``"compute"`` (at most
        :data:`COMPUTE_BOUND`) or ``"balanced"``."""
        return "data" if self.wait_fraction >= DATA_BOUND else "compute" if self.wait_fraction <= COMPUTE_BOUND \
            else "balanced"

    @property
    def rate(self) -> float:
        """Your loop's images/s."""
        return self.items / self.period_s

    @property
    def efficiency(self) -> float:
        """Loader efficiency: your loop's rate over the step's on a resident batch (1.0: never waits)."""
        return self.rate / self.model_rate

    @property
    def best_speedup(self) -> float:
        """The most any faster loader could speed your loop up: to the period without its wait (measured in
        the same run as the wait; the what-if on resident batches, taken at another moment, is noisier)."""
        return self.period_s / max(self.period_s - self.wait_s, 1e-12)

    def table(self) -> str:
        """The period, split, and the what-ifs, as a short text table."""
        p = self.period_s
        rows = [("your loop, per batch", format_time(p), f"{format_rate(self.rate, 'images/s')}"),
                ("  waiting for the next batch", format_time(self.wait_s), f"{self.wait_s / p:.0%}"),
                ("  in the step", format_time(self.step_s), f"{self.step_s / p:.0%}")]
        if self.copy_s is not None:
            rows.append(("    of it host-to-device copy", format_time(self.copy_s), f"{self.copy_s / p:.0%}"))
        if self.sync_s is not None:
            rows.append(("    of it the host waiting for the GPU", format_time(self.sync_s), f"{self.sync_s / p:.0%}"))
        rows.append(("  the rest (the loop, queued GPU work)", format_time(max(0.0, p - self.wait_s - self.step_s)),
                     f"{max(0.0, p - self.wait_s - self.step_s) / p:.0%}"))
        if self.syncs_per_step is not None:
            rows.append(("host syncs per step", f"{self.syncs_per_step:g}", ""))
        if self.gpu_idle is not None:
            rows.append(("GPU idle (profiled steps)", f"{self.gpu_idle:.0%}", ""))
        rows += [("what-if: the loader alone", format_rate(self.loader_rate, "images/s"), ""),
                 ("what-if: the step on one batch " + (f"kept on {self.device}" if self.resident else "as yielded"),
                  format_rate(self.model_rate, "images/s"), ""),
                 ("loader efficiency", f"{self.efficiency:.2f}", BOUND_WORDS[self.bound]),
                 ("  from the two what-ifs alone", "{:.2f} to {:.2f}".format(*efficiency_bounds(
                     self.loader_rate, self.model_rate)), "nothing overlapping, to all of it")]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{a.ljust(width)}  {b:>14}  {c}".rstrip() for a, b, c in rows)

    def sentences(self) -> str:
        """What the numbers mean, in a few sentences (ratios worded by :mod:`~gpufeed.measure.wording`)."""
        head = (f"Your loop trains {format_rate(self.rate, 'images/s')} and waits for the next batch "
                f"{self.wait_fraction:.0%} of the time: {BOUND_WORDS[self.bound]}. ")
        alone = (f"The loader alone makes {format_rate(self.loader_rate, 'images/s')}, "
                 f"{times(self.loader_rate / self.model_rate, 'the step on batches already there', flat=0.05)} "
                 f"({format_rate(self.model_rate, 'images/s')}); ")
        gain = (f"a loader that never kept it waiting would make your loop at most {times(self.best_speedup, flat=0.05)}."
                if self.best_speedup >= 1.05 else "a faster loader would not speed your loop up.")
        noise = (" (The step alone measured slower than inside your loop: the machine was busy; take more batches.)"
                 if self.efficiency > 1.05 else "")
        return head + alone + gain + noise + "\n" + say_all(self.findings)

    def __str__(self) -> str:
        return self.table() + "\n\n" + self.sentences()

    def plot(self, ax=None, title: str = ""):
        """Your loop's period as one stacked bar (milliseconds per batch): waiting, copy, the host waiting
        for the GPU, the rest of the step, the rest of the loop. Returns ``(figure, axes)``."""
        import matplotlib.pyplot as plt

        from gpufeed.measure.plotting import COLORS

        copy_s, sync_s = self.copy_s or 0.0, self.sync_s or 0.0
        parts = [("waiting for the next batch", self.wait_s, COLORS["read"]), ("copy", copy_s, COLORS["copy"]),
                 ("host waits for the GPU", sync_s, COLORS["other"]),
                 ("the step", max(0.0, self.step_s - copy_s - sync_s), COLORS["compute"]),
                 ("the rest", max(0.0, self.period_s - self.wait_s - self.step_s), COLORS["baseline"])]
        fig, ax = plt.subplots(figsize=(7.0, 1.6)) if ax is None else (ax.figure, ax)
        left = 0.0
        for name, s, color in parts:
            if s > 0:
                ax.barh(0, s * 1e3, left=left, color=color, label=f"{name} ({s / self.period_s:.0%})")
                left += s * 1e3
        ax.set_yticks([])
        ax.set_xlabel("ms per batch")
        ax.set_title(title or f"your loop: {self.bound} bound, loader efficiency {self.efficiency:.2f}")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize=8, frameon=False)
        return fig, ax

    def to_dict(self) -> dict:
        """JSON-ready: the measurements, the derived numbers and the findings."""
        from dataclasses import asdict

        d = asdict(self)
        d.update(wait_fraction=self.wait_fraction, bound=self.bound, rate=self.rate, efficiency=self.efficiency,
                 best_speedup=self.best_speedup)
        return d


def _leaves(batch) -> list[torch.Tensor]:
    """The tensors of a (nested) batch, in order."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [t for b in batch for t in _leaves(b)]
    return []


def _moved(batch, device: str):
    """The batch with every tensor on ``device`` (same structure)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return type(batch)((k, _moved(v, device)) for k, v in batch.items())
    if isinstance(batch, (list, tuple)) and not hasattr(batch, "_fields"):
        return type(batch)(_moved(b, device) for b in batch)
    return batch


class _Batches:
    """``next()`` over the loader, starting a new epoch (a fresh ``iter``) when one ends, when it can."""

    def __init__(self, loader: Iterable, needed: int):
        self.loader, self.needed, self.taken = loader, needed, 0
        start = time.perf_counter()
        self.it = iter(loader)
        self.start_s = time.perf_counter() - start

    def __next__(self):
        for again in (False, True):  # an epoch ends: once more, from a fresh iter() where the loader gives one
            try:
                batch = next(self.it)
                self.taken += 1
                return batch
            except StopIteration:
                if self.taken == 0:
                    raise DiagnoseError("diagnose: the loader yielded no batch; check its dataset and drop_last (a "
                                        "dataset smaller than one batch yields nothing)") from None
                if again:
                    break
                self.it = iter(self.loader)  # an iterator gives itself: DALI's resets, a generator stays ended
        raise DiagnoseError(f"diagnose: the loader ran out after {self.taken} batches and cannot start again; it "
                            f"needs {self.needed}: pass a loader that can (a DataLoader), an endless generator, "
                            "or fewer batches")


def _call(step: Callable, batch, i: int):
    try:
        return step(batch)
    except DiagnoseError:
        raise
    except Exception as e:
        raise DiagnoseError(f"diagnose: your step raised {type(e).__name__} on batch {i}: {e} (call step(batch) "
                            "on one batch by itself to see where)") from e


def _real_cuda() -> bool:
    """A GPU this process can profile (the CUDA simulator makes torch.cuda say available; the driver's
    own device count does not change)."""
    return torch.cuda.is_available() and getattr(torch._C, "_cuda_getDeviceCount", lambda: 0)() > 0


def _probe(batches: _Batches, step: Callable, n: int, start: int) -> dict:
    """``n`` steps watched: the copies, ``.item()`` calls and syncs; on a GPU, a profiler trace."""
    watch, out = _Watch(), {}
    cuda = torch.cuda.is_available()
    with contextlib.ExitStack() as stack:
        if cuda:
            mode = torch.cuda.get_sync_debug_mode()
            stack.callback(torch.cuda.set_sync_debug_mode, mode)
            torch.cuda.set_sync_debug_mode("warn")
        seen = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        prof = None
        if _real_cuda():
            from torch.profiler import ProfilerActivity, profile

            cuda_sync()
            prof = stack.enter_context(profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]))
        for i in range(n):
            with watch:
                watch.where = "loader"
                batch = next(batches)
                watch.where = "step"
                _call(step, batch, start + i)
        if prof is not None:
            cuda_sync()
    syncs = sum(1 for w in seen if SYNC_WARNING in str(w.message))
    for w in seen:
        if SYNC_WARNING not in str(w.message):  # the loop's own warnings, shown as they would have been
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    out["copies"] = watch.copies
    if cuda:
        out["syncs_per_step"] = syncs / n
        out["item_calls_per_step"] = watch.items / n
    if prof is not None:
        from gpufeed.measure import traces

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            doc = traces.load(path)
        out["copy_s"] = traces.durations(doc, ["gpu_memcpy"], "HtoD") / 1e3 / n
        out["sync_s"] = traces.durations(doc, ["cuda_runtime"], "Synchronize") / 1e3 / n
        out["gpu_idle"] = traces.gpu_idle_fraction(doc)
    return out


def _dataset_ms(loader, k: int = 4) -> dict:
    """Per-image milliseconds of a DataLoader's map-style dataset: ``dataset[i]``, and where the dataset
    exposes them (torchvision's ``DatasetFolder``: ``samples``, ``loader``, ``transform``) the decode
    and the transform of the same images. Empty when the dataset is not map-style."""
    ds = getattr(loader, "dataset", None)
    if ds is None or isinstance(ds, torch.utils.data.IterableDataset) or not hasattr(ds, "__len__") or len(ds) == 0:
        return {}
    idx = range(min(k, len(ds)))
    state = torch.random.get_rng_state()  # random transforms draw from torch's generator: put it back
    try:
        out = {"sample": _mean_ms(lambda i: ds[i], idx)}
        samples, decode, transform = getattr(ds, "samples", None), getattr(ds, "loader", None), \
            getattr(ds, "transform", None)
        if isinstance(samples, list) and callable(decode):
            images = [decode(samples[i][0]) for i in idx]
            out["decode"] = _mean_ms(lambda i: decode(samples[i][0]), idx)
            if callable(transform):
                out["transform"] = _mean_ms(lambda i: transform(images[i]), idx)
    finally:
        torch.random.set_rng_state(state)
    out["getitems"] = hasattr(ds, "__getitems__")
    return out


def _mean_ms(fn: Callable, idx) -> float:
    start = time.perf_counter()
    for i in idx:
        fn(i)
    return (time.perf_counter() - start) * 1e3 / len(idx)


def _settings(loader) -> dict:
    """A DataLoader's settings, read from the object."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return {}
    return {k: getattr(loader, k, None) for k in ("num_workers", "pin_memory", "persistent_workers",
                                                  "prefetch_factor", "batch_size")} | {
        "length": len(loader) if hasattr(loader.dataset, "__len__") else None}


@contextlib.contextmanager
def _kept(objects: Iterable):
    """Puts back the ``state_dict`` of each object (a model, an optimizer) on leaving."""
    saved = [(o, copy.deepcopy(o.state_dict())) for o in objects]
    try:
        yield
    finally:
        for o, state in saved:
            o.load_state_dict(state)


def diagnose(loader: Iterable, step: Callable, *, batches: int = 20, warmup: int = 3, probe: int = 3,
             device: str | None = None, keep: Iterable = ()) -> Report:
    """Measures your loop (``for batch in loader: step(batch)``) and says what to change.

    Args:
        loader: any iterable of batches (a batch: a tensor, or a tuple, list or dict holding tensors,
            the images first); started again when it ends, if it can be.
        step: trains on one batch as your loop does (copies it to the device itself, or not).
        batches: timed batches of each measurement (at least 2).
        warmup: untimed steps first (allocation, cuDNN autotuning, the workers' start).
        probe: steps watched for copies and syncs (and profiled on a GPU), not timed.
        device: where a batch is kept for the what-if "the step on resident batches"; default:
            where the loop copied it (``"cuda"``), else where it was.
        keep: a model, an optimizer, ...: their ``state_dict`` is restored afterwards (the step trains).

    Returns:
        A :class:`Report`; ``print(report)`` shows the table and the findings.

    Raises:
        DiagnoseError: in one line, for an empty loader, a step that raises, a loader that runs out,
            or ``batches`` below 2.
    """
    from gpufeed.measure.machine import usable_cores

    if batches < 2 or warmup < 0 or probe < 1:
        raise DiagnoseError(f"diagnose: batches must be at least 2 (got {batches}), warmup at least 0 "
                            f"(got {warmup}), probe at least 1 (got {probe})")
    with _kept(keep):
        feed = _Batches(loader, warmup + 2 * batches + probe + 1)
        first = next(feed)
        tensors = _leaves(first)
        if not tensors or tensors[0].ndim == 0:
            raise DiagnoseError("diagnose: the loader's batch holds no tensor with a batch dimension "
                                f"(got {type(first).__name__}); yield tensors, or tuples/lists/dicts of them")
        items = int(tensors[0].shape[0])
        keep_batch = _clone(first)  # for the what-if: a loader may reuse this batch's buffers later
        _call(step, first, 0)
        for i in range(1, warmup):
            _call(step, next(feed), i)
        # 1. your loop, timed
        cuda_sync()
        waits, steps = [], []
        start = time.perf_counter()
        for i in range(batches):
            t0 = time.perf_counter()
            batch = next(feed)
            t1 = time.perf_counter()
            _call(step, batch, warmup + i)
            steps.append(time.perf_counter() - t1)
            waits.append(t1 - t0)
        cuda_sync()
        period = (time.perf_counter() - start) / batches
        # 2. a look inside
        seen = _probe(feed, step, probe, warmup + batches)
        if device is None:
            device = "cuda" if seen["copies"] or tensors[0].device.type == "cuda" else tensors[0].device.type
        # 3. the what-ifs: the loader alone, then the step on one batch kept on the device
        start = time.perf_counter()
        for _ in range(batches):
            next(feed)
        loader_rate = items * batches / (time.perf_counter() - start)
        resident, on_device = _moved(keep_batch, device), True
        try:
            step(resident)
        except Exception:  # the step wants the batch as the loader yields it (it pins, say): time it so
            resident, on_device = keep_batch, False
            _call(step, resident, -1)
        cuda_sync()
        start = time.perf_counter()
        for _ in range(batches):
            step(resident)
        cuda_sync()
        model_rate = items * batches / (time.perf_counter() - start)
    settings = _settings(loader)
    report = Report(items=items, batches=batches, device=str(device), period_s=period, wait_s=sum(waits) / batches,
                    step_s=sum(steps) / batches, loader_rate=loader_rate, model_rate=model_rate, resident=on_device,
                    probed=probe, copies=seen["copies"], syncs_per_step=seen.get("syncs_per_step"),
                    item_calls_per_step=seen.get("item_calls_per_step"), copy_s=seen.get("copy_s"),
                    sync_s=seen.get("sync_s"), gpu_idle=seen.get("gpu_idle"), start_s=feed.start_s,
                    loader_settings=settings, dataset_ms=_dataset_ms(loader) if settings else {},
                    cores=usable_cores())
    report.findings = find(report)
    return report


def _clone(batch):
    """The batch with every tensor cloned (a loader may reuse its buffers for the next batches)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, dict):
        return type(batch)((k, _clone(v)) for k, v in batch.items())
    if isinstance(batch, (list, tuple)) and not hasattr(batch, "_fields"):
        return type(batch)(_clone(b) for b in batch)
    return batch
