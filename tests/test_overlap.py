"""Lesson 08's overlap experiment (gpufeed.course.lesson08.overlap) and its sentences (reading): the
structure of the timing on the CPU and under the CUDA-ordering simulator (on a GPU, on CUDA), the
loader-fed arms, what each mode costs, and sentences that follow the numbers through the verdict
method in both directions, on a grid and on a noisy run."""

import contextlib
import copy
import json
import random
import re
import statistics

import pytest
import torch
from cudacheck import no_host_sync

from gpufeed.course.lesson08 import feeds, overlap, traced
from gpufeed.course.lesson08 import reading as prose
from gpufeed.course.lesson08.feeds import IN_LOOP, PLAIN
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from gpufeed.measure import results
from gpufeed.measure.harness import Measurement, save
from gpufeed.measure.verdict import (
    CANNOT_TELL,
    FASTER,
    MIN_SAMPLES,
    SAME,
    SLOWER,
    compare,
    what_would_tell,
)


def batches(n=3, size=16, pinned=False):
    out = [(torch.full((2, 3, size, size), 10 * i, dtype=torch.uint8), torch.tensor([i, i + 1]))
           for i in range(n)]
    return [(x.pin_memory(), y.pin_memory()) for x, y in out] if pinned else out


def test_bound_is_the_overlap_arithmetic():
    assert overlap.bound(2.0, 2.0) == 2.0 and overlap.bound(1.0, 3.0) == pytest.approx(4 / 3)
    assert overlap.bound(1.0, 2.0, n=16) == pytest.approx(3 * 16 / (2 * 16 + 1))  # exercise 3's 3n/(2n+1)
    assert overlap.bound(1.0, 2.0, n=1) == 1.0 and overlap.bound(1.0, 2.0, n=10**6) == pytest.approx(1.5, rel=1e-5)
    # three stages (gather, copy, step), each on its own resource: their sum against the longest
    assert overlap.bound(1.0, 2.0, 3.0) == 2.0 and overlap.bound(1.0, 2.0, 3.0, n=2) == pytest.approx(12 / 9)
    assert overlap.bound(0.0, 2.0) == 1.0, "nothing to hide: no gain"
    # the costs side by side, where stages slow each other: decoding 10 ms alone, 12 beside the step
    assert overlap.bound(10.0, 8.0, n=8, beside=[12.0, 8.0]) == pytest.approx(8 * 18 / (20 + 7 * 12))
    assert overlap.bound(10.0, 8.0, beside=[12.0, 8.0]) == pytest.approx(18 / 12)
    for bad in ((1.0,), (-1.0, 2.0), (0.0, 0.0)):
        with pytest.raises(ValueError, match="stage costs"):
            overlap.bound(*bad)
    with pytest.raises(ValueError, match="stage costs"):
        overlap.bound(1.0, 2.0, beside=[1.0])


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

    arms = {"A": lambda: start("A"), "B": lambda: start("B")}
    ms = overlap.alternate(arms, lambda name, _: steps.append(name), "cpu", repeats=3, warmup=2,
                           steps=5, label="syncs every step", items=2)
    assert started == ["A", "B"] * 3, "ABABAB, each run from a fresh feed"
    assert steps == (["A"] * 7 + ["B"] * 7) * 3
    assert [m.name for m in ms] == ["A, syncs every step", "B, syncs every step"]
    assert [m.params["places"] for m in ms] == [[0, 2, 4], [1, 3, 5]]
    assert all(len(m.samples) == 3 and m.params["warmup"] == 2 and m.params["steps"] == 5
               and m.params["memory"] == {} for m in ms)
    with pytest.raises(ValueError, match="repeats"):
        overlap.alternate(arms, print, "cpu", repeats=0)


def numbered(n=8, size=8):
    """Images whose every pixel is their row's number, and labels that are that number."""
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, size, size).contiguous()
    return images, torch.arange(n)


