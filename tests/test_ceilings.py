import os

import pytest
import torch

from gpufeed.measure import ceilings
from gpufeed.measure.synth import synth_folder


def test_memcpy_reports_bytes_and_keeps_threads():
    before = torch.get_num_threads()
    m = ceilings.memcpy(1 << 20, repeats=3, threads=1)
    assert m.nbytes == 1 << 20 and m.gb_per_s > 0 and m.params["threads"] == 1
    assert torch.get_num_threads() == before


def test_make_file_is_exact_and_reused(tmp_path):
    path = ceilings.make_file(tmp_path / "f.bin", 3 * ceilings.MB + 5)
    assert path.stat().st_size == 3 * ceilings.MB + 5
    mtime = path.stat().st_mtime_ns
    ceilings.make_file(path, 3 * ceilings.MB + 5)
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_read_file_and_page_cache(tmp_path):
    path = ceilings.make_file(tmp_path / "f.bin", 2 * ceilings.MB)
    assert ceilings.read_file(path, chunk=1 << 16) == 2 * ceilings.MB
    assert ceilings.drop_page_cache(path) == hasattr(os, "posix_fadvise")
    cold, warm = ceilings.file_read(path, cold=True, repeats=2), ceilings.file_read(path, cold=False, repeats=2)
    assert cold.params["cold"] and not warm.params["cold"] and cold.nbytes == warm.nbytes == 2 * ceilings.MB


def test_decode_rate_counts_images(tmp_path):
    from gpufeed.data.jpeg import decode_pil

    folder = synth_folder(tmp_path / "d", n=4, size=(64, 48), classes=1, progress=False).path
    jpegs = [p.read_bytes() for p in folder.rglob("*.jpg")]
    m = ceilings.decode_rate(jpegs, decode_pil, name="pil", repeats=2)
    assert m.items == 4 and m.items_per_s > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_host_to_device_without_cuda_says_so():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        ceilings.host_to_device(1 << 20, pinned=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_host_to_device_on_cuda():
    pageable = ceilings.host_to_device(1 << 24, pinned=False, repeats=3)
    pinned = ceilings.host_to_device(1 << 24, pinned=True, repeats=3)
    pin_copy = ceilings.host_to_device(1 << 24, source="pin+copy", repeats=3)
    assert pageable.gb_per_s > 0 and pinned.gb_per_s > 0 and pin_copy.gb_per_s > 0
    assert [ceilings.h2d_source(m) for m in (pageable, pinned, pin_copy)] == list(ceilings.H2D_SOURCES)


def test_h2d_series_has_three_sources_per_size():
    from gpufeed.measure.harness import Measurement

    def fake(nbytes, repeats, source):  # host_to_device needs CUDA; this records what it was asked
        return Measurement(f"H2D {source}", [nbytes / 1e9], nbytes=nbytes,
                           params={"nbytes": nbytes, "pinned": source != "pageable", "source": source})

    ms = ceilings.h2d_series([1 << 20, 1 << 22], repeats=2, measure=fake)
    assert [(m.params["nbytes"], ceilings.h2d_source(m)) for m in ms] == [
        (n, s) for n in (1 << 20, 1 << 22) for s in ("pageable", "pinned", "pin+copy")]
    old = Measurement("H2D pinned", [1.0], params={"pinned": True})  # a reference saved before "source"
    assert ceilings.h2d_source(old) == "pinned"


def test_host_to_device_rejects_an_unknown_source():
    with pytest.raises(ValueError, match="choose one of"):
        ceilings.host_to_device(1 << 20, source="mapped")
