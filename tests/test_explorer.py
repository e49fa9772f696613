"""The simulator's sliders: built from widgets that ipywidgets 7 and 8 both have, and redrawn."""

import matplotlib.pyplot as plt
import pytest

from gpufeed.course.lesson01.explorer import RANGES, explorer, show
from gpufeed.course.simulator import Costs, preset

ipywidgets = pytest.importorskip("ipywidgets")


def test_show_reads_the_prediction():
    line = show(preset("naive"), draw=False)
    assert line.startswith("predicted 239 images/s (1.00x the naive loop)")
    show(preset("workers"), n_batches=6)  # draws (Agg backend) without error
    plt.close("all")


def test_explorer_has_a_control_per_knob_and_redraws(capsys):
    ui = explorer(preset("CPU prefetch"))
    names = {c.description for c in ui.children if hasattr(c, "description")}
    assert {"workers", "prefetch (batches)", "pin memory", "GPU prefetch", "batch size"} <= names
    assert len([c for c in ui.children if isinstance(c, ipywidgets.FloatSlider)]) == len(RANGES)
    assert set(RANGES) == {f for f in Costs.__dataclass_fields__}
    workers = next(c for c in ui.children if getattr(c, "description", "") == "workers")
    workers.value = 2  # a change runs the update function again
    assert ui.kwargs["workers"] == 2 and ui.kwargs["prefetch"] == 2
    plt.close("all")
