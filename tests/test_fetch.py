"""gather_rows: the same bytes as torch.index_select, for a memmap and any index order."""

import warnings

import numpy as np
import pytest
import torch

from gpufeed.data.fetch import advise, gather_rows


@pytest.fixture
def mapped(tmp_path):
    path = tmp_path / "rows.bin"
    rng = np.random.default_rng(0)
    rng.integers(0, 256, 37 * 3 * 8 * 8, dtype=np.uint8).tofile(path)
    arr = np.memmap(path, dtype=np.uint8, mode="r", shape=(37, 3, 8, 8))
    with warnings.catch_warnings():  # a read-only mapping: torch may warn, we only read it
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(arr)
    return arr, t


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("order", ["shuffled", "sorted", "repeated"])
def test_same_bytes_as_index_select(mapped, threads, order):
    arr, src = mapped
    g = torch.Generator().manual_seed(1)
    idx = {"shuffled": torch.randperm(37, generator=g)[:16], "sorted": torch.arange(5, 21),
           "repeated": torch.tensor([3] * 8 + [36] * 8)}[order]
    out = torch.full((16, 3, 8, 8), 7, dtype=torch.uint8)
    assert gather_rows(src, idx, out, threads=threads) is out
    assert torch.equal(out, torch.index_select(src, 0, idx))


def test_advise_a_memmap(mapped):
    arr, _ = mapped
    assert advise(arr) in (True, False)  # False only where the platform has no madvise
    assert advise(arr, sequential=True) == advise(arr)


def test_wrong_buffer_is_one_clear_error(mapped):
    _, src = mapped
    with pytest.raises(ValueError, match=r"gather_rows: out must be torch.uint8 \[4, 3, 8, 8\]"):
        gather_rows(src, torch.arange(4), torch.empty(5, 3, 8, 8, dtype=torch.uint8))
