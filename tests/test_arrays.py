"""The memmap format's light half: one manifest reader, one opener, one dataset for workers."""

import json
import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from gpufeed.data.arrays import MemmapDataset, MemmapError, open_arrays, read_manifest
from gpufeed.data.augment import cpu_transform
from gpufeed.data.gather import no_collate
from gpufeed.data.memmap import DATA, MANIFEST, build_memmap, load_memmap
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("arrays")
    src = synth_folder(tmp / "jpeg", n=10, size=(24, 24), classes=2, progress=False).path
    return build_memmap(src, tmp / "mm", size=(16, 16), progress=False).path


def test_the_dataset_serves_the_memmap_by_batch_and_by_sample(mm):
    data = load_memmap(mm)
    ds = MemmapDataset(mm)
    assert len(ds) == 10
    images, targets = ds.__getitems__([7, 2, 2])
    assert images.dtype == torch.uint8 and torch.equal(images, data.images[[7, 2, 2]])
    assert torch.equal(targets, data.targets[[7, 2, 2]])
    image, target = ds[3]
    assert torch.equal(image, data.images[3]) and target == int(data.targets[3])
    image[:] = 0  # a copy: the mapped file is read-only and stays as it was
    assert torch.equal(ds[3][0], data.images[3])
    samples = MemmapDataset(mm, batched=False).__getitems__([7, 2])  # torch's convention: a list of samples
    assert [t for _, t in samples] == [int(data.targets[7]), int(data.targets[2])]
    assert torch.equal(samples[0][0], data.images[7])


def test_the_dataset_pickles_as_its_path_and_maps_in_each_worker(mm):
    ds = MemmapDataset(mm, cpu_transform((8, 8)))
    clone = pickle.loads(pickle.dumps(ds))  # what spawn sends a worker: the path, not the mapping
    assert clone._arrays is None and len(pickle.dumps(MemmapDataset(mm))) < 1000 and len(clone) == 10
    assert clone[0][0].shape == (3, 8, 8) and clone._arrays is not None


@pytest.mark.parametrize("workers", [0, 1])
def test_both_ways_give_the_same_batches_as_the_naive_loop(mm, workers):
    """Batched (one gather, no_collate) and per sample (default collate) against ds[i] one by one."""
    data = load_memmap(mm)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(3)).tolist()
    kw = {"batch_size": 4, "sampler": order, "num_workers": workers}
    batched = list(DataLoader(MemmapDataset(mm), collate_fn=no_collate, **kw))
    per_sample = list(DataLoader(MemmapDataset(mm, batched=False), **kw))
    assert [len(b[0]) for b in batched] == [4, 4, 2]
    for got in (batched, per_sample):
        images, targets = torch.cat([b[0] for b in got]), torch.cat([b[1] for b in got])
        assert images.dtype == torch.uint8 and torch.equal(images, data.images[order])
        assert torch.equal(targets, data.targets[order])


def test_a_transform_runs_per_sample_in_the_workers(mm):
    ds = MemmapDataset(mm, cpu_transform((8, 8), brightness=0.4), batched=False)
    images, targets = next(iter(DataLoader(ds, batch_size=10, num_workers=1)))
    assert images.shape == (10, 3, 8, 8) and images.dtype == torch.float32 and targets.tolist() == [0] * 5 + [1] * 5
    torch.manual_seed(0)
    batch = MemmapDataset(mm, cpu_transform((8, 8), to_float=False)).__getitems__([0, 9])
    torch.manual_seed(0)
    one = [MemmapDataset(mm, cpu_transform((8, 8), to_float=False))[i][0] for i in (0, 9)]
    assert torch.equal(batch[0], torch.stack(one)) and batch[1].tolist() == [0, 1]


def test_a_folder_that_is_not_a_dataset_is_refused_with_the_fix(tmp_path, mm):
    with pytest.raises(MemmapError, match="does not exist; build it with `python -m gpufeed data memmap"):
        MemmapDataset(tmp_path / "nothing")
    with pytest.raises(MemmapError, match="no gpufeed-memmap.json"):
        MemmapDataset(mm.parent)


def test_one_manifest_reader_checks_format_and_version(tmp_path, mm):
    assert read_manifest(mm)["count"] == 10 and read_manifest(tmp_path) is None
    (tmp_path / MANIFEST).write_text("[1, 2]")  # JSON, but not an object
    assert read_manifest(tmp_path) is None
    doc = json.loads((mm / MANIFEST).read_text())
    (tmp_path / MANIFEST).write_text(json.dumps({**doc, "version": 7}))
    assert read_manifest(tmp_path)["version"] == 7  # ours: build_memmap may overwrite it
    with pytest.raises(MemmapError, match=r"format version 7, this gpufeed reads version 1; rebuild it with --overwrite$"):
        read_manifest(tmp_path, check_version=True)


def test_a_dataset_built_before_the_move_still_loads(tmp_path):
    """Datasets built when ImageData lived in ``gpufeed.memmap`` name that class in data/meta.json."""
    src = synth_folder(tmp_path / "jpeg", n=4, size=(24, 24), classes=2, progress=False).path
    mm = build_memmap(src, tmp_path / "mm", size=(16, 16), progress=False).path
    meta = mm / DATA / "meta.json"
    doc = json.loads(meta.read_text())
    assert doc["_type"] == "<class 'gpufeed.data.memmap.ImageData'>"
    meta.write_text(json.dumps({**doc, "_type": "<class 'gpufeed.memmap.ImageData'>"}))
    fresh = synth_folder(tmp_path / "jpeg", n=4, size=(24, 24), classes=2, progress=False).path
    expected = load_memmap(build_memmap(fresh, tmp_path / "new", size=(16, 16), progress=False).path)
    try:
        data = load_memmap(mm)
    except MemmapError as e:  # if it ever cannot load, it must say how to rebuild, in one line
        assert "\n" not in str(e) and f"python -m gpufeed data memmap {src} {mm} --overwrite" in str(e)
    else:
        assert torch.equal(data.images, expected.images) and torch.equal(data.targets, expected.targets)
        assert torch.equal(open_arrays(mm)[0], expected.images.as_subclass(torch.Tensor))
