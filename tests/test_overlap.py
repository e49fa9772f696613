"""Lesson 08's overlap experiment (gpufeed.course.lesson08.overlap) and its sentences (overlap_prose): the
structure of the timing on the CPU and under the CUDA-ordering simulator (on a GPU, on CUDA), and
sentences that follow the numbers in both directions."""

import copy
import json
import re

import pytest
import torch

from gpufeed.course.lesson08 import overlap
from gpufeed.course.lesson08 import overlap_prose as prose
from gpufeed.course.lesson08.overlap import IN_LOOP, PLAIN
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from gpufeed.measure import results
from gpufeed.measure.harness import Measurement, save


def batches(n=3, size=16, pinned=False):
    out = [(torch.full((2, 3, size, size), 10 * i, dtype=torch.uint8), torch.tensor([i, i + 1]))
           for i in range(n)]
    return [(x.pin_memory(), y.pin_memory()) for x, y in out] if pinned else out


def test_bound_is_the_overlap_arithmetic():
    assert overlap.bound(2.0, 2.0) == 2.0 and overlap.bound(1.0, 3.0) == pytest.approx(4 / 3)
    assert overlap.bound(1.0, 2.0, n=16) == pytest.approx(3 * 16 / (2 * 16 + 1))  # exercise 3's 3n/(2n+1)
    assert overlap.bound(1.0, 2.0, n=1) == 1.0 and overlap.bound(1.0, 2.0, n=10**6) == pytest.approx(1.5, rel=1e-5)


def test_balance_stops_at_the_first_step_as_long_as_the_copy_and_takes_the_nearest():
    asked = []

    def time_step(width):
        asked.append(width)
        return {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}[width]

    assert overlap.balance(3.0, time_step, (1, 2, 4, 8)) == (4, {1: 1.0, 2: 2.0, 4: 4.0})
    assert asked == [1, 2, 4], "no wider model is built once a step outlasts the copy"
    assert overlap.balance(2.5, time_step, (1, 2, 4, 8))[0] == 2  # 2.5/2 is nearer 1 than 4/2.5
    assert overlap.balance(0.5, time_step, (1, 2))[0] == 1  # even the narrowest outlasts the copy
    assert overlap.balance(100.0, time_step, (1, 2))[0] == 2  # none reaches it: the widest tried


def test_run_once_times_the_steps_between_two_syncs_after_the_warm_up_and_closes_the_feed():
    events = []

    def feed():
        try:
            for i in range(100):
                yield i, None
        finally:
            events.append("closed")

    seconds = overlap.run_once(feed(), lambda i, _: events.append(i), warmup=2, steps=3,
                               sync=lambda: events.append("sync"))
    assert events == [0, 1, "sync", 2, 3, 4, "sync", "closed"] and seconds >= 0


def test_alternate_takes_turns_with_a_fresh_feed_each_run():
    started, steps = [], []

    def start(name):
        started.append(name)
        return ((name, None) for _ in range(10**6))

    feeds = {"A": lambda: start("A"), "B": lambda: start("B")}
    ms = overlap.alternate(feeds, lambda name, _: steps.append(name), "cpu", repeats=3, warmup=2,
                           steps=5, label="syncs every step", items=2)
    assert started == ["A", "B"] * 3, "ABABAB, each run from a fresh feed"
    assert steps == (["A"] * 7 + ["B"] * 7) * 3
    assert [m.name for m in ms] == ["A, syncs every step", "B, syncs every step"]
    assert [m.params["places"] for m in ms] == [[0, 2, 4], [1, 3, 5]]
    assert all(len(m.samples) == 3 and m.params["warmup"] == 2 and m.params["steps"] == 5
               and m.params["memory"] == {} for m in ms)
    with pytest.raises(ValueError, match="repeats"):
        overlap.alternate(feeds, print, "cpu", repeats=0)


def test_both_feeds_give_the_plain_loops_batches(on_cuda):
    device = torch.device("cuda", 0)
    data = batches(pinned=True)
    want = [(((x.double() / 255 - torch.tensor(IMAGENET_MEAN).double().view(-1, 1, 1))
              / torch.tensor(IMAGENET_STD).double().view(-1, 1, 1)), y) for x, y in data]
    feeds = overlap.sources(data, device, torch.float32, IMAGENET_MEAN, IMAGENET_STD, depth=2)
    assert list(feeds) == [PLAIN, IN_LOOP, "CudaPrefetcher"]
    for start in feeds.values():
        it = iter(start())
        got = [next(it) for _ in range(2 * len(data))]  # cycled: twice round
        it.close()
        for (x, y), (wx, wy) in zip(got, want * 2):
            assert x.device.type == "cuda" and x.dtype == torch.float32
            assert torch.allclose(x.cpu().double(), wx, atol=1e-5) and torch.equal(y.cpu(), wy)


