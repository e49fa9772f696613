"""``gpufeed.measure.diagnose``: a loop's period split, its bound on the device's clock, findings only where
measured, any batch, and one line for every failure.

Loaders and steps that sleep stand for work of known length; ``devicequeue.DeviceQueue`` stands for a
GPU's queue (a step that queues its work and returns); the CUDA simulator stands for a GPU's
ordering (it counts the syncs torch's sync debug mode reports and knows pinned memory from pageable).
"""

from __future__ import annotations

import random
import time
import warnings
from collections import OrderedDict, UserDict, namedtuple

import numpy as np
import pytest
import torch
from devicequeue import DeviceQueue, PerSample, Sleepy, when_quiet
from torch.utils.data import DataLoader

from gpufeed.measure import diagnose, findings, watch
from gpufeed.measure.batches import DiagnoseError
from gpufeed.measure.diagnosis import _device, _on_host
from gpufeed.measure.probe import Copy
from gpufeed.measure.report import Report
from gpufeed.simcuda import simulated_cuda


def sleeper(ms: float):
    return lambda batch: time.sleep(ms / 1e3)


def assert_evidenced(report):
    for f in report.findings:
        assert f.evidence and all(v is not None for v in f.evidence.values()), f
        assert set(f.lessons) <= set(findings.LESSONS)


@when_quiet
def test_a_slow_loader_is_data_bound_and_its_wait_is_most_of_the_period():
    r = diagnose(Sleepy(20), sleeper(5), batches=8, warmup=1, probe=1)
    assert r.bound == "data" and r.clock == "host" and not r.busy
    assert r.wait_fraction == pytest.approx(0.8, abs=0.1)
    assert r.items == 4 and r.loader_rate < r.model_rate
    assert 2 < r.best_speedup <= r.model_rate / r.rate + 1e-9  # the step alone runs at ~200 batches/s, the loop at ~40
    keys = [f.key for f in r.findings]  # a bare loader: nothing says which stage is slow, unless the
    assert keys and set(keys) <= {"loader-slow", "overlap"}, keys  # noise puts it well apart from the step
    assert_evidenced(r)
    text = str(r)
    assert "data bound" in text and "waiting for the next batch (the host, in next())" in text


@when_quiet
def test_a_slow_step_is_compute_bound_and_the_loader_is_not_the_bottleneck():
    r = diagnose(Sleepy(2), sleeper(40), batches=6, warmup=1, probe=1)  # the loader's 2 ms well under a fifth of the step, even on a busy machine
    assert r.bound == "compute"
    assert r.wait_fraction < 0.2
    assert [f.key for f in r.findings] == ["loader-fine"]
    assert_evidenced(r)


# --- item 1: the device's clock, and the what-ifs' cap -------------------------------------------

@pytest.fixture
def device_queue():
    q = DeviceQueue()
    yield q
    q.close()


@when_quiet
def test_a_step_that_queues_its_work_is_data_bound_within_the_what_ifs_cap(device_queue):
    """Issue 48's stand-in: the loader takes 50 ms on the host, the step queues 20 ms of device work and
    returns. The host waits in next() the whole period; the device idles 30 ms of the 50."""
    step = device_queue.step(0.020)
    host_only = diagnose(Sleepy(50), step, batches=6, warmup=1, probe=1)  # the host's clock, capped by the what-ifs
    assert host_only.wait_fraction > 0.9 and host_only.bound == "data"  # the host's view: all waiting
    assert host_only.removable_s / host_only.period_s == pytest.approx(0.6, abs=0.15)  # 30 ms of 50 the loader's
    assert host_only.best_speedup <= host_only.model_rate / host_only.rate + 1e-9
    assert host_only.best_speedup < 4  # (main read 627x for this loop; the cap is 2.5x)
    assert "of it, the most a faster loader could take" in host_only.table()
    on_device = diagnose(Sleepy(50), step, batches=6, warmup=1, probe=1, events=device_queue.event)
    assert on_device.clock == "device" and on_device.bound == "data"
    assert on_device.wait_fraction == pytest.approx(0.6, abs=0.15)  # 30 ms of 50 idle
    assert on_device.best_speedup <= on_device.model_rate / on_device.rate + 1e-9
    assert "the device idle meanwhile" in on_device.table() and "the device's clock" in on_device.sentences()


