import io
import math

import numpy as np
import pytest
import torch

from gpufeed.course.lesson04 import quality
from gpufeed.course.lesson04.quality import psnr, ssim
from gpufeed.measure.synth import SynthSpec, render

C1, C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2


def ssim_reference(x: np.ndarray, y: np.ndarray) -> float:
    """SSIM by the paper's definition, window by window, one channel, in plain numpy."""
    r = np.arange(11) - 5.0
    g = np.exp(-(r**2) / (2 * 1.5**2))
    w = np.outer(g, g) / np.outer(g, g).sum()
    vals = []
    for i in range(x.shape[0] - 10):
        for j in range(x.shape[1] - 10):
            px, py = x[i:i + 11, j:j + 11], y[i:i + 11, j:j + 11]
            mx, my = (w * px).sum(), (w * py).sum()
            vx, vy = (w * (px - mx) ** 2).sum(), (w * (py - my) ** 2).sum()
            cxy = (w * (px - mx) * (py - my)).sum()
            vals.append((2 * mx * my + C1) * (2 * cxy + C2) / ((mx**2 + my**2 + C1) * (vx + vy + C2)))
    return float(np.mean(vals))


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (3, 15, 17)).astype(np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-40, 41, a.shape), 0, 255).astype(np.uint8)
    return a, b


def test_identical_images_give_exactly_one_and_infinite_psnr():
    img = quality.to_tensor(render(SynthSpec(n=1, width=48, height=32), 0))
    assert ssim(img, img) == 1.0 and ssim(img, img, luma=True) == 1.0
    assert psnr(img, img) == math.inf


def test_psnr_of_a_known_mse():
    a = torch.full((3, 8, 8), 100, dtype=torch.uint8)
    for d in (1, 3, 10):
        assert psnr(a, a + d) == pytest.approx(10 * math.log10(255**2 / d**2), abs=1e-12)
    b = a.clone()
    b[0, 0, 0] = 132  # one pixel off by 32 among 192 values: MSE = 32^2 / 192
    assert quality.mse(a, b) == pytest.approx(32**2 / 192)
    assert psnr(a, b) == pytest.approx(10 * math.log10(255**2 * 192 / 32**2))
    assert psnr(a.float() / 255, b.float() / 255, max_value=1.0) == pytest.approx(psnr(a, b), rel=1e-5)


def test_constant_images_have_the_closed_form_luminance_term():
    # No variance anywhere: the contrast-structure term is C2 / C2 = 1 and SSIM is the luminance term.
    for c1, c2 in ((100, 100), (100, 110), (0, 255), (30, 200)):
        a, b = torch.full((3, 12, 12), c1, dtype=torch.uint8), torch.full((3, 12, 12), c2, dtype=torch.uint8)
        expected = (2 * c1 * c2 + C1) / (c1**2 + c2**2 + C1)
        assert ssim(a, b) == pytest.approx(expected, abs=1e-12)


def test_an_additive_offset_only_changes_the_luminance_term():
    # y = x + d keeps every local variance and covariance, so SSIM = mean luminance term over windows.
    x = torch.zeros(1, 1, 11, 11, dtype=torch.float64)
    x[..., ::2, :] = 40.0  # striped, but one window covers it all: its mean is a fixed number
    d = 25.0
    g = quality.gaussian_window()
    mu = float((torch.outer(g, g) * x[0, 0]).sum())
    expected = (2 * mu * (mu + d) + C1) / (mu**2 + (mu + d) ** 2 + C1)
    assert ssim(x, x + d) == pytest.approx(expected, abs=1e-12)


def test_ssim_matches_a_window_by_window_numpy_reference(pair):
    a, b = pair
    expected = np.mean([ssim_reference(a[c].astype(float), b[c].astype(float)) for c in range(3)])
    assert ssim(torch.from_numpy(a), torch.from_numpy(b)) == pytest.approx(expected, abs=1e-10)
    ya, yb = (np.tensordot(quality.LUMA, v.astype(float), axes=1) for v in (a, b))
    assert ssim(torch.from_numpy(a), torch.from_numpy(b), luma=True) == pytest.approx(ssim_reference(ya, yb), abs=1e-10)


