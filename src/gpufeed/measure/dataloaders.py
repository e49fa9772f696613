"""A ``DataLoader`` read by :func:`gpufeed.measure.diagnose`: its settings, its dataset's per-image costs,
how many batches it makes ahead, and its suggested settings re-timed before they are suggested.

A finding such as "use workers" is a guess until it is measured on the loader it is about. So for a
``torch.utils.data.DataLoader``, :func:`retime` builds a copy with the suggested setting
(:func:`copy_with`: ``num_workers`` up to the cores, ``persistent_workers=True``, ``pin_memory=True``
on CUDA) and times it against the loader as it is, in turns (A, B, A, B, ...), each timed call
starting from no batch made ahead (:func:`prefetched`). The one verdict method decides
(:func:`gpufeed.measure.verdict.compare`): only a copy that ran **faster** is a gain, and
:mod:`~gpufeed.measure.findings` makes the suggestion only then, with the measured rate beside it;
"this run cannot tell" is said as such. It stays cheap: a time budget, split between the settings,
sets how many batches each call takes, and a setting that does not fit it is "not re-timed".
Lesson 07 teaches the settings themselves (``notebooks/07_dataloader.ipynb``).

Example:
    >>> from torch.utils.data import DataLoader
    >>> loader = DataLoader(list(range(8)), batch_size=4, num_workers=2)
    >>> settings(loader)["num_workers"], prefetched(loader), prefetched(copy_with(loader, num_workers=0))
    (2, 4, 0)
"""

from __future__ import annotations

import inspect
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader, IterableDataset

from gpufeed.data.movers import to_device
from gpufeed.measure.batches import Batches
from gpufeed.measure.units import format_rate, format_time
from gpufeed.measure.verdict import FASTER, MIN_SAMPLES, Verdict, compare


def settings(loader) -> dict:
    """A DataLoader's settings, read from the object (empty for any other loader)."""
    if not isinstance(loader, DataLoader):
        return {}
    return {k: getattr(loader, k, None) for k in ("num_workers", "pin_memory", "persistent_workers",
                                                  "prefetch_factor", "batch_size")} | {
        "length": len(loader) if hasattr(loader.dataset, "__len__") else None}


def prefetched(loader) -> int:
    """The batches a DataLoader's workers make ahead while nothing asks for them (``num_workers x
    prefetch_factor``); 0 for any other loader (whose own queue, if any, is its business)."""
    if not isinstance(loader, DataLoader) or not loader.num_workers:
        return 0
    return loader.num_workers * (loader.prefetch_factor or 2)


def copy_with(loader: DataLoader, **changes) -> DataLoader:
    """A new DataLoader over the same dataset, sampler and collate function, with ``changes``
    (e.g. ``num_workers=2``); the loader given is not touched."""
    kw = {k: getattr(loader, k) for k in ("num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn",
                                          "multiprocessing_context", "generator", "prefetch_factor",
                                          "persistent_workers", "pin_memory_device")}
    if "in_order" in inspect.signature(DataLoader).parameters:
        kw["in_order"] = loader.in_order
    if isinstance(loader.dataset, IterableDataset):
        kw.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_sampler is not None:
        kw["batch_sampler"] = loader.batch_sampler
    else:
        kw.update(sampler=loader.sampler, batch_size=None)
    kw.update(changes)
    if not kw["num_workers"]:
        kw.update(prefetch_factor=None, persistent_workers=False)
    return DataLoader(loader.dataset, **kw)


def dataset_ms(loader, k: int = 4) -> dict:
    """Per-image milliseconds of a DataLoader's map-style dataset: ``sample`` (``dataset[i]``), and where
    the dataset exposes them (torchvision's ``DatasetFolder``: ``samples``, ``loader``, ``transform``)
    ``decode`` and ``transform`` of the same images; ``getitems``: whether it fetches a batch at once.
    Empty when the dataset is not map-style. torch's random state is put back (random transforms draw)."""
    ds = getattr(loader, "dataset", None)
    if ds is None or isinstance(ds, IterableDataset) or not hasattr(ds, "__len__") or len(ds) == 0:
        return {}
    idx = range(min(k, len(ds)))
    state = torch.random.get_rng_state()
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


@dataclass
class Retimed:
    """One suggested setting re-timed against the loader as it is, in turns.

    Attributes:
        finding: the finding it checks (``"workers"``, ``"too-many-workers"``, ``"persistent-workers"``,
            ``"pageable"``).
        change: the setting tried, as :func:`copy_with` takes it (``{"num_workers": 2}``).
        now: the loader's own value of it (``0``).
        what: what each timed call did (``"the loader alone"``, ``"an epoch's start"``, ...).
        items: images per timed call (0: a call is an epoch's start, read as a time).
        new, base: seconds per call, the copy's and the loader's, taken in turns.
        verdict: the copy against the loader (:func:`gpufeed.measure.verdict.compare`, paired).
        note: why it was not re-timed ("" when it was).
    """

    finding: str
    change: dict
    now: object
    what: str
    items: int = 0
    new: list = field(default_factory=list)
    base: list = field(default_factory=list)
    verdict: Verdict | None = None
    note: str = ""

    @property
    def setting(self) -> str:
        """The setting tried, as code: ``"num_workers=2"``."""
        return ", ".join(f"{k}={v!r}" for k, v in self.change.items())

    @property
    def gain(self) -> bool:
        """The copy measured faster: the one case in which the setting is suggested."""
        return self.verdict is not None and self.verdict.kind == FASTER

    def words(self) -> str:
        """The measurement in words: ``"with num_workers=2: 8.10 images/s (the loader alone), against
        4.00 images/s with num_workers=0: 2.03x faster (1.80x to 2.20x)"``."""
        if self.note or self.verdict is None:
            return f"{self.setting}: not re-timed ({self.note or 'nothing measured'})"
        new, base = statistics.median(self.new), statistics.median(self.base)
        show = (lambda s: format_rate(self.items / s, "images/s")) if self.items else format_time
        now = ", ".join(f"{k}={self.now!r}" for k in self.change)
        return f"with {self.setting}: {show(new)} ({self.what}), against {show(base)} with {now}: {self.verdict.words()}"


