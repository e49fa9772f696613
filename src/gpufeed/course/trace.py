"""From a torch.profiler trace to numbers: time per named stage, and how long the GPU sat idle.

``prof.export_chrome_trace(path)`` (or ``torch.profiler.tensorboard_trace_handler``) writes JSON
with a ``traceEvents`` list. The events this module reads are complete events (``"ph": "X"``,
start ``ts`` and duration ``dur`` in microseconds):

* ``record_function("decode")`` ranges: category ``user_annotation`` on the CPU thread that ran
  them (torch also copies them onto the GPU timeline as ``gpu_user_annotation``; those are left
  out, so each range counts once). Older releases filed some as ``cpu_op``: a stage asked for by
  name is found under either category;
* ``ProfilerStep#N``: the steps of ``schedule(...)``; they set the time window when present;
* GPU work: categories ``kernel``, ``gpu_memcpy`` and ``gpu_memset``. The GPU idle fraction is
  ``1 - (union of kernel intervals) / window``: the share of the profiled time in which no kernel
  ran. Copies are not counted as busy by default: a GPU that only copies is waiting for data.

Taught in ``notebooks/02_profiling.ipynb``; lesson 08 uses it to prove that copies overlap compute.

Example:
    >>> doc = {"traceEvents": [
    ...     {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 50},
    ...     {"ph": "X", "cat": "user_annotation", "name": "decode", "ts": 0, "dur": 30},
    ...     {"ph": "X", "cat": "kernel", "name": "conv", "ts": 30, "dur": 10},
    ...     {"ph": "X", "cat": "kernel", "name": "relu", "ts": 35, "dur": 10}]}
    >>> stage_times(doc)["decode"]
    StageTime(count=1, total_ms=0.03, mean_ms=0.03, share=0.6)
    >>> gpu_idle_fraction(doc)  # kernels cover 30..45 of the 0..50 window
    0.7
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from gpufeed.course.timeline import Interval
from gpufeed.measure.traces import (
    GPU_COPY,
    KERNEL,
    LEGACY_USER,
    STEP,
    USER,
    complete_events,
    gpu_idle_fraction,
    load,
    window_us,
)


@dataclass(frozen=True)
class StageTime:
    """Time spent in one named stage: calls, total and mean ms, and share of the window."""

    count: int
    total_ms: float
    mean_ms: float
    share: float


def cpu_rows(averages) -> dict:
    """``prof.key_averages()`` as a dict ``key -> row``, keeping only the CPU-side rows.

    With CUDA activity, a ``record_function`` range that launches GPU work comes back twice: a
    CPU row and a GPU row of the same key (``device_type`` CUDA) whose ``cpu_time_total`` is 0. A
    plain ``{e.key: e for e in averages}`` keeps whichever comes last, so a stage (or
    ``ProfilerStep*``) could read as 0 us. As :func:`stage_times` does for traces, each range
    counts once, on the CPU.

    Args:
        averages: what ``prof.key_averages()`` returns (rows with ``key`` and ``device_type``).

    Example:
        >>> from types import SimpleNamespace as Row
        >>> from torch.autograd import DeviceType
        >>> rows = [Row(key="copy", device_type=DeviceType.CPU, cpu_time_total=120.0),
        ...         Row(key="copy", device_type=DeviceType.CUDA, cpu_time_total=0.0)]
        >>> cpu_rows(rows)["copy"].cpu_time_total
        120.0
    """
    from torch.autograd import DeviceType

    return {e.key: e for e in averages if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU}


def _stage_events(trace, names: Iterable[str] | None) -> list[dict]:
    if names is None:
        return [e for e in complete_events(trace, [USER]) if not STEP.match(e["name"])]
    wanted = set(names)
    seen, out = set(), []
    for e in complete_events(trace, [USER, *LEGACY_USER]):
        key = (e["name"], e.get("tid"), e["ts"], e["dur"])
        if e["name"] in wanted and key not in seen:  # the same range under two categories counts once
            seen.add(key)
            out.append(e)
    return out


def stage_times(trace, names: Iterable[str] | None = None) -> dict[str, StageTime]:
    """Time per ``record_function`` stage, in the order the stages first ran.

    Args:
        trace: a path or a loaded trace.
        names: the stages to report (searched also under legacy categories); default: every
            ``record_function`` range except the profiler's own ``ProfilerStep#N``.
    """
    start, end = window_us(trace)
    totals: dict[str, list[float]] = {}
    for e in sorted(_stage_events(trace, names), key=lambda e: e["ts"]):
        totals.setdefault(e["name"], []).append(e["dur"] / 1000.0)  # µs -> ms
    return {name: StageTime(len(d), round(sum(d), 6), round(sum(d) / len(d), 6),
                            round(sum(d) * 1000.0 / (end - start), 6) if end > start else 0.0)
            for name, d in totals.items()}


def summary(trace, names: Iterable[str] | None = None) -> dict:
    """A JSON-ready summary: window, stages, kernel count and the GPU idle fraction."""
    doc = load(trace)
    start, end = window_us(doc)
    return {
        "window_ms": round((end - start) / 1000.0, 6),
        "steps": sum(1 for e in complete_events(doc, [USER]) if STEP.match(e["name"])),
        "stages": {k: asdict(v) for k, v in stage_times(doc, names).items()},
        "kernels": len(complete_events(doc, KERNEL)),
        "gpu_idle_fraction": gpu_idle_fraction(doc),
    }


def report(trace, names: Iterable[str] | None = None) -> str:
    """The summary as a text table, one stage per line, and the GPU's idle share."""
    s = summary(trace, names)
    rows = [["stage", "calls", "total ms", "mean ms", "of window"]]
    for name, t in s["stages"].items():
        rows.append([name, str(t["count"]), f"{t['total_ms']:.2f}", f"{t['mean_ms']:.3f}", f"{t['share']:.1%}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"window: {s['window_ms']:.2f} ms over {s['steps']} profiled steps")
    idle = s["gpu_idle_fraction"]
    lines.append("GPU: no kernels in this trace (CPU only)" if idle is None
                 else f"GPU idle {idle:.1%} of the window ({s['kernels']} kernels)")
    return "\n".join(lines)


def intervals(trace, names: Iterable[str] | None = None, gpu: bool = True) -> list[Interval]:
    """The trace as :class:`~gpufeed.course.timeline.Interval` records (ms from the window's start).

    Stages go on one row per CPU thread (``"thread <tid>"``); with ``gpu``, kernels go on
    ``"GPU stream <n>"`` rows as ``compute`` and copies as ``copy``, for :func:`gpufeed.course.timeline.gantt`.
    Only what overlaps the profiled window is kept.
    """
    start, end = window_us(trace)
    out = [Interval(f"thread {e.get('tid')}", e["name"], (e["ts"] - start) / 1000.0,
                    (e["ts"] + e["dur"] - start) / 1000.0) for e in _stage_events(trace, names)]
    if gpu:
        for e in complete_events(trace, [*KERNEL, *GPU_COPY]):
            stage = "compute" if e.get("cat") in KERNEL else "copy"
            stream = (e.get("args") or {}).get("stream", e.get("tid"))
            out.append(Interval("GPU" if stream is None else f"GPU stream {stream}", stage, (e["ts"] - start) / 1000.0,
                                (e["ts"] + e["dur"] - start) / 1000.0))
    return [i for i in out if i.end >= 0 and i.start <= (end - start) / 1000.0]  # within the window
