"""The nominal timeline: each simulated step placed on its stream at made-up, fixed speeds.

Copies run at :attr:`NominalSpeeds.copy_gb_s`, kernels at :attr:`NominalSpeeds.kernel_gb_s`, a
launch every :attr:`NominalSpeeds.launch_us`, each step after the steps it follows and waits for:
a drawing of what may overlap what, not of CUDA's speed. :func:`spans` turns the steps a
:class:`~gpufeed.simcuda.device.Simulator` issued into :class:`Span` s, which
:func:`gpufeed.course.timeline.gantt` draws.

Example:
    >>> from gpufeed.simcuda.streams import Work
    >>> NominalSpeeds().ms(Work(None, 0, "copy", "copy", nbytes=50_000_000))  # 50 MB at 25 GB/s
    2.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufeed.simcuda.streams import Work


@dataclass
class NominalSpeeds:
    """The made-up, fixed speeds of the device that the nominal timeline is drawn on, and the
    nominal duration of a step at them: not CUDA's speed, only what may overlap what."""

    copy_gb_s: float = 25.0  # host <-> device copies
    kernel_gb_s: float = 1500.0  # bytes a kernel reads and writes
    launch_us: float = 5.0  # the host's time to issue one step
    #: the host's own memcpy, in *real* time: when set, pinning a tensor and staging a copy from
    #: pageable memory make the thread that does it sleep ``nbytes / host_gb_s`` (a sleep releases
    #: the GIL, as torch's copies do), so that a test can see on which thread that host work runs.
    #: None: they take only the CPU's own (tiny) time.
    host_gb_s: float | None = None

    def ms(self, work: Work) -> float:
        """How long ``work`` takes on the nominal timeline, in milliseconds.

        Example:
            >>> from gpufeed.simcuda.streams import Work
            >>> NominalSpeeds().ms(Work(None, 0, "copy", "copy", nbytes=50_000_000))  # 50 MB at 25 GB/s
            2.0
        """
        if work.kind == "busy":
            return work.busy_ms
        rate = self.copy_gb_s if work.kind == "copy" else self.kernel_gb_s
        return work.nbytes / (rate * 1e6) if work.kind in ("copy", "kernel") else 0.0


@dataclass(frozen=True)
class Span:
    """One stream's copy or kernel on the nominal timeline, from ``start`` to ``end`` (milliseconds);
    ``stage`` is ``"copy"`` or ``"compute"``. The fields of :class:`gpufeed.course.timeline.Interval`,
    which draws it."""

    resource: str
    stage: str
    start: float
    end: float


def spans(works: Iterable[Work]) -> list[Span]:
    """The copies and kernels among ``works`` (steps with their nominal ``start``/``end``), as
    :class:`Span` s in the order they start; a step that took no time is left out."""
    out = []
    for work in sorted(works, key=lambda w: w.start):
        if work.kind in ("copy", "kernel", "busy") and work.end > work.start:
            stage = "copy" if work.kind == "copy" or work.what == "copy" else "compute"
            out.append(Span(work.stream.name, stage, work.start, work.end))
    return out