def fake_steps(calls):
    """make_step(width, sync) without autograd (which the simulator lacks): a reduction a step."""

    def make_step(width, sync):
        def step(x, y):
            calls.append((width, sync))
            r = x.mean() * width + y.float().mean()
            return r.item() if sync else r

        return step

    return make_step


def test_the_cuda_branch_on_cuda_or_the_simulator(on_cuda, monkeypatch):
    """What the lesson's `if S.cuda:` cell runs: syncs around every timed run, turns, warm-up,
    memory peaks and the result's fields; on a GPU, on it."""
    if on_cuda is not None:  # the simulator keeps the allocator's peak, not memory_stats
        monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {
            "allocated_bytes.all.peak": torch.cuda.max_memory_allocated(device),
            "reserved_bytes.all.peak": torch.cuda.memory_reserved(device)}, raising=False)
    device, calls = torch.device("cuda", 0), []
    p = overlap.plan(batches(pinned=True), device, fake_steps(calls), dtype=torch.float32,
                     mean=IMAGENET_MEAN, std=IMAGENET_STD, widths=(1, 2), repeats=2, items=2)
    assert p.width in (1, 2) and "the bound is" in p.describe() and set(p.steps) <= {1, 2}
    made = []
    real_stream = torch.cuda.Stream
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: made.append(1) or real_stream(*a, **k))
    calls.clear()
    result, ms = overlap.measure(p, repeats=2, warmup=3, steps=4, items=2)
    assert len(made) == 2, "one side stream per arm (in-loop, CudaPrefetcher), reused by every run"
    timed = [c for c in calls[:2 * 3 * (3 + 4) + 20] if c == (p.width, True)]
    assert len(timed) >= 2 * 3 * (3 + 4), "each of the 3 arms ran twice, warm-up and timed steps"
    assert list(result["regimes"]) == list(overlap.REGIMES) == list(result["bounds"])
    assert all(b >= 1 for b in result["bounds"].values())
    for runs in result["regimes"].values():
        assert list(runs) == [PLAIN, IN_LOOP, "CudaPrefetcher"]
        assert [r["places"] for r in runs.values()] == [[0, 3], [1, 4], [2, 5]]
        for r in runs.values():
            assert len(r["runs_ms"]) == 2 and r["median_ms"] > 0
            assert {"allocated_peak", "reserved_peak", "in_flight_peak", "reserved_before", "reserved_after",
                    "alloc_retries"} == set(r["memory"])
            assert r["memory"]["in_flight_peak"] >= 0 and r["memory"]["alloc_retries"] == 0
    assert result["prefetcher"] == "CudaPrefetcher" and result["traces"] == {}
    assert result["convert_with_step"] and result["feed_ms"] == result["copy_ms"], "the copy is what it hides"
    assert [m.name for m in ms][:2] == ["copy of a batch", "conversion of a batch"]
    json.dumps(result)  # saved with the lesson's results


@pytest.fixture
def cpu_result(tmp_path):
    torch.manual_seed(0)
    data = batches(size=32)
    p = overlap.plan(data, "cpu", overlap.model_steps("cpu"), dtype=torch.float32, mean=IMAGENET_MEAN,
                     std=IMAGENET_STD, widths=(1, 2), repeats=2, items=2)
    return overlap.measure(p, trace_dir=tmp_path, repeats=2, warmup=1, steps=3, active=2, items=2)


def test_the_plan_names_the_copy_apart_from_the_conversion():
    """Off a GPU the feed is copy and conversion; the sentence gives the copy's own time by its GB/s."""
    data = batches(size=32)
    p = overlap.plan(data, "cpu", overlap.model_steps("cpu"), dtype=torch.float32, mean=IMAGENET_MEAN,
                     std=IMAGENET_STD, widths=(1,), repeats=2, items=2)
    assert not p.convert_with_step and p.feed_s == p.copy.median + p.convert.median
    text = p.describe()
    assert f"the copy takes {p.copy.median * 1e3:.2f} ms ({p.copy.gb_per_s:.1f} GB/s)" in text
    assert f"In turns a step costs {(p.feed_s + p.work_s) * 1e3:.2f} ms" in text