def test_ssim_is_symmetric_and_batched_like_single(pair):
    a, b = (torch.from_numpy(v) for v in pair)
    assert ssim(a, b) == pytest.approx(ssim(b, a), abs=1e-15)
    assert ssim(torch.stack([a, a]), torch.stack([b, b])) == pytest.approx(ssim(a, b), abs=1e-12)
    assert 0 < ssim(a, b) < 1


def test_bad_input_is_named():
    a = torch.zeros(3, 16, 16, dtype=torch.uint8)
    with pytest.raises(ValueError, match="differ in shape"):
        ssim(a, torch.zeros(3, 16, 15, dtype=torch.uint8))
    with pytest.raises(ValueError, match="at least 11x11"):
        ssim(a[:, :8, :8], a[:, :8, :8])
    with pytest.raises(ValueError, match="image tensor"):
        psnr(torch.zeros(16), torch.zeros(16))


def test_quality_sweep_on_tiny_images_is_monotone():
    spec = SynthSpec(n=2, width=48, height=32)
    images = [render(spec, i) for i in range(2)]
    rows = quality.quality_sweep(images, [10, 30, 50, 70, 90, 100], repeats=1)
    assert [r.quality for r in rows] == [10, 30, 50, 70, 90, 100]
    sizes = [r.bytes for r in rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)  # strictly growing
    assert rows[-1].psnr > rows[0].psnr and rows[-1].ssim > rows[0].ssim
    assert all(r.size == "48x32" and r.decode_ms > 0 and 0 < r.ssim <= 1 for r in rows)
    assert rows[0].bits_per_pixel == pytest.approx(8 * rows[0].bytes / (48 * 32))


def test_matching_quality_finds_the_size():
    from gpufeed.measure.synth import encode_jpeg

    img = render(SynthSpec(n=1, width=64, height=48), 0)
    for q in (20, 60, 90):
        found = quality.matching_quality(img, len(encode_jpeg(img, q)))
        assert len(encode_jpeg(img, found)) == len(encode_jpeg(img, q))


def test_ffmpeg_missing_says_how_to_install(monkeypatch):
    monkeypatch.setattr(quality, "ffmpeg_exe", lambda: None)
    with pytest.raises(FileNotFoundError, match="install"):
        quality.ffmpeg_jpeg(render(SynthSpec(n=1, width=32, height=32), 0), 3)


def test_the_ffmpeg_claim_runs_with_the_bundled_ffmpeg():
    """Lesson 04's -q:v 3 claim runs everywhere: imageio-ffmpeg ships the binary (quick-mode sizes)."""
    from PIL import Image

    exe = quality.ffmpeg_exe()
    assert exe is not None, "imageio-ffmpeg is a course dependency: it provides ffmpeg"
    img = render(SynthSpec(n=1, width=160, height=120, seed=3), 0)
    sizes = {qv: len(quality.ffmpeg_jpeg(img, qv)) for qv in (3, 31)}
    assert sizes[3] > sizes[31] > 0  # -q:v 3 keeps more than -q:v 31
    out = Image.open(io.BytesIO(quality.ffmpeg_jpeg(img, 3)))
    assert out.format == "JPEG" and out.size == (160, 120)
    q = quality.matching_quality(img, sizes[3], subsampling="4:4:4")
    assert 1 <= q <= 100


def test_pillow_subsamples_chroma_unless_told():
    from PIL import Image, JpegImagePlugin

    from gpufeed.measure.synth import encode_jpeg

    img = render(SynthSpec(n=1, width=64, height=48), 0)
    for q in (50, 95, 100):  # Pillow's default is 4:2:0 at every quality
        assert JpegImagePlugin.get_sampling(Image.open(io.BytesIO(encode_jpeg(img, q)))) == 2
    assert JpegImagePlugin.get_sampling(Image.open(io.BytesIO(encode_jpeg(img, 95, "4:4:4")))) == 0
    with pytest.raises(ValueError, match="subsampling"):
        encode_jpeg(img, 95, "4:1:1")
    rows = quality.quality_sweep([img], [95], subsampling="4:4:4", repeats=1)
    full = quality.quality_sweep([img], [95], repeats=1)
    assert rows[0].subsampling == "4:4:4" and full[0].subsampling == "4:2:0" and rows[0].psnr > full[0].psnr