def test_the_loader_fed_arms_give_each_gathered_batch_without_a_host_sync(on_cuda):
    """Issue 47, item 6: the arms are fed by a loader that gathers and pins each batch (a
    FastLoader), epoch after epoch; each arm yields converted batches whose images are the rows
    their labels name, and none syncs the host per batch (a GPU: sync-debug mode "error"; the
    simulator counts every sync). Read later, as a training loop does."""
    images, labels = numbered()
    loader = feeds.feeding_loader(images, labels, 4, "cuda")
    assert loader.pin_memory, "for a GPU the loader pins what it gathers"
    arms = feeds.sources(loader, "cuda", torch.float32, depth=2)
    for name, start in arms.items():
        for it in (iter(start()), iter(start())):  # one pass, and a pass after it
            next(it)  # the first batch: warm-up (the prefetcher's constants)
            with no_host_sync() if on_cuda is None else contextlib.nullcontext():
                syncs = len(on_cuda.syncs) if on_cuda is not None else 0
                got = [next(it) for _ in range(6)]  # three epochs of two batches
                if on_cuda is not None:
                    assert on_cuda.syncs[syncs:] == [], (name, on_cuda.syncs[syncs:])
            it.close()
            for x, y in got:
                assert x.is_cuda and x.dtype == torch.float32 and x.shape == (4, 3, 8, 8)
                assert torch.equal((x.cpu() * 255).round()[:, 0, 0, 0].long(), y.cpu()), name
            for epoch in (got[1:3], got[3:5]):  # the pass's second and third epochs, whole
                assert sorted(torch.cat([y.cpu() for _, y in epoch]).tolist()) == list(range(8)), name


def test_epochs_restart_the_loader_without_end_and_cycle_a_list():
    images, labels = numbered()
    loader = feeds.feeding_loader(images, labels, 4, "cpu")
    assert not loader.pin_memory, "no pinning without a GPU"
    it = iter(feeds.Epochs(loader))
    epochs = [sorted(torch.cat([next(it)[1] for _ in range(2)]).tolist()) for _ in range(3)]
    assert epochs == [list(range(8))] * 3 and loader.epoch == 3  # a new, shuffled epoch each time
    cycled = iter(feeds.Epochs([1, 2]))
    assert [next(cycled) for _ in range(5)] == [1, 2, 1, 2, 1]


def test_both_feeds_give_the_plain_loops_batches(on_cuda):
    device = torch.device("cuda", 0)
    data = batches(pinned=True)
    want = [(((x.double() / 255 - torch.tensor(IMAGENET_MEAN).double().view(-1, 1, 1))
              / torch.tensor(IMAGENET_STD).double().view(-1, 1, 1)), y) for x, y in data]
    arms = feeds.sources(data, device, torch.float32, IMAGENET_MEAN, IMAGENET_STD, depth=2)
    assert list(arms) == [PLAIN, IN_LOOP, "CudaPrefetcher"]
    for start in arms.values():
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
    feed = feeds.feeding_loader(*numbered(6, 16), 2, device)  # as the lesson's cell makes it
    p = overlap.plan(feed, device, fake_steps(calls), dtype=torch.float32,
                     mean=IMAGENET_MEAN, std=IMAGENET_STD, widths=(1, 2), repeats=2, items=2)
    assert p.width in (1, 2) and "the bound is" in p.describe() and set(p.steps) <= {1, 2}
    made = []
    real_stream = torch.cuda.Stream
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: made.append(1) or real_stream(*a, **k))
    calls.clear()
    result, ms = overlap.measure(p, repeats=2, warmup=3, steps=4, items=2)
    assert result["repeats"] == 2 and result["steps"] == 4 and result["warmup"] == 3
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
    assert result["prefetcher"] == "CudaPrefetcher" and result["traces"] == result["gaps"] == {}
    assert result["convert_with_step"], "on a GPU the conversion shares the compute units with the step"
    assert result["feed_ms"] == pytest.approx(result["host_ms"] + result["copy_ms"]), "host work and copy: hidden"
    assert result["stages_ms"] == pytest.approx([result["host_ms"], result["copy_ms"], result["work_ms"]])
    assert [m.name for m in ms][:3] == ["the loader's gather and pinning of a batch", "copy of a batch",
                                       "conversion of a batch"]
    json.dumps(result)  # saved with the lesson's results


@pytest.fixture
def cpu_result(tmp_path):
    torch.manual_seed(0)
    data = batches(size=32)
    p = overlap.plan(data, "cpu", feeds.model_steps("cpu"), dtype=torch.float32, mean=IMAGENET_MEAN,
                     std=IMAGENET_STD, widths=(1, 2), repeats=2, items=2)
    return overlap.measure(p, trace_dir=tmp_path, repeats=2, warmup=1, steps=3, active=2, items=2)


