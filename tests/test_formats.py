import numpy as np
import pytest
import torch

from gpufeed.course.lesson04 import formats, quality
from gpufeed.measure.synth import SynthSpec, render, synth_folder

N, SIZE = 6, (40, 24)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("folders")
    return {
        "png": formats.export_folder(root / "png", n=N, size=SIZE, fmt="png", classes=3),
        "npy": formats.export_folder(root / "npy", n=N, size=SIZE, fmt="npy", classes=3),
        "jpeg": synth_folder(root / "jpeg", n=N, size=SIZE, quality=95, classes=3, progress=False).path,
    }


def test_lossless_formats_return_the_originals_in_the_same_order(made):
    spec = SynthSpec(N, *SIZE, classes=3)
    png, npy, jpg = (formats.ImageFiles(made[k]) for k in ("png", "npy", "jpeg"))
    assert png.fmt == "png" and npy.fmt == "npy" and jpg.fmt == "jpeg"
    assert [p.stem for p in png.files] == [p.stem for p in npy.files] == [p.stem for p in jpg.files]
    assert png.labels == npy.labels == jpg.labels == [int(p.parent.name[-2:]) for p in png.files]
    for i, path in enumerate(png.files):
        original = quality.to_tensor(render(spec, int(path.stem)))
        (a, la), (b, lb), (c, lc) = png[i], npy[i], jpg[i]
        assert a.dtype == b.dtype == c.dtype == torch.uint8 and a.shape == (3, 24, 40)
        assert torch.equal(a, original) and torch.equal(b, original)
        assert quality.psnr(c, original) > 30  # JPEG q95: close, not equal
        assert la == lb == lc


def test_a_dataloader_with_workers_gives_what_the_dataset_gives(made):
    ds = formats.ImageFiles(made["npy"])
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1)
    xs, ys = zip(*loader)
    assert torch.equal(torch.cat(xs), torch.stack([ds[i][0] for i in range(N)]))
    assert torch.cat(ys).tolist() == ds.labels


def test_loaders_in_turns_measure_images_per_second_round_by_round(made):
    png, npy = formats.loaders_in_turns({f: formats.ImageFiles(made[f]) for f in ("png", "npy")}, batch_size=3,
                                        workers=0, repeats=2)
    assert png.name == "png" and npy.name == "npy" and png.items == npy.items == N and png.items_per_s > 0
    assert len(png.samples) == len(npy.samples) == 2 and png.params == {"batch_size": 3, "workers": 0}


def test_export_is_reused_and_refuses_other_content(made, tmp_path):
    before = made["png"].stat().st_mtime_ns
    assert formats.export_folder(made["png"], n=N, size=SIZE, fmt="png", classes=3) == made["png"]
    assert made["png"].stat().st_mtime_ns == before
    with pytest.raises(FileExistsError, match="already holds"):
        formats.export_folder(made["png"], n=N + 1, size=SIZE, fmt="png", classes=3)
    assert not list(made["png"].parent.glob(".*partial*"))
    assert formats.folder_bytes(made["npy"]) > formats.folder_bytes(made["png"]) > formats.folder_bytes(made["jpeg"])
    npy = np.load(next(made["npy"].glob("*/*.npy")))
    assert npy.shape == (3, 24, 40) and npy.dtype == np.uint8


def test_bad_folders_get_clear_errors(tmp_path, made):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        formats.ImageFiles(tmp_path / "missing")
    with pytest.raises(ValueError, match="no images"):
        formats.ImageFiles(tmp_path)
    with pytest.raises(ValueError, match="no png files"):
        formats.ImageFiles(made["npy"], fmt="png")
    with pytest.raises(ValueError, match="fmt must be"):
        formats.export_folder(tmp_path / "x", n=2, size=SIZE, fmt="jpeg")


def test_export_goes_through_the_shared_staging(tmp_path, monkeypatch):
    """An interrupted export leaves nothing; too little space is one line before anything is written."""
    real, calls = formats.synth.render, []

    def render_then_stop(spec, i):
        calls.append(i)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(spec, i)

    monkeypatch.setattr(formats.synth, "render", render_then_stop)
    with pytest.raises(KeyboardInterrupt):
        formats.export_folder(tmp_path / "png", n=N, size=SIZE, fmt="png", classes=3)
    assert list(tmp_path.iterdir()) == []  # no folder, no hidden staging folder
    monkeypatch.setattr(formats.synth, "render", real)
    monkeypatch.setenv("GPUFEED_FREE_BYTES_LIMIT", "1000")
    with pytest.raises(formats.synth.SynthError, match="not enough disk space.*choose a smaller n or size"):
        formats.export_folder(tmp_path / "png", n=N, size=SIZE, fmt="png", classes=3)
    monkeypatch.delenv("GPUFEED_FREE_BYTES_LIMIT")
    out = formats.export_folder(tmp_path / "png", n=N, size=SIZE, fmt="npy", classes=3)
    assert len(formats.ImageFiles(out)) == N and [p.name for p in tmp_path.iterdir()] == ["png"]