@when_quiet
def test_a_step_that_queues_more_than_the_loader_takes_is_compute_bound_though_the_host_waits(device_queue):
    """The loader takes 15 ms, the step queues 20 ms: the host spends most of the period in next() while
    the device works; the device never waits for data."""
    step = device_queue.step(0.020)
    host_only = diagnose(Sleepy(15), step, batches=6, warmup=1, probe=1)  # the host cannot tell: the cap says so
    assert host_only.wait_fraction > 0.5 and host_only.best_speedup < findings.WORTH
    assert [f.key for f in host_only.findings] == ["loader-fine"]  # no loader advice: a faster one gains nothing
    assert "only a device clock (events=) tells the two apart" in host_only.sentences()
    on_device = diagnose(Sleepy(15), step, batches=6, warmup=1, probe=1, events=device_queue.event)
    assert on_device.bound == "compute" and on_device.device_wait_s < 0.2 * on_device.period_s
    assert on_device.host_wait_s > on_device.device_wait_s  # the host's view beside it


@pytest.mark.parametrize(("host_wait", "model", "removable", "best"), [
    (0.8, 5.0, 0.8, 5.0),  # the step alone takes 0.2 s of the 1 s: all the wait is the loader's
    (0.8, 2.0, 0.5, 2.0),  # the step alone takes 0.5 s: at most 0.5 s of the wait can go
    (0.8, 1.0, 0.0, 1.0),  # the step alone takes the whole period: none can
    (0.8, 0.9, 0.0, 1.0),  # longer than the period (a busy machine): still none, never below 1
    (0.8, None, 0.8, 5.0),  # what-ifs not measured: the host's view, uncapped
])
def test_the_best_speed_up_never_passes_the_step_alone(host_wait, model, removable, best):
    r = Report(items=1, batches=5, device="cpu", period_s=1.0, host_wait_s=host_wait, model_rate=model,
               loader_rate=None if model is None else 1.0)
    assert r.wait_s == host_wait and r.bound == "data"  # the host's clock: the bound reads its wait
    assert r.removable_s == pytest.approx(removable) and r.best_speedup == pytest.approx(best)


def test_a_step_alone_measured_slower_than_the_whole_loop_is_said_and_still_caps():
    """A busy machine slowed the what-if (lesson 02 in quick mode read 899 ms alone against a 327 ms loop):
    the bound reads the host's wait, no gain is claimed past the what-ifs, and the sentence says they disagree."""
    loop, alone = [0.33, 0.32, 0.33, 0.34, 0.32], [0.9, 0.88, 0.91, 0.9, 0.89]
    r = Report(items=8, batches=5, device="cpu", period_s=0.33, host_wait_s=0.23, loader_rate=117.0,
               model_rate=8 / 0.9, loop_s=loop, model_s=alone, loader_s=[0.07] * 5)
    assert r.busy and r.bound == "data" and r.best_speedup == 1.0
    assert "the machine was busier for one of them, and the two disagree" in r.sentences()


# --- the loader side ------------------------------------------------------------------------------

def test_a_dataloader_without_workers_gets_the_workers_finding():
    loader = DataLoader(PerSample(), batch_size=8, num_workers=0)
    r = diagnose(loader, sleeper(1), batches=4, warmup=1, probe=1, fixes=0)  # not re-timed: stated as found
    keys = [f.key for f in r.findings]
    assert "workers" in keys and "per-sample" in keys and r.retimed == []
    assert r.loader_settings["num_workers"] == 0 and r.dataset_ms["sample"] >= 1.0
    assert_evidenced(r)


