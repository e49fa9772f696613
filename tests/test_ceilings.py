import pytest
import torch

from gpufeed.course import transfer
from gpufeed.measure import ceilings
from gpufeed.measure.results import Reference
from gpufeed.measure.synth import synth_folder
from gpufeed.measure.units import MB
from gpufeed.measure.wording import versus


def test_memcpy_reports_bytes_and_keeps_threads():
    before = torch.get_num_threads()
    m = ceilings.memcpy(1 << 20, repeats=3, threads=1)
    assert m.nbytes == 1 << 20 and m.gb_per_s > 0 and m.params["threads"] == 1
    assert torch.get_num_threads() == before


def test_make_file_is_exact_and_reused(tmp_path):
    path = ceilings.make_file(tmp_path / "f.bin", 3 * MB + 5)
    assert path.stat().st_size == 3 * MB + 5
    mtime = path.stat().st_mtime_ns
    ceilings.make_file(path, 3 * MB + 5)
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


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


@pytest.mark.cuda  # make test-gpu selects -m cuda
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


QUIET = (1.00, 1.01, 0.99, 1.005, 0.995)  # five samples, about 1% apart
NOISY = (1.0, 1.9, 0.5, 1.6, 0.7)


def h2d(source, seconds, nbytes=1 << 28, base=QUIET):
    from gpufeed.measure.harness import Measurement

    return Measurement(f"H2D {source}", [seconds * f for f in base], nbytes=nbytes,
                       params={"nbytes": nbytes, "source": source})


def test_committed_reads_a_gpu_reference_and_skips_quick_mode_files(monkeypatch, tmp_path):
    from gpufeed.measure import results
    from gpufeed.measure.harness import save

    gpu = {"gpu": "NVIDIA H100 80GB HBM3", "commit": "305e292237ebaddcf5c979106cc47292981f6709"}
    save(tmp_path / "h100-80gb-hbm3" / "lesson00.json", [h2d("pinned", 0.1)], machine={**gpu, "quick": True}, quick=True)
    save(tmp_path / "h100-80gb-hbm3" / "ceilings.json", [h2d("pageable", 0.03), h2d("pinned", 0.005)], machine=gpu)
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    ref = ceilings.committed(lambda m: m.name.startswith("H2D"))
    assert [m.name for m in ref.measurements] == ["H2D pageable", "H2D pinned"]  # the quick lesson00.json was skipped
    assert ref.hardware == "NVIDIA H100 80GB HBM3"
    # one line for a learner: the file, the mode, the date save() recorded, no hash
    assert ref.source.startswith("our reference, `results/h100-80gb-hbm3/ceilings.json`, full mode")
    assert "305e292" not in ref.source and "commit" not in ref.source
    from datetime import datetime, timezone

    assert ref.source.endswith(f"full mode, measured on {datetime.now(timezone.utc):%Y-%m-%d}")  # save() dates it
    assert ceilings.committed(lambda m: m.name.startswith("read ")) is None
    # a second GPU's file is read where the first has nothing that keep selects
    from gpufeed.measure.harness import Measurement

    save(tmp_path / "h200" / "ceilings.json", [Measurement("read cold", [0.1], params={"nbytes": 1})],
         machine={"gpu": "NVIDIA H200", "quick": False})
    assert ceilings.committed(lambda m: m.name.startswith("read ")).hardware == "NVIDIA H200"


def test_the_committed_h100_reference_is_what_lessons_00_and_07_show():
    """The H100 run of 2026-11-26, full mode: 54.5 vs 8.7 GB/s (6.3x), 24.0 GB/s pinning then copying,
    beside NVIDIA's GTX 680 (6.19 / 5.37 GB/s), each row labelled with its hardware and source."""
    from gpufeed.measure import published

    ref = ceilings.committed(lambda m: m.name.startswith("H2D"))
    assert ref is not None and ref.hardware == "NVIDIA H100 80GB HBM3" and "full mode" in ref.source
    assert "commit" not in ref.source  # a learner reads the machine, the mode and (where recorded) the date
    text = transfer.h2d_sentence(ref)
    assert "**54.5 GB/s**, **6.28x faster** than the 8.7 GB/s" in text and "runs at 24.0 GB/s" in text
    assert "caching host allocator" in text  # the pin reused a page-locked block: said, as the finding asked
    table = transfer.h2d_table([ref], published.for_lesson("lesson07")).splitlines()
    assert table[2].startswith("| NVIDIA H100 80GB HBM3 | our reference, `results/h100-80gb-hbm3/ceilings.json`")
    assert "| 8.69 | 54.54 | 6.28x | 24.01 |" in table[2]
    gtx = next(row for row in table if row.startswith("| GeForce GTX 680"))
    assert "| 5.368503 | 6.186581 | 1.15x |" in gtx and "not measured here" in gtx and "developer.nvidia.com" in gtx


