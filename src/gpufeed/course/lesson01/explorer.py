"""Sliders over the pipeline simulator: change a cost or a knob, see the Gantt chart and images/s.

:func:`show` draws one pipeline (the chart and a line with the predicted rate); :func:`explorer`
wraps it in ``ipywidgets.interactive`` with sliders for the stage costs, the workers and the
prefetch depth, and checkboxes for pinning and GPU prefetch. Only widgets and calls that exist in
both ipywidgets 7 (Colab) and 8 are used. Run headless (nbmake, CI), the widgets are not drawn,
so the notebook calls :func:`show` once itself before displaying them. Taught in
``notebooks/01_bottlenecks.ipynb``, section 3.

Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from gpufeed.course.simulator import preset
    >>> print(show(preset("GPU prefetch"), draw=False))
    predicted 1,067 images/s (4.47x the naive loop); slowest stage: compute, 30.0 ms per batch; GPU busy 100%
"""

from __future__ import annotations

from gpufeed.course.simulator import Costs, Pipeline, preset, simulate, slowest_stage
from gpufeed.course.timeline import gantt

#: Slider ranges: (min, max, step) per cost in ms.
RANGES = {
    "read_ms": (0.0, 10.0, 0.1),
    "decode_ms": (0.0, 20.0, 0.1),
    "collate_ms": (0.0, 50.0, 0.5),
    "pin_ms": (0.0, 50.0, 0.5),
    "copy_pageable_ms": (0.0, 100.0, 0.5),
    "copy_pinned_ms": (0.0, 100.0, 0.5),
    "compute_ms": (0.5, 200.0, 0.5),
}


def show(p: Pipeline, n_batches: int = 16, until: float | None = None, draw: bool = True) -> str:
    """Simulates ``p``, draws its Gantt chart (if ``draw``) and returns the line that reads it."""
    import matplotlib.pyplot as plt

    result = simulate(p, n_batches=n_batches)
    naive = simulate(preset("naive", costs=p.costs, batch_size=p.batch_size), n_batches=n_batches)
    name, ms = slowest_stage(p)
    gpu = result.utilisation().get("GPU", 0.0)
    line = (f"predicted {result.images_per_s:,.0f} images/s "
            f"({result.images_per_s / naive.images_per_s:.2f}x the naive loop); slowest stage: "
            f"{name}, {ms:.1f} ms per batch; GPU busy {gpu:.0%}")
    if draw:
        right = until if until is not None else 8 * max(result.ms_per_batch, 1e-9)
        gantt(result.intervals, until=right, title=line, note="simulated, not measured")
        plt.show()
    return line


def explorer(p: Pipeline | None = None, n_batches: int = 16):
    """An ``ipywidgets.interactive`` that redraws :func:`show` when a slider or a box changes.

    Args:
        p: the starting pipeline (default: the "GPU prefetch" preset with the default costs).
        n_batches: batches simulated per redraw.
    """
    import ipywidgets as w

    p = p or preset("GPU prefetch")
    style = {"description_width": "150px"}
    layout = w.Layout(width="480px")
    controls = {
        name: w.FloatSlider(value=getattr(p.costs, name), min=lo, max=hi, step=step,
                            description=name.replace("_ms", " (ms)").replace("_", " "),
                            continuous_update=False, style=style, layout=layout)
        for name, (lo, hi, step) in RANGES.items()
    }
    controls["batch_size"] = w.IntSlider(value=p.batch_size, min=1, max=256, description="batch size",
                                         continuous_update=False, style=style, layout=layout)
    controls["workers"] = w.IntSlider(value=p.workers, min=1, max=32, description="workers",
                                      continuous_update=False, style=style, layout=layout)
    controls["prefetch"] = w.IntSlider(value=p.prefetch, min=0, max=8, description="prefetch (batches)",
                                       continuous_update=False, style=style, layout=layout)
    controls["pin"] = w.Checkbox(value=p.pin, description="pin memory")
    controls["gpu_prefetch"] = w.Checkbox(value=p.gpu_prefetch, description="GPU prefetch")

    def update(batch_size, workers, prefetch, pin, gpu_prefetch, **costs):
        show(Pipeline(batch_size, workers, prefetch, pin, gpu_prefetch, Costs(**costs)), n_batches)

    return w.interactive(update, **controls)