def test_no_finding_without_its_evidence():
    base = dict(items=8, batches=4, device="cpu", period_s=0.01, host_wait_s=0.008, loader_rate=2000.0,
                model_rate=4000.0, cores=2)
    bare = Report(**base)  # nothing but the timings: no settings, no copies, no syncs, no dataset
    assert [f.key for f in findings.find(bare)] == ["overlap"]  # rests on the three rates alone
    assert all(f.key not in ("pageable", "sync", "copy-in-line", "float-on-the-wire", "workers", "decode")
               for f in findings.find(Report(**base, syncs=None, copy_s=None, gpu_idle=None)))
    unmeasured = Report(**{**base, "loader_rate": None, "model_rate": None})  # in place: no what-ifs
    assert [f.key for f in findings.find(unmeasured)] == ["loader-slow"]
    assert findings.find(unmeasured)[0].evidence == {"wait_fraction": 0.8}
    with pytest.raises(ValueError, match="without measured evidence"):
        findings.Finding("sync", "text", {"syncs_per_step": None}, ("02",))
    with pytest.raises(ValueError, match="without measured evidence"):
        findings.Finding("sync", "text", {}, ("02",))


@pytest.mark.parametrize(("wait", "bound"), [(0.5, "data"), (0.49, "balanced"), (0.21, "balanced"), (0.2, "compute"),
                                             (0.0, "compute")])
def test_bound_at_each_threshold(wait, bound):
    r = Report(items=1, batches=2, device="cpu", period_s=1.0, host_wait_s=wait)
    assert r.bound == bound


@pytest.mark.parametrize(("wait", "loop", "model", "words"), [
    (0.0, [1.0] * 5, [1.0] * 5, "a faster loader would not speed your loop up."),  # tie: no wait at all
    (0.04, [1.0] * 5, [1.0] * 5, "a faster loader would not speed your loop up."),  # 1.04x: not worth naming
    (0.06, [1.0] * 5, [0.5] * 5, "at most 1.06x faster"),  # just past it
    (0.5, [1.0] * 5, [0.3] * 5, "at most 2.00x faster"),
    (0.0, [1.0, 1.01, 0.99, 1.0, 1.02], [1.2, 1.21, 1.19, 1.2, 1.22], "the machine was busier"),  # faster than the step
    (0.0, [1.0, 1.2, 0.8, 1.5, 0.7], [1.1, 0.9, 1.3, 0.8, 1.2], "a faster loader would not"),  # cannot tell: unsaid
])
def test_the_speed_up_sentence_reads_ties_wins_and_noise(wait, loop, model, words):
    r = Report(items=100, batches=5, device="cpu", period_s=1.0, host_wait_s=wait, loader_rate=150.0,
               model_rate=100 / (sum(model) / 5), loop_s=loop, model_s=model, loader_s=[0.66] * 5)
    assert words in r.sentences()
    assert r.best_speedup >= 1.0
    assert ("machine was busier" in r.sentences()) == (words == "the machine was busier")


def test_the_loader_and_the_step_alone_are_compared_by_the_verdict_method():
    r = Report(items=10, batches=5, device="cpu", period_s=1.0, host_wait_s=0.5, loader_rate=10.0, model_rate=20.0,
               loop_s=[1.0] * 5, loader_s=[1.0, 1.01, 0.99, 1.0, 1.02], model_s=[0.5, 0.51, 0.49, 0.5, 0.5])
    assert "the loader is 2.00x slower than the step (" in r.sentences()
    few = Report(items=10, batches=2, device="cpu", period_s=1.0, host_wait_s=0.5, loader_rate=10.0, model_rate=20.0,
                 loop_s=[1.0] * 2, loader_s=[1.0, 1.0], model_s=[0.5, 0.5])
    assert "not told apart from the step by this run (2 samples per arm)" in few.sentences()


# --- items 3 and 4 under the simulator: copies as copies, syncs named by kind --------------------

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
    assert r.syncs == {".item()": 1.0} and r.device == "cuda:0"  # the blocking copy is a copy, not a sync
    assert [c.non_blocking for c in r.copies] == [False, False]
    assert r.copy_s is None and r.gpu_idle is None  # no profiler trace under the simulator: not stated
    assert sim.syncs  # the simulator's own counter saw them too
    (sync,) = [f for f in r.findings if f.key == "sync"]
    assert "1 .item()" in sync.text and "read the loss every few steps" in sync.text
    assert "test_diagnose.py" in sync.text and ".item()" in next(iter(r.sync_sites))  # the line that made it
    assert_evidenced(r)


