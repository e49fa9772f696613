"""gpufeed.course.outofcore: a file larger than the memory allowed, read cold in two orders."""

import sys

import numpy as np
import pytest

from gpufeed.course import outofcore
from gpufeed.course.pagecache import resident

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc/self/io and fadvise: Linux"
)

SHAPE = (3, 64, 64)  # 12 KiB rows
ROW = int(np.prod(SHAPE))


@pytest.fixture
def images(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (16, *SHAPE), dtype=np.uint8)
    path = outofcore.write_images(tmp_path / "images.bin", pixels, rows=2048)  # 24 MiB
    assert path.stat().st_size == 2048 * ROW
    assert np.array_equal(np.fromfile(path, dtype=np.uint8).reshape(-1, *SHAPE)[16:32], pixels)
    return path


def test_the_fallback_keeps_no_more_than_the_limit_cached_and_reads_from_disk(images, tmp_path):
    order = np.random.default_rng(1).permutation(2048)
    np.save(tmp_path / "order.npy", order)
    limit = 4 << 20
    got = outofcore._reader(
        str(images), SHAPE, str(tmp_path / "order.npy"), 64, limit, "fadvise", "", "random"
    )
    assert got["images"] == 2048 and got["method"] == "fadvise"
    assert got["read_bytes"] >= 2048 * ROW  # cold: at least the whole file came from the disk
    cached = resident([images])
    if cached is not None:  # the LRU dropped everything past the limit
        assert cached[0] * 4096 <= limit + outofcore.BLOCK


def test_the_grouped_order_reads_less_than_the_full_shuffle(images):
    limit = (
        40 << 20 if outofcore.limit_method() != "fadvise" else 4 << 20
    )  # a cgroup counts the reader's own memory
    got = outofcore.compare(images, SHAPE, batch=32, group=64, limit=limit, first=512)
    assert set(got) == {"full shuffle", "full shuffle, MADV_RANDOM", "grouped"}
    assert all(
        r["images"] == 512 and r["read_bytes"] > 0 and r["images_per_s"] > 0 for r in got.values()
    )
    assert got["grouped"]["read_bytes"] < got["full shuffle"]["read_bytes"]


def test_a_bad_command_line_says_how_to_call_it(capsys):
    assert outofcore.main(["only-one"]) == 2
    assert "usage: python -m gpufeed.course.outofcore" in capsys.readouterr().err