def test_the_experiment_runs_on_the_cpu_with_a_real_model_and_profiles_each_variant(cpu_result):
    result, ms = cpu_result
    assert result["prefetcher"] == "ThreadPrefetcher" and result["width"] in (1, 2)
    assert not result["convert_with_step"], "off a GPU the prefetch thread converts: feed = copy + conversion"
    assert result["feed_ms"] == pytest.approx(result["copy_ms"] + result["convert_ms"])
    assert result["bound"] == pytest.approx(overlap.bound(result["feed_ms"], result["step_ms"]))
    for regime in overlap.REGIMES:
        for name, summary in result["traces"][regime].items():
            assert summary["steps"] == 2 and summary["stages"]["step"]["count"] == 2, (regime, name)
            assert overlap.between_steps(summary)["host_ms"] >= 0
    assert set(result["picture"]) == {PLAIN, "ThreadPrefetcher"}
    assert all(any(i["resource"] == "host" for i in rows) for rows in result["picture"].values())
    assert len([m for m in ms if m.params.get("regime")]) == 4
    text = prose.read(result)
    assert text.count("**The step") == 2 and "of the step that syncs every step, over 2 profiled steps" in text
    json.dumps(result)


def synthetic(plain_ms, pre_ms, *, copy_ms=2.0, step_ms=2.0, host=(4.0, 4.0), busy=(88.0, 88.0)):
    """A result of overlap.measure with chosen medians and traces (both regimes alike)."""
    def summary(h, b):
        return {"window_ms": 100.0, "steps": 8, "gpu_idle_fraction": 1 - b / 100.0,
                "stages": {"step": {"total_ms": 100.0 - h}}, "kernels": 10}

    runs = {PLAIN: {"runs_ms": [plain_ms] * 3, "median_ms": plain_ms, "places": [0, 2, 4],
                    "memory": {"allocated_peak": 5e9, "reserved_peak": 6e9, "in_flight_peak": 1e9}},
            "CudaPrefetcher": {"runs_ms": [pre_ms * 0.99, pre_ms, pre_ms * 1.01], "median_ms": pre_ms,
                               "places": [1, 3, 5], "memory": {"allocated_peak": 5.5e9, "reserved_peak": 7e9,
                                                               "in_flight_peak": 1.5e9}}}
    runs = {PLAIN: runs[PLAIN], overlap.IN_LOOP: copy.deepcopy(runs[PLAIN]), "CudaPrefetcher": runs["CudaPrefetcher"]}
    traces = {PLAIN: summary(host[0], busy[0]), overlap.IN_LOOP: summary(host[0], busy[0]),
              "CudaPrefetcher": summary(host[1], busy[1])}
    return {"prefetcher": "CudaPrefetcher", "copy_ms": copy_ms, "convert_ms": 0.0, "step_ms": step_ms,
            "feed_ms": copy_ms, "work_ms": step_ms, "convert_with_step": True,
            "bound": overlap.bound(copy_ms, step_ms), "converted_bytes": 5e8, "depth": 1, "repeats": 3,
            "warmup": 10, "steps": 100, "regimes": {r: copy.deepcopy(runs) for r in overlap.REGIMES},
            "traces": {r: copy.deepcopy(traces) for r in overlap.REGIMES}}


def no_ratio_below_one(text):
    return re.search(r"\b0\.\d+x", text) is None


