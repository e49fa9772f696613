import json
import time
import warnings

import pytest

from gpufeed.measure import harness as bench
from gpufeed.measure.harness import Measurement, benchmark, compare
from gpufeed.measure.noise import NoisyMeasurementWarning
from gpufeed.measure.units import format_rate, format_time


@pytest.mark.timing
def test_warmup_calls_are_not_timed_and_samples_are_kept():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.05 if len(calls) <= 2 else 0.001)  # two slow first calls, like a cold cache

    m = benchmark(fn, name="sleepy", repeats=5, warmup=2, with_machine=False)
    assert len(calls) == 7 and len(m.samples) == 5
    assert m.median < 0.02  # the slow warm-up calls did not leak into the samples


def test_cuda_sync_is_called_inside_the_timed_region(monkeypatch):
    events = []
    monkeypatch.setattr(bench, "cuda_sync", lambda: events.append("sync"))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: events.append("clock") or 0.0)
    benchmark(lambda: events.append("fn"), repeats=2, warmup=0, with_machine=False)
    # a sync after the warm-up, then per sample: clock, work, sync, clock -- the GPU's work is timed
    assert events[:5] == ["sync", "clock", "fn", "sync", "clock"]


def test_median_iqr_and_rates():
    m = Measurement("x", [1.0, 2.0, 3.0, 4.0, 100.0], items=10, nbytes=2e9)
    assert m.median == 3.0
    assert m.iqr == 2.0  # inclusive quartiles 2 and 4: the outlier does not move them
    assert m.items_per_s == pytest.approx(10 / 3)
    assert m.gb_per_s == pytest.approx(2 / 3)
    low, mid, high = m.rate_quartiles()
    assert low < mid < high


def test_number_divides_the_sample():
    m = benchmark(lambda: time.sleep(0.002), repeats=3, warmup=0, number=5, with_machine=False)
    assert all(0.0015 < s < 0.05 for s in m.samples)


def test_noisy_measurements_are_flagged():
    noisy = Measurement("n", [1.0, 1.0, 2.0, 3.0, 3.0])
    assert noisy.noisy and "noisy" in str(noisy)
    assert not Measurement("q", [1.0, 1.01, 1.02]).noisy
    with pytest.warns(NoisyMeasurementWarning):
        it = iter([0.001, 0.02, 0.001, 0.03, 0.001, 0.04])
        benchmark(lambda: time.sleep(next(it)), repeats=6, warmup=0, with_machine=False)


@pytest.mark.timing
def test_min_time_keeps_sampling():
    # Asks for one sample but 50 ms timed: it keeps going until the samples add up (however slow
    # a loaded machine makes each one), and stops soon after.
    m = benchmark(lambda: time.sleep(0.005), repeats=1, warmup=0, min_time=0.05, with_machine=False)
    assert len(m.samples) >= 2
    assert sum(m.samples) >= 0.05
    assert sum(m.samples[:-1]) < 0.05


def test_units_for_the_reader():
    assert format_time(5e-9) == "5.00 ns"
    assert format_time(0.5) == "500 ms"
    assert format_rate(950, "images/s") == "950 images/s"
    assert format_rate(3.2e6, "images/s") == "3.20 Mimages/s"


def test_compare_ratios_against_a_baseline():
    a, b = Measurement("a", [2.0, 2.0]), Measurement("b", [0.5, 0.5])
    table = compare([a, b], baseline="a")
    assert "4.00x" in table and table.splitlines()[1].endswith("1.00x")
    assert bench.ratio([a, b], "b", "a") == 4.0
    with pytest.raises(KeyError):
        compare([a], baseline="nope")


def test_save_and_load_round_trip(tmp_path):
    ms = [benchmark(lambda: None, name="noop", repeats=3, items=1, params={"k": 1})]
    path = bench.save(tmp_path / "sub" / "r.json", ms, note="hello")
    loaded, doc = bench.load(path)
    assert doc["note"] == "hello" and doc["machine"]["cores"] >= 1
    assert loaded[0].samples == ms[0].samples and loaded[0].params == {"k": 1}
    assert loaded[0].machine["torch"] and loaded[0].median == ms[0].median
    assert not list(tmp_path.rglob("*.tmp"))  # nothing left half-written


def test_load_refuses_foreign_or_broken_files(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "b.json").write_text("{ half a file")
    with pytest.raises(ValueError, match="not a gpufeed measurements file"):
        bench.load(tmp_path / "a.json")
    with pytest.raises(ValueError, match="cannot read"):
        bench.load(tmp_path / "b.json")


def test_no_warning_for_quiet_measurements():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Measurement("q", [1.0, 1.0, 1.0])
