"""Lesson 08's fair test of a GPU prefetcher: is the training loop faster with it, and why (not)?

``notebooks/08_prefetch.ipynb``, section 5. Three feeds of one training step
(:mod:`gpufeed.course.lesson08.feeds`): the copy on the default stream, a side stream in the loop
(on CUDA only) and a prefetcher (its host work on a thread of its own). On a GPU the prefetcher's
gain over the in-loop arm is the host work its thread moved, and the in-loop arm's over the plain
loop is the copy its side stream hid. Two kinds of step: one that reads its loss every step (the
host waits for the GPU each step) and one that never waits (:data:`REGIMES`).

What makes it fair (the lesson's first GPU run, an H100 on 2026-11-26, was not):

* :func:`plan`: the loader's host work, the copy, the conversion and the step are timed alone, the
  model's width is chosen so that the step takes about as long as what a prefetcher hides
  (:func:`balance`), and the best gain the overlap allows is computed before the loops are timed
  (:func:`bound`, the one bound of the lesson);
* :func:`measure`: each variant runs ``steps`` timed steps after ``warmup`` untimed ones, the
  variants in turns (ABCABC, :func:`alternate`), the device synchronised at both ends of each timed
  run (:func:`run_once`), with the memory peaks of each run; then a profiler trace of a few steps of
  each, the first left out, for the picture and the why
  (:func:`gpufeed.course.lesson08.traced.profile_steps`). How many of each
  the mode decides (:func:`settings`: quick mode is quick on a GPU too), and :meth:`Plan.cost`
  estimates what they cost before they run;
* :mod:`gpufeed.course.lesson08.reading` turns the result into sentences through the course's
  verdict method, and picks the committed reference a machine without CUDA shows.

Every function takes the device, the step and the sources as arguments: the tests run them on the
CPU (with ``ThreadPrefetcher``) and under the CUDA-ordering simulator (:mod:`gpufeed.simcuda`).

Example:
    >>> round(bound(2.0, 1.0), 2), round(bound(2.0, 1.0, n=4), 2)  # copy 2 ms, step 1 ms
    (1.5, 1.33)
    >>> round(bound(1.0, 2.0, 3.0), 2)  # gather 1 ms, copy 2 ms, step 3 ms: each batch on its own stage
    2.0
    >>> balance(2.0, lambda width: 0.5 * width)  # step times 0.5, 1, 2 ms: width 4 matches the copy
    (4, {1: 0.5, 2: 1.0, 4: 2.0})
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gpufeed import config
from gpufeed.course import trace
from gpufeed.course.lesson08.feeds import Epochs, nbytes, prefetched_name, sources, synchronizer
from gpufeed.course.lesson08.traced import gaps, picture, profile_steps
from gpufeed.data.movers import to_device
from gpufeed.data.prefetch import prepare
from gpufeed.measure.harness import Measurement, benchmark

#: The two kinds of step: does it read its loss (and so wait for the device) every step?
REGIMES = {"syncs every step": True, "never syncs": False}
#: The regime whose trace the lesson draws and reads.
SYNCED = "syncs every step"
#: Model widths tried, narrowest first.
WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: How ``CudaPrefetcher`` works, saved with a GPU's results (the old format's say theirs).
PREFETCHER = ("host work (asking the loader, pinning, issuing the copy and the conversion) on a "
              "producer thread with its own side stream, and GPU memory bounded by a ring of "
              "depth + 2 batches")
#: Seconds a profiled run costs beyond its steps (the profiler's start, the trace's export and
#: reading): about 1.5 s each in the H100 run of 2026-11-26 (two traced runs in 2.9 s).
PROFILER_S = 1.5



def bound(*stages: float, n: int | None = None, beside: Sequence[float] | None = None) -> float:
    """The most overlap can gain when each batch passes ``stages`` in order (e.g. decode, step; or
    gather, copy, step), each on a resource of its own: in turns a batch costs their sum;
    overlapped, the longest of them.

    With ``n`` batches, the first batch goes through every stage with nothing to hide it behind:
    ``n sum`` against ``sum + (n - 1) max``. Without ``n``, a long run's steady state (a timed
    window that starts after a warm-up). ``beside``: the stages' costs when they run side by side,
    where they differ from their costs in turns (two stages sharing cores slow each other); by
    default the same. Any unit, the same for all. The lesson's one bound: sections 4 and 5 and
    exercise 3 all use it.

    Example:
        >>> round(bound(10.0, 8.0, n=8, beside=[12.0, 8.0]), 2)  # decoding slowed to 12 beside the step
        1.38
    """
    beside = list(stages if beside is None else beside)
    if len(stages) < 2 or len(beside) != len(stages) or min(*stages, *beside) < 0 or max(stages) <= 0:
        raise ValueError(f"bound: at least two stage costs, none negative (got {stages}, beside {beside})")
    total, together, longest = sum(stages), sum(beside), max(beside)
    if n is None:
        return total / longest
    return n * total / (together + (n - 1) * longest)


def balance(copy_s: float, time_step: Callable[[int], float],
            widths: Sequence[int] = WIDTHS) -> tuple[int, dict[int, float]]:
    """The width whose step time is nearest the copy's (by ratio), and every time tried.

    Widths are tried narrowest first, up to the first whose step takes at least as long as the
    copy; ``time_step(width)`` returns the step's time in the copy's unit.
    """
    tried: dict[int, float] = {}
    for width in widths:
        tried[width] = time_step(width)
        if tried[width] >= copy_s:
            break
    return min(tried, key=lambda w: abs(math.log(tried[w] / copy_s))), tried


def run_once(source: Iterable, step: Callable, *, warmup: int, steps: int,
             sync: Callable[[], None]) -> float:
    """Seconds a step over ``steps`` steps fed by ``source``, after ``warmup`` untimed ones; the
    device is synchronised before the clock starts and before it stops. The feed is closed after."""
    it = iter(source)
    try:
        for _ in range(warmup):
            step(*next(it))
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step(*next(it))
        sync()
        return (time.perf_counter() - start) / steps
    finally:
        if hasattr(it, "close"):
            it.close()  # a prefetcher's thread stops, its batches in flight are dropped


def allocator(device) -> dict:
    """The caching allocator's counters now: bytes ``reserved`` and ``alloc_retries`` (allocations
    that failed, freed the cache and tried again: a flush inside a timed run); {} on a CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    return {"reserved": torch.cuda.memory_reserved(device),
            "alloc_retries": stats.get("num_alloc_retries", 0)}


