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
