"""Ranks forked from one warm process (gpufeed.course.lesson12.forked): the script runs in them as
under torchrun, each rank with its own shard, and a failure surfaces with the rank's own words."""

import pytest
import torch

from gpufeed.course.lesson12 import forked
from gpufeed.course.lesson12.shards import make_loader
from gpufeed.data.memmap import build_memmap
from gpufeed.measure.synth import synth_folder

# one worker for this file: its fork server (torch imported once, seconds) serves both tests
pytestmark = pytest.mark.xdist_group("lesson12-forked")


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    """A tiny memmap dataset: 21 images (odd, so the shards are uneven), 32x24, 3 classes."""
    root = tmp_path_factory.mktemp("forked")
    src = synth_folder(root / "jpeg", n=21, size=(40, 30), classes=3, progress=False).path
    return build_memmap(src, root / "mm", size=(32, 24), progress=False).path


def test_each_forked_rank_reads_the_shard_torchrun_would_give_it(mm, tmp_path):
    args = ["--data", mm, "--batch-size", "4", "--load-epochs", "2", "--warmup", "0", "--seed", "3", "--train"]
    ms, doc = forked.run(2, args, tmp_path / "run.json", threads=1, verbose=False, timeout=120)
    assert doc["distributed"]["world_size"] == 2 and doc["distributed"]["ddp"] and doc["distributed"]["threads"] == 1
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1] and len({r["pid"] for r in doc["ranks"]}) == 2
    assert all(e["disjoint"] and e["complete"] for e in doc["shards"]["load"])  # the all-reduce of read counts
    tensors = (torch.zeros(21), torch.zeros(21), torch.arange(21))
    for r in doc["ranks"]:  # each rank's indices, epoch by epoch, as its own loader draws them in this process
        loader = make_loader(tensors, 4, "fast", rank=r["rank"], world_size=2, seed=3)
        for e in r["phases"]["load"]["epochs"]:
            loader.set_epoch(e["epoch"])
            assert e["indices"] == torch.cat([b[2] for b in loader]).tolist()
    assert {m.name for m in ms} >= {"load, rank 0", "load, rank 1", "load, 2 processes", "train, 2 processes"}


def test_a_failed_rank_raises_with_its_own_message(tmp_path):
    with pytest.raises(RuntimeError, match=r"(?s)rank 0 exit 2.*gpufeed.course.lesson12.distributed: .*nope"):
        forked.run(2, ["--data", tmp_path / "nope"], tmp_path / "out.json", timeout=120)


def test_arms_run_in_turns_and_each_round_gives_one_sample(monkeypatch, tmp_path):
    from gpufeed.measure.harness import Measurement

    calls = []

    def run(nproc, args, out, *, threads, verbose):  # a stand-in for the forked run: its medians are known
        calls.append((nproc, threads))
        k = len(calls)
        ms = [Measurement(f"load, rank {r}", [k, k + 2, k + 1], 10, params={"phase": "load", "rank": r})
              for r in range(nproc)]
        ms.append(Measurement(f"load, {nproc} process{'es' if nproc > 1 else ''}", [k, k + 1, k + 5], 10 * nproc,
                              params={"phase": "load", "rank": "all"}))
        return ms, {}

    monkeypatch.setattr(forked, "run", run)
    got = forked.in_turns({"one": (1, 1), "two": (2, 2)}, ["--data", "x"], tmp_path, rounds=3)
    assert calls == [(1, 1), (2, 2)] * 3  # A, B, A, B, A, B
    assert set(got["one"]) == {"load, all", "load, rank 0"} and set(got["two"]) == {"load, all", "load, rank 0", "load, rank 1"}
    assert got["one"]["load, all"].samples == [2, 4, 6]  # each round's median, one a round
    assert got["two"]["load, all"].name == "two: load, all" and got["two"]["load, all"].params["arm"] == "two"
    assert got["two"]["load, rank 1"].samples == [3, 5, 7] and got["two"]["load, all"].items == 20
