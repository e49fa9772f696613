"""Reading a torch.profiler chrome trace: its events, its window, and the time the GPU sat idle.

``prof.export_chrome_trace(path)`` writes JSON with a ``traceEvents`` list; the events read here
are complete events (``"ph": "X"``, start ``ts`` and duration ``dur`` in microseconds). The GPU
idle fraction is ``1 - (union of kernel intervals) / window``: the share of the profiled window in
which no kernel ran (copies do not count as busy by default: a GPU that only copies waits for data).
:func:`device_split` splits the same window three ways, as :mod:`~gpufeed.measure.probe` reports
a learner's own steps: computing (a kernel ran), copying only (a copy or memset ran, no kernel), and
idle (neither): there, time spent copying is device time, not idle.

The course reads traces per named stage (:mod:`gpufeed.course.trace`, lesson 02, which re-exports
these); :func:`gpufeed.measure.diagnose` reads the trace of a learner's own steps with the same
functions: the device's split, host-to-device copy time, and host waits (:func:`durations`).

Example:
    >>> doc = {"traceEvents": [
    ...     {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 0, "dur": 50},
    ...     {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 5, "dur": 10},
    ...     {"ph": "X", "cat": "kernel", "name": "conv", "ts": 30, "dur": 10},
    ...     {"ph": "X", "cat": "kernel", "name": "relu", "ts": 35, "dur": 10}]}
    >>> gpu_idle_fraction(doc)  # kernels cover 30..45 of the 0..50 window
    0.7
    >>> durations(doc, ["gpu_memcpy"], "HtoD")  # ms
    0.01
    >>> device_split(doc)  # the copy (5..15) is device time: idle is 50 - 15 - 10 = 25 of 50 us
    {'window_ms': 0.05, 'compute_ms': 0.015, 'copy_ms': 0.01, 'idle': 0.5}
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from pathlib import Path

#: Categories of ``record_function`` ranges on the CPU (``cpu_op`` only for stages named).
USER = "user_annotation"
LEGACY_USER = ("cpu_op",)
#: GPU categories: kernels (compute) and copies/memsets.
KERNEL = ("kernel",)
GPU_COPY = ("gpu_memcpy", "gpu_memset")

#: The steps of ``schedule(...)``: they set the window when present.
STEP = re.compile(r"^ProfilerStep#\d+$")


def union_length(spans: Iterable[tuple[float, float]]) -> float:
    """Total length covered by ``(start, end)`` spans, time covered twice counted once.

    Example:
        >>> union_length([(0, 10), (5, 15), (30, 40)])
        25.0
    """
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(spans):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return float(total)


def load(trace) -> dict:
    """The trace document from a path (``.json`` or ``.json.gz``) or an already loaded dict."""
    if isinstance(trace, dict):
        doc = trace
    else:
        path = Path(trace)
        try:
            with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:  # noqa: SIM115
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read a chrome trace from {path}: {e}. Write one with "
                             "prof.export_chrome_trace(path) after profiling") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError("not a chrome trace: no 'traceEvents' list (export it with prof.export_chrome_trace)")
    return doc


def complete_events(trace, cats: Iterable[str] | None = None) -> list[dict]:
    """The complete (``"ph": "X"``) events, of the categories ``cats`` if given."""
    cats = None if cats is None else set(cats)
    return [e for e in load(trace)["traceEvents"]
            if e.get("ph") == "X" and "dur" in e and (cats is None or e.get("cat") in cats)]


def window_us(trace) -> tuple[float, float]:
    """The profiled window in µs: the ``ProfilerStep#N`` ranges if any, else all events."""
    events = complete_events(trace)
    steps = [e for e in events if STEP.match(str(e.get("name", "")))]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in (steps or events)]
    if not spans:
        raise ValueError("the trace has no complete events: was anything profiled (schedule's active steps)?")
    return min(s for s, _ in spans), max(e for _, e in spans)


def gpu_idle_fraction(trace, cats: Iterable[str] = KERNEL) -> float | None:
    """Share of the profiled window in which no GPU kernel ran; None if the trace has none (CPU)."""
    kernels = complete_events(trace, cats)
    if not kernels:
        return None
    start, end = window_us(trace)
    spans = [(max(e["ts"], start), min(e["ts"] + e["dur"], end)) for e in kernels]
    busy = union_length((a, b) for a, b in spans if b > a)
    return round(1.0 - busy / (end - start), 6) if end > start else None


def durations(trace, cats: Iterable[str], contains: str = "") -> float:
    """Milliseconds of the events of categories ``cats`` whose name contains ``contains``, summed
    (e.g. ``["gpu_memcpy"], "HtoD"``: the host-to-device copies; ``["cuda_runtime"],
    "Synchronize"``: the host waiting for the GPU)."""
    return round(sum(e["dur"] for e in complete_events(trace, cats) if contains in str(e.get("name", ""))) / 1000.0, 6)


def device_split(trace) -> dict | None:
    """The profiled window (:func:`window_us`) on the device, three ways: ``compute_ms`` (a kernel
    ran), ``copy_ms`` (a copy or memset ran and no kernel: device time, not idle), and ``idle``, the
    share of the window in which neither ran. None if the trace has no GPU event (CPU).

    Example:
        >>> device_split({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 0, "dur": 9}]}) is None
        True
    """
    kernels, copies = complete_events(trace, KERNEL), complete_events(trace, GPU_COPY)
    if not kernels and not copies:
        return None
    start, end = window_us(trace)
    if end <= start:
        return None

    def clipped(events):
        return [(max(e["ts"], start), min(e["ts"] + e["dur"], end)) for e in events
                if min(e["ts"] + e["dur"], end) > max(e["ts"], start)]

    compute = union_length(clipped(kernels))
    busy = union_length(clipped(kernels) + clipped(copies))
    return {"window_ms": round((end - start) / 1e3, 6), "compute_ms": round(compute / 1e3, 6),
            "copy_ms": round((busy - compute) / 1e3, 6), "idle": round(1.0 - busy / (end - start), 6)}
