"""``gpufeed.measure.diagnose``: a loop's period split, its bound, and findings only where measured.

Loaders and steps that sleep stand for work of known length; the CUDA simulator stands for a GPU
(it counts the syncs torch's sync debug mode reports and knows pinned memory from pageable).
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from gpufeed.measure import diagnose, findings
from gpufeed.measure.diagnosis import DiagnoseError, Report
from gpufeed.simcuda import simulated_cuda


class Sleepy:
    """A re-iterable loader: ``n`` batches of 4 images, each after ``ms`` milliseconds."""

    def __init__(self, ms: float, n: int = 100):
        self.ms, self.n = ms, n

    def __iter__(self):
        for _ in range(self.n):
            time.sleep(self.ms / 1e3)
            yield torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)


def sleeper(ms: float):
    return lambda batch: time.sleep(ms / 1e3)


def assert_evidenced(report):
    for f in report.findings:
        assert f.evidence and all(v is not None for v in f.evidence.values()), f
        assert set(f.lessons) <= set(findings.LESSONS)


def test_a_slow_loader_is_data_bound_and_its_wait_is_most_of_the_period():
    r = diagnose(Sleepy(20), sleeper(5), batches=8, warmup=1, probe=1)
    assert r.bound == "data"
    assert r.wait_fraction == pytest.approx(0.8, abs=0.1)
    assert r.items == 4 and r.loader_rate < r.model_rate
    assert r.best_speedup > 2  # the step alone runs at ~200 batches/s, the loop at ~40
    keys = [f.key for f in r.findings]  # a bare loader: nothing says which stage is slow, unless the
    assert keys and set(keys) <= {"loader-slow", "overlap"}, keys  # noise puts it well apart from the step
    assert_evidenced(r)
    text = str(r)
    assert "data bound" in text and "waiting for the next batch" in text


def test_a_slow_step_is_compute_bound_and_the_loader_is_not_the_bottleneck():
    r = diagnose(Sleepy(2), sleeper(20), batches=6, warmup=1, probe=1)
    assert r.bound == "compute"
    assert r.wait_fraction < 0.2
    assert [f.key for f in r.findings] == ["loader-fine"]
    assert_evidenced(r)


class PerSample(Dataset):
    """A map-style dataset read one sample at a time, each read taking ``ms``."""

    def __init__(self, n: int = 32, ms: float = 1.0):
        self.n, self.ms = n, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.ms / 1e3)
        return torch.zeros(3, 8, 8), i % 2


def test_a_dataloader_without_workers_gets_the_workers_finding():
    loader = DataLoader(PerSample(), batch_size=8, num_workers=0)
    r = diagnose(loader, sleeper(1), batches=4, warmup=1, probe=1)
    keys = [f.key for f in r.findings]
    assert "workers" in keys and "per-sample" in keys
    assert r.loader_settings["num_workers"] == 0 and r.dataset_ms["sample"] >= 1.0
    assert_evidenced(r)


def test_no_finding_without_its_evidence():
    base = dict(items=8, batches=4, device="cpu", period_s=0.01, wait_s=0.008, step_s=0.002, loader_rate=2000.0,
                model_rate=4000.0, cores=2)
    bare = Report(**base)  # nothing but the timings: no settings, no copies, no syncs, no dataset
    assert [f.key for f in findings.find(bare)] == ["overlap"]  # rests on the three rates alone
    assert all(f.key not in ("pageable", "sync", "copy-in-line", "float-on-the-wire", "workers", "decode")
               for f in findings.find(Report(**base, syncs_per_step=None, copy_s=None, gpu_idle=None)))
    with pytest.raises(ValueError, match="without measured evidence"):
        findings.Finding("sync", "text", {"syncs_per_step": None}, ("02",))
    with pytest.raises(ValueError, match="without measured evidence"):
        findings.Finding("sync", "text", {}, ("02",))


@pytest.mark.parametrize(("wait", "bound"), [(0.5, "data"), (0.49, "balanced"), (0.21, "balanced"), (0.2, "compute"),
                                             (0.0, "compute")])
def test_bound_at_each_threshold(wait, bound):
    r = Report(items=1, batches=2, device="cpu", period_s=1.0, wait_s=wait, step_s=1.0 - wait, loader_rate=1.0,
               model_rate=1.0)
    assert r.bound == bound


@pytest.mark.parametrize(("wait", "model", "words"), [
    (0.0, 100.0, "a faster loader would not speed your loop up."),  # tie: no wait at all
    (0.04, 100.0, "a faster loader would not speed your loop up."),  # 1.04x: inside the 5% band
    (0.06, 100.0, "at most 1.06x faster"),  # just past it
    (0.5, 300.0, "at most 2.00x faster"),
    (0.0, 90.0, "the machine was busy"),  # noise: the step alone slower than the whole loop
])
def test_the_speed_up_sentence_reads_ties_wins_and_noise(wait, model, words):
    r = Report(items=100, batches=2, device="cpu", period_s=1.0, wait_s=wait, step_s=1.0 - wait, loader_rate=150.0,
               model_rate=model)  # the loop at 100 images/s
    assert words in r.sentences()
    assert r.best_speedup >= 1.0


def pageable_loop():
    def loader():
        while True:
            yield torch.ones(4, 3, 8, 8)  # pageable, float32

    def step(x):
        return (x.to("cuda") * 2).sum().item()  # a blocking copy from pageable memory, then a sync
    return loader(), step


def clean_loop():
    def loader():
        while True:
            yield torch.ones(4, 3, 8, 8, dtype=torch.uint8).pin_memory()

    def step(x):
        (x.to("cuda", non_blocking=True).float() * 2).sum()  # no .item(): the host never waits
    return loader(), step


def test_under_the_simulator_pageable_copies_and_syncs_are_found():
    with simulated_cuda() as sim:
        before = torch.cuda.get_sync_debug_mode()
        r = diagnose(*pageable_loop(), batches=3, warmup=1, probe=2)
        assert torch.cuda.get_sync_debug_mode() == before  # restored
    keys = [f.key for f in r.findings]
    assert {"pageable", "sync", "float-on-the-wire"} <= set(keys), keys
    assert r.syncs_per_step >= 1 and r.item_calls_per_step == 1 and r.device == "cuda"
    assert r.copy_s is None and r.gpu_idle is None  # no profiler trace under the simulator: not stated
    assert sim.syncs  # the simulator's own counter saw them too
    assert_evidenced(r)


def test_under_the_simulator_a_loop_without_them_gets_neither():
    with simulated_cuda():
        r = diagnose(*clean_loop(), batches=3, warmup=1, probe=2)
    keys = [f.key for f in r.findings]
    assert "pageable" not in keys and "sync" not in keys and "float-on-the-wire" not in keys, keys
    assert r.syncs_per_step == 0 and [c.pinned for c in r.copies] == [True, True]
    assert_evidenced(r)


@pytest.mark.parametrize(("loader", "step", "kw", "words"), [
    ([], sleeper(0), {}, "yielded no batch"),
    (Sleepy(0), lambda b: 1 / 0, {}, "your step raised ZeroDivisionError on batch 0"),
    (Sleepy(0), sleeper(0), {"batches": 1}, "batches must be at least 2"),
    (iter(Sleepy(0, n=5)), sleeper(0), {"batches": 3}, "ran out after 5 batches"),
    ([1, 2, 3], sleeper(0), {}, "holds no tensor"),
])
def test_bad_input_gets_one_clear_line(loader, step, kw, words):
    with pytest.raises(DiagnoseError, match=words) as e:
        diagnose(loader, step, **kw)
    assert "\n" not in str(e.value)


def test_the_model_it_trains_is_put_back_when_kept():
    model = torch.nn.Linear(3 * 8 * 8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def step(batch):
        opt.zero_grad()
        model(batch[0].flatten(1)).sum().backward()
        opt.step()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and diagnose's own machinery warns nothing on a CPU
        diagnose(Sleepy(0), step, batches=2, warmup=1, probe=1, keep=(model, opt))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"] == {}


def test_the_report_draws_its_period_and_saves_as_json(tmp_path):
    import json

    import matplotlib
    matplotlib.use("Agg")
    r = diagnose(Sleepy(5), sleeper(5), batches=3, warmup=1, probe=1)
    fig, ax = r.plot()
    assert ax.get_xlabel() == "ms per batch" and len(ax.patches) >= 2
    d = json.loads(json.dumps(r.to_dict()))
    assert d["bound"] == r.bound and [f["key"] for f in d["findings"]] == [f.key for f in r.findings]


@pytest.mark.parametrize(("wait", "words"), [(0.0, "no faster"), (0.04, "no faster"), (0.15, "at most 1.18x faster"),
                                             (0.2, "at most 1.25x faster")])
def test_the_loader_is_not_the_bottleneck_reads_its_own_wait(wait, words):
    r = Report(items=8, batches=2, device="cpu", period_s=1.0, wait_s=wait, step_s=1.0 - wait, loader_rate=100.0,
               model_rate=8.0)
    (only,) = findings.find(r)
    assert only.key == "loader-fine" and words in only.text
