"""``gpufeed.measure.watch``: the in-place mode on an unmodified loop, its what-ifs as a second step, and DDP
(each rank reports; rank 0 names the rank that waits longest), two gloo ranks on the CPU."""

from __future__ import annotations

import time

import pytest
import torch
from devicequeue import DeviceQueue, Sleepy, when_quiet

import gpufeed.measure
from gpufeed.measure.batches import DiagnoseError
from gpufeed.measure.inplace import IN_PLACE, watch
from gpufeed.simcuda import simulated_cuda


@when_quiet
def test_an_unmodified_loop_is_measured_as_it_runs():
    loader, steps = Sleepy(20, n=8), []
    with gpufeed.measure.watch(loader) as feed:
        for images, _labels in feed:  # the loop as written, over feed instead of loader
            time.sleep(0.005)
            steps.append(images.shape[0])
    assert steps == [4] * 8  # every batch reached the loop, once
    r = feed.report()
    assert r.batches == 7 and r.items == 4 and r.loader_rate is None  # the first skipped; what-ifs not measured
    assert r.bound == "data" and r.wait_fraction == pytest.approx(0.8, abs=0.1)
    assert "The what-ifs were not measured" in r.sentences() and r.start_s is not None
    assert [f.key for f in r.findings] == ["loader-slow"]


def test_a_loop_left_with_break_counts_the_batches_it_finished():
    with watch(Sleepy(1, n=50), skip=0) as feed:
        for i, _ in enumerate(feed):
            if i == 5:
                break
    assert feed.report().batches == 5  # the sixth was taken, its step's end never marked


def test_epochs_in_one_block_are_one_window():
    with watch(Sleepy(1, n=4), skip=1) as feed:
        for _ in range(2):
            for _ in feed:
                pass
    assert feed.report().batches == 7 and len(feed.starts) == 2


@when_quiet
def test_the_what_ifs_are_an_explicit_second_step():
    loader = Sleepy(2, n=30)
    step = lambda batch: time.sleep(0.040)  # noqa: E731  (the loader's 2 ms stays under a fifth of it on a busy machine)
    with watch(loader) as feed:
        for batch in feed:
            step(batch)
    r = feed.what_ifs(step, batches=5, probe=1)
    assert r.batches == 29 and r.loader_rate > r.model_rate and r.bound == "compute"
    assert r.clock == "host" and [f.key for f in r.findings] == ["loader-fine"]


@when_quiet
def test_in_place_the_device_clock_sees_what_the_host_cannot():
    q = DeviceQueue()
    try:
        with watch(Sleepy(15, n=12), events=q.event) as feed:
            step = q.step(0.020)
            for batch in feed:
                step(batch)
        r = feed.report()
    finally:
        q.close()
    assert r.host_wait_s / r.period_s > 0.5 and r.bound == "compute" and r.clock == "device"


def test_in_place_syncs_are_counted_with_their_line():
    def loader():
        for _ in range(5):
            yield torch.ones(4, 3, 8, 8, dtype=torch.uint8).pin_memory()

    with simulated_cuda():
        with watch(loader()) as feed:
            for x in feed:
                (x.to("cuda", non_blocking=True).float() * 2).sum().item()
        r = feed.report()
    assert r.syncs == {IN_PLACE: 1.0}
    ((site, per),) = r.sync_sites.items()
    assert site.startswith("test_inplace.py:") and ".item()" in site and per == 1.0
    assert "sync" in [f.key for f in r.findings]


def test_misuse_is_one_line():
    with pytest.raises(DiagnoseError, match="inside its block"):
        iter(watch(Sleepy(0)))
    with watch(Sleepy(0, n=1)) as feed:
        for _ in feed:
            pass
    with pytest.raises(DiagnoseError, match="1 batches seen, 1 of them skipped: nothing to report"):
        feed.report()
    with pytest.raises(DiagnoseError, match="skip is 0 or more"):
        watch(Sleepy(0), skip=-1)


# --- DDP: two gloo ranks on the CPU ---------------------------------------------------------------

def _rank(rank: int, world: int, init: str, out) -> None:
    import torch.distributed as dist

    from gpufeed.measure import watch as watch_

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3 * 8 * 8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with watch_(Sleepy(5 + 30 * rank, n=8)) as feed:  # rank 1's loader is the slow one
            for images, labels in feed:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(images.flatten(1)), labels).backward()  # all-reduce
                opt.step()
        r = feed.report()  # on every rank: it gathers them
        out.put((rank, r.ranks, r.sentences(), r.wait_fraction))
    finally:
        dist.destroy_process_group()


def test_under_ddp_each_rank_reports_and_rank_0_names_the_slowest(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["gpufeed.measure.inplace"])
    out = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [ctx.Process(target=_rank, args=(r, 2, init, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = {r: (ranks, text, wait) for r, ranks, text, wait in (out.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(60)
    assert sorted(got) == [0, 1] and all(p.exitcode == 0 for p in procs)
    ranks, text, _ = got[0]
    assert [r["rank"] for r in ranks] == [0, 1] and got[1][0] == []  # rank 0 holds every rank's numbers
    assert "rank 1 waits longest for its batches" in text
    assert got[1][2] > got[0][2]  # rank 1 waits in next(); rank 0 waits for it inside the all-reduce


def test_the_readme_example_runs_as_written():
    """README.md's "Is your GPU waiting?" blocks, in one scope with a loader, a model and a step of ours."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Is your GPU waiting? Diagnose your own loop")[1].split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    model = torch.nn.Linear(3 * 8 * 8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(images, targets):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images.flatten(1)), targets).backward()
        optimizer.step()

    before = {k: v.clone() for k, v in model.state_dict().items()}
    scope = {"train_loader": Sleepy(1, n=6), "train_step": train_step, "model": model, "optimizer": optimizer}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), scope)
    assert scope["report"].loader_rate is not None and scope["feed"].report().batches == 5
    assert not all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the loop trained it


def test_an_error_in_the_loop_is_not_masked_by_the_watch():
    with pytest.raises(ZeroDivisionError), watch(Sleepy(0, n=5)) as feed:
        for _ in feed:
            raise ZeroDivisionError("the step failed")
    with pytest.raises(DiagnoseError, match="nothing to report"):
        feed.report()
