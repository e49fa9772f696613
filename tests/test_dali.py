import importlib
import sys
from pathlib import Path

import pytest
import torch

from gpufeed.data.folder import scan
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.measure import dali as gdali
from gpufeed.measure.synth import synth_folder

needs_dali = pytest.mark.skipif(not gdali.available(), reason="NVIDIA DALI is not installed (pip install nvidia-dali-cuda130)")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return synth_folder(tmp_path_factory.mktemp("dali") / "jpeg", n=20, size=(160, 120), classes=3, progress=False).path


def test_importing_the_module_does_not_import_dali():
    if "nvidia.dali" in sys.modules:
        pytest.skip("DALI was already imported by an earlier test in this process")
    importlib.reload(gdali)
    assert "nvidia.dali" not in sys.modules


def test_availability_install_hint_and_device(monkeypatch):
    monkeypatch.setenv("GPUFEED_DALI", "0")
    assert not gdali.available() and gdali.version() is None
    monkeypatch.delenv("GPUFEED_DALI")
    hint = gdali.install_hint()
    assert "nvidia-dali" in hint or "Linux" in hint
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    if "pip install" in hint:
        assert "nvidia-dali-cuda120" in gdali.install_hint()
    assert gdali.device_id() == (0 if torch.cuda.is_available() else None)


def test_memmap_source_serves_epochs_in_fast_loader_order(tmp_path, folder):
    mm = build_memmap(folder, tmp_path / "mm", size=(32, 24), progress=False).path
    data = load_memmap(mm)
    src = gdali.MemmapSource(mm, batch_size=8, seed=1)
    epochs = [[(images, labels) for images, labels in src] for _ in range(2)]
    for e, batches in enumerate(epochs):
        assert [len(labels) for _, labels in batches] == [8, 8, 4]
        order = torch.cat(src.loader.indices(e))
        assert sorted(order.tolist()) == list(range(20))
        assert torch.equal(torch.cat([torch.from_numpy(i) for i, _ in batches]), data.images[order])
        assert torch.equal(torch.cat([torch.from_numpy(t) for _, t in batches]), data.targets[order])
    assert not torch.equal(torch.cat(src.loader.indices(0)), torch.cat(src.loader.indices(1)))  # reshuffled


@needs_dali
@pytest.mark.parametrize("size", [(80, 60), (48, 48), (200, 150)])  # shrink, shrink to a new aspect, enlarge
def test_cpu_pipeline_deterministic_part_matches_torchvision(folder, size):
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    pipe = gdali.eval_pipeline(folder, size, batch_size=8, num_threads=1, device_id=None)
    it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="reader", last_batch_policy=LastBatchPolicy.PARTIAL)
    images, labels = map(torch.cat, zip(*(gdali.unpack(b) for b in it)))
    samples = scan(folder)[0]
    assert images.shape == (20, 3, size[1], size[0]) and labels.tolist() == [t for _, t in samples]
    for got, (path, _) in zip(images, samples):
        err = gdali.grey_level_error(got, gdali.torchvision_eval(path, size))
        assert err["interior_max"] <= gdali.INTERIOR_TOLERANCE and err["mean"] <= gdali.MEAN_TOLERANCE, (path, err)


@needs_dali
def test_external_source_pipeline_normalises_the_memmap_in_order(tmp_path, folder):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize

    mm = build_memmap(folder, tmp_path / "mm", size=(40, 30), progress=False).path
    src = gdali.MemmapSource(mm, batch_size=8, seed=2)

    @pipeline_def(batch_size=8, num_threads=1, device_id=None, seed=0)
    def pipe():
        images, labels = fn.external_source(source=src, num_outputs=2, batch=True, cycle="raise",
                                            layout=["CHW", ""], dtype=[types.UINT8, types.INT64])
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=gdali.MEAN255,
                                          std=gdali.STD255)
        return images, labels

    p = pipe()
    p.build()
    it = DALIGenericIterator(p, ["images", "labels"], auto_reset=True)
    data = load_memmap(mm)
    for e in range(2):
        images, labels = map(torch.cat, zip(*(gdali.unpack(b) for b in it)))
        order = torch.cat(src.loader.indices(e))
        assert torch.equal(labels, data.targets[order])
        assert torch.allclose(images, normalize(data.images[order], torch.float32, IMAGENET_MEAN, IMAGENET_STD), atol=1e-5)


