import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from gpufeed.data import folder
from gpufeed.data.folder import (
    BadImageError,
    FolderError,
    ImageFolderDataset,
    fit,
    load_image,
    scan,
)
from gpufeed.data.jpeg import decode_pil
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    return synth_folder(tmp_path_factory.mktemp("folder") / "jpeg", n=12, size=(64, 48), classes=3,
                        progress=False).path


def gradient(w, h):
    x = np.arange(w, dtype=np.uint8)[None, :, None].repeat(h, 0).repeat(3, 2)
    return Image.fromarray(x * 3 + np.arange(h, dtype=np.uint8)[:, None, None])


@pytest.mark.parametrize("src, dst, resized", [
    ((400, 300), (224, 224), (299, 224)),  # landscape: the short side (height) fits
    ((300, 400), (224, 224), (224, 299)),  # portrait: the short side (width) fits
    ((400, 300), (200, 100), (200, 150)),  # wide target: the width sets the scale
    ((50, 40), (100, 100), (125, 100)),    # upscaling too
])
def test_fit_is_resize_short_side_then_centre_crop(src, dst, resized):
    img = gradient(*src)
    expected = img.resize(resized, Image.BILINEAR)
    left, top = (resized[0] - dst[0]) // 2, (resized[1] - dst[1]) // 2
    expected = expected.crop((left, top, left + dst[0], top + dst[1]))
    got = fit(img, dst)
    assert got.size == dst and got.mode == "RGB"
    assert np.array_equal(np.asarray(got), np.asarray(expected))


def test_fit_keeps_an_image_of_the_target_size_untouched_and_converts_modes():
    img = gradient(64, 48)
    assert np.array_equal(np.asarray(fit(img, (64, 48))), np.asarray(img))
    for mode in ("L", "P", "RGBA", "CMYK"):
        assert fit(img.convert(mode), (32, 32)).mode == "RGB"


def test_items_are_the_decoded_pixels_at_the_native_size(jpegs):
    ds = ImageFolderDataset(jpegs, size=(64, 48))
    for i in (0, 5, 11):
        image, target = ds[i]
        path, label = ds.samples[i]
        assert image.dtype == torch.uint8 and image.shape == (3, 48, 64) and image.is_contiguous()
        assert torch.equal(image, decode_pil(Path(path).read_bytes())) and target == label


def test_scan_layout_sorting_and_what_it_ignores(tmp_path, jpegs):
    samples, classes = scan(jpegs)
    assert classes == ["class_00", "class_01", "class_02"]
    assert [t for _, t in samples] == sorted(t for _, t in samples) and len(samples) == 12
    assert all(p.endswith(".jpg") for p, _ in samples)
    root = tmp_path / "mixed"
    (root / "b").mkdir(parents=True)
    (root / "a").mkdir()
    (root / ".hidden").mkdir()
    gradient(8, 8).save(root / "b" / "2.PNG")
    gradient(8, 8).save(root / "b" / "1.jpg")
    gradient(8, 8).save(root / ".hidden" / "x.jpg")
    (root / "b" / "notes.txt").write_text("not an image")
    (root / "top.jpg").write_bytes(b"")
    samples, classes = scan(root)
    assert classes == ["a", "b"]
    assert [(p.rsplit("/", 1)[-1], t) for p, t in samples] == [("1.jpg", 1), ("2.PNG", 1)]


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "is not a folder"),
    (lambda p: p, "has no class folders"),
    (lambda p: (p / "c").mkdir() or p, "holds no images"),
])
def test_scan_errors_say_what_to_do(tmp_path, make, message):
    with pytest.raises(FolderError, match=message):
        scan(make(tmp_path))


def test_a_bad_image_names_its_file_and_survives_pickling(tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg")
    with pytest.raises(BadImageError, match=r"cannot read image .*broken\.jpg") as e:
        load_image(bad, (32, 32))
    again = pickle.loads(pickle.dumps(e.value))
    assert again.path == str(bad) and str(again) == str(e.value)


def test_dataloader_workers_give_the_same_batches(jpegs):
    ds = ImageFolderDataset(jpegs, size=(32, 32))
    here = list(DataLoader(ds, batch_size=5))
    there = list(DataLoader(ds, batch_size=5, num_workers=2))
    assert len(here) == 3
    for (a, ta), (b, tb) in zip(here, there):
        assert torch.equal(a, b) and torch.equal(ta, tb)


def test_drop_cached_accepts_files_and_folders(jpegs):
    import os

    expected = hasattr(os, "posix_fadvise")
    assert folder.drop_cached(jpegs) is expected
    assert folder.drop_cached([p for p, _ in scan(jpegs)[0][:2]]) is expected
