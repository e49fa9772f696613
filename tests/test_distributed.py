"""Shards (gpufeed.course.lesson12.shards), the torchrun script (gpufeed.course.lesson12.distributed), its launcher (gpufeed.course.lesson12.launch),
the tensordict-free memmap reader (gpufeed.data.arrays) and the page-cache probes (gpufeed.course.lesson12.pagecache)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from gpufeed.course.lesson12 import distributed, launch, pagecache
from gpufeed.course.lesson12.shards import KINDS, check_shards, digest, make_loader, shard
from gpufeed.data.arrays import open_arrays
from gpufeed.data.folder import drop_cached
from gpufeed.data.memmap import MemmapError, build_memmap, load_memmap
from gpufeed.data.orders import permutation
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    """A tiny memmap dataset: 21 images (odd, so shards are uneven), 32x24, 3 classes."""
    root = tmp_path_factory.mktemp("dist")
    src = synth_folder(root / "jpeg", n=21, size=(40, 30), classes=3, progress=False).path
    return build_memmap(src, root / "mm", size=(32, 24), progress=False).path


# --- shards -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("n", [12, 13, 14])
def test_shards_are_disjoint_and_cover_the_epoch(kind, world, n):
    for epoch in range(3):
        shards = [shard(n, r, world, epoch, kind=kind, seed=5, batch_size=4) for r in range(world)]
        got = check_shards(shards, n)
        sizes = [len(s) for s in shards]
        if kind == "fast":  # contiguous parts of one order: never a repeat, sizes differ by one at most
            assert got["disjoint"] and got["complete"] and max(sizes) - min(sizes) <= 1
        else:  # DistributedSampler pads with repeats to equal sizes: covering, but not disjoint when uneven
            assert got["complete"] and len(set(sizes)) == 1
            assert got["duplicates"] == (-n) % world and got["disjoint"] == (n % world == 0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("n", [13, 14])
def test_drop_last_gives_equal_disjoint_shards_of_full_batches(kind, world, n):
    bs = 2
    loaders = [make_loader((torch.arange(n),), bs, kind, rank=r, world_size=world, seed=1, drop_last=True)
               for r in range(world)]
    batches = [[b[0] for b in loader] for loader in loaders]
    assert len({len(b) for b in batches}) == 1 and len(loaders[0]) == len(batches[0])  # DDP: the same steps
    assert all(len(b) == bs for rank in batches for b in rank)
    got = check_shards([torch.cat(b) if b else [] for b in batches], n)
    assert got["disjoint"]
    assert got["read"] == world * ((n // world) // bs * bs)  # equal shards of n // world, cut to full batches


def test_without_drop_last_the_fast_loader_can_give_ranks_different_step_counts():
    # 5 samples, 2 ranks, batch 2: rank 0 reads 3 (two batches), rank 1 reads 2 (one batch)
    lens = [len(make_loader((torch.arange(5),), 2, "fast", rank=r, world_size=2)) for r in range(2)]
    assert lens == [2, 1]  # DDP would wait forever for rank 1's second step: train with drop_last
    assert [len(make_loader((torch.arange(5),), 2, "sampler", rank=r, world_size=2)) for r in range(2)] == [2, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_reshuffled_each_epoch_with_the_shared_seed_and_the_same_on_every_rank(kind):
    n, world, seed = 50, 3, 7
    views = {}
    for epoch in range(3):
        shards = [shard(n, r, world, epoch, kind=kind, seed=seed) for r in range(world)]
        # a second, independent "process" computes the same shards: no communication needed
        assert all(torch.equal(s, shard(n, r, world, epoch, kind=kind, seed=seed)) for r, s in enumerate(shards))
        if kind == "fast":  # contiguous parts of the order every rank computes from (seed, epoch)
            assert torch.equal(torch.cat(shards), permutation(n, seed, epoch))
        else:  # DistributedSampler: randperm seeded with seed + epoch, padded, dealt out rank by rank
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
            order += order[: (-n) % world]
            assert [s.tolist() for s in shards] == [order[r::world] for r in range(world)]
        views[epoch] = shards
    assert not torch.equal(views[0][0], views[1][0]) and not torch.equal(views[1][0], views[2][0])
    assert not torch.equal(shard(n, 0, world, 0, kind=kind, seed=seed + 1), views[0][0])


def test_a_loader_moves_on_one_epoch_per_iteration_and_set_epoch_goes_back():
    for kind in KINDS:
        loader = make_loader((torch.arange(20),), 4, kind, rank=1, world_size=2, seed=3)
        first, second = (torch.cat([b[0] for b in loader]) for _ in range(2))
        assert torch.equal(first, shard(20, 1, 2, 0, kind=kind, seed=3))
        assert torch.equal(second, shard(20, 1, 2, 1, kind=kind, seed=3)) and not torch.equal(first, second)
        loader.set_epoch(0)
        assert torch.equal(torch.cat([b[0] for b in loader]), first)


@pytest.mark.parametrize("kind", KINDS)
def test_batches_from_the_memmap_are_the_naive_rows(mm, kind):
    data = load_memmap(mm)
    images, targets, manifest = open_arrays(mm)
    assert torch.equal(images, data.images.as_subclass(torch.Tensor)) and torch.equal(targets, data.targets)
    assert manifest["count"] == 21
    n = len(targets)
    loader = make_loader((images, targets, torch.arange(n)), 4, kind, rank=1, world_size=2, seed=0)
    for xb, yb, idx in loader:
        assert torch.equal(xb, torch.stack([data.images[i] for i in idx.tolist()]))
        assert yb.tolist() == [int(data.targets[i]) for i in idx.tolist()]


def test_check_shards_and_digest():
    assert check_shards([[0, 1], [2, 3]], 4) == {"n": 4, "read": 4, "covered": 4, "duplicates": 0,
                                                  "disjoint": True, "complete": True}
    got = check_shards([[0, 1], [1]], 4)
    assert got["duplicates"] == 1 and not got["disjoint"] and got["covered"] == 2 and not got["complete"]
    assert digest([1, 2]) == digest(torch.tensor([1, 2])) != digest([2, 1])
    with pytest.raises(ValueError, match="--loader"):
        make_loader((torch.arange(3),), 1, "random")


def test_open_arrays_on_a_missing_folder_says_how_to_build_it(tmp_path):
    with pytest.raises(MemmapError, match="python -m gpufeed data memmap"):
        open_arrays(tmp_path / "nothing")


# --- page cache ---------------------------------------------------------------------------------

def test_touch_and_resident(mm):
    files = pagecache.memmap_files(mm)
    assert [f.name for f in files] == ["images.memmap", "targets.memmap"]
    got = pagecache.touch(files)
    assert got["pages"] == sum(-(-f.stat().st_size // pagecache.mmap.PAGESIZE) for f in files)
    assert got["seconds"] >= 0 and got["major"] >= 0 and got["minor"] >= 0
    cached = pagecache.resident(files)
    if cached is not None:  # Linux: just read, so all in RAM
        assert cached[0] == cached[1] == got["pages"]
        if drop_cached(files):
            assert pagecache.resident(files)[0] <= cached[1]  # some file systems keep them: no exact claim


def test_pagecache_script_prints_json_and_rejects_a_missing_path(mm, tmp_path):
    r = subprocess.run([sys.executable, "-m", "gpufeed.course.lesson12.pagecache", str(mm)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["pages"] >= 1 and (doc["resident_before"] is None or 0 <= doc["resident_before"] <= 1)
    assert pagecache.main([]) == 2
    assert pagecache.main([str(tmp_path / "missing")]) == 2


# --- the script and its launcher ------------------------------------------------------------------

def test_torchrun_command_is_local_and_checks_nproc():
    cmd = launch.torchrun_command(3, ["--data", "D"], port=1234)
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--master-addr") + 1] == "127.0.0.1" and cmd[cmd.index("--nproc-per-node") + 1] == "3"
    assert cmd[-4:] == ["-m", "gpufeed.course.lesson12.distributed", "--data", "D"]
    with pytest.raises(ValueError, match="nproc"):
        launch.torchrun_command(0, [])


def test_choose_backend():
    assert launch.loopback_ifname() in ("lo", "lo0", None)
    assert distributed.choose_backend("gloo", 4) == ("gloo", "cpu")
    if not torch.cuda.is_available():
        assert distributed.choose_backend("auto", 2) == ("gloo", "cpu")
        with pytest.raises(ValueError, match="--backend gloo"):
            distributed.choose_backend("nccl", 1)


def test_two_ranks_on_one_gpu_are_refused_before_nccl_is_started(monkeypatch):
    """On a one-GPU node, two nccl ranks would share the GPU and nccl fails ("Duplicate GPU detected");
    the script refuses before any process group starts, and names the count to pass."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert distributed.choose_backend("auto", 1) == ("nccl", "cuda")
    assert distributed.choose_backend("gloo", 2) == ("gloo", "cpu")  # what lesson 12's 1 -> 2 processes use
    for requested in ("auto", "nccl"):
        with pytest.raises(ValueError, match="2 processes on this machine but 1 GPU.*--nproc-per-node 1"):
            distributed.choose_backend(requested, 2)


