"""The benchmark harness: warm up, time with CUDA synchronised, keep every sample, report honestly.

What it does that a bare ``time.perf_counter()`` around a loop does not (``notebooks/02`` shows the
mistakes it avoids; ``notebooks/00_setup.ipynb`` first uses it):

* **warm-up** calls that are not counted (first calls pay for allocation, caches, cuDNN autotune);
* **CUDA synchronised** inside the timed region, since CUDA calls return before the GPU finishes;
* **raw samples kept**, summarised by the median and the inter-quartile range (IQR), which a few
  slow outliers on a noisy machine do not drag around the way they drag a mean;
* a **unit chosen for the reader** (ns, us, ms, s; images/s; GB/s: :mod:`gpufeed.measure.units`) and a
  **warning** naming the measurement when its spread is large (:mod:`gpufeed.measure.noise`; shown as
  a ``[noisy]`` line in a notebook);
* the **machine** it ran on, and **JSON** save and load, and a table with **ratios to a baseline**;
* a **time cap** where a run must fit a slot (``GPUFEED_MEASURE_S``, :func:`gpufeed.config.measure_cap`): each case
  stops sampling once it has spent that long (after at least :data:`MIN_SAMPLES`), and the machine
  record of every result says the cap was on (``measure_s``), so a reader knows.

Example:
    >>> m = benchmark(lambda: sum(range(1000)), name="sum", repeats=20, warmup=2, items=1000)
    >>> len(m.samples), m.unit
    (20, 's')
    >>> m.median > 0 and m.iqr >= 0 and m.items_per_s > 0
    True
    >>> fast = Measurement("fast", [1.0, 1.0, 1.0], items=10)
    >>> slow = Measurement("slow", [4.0, 4.0, 4.0], items=10)
    >>> print(compare([slow, fast], baseline="slow"))  # doctest: +NORMALIZE_WHITESPACE
    name  median  IQR  items/s  vs slow
    slow  4.00 s  0 s  2.50     1.00x
    fast  1.00 s  0 s  10.0     4.00x
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gpufeed.config import measure_cap
from gpufeed.measure.noise import NOISY, warn_if_noisy
from gpufeed.measure.units import format_rate, format_time

FORMAT_VERSION = 1

#: Timed samples a capped case still takes, so that its median and IQR mean something.
MIN_SAMPLES = 3


def cuda_sync() -> None:
    """Waits for every queued CUDA kernel and copy, when CUDA is in use; a no-op otherwise.

    CUDA calls are asynchronous: without this, a timer measures how long it took to *queue* the
    work, not to do it.
    """
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _quantiles(samples: Sequence[float]) -> tuple[float, float, float]:
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3



@dataclass
class Measurement:
    """The samples of one benchmark and what they mean.

    Attributes:
        name: what was measured, e.g. ``"pinned, 64 MB"``.
        samples: seconds per call, one per timed repeat (after warm-up), in the order taken.
        items: how many items (images, samples) one call handles, for items/s; None if not meaningful.
        nbytes: how many bytes one call moves, for GB/s; None if not meaningful.
        params: anything that identifies the case (sizes, batch size, device), JSON-ready.
        machine: the record from :func:`gpufeed.measure.machine.machine_info`, or None.
    """

    name: str
    samples: list[float]
    items: float | None = None
    nbytes: float | None = None
    params: dict = field(default_factory=dict)
    machine: dict | None = None
    unit: str = "s"

    @property
    def median(self) -> float:
        return _quantiles(self.samples)[1]

    @property
    def iqr(self) -> float:
        q1, _, q3 = _quantiles(self.samples)
        return q3 - q1

    @property
    def spread(self) -> float:
        """IQR relative to the median: 0.02 is a quiet machine, above 0.10 a noisy one."""
        return self.iqr / self.median if self.median > 0 else 0.0

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY

    @property
    def items_per_s(self) -> float | None:
        """Throughput at the median time, e.g. images/s."""
        return self.items / self.median if self.items and self.median > 0 else None

    @property
    def gb_per_s(self) -> float | None:
        """Bytes moved per second at the median time, in GB/s (10^9 bytes, as hardware specs use)."""
        return self.nbytes / self.median / 1e9 if self.nbytes and self.median > 0 else None

    def rate_quartiles(self, what: str = "items") -> tuple[float, float, float]:
        """(low, median, high) throughput from the time quartiles, for error bars."""
        per_call = {"items": self.items, "bytes": self.nbytes}[what] or 0.0
        q1, q2, q3 = _quantiles(self.samples)
        return per_call / q3, per_call / q2, per_call / q1

    def __str__(self) -> str:
        parts = [f"{self.name}: {format_time(self.median)} median, IQR {format_time(self.iqr)}"]
        if self.items_per_s:
            parts.append(format_rate(self.items_per_s, "items/s"))
        if self.gb_per_s:
            parts.append(f"{self.gb_per_s:.3g} GB/s")
        text = ", ".join(parts) + f" ({len(self.samples)} samples)"
        if self.noisy:
            text += f"  [noisy: IQR is {self.spread:.0%} of the median; close other programs and re-run]"
        return text

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(median=self.median, iqr=self.iqr, items_per_s=self.items_per_s, gb_per_s=self.gb_per_s)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Measurement:
        keys = {"name", "samples", "items", "nbytes", "params", "machine", "unit"}
        return cls(**{k: v for k, v in d.items() if k in keys})


def benchmark(
    fn: Callable[[], object],
    *,
    name: str = "",
    repeats: int = 10,
    warmup: int = 2,
    number: int = 1,
    min_time: float = 0.0,
    max_repeats: int = 1000,
    items: float | None = None,
    nbytes: float | None = None,
    params: dict | None = None,
    setup: Callable[[], object] | None = None,
    with_machine: bool = True,
) -> Measurement:
    """Times ``fn()``: ``warmup`` untimed calls, then at least ``repeats`` timed samples.

    Args:
        fn: the work; it should not return a lazy object (consume iterators inside it).
        name: a label for tables and plots.
        repeats: the least number of timed samples.
        warmup: untimed calls first (allocations, caches, autotuning, lazy imports).
        number: calls per sample; raise it for work shorter than ~100 us so timer overhead vanishes.
        min_time: keep sampling (up to ``max_repeats``) until this many seconds have been timed.
        items: items handled per call of ``fn`` (e.g. images), for items/s.
        nbytes: bytes moved per call of ``fn``, for GB/s.
        params: what identifies the case, saved with the result.
        setup: called untimed before every sample (e.g. to drop the page cache).
        with_machine: attach :func:`gpufeed.measure.machine.machine_info` (turn off in tight loops).

    Under a time cap (:func:`measure_cap`) the warm-up stops after the call that reaches it, and the
    sampling once it is reached with at least :data:`MIN_SAMPLES` samples; ``min_time`` never
    outlasts it.

    Returns:
        A :class:`Measurement` with seconds per call of ``fn``.
    """
    if repeats < 1 or number < 1 or warmup < 0:
        raise ValueError("repeats and number must be at least 1, warmup at least 0")
    cap = measure_cap()
    least = repeats if cap is None else min(repeats, MIN_SAMPLES)
    warm_from = time.perf_counter() if cap is not None else 0.0
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
        if cap is not None and time.perf_counter() - warm_from >= cap:
            break
    cuda_sync()  # the warm-up's queued GPU work must not leak into the first sample
    samples: list[float] = []
    spent = 0.0
    wanted = lambda: len(samples) < repeats or (spent < min_time and len(samples) < max_repeats)  # noqa: E731
    while len(samples) < least or (wanted() and (cap is None or spent < cap)):
        if setup is not None:
            setup()
            cuda_sync()
        start = time.perf_counter()
        for _ in range(number):
            fn()
        cuda_sync()  # inside the timed region: the GPU's work is part of the cost
        elapsed = time.perf_counter() - start
        samples.append(elapsed / number)
        spent += elapsed
    machine = None
    if with_machine:
        from gpufeed.measure.machine import machine_info

        machine = machine_info()
    m = Measurement(name or getattr(fn, "__name__", "fn"), samples, items, nbytes, dict(params or {}), machine)
    warn_if_noisy([m])
    return m


def interleave(
    cases: dict[str, Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    items: float | dict[str, float] | None = None,
    params: dict[str, dict] | None = None,
    desc: str | None = None,
    setup: dict[str, Callable[[], object]] | None = None,
    nbytes: float | dict[str, float] | None = None,
) -> list[Measurement]:
    """Times several cases in turns (a, b, c, a, b, c, ...): one :class:`Measurement` per case.

    On a noisy machine a burst of other work then slows every case a little rather than one case
    a lot, so the ratios between them are what this protects (lesson 11, ``gpufeed bench``). Each
    case gets ``warmup`` untimed calls first; CUDA is synchronised before every clock read. Each
    case is typically a whole epoch, so a progress bar (:mod:`gpufeed.measure.progress`, labelled
    ``desc``, by default the cases' names) counts the calls where someone watches. ``setup`` maps a
    case to a call made untimed before each of its calls (e.g. to drop the page cache before a cold
    epoch, lesson 05); ``items`` and ``nbytes`` are per call, one number for all or one per case.

    Under a time cap (:func:`measure_cap`) the rounds stop once the cases together have spent the cap
    times their number, after at least :data:`MIN_SAMPLES` rounds.

    Example:
        >>> ms = interleave({"a": lambda: sum(range(1000)), "b": lambda: sum(range(10))}, repeats=3, items=1)
        >>> [m.name for m in ms], [len(m.samples) for m in ms]
        (['a', 'b'], [3, 3])
        >>> order = []
        >>> _ = interleave({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=2, warmup=0,
        ...                setup={"a": lambda: order.append("setup a")}, nbytes={"a": 10, "b": 20})
        >>> order, [m.nbytes for m in _]
        (['setup a', 'a', 'b', 'setup a', 'a', 'b'], [10, 20])
    """
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be at least 1, warmup at least 0")
    cap = measure_cap()
    least = repeats if cap is None else min(repeats, MIN_SAMPLES)
    from gpufeed.measure import progress
    from gpufeed.measure.machine import machine_info

    samples: dict[str, list[float]] = {name: [] for name in cases}
    with progress.bar(total=len(cases) * (warmup + repeats), unit="call",
                      desc=desc or f"in turns: {', '.join(cases)}"[:60]) as shown:
        before = setup or {}
        for name, fn in cases.items():
            shown.set_postfix_str(f"warm-up {name}")
            for _ in range(warmup):
                if name in before:
                    before[name]()
                fn()
                shown.update()
        spent = 0.0
        for r in range(repeats):
            if r >= least and cap is not None and spent >= cap * len(cases):
                break
            for name, fn in cases.items():
                shown.set_postfix_str(f"{name}, {r + 1}/{repeats}")
                if name in before:
                    before[name]()
                cuda_sync()
                start = time.perf_counter()
                fn()
                cuda_sync()
                samples[name].append(time.perf_counter() - start)
                spent += samples[name][-1]
                shown.update()
    machine = machine_info()
    per = lambda x, name: x.get(name) if isinstance(x, dict) else x  # noqa: E731  one value, or one per case
    ms = [Measurement(name, samples[name], per(items, name), per(nbytes, name), dict((params or {}).get(name, {})),
                      machine) for name in cases]
    warn_if_noisy(ms)
    return ms



def compare(
    measurements: Iterable[Measurement], baseline: str | None = None, rate: str = "items"
) -> str:
    """A text table: median, IQR, throughput and the speed-up against ``baseline``.

    The speed-up is ``baseline median / median``: 4.00x means four times as fast as the baseline.
    The baseline defaults to the first measurement. Only compare numbers taken side by side in one
    run on one machine: between runs, a noisy machine moves more than many optimisations do.
    """
    ms = list(measurements)
    if not ms:
        return "(no measurements)"
    base = next((m for m in ms if m.name == baseline), None) if baseline else ms[0]
    if base is None:
        raise KeyError(f"baseline {baseline!r} is not among {[m.name for m in ms]}")
    rate_head = {"items": "items/s", "bytes": "GB/s"}[rate]
    rows = [["name", "median", "IQR", rate_head, f"vs {base.name}"]]
    for m in ms:
        value = m.items_per_s if rate == "items" else m.gb_per_s
        shown = "-" if value is None else (format_rate(value) if rate == "items" else f"{value:.3g}")
        rows.append([m.name, format_time(m.median), format_time(m.iqr), shown, f"{base.median / m.median:.2f}x"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    noisy = [m.name for m in ms if m.noisy]
    if noisy:
        lines.append(f"noisy (IQR > {NOISY:.0%} of median): {', '.join(noisy)}")
    return "\n".join(lines)


def ratio(measurements: Iterable[Measurement], name: str, baseline: str) -> float:
    """How many times faster ``name`` ran than ``baseline`` (ratio of median times)."""
    by_name = {m.name: m for m in measurements}
    return by_name[baseline].median / by_name[name].median


def save(path: str | Path, measurements: Iterable[Measurement], **extra) -> Path:
    """Writes measurements (and ``extra`` JSON-ready fields) to ``path`` atomically.

    The file is written beside its destination and renamed into place, so an interrupted save
    never leaves half a JSON file that a later :func:`load` chokes on.
    """
    from gpufeed.measure.machine import machine_info

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ms = list(measurements)
    doc = {
        "format": "gpufeed-measurements",
        "version": FORMAT_VERSION,
        "machine": next((m.machine for m in ms if m.machine), None) or machine_info(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # what a reader is told, not the commit
        "measurements": [{**m.to_dict(), "machine": None} for m in ms],  # one machine per file
        **extra,
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


def load(path: str | Path) -> tuple[list[Measurement], dict]:
    """Reads a file written by :func:`save`: the measurements (each with the machine) and the document."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read measurements from {path}: {e}") from e
    if doc.get("format") != "gpufeed-measurements":
        raise ValueError(f"{path} is not a gpufeed measurements file (no 'format' field)")
    ms = [Measurement.from_dict({**d, "machine": doc.get("machine")}) for d in doc["measurements"]]
    return ms, doc