def test_the_plan_names_the_copy_apart_from_the_conversion():
    """Off a GPU the feed is copy and conversion; the sentence gives the copy's own time by its GB/s."""
    data = batches(size=32)
    p = overlap.plan(data, "cpu", feeds.model_steps("cpu"), dtype=torch.float32, mean=IMAGENET_MEAN,
                     std=IMAGENET_STD, widths=(1,), repeats=2, items=2)
    assert not p.convert_with_step and p.feed_s == p.host.median + p.copy.median + p.convert.median
    assert p.stages == (p.feed_s, p.work_s) and p.bound == overlap.bound(p.feed_s, p.work_s)
    text = p.describe()
    assert f"the copy takes {p.copy.median * 1e3:.2f} ms ({p.copy.gb_per_s:.1f} GB/s)" in text
    assert f"In turns a step costs {(p.feed_s + p.work_s) * 1e3:.2f} ms" in text


def test_the_experiment_runs_on_the_cpu_with_a_real_model_and_profiles_each_variant(cpu_result):
    result, ms = cpu_result
    assert result["prefetcher"] == "ThreadPrefetcher" and result["width"] in (1, 2)
    assert not result["convert_with_step"], "off a GPU the prefetch thread converts: feed = copy + conversion"
    assert result["feed_ms"] == pytest.approx(result["host_ms"] + result["copy_ms"] + result["convert_ms"])
    assert result["bound"] == pytest.approx(overlap.bound(result["feed_ms"], result["step_ms"]))
    for regime in overlap.REGIMES:
        for name, summary in result["traces"][regime].items():
            assert summary["steps"] == 2 and summary["stages"]["step"]["count"] == 2, (regime, name)
            assert traced.between_steps(summary)["host_ms"] >= 0
            assert len(result["gaps"][regime][name]) == 1 and result["gaps"][regime][name][0] >= 0
    assert set(result["picture"]) == {PLAIN, "ThreadPrefetcher"}
    assert all(any(i["resource"] == "host" for i in rows) for rows in result["picture"].values())
    assert len([m for m in ms if m.params.get("regime")]) == 4
    text = prose.read(result)
    assert text.count("**The step") == 2 and "of the step that syncs every step, over 2 profiled steps" in text
    json.dumps(result)


#: Each arm's runs as multiples of its median: about 1% apart, in a different order for each arm.
JITTER = (1.00, 1.01, 0.99, 1.005, 0.995)


def runs_of(median, jitter=JITTER):
    return [median * f for f in jitter]


def synthetic(plain_ms, pre_ms, *, in_loop_ms=None, host_ms=0.0, copy_ms=2.0, step_ms=2.0, host=(4.0, 4.0),
              busy=(88.0, 88.0), runs=runs_of):
    """A result of overlap.measure with chosen medians, runs (5 per arm, in turns) and traces (both
    regimes alike; ``host``: the plain loop's and the prefetcher's host time outside 8 steps)."""
    def summary(h, b):
        return {"window_ms": 100.0, "steps": 8, "gpu_idle_fraction": 1 - b / 100.0,
                "stages": {"step": {"total_ms": 100.0 - h}}, "kernels": 10}

    def arm(median, jitter, memory):
        r = runs(median, jitter)
        return {"runs_ms": r, "median_ms": statistics.median(r), "places": [], "memory": memory}

    arms = {PLAIN: arm(plain_ms, JITTER, {"allocated_peak": 5e9, "reserved_peak": 6e9, "in_flight_peak": 1e9}),
            IN_LOOP: arm(in_loop_ms or plain_ms, JITTER[::-1],
                                 {"allocated_peak": 5e9, "reserved_peak": 6e9, "in_flight_peak": 1e9}),
            "CudaPrefetcher": arm(pre_ms, JITTER[1:] + JITTER[:1],
                                  {"allocated_peak": 5.5e9, "reserved_peak": 7e9, "in_flight_peak": 1.5e9})}
    traces = {PLAIN: summary(host[0], busy[0]), IN_LOOP: summary(host[0], busy[0]),
              "CudaPrefetcher": summary(host[1], busy[1])}
    gaps = {PLAIN: [host[0] / 8 * f for f in JITTER + JITTER[:2]], IN_LOOP: [host[0] / 8] * 7,
            "CudaPrefetcher": [host[1] / 8 * f for f in JITTER[::-1] + JITTER[:2]]}
    feed, work = host_ms + copy_ms, step_ms
    return {"prefetcher": "CudaPrefetcher", "host_ms": host_ms, "copy_ms": copy_ms, "convert_ms": 0.0,
            "step_ms": step_ms, "feed_ms": feed, "work_ms": work, "stages_ms": [host_ms, copy_ms, work],
            "convert_with_step": True, "bound": overlap.bound(feed, work), "converted_bytes": 5e8, "depth": 1,
            "repeats": 5, "warmup": 5, "steps": 50, "regimes": {r: copy.deepcopy(arms) for r in overlap.REGIMES},
            "bounds": {r: overlap.bound(feed, work) for r in overlap.REGIMES},
            "traces": {r: copy.deepcopy(traces) for r in overlap.REGIMES},
            "gaps": {r: copy.deepcopy(gaps) for r in overlap.REGIMES}}


