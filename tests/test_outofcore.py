"""gpufeed.course.lesson06.outofcore: a dataset larger than the memory allowed, read cold in two orders."""

import json
import os
import sys

import numpy as np
import pytest
import torch

from gpufeed.course.lesson06 import outofcore
from gpufeed.course.lesson12.pagecache import resident
from gpufeed.data.arrays import open_arrays

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="fadvise, madvise and cgroups: Linux"
)

SHAPE = (3, 64, 64)  # 12 KiB rows
ROW = int(np.prod(SHAPE))


@pytest.fixture
def dataset(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (16, *SHAPE), dtype=np.uint8)
    folder = outofcore.write_dataset(tmp_path / "mm", pixels, rows=2048)  # 24 MiB
    images, targets, manifest = open_arrays(folder)
    assert images.shape == (2048, *SHAPE) and targets.shape == (2048,) and manifest["count"] == 2048
    assert np.array_equal(images[16:32].numpy(), pixels)  # the source's rows, repeated
    return folder


def images_file(folder):
    (path,) = folder.rglob("images.memmap")
    return path


def run_child(spec):
    """The child's side in this process (the fallback: nothing joins a cgroup)."""
    return outofcore._reader({"cgroup": "", "method": "fadvise", "advice": "normal",
                              "reader": "numpy", "group": None, "seed": 0, **spec})


def test_a_written_dataset_is_one_every_reader_opens(dataset):
    from gpufeed.data.image_loader import ImageLoader
    from gpufeed.data.memmap import load_memmap

    data = load_memmap(dataset)
    assert data.images.shape == (2048, *SHAPE) and int(data.targets.sum()) == 0
    batch, _ = next(iter(ImageLoader(dataset, 8, dtype=torch.uint8, flip=False, shuffle=False)))
    assert batch.equal(data.images[:8])


@pytest.mark.parametrize("reader", ["numpy", "imageloader"])
def test_the_fallback_keeps_no_more_than_the_limit_cached_and_reads_from_disk(dataset, tmp_path,
                                                                              reader):
    from gpufeed.data.orders import permutation

    order = permutation(2048, 0).numpy()  # ImageLoader's own order for seed 0
    np.save(tmp_path / "order.npy", order)
    limit = 4 << 20
    got = run_child({"dataset": str(dataset), "order": str(tmp_path / "order.npy"), "batch": 64,
                     "limit": limit, "reader": reader, "advice": "random"})
    assert got["images"] == 2048 and got["method"] == "fadvise" and got["reader"] == reader
    assert got["read_bytes"] >= 2048 * ROW  # cold: at least the whole file came from the disk
    cached = resident([images_file(dataset)])
    if cached is not None:  # the LRU dropped everything past the limit
        assert cached[0] * 4096 <= limit + outofcore.BLOCK


def test_image_loader_must_read_the_stand_ins_rows(dataset, tmp_path):
    np.save(tmp_path / "order.npy", np.arange(2048))  # not ImageLoader's shuffled order
    with pytest.raises(RuntimeError, match="not the stand-in's"):
        run_child({"dataset": str(dataset), "order": str(tmp_path / "order.npy"), "batch": 64,
                   "limit": 4 << 20, "reader": "imageloader"})


def test_the_grouped_order_reads_less_than_the_full_shuffle_in_both_readers(dataset):
    # a cgroup also counts what the reader allocates after joining it (ImageLoader's batches)
    limit = 40 << 20 if outofcore.limit_method() != "fadvise" else 4 << 20
    got = outofcore.compare(dataset, batch=32, group=64, limit=limit, first=512)
    assert set(got) == {"full shuffle", "full shuffle, MADV_RANDOM", "grouped",
                        "ImageLoader, full shuffle", "ImageLoader, grouped"}
    assert all(r["images"] == 512 and r["read_bytes"] > 0 and r["images_per_s"] > 0
               for r in got.values())
    assert got["grouped"]["read_bytes"] < got["full shuffle"]["read_bytes"]
    assert got["ImageLoader, grouped"]["read_bytes"] < got["ImageLoader, full shuffle"]["read_bytes"]
    assert got["ImageLoader, grouped"]["reader"] == "imageloader"


def test_epochs_in_one_reader_each_start_cold_and_say_what_they_read(dataset):
    """read_epochs runs its epochs one after another in one process: the second read of the same
    rows comes from the disk again (the reader dropped the file first), with its own options.
    (ImageLoader's two epochs in one process: the compare test above.)"""
    order = np.random.default_rng(0).permutation(2048)[:256]  # 3 MiB of rows, shuffled
    first, again = outofcore.read_epochs(dataset, [(order, {}), (order, {"advice": "random"})], 32,
                                         40 << 20)
    assert first["images"] == again["images"] == 256
    assert first["read_bytes"] >= 256 * ROW and again["read_bytes"] >= 256 * ROW  # both cold
    assert (first["reader"], again["reader"]) == ("numpy", "numpy")
    assert (first["advice"], again["advice"]) == ("normal", "random")


def test_read_bytes_counts_what_the_disk_gave(dataset):
    """psutil's read_bytes is the kernel's /proc/self/io read_bytes: a cold read of the whole
    file is counted, a warm one is not."""
    import psutil

    path, io = images_file(dataset), psutil.Process().io_counters
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    before = io().read_bytes
    path.read_bytes()
    cold = io().read_bytes - before
    before = io().read_bytes
    path.read_bytes()
    assert cold >= path.stat().st_size and io().read_bytes - before < cold / 2


def test_a_bad_command_line_says_how_to_call_it(capsys):
    assert outofcore.main(["only-one"]) == 2
    assert outofcore.main([json.dumps([1]), "two"]) == 2
    assert "usage: python -m gpufeed.course.lesson06.outofcore" in capsys.readouterr().err
    with pytest.raises(ValueError, match="reader must be one of"):
        outofcore.read_epochs(".", [([0], {})], 1, 1 << 20, reader="torch")


def test_a_cgroup_that_cannot_be_limited_falls_back_instead_of_failing(monkeypatch, tmp_path):
    """A memory cgroup whose limit cannot be written (a controller not enabled for it) is removed
    and the next way tried; an error inside the block is not swallowed by the fallback."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.procs").write_text("")
    monkeypatch.setattr(outofcore, "_v2_root", lambda: root)
    monkeypatch.setattr(outofcore, "V1", tmp_path / "missing")
    monkeypatch.setattr(outofcore.Path, "write_text", _refuse_knobs(outofcore.Path.write_text))
    with outofcore.memory_cgroup(1 << 20) as (method, path):
        assert (method, path) == ("fadvise", None)
    assert list(root.iterdir()) == [root / "cgroup.procs"]  # the one it made is gone
    with pytest.raises(KeyError), outofcore.memory_cgroup(1 << 20):
        raise KeyError("mine")


def _refuse_knobs(write_text):
    def write(self, text, *a, **kw):
        if self.name == "memory.max":
            raise PermissionError(13, "not allowed", str(self))
        return write_text(self, text, *a, **kw)

    return write
