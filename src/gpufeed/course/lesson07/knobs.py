"""DataLoader knobs: the sweep runner, its heatmap, start-method trials.

Taught in ``notebooks/07_dataloader.ipynb``. :func:`sweep` times whole epochs of a DataLoader for
each combination of ``num_workers``, ``pin_memory``, ``prefetch_factor`` and
``persistent_workers`` asked for, and :func:`heatmap` draws images/s against two of them.
The memmap dataset of lesson 05 reaches the workers through the library's
:class:`gpufeed.data.arrays.MemmapDataset` (a batch per call, opened lazily in each process, so
that it pickles as a path under ``spawn``).
:func:`first_batch` starts one worker with a given start method (fork, spawn, forkserver) and
reports what happened, the worker's own last line of error included, without ever hanging.

Everything a worker must import lives in this package, not in a notebook: under ``spawn`` and
``forkserver`` (the Linux default from Python 3.14) a worker is a fresh interpreter that unpickles
the dataset by *module and name*, and a class defined in a notebook's ``__main__`` is not there.

Example:
    >>> worker_counts(2), worker_counts(16)
    ([0, 1, 2, 3], [0, 1, 2, 4, 8, 16, 24])
    >>> label({"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True, "pin_memory": False})
    '2 workers, prefetch 4, persistent'
    >>> label({"num_workers": 1, "multiprocessing_context": "spawn", "worker_init_fn": print})
    '1 worker, spawn, worker_init_fn=print'
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

from gpufeed.data.gather import no_collate
from gpufeed.measure.harness import Measurement, cuda_sync, interleave


def worker_counts(cores: int) -> list[int]:
    """``num_workers`` values worth trying: 0, powers of two below ``cores``, ``cores``, and 1.5x
    ``cores`` (at least one more), to see where adding workers stops helping."""
    counts = {0, cores, max(cores + 1, cores * 3 // 2)}
    counts |= {2**k for k in range(cores.bit_length()) if 2**k < cores}
    return sorted(counts)


def label(config: dict) -> str:
    """A short name for a DataLoader configuration (the keys :func:`loader` takes)."""
    w = config.get("num_workers", 0)
    parts = [f"{w} worker{'s' if w != 1 else ''}"]
    if w and "prefetch_factor" in config:
        parts.append(f"prefetch {config['prefetch_factor']}")
    if w and config.get("persistent_workers"):
        parts.append("persistent")
    if config.get("pin_memory"):
        parts.append("pinned")
    if w and config.get("multiprocessing_context") is not None:
        context = config["multiprocessing_context"]
        parts.append(context if isinstance(context, str) else context.get_start_method())
    if w and config.get("worker_init_fn") is not None:
        parts.append(f"worker_init_fn={getattr(config['worker_init_fn'], '__name__', 'yes')}")
    return ", ".join(parts)


def loader(dataset: Dataset, batch_size: int, *, num_workers: int = 0, pin_memory: bool = False,
           prefetch_factor: int = 2, persistent_workers: bool = False, seed: int = 0, **kwargs) -> DataLoader:
    """A shuffled DataLoader with these knobs, where the knobs that need workers are dropped at
    ``num_workers=0`` (torch refuses them) and ``pin_memory`` is dropped without CUDA (torch
    would warn and ignore it). A dataset with ``__getitems__`` gets ``collate_fn=no_collate``."""
    if getattr(dataset, "__getitems__", None) is not None:
        kwargs.setdefault("collate_fn", no_collate)
    if num_workers > 0:
        kwargs.update(prefetch_factor=prefetch_factor, persistent_workers=persistent_workers)
    return DataLoader(dataset, batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed),
                      num_workers=num_workers, pin_memory=pin_memory and torch.cuda.is_available(), **kwargs)


def _use(batch, device, step: Callable | None) -> int:
    """Moves a batch (a sequence of tensors) to ``device`` and steps it, as a training loop does;
    returns the samples it held."""
    if device is not None:
        batch = [t.to(device, non_blocking=True) for t in batch]
    if step is not None:
        step(batch)
    return len(batch[0])


def _epoch(dl: DataLoader, device, step: Callable | None) -> None:
    for batch in dl:
        _use(batch, device, step)


class _Stream:
    """A DataLoader's batches epoch after epoch (a new iterator at each epoch's end, as a training
    loop makes one), taken a block at a time."""

    def __init__(self, dl: DataLoader, device, step: Callable | None):
        self.dl, self.device, self.step, self.it = dl, device, step, iter(dl)

    def take(self, batches: int) -> int:
        """Takes ``batches`` batches; returns the samples they held."""
        samples = 0
        for _ in range(batches):
            try:
                batch = next(self.it)
            except StopIteration:
                self.it = iter(self.dl)
                batch = next(self.it)
            samples += _use(batch, self.device, self.step)
        return samples


def _budgeted_arm(dl: DataLoader, device, step: Callable | None, budget_s: float, repeats: int,
                  batch_size: int) -> tuple[Callable[[], None], int, list[int]]:
    """One configuration's arm for timing blocks of batches in turns: ``(take, block, got)``.

    Untimed first: ``num_workers x prefetch_factor + 2`` batches (the workers start, the queue they
    fill is drained once), then a probe of ``max(1, num_workers)`` batches that sizes the blocks
    so that ``repeats`` of them last about ``budget_s`` together. ``take()`` takes one block and
    appends the samples it held to ``got`` (an epoch's last batch may be short: the samples are
    rescaled to blocks of full batches afterwards, :func:`_rescale`).
    """
    stream = _Stream(dl, device, step)
    stream.take(dl.num_workers * (dl.prefetch_factor or 0) + 2)
    probe = max(1, dl.num_workers)
    start = time.perf_counter()
    stream.take(probe)
    cuda_sync()
    per_batch = (time.perf_counter() - start) / probe
    block = max(1, round(budget_s / repeats / per_batch))
    got: list[int] = []
    return (lambda: got.append(stream.take(block))), block, got


def _rescale(m: Measurement, block: int, batch_size: int, got: list[int]) -> None:
    """Samples of blocks that held ``got`` samples each, as seconds per block of full batches."""
    m.samples = [s * block * batch_size / n for s, n in zip(m.samples, got[-len(m.samples):])]


def sweep(datasets: dict[str, Dataset], configs: Iterable[dict], batch_size: int, *, repeats: int = 3,
          warmup: int = 1, device=None, step: Callable | None = None,
          budget_s: float | None = None) -> list[Measurement]:
    """Times every dataset and configuration **in turns**; one :class:`Measurement` each, in images/s.

    Each configuration gets one DataLoader, all of them built first (persistent workers wait,
    idle, while the others run), then timed round after round, one sample of each per round
    (:func:`gpufeed.measure.harness.interleave`): a busy spell of the machine slows every
    configuration a little rather than one a lot, and the ratio of any two is read with
    :func:`gpufeed.measure.verdict.compare` (``paired=True``). Without ``budget_s``, each sample
    is a whole epoch, after ``warmup`` untimed ones (with ``persistent_workers`` that is where the
    workers start; without it every epoch starts them again, and the time shows it). With
    ``budget_s`` (seconds per configuration), each sample is a block of batches from one stream of
    epochs, sized after a short warm-up so that all of a configuration's samples take about
    ``budget_s`` (a slow configuration is timed over part of an epoch, a fast one over several;
    ``params["batches_per_sample"]`` says how many). That bounds a sweep's time on any machine (a
    GPU node's 16 cores and 2,000 JPEGs included); compare persistent and non-persistent workers
    over whole epochs, without a budget, since what differs is each epoch's start. ``params`` hold
    the dataset's name and the configuration.

    Args:
        datasets: name -> dataset (batches of ``(images, targets)``).
        configs: keyword arguments for :func:`loader`, e.g. ``{"num_workers": 2}``.
        batch_size: samples per batch.
        repeats, warmup: timed samples per configuration, and untimed epochs first (without a budget).
        device: move each batch there (``non_blocking``), as a training loop does; None: stay put.
        step: called with each batch, e.g. to stand for a training step.
        budget_s: about how many seconds to time each configuration for; None: whole epochs.
    """
    configs = list(configs)
    cases = [(name, ds, config) for name, ds in datasets.items() for config in configs]
    arms, items, params, blocks = {}, {}, {}, {}
    with warnings.catch_warnings():  # more workers than cores is what a sweep is for
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        loaders = {}
        for i, (name, ds, config) in enumerate(cases):
            case = f"{name}, {label(config)}"
            loaders[case if case not in loaders else f"{case} ({i + 1})"] = (ds, loader(ds, batch_size, **config))
        for (case, (ds, dl)), (name, _, config) in zip(loaders.items(), cases):
            params[case] = {"dataset": name, "batch_size": batch_size, **config}
            if budget_s is None:
                arms[case], items[case] = (lambda dl=dl: _epoch(dl, device, step)), len(ds)
            else:
                arms[case], block, got = _budgeted_arm(dl, device, step, budget_s, repeats, batch_size)
                blocks[case], items[case] = (block, got), block * batch_size
                params[case]["batches_per_sample"] = block
        ms = interleave(arms, repeats=repeats, warmup=warmup if budget_s is None else 0, items=items, params=params,
                        desc=f"sweep of {', '.join(datasets)}")
    for m in ms:
        if m.name in blocks:
            _rescale(m, blocks[m.name][0], batch_size, blocks[m.name][1])
    del loaders, arms  # stops their workers now (persistent ones would live on until collected)
    return ms


def uneven_steps(mean_s: float, batches: int, burst: int = 8) -> list[float]:
    """Seconds a stand-in training step sleeps, batch by batch: bursts of ``burst`` short steps
    (a quarter of ``mean_s``) and ``burst`` long ones (seven quarters), ``mean_s`` on average.
    A queue of prefetched batches is what carries a loader through a burst of short steps.

    Example:
        >>> [round(s, 2) for s in uneven_steps(1.0, 6, burst=2)]
        [0.25, 0.25, 1.75, 1.75, 0.25, 0.25]
    """
    return [mean_s * (0.25 if (i // burst) % 2 == 0 else 1.75) for i in range(batches)]


def prefetch_trial(dataset: Dataset, factors: Sequence[int], *, num_workers: int, batch_size: int, batches: int,
                   step_s: float, repeats: int, device=None) -> list[Measurement]:
    """``prefetch_factor`` compared in turns, one DataLoader per factor (persistent workers), each
    sample a pass of ``batches`` batches from a fresh iterator, so that the queue of
    ``num_workers x factor`` batches fills at the start and drains at the end, and a stand-in step
    per batch that sleeps :func:`uneven_steps` (``step_s`` on average). The batches are drawn with
    replacement from ``dataset``, so a small dataset serves any number of them.

    Returns one :class:`Measurement` per factor (seconds per pass), named ``prefetch_factor=F``.
    """
    from torch.utils.data import RandomSampler

    if batches < 8 * num_workers * max(factors):
        warnings.warn(f"prefetch_trial: {batches} batches are fewer than 8 x workers x factor: the queue barely "
                      "fills and drains", stacklevel=2)
    sleeps = uneven_steps(step_s, batches)
    arms, params = {}, {}
    for f in factors:
        sampler = RandomSampler(dataset, replacement=True, num_samples=batches * batch_size,
                                generator=torch.Generator().manual_seed(f))
        dl = DataLoader(dataset, batch_size, sampler=sampler, num_workers=num_workers, prefetch_factor=f,
                        persistent_workers=True, collate_fn=no_collate if getattr(dataset, "__getitems__", None) else None)

        def one_pass(dl=dl):
            for batch, sleep_s in zip(dl, sleeps):
                _use(batch, device, None)
                time.sleep(sleep_s)

        arms[f"prefetch_factor={f}"] = one_pass
        params[f"prefetch_factor={f}"] = {"prefetch_factor": f, "num_workers": num_workers, "batches": batches,
                                          "step_s": step_s, "batch_size": batch_size}
    ms = interleave(arms, repeats=repeats, warmup=1, items=batches * batch_size, params=params,
                    desc=f"prefetch_factor {', '.join(map(str, factors))} in turns")
    del arms  # stops the workers
    return ms


def grid(ms: list[Measurement], row: str, col: str) -> tuple[list, list, list[list[float | None]]]:
    """``(rows, cols, images/s)`` from measurements' params: a table for :func:`heatmap`.

    Example:
        >>> ms = [Measurement("a", [1.0], items=10, params={"d": "x", "w": w}) for w in (0, 2)]
        >>> grid(ms, "d", "w")
        (['x'], [0, 2], [[10.0, 10.0]])
    """
    rows = list(dict.fromkeys(m.params[row] for m in ms))
    cols = sorted(dict.fromkeys(m.params[col] for m in ms))
    rate = {(m.params[row], m.params[col]): m.items_per_s for m in ms}
    return rows, cols, [[rate.get((r, c)) for c in cols] for r in rows]


def heatmap(ms: list[Measurement], row: str = "dataset", col: str = "num_workers", *, cores: int | None = None,
            ax=None, machine: dict | None = None, title: str = ""):
    """Images/s for each (``row``, ``col``) pair, coloured by the speed-up over the row's first
    column (e.g. ``num_workers=0``), each cell labelled with its images/s and that ratio.

    ``cores`` draws a dashed line after the column of that many workers. Returns ``(fig, ax)``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from gpufeed.measure.plotting import caption

    rows, cols, rates = grid(ms, row, col)
    ratio = np.array([[v / r[0] if v and r[0] else np.nan for v in r] for r in rates])
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(cols), 0.9 + 0.55 * len(rows)))
    else:
        fig = ax.figure
    image = ax.imshow(ratio, cmap="viridis", aspect="auto")
    for i, r in enumerate(rates):
        for j, v in enumerate(r):
            if v:
                ax.text(j, i, f"{v:,.0f}/s\n{ratio[i, j]:.2f}x", ha="center", va="center", fontsize=8,
                        color="white" if ratio[i, j] < np.nanmean(ratio) else "black")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(col)
    ax.grid(False)
    if cores is not None and cores in cols:
        ax.axvline(cols.index(cores) + 0.5, color="white", linestyle="--", linewidth=1.5)
    fig.colorbar(image, ax=ax, label=f"images/s vs {col}={cols[0]}")
    if title:
        ax.set_title(title)
    caption(fig, machine if machine is not None else ms[0].machine)
    return fig, ax


