"""The course's plot style: units on the axes, ratios in the legend, "measured on ..." underneath.

Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from gpufeed.measure.harness import Measurement
    >>> ms = [Measurement("naive", [2.0, 2.1, 1.9], items=64), Measurement("fast", [0.5, 0.5, 0.6], items=64)]
    >>> fig, ax = bars(ms, baseline="naive", machine={"cpu": "Demo CPU", "cores": 2})
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['naive (1.00x)', 'fast (4.00x)']
    >>> ax.get_xlabel()
    'images/s (median, bars: IQR)'
    >>> ratio_label("pinned", 3.14159)
    'pinned (3.14x)'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpufeed.measure.harness import Measurement
from gpufeed.measure.machine import describe

#: One colour per role, used the same way in every lesson (colour-blind safe, Okabe-Ito).
COLORS = {
    "baseline": "#999999",
    "read": "#E69F00",
    "decode": "#56B4E9",
    "collate": "#009E73",
    "pin": "#F0E442",
    "copy": "#0072B2",
    "compute": "#D55E00",
    "other": "#CC79A7",
}

STYLE = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "savefig.bbox": "tight",
}


def use_style() -> None:
    """Applies the course style to matplotlib (the setup cell of every notebook calls it)."""
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)


def ratio_label(name: str, ratio: float) -> str:
    """A legend entry that carries its ratio to the baseline, e.g. ``"pinned (3.14x)"``."""
    return f"{name} ({ratio:.2f}x)"


def caption(fig, machine: dict | None, note: str = "") -> None:
    """Writes "measured on <machine>" under the figure (and ``note``, e.g. "quick mode").

    It is anchored below the x-axis label of the lowest, leftmost axes, so it never overlaps it.
    """
    if machine is None or not fig.axes:
        return
    text = f"measured on {describe(machine)}"
    if machine.get("quick"):
        text += " · quick mode"
    if note:
        text += f" · {note}"
    ax = min(fig.axes, key=lambda a: (round(a.get_position().y0, 3), a.get_position().x0))
    ax.annotate(text, xy=(0, 0), xycoords=("axes fraction", ax.xaxis.label), xytext=(0, -6),
                textcoords="offset points", ha="left", va="top", fontsize=8, color="#555555",
                annotation_clip=False)


def bars(
    measurements: Sequence[Measurement],
    baseline: str | None = None,
    rate: str = "items",
    unit: str = "images/s",
    ax=None,
    machine: dict | None = None,
    title: str = "",
):
    """Horizontal bars of throughput (median, with IQR whiskers), each labelled with its ratio.

    Args:
        measurements: what to draw, top to bottom.
        baseline: the name the ratios are taken against (default: the first).
        rate: ``"items"`` for items/s or ``"bytes"`` for GB/s.
        unit: the axis unit for items/s (images/s, samples/s, batches/s).
        machine: for the caption; defaults to the first measurement's machine.

    Returns:
        ``(figure, axes)``.
    """
    import matplotlib.pyplot as plt

    ms = list(measurements)
    base = next(m for m in ms if m.name == baseline) if baseline else ms[0]
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 0.5 + 0.45 * len(ms)))
    else:
        fig = ax.figure
    scale = 1.0 if rate == "items" else 1e-9
    lows, mids, highs = zip(*(m.rate_quartiles(rate) for m in ms))
    mids = [v * scale for v in mids]
    err = [[mid - lo * scale for mid, lo in zip(mids, lows)], [hi * scale - mid for mid, hi in zip(mids, highs)]]
    y = range(len(ms))
    colors = [COLORS["baseline"] if m is base else COLORS["copy"] for m in ms]
    ax.barh(list(y), mids, xerr=err, color=colors, capsize=3)
    ax.set_yticks(list(y), [ratio_label(m.name, base.median / m.median) for m in ms])
    ax.invert_yaxis()  # first measurement on top
    ax.set_xlabel(f"{unit if rate == 'items' else 'GB/s'} (median, bars: IQR)")
    if title:
        ax.set_title(title)
    caption(fig, machine if machine is not None else ms[0].machine)
    return fig, ax


def save(fig, path: str | Path) -> Path:
    """Saves a figure as PNG (and creates the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path