def test_script_says_in_one_line_that_the_data_is_missing(tmp_path, capsys):
    assert distributed.main(["--data", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "nope") in err and "python -m gpufeed data memmap" in err


def test_script_alone_trains_with_the_sampler_and_writes_json(mm, tmp_path, capsys):
    """One process without torchrun (rank 0 of 1, gloo on loopback): DistributedSampler + training,
    in this process, which it leaves as it found it."""
    out = tmp_path / "alone.json"
    env, threads = dict(os.environ), torch.get_num_threads()
    args = ["--data", str(mm), "--loader", "sampler", "--batch-size", "4", "--epochs", "2", "--load-epochs", "3",
            "--train"]
    ms, doc = launch.run_here(args, out, threads=1)
    assert dict(os.environ) == env and torch.get_num_threads() == threads
    assert not torch.distributed.is_initialized()
    assert doc == json.loads(out.read_text()) and doc["distributed"]["threads"] == 1
    assert doc["distributed"]["world_size"] == 1 and doc["distributed"]["backend"] == "gloo"
    assert {m["name"] for m in doc["measurements"]} >= {"load, rank 0", "train, rank 0", "train, 1 process"}
    assert all(m["items_per_s"] > 0 for m in doc["measurements"])
    assert all(e["complete"] and e["disjoint"] for e in doc["shards"]["load"]) and len(doc["shards"]["load"]) == 4
    assert [e["read"] for e in doc["shards"]["train"]] == [20] * 3  # drop_last: 5 full batches of 4
    assert "shards: disjoint in every epoch" in capsys.readouterr().out
    assert distributed.main([*args, "--batch-size", "64"]) == 2  # no full batch: one line
    assert "lower --batch-size" in capsys.readouterr().err and not torch.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="exit 2"):
        launch.run_here(["--data", str(tmp_path / "nope")], out)