def no_ratio_below_one(text):
    """No "0.80x faster": a ratio is worded from its side of 1. (A verdict's interval that holds 1,
    "0.59x to 2.51x", is an interval, not a ratio.)"""
    text = re.sub(r"\b\d+\.\d+x to \d+\.\d+x", "", text)
    return re.search(r"\b0\.\d+x", text) is None


def paragraph(text, regime):
    return next(p for p in text.split("\n\n") if p.startswith(f"**The step that {regime}**"))


def test_sentences_follow_the_numbers_in_both_directions():
    win = prose.read(synthetic(4.0, 2.5))
    assert "with CudaPrefetcher 2.50 ms, **1.60x faster** than the plain loop (" in win
    assert "60% of the gain the bound allows" in win and "slower" not in win
    assert "with side stream in the loop 4.00 ms, **as fast** as the plain loop (within" in win
    assert "and **1.60x faster** than the side stream in the loop (" in win and "differ only in where the host work runs" in win
    lose = prose.read(synthetic(13.6, 15.8, copy_ms=2.2, step_ms=10.9, host=(3.9, 20.4)))
    synced, never = paragraph(lose, "syncs every step"), paragraph(lose, "never syncs")
    assert "**1.16x slower** than the plain loop" in synced and "faster than the plain loop" not in synced
    assert "CudaPrefetcher did not pay here: between two steps the host took 5.23x longer (" in synced
    assert "time in which a step that syncs gives the GPU no step to run" in synced
    assert "did not pay here" in never and "gives the GPU no step" not in never
    above = prose.read(synthetic(5.0, 1.8))
    assert "Above the bound, its whole interval: the plain loop took 1.00 ms a step more than its stages alone" in above
    assert "0.20 ms less than the longest stage alone (2.00 ms): the costs timed alone were higher" in above
    at = prose.read(synthetic(4.0, 1.99))  # 2.01x against a bound of 2.00x: its interval holds it
    assert "At the bound (its interval holds it)" in at and "of the gain the bound allows" not in at
    same = prose.read(synthetic(4.0, 3.98, host=(4.0, 4.0)))
    assert "**as fast** as the plain loop (within" in paragraph(same, "syncs every step")
    assert "did not pay here: its trace measured no cause (one likely cause, not measured here:" in same
    assert "converted batches of 500 MB" in win and "copy on the default stream 2.0; side stream in the loop 2.0; CudaPrefetcher 3.0" in win
    assert "keeps at most depth + 2 = 3 converted batches in flight (depth queued, the one its thread makes, the one you use), 4 for a moment" in win
    assert all(no_ratio_below_one(t) for t in (win, lose, above, at, same))


def test_a_run_that_cannot_tell_says_so_and_what_would_tell():
    few = synthetic(4.0, 2.5, runs=lambda m, j: runs_of(m, j)[:2])  # quick mode: 2 runs of each
    text = prose.read(few)
    assert text.count("not told apart from the plain loop by this run (2 samples per arm)") == 2 * 2
    assert "This run cannot tell: 2 samples per arm, and a verdict needs at least 5" in text
    assert "faster" not in text and "slower" not in text and "did not pay" not in text
    noisy = synthetic(4.0, 3.6, runs=lambda m, j: [m * f for f in (1.0, 1.6, 0.7, 1.3, 0.8)][::1 if j == JITTER else -1])
    text = prose.read(noisy)
    assert "This run cannot tell: the ratio's interval" in text and what_would_tell() in text  # for this mode
    assert "of the gain the bound allows" not in text and "did not pay" not in text