@needs_dali
def test_random_operators_draw_per_sample():
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    image = torch.randint(0, 256, (48, 64, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)).numpy()

    @pipeline_def(batch_size=16, num_threads=1, device_id=None, seed=0)
    def pipe():
        images = fn.external_source(source=lambda: [image] * 16, batch=True, layout="HWC")  # one image, 16 times
        images = fn.random_resized_crop(images, size=[32, 32])
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=gdali.MEAN255,
                                        std=gdali.STD255, mirror=fn.random.coin_flip())

    p = pipe()
    p.build()
    out = next(iter(DALIGenericIterator(p, ["images"])))[0]["images"]  # the source never ends: take one batch
    assert out.shape == (16, 3, 32, 32) and out.dtype == torch.float32
    assert len({round(v, 4) for v in out.mean(dim=(1, 2, 3)).tolist()}) == 16  # 16 different crops of one image


def test_reference_with_dali_finds_only_results_that_have_dali(tmp_path, monkeypatch):
    from gpufeed.measure import harness as bench
    from gpufeed.measure import results
    from gpufeed.measure.harness import Measurement

    full = {"cpu": "x", "quick": False}  # a reference is measured in full mode
    bench.save(tmp_path / "gpu-a" / "lesson10.json", [Measurement("torchvision", [1.0])], machine=full, dali=None)
    bench.save(tmp_path / "cpu-b" / "lesson10.json", [Measurement("DALI", [0.5])], machine=full,
               dali="nvidia-dali-cuda130 2.4.0")
    monkeypatch.setattr(results, "reference_roots", lambda: [tmp_path])
    ms, doc = gdali.reference_with_dali("lesson10")
    assert doc["dali"].startswith("nvidia-dali") and ms[0].name == "DALI"
    assert gdali.reference_with_dali("lesson99") is None


@pytest.mark.slow
def test_lesson_10_runs_where_dali_is_missing(tmp_path, monkeypatch):
    """The notebook must run top to bottom without DALI (the GPU reference machine has none)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "10_dali.ipynb", as_version=4)
    for k, v in {"GPUFEED_DALI": "0", "GPUFEED_QUICK": "1", "GPUFEED_RESULTS": str(tmp_path)}.items():
        monkeypatch.setenv(k, v)  # the kernel inherits this process's environment
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "DALI is not installed here" in text and "pip install nvidia-dali" in text
    assert "skipped: DALI is not installed" in text and "imported DALI" not in text



@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux's /proc lists each thread of a process")
def test_os_threads_agrees_with_the_kernel_list_of_threads():
    """psutil's count is the kernel's: one entry per thread in /proc/self/task (C++ threads included)."""
    import os

    torch.ones(1 << 16).sum()  # a parallel op: torch's intra-op pool is running now, threads threading cannot see
    assert gdali.os_threads() == len(os.listdir("/proc/self/task"))


def test_the_tuned_folder_decodes_without_pillow_and_hands_over_what_the_untuned_one_would_after_finish(folder):
    """The tuned baseline of lesson 10 does the untuned one's work: the same crop and flip for the same
    draws, on uint8; converted and normalised after the hand-over, it equals the float pipeline on the
    same decoded image."""
    import numpy as np
    from PIL import Image

    from gpufeed.data.augment import cpu_transform, finish

    path, label = scan(folder)[0][0]
    decoded = gdali.read_jpeg(path)
    with Image.open(path) as im:
        pil = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)
    assert decoded.dtype == torch.uint8 and decoded.shape == pil.shape
    assert (decoded.float() - pil.float()).abs().mean() < 2.0  # both libjpeg-turbo; rounding may differ a little
    ds = gdali.tuned_folder(folder, (24, 32))
    torch.manual_seed(7)
    image, got_label = ds[0]
    torch.manual_seed(7)
    usual = cpu_transform((24, 32))(decoded)  # the untuned transforms on the same decoded image
    assert image.dtype == torch.uint8 and tuple(image.shape) == (3, 24, 32) and got_label == label
    assert torch.allclose(finish(image[None])[0], usual, atol=1e-6)