def test_two_gloo_processes_under_torchrun_read_disjoint_covering_shards(mm, tmp_path):
    ms, doc = launch.launch(2, ["--data", mm, "--batch-size", "4", "--load-epochs", "2", "--seed", "3"],
                            tmp_path / "two.json", timeout=180, verbose=False)
    d, n = doc["distributed"], doc["n"]
    assert d["world_size"] == 2 and d["backend"] == "gloo" and d["loader"] == "fast" and n == 21
    ranks = sorted(doc["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["pid"] != ranks[1]["pid"]
    epochs = ranks[0]["phases"]["load"]["epochs"]
    assert len(epochs) == 3  # one warm-up + two timed
    for e in range(3):
        got = [torch.tensor(r["phases"]["load"]["epochs"][e]["indices"]) for r in ranks]
        assert check_shards(got, n)["disjoint"] and check_shards(got, n)["complete"]  # checked here, not trusted
        for r, idx in enumerate(got):  # each rank read exactly what the shared seed says it should
            assert torch.equal(idx, shard(n, r, 2, e, kind="fast", seed=3, batch_size=4))
            assert ranks[r]["phases"]["load"]["epochs"][e]["digest"] == digest(idx)
        assert doc["shards"]["load"][e]["disjoint"] and doc["shards"]["load"][e]["complete"]
    assert epochs[0]["indices"] != epochs[1]["indices"]  # reshuffled
    by = {m.name: m for m in ms}
    assert by["load, rank 0"].items == 11 and by["load, rank 1"].items == 10
    assert by["load, 2 processes"].items == 21 and all(m.items_per_s > 0 for m in ms)


def test_plot_shards_draws_what_each_rank_reads():
    """Lesson 12's plot and the deck's come from one function, drawn from shard() itself."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpufeed.course.lesson12.shards import plot_shards, shard

    fig, axes = plot_shards(10, 3, 2)
    assert [ax.get_title() for ax in axes] == ["FastLoader", "DistributedSampler"]
    for ax, kind in zip(axes, ("fast", "sampler")):
        cells = sorted((int(p.get_y()), int(p.get_x())) for p in ax.patches)
        want = sorted((e, i) for e in range(2) for r in range(3) for i in shard(10, r, 3, e, kind=kind).tolist())
        assert cells == want  # the sampler pads: a sample twice, so two cells on top of each other
    dots = axes[1].get_lines()[0].get_xdata()  # epoch 0's samples read twice
    assert len(dots) == 2 and len(axes[0].get_lines()[0].get_xdata()) == 0
    plt.close(fig)
    fig, (ax,) = plot_shards(8, 2, 1, kinds=("fast",), batch_size=2)
    assert sorted(t.get_text() for t in ax.texts) == ["b0"] * 4 + ["b1"] * 4
    plt.close(fig)


# --- lesson 12: batch per rank, padding, uneven inputs --------------------------------------------

def test_batch_per_rank_gives_every_rank_a_full_batch():
    for world in range(1, 9):  # the notebook's quick mode: 256 images, batch 128 wanted, 1 to 8 GPUs
        b = distributed.batch_per_rank(256, world, 128)
        assert 1 <= b <= 128 and 256 // world >= b
        steps = [len(make_loader((torch.arange(256),), b, "fast", rank=r, world_size=world, drop_last=True))
                 for r in range(world)]
        assert min(steps) >= 1 and len(set(steps)) == 1
    assert distributed.batch_per_rank(256, 2, 128) == 128  # unchanged where it already worked
    with pytest.raises(ValueError, match="3 samples over 4 ranks"):
        distributed.batch_per_rank(3, 4, 128)


def test_distributed_sampler_pads_imagenet_over_8_ranks_with_one_sample():
    from torch.utils.data import DistributedSampler

    n = 1_281_167  # ImageNet-1k's training set, as lesson 12 computes it
    sampler = DistributedSampler(range(n), num_replicas=8, rank=0, shuffle=False)
    assert len(sampler) * 8 - n == (-n) % 8 == 1
    assert check_shards([shard(13, r, 8, kind="sampler") for r in range(8)], 13)["duplicates"] == (-13) % 8


def test_uneven_inputs_fail_without_join_and_stay_equal_with_it():
    runs = distributed.uneven_inputs((1, 2), joins=(False, True), timeout=2)
    assert list(runs) == [False, True]  # in the order asked, though the run with Join went first
    without, joined = runs[False], runs[True]
    assert without[0]["error"] is None and without[0]["steps"] == 1
    assert without[1]["error"] is not None and without[1]["steps"] == 1  # stuck in its second all-reduce
    assert "\n" not in without[1]["error"] and ".cc:" not in without[1]["error"]  # one line, no build path
    assert [r["steps"] for r in joined] == [1, 2] and all(r["error"] is None for r in joined)
    assert joined[0]["weight"] == joined[1]["weight"]  # the copies of the model stayed equal


CRASH_ONCE = '''
import os, sys
from pathlib import Path
from gpufeed.measure.harness import Measurement, save
out = Path(sys.argv[sys.argv.index("--out") + 1])
marker = out.with_suffix(".crashed")
if os.environ["RANK"] == "1" and (not marker.exists() or "--always" in sys.argv):
    marker.touch()
    print("about to abort, as gloo does on a lost connection", file=sys.stderr, flush=True)
    os.abort()
if os.environ["RANK"] == "0":  # a machine record of its own: save() would import torch (3 s) to describe this one
    save(out, [Measurement("ok", [1.0], 1, machine={"cpu": "a rank of the test"})])
    print("rank 0 wrote", out)
'''


def test_launch_runs_again_after_a_crashed_rank_and_shows_its_stderr(tmp_path, capsys):
    (tmp_path / "crash_once.py").write_text(CRASH_ONCE)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    ms, doc = launch.launch(2, [], tmp_path / "a.json", env=env, module="crash_once", timeout=120)
    assert [m.name for m in ms] == ["ok"]
    printed = capsys.readouterr()
    assert "rank 1 killed by SIGABRT" in printed.err and "about to abort" in printed.err  # the retry was shown
    assert "attempt 2 of 2" in printed.err and "rank 0 wrote" in printed.out
    with pytest.raises(RuntimeError, match="(?s)rank 1 killed by SIGABRT.*rank 1's stderr.*about to abort"):
        launch.launch(2, ["--always"], tmp_path / "b.json", env=env, module="crash_once", timeout=120,
                      retries=0, verbose=False)


def test_launch_does_not_retry_bad_input_and_shows_the_one_line_error(tmp_path, capsys):
    # one process: the exit status and the error are the same with two, each importing torch (3 s)
    with pytest.raises(RuntimeError, match="(?s)failed.*rank 0's stderr.*gpufeed.course.lesson12.distributed: .*nope"):
        launch.launch(1, ["--data", str(tmp_path / "nope")], tmp_path / "c.json", timeout=120, verbose=False)
    assert "running it again" not in capsys.readouterr().err


def test_a_collective_error_is_one_line_without_its_source_location():
    from gpufeed.course.lesson12.distributed import one_line

    gloo = RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                        "waiting 3000ms for recv operation to complete\nException raised from ...")
    assert one_line(gloo) == "RuntimeError: Timed out waiting 3000ms for recv operation to complete"
    assert one_line(RuntimeError("")) == "RuntimeError: "
    cut = one_line(ValueError("word " * 60), limit=30)
    assert cut == "ValueError: word word word word word word ..."  # cut between words, never inside one
    assert one_line(ValueError("plain message")) == "ValueError: plain message"


def test_loading_is_timed_over_several_epochs_per_sample():
    from gpufeed.course.lesson12.distributed import time_epochs

    class Loader:  # 4 samples an epoch, the epoch told before each pass
        def __init__(self):
            self.epochs = []

        def set_epoch(self, e):
            self.epochs.append(e)

        def __iter__(self):
            yield torch.zeros(4, 3), torch.zeros(4), torch.arange(4)

    loader = Loader()
    m, records = time_epochs("load", loader, None, torch.device("cpu"), warmup=1, epochs=2, barrier=lambda: None,
                             passes=3)
    assert len(m.samples) == 2 and m.items == 12  # each timed sample: 3 epochs of 4 images
    assert len(records) == 9 and loader.epochs == list(range(9))  # every epoch its own shuffle
    with pytest.raises(SystemExit):
        distributed.parse_args(["--data", "DIR", "--load-passes", "0"])
    assert distributed.parse_args(["--data", "DIR"]).load_passes == 1  # one epoch a sample unless asked


def test_each_reader_is_charged_the_whole_file_in_rss_and_its_share_in_pss(mm):
    files = pagecache.memmap_files(mm)
    pages = sum(-(-f.stat().st_size // pagecache.mmap.PAGESIZE) for f in files) * pagecache.mmap.PAGESIZE
    readers = pagecache.shared_readers(files, 3)
    assert len({r["pid"] for r in readers}) == 3 and all(r["pages"] * pagecache.mmap.PAGESIZE == pages for r in readers)
    if readers[0]["rss"] is None:
        pytest.skip("this OS has no /proc/<pid>/smaps")
    assert all(r["rss"] == pages for r in readers)  # RSS: every page each one maps
    assert sum(r["pss"] for r in readers) == pytest.approx(pages, abs=3 * pagecache.mmap.PAGESIZE)  # PSS: split 3 ways
    assert pagecache.mapping_memory(os.getpid(), files) == (0, 0)  # not mapped here


def test_cold_then_warm_reads_in_new_processes_each_round(mm):
    got = pagecache.cold_then_warm(mm, rounds=2)
    assert len(got["first"]) == len(got["second"]) == 2 and isinstance(got["dropped"], bool)
    assert len({r["pid"] for r in got["first"] + got["second"]}) == 4
    assert all(r["resident_before"] is None or r["resident_before"] == pytest.approx(1.0) for r in got["second"])