@pytest.mark.parametrize("pinned_s, both_s, base, says", [
    (0.005, 0.012, QUIET, ["**6.00x faster** than the 8.9 GB/s", "pinning paid for itself", "**2.40x slower** than memory"]),
    (0.005, 0.005, QUIET, ["pinning paid for itself"]),  # a pin that costs nothing: no slower-than-pinned clause
    (0.030, 0.030, QUIET, ["**as fast** as the 8.9 GB/s", "**as fast** as pageable", "pinning cost what the faster"]),
    (0.060, 0.090, QUIET, ["**2.00x slower** than the 8.9 GB/s", "**3.00x slower** than pageable", "pinning cost"]),
    (0.027, 0.033, NOISY, ["not told apart from the 8.9 GB/s", "This run cannot tell"]),  # inside the spread
])
def test_h2d_sentence_reads_its_verdicts_either_way(pinned_s, both_s, base, says):
    ref = Reference([h2d("pageable", 0.030), h2d("pinned", pinned_s, base=base), h2d("pin+copy", both_s, base=base)],
                             {"gpu": "GPU Y"}, "here")
    text = transfer.h2d_sentence(ref)
    assert all(s in text for s in says), text
    assert "caching host allocator" in text
    assert ("than memory pinned beforehand (" in text) == any("than memory" in s for s in says)


def test_h2d_sentence_with_too_few_samples_or_an_old_reference():
    few = Reference([h2d("pageable", 0.03, base=(1.0,) * 3), h2d("pinned", 0.005, base=(1.0,) * 3)],
                             {"gpu": "GPU Z"}, "an old file")
    text = transfer.h2d_sentence(few)
    assert "3 samples per arm" in text and "predates the pin+copy series" in text


def test_ram_bytes_and_sweep_sizes_end_at_several_times_the_cache():
    assert ceilings.ram_bytes(260 * MB, floor=16 * MB) == 1040 * MB
    assert ceilings.ram_bytes(None, floor=16 * MB) == 16 * MB
    assert ceilings.ram_bytes(3 * MB + 1, floor=1, times=1) == 4 * MB  # whole MiB, rounded up
    sizes = ceilings.sweep_sizes(1040 * MB)
    assert sizes[0] == 1 << 16 and sizes[-1] == 1040 * MB and sizes[-2] == 256 * MB
    assert ceilings.sweep_sizes(1 << 16) == [1 << 16]


def test_memcpy_threads_times_each_count_in_turns_and_keeps_threads():
    before = torch.get_num_threads()
    one, two = ceilings.memcpy_threads(1 << 20, (1, 2), repeats=3)
    assert [m.params["threads"] for m in (one, two)] == [1, 2] and len(one.samples) == len(two.samples) == 3
    assert one.nbytes == two.nbytes == 1 << 20 and one.gb_per_s > 0 and torch.get_num_threads() == before


def test_h2d_at_takes_the_size_nearest_the_one_asked_for():
    ms = [h2d(s, 0.01, n) for n in (1 << 20, 1 << 24, 1 << 28) for s in ("pageable", "pinned")]
    assert {m.params["nbytes"] for m in ceilings.h2d_at(ms, 16 << 20).values()} == {1 << 24}
    assert {m.params["nbytes"] for m in ceilings.h2d_at(ms[4:], 16 << 20).values()} == {1 << 28}


def test_versus_names_the_direction():
    assert versus(3.0, 1.0) == "**3.0x** as fast as"
    assert versus(1.0, 3.0) == "**3.0x** slower than"
    assert versus(1.0, 1.04) == "about as fast as"