def test_under_the_simulator_a_loop_without_them_gets_neither():
    with simulated_cuda():
        r = diagnose(*clean_loop(), batches=3, warmup=1, probe=2)
    keys = [f.key for f in r.findings]
    assert "pageable" not in keys and "sync" not in keys and "float-on-the-wire" not in keys, keys
    assert "blocking-copy" not in keys
    assert r.syncs == {} and [c.pinned for c in r.copies] == [True, True]
    assert_evidenced(r)


def test_each_kind_of_sync_is_named_and_advised_for():
    def loader():
        while True:
            yield torch.ones(4, 3, 8, 8, dtype=torch.uint8).pin_memory()

    def step(x):
        y = x.to("cuda", non_blocking=True).float()
        y.sum().item()  # .item()
        y.cpu()  # a copy to the host
        torch.nonzero(y)  # an output whose size depends on the data
        torch.cuda.current_stream().synchronize()  # a wait outside any op
        x.to("cuda")  # a blocking copy from pinned memory: a copy, not a sync

    with simulated_cuda():
        r = diagnose(loader(), step, batches=2, warmup=1, probe=2)
    assert r.syncs == {".item()": 1.0, "copy to the host": 1.0, "nonzero()": 1.0, "outside an op": 1.0}
    text = next(f.text for f in r.findings if f.key == "sync")
    for advice in findings.ADVICE.values():
        assert advice.split(" ({ops})")[0] in text.replace("(nonzero())", "")
    assert "blocking-copy" in [f.key for f in r.findings]


def test_syncs_on_another_thread_are_not_the_loops():
    """Issue 47 item 7: a prefetcher's thread waits for events as its job; only the loop's thread counts."""
    import threading

    def loader():
        while True:
            x = torch.ones(4, device="cuda")
            t = threading.Thread(target=x.sum().item)  # a sync, on a thread of the loader's
            t.start()
            t.join()
            yield torch.ones(4, 3, 8, 8, dtype=torch.uint8).pin_memory()

    with simulated_cuda() as sim:
        r = diagnose(loader(), clean_loop()[1], batches=2, warmup=1, probe=2)
    assert sim.syncs and r.syncs == {} and "sync" not in [f.key for f in r.findings]


# --- item 6: any batch ---------------------------------------------------------------------------

Pair = namedtuple("Pair", "images labels")


def batches_of(kind: str):
    images, labels = torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)
    if kind == "namedtuple":
        return Pair(images, labels)
    if kind == "userdict":
        return UserDict(images=images, labels=labels)  # as Hugging Face's BatchEncoding
    if kind == "ordereddict":
        return OrderedDict(images=images, meta={"labels": [labels]})
    if kind == "nested":
        return {"inputs": (images, {"mask": torch.ones(4, 8)}), "labels": labels}
    from tensordict import TensorDict

    td = TensorDict({"images": images, "labels": labels}, batch_size=[4])
    if kind == "tensordict":
        return td
    from gpufeed.data.memmap import ImageData

    return ImageData(images=images.to(torch.uint8), targets=labels, batch_size=[4])


@pytest.mark.parametrize("kind", ["namedtuple", "userdict", "ordereddict", "nested", "tensordict", "tensorclass"])
def test_any_batch_a_practitioner_yields_is_walked_moved_and_kept(kind):
    pytest.importorskip("tensordict")
    seen = []

    def loader():
        while True:
            yield batches_of(kind)

    def step(batch):
        seen.append(batch)

    with simulated_cuda():
        r = diagnose(loader(), step, batches=2, warmup=1, probe=1, device="cuda")
    assert r.items == 4 and r.resident, r.resident_note
    kept = seen[-1]  # the what-if's batch: the same kind, moved to the device
    assert type(kept) is type(batches_of(kind))
    from gpufeed.data.movers import leaves

    assert leaves(kept) and all(t.device.type == "cuda" for t in leaves(kept))


def test_the_device_index_is_kept():
    copy = Copy("step", 4, "uint8", (4,), True, True, True, device="cuda:1")
    assert _device([copy], torch.zeros(2)) == "cuda:1"
    assert _device([], torch.zeros(2)) == "cpu"


