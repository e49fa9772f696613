"""Loader efficiency, break-even epochs and the committed benchmark results (lesson 11)."""

import math

import matplotlib.pyplot as plt
import pytest

from gpufeed.course.lesson11 import efficiency
from gpufeed.measure import harness as bench
from gpufeed.measure import results
from gpufeed.measure import suite as pipeline_bench
from gpufeed.measure.harness import Measurement


def test_efficiency_is_each_rate_over_the_ceiling():
    rows = efficiency.efficiency({"naive": 20.0, "tuned": 60.0, "course": 99.0, "resident": 100.0})
    assert [(r["pipeline"], r["efficiency"], r["ratio_to_naive"]) for r in rows] == [
        ("naive", 0.2, 1.0), ("tuned", 0.6, 3.0), ("course", 0.99, 4.95)]
    assert efficiency.efficiency({"course": 5.0, "resident": 10.0})[0]["ratio_to_naive"] is None
    with pytest.raises(ValueError, match="resident"):
        efficiency.efficiency({"naive": 1.0})


def test_break_even_is_build_time_over_time_saved():
    assert efficiency.break_even(10.0, 3.0, 1.0) == 5.0
    assert math.isinf(efficiency.break_even(10.0, 1.0, 1.0))  # saves nothing: never pays back
    assert math.isinf(efficiency.break_even(10.0, 1.0, 2.0))  # slower: never


def _write_bench(folder, gpu):
    machine = {"cpu": "Demo CPU", "cores": 16, "gpu": "Demo GPU" if gpu else None}
    ms = [Measurement(f"{p} train", [1.0], items=100, params={"pipeline": p, "mode": "train"}, machine=machine)
          for p in ("naive", "course", "resident")]
    rows = pipeline_bench.records_from({}, {"naive": 4.0, "course": 1.05, "resident": 1.0},
                                       images={"loader": 100, "train": 100}, loader_ceiling=1e4)
    bench.save(folder / pipeline_bench.FILE, ms, kind=pipeline_bench.FORMAT, device="cuda" if gpu else "cpu",
               records=rows, workload={"crop": 224, "batch": 256})


def test_committed_bench_finds_results_by_kind_and_reads_their_efficiency(tmp_path, monkeypatch):
    _write_bench(tmp_path / "demo-gpu", gpu=True)
    _write_bench(tmp_path / "cpu-demo", gpu=False)
    (tmp_path / "other").mkdir()
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    (gpu_path, doc), = efficiency.committed_bench(gpu=True)
    assert gpu_path.parent.name == "demo-gpu"
    assert [p.parent.name for p, _ in efficiency.committed_bench(gpu=False)] == ["cpu-demo"]
    assert len(efficiency.committed_bench()) == 2
    rows = efficiency.efficiency(efficiency.from_bench(doc))
    assert [(r["pipeline"], r["efficiency"]) for r in rows] == [("naive", 0.25), ("course", 0.952)]


def test_nothing_committed_is_an_empty_list(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    assert efficiency.committed_bench(gpu=True) == []


def test_the_chart_draws_the_target_and_labels_the_speed_up():
    rows = efficiency.efficiency({"naive": 20.0, "course": 96.0, "resident": 100.0})
    fig, ax = efficiency.plot(rows, {"cpu": "Demo CPU", "cores": 2})
    assert [t.get_text() for t in ax.get_yticklabels()] == ["naive (1.00x)", "course (4.80x)"]
    assert efficiency.TARGET in [line.get_xdata()[0] for line in ax.get_lines()]
    assert "0.96 (96 images/s)" in [t.get_text() for t in ax.texts]
    plt.close(fig)


def test_the_target_is_said_measured_on_a_gpu_only_where_a_gpu_run_is_committed(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    assert "not yet measured on a GPU" in efficiency.target_status()
    _write_bench(tmp_path / "cpu-demo", gpu=False)
    assert "not yet measured on a GPU" in efficiency.target_status()  # a CPU run does not measure it
    _write_bench(tmp_path / "demo-gpu", gpu=True)
    said = efficiency.target_status()
    assert said.startswith("On Demo GPU, `gpufeed bench`") and "at 0.95, against the course's 0.95 target" in said