def memory_peaks(device, before: int) -> dict:
    """The peaks since the last reset (``torch.cuda.memory_stats``), in bytes; {} on a CPU.

    ``in_flight_peak`` is the allocated peak less ``before`` (what was allocated when the run
    began): the batches in flight and the step's activations.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    peak = stats["allocated_bytes.all.peak"]
    return {"allocated_peak": peak, "reserved_peak": stats["reserved_bytes.all.peak"],
            "in_flight_peak": peak - before}


def alternate(feeds: dict[str, Callable[[], Iterable]], step: Callable, device, *, repeats: int = 3,
              warmup: int = 10, steps: int = 100, label: str = "",
              items: int | None = None) -> list[Measurement]:
    """Times each feed with ``step`` in turns (ABCABC for three): one :class:`Measurement` a feed.

    Each run starts a new pass of its feed (:func:`run_once`), so each pays its own warm-up. A
    sample is the seconds a step of one run; ``params`` hold the variant, the regime ``label``, the
    runs' places in the order (0 first), the memory peaks, the highest of its runs
    (:func:`memory_peaks`), and on CUDA the allocator's counters (:func:`allocator`): reserved
    before the arm's first run and after its last, and the retries in its runs.
    """
    if repeats < 1 or steps < 1 or warmup < 0:
        raise ValueError("alternate: repeats and steps must be at least 1, warmup at least 0")
    from gpufeed.measure.machine import machine_info

    device, sync = torch.device(device), synchronizer(device)
    samples: dict[str, list[float]] = {name: [] for name in feeds}
    places: dict[str, list[int]] = {name: [] for name in feeds}
    memory: dict[str, dict] = {name: {} for name in feeds}
    for place, name in enumerate(n for _ in range(repeats) for n in feeds):
        before = 0
        if device.type == "cuda":  # the last run ended synchronised: its batches are freed
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        counted = allocator(device)
        samples[name].append(run_once(feeds[name](), step, warmup=warmup, steps=steps, sync=sync))
        places[name].append(place)
        for key, value in memory_peaks(device, before).items():
            memory[name][key] = max(value, memory[name].get(key, value))
        if counted:  # reserved before the arm's first run and after its last; retries in its runs
            after = allocator(device)
            memory[name].setdefault("reserved_before", counted["reserved"])
            memory[name]["reserved_after"] = after["reserved"]
            memory[name]["alloc_retries"] = (memory[name].get("alloc_retries", 0)
                                             + after["alloc_retries"] - counted["alloc_retries"])
    machine = machine_info()
    return [Measurement(f"{name}, {label}" if label else name, samples[name], items=items,
                        params={"variant": name, "regime": label, "warmup": warmup, "steps": steps,
                                "places": places[name], "memory": memory[name]}, machine=machine)
            for name in feeds]



def settings(mode: str | None = None) -> dict:
    """:func:`measure`'s sizes in ``mode`` (default: this run's, :func:`gpufeed.config.mode`).

    Full mode: 5 runs of each arm (a verdict needs 5), 30 timed steps after 3, a trace of 12
    steps of each arm in both regimes: about a minute at the H100's full-size costs
    (:meth:`Plan.cost`). Quick mode (and site mode, which has no GPU): 2 runs of 10
    steps after 2, a trace of 3 steps of each arm with the step that syncs only: it shows that the
    section runs, on a GPU too, and its verdicts read "this run cannot tell".

    Example:
        >>> settings("quick")["steps"], settings("full")["repeats"]
        (10, 5)
    """
    pick = config.picker(mode or config.mode())
    return {"repeats": pick(2, 5), "warmup": pick(2, 3), "steps": pick(10, 30), "active": pick(3, 12),
            "traced": pick((SYNCED,), tuple(REGIMES))}



@dataclass
class Plan:
    """What :func:`plan` measured and chose: the costs alone, the width and the bound."""

    loader: Iterable
    device: torch.device
    make_step: Callable[[int, bool], Callable]
    dtype: torch.dtype | None
    mean: object
    std: object
    host: Measurement
    copy: Measurement
    convert: Measurement
    steps: dict[int, Measurement] = field(default_factory=dict)
    width: int = 0

    @property
    def convert_with_step(self) -> bool:
        """On a GPU the conversion's kernels and the step's share the compute units: they take
        turns, and the copy is what overlap hides. On a CPU the prefetch thread converts."""
        return self.device.type == "cuda"

    @property
    def stages(self) -> tuple[float, ...]:
        """Seconds a batch spends on each resource in turn: on a GPU the host (the loader's gather
        and pinning), the copy engine, the compute units (conversion and step); on a CPU the
        prefetch thread (gather, copy, conversion) and the step."""
        if self.convert_with_step:
            return self.host.median, self.copy.median, self.work_s
        return self.feed_s, self.work_s

    @property
    def feed_s(self) -> float:
        """What a prefetcher can hide: the loader's host work and the copy (and the conversion,
        off a GPU)."""
        return self.host.median + self.copy.median + (0.0 if self.convert_with_step else self.convert.median)

    @property
    def work_s(self) -> float:
        """What it cannot: the step (and the conversion, on a GPU)."""
        return self.steps[self.width].median + (self.convert.median if self.convert_with_step else 0.0)

    @property
    def bound(self) -> float:
        """:func:`bound` of :attr:`stages`, in the steady state (the timed steps follow a warm-up)."""
        return bound(*self.stages)

    def cost(self, repeats: int, warmup: int, steps: int, active: int, traced=tuple(REGIMES)) -> float:
        """Seconds :func:`measure` should take with these sizes (:func:`settings`), from the costs
        alone: every arm's steps as if in turns (the slowest arm's rate, an upper estimate), each
        regime's step timed alone, and each trace's steps plus :data:`PROFILER_S`.

        Example:
            >>> m = lambda s: Measurement("x", [s])
            >>> p = Plan([], torch.device("cuda"), None, None, None, None, m(0.01), m(0.002), m(0.001),
            ...          {8: m(0.011)}, 8)  # gather 10 ms, copy 2 ms, conversion 1 ms, step 11 ms
            >>> round(p.cost(**settings("quick")), 1), round(p.cost(**settings("full")), 1)
            (8.6, 35.2)
        """
        per_step = self.feed_s + self.work_s
        arms = 3 if self.device.type == "cuda" else 2
        timed = len(REGIMES) * arms * repeats * (warmup + steps) * per_step
        alone = len(REGIMES) * 7 * self.work_s  # benchmark: 2 warm-up calls and 5 timed
        profiled = len(traced) * arms * (PROFILER_S + (4 + active) * per_step)  # skip 1, wait 1, warm-up 2
        return timed + alone + profiled

    def describe(self) -> str:
        """A sentence: the costs alone, the width chosen and the bound, before measuring."""
        host, copy, convert = (m.median * 1e3 for m in (self.host, self.copy, self.convert))
        step = self.steps[self.width].median * 1e3
        tried = ", ".join(f"{k}: {m.median * 1e3:.2f}" for k, m in self.steps.items())
        longest = max(self.stages) * 1e3
        sides = ("the loader's gather and pinning, the copy, and the conversion with the step"
                 if self.convert_with_step else "the thread's gather, copy and conversion, and the step")
        return (f"A batch of {self.copy.nbytes / 1e6:.0f} MB: the loader gathers and pins it in {host:.2f} ms, "
                f"the copy takes {copy:.2f} ms ({self.copy.gb_per_s:.1f} GB/s), the conversion {convert:.2f} ms; "
                f"a step of width {self.width} takes {step:.2f} ms (ms a step by width: {tried}). In turns a step "
                f"costs {(self.feed_s + self.work_s) * 1e3:.2f} ms; overlapped ({sides} each on its own), at best "
                f"the longest of them, {longest:.2f} ms: the bound is {self.bound:.2f}x.")

    def to_dict(self) -> dict:
        return {"batch_bytes": self.copy.nbytes, "converted_bytes": self.convert.nbytes,
                "host_ms": self.host.median * 1e3, "copy_ms": self.copy.median * 1e3,
                "convert_ms": self.convert.median * 1e3,
                "widths_ms": {str(k): m.median * 1e3 for k, m in self.steps.items()},
                "width": self.width, "step_ms": self.steps[self.width].median * 1e3,
                "feed_ms": self.feed_s * 1e3, "work_ms": self.work_s * 1e3,
                "stages_ms": [x * 1e3 for x in self.stages],
                "convert_with_step": self.convert_with_step, "bound": self.bound}


def plan(loader: Iterable, device, make_step: Callable[[int, bool], Callable], *, dtype=None,
         mean=None, std=None, widths: Sequence[int] = WIDTHS, repeats: int = 5,
         items: int | None = None) -> Plan:
    """Times the loader's host work, the copy of its first batch, the conversion and the step alone;
    chooses the width.

    Args:
        loader: a :func:`~gpufeed.course.lesson08.feeds.feeding_loader` (or a list of batches ``(images, labels)`` on the host,
            pinned for a GPU).
        device: where the step runs.
        make_step: ``make_step(width, sync)`` returns a training step ``step(images, labels)``
            whose model has that width and which reads its loss every step if ``sync``.
        dtype, mean, std: the conversion on the device (:func:`gpufeed.data.prefetch.prepare`).
        widths: tried narrowest first (:func:`balance`).
        repeats: timed calls of each.
        items: images a batch, for the steps' images/s.
    """
    device = torch.device(device)
    batches = iter(Epochs(loader))
    first = next(batches)
    host = benchmark(lambda: next(batches), name="the loader's gather and pinning of a batch",
                     nbytes=nbytes(first), repeats=max(repeats, 10))
    copy = benchmark(lambda: to_device(first, device, non_blocking=True), name="copy of a batch",
                     nbytes=nbytes(first), repeats=max(repeats, 10))
    on_device = to_device(first, device)
    ready = prepare(on_device, dtype, mean, std)
    convert = benchmark(lambda: prepare(on_device, dtype, mean, std), name="conversion of a batch",
                        nbytes=nbytes(ready), repeats=max(repeats, 10))
    p = Plan(loader, device, make_step, dtype, mean, std, host, copy, convert)

    def time_step(width: int) -> float:
        step = make_step(width, True)
        p.steps[width] = benchmark(lambda: step(*ready), name=f"step, width {width}", items=items,
                                   repeats=repeats)
        return p.steps[width].median

    p.width, _ = balance(p.feed_s, time_step, widths)  # the step about as long as what it hides
    return p


def measure(p: Plan, *, trace_dir: str | Path | None = None, repeats: int = 5, warmup: int = 3,
            steps: int = 30, active: int = 12, traced=tuple(REGIMES), depth: int = 1,
            items: int | None = None) -> tuple[dict, list[Measurement]]:
    """Times the arms in turns with a step of each regime; profiles each in the ``traced`` regimes
    if ``trace_dir``. The sizes (``repeats``, ``warmup``, ``steps``, ``active``, ``traced``) come
    from :func:`settings` in the lesson.

    Returns:
        ``(result, measurements)``: ``result`` is JSON-ready (what :func:`plan` found, ``regimes``
        with each variant's runs, median, spread and memory, ``bounds`` with each regime's bound
        from its own step timed alone, ``traces`` with each trace's summary, ``gaps`` with each
        trace's host time between steps (:func:`gaps`), ``picture`` with the first steps of each
        variant's trace with a syncing step); ``measurements`` are the raw samples, the plan's first.
    """
    feeds = sources(p.loader, p.device, p.dtype, p.mean, p.std, depth)
    result = {**p.to_dict(), "prefetcher": prefetched_name(p.device), "depth": depth,
              "arms": list(feeds), "repeats": repeats, "warmup": warmup, "steps": steps,
              "regimes": {}, "bounds": {}, "traces": {}, "gaps": {}, "picture": {}}
    timed = []
    ready = prepare(to_device(next(iter(Epochs(p.loader))), p.device), p.dtype, p.mean, p.std)
    for regime, sync in REGIMES.items():
        step = p.make_step(p.width, sync)
        alone = benchmark(lambda step=step: step(*ready), name=f"step alone, {regime}", repeats=5)
        work = alone.median + (p.convert.median if p.convert_with_step else 0.0)
        result["bounds"][regime] = bound(*p.stages[:-1], work)  # this regime's own step
        ms = alternate(feeds, step, p.device, repeats=repeats, warmup=warmup, steps=steps,
                       label=regime, items=items)
        timed += ms
        result["regimes"][regime] = {m.params["variant"]: {
            "runs_ms": [s * 1e3 for s in m.samples], "median_ms": m.median * 1e3,
            "places": m.params["places"], "memory": m.params["memory"]} for m in ms}
        if trace_dir is None or regime not in traced:
            continue
        for name, start in feeds.items():
            path = Path(trace_dir) / f"{regime.replace(' ', '-')}-{name.replace(' ', '-')}.json"
            profile_steps(start(), step, path, p.device, active=active)
            result["traces"].setdefault(regime, {})[name] = trace.summary(path, names=["step"])
            result["gaps"].setdefault(regime, {})[name] = gaps(path)
            if sync:
                result["picture"][name] = picture(path)
    return result, [p.host, p.copy, p.convert, *p.steps.values(), *timed]
