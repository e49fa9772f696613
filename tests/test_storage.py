"""The disk and the page cache (gpufeed.measure.storage): a file read cold and warm, the bytes the OS
fetched from storage (psutil, None where it does not count), and the storage ladder; and the
rates measured copies give (gpufeed.measure.rates)."""

import os

import psutil
import pytest

from gpufeed.data.folder import drop_page_cache
from gpufeed.measure import published, rates, storage
from gpufeed.measure.ceilings import make_file
from gpufeed.measure.harness import Measurement
from gpufeed.measure.units import MB


def test_read_file_and_page_cache(tmp_path):
    path = make_file(tmp_path / "f.bin", 2 * MB)
    assert storage.read_file(path, chunk=1 << 16) == 2 * MB
    assert drop_page_cache(path) == hasattr(os, "posix_fadvise")
    cold, warm = storage.file_read(path, cold=True, repeats=2), storage.file_read(path, cold=False, repeats=2)
    assert cold.params["cold"] and not warm.params["cold"] and cold.nbytes == warm.nbytes == 2 * MB


def test_storage_ladder_sets_ours_beside_theirs_fastest_first():
    cold = Measurement("read cold", [1.0], nbytes=1e9, params={"cold": True})
    warm = Measurement("read warm", [0.1], nbytes=1e9, params={"cold": False})
    figures = [f for f in published.for_lesson("lesson00") if not f.id.startswith("h2d-")]
    assert {f.id.split("-")[0] for f in figures} >= {"nvme", "raid0", "efs"}  # NVMe, RAID, network storage
    ladder = storage.storage_ladder(cold, warm, figures)
    assert [r.gb_per_s for r in ladder] == sorted((r.gb_per_s for r in ladder), reverse=True)
    assert [r.what for r in ladder if r.ours] == ["this machine's page cache (a warm read)", "this machine's disk (a cold read)"]
    efs = next(r for r in ladder if r.published == "512 MiBps")
    assert efs.gb_per_s == pytest.approx(512 * 2**20 / 1e9) and "not measured here" in efs.source and not efs.ours


def test_byte_rates_need_a_byte_count():
    assert rates.byte_rates(Measurement("c", [1.0, 2.0], nbytes=4e9)) == [4.0, 2.0]
    with pytest.raises(ValueError, match="no byte count"):
        rates.byte_rates(Measurement("c", [1.0]))


def test_storage_bytes_is_psutils_count_or_none_where_the_os_does_not_count(monkeypatch):
    n = storage.storage_bytes()
    assert n is None or n >= 0
    if hasattr(psutil.Process, "io_counters"):
        assert n is not None  # Linux, Windows: psutil counts
    monkeypatch.delattr(psutil.Process, "io_counters", raising=False)  # macOS: psutil has no io_counters
    assert storage.storage_bytes() is None

    def denied(self):
        raise psutil.AccessDenied(os.getpid())

    monkeypatch.setattr(psutil.Process, "io_counters", denied, raising=False)  # a container that denies it
    assert storage.storage_bytes() is None


def test_reached_disk_reads_the_count_first_and_the_times_only_without_one():
    def read(seconds, **params):
        return Measurement("read", [seconds], nbytes=1, params={"fadvise": True, **params})

    assert storage.reached_disk(read(1.0, from_storage=0.9), read(1.0))  # as fast as the cache, yet from the disk
    assert not storage.reached_disk(read(5.0, from_storage=0.1), read(1.0))  # slow, yet served from RAM
    assert storage.reached_disk(read(1.5, from_storage=None), read(1.0))  # no count: 1.5x slower is the disk
    assert not storage.reached_disk(read(1.4, from_storage=None), read(1.0))
    assert not storage.reached_disk(read(9.0, from_storage=None, fadvise=False), read(1.0))  # never asked to drop