def candidates(loader, keys: list[str], cores: int, cuda: bool) -> list[Retimed]:
    """The settings that ``keys`` (the findings stated before re-timing) suggest for ``loader``, not yet timed."""
    out, s = [], settings(loader)
    if not s:
        return out
    workers = s["num_workers"] or 0
    for key in ("workers", "too-many-workers"):
        if key in keys and max(1, cores) != workers:
            out.append(Retimed(key, {"num_workers": max(1, cores)}, workers, "the loader alone"))
    if "persistent-workers" in keys:
        out.append(Retimed("persistent-workers", {"persistent_workers": True}, False,
                           "an epoch's start: iter() and its first batch"))
    if "pageable" in keys and cuda and not s["pin_memory"]:
        out.append(Retimed("pageable", {"pin_memory": True}, False, "the loader alone with the copy to the device"))
    for r in out:
        if type(loader) is not DataLoader:
            r.note = "a DataLoader subclass: a copy would not be the same loader"
        elif r.finding.endswith("workers") and "num_workers" in r.change and isinstance(loader.dataset, IterableDataset):
            r.note = "an IterableDataset splits its work among workers itself"
    return out


def retime(loader: DataLoader, todo: list[Retimed], base: Batches, *, items: int, batch_s: float, start_s: float,
           device: str, sync: Callable[[], None], budget_s: float, repeats: int = MIN_SAMPLES) -> list[Retimed]:
    """Times each setting of ``todo`` against ``loader`` in turns, within ``budget_s`` seconds in all.

    Args:
        loader: the DataLoader as it is; ``base``: the batches already being taken from it.
        todo: from :func:`candidates`; each gets its samples, verdict or note.
        items: images per batch; ``batch_s``: seconds per batch of the loader alone (sizes the calls);
            ``start_s``: the time ``iter(loader)`` took.
        device: where the loop's batches go (the ``pin_memory`` copies); ``sync``: waits for the device.
        budget_s: the most seconds all of it may take (split between the settings); 0: none re-timed.
        repeats: timed calls of each arm (a verdict needs :data:`gpufeed.measure.verdict.MIN_SAMPLES`).
    """
    left = [r for r in todo if not r.note]
    deadline = time.perf_counter() + budget_s
    for i, r in enumerate(left):
        share = (deadline - time.perf_counter()) / (len(left) - i)
        calls = 2 * (repeats + 1)  # a warm-up round, then the timed ones
        copy = copy_with(loader, **r.change)
        if r.finding == "persistent-workers":
            if calls * 2 * start_s > share:
                r.note = f"{calls} epoch starts of about {format_time(start_s)} do not fit the budget"
                continue
            arms = (_starts(copy), _starts(loader))
        else:
            ahead = max(prefetched(copy), prefetched(loader))
            k = math.floor(share / calls / batch_s) - ahead
            if k < 1:
                r.note = f"{calls} calls of {ahead + 1} batches at {format_time(batch_s)} each do not fit the budget"
                continue
            k = min(k, 20)
            copied = r.finding == "pageable"
            arms = (_batches(Batches(copy, needed=calls * (k + ahead)), prefetched(copy), k, copied, device, sync, True),
                    _batches(base, prefetched(loader), k, copied, device, sync, False))
            r.items = k * items
        r.new, r.base = _in_turns(arms, repeats, deadline=time.perf_counter() + 1.5 * share)
        r.verdict = compare(r.new, r.base, paired=True)
        del arms, copy  # its workers stop
    return todo


def _in_turns(arms, repeats: int, deadline: float) -> tuple[list, list]:
    """A warm-up round, then up to ``repeats`` rounds of (new, base); stops early past ``deadline``."""
    for arm in arms:
        arm()
    new, base = [], []
    for _ in range(repeats):
        new.append(arms[0]())
        base.append(arms[1]())
        if time.perf_counter() > deadline:
            break
    return new, base


def _batches(feed: Batches, ahead: int, k: int, copied: bool, device: str, sync, pinned: bool):
    """A timed call: drop what the loader made ahead, then ``k`` batches (each copied to ``device``, from
    pinned memory without blocking or as the loop did, when ``copied``)."""
    def call() -> float:
        feed.drain(ahead)
        sync()
        start = time.perf_counter()
        for _ in range(k):
            batch = next(feed)
            if copied:
                to_device(batch, device, non_blocking=pinned)
        sync()
        return time.perf_counter() - start
    return call


def _starts(loader: DataLoader):
    """A timed call: an epoch's start, ``iter(loader)`` and its first batch (the last epoch's iterator
    dropped first, untimed, as a loop's ``for`` drops it)."""
    held = []

    def call() -> float:
        held.clear()
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        held.append(it)
        return time.perf_counter() - start
    return call