def test_the_committed_h100_reference_is_shown_as_the_old_prefetchers_and_slower_in_one_run():
    ms, doc = prose.reference("lesson08")
    assert doc["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and "overlap" not in doc
    assert doc["machine"]["commit"].startswith("305e292") and "README" in doc["commit_note"]
    text = prose.read_reference(doc)
    assert "305e292" not in text and "commit" not in text and "OLD design" in text
    for words in ("in your loop, between two steps", "In that one run the loop was 1.16x slower with", "13.62 ms",
                  "15.79 ms", "one run each way is no verdict", "3.9 ms and 20.4 ms outside the steps",
                  "no kernel ran 18.8% and 29.6%", "at most 1.20x",
                  "One likely cause, not measured here by a verdict: the host's time outside the steps"):
        assert words in text, words
    assert no_ratio_below_one(text)


def test_the_intro_agrees_with_the_committed_reference():
    """Issue 46: the intro said the old reference "found no gain"; it found the loop 1.16x slower."""
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "notebooks" / "08_prefetch.py").read_text()
    assert "found no gain" not in source
    intro = re.sub(r"\s*#\s*", " ", source[source.index("## 5. Proof of overlap"):source.index("* **Three arms**")])
    assert "found the loop 1.16x slower with it, in one profiled run each way" in intro
    assert "In that one run the loop was 1.16x slower with" in prose.read_reference(prose.reference("lesson08")[1])


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


def told(ratio, noise=JITTER, n=5):
    """A verdict on arm A against arm B whose medians are ``ratio`` apart (A faster above 1)."""
    b = [1.0 * f for f in noise][:n]
    a = [x / ratio for x in (list(noise[1:]) + list(noise[:1]))[:n]]
    return compare(a, b, paired=True)


NOISY = (1.0, 1.6, 0.7, 1.3, 0.8)


def test_section_4s_sentences_follow_the_numbers():
    alike = told(1.0)
    cpu = prose.thread_reading(told(1 / 1.11), told(1.5), 1.5, told(1 / 1.3), told(1.6), device_type="cpu", cores=2,
                               rates=(900.0, 1000.0))
    assert "Training step on the CPU (900 images/s with the thread prefetcher, 1,000 without): with the thread prefetcher the loop ran **1.11x slower** than the plain loop (" in cpu
    assert "with the waiting step it ran **1.50x faster** than its plain loop (" in cpu
    assert "decoding took 1.30x longer than alone in the plain loop (" in cpu
    assert "The waiting step's gain was 1.60x larger than the real step's (" in cpu
    assert ("Decoding slowed beside the real step (measured above); one likely cause of that and of the rest, not "
            "measured here: the real step computes on the CPU (one torch thread, beside the decoding thread, on 2 cores)") in cpu
    gpu = prose.thread_reading(told(1.06), told(1.60), 1.58, alike, told(1.5), device_type="cuda", waiting_bound=1.62)
    assert "holds the GIL between its native calls, and the decoding thread waits" in gpu
    assert "beat" not in gpu, "1.60x: its interval reaches below the 1.58x bound"
    beat = prose.thread_reading(told(1.06), told(1.70), 1.58, alike, told(1.6), device_type="cuda", waiting_bound=1.60)
    assert "The waiting step beat that bound" in beat and "the bound is 1.60x; its interval lies above that too" in beat
    same = prose.thread_reading(told(1.5), told(1.5), 1.6, alike, told(1.0), device_type="cuda")
    assert "gain was as large as the real step's (within" in same and "decoding took as long as alone in the plain loop" in same
    assert "likely cause" not in same, "no cause for a difference that was not found"
    neither = prose.thread_reading(alike, told(1.0), 1.6, alike, told(1.0), device_type="cpu")
    assert "Neither step gained from the thread here." in neither and "gain was" not in neither
    noisy = prose.thread_reading(told(1.1, NOISY), told(1.4), 1.6, alike, told(1.2, NOISY), device_type="cpu")
    assert "the loop was not told apart from the plain loop by this run" in noisy and "This run cannot tell" in noisy
    assert "Neither step gained" not in noisy
    few = prose.thread_reading(told(1.1, n=3), told(1.4, n=3), 1.6, told(1.0, n=3), told(1.2, n=3), device_type="cpu")
    assert "(3 samples per arm)" in few and "or an arm has too few samples" in few and "Neither" not in few
    assert "This run cannot tell the real step's loop from its plain loop or the waiting step's loop from its plain loop" in few
    ref = prose.reference("lesson08")[1]
    shown = prose.thread_reading(alike, told(1.5), 1.6, alike, told(1.5), device_type="cpu", cores=2, ref=ref)
    assert "NVIDIA H100 80GB HBM3 of our reference run" in shown
    assert ("the loop with the real step ran 1.06x faster than its plain loop and with the waiting step 1.60x faster "
            "than its plain loop in the medians of 3 runs each (too few for a verdict") in shown
    # one bound everywhere: the reference's epochs of 1536 / 32 = 48 batches, the first decode included
    assert "; the bound there was 1.56x over its epochs of 48 batches, the first decode included." in shown
    assert ("The waiting step's ratio lies above that bound: its plain loop took 50.6 ms a batch there, less than "
            "the 52.9 ms") in shown
    assert all(no_ratio_below_one(t) for t in (cpu, gpu, beat, same, neither, noisy, few, shown))


