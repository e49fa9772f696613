"""``gpufeed.measure.probe``: a window's batches and clocks, the profiled steps apart from the timed ones, and
``traces.device_split`` (copies are device time, not idle)."""

from __future__ import annotations

import time

import pytest
from devicequeue import DeviceQueue

from gpufeed.measure import traces
from gpufeed.measure.probe import DeviceClock, SyncLog, Window, profiled


def run(window: Window, batches: int, then: str) -> None:
    for _ in range(batches):
        window.before_next()
        window.after_next()
    if then == "stopped":  # a last next() that found no batch
        window.before_next()
        window.no_batch()


@pytest.mark.parametrize(("then", "drain", "counted"), [
    ("stopped", False, 4),  # the failed next() ends the last period
    ("broken", False, 3),  # break: the last batch's period never ended
    ("broken", True, 4),  # diagnose: the last batch ends once the device has done its work
])
def test_a_window_counts_the_batches_whose_period_ended(then, drain, counted):
    w = Window(DeviceClock())
    run(w, 4, then)
    got = w.end(skip=0, drain=drain)
    assert got["batches"] == counted and len(got["period"]) == len(got["host_wait"]) == counted
    assert got["device_wait"] is None and got["period"] is got["host_period"]


def test_too_few_batches_after_the_skipped_ones_is_an_error():
    w = Window(DeviceClock())
    run(w, 1, "stopped")
    with pytest.raises(ValueError, match="none left after skipping 1"):
        w.end(skip=1, drain=False)


def test_the_device_clock_gives_the_idle_time_inside_the_hosts_wait():
    q = DeviceQueue()
    try:
        w = Window(DeviceClock(q.event))
        for _ in range(3):
            w.before_next()
            time.sleep(0.030)  # the loader: 30 ms on the host
            w.after_next()
            q.launch(0.010)  # the step: 10 ms queued, returns at once
        got = w.end()
    finally:
        q.close()
    assert got["batches"] == 3
    for idle, host in zip(got["device_wait"], got["host_wait"]):
        assert idle <= host + 0.002  # the device idles at most while the host waits
    assert got["device_wait"][1] == pytest.approx(0.020, abs=0.012)  # 30 ms wait, 10 of them the device still busy


def test_the_profiled_steps_are_apart_with_a_warm_up_of_their_own():
    calls = []
    assert profiled(calls.append, 3, cuda=False) is None  # CPU activity only: no device events to split
    assert calls == [0, 1, 2, 3]  # one warm-up step, then the profiled ones


def test_without_cuda_no_sync_is_counted():
    with SyncLog() as log:
        pass
    assert not log.on and log.count == 0


def test_copies_are_device_time_and_clipped_to_the_window():
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "ts": 100, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 90, "dur": 30},  # 100..120 inside the window
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 110, "dur": 30},  # 120..140 copying only
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 190, "dur": 50}]}  # 190..200
    assert traces.device_split(doc) == {"window_ms": 0.1, "compute_ms": 0.02, "copy_ms": 0.03, "idle": 0.5}
    assert traces.gpu_idle_fraction(doc) == 0.8  # the kernels-only reading lesson 02 and 08 keep