def test_sentences_follow_the_numbers_in_both_directions():
    win = prose.read(synthetic(4.0, 2.5))
    assert "**1.60x faster**" in win and "60% of the gain the bound allows" in win and "slower" not in win
    lose = prose.read(synthetic(13.6, 15.8, copy_ms=2.2, step_ms=10.9, host=(3.9, 20.4)))
    assert "**1.16x slower**" in lose and "did not pay here (no gain beyond the runs' spread): the host spent 16.5 ms more" in lose
    assert "gives the GPU no step to run" in lose and "faster" not in lose
    busier = prose.read(synthetic(4.0, 4.4, busy=(80.0, 90.0)))
    assert "kernels ran 10.0 ms more with CudaPrefetcher" in busier
    above = prose.read(synthetic(5.0, 1.8))
    assert "Above the bound: the plain loop took 1.00 ms a step more" in above
    assert "0.20 ms less than the longer of the two sides alone (2.00 ms): the costs timed alone were higher" in above
    at = prose.read(synthetic(4.0, 1.98))  # 2.02x against a bound of 2.00x: within the noise of it
    assert "At the bound (within 2%)" in at and "of the gain the bound allows" not in at
    same = prose.read(synthetic(4.0, 3.96, host=(4.0, 4.0)))
    assert "the same speed (within 2%)" in same and "the trace shows no cause" in same
    assert "converted batches of 500 MB" in win and "copy on the default stream 2.0; side stream in the loop 2.0; CudaPrefetcher 3.0" in win
    assert "more (" not in win, "no extra count set against a total"
    assert all(no_ratio_below_one(t) for t in (win, lose, busier, above, at, same))