@dataclass
class StartResult:
    """What :func:`first_batch` saw: did a batch arrive, after how long, and the last line of the
    error in this process and of what the worker printed before it died (empty if none)."""

    method: str
    ok: bool
    seconds: float
    error: str = ""
    worker_error: str = ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@contextmanager
def _stderr_to_file():
    """Sends file descriptor 2 (which child processes inherit) to a temporary file; yields a
    function that reads it back. A notebook shows only Python's ``sys.stderr``, so without this a
    worker's traceback goes to the terminal that started Jupyter."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield lambda: (f.seek(0), f.read().decode(errors="replace"))[1]
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def first_batch(dataset: Dataset, method: str, *, collate_fn=None, timeout: float = 300.0) -> StartResult:
    """Starts one DataLoader worker with ``multiprocessing_context=method`` and asks it for a batch.

    Failures are caught and summarised, never raised: a worker that dies is noticed by the
    DataLoader (its exit signal, or a status check every few seconds), and ``timeout`` bounds the
    wait for a batch. The worker's stderr is captured so its own error can be shown.
    """
    with _stderr_to_file() as worker_output:
        start, error = time.perf_counter(), ""
        try:
            dl = DataLoader(dataset, batch_size=2, num_workers=1, multiprocessing_context=method,
                            collate_fn=collate_fn, timeout=timeout)
            it = iter(dl)
            next(it)
            del it, dl  # shut the worker down inside the capture
        except Exception as e:  # noqa: BLE001  the point is to show it
            error = _last_line(f"{type(e).__name__}: {e}")
        seconds = time.perf_counter() - start
        worker = _last_line(worker_output())
    return StartResult(method, not error, seconds, error, worker if error else "")


class CudaProbe(Dataset):
    """A dataset whose items touch CUDA, to show what a forked worker does when the parent has
    already initialised CUDA (the CUDA runtime cannot be used again in a forked child)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((1,), float(i), device="cuda").cpu()