def _thread_ref(plain, pre, plain_wait, pre_wait, items=480, batch_size=32, decode_ms=10.0, compute_ms=8.0, n=5):
    """A reference document with section 4's four loops: seconds an epoch, ``n`` runs each."""
    spread = [1.0, 1.01, 0.99, 1.005, 0.995][:n]
    ms = [Measurement(name, [s * f for f in spread], items=items).to_dict() for name, s in (
        ("plain loop", plain), ("ThreadPrefetcher", pre), ("plain loop, waiting step", plain_wait),
        ("ThreadPrefetcher, waiting step", pre_wait))]
    return {"machine": {"gpu": "GPU X"}, "measurements": ms, "batch_size": batch_size, "decode_ms": decode_ms,
            "compute_ms": compute_ms, "thread_speedup": plain / pre}


def test_the_references_section_4_uses_the_one_bound_and_reads_a_median_above_it():
    # 15 batches of 10 ms decode + 8 ms step: the bound with the first decode is 15 x 18 / (18 + 14 x 10) = 1.71x
    below = prose.reference_thread(_thread_ref(0.27, 0.25, 0.27, 0.18))
    assert "the bound there was 1.71x over its epochs of 15 batches, the first decode included." in below
    assert "with the waiting step 1.50x faster than its plain loop (" in below, "5 runs each: a verdict"
    assert "above that bound" not in below and "too few" not in below
    # 0.24 s / 15 = 16.0 ms a batch in the plain loop, less than the 18 ms the costs add up to
    above = prose.reference_thread(_thread_ref(0.27, 0.25, 0.24, 0.12, n=3))
    assert "too few for a verdict" in above
    assert ("The waiting step's ratio lies above that bound: its plain loop took 16.0 ms a batch there, less than "
            "the 18.0 ms") in above
    unexplained = prose.reference_thread(_thread_ref(0.36, 0.35, 0.36, 0.18, n=3))  # 24 ms a batch: no lower cost
    assert "kept no log to say which" in unexplained
    no_n = prose.reference_thread({**_thread_ref(0.27, 0.25, 0.27, 0.18), "batch_size": None})
    assert "the bound there was 1.80x." in no_n and "over its epochs" not in no_n  # steady state: 18 / 10
    assert prose.reference_thread({**_thread_ref(1, 1, 1, 1), "measurements": []}) == ""
    cpu = prose.thread_reading(told(1.0), told(1.5), 1.6, told(1 / 1.3), told(1.5), device_type="cpu", cores=2)
    assert "(one torch thread, beside the decoding thread, on 2 cores)" in cpu
    assert "other programs" not in cpu, "the site's run is alone on the machine: no load it did not measure"


@pytest.mark.parametrize(("v", "said"), [
    (told(1.39), "Its interval holds the bound"),                 # at the bound (1.40x)
    (told(1.2), "That is 50% of the gain the bound allows."),     # a gain below it
    (told(1.8), ""),                                              # above it: its caller explains from the costs
    (told(1.0), ""), (told(0.8), ""),                             # a tie, a loss: no share of a gain
    (told(1.2, NOISY), ""),                                       # cannot tell
    (told(1.3, n=3), ""),                                         # too few runs
])
def test_share_of_bound_grid(v, said):
    text = prose.share_of_bound(v, 1.4)
    assert (said in text if said else text == ""), text
    assert prose.share_of_bound(told(1.2), 1.0) == "", "a bound of 1 allows no gain to take a share of"
    assert prose.share_of_bound(told(1.2), 1.4, lead="With X, that is") == " With X, that is 50% of the gain the bound allows."
    text = prose.thread_reading(told(1.2), told(1.39), 1.4, told(1.0), told(1.1), device_type="cpu", cores=2)
    assert "(the epoch's first decode, which nothing hides, included). With the real step, that is 50% of the gain" in text


