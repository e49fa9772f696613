import os
import time

import pytest
import torch
from torch.utils.data import Dataset

from gpufeed.course.lesson07.knobs import (
    first_batch,
    grid,
    heatmap,
    label,
    loader,
    sweep,
    worker_counts,
)
from gpufeed.data.arrays import MemmapDataset
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.data.movers import DetectionDataset, detection_collate, equal
from gpufeed.measure.harness import Measurement
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def memmap_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("knobs")
    src = synth_folder(tmp / "jpeg", n=10, size=(24, 24), classes=2, progress=False).path
    return build_memmap(src, tmp / "mm", size=(16, 16), progress=False).path


def test_worker_counts_go_past_the_cores():
    assert worker_counts(1) == [0, 1, 2]
    assert worker_counts(2) == [0, 1, 2, 3]
    assert worker_counts(6) == [0, 1, 2, 4, 6, 9]


def test_labels():
    assert label({"num_workers": 0, "prefetch_factor": 2, "persistent_workers": True}) == "0 workers"
    assert label({"num_workers": 1, "pin_memory": True}) == "1 worker, pinned"


@pytest.mark.parametrize("workers", [0, 1])
def test_loader_yields_every_sample_once_in_batches(memmap_dir, workers):
    data = load_memmap(memmap_dir)
    dl = loader(MemmapDataset(memmap_dir), 4, num_workers=workers, pin_memory=True, persistent_workers=True)
    assert dl.pin_memory == torch.cuda.is_available()
    batches = list(dl)
    assert [len(b[0]) for b in batches] == [4, 4, 2]
    images, targets = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    order = [next(i for i in range(10) if torch.equal(data.images[i], img)) for img in images]
    assert sorted(order) == list(range(10)) and torch.equal(targets, data.targets[order])


def test_sweep_measures_every_config_and_records_it(memmap_dir):
    ms = sweep({"mm": MemmapDataset(memmap_dir)}, [{"num_workers": 0}, {"num_workers": 1, "persistent_workers": True}],
               batch_size=4, repeats=2, warmup=1)
    assert [m.params["num_workers"] for m in ms] == [0, 1]
    assert all(m.items == 10 and len(m.samples) == 2 and m.params["dataset"] == "mm" for m in ms)
    assert ms[1].name == "mm, 1 worker, persistent"


class Slow(Dataset):
    """Samples that take a known time each: 2 ms."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((2,), float(i)), i


@pytest.mark.timing
@pytest.mark.parametrize("workers", [0, 1])
def test_a_budget_bounds_the_sweep_and_times_blocks_of_batches(workers):
    """With budget_s each configuration is timed for about that long, whatever an epoch costs: the
    samples are blocks of batches from one stream of epochs, rescaled to full batches."""
    config = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 2}
    start = time.perf_counter()
    (m,) = sweep({"slow": Slow()}, [config], batch_size=4, repeats=3, budget_s=0.3)
    took = time.perf_counter() - start
    block = m.params["batches_per_sample"]
    assert len(m.samples) == 3 and m.items == 4 * block and block >= 2  # 8 ms a batch: blocks of several
    assert took < 3.0, f"a 0.3 s budget took {took:.1f} s"  # warm-up, probe, worker start-up included
    assert 50 < m.items_per_s < 2500  # 2 ms a sample: about 500 samples/s, one process at a time


def test_a_stream_goes_on_past_the_end_of_an_epoch():
    from gpufeed.course.lesson07.knobs import _Stream

    stream = _Stream(loader(Slow(), 5), device=None, step=None)  # 12 samples: batches of 5, 5, 2
    assert stream.take(4) == 5 + 5 + 2 + 5


def test_grid_and_heatmap():
    ms = [Measurement(f"{d} {w}", [1.0 / (w + 1)], items=10, params={"dataset": d, "num_workers": w})
          for d in ("folder", "memmap") for w in (0, 1, 2)]
    rows, cols, rates = grid(ms, "dataset", "num_workers")
    assert rows == ["folder", "memmap"] and cols == [0, 1, 2] and rates[0] == [10.0, 20.0, 30.0]
    fig, ax = heatmap(ms, cores=1, machine={"cpu": "test", "cores": 1})
    texts = [t.get_text() for t in ax.texts]
    assert "30/s\n3.00x" in texts and len([t for t in texts if "/s" in t]) == 6


class Raises(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise ValueError("bad sample in the worker")


class Dies(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        os._exit(3)


def test_first_batch_reports_success_and_failures_without_raising():
    ok = first_batch(DetectionDataset(4, size=8), "fork", collate_fn=detection_collate)
    assert ok.ok and ok.error == "" and ok.seconds > 0
    bad = first_batch(Raises(), "fork")
    assert not bad.ok and bad.error == "ValueError: bad sample in the worker"
    dead = first_batch(Dies(), "fork", timeout=60)
    assert not dead.ok and "exited unexpectedly" in dead.error


def test_detection_batches_through_a_worker_are_the_same():
    ds = DetectionDataset(6, size=8)
    with_workers = list(torch.utils.data.DataLoader(ds, batch_size=3, num_workers=1, collate_fn=detection_collate))
    without = [detection_collate([ds[i] for i in range(k, k + 3)]) for k in (0, 3)]
    assert all(equal(a, b) for a, b in zip(with_workers, without))
