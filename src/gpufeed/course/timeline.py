"""Timelines: pieces of work on resources, and the Gantt chart that draws them.

An :class:`Interval` says that one resource (``"worker 2"``, ``"pin thread"``, ``"copy engine"``,
``"GPU"``) did one stage of the pipeline (read, decode, collate, pin, copy, compute) for one batch
from ``start`` to ``end`` milliseconds. :func:`gantt` draws a list of them, one row per resource
and one colour per stage, the same way for the three places timelines come from:

* the pipeline simulator (:mod:`gpufeed.course.simulator`), in ``notebooks/01_bottlenecks.ipynb``;
* a real loop that records its own timestamps (:mod:`gpufeed.course.instrument`), in the same lesson;
* a torch.profiler trace (:mod:`gpufeed.course.trace`), in ``notebooks/02_profiling.ipynb``.

Example:
    >>> work = [Interval("worker 1", "decode", 0, 8, batch=0), Interval("GPU", "compute", 8, 12, batch=0),
    ...         Interval("worker 1", "decode", 8, 16, batch=1), Interval("GPU", "compute", 16, 20, batch=1)]
    >>> union_length([(i.start, i.end) for i in work])  # ms during which something was busy
    20.0
    >>> busy(work, "GPU")
    8.0
    >>> fig, ax = gantt(work)
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['worker 1', 'GPU']
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufeed.measure.plotting import COLORS, caption
from gpufeed.measure.traces import union_length

#: The stages in pipeline order; the legend lists them in this order.
STAGES = ("read", "decode", "collate", "pin", "copy", "compute")

#: Rows come in this order (a resource's name starts with one of these), then the rest by name.
ROW_ORDER = ("main", "worker", "loader", "pin", "copy", "gpu", "compute", "cuda", "stream")


@dataclass(frozen=True)
class Interval:
    """One resource doing one stage of work, from ``start`` to ``end`` (milliseconds).

    Attributes:
        resource: the row it is drawn on, e.g. ``"worker 3"`` or ``"GPU"``.
        stage: what it did: one of :data:`STAGES` gets its course colour, anything else grey-pink.
        start: when it began, in ms from the start of the timeline.
        end: when it finished, in ms (not before ``start``).
        batch: the batch it belongs to, or None; drawn inside the bar when the bar is wide enough.
    """

    resource: str
    stage: str
    start: float
    end: float
    batch: int | None = None

    def __post_init__(self):
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end < self.start:
            raise ValueError(f"Interval {self.stage!r} on {self.resource!r}: end ({self.end}) must be a "
                             f"finite time not before start ({self.start})")

    @property
    def duration(self) -> float:
        return self.end - self.start


def busy(intervals: Iterable[Interval], resource: str, start: float = -math.inf,
         end: float = math.inf) -> float:
    """Milliseconds during which ``resource`` was working, clipped to the window ``[start, end]``."""
    spans = [(max(i.start, start), min(i.end, end)) for i in intervals if i.resource == resource]
    return union_length((a, b) for a, b in spans if b > a)


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text.lower())]


def row_order(resources: Iterable[str]) -> list[str]:
    """Resources in drawing order: main thread, workers (1, 2, ..., 10), pin thread, copy, GPU.

    Example:
        >>> row_order(["GPU", "worker 10", "copy engine", "worker 2", "pin thread"])
        ['worker 2', 'worker 10', 'pin thread', 'copy engine', 'GPU']
    """
    def key(name: str):
        low = name.lower()
        rank = next((i for i, p in enumerate(ROW_ORDER) if low.startswith(p)), len(ROW_ORDER))
        return rank, _natural(name)

    return sorted(set(resources), key=key)


def gantt(
    intervals: Sequence[Interval],
    *,
    rows: Sequence[str] | None = None,
    ax=None,
    title: str = "",
    until: float | None = None,
    machine: dict | None = None,
    note: str = "",
    legend: bool = True,
):
    """Draws intervals as a Gantt chart: one row per resource, one colour per stage.

    Args:
        intervals: what to draw (times in ms).
        rows: the resources to draw, top to bottom; default: all of them in :func:`row_order`.
        ax: matplotlib axes to draw on; a new figure when None.
        title: the axes' title.
        until: the right end of the time axis in ms (e.g. to show the first few batches only).
        machine: for the "measured on ..." caption (leave None for simulated timelines).
        note: added to the caption, or, without a machine, written under the axis on its own.
        legend: draw the stage legend (turn off for all but one of stacked charts).

    Returns:
        ``(figure, axes)``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = list(rows) if rows is not None else row_order(i.resource for i in intervals)
    if ax is None:
        fig, ax = plt.subplots(figsize=(9.0, 0.8 + 0.38 * len(rows)))
    else:
        fig = ax.figure
    y_of = {r: k for k, r in enumerate(rows)}
    right = until if until is not None else max((i.end for i in intervals), default=1.0)
    by_row_stage: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for i in intervals:
        if i.resource in y_of and i.start < right:
            by_row_stage.setdefault((i.resource, i.stage), []).append((i.start, i.duration))
    for (row, stage), spans in by_row_stage.items():  # one collection per row and stage: fast
        edges = [0.6 if width > 0.01 * right else 0.0 for _, width in spans]  # slivers stay visible
        ax.broken_barh(spans, (y_of[row] - 0.4, 0.8), facecolors=COLORS.get(stage, COLORS["other"]),
                       edgecolor="white", linewidths=edges)
    for i in intervals:  # batch numbers inside the bars that have room for them
        if (i.batch is not None and i.resource in y_of and i.start >= 0 and i.end <= right
                and i.duration > 0.025 * right):  # clipped: a label never widens the figure's layout
            ax.text((i.start + i.end) / 2, y_of[i.resource], str(i.batch), ha="center", va="center",
                    fontsize=7, color="white" if i.stage in ("copy", "compute", "decode") else "black",
                    clip_on=True)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    ax.set_xlim(0, right)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="y", visible=False)
    if title:
        ax.set_title(title, loc="left", fontsize=10)
    if legend:
        seen = {i.stage for i in intervals}
        stages = [s for s in STAGES if s in seen] + sorted(seen - set(STAGES))
        ax.legend(handles=[Patch(color=COLORS.get(s, COLORS["other"]), label=s) for s in stages],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    if machine is not None:
        caption(fig, machine, note)
    elif note:
        ax.annotate(note, xy=(0, 0), xycoords=("axes fraction", ax.xaxis.label), xytext=(0, -6),
                    textcoords="offset points", ha="left", va="top", fontsize=8, color="#555555",
                    annotation_clip=False)
    return fig, ax