def test_chart_data_of_either_format_names_the_old_prefetcher_by_its_commit():
    pictures, summaries = prose.chart_data(prose.reference("lesson08")[1])
    assert list(pictures) == list(summaries) == [PLAIN, "CudaPrefetcher, old design"]
    assert all(r["resource"].startswith("GPU") for rows in pictures.values() for r in rows)
    new = {"overlap": {**synthetic(4.0, 2.5), "picture": {PLAIN: [], "CudaPrefetcher": []}}}
    assert list(prose.chart_data(new)[0]) == [PLAIN, "CudaPrefetcher"]
    assert list(prose.chart_data(new)[1]) == [PLAIN, IN_LOOP, "CudaPrefetcher"]
    assert prose.chart_data({"overlap": None}) == ({}, {}) and prose.chart_data({}) == ({}, {})


def test_profile_steps_leaves_the_first_steps_out_and_syncs_before_the_window_ends(tmp_path, monkeypatch):
    done, synced = [], []
    monkeypatch.setattr(traced, "synchronizer", lambda device: lambda: synced.append(len(done)))
    path = traced.profile_steps(((i, None) for i in range(100)), lambda i, _: done.append(i),
                                 tmp_path / "t.json", "cpu", skip=1, wait=1, warmup=1, active=3)
    summary = traced.trace.summary(path, names=["step"])
    assert done == list(range(6)) and synced == [6], "the sync ends the last step, inside its window"
    assert summary["steps"] == 3 and summary["stages"]["step"]["count"] == 3


@pytest.mark.parametrize(("plain", "pre"), [(4.0, 4.0), (4.0, 4.4), (4.0, 3.96), (4.0, 2.5), (13.6, 15.8),
                                             (4.0, 1.5)],
                         ids=["tie", "loss", "win-within-the-runs-spread", "win", "loss-with-cause", "above-the-bound"])
@pytest.mark.parametrize("noise", ["quiet", "noisy", "two-runs"])
def test_every_sentence_reads_its_numbers_on_a_grid(plain, pre, noise):
    jitter = {"quiet": runs_of, "noisy": lambda m, j: [m * f for f in (NOISY if j == JITTER else NOISY[::-1])],
              "two-runs": lambda m, j: runs_of(m, j)[:2]}[noise]
    result = synthetic(plain, pre, host=(3.9, 20.4) if pre > plain else (4.0, 4.0), runs=jitter)
    text = prose.read(result)
    assert no_ratio_below_one(text) and "None" not in text
    for regime, runs in result["regimes"].items():
        v = prose.arms(runs["CudaPrefetcher"]["runs_ms"], runs[PLAIN]["runs_ms"])
        said = paragraph(text, regime)
        assert f"with CudaPrefetcher {runs['CudaPrefetcher']['median_ms']:.2f} ms, {v.words('the plain loop', bold=True)}" in said
        assert f"with {IN_LOOP}" in said and f"**The step that {regime}**" in said
        consistent(said, v)
    for gpu in (None, "H200"):
        shown = prose.read_reference({"overlap": result, "machine": {"gpu": gpu}, "prefetcher": overlap.PREFETCHER})
        assert "None" not in shown and no_ratio_below_one(shown)
        assert shown.startswith(f"No CUDA here: the reference measured on {gpu or 'a GPU'},")


def consistent(said: str, v) -> None:
    """One question (is the prefetcher faster than the plain loop in this regime?) gets one answer:
    the sentence against the bound follows the verdict, never the opposite."""
    gain = ("of the gain the bound allows", "Above the bound", "At the bound")
    if v.kind == FASTER:
        assert "did not pay" not in said and any(g in said for g in gain), said
    elif v.kind in (SLOWER, SAME):
        assert "did not pay" in said and not any(g in said for g in gain), said
    else:
        assert "This run cannot tell" in said and "did not pay" not in said and not any(g in said for g in gain), said