def test_the_committed_h100_reference_is_shown_as_the_old_prefetchers_and_slower():
    ms, doc = prose.reference("lesson08")
    assert doc["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and "overlap" not in doc
    assert doc["machine"]["commit"].startswith("305e292") and "README" in doc["commit_note"]
    text = prose.read_reference(doc)
    assert "305e292" not in text and "commit" not in text and "OLD design" in text
    for words in ("in your loop, between two steps", "**1.16x slower**", "13.62 ms", "15.79 ms",
                  "3.9 ms and 20.4 ms outside the steps", "no kernel ran 18.8% and 29.6%", "at most 1.20x"):
        assert words in text, words
    assert no_ratio_below_one(text)


def test_reference_prefers_the_new_format_and_only_gpus(monkeypatch, tmp_path):
    def put(folder, gpu, **extra):
        save(tmp_path / folder / "lesson98.json", [Measurement("a", [1.0], machine={"gpu": gpu})], **extra)

    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    put("cpu-x", None, overlap=synthetic(4.0, 2.5))
    assert prose.reference("lesson98") is None, "a CPU's file is no reference for a CUDA cell"
    put("a100", "A100", trace_summaries={})
    assert prose.reference("lesson98")[1]["machine"]["gpu"] == "A100"
    put("h200", "H200", overlap=synthetic(4.0, 2.5), prefetcher=overlap.PREFETCHER)
    doc = prose.reference("lesson98")[1]
    assert doc["machine"]["gpu"] == "H200", "the new format wins over an older file sorted first"
    text = prose.read_reference(doc)
    assert text.startswith("No CUDA here: the reference measured on H200") and "**1.60x faster**" in text


def test_section_4s_sentences_follow_the_numbers():
    alike = {"decode": 1.0, "compute": 1.0}
    cpu = prose.thread_reading(0.9, 1.5, 1.5, {"decode": 1.3, "compute": 0.8}, device_type="cpu", cores=2,
                               rates=(900.0, 1000.0))
    assert "**1.11x slower** with the thread prefetcher (900 vs 1,000 images/s)" in cpu and "**1.50x faster**" in cpu
    assert "decoding took 1.30x as long as in the plain loop" in cpu and "20% less time than" in cpu
    assert "(2 cores, shared with other programs)" in cpu
    gpu = prose.thread_reading(1.06, 1.60, 1.58, alike, device_type="cuda", waiting_bound=1.62)
    assert "is not all waiting" in gpu and "beat" not in gpu, "1.60x is within 2% of a 1.58x bound"
    beat = prose.thread_reading(1.06, 1.70, 1.58, alike, device_type="cuda", waiting_bound=1.66)
    assert "the bound is 1.66x, and the rest is noise." in beat
    same = prose.thread_reading(1.5, 1.5, 1.6, alike, device_type="cuda")
    assert "about as much as the waiting one, or more" in same and "as long as in the plain loop (within 2%)" in same
    ref = prose.reference("lesson08")[1]
    shown = prose.thread_reading(1.0, 1.5, 1.6, alike, device_type="cpu", cores=2, ref=ref)
    assert "NVIDIA H100 80GB HBM3 of our reference run" in shown and "**1.06x faster**" in shown
    assert "**1.60x faster** (bound 1.58x)" in shown
    assert all(no_ratio_below_one(t) for t in (cpu, gpu, beat, same, shown))


def test_chart_data_of_either_format_names_the_old_prefetcher_by_its_commit():
    pictures, summaries = prose.chart_data(prose.reference("lesson08")[1])
    assert list(pictures) == list(summaries) == [PLAIN, "CudaPrefetcher, old design"]
    assert all(r["resource"].startswith("GPU") for rows in pictures.values() for r in rows)
    new = {"overlap": {**synthetic(4.0, 2.5), "picture": {PLAIN: [], "CudaPrefetcher": []}}}
    assert list(prose.chart_data(new)[0]) == [PLAIN, "CudaPrefetcher"]
    assert list(prose.chart_data(new)[1]) == [PLAIN, overlap.IN_LOOP, "CudaPrefetcher"]
    assert prose.chart_data({"overlap": None}) == ({}, {}) and prose.chart_data({}) == ({}, {})


def test_profile_steps_leaves_the_first_steps_out_and_syncs_before_the_window_ends(tmp_path, monkeypatch):
    done, synced = [], []
    monkeypatch.setattr(overlap, "synchronizer", lambda device: lambda: synced.append(len(done)))
    path = overlap.profile_steps(((i, None) for i in range(100)), lambda i, _: done.append(i),
                                 tmp_path / "t.json", "cpu", skip=1, wait=1, warmup=1, active=3)
    summary = overlap.trace.summary(path, names=["step"])
    assert done == list(range(6)) and synced == [6], "the sync ends the last step, inside its window"
    assert summary["steps"] == 3 and summary["stages"]["step"]["count"] == 3


@pytest.mark.parametrize(("plain", "pre"), [(4.0, 4.0), (4.0, 4.4), (4.0, 3.96), (4.0, 2.5), (13.6, 15.8)],
                         ids=["tie", "loss", "win-within-spread", "win", "loss-with-cause"])
def test_every_sentence_reads_its_numbers_on_a_grid(plain, pre):
    result = synthetic(plain, pre)
    for regime in result["regimes"].values():  # the runs vary by 2%
        regime[PLAIN]["runs_ms"] = [plain * 0.99, plain, plain * 1.01]
    text = prose.read(result)
    assert no_ratio_below_one(text) and "None" not in text
    x, words = prose.verdict(result["regimes"][overlap.SYNCED if hasattr(overlap, "SYNCED") else prose.SYNCED][PLAIN]["runs_ms"],
                             result["regimes"][prose.SYNCED]["CudaPrefetcher"]["runs_ms"])
    if abs(x - 1) <= 0.02:
        assert "the same speed (within 2%)" in text and "faster" not in words and "slower" not in words
    else:
        assert (f"{max(x, 1 / x):.2f}x {'faster' if x > 1 else 'slower'}") in text
    if x <= 1.02:
        assert "did not pay here" in text and "of the gain the bound allows" not in text
    assert text.count(f"with {overlap.IN_LOOP}: **the same speed") == 2, "the in-loop arm, read in both regimes"
    for regime in overlap.REGIMES:
        assert f"**The step that {regime}**" in text
    for gpu in (None, "H200"):
        shown = prose.read_reference({"overlap": result, "machine": {"gpu": gpu}, "prefetcher": overlap.PREFETCHER})
        assert "None" not in shown and no_ratio_below_one(shown)
        assert shown.startswith(f"No CUDA here: the reference measured on {gpu or 'a GPU'},")


@pytest.mark.parametrize("gpu", [None, "NVIDIA H100 80GB HBM3"])
@pytest.mark.parametrize("cores", [None, 2])
@pytest.mark.parametrize(("speedup", "waiting"), [(1.0, 1.0), (0.9, 0.95), (1.04, 1.0), (1.5, 1.3), (0.9, 1.5)])
def test_section_4s_sentences_on_a_grid(gpu, cores, speedup, waiting):
    ref = {**prose.reference("lesson08")[1], "machine": {"gpu": gpu}}
    for device_type in ("cpu", "cuda"):
        text = prose.thread_reading(speedup, waiting, 1.5, {"decode": 1.0, "compute": 1.0}, device_type=device_type,
                                    cores=cores, ref=ref)
        assert "None" not in text and no_ratio_below_one(text)
        assert "mostly waiting" not in text
        if max(speedup, waiting) <= 1.02:
            assert "Neither step gained" in text and "gained about as much" not in text
    old = prose.read_reference({**prose.reference("lesson08")[1], "machine": {"gpu": gpu}})
    assert "None" not in old and "commit" not in old
