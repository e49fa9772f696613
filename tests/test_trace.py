"""Reading torch.profiler chrome traces: a small CPU trace recorded here, and a synthetic GPU one."""

import gzip
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from gpufeed.course import trace
from gpufeed.course.timeline import gantt
from gpufeed.measure import traces


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "cpu.json"
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(skip_first=1, wait=1, warmup=1, active=3, repeat=1)) as prof:
        for _ in range(7):
            with record_function("load"):
                y = x + 1
            with record_function("compute"):
                (y @ y).sum()
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def test_stage_times_of_a_recorded_cpu_trace(cpu_trace):
    stages = trace.stage_times(cpu_trace)
    assert list(stages) == ["load", "compute"]  # in the order they ran; ProfilerStep#N left out
    for s in stages.values():
        assert s.count == 3 and s.total_ms > 0 and s.mean_ms == pytest.approx(s.total_ms / 3, rel=1e-4)
        assert 0 < s.share < 1
    assert trace.stage_times(cpu_trace, names=["compute"]).keys() == {"compute"}
    assert traces.gpu_idle_fraction(cpu_trace) is None  # no kernels on a CPU-only trace
    s = trace.summary(cpu_trace)
    assert s["steps"] == 3 and s["kernels"] == 0 and json.dumps(s)
    assert "load" in trace.report(cpu_trace) and "CPU only" in trace.report(cpu_trace)


def test_intervals_draw_in_the_gantt(cpu_trace):
    work = trace.intervals(cpu_trace)
    assert {i.stage for i in work} == {"load", "compute"} and len(work) == 6
    fig, ax = gantt(work)
    assert len(ax.get_yticklabels()) == 1  # one CPU thread


def synthetic_gpu_trace():
    """Two steps of 50 µs; kernels (overlapping) cover 30-45 and 60-70; a copy does not count."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": 50 * k, "dur": 50, "tid": 1}
          for k in range(2)]
    ev += [{"ph": "X", "cat": "user_annotation", "name": "decode", "ts": 50 * k, "dur": 30, "tid": 1} for k in range(2)]
    ev += [{"ph": "X", "cat": "gpu_user_annotation", "name": "decode", "ts": 0, "dur": 30, "tid": 7}]
    ev += [{"ph": "X", "cat": "kernel", "name": "conv", "ts": 30, "dur": 10, "args": {"stream": 7}},
           {"ph": "X", "cat": "kernel", "name": "relu", "ts": 35, "dur": 10, "args": {"stream": 7}},
           {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 60, "dur": 10, "args": {"stream": 7}},
           {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 0, "dur": 30, "args": {"stream": 9}},
           {"ph": "i", "cat": "cpu_instant_event", "name": "marker", "ts": 3},
           {"ph": "X", "cat": "kernel", "name": "after the window", "ts": 200, "dur": 10}]
    return {"traceEvents": ev}


def test_gpu_idle_fraction_of_a_synthetic_trace():
    doc = synthetic_gpu_trace()
    assert traces.gpu_idle_fraction(doc) == pytest.approx(1 - 25 / 100)
    assert traces.gpu_idle_fraction(doc, cats=["kernel", "gpu_memcpy"]) == pytest.approx(1 - 55 / 100)
    assert trace.stage_times(doc)["decode"].count == 2  # the GPU copy of the range is not counted twice
    rows = {i.resource for i in trace.intervals(doc)}
    assert rows == {"thread 1", "GPU stream 7", "GPU stream 9"}


def test_legacy_category_is_found_by_name_and_counted_once():
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "decode", "ts": 0, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "decode", "ts": 0, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 10, "dur": 5, "tid": 1}]}
    assert trace.stage_times(doc, names=["decode"])["decode"].count == 1
    assert trace.stage_times({"traceEvents": doc["traceEvents"][::2]}, names=["decode"])["decode"].count == 1


def test_gzipped_traces_and_bad_files(tmp_path):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(synthetic_gpu_trace(), f)
    assert trace.summary(path)["kernels"] == 4
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        traces.load(bad)
    with pytest.raises(ValueError, match="traceEvents"):
        traces.load({"events": []})
    with pytest.raises(ValueError, match="no complete events"):
        traces.window_us({"traceEvents": []})


def test_cpu_rows_ignore_gpu_rows_of_the_same_key():
    from types import SimpleNamespace as Row

    from torch.autograd import DeviceType

    def row(key, device, us):  # what key_averages() gives on CUDA: a CPU row, then a GPU row
        return Row(key=key, device_type=device, cpu_time_total=us, count=3)

    averages = [row("ProfilerStep*", DeviceType.CPU, 9000.0), row("copy", DeviceType.CPU, 300.0),
                row("ProfilerStep*", DeviceType.CUDA, 0.0), row("copy", DeviceType.CUDA, 0.0)]
    assert {e.key: e for e in averages}["ProfilerStep*"].cpu_time_total == 0.0  # the bug
    events = trace.cpu_rows(averages)
    step_us = events["ProfilerStep*"].cpu_time_total
    assert step_us == 9000.0 and events["copy"].cpu_time_total / step_us == pytest.approx(300 / 9000)


def test_cpu_rows_of_a_real_cpu_profile():
    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("decode"):
        torch.ones(8).sum()
    rows = trace.cpu_rows(prof.key_averages())
    assert rows["decode"].count == 1 and rows["decode"].cpu_time_total > 0