def test_a_noisy_run_never_gets_opposite_verdicts_on_one_question():
    """Issue 46: the numbers of a noisy run (2 to 9 runs an arm, up to 40% apart) through every
    wording helper of the lesson: each question is answered once, by its verdict: section 5's
    sentence against the bound never contradicts its verdict, and section 4 never says "neither
    step gained" beside a gain, nor gives a cause for a difference its verdict did not find."""
    rng = random.Random(8)
    kinds = set()
    for _ in range(60):
        n, spread = rng.randint(2, 9), rng.choice([0.02, 0.1, 0.4])

        def noisy(m, j, n=n, spread=spread):
            return [m * (1 + rng.uniform(-spread, spread)) for _ in range(n)]

        plain, pre = rng.uniform(3, 15), rng.uniform(3, 15)
        result = synthetic(plain, pre, copy_ms=rng.uniform(0.5, 5), step_ms=rng.uniform(0.5, 12),
                           host=(rng.uniform(1, 10), rng.uniform(1, 30)), runs=noisy)
        text = prose.read(result)
        for regime, runs in result["regimes"].items():
            v = prose.arms(runs["CudaPrefetcher"]["runs_ms"], runs[PLAIN]["runs_ms"])
            kinds.add(v.kind)
            consistent(paragraph(text, regime), v)
        real, waiting = told(rng.uniform(0.7, 1.5), noisy(1.0, None)), told(rng.uniform(0.7, 2.0), noisy(1.0, None))
        more = told(rng.uniform(0.7, 1.5), noisy(1.0, None))
        said = prose.thread_reading(real, waiting, 1.5, told(rng.uniform(0.7, 1.3), noisy(1.0, None)), more,
                                    device_type=rng.choice(["cpu", "cuda"]), cores=2)
        if FASTER in (real.kind, waiting.kind):
            assert "Neither step gained" not in said
        if more.kind != FASTER:
            assert "likely cause" not in said
        assert no_ratio_below_one(text + said)
    assert {FASTER, SLOWER, CANNOT_TELL} <= kinds, "the noisy runs reach every verdict"


@pytest.mark.parametrize("gpu", [None, "NVIDIA H100 80GB HBM3"])
@pytest.mark.parametrize("cores", [None, 2])
@pytest.mark.parametrize(("speedup", "waiting"), [(1.0, 1.0), (0.9, 0.95), (1.04, 1.0), (1.5, 1.3), (0.9, 1.5)])
@pytest.mark.parametrize("noise", [JITTER, NOISY])
def test_section_4s_sentences_on_a_grid(gpu, cores, speedup, waiting, noise):
    ref = {**prose.reference("lesson08")[1], "machine": {"gpu": gpu}}
    real, wait = told(speedup, noise), told(waiting, noise)
    more = told(waiting / speedup, noise)  # the waiting step's gain against the real step's
    for device_type in ("cpu", "cuda"):
        text = prose.thread_reading(real, wait, 1.5, told(1.0, noise), more, device_type=device_type, cores=cores,
                                    ref=ref)
        assert "None" not in text and no_ratio_below_one(text)
        if FASTER not in (real.kind, wait.kind) and real.decided and wait.decided:
            assert "Neither step gained" in text and "gain was" not in text
        else:
            assert "Neither step gained" not in text
    old = prose.read_reference({**prose.reference("lesson08")[1], "machine": {"gpu": gpu}})
    assert "None" not in old and "commit" not in old


def test_quick_mode_is_quick_on_a_gpu_too_and_each_mode_says_its_cost():
    """Issue 47, item 7: section 5 ran its full-mode sizes in quick mode (2 regimes x 3 arms x 3
    runs of 110 steps, 6 traces). Now the mode picks them (overlap.settings), the notebook passes
    them, and the plan estimates each mode's cost: at the H100 run's full-size costs (gather about
    20 ms, assumed; copy 2.17 ms; conversion 1 ms, assumed; step 10.94 ms), quick mode's timing
    costs about 10 s, full mode's about a minute."""
    from pathlib import Path

    quick, full = overlap.settings("quick"), overlap.settings("full")
    assert overlap.settings("site") == quick, "the site has no GPU: its sizes are quick mode's"
    assert full["repeats"] >= MIN_SAMPLES > quick["repeats"], "full mode's runs can decide a verdict"
    for key in ("repeats", "warmup", "steps", "active"):
        assert quick[key] < full[key], key
    assert quick["traced"] == (overlap.SYNCED,) and full["traced"] == tuple(overlap.REGIMES)

    def m(seconds):
        return Measurement("x", [seconds])

    p = overlap.Plan([], torch.device("cuda"), None, None, None, None, m(0.020), m(0.00217), m(0.001),
                     {8: m(0.01094)}, 8)
    cost_quick, cost_full = p.cost(**quick), p.cost(**full)
    print(f"section 5 at the H100's full-size costs: quick {cost_quick:.0f} s, full {cost_full:.0f} s")
    assert cost_quick < 12 and 30 < cost_full < 120 and cost_quick < cost_full / 4
    source = (Path(__file__).resolve().parents[1] / "notebooks" / "08_prefetch.py").read_text()
    assert "sizes = overlap.settings()" in source and "overlap.measure(plan, trace_dir=trace_dir, items=B, **sizes)" in source
    assert "plan.cost(**sizes)" in source, "the cell says what the timing will cost before it runs"
