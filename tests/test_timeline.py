"""Intervals, their union, and the Gantt chart."""

import math

import matplotlib.pyplot as plt
import pytest

from gpufeed.course.timeline import Interval, busy, gantt, row_order
from gpufeed.measure.traces import union_length


def test_union_counts_overlaps_once():
    assert union_length([]) == 0.0
    assert union_length([(0, 10), (10, 20)]) == 20.0
    assert union_length([(5, 15), (0, 10), (30, 40), (32, 35)]) == 25.0


def test_busy_clips_to_a_window():
    work = [Interval("GPU", "compute", 0, 10), Interval("GPU", "compute", 20, 30), Interval("cpu", "read", 0, 50)]
    assert busy(work, "GPU") == 20.0
    assert busy(work, "GPU", start=5, end=25) == 10.0
    assert busy(work, "nobody") == 0.0


def test_interval_rejects_time_running_backwards():
    with pytest.raises(ValueError, match="not before start"):
        Interval("GPU", "compute", 5, 4)
    with pytest.raises(ValueError):
        Interval("GPU", "compute", 0, math.nan)
    assert Interval("GPU", "compute", 1, 4).duration == 3


def test_rows_sort_naturally():
    assert row_order(["GPU", "worker 10", "main thread", "worker 2", "thread 7"]) == [
        "main thread", "worker 2", "worker 10", "GPU", "thread 7"]


def test_gantt_draws_one_row_per_resource_and_a_legend():
    work = [Interval("worker 1", "decode", 0, 8, 0), Interval("pin thread", "pin", 8, 9, 0),
            Interval("GPU", "compute", 9, 20, 0), Interval("worker 2", "mystery", 0, 3)]
    fig, ax = gantt(work, title="t", note="simulated")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["worker 1", "worker 2", "pin thread", "GPU"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["decode", "pin", "compute", "mystery"]
    assert ax.get_xlabel() == "time (ms)" and ax.get_xlim() == (0, 20)
    assert "0" in [t.get_text() for t in ax.texts]  # the batch number in the wide compute bar
    plt.close(fig)
    fig, ax = gantt(work, rows=["GPU"], until=10, legend=False)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU"] and ax.get_legend() is None
    plt.close(fig)
