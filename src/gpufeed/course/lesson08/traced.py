"""Lesson 08's profiler traces: a few steps of an arm traced, and what the trace says between steps.

``notebooks/08_prefetch.ipynb``, section 5: :func:`profile_steps` writes a chrome trace of a few
steps of a feed (:mod:`gpufeed.course.lesson08.feeds`), :func:`picture` is the first steps drawn
by the lesson, :func:`gaps` the host's time between steps (the samples a verdict on two traces
compares) and :func:`between_steps` reads a trace's summary.

Example:
    >>> s = {"window_ms": 100.0, "steps": 8, "gpu_idle_fraction": None, "stages": {}}
    >>> between_steps(s)["per_step_ms"], between_steps(s)["gpu_busy_ms"]
    (12.5, None)
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from gpufeed.course import trace
from gpufeed.course.lesson08.feeds import synchronizer

#: Steps of each trace drawn in the lesson's chart.
SHOWN_STEPS = 3


def profile_steps(source: Iterable, step: Callable, path: str | Path, device, *, skip: int = 1,
                  wait: int = 1, warmup: int = 2, active: int = 12) -> Path:
    """A chrome trace of ``active`` steps fed by ``source``, each in a ``record_function("step")``
    range (the batch is fetched outside it); the first ``skip + wait`` steps are left out and the
    next ``warmup`` run the profiler without recording. CUDA activity is traced on a GPU, and the
    last step ends with a synchronisation, so that the window holds the device's work of a step
    that never waits for it."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # hides the profiler's C++ log lines
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    path, sync = Path(path), synchronizer(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    plan = schedule(skip_first=skip, wait=wait, warmup=warmup, active=active, repeat=1)
    it = iter(source)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
            with profile(activities=activities, schedule=plan,
                         on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
                for left in reversed(range(skip + wait + warmup + active)):
                    batch = next(it)  # outside the step's range: the host's time between steps
                    with record_function("step"):
                        step(*batch)
                    if left == 0:
                        sync()
                    prof.step()
    finally:
        if hasattr(it, "close"):
            it.close()
    return path


def picture(path: str | Path, shown: int = SHOWN_STEPS) -> list[dict]:
    """The first ``shown`` steps of a trace from :func:`profile_steps`, as JSON-ready intervals:
    the steps' ranges on a ``host`` row, the device's work on a row per stream."""
    s = trace.summary(path, names=["step"])
    until = s["window_ms"] / max(s["steps"], 1) * shown
    return [{**vars(i), "resource": "host" if i.resource.startswith("thread") else i.resource}
            for i in trace.intervals(path, names=["step"]) if i.start < until]


def gaps(path: str | Path, stage: str = "step") -> list[float]:
    """The host's time between two ``stage`` ranges of a trace (ms, one per pair of consecutive
    steps): when a loop fetches its next batch. The samples a verdict on two traces compares."""
    ranges = sorted((i for i in trace.intervals(path, names=[stage], gpu=False) if i.stage == stage),
                    key=lambda i: i.start)
    return [max(b.start - a.end, 0.0) for a, b in zip(ranges, ranges[1:])]


def between_steps(summary: dict, stage: str = "step") -> dict:
    """What a trace summary (:func:`gpufeed.course.trace.summary`) says about the time between steps.

    Returns ``steps`` profiled, ``per_step_ms`` (the window over the steps), ``host_ms`` (the
    window less the ``stage`` ranges: the host's time outside the steps), ``gpu_busy_ms`` (the time
    a kernel ran; None without any) and ``gpu_idle`` (a fraction, or None).

    Example:
        >>> s = {"window_ms": 100.0, "steps": 8, "gpu_idle_fraction": 0.25,
        ...      "stages": {"step": {"total_ms": 90.0}}}
        >>> between_steps(s)["host_ms"], between_steps(s)["gpu_busy_ms"]
        (10.0, 75.0)
    """
    window, idle = summary["window_ms"], summary.get("gpu_idle_fraction")
    in_steps = summary["stages"].get(stage, {}).get("total_ms", 0.0)
    return {"steps": summary["steps"], "per_step_ms": window / max(summary["steps"], 1),
            "host_ms": window - in_steps, "gpu_busy_ms": None if idle is None else (1 - idle) * window,
            "gpu_idle": idle}