# --- item 7: one line for every bad input and failure ---------------------------------------------

class Untouchable:
    """A loader that must not be started."""

    def __iter__(self):
        raise AssertionError("the loader was started")


def raising_loader(at: int, error: Exception):
    def loader():
        for i in range(100):
            if i == at:
                raise error
            yield torch.zeros(4, 3, 8, 8)
    return loader()


def oom(batch):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize(("loader", "step", "kw", "words"), [
    ([], sleeper(0), {}, "yielded no batch"),
    (Sleepy(0), lambda b: 1 / 0, {}, "your step raised ZeroDivisionError on batch 0: division by zero"),
    (Sleepy(0), sleeper(0), {"batches": 1}, "batches must be at least 2"),
    (iter(Sleepy(0, n=5)), sleeper(0), {"batches": 3}, "ran out after 5 batches"),
    ([1, 2, 3], sleeper(0), {}, "holds no tensor"),
    (Untouchable(), "not a function", {}, "step must be a function"),  # refused before the loader starts
    (Untouchable(), None, {}, "step must be a function"),
    (5, sleeper(0), {}, "the loader must be an iterable of batches"),
    (raising_loader(2, OSError("image file is truncated (3 bytes not processed)")), sleeper(0), {},
     "the loader raised OSError on batch 2: image file is truncated"),
    (raising_loader(0, RuntimeError("Caught OSError in DataLoader worker process 0.\nOriginal Traceback (most "
                                    "recent call last):\n  File x\nOSError: broken data stream")), sleeper(0), {},
     "the loader raised RuntimeError on batch 0: Caught OSError in DataLoader worker process 0.: OSError: broken"),
    (Sleepy(0), oom, {}, "your step ran out of memory on batch 0"),
    (Sleepy(0), sleeper(0), {"keep": [object()]}, "keep= takes objects with state_dict()"),
])
def test_bad_input_gets_one_clear_line(loader, step, kw, words):
    with pytest.raises(DiagnoseError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        diagnose(loader, step, **kw)
    assert "\n" not in str(e.value)
    if "raised" in words or "out of memory" in words:
        assert e.value.__cause__ is not None  # the original, chained


def test_out_of_memory_in_the_what_if_is_reported_and_a_refused_device_batch_is_said():
    def step(batch):
        if batch[0].device.type == "meta":
            raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(DiagnoseError, match="ran out of memory on a batch kept on meta"):
        diagnose(Sleepy(0), step, batches=2, warmup=1, probe=1, device="meta")

    def picky(batch):
        if batch[0].device.type == "meta":
            raise TypeError("wants a CPU batch")

    r = diagnose(Sleepy(0), picky, batches=2, warmup=1, probe=1, device="meta")
    assert not r.resident and r.resident_note == "TypeError: wants a CPU batch"
    assert "refused a batch kept on meta: TypeError: wants a CPU batch" in r.sentences()


# --- item 5: state honestly kept ------------------------------------------------------------------

def test_the_model_and_the_random_states_are_put_back_when_kept():
    model = torch.nn.Linear(3 * 8 * 8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def step(batch):
        opt.zero_grad()
        model(batch[0].flatten(1) + torch.rand(1)).sum().backward()  # draws from torch's generator
        opt.step()
        sched.step()
        random.random(), np.random.rand()

    torch.manual_seed(1), random.seed(1), np.random.seed(1)
    expected = torch.rand(3), random.random(), np.random.rand()
    torch.manual_seed(1), random.seed(1), np.random.seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and diagnose's own machinery warns nothing on a CPU
        diagnose(Sleepy(0), step, batches=2, warmup=1, probe=1, keep=(model, opt, sched))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"] == {} and sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 0.1
    got = torch.rand(3), random.random(), np.random.rand()
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_the_kept_state_lives_in_host_memory_with_its_metadata():
    with simulated_cuda():
        model = torch.nn.BatchNorm1d(3).to("cuda")
        state = model.state_dict()
        saved = _on_host(state)
    assert all(t.device.type == "cpu" for t in saved.values())
    assert type(saved) is type(state) and saved._metadata == state._metadata


# --- the report -----------------------------------------------------------------------------------

def test_the_report_draws_its_period_and_saves_as_json(tmp_path):
    import json

    import matplotlib
    matplotlib.use("Agg")
    r = diagnose(Sleepy(5), sleeper(5), batches=3, warmup=1, probe=1)
    fig, ax = r.plot()
    assert ax.get_xlabel() == "ms per batch" and len(ax.patches) >= 2
    d = json.loads(json.dumps(r.to_dict()))
    assert d["bound"] == r.bound and [f["key"] for f in d["findings"]] == [f.key for f in r.findings]
    assert d["clock"] == "host" and d["best_speedup"] == r.best_speedup and d["removable_s"] == r.removable_s


@pytest.mark.parametrize(("wait", "words"), [(0.0, "no faster"), (0.04, "no faster"), (0.15, "at most 1.18x faster"),
                                             (0.2, "at most 1.25x faster")])
def test_the_loader_is_not_the_bottleneck_reads_its_own_wait(wait, words):
    r = Report(items=8, batches=2, device="cpu", period_s=1.0, host_wait_s=wait, loader_rate=100.0, model_rate=80.0)
    (only,) = findings.find(r)
    assert only.key == "loader-fine" and words in only.text


# --- the command line: one line, never a traceback ------------------------------------------------

@pytest.mark.parametrize("workers", [0, 1])
def test_the_command_line_says_a_truncated_image_in_one_line(tmp_path, capsys, workers):
    from gpufeed.cli import main
    from gpufeed.measure.synth import synth_folder

    folder = synth_folder(tmp_path / "jpegs", n=8, size=(48, 40), classes=2, progress=False).path
    for f in folder.rglob("*.jpg"):
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])  # every file cut in half
    argv = ["diagnose", "--folder", str(folder), "--batch-size", "4", "--crop", "32", "--batches", "2",
            "--workers", str(workers)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: diagnose: the loader raised OSError on batch 0:") and "truncated" in err, err
    assert "\n" not in err and "Traceback" not in captured.out + captured.err


def test_the_command_line_says_what_it_retimed(tmp_path, capsys):
    from gpufeed.cli import main
    from gpufeed.measure.synth import synth_folder

    folder = synth_folder(tmp_path / "jpegs", n=12, size=(48, 40), classes=2, progress=False).path
    assert main(["diagnose", "--folder", str(folder), "--batch-size", "4", "--crop", "32", "--batches", "2",
                 "--fixes", "0"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("Nothing re-timed: --fixes 0.")


# --- on a real GPU (make test-gpu): the device's clock is CUDA's events ------------------------------

def gpu_step(ms: float):
    """A step that queues about ``ms`` of GPU work (a spin kernel) after a copy, and returns at once."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(int(1e7))
    end.record()
    end.synchronize()
    cycles = int(1e7 * ms / start.elapsed_time(end))  # this GPU's spin cycles per ms, measured

    def step(batch):
        batch[0].to("cuda", non_blocking=True)
        torch.cuda._sleep(cycles)
    return step


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("loader_ms", "gpu_ms", "bound"), [(50, 20, "data"), (15, 40, "compute")])
def test_on_a_gpu_the_device_clock_tells_a_queued_step_from_waiting_for_data(loader_ms, gpu_ms, bound):
    r = diagnose(Sleepy(loader_ms), gpu_step(gpu_ms), batches=6, warmup=2, probe=2)
    assert r.clock == "device" and r.bound == bound, r
    assert r.host_wait_s >= r.wait_s  # the host waits in next() at least as long as the device idles
    assert r.best_speedup <= max(1.0, r.model_rate / r.rate) + 1e-9
    assert r.gpu_idle is not None and r.compute_s > 0 and r.syncs == {}  # the profiled steps, apart
    assert r.copies and r.device.startswith("cuda")
    with watch(Sleepy(loader_ms, n=10)) as feed:
        step = gpu_step(gpu_ms)
        for batch in feed:
            step(batch)
    assert feed.report().bound == bound and feed.report().clock == "device"
