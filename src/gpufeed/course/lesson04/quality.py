"""How much a JPEG loses: PSNR and SSIM in torch, and the quality sweep of lesson 04.

* **PSNR** (peak signal-to-noise ratio, dB): ``10 log10(MAX^2 / MSE)``; identical images give
  ``inf``. Above ~40 dB differences are hard to see; below ~30 dB they show.
* **SSIM** (structural similarity, Wang, Bovik, Sheikh and Simoncelli 2004): compares local means,
  contrasts and correlations in an 11x11 Gaussian window (sigma 1.5) with K1 = 0.01, K2 = 0.03,
  over the "valid" positions (no padding), then averages the map. Here it is computed **per RGB
  channel and averaged** (``luma=False``, the default), or on the BT.601 luma ``Y`` that JPEG
  itself uses (``luma=True``). 1 means identical.

Both are computed in float64 on whatever device the tensors are on. Taught in
``notebooks/04_jpeg.ipynb``.

Example:
    >>> a = torch.full((3, 16, 16), 100, dtype=torch.uint8)
    >>> round(psnr(a, a + 5), 4), ssim(a, a)
    (34.1514, 1.0)
"""

from __future__ import annotations

import math
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from gpufeed.data.jpeg import decode_replicated_chroma  # noqa: F401  lesson 04 calls it from here

#: BT.601 luma weights (R, G, B): what JPEG's YCbCr conversion uses.
LUMA = (0.299, 0.587, 0.114)


def _as_float(x: torch.Tensor, name: str) -> torch.Tensor:
    """``[C, H, W]`` or ``[N, C, H, W]`` (uint8 or float, 0..max) to float64 ``[N, C, H, W]``."""
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4):
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must be an image tensor [C, H, W] or [N, C, H, W] (got {got}); "
                         "turn a PIL image into one with gpufeed.course.lesson04.quality.to_tensor(img)")
    x = x.to(torch.float64)
    return x.unsqueeze(0) if x.dim() == 3 else x


def _pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = _as_float(a, "a"), _as_float(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"the images differ in shape: a is {tuple(a.shape)}, b is {tuple(b.shape)}; compare equal sizes")
    return x, y


def to_tensor(img) -> torch.Tensor:
    """A PIL image (or ``[H, W, 3]`` array) to ``uint8 [3, H, W]``."""
    import numpy as np

    return torch.from_numpy(np.array(img.convert("RGB") if hasattr(img, "convert") else img)).permute(2, 0, 1)


def mse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean squared error over every pixel and channel."""
    x, y = _pair(a, b)
    return float(((x - y) ** 2).mean())


def psnr(a: torch.Tensor, b: torch.Tensor, max_value: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB: ``10 log10(max_value^2 / MSE)``; ``inf`` when equal."""
    e = mse(a, b)
    return math.inf if e == 0 else 10.0 * math.log10(max_value**2 / e)


def gaussian_window(size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """The normalised 1-D Gaussian (float64, sums to 1); the 2-D window is its outer product.

    Example:
        >>> w = gaussian_window()
        >>> w.shape, round(float(w.sum()), 12), bool(w[5] == w.max())
        (torch.Size([11]), 1.0, True)
    """
    if size < 1 or size % 2 == 0:
        raise ValueError(f"window size must be odd and positive (got {size})")
    r = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(r**2) / (2 * sigma**2))
    return g / g.sum()


def _filter(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Separable Gaussian filter, "valid" positions only: ``[..., H, W] -> [..., H-k+1, W-k+1]``.

    Two 1-D passes (2k multiply-adds per pixel instead of k^2 for one k x k pass), each a sum of
    k shifted slices scaled by one weight: plain vectorised adds, several times faster on a CPU
    than a grouped ``conv2d`` with a 1 x k kernel, and exact to float64 rounding.
    """
    taps = g.tolist()
    k = len(taps)
    h, w = x.shape[-2] - k + 1, x.shape[-1] - k + 1
    rows = x[..., :, 0:w] * taps[0]  # horizontal pass: [..., H, W-k+1]
    for i in range(1, k):
        rows.add_(x[..., :, i:i + w], alpha=taps[i])
    out = rows[..., 0:h, :] * taps[0]  # vertical pass: [..., H-k+1, W-k+1]
    for i in range(1, k):
        out.add_(rows[..., i:i + h, :], alpha=taps[i])
    return out


def ssim(a: torch.Tensor, b: torch.Tensor, max_value: float = 255.0, luma: bool = False,
         window: int = 11, sigma: float = 1.5, k1: float = 0.01, k2: float = 0.03) -> float:
    """Mean SSIM (Wang et al. 2004) of two images; per RGB channel averaged, or on luma.

    Args:
        a, b: ``[C, H, W]`` or ``[N, C, H, W]`` images, uint8 or float in 0..``max_value``;
            at least ``window`` pixels high and wide.
        max_value: the dynamic range L (255 for uint8).
        luma: compare the BT.601 luma of RGB images instead of each channel.
        window, sigma, k1, k2: the paper's constants; change them only to experiment.
    """
    x, y = _pair(a, b)
    if luma:
        if x.shape[1] != 3:
            raise ValueError(f"luma=True needs RGB images (3 channels), got {x.shape[1]}")
        w = torch.tensor(LUMA, dtype=torch.float64, device=x.device).view(1, 3, 1, 1)
        x, y = (x * w).sum(1, keepdim=True), (y * w).sum(1, keepdim=True)
    if min(x.shape[-2:]) < window:
        raise ValueError(f"SSIM needs images at least {window}x{window} pixels (got {tuple(x.shape[-2:])})")
    c1, c2 = (k1 * max_value) ** 2, (k2 * max_value) ** 2
    g = gaussian_window(window, sigma)
    mu_x, mu_y = _filter(x, g), _filter(y, g)
    # Local (co)variances as E[xy] - E[x]E[y] over the same Gaussian window.
    sxx = _filter(x * x, g) - mu_x * mu_x
    syy = _filter(y * y, g) - mu_y * mu_y
    sxy = _filter(x * y, g) - mu_x * mu_y
    num = (2 * mu_x * mu_y + c1) * (2 * sxy + c2)
    den = (mu_x * mu_x + mu_y * mu_y + c1) * (sxx + syy + c2)
    return float((num / den).mean())


@dataclass
class QualityPoint:
    """One row of the quality sweep: means over the images of one size at one quality."""

    size: str
    quality: int
    bytes: float  # mean file size
    bits_per_pixel: float
    psnr: float  # dB, mean over images
    ssim: float
    decode_ms: float  # median time to decode one image, in milliseconds
    subsampling: str = "4:2:0"  # chroma subsampling of the JPEGs (Pillow's default: 4:2:0)
    decode_samples: list[float] = field(default_factory=list)  # ms per image, one per round of the sweep

    def as_dict(self) -> dict:
        return asdict(self)


def quality_sweep(images: Sequence, qualities: Sequence[int], decode: Callable[[bytes], torch.Tensor] | None = None,
                  repeats: int = 5, luma: bool = False, subsampling: str | None = None) -> list[QualityPoint]:
    """Encodes every image at every quality; file size, PSNR, SSIM and decode time per quality.

    The decodes of all the qualities are timed **in turns** (q10, q30, ..., q10, q30, ...:
    :func:`gpufeed.measure.harness.interleave`), so that a burst of other work slows every quality
    a little rather than one a lot, and two qualities compare round by round
    (``QualityPoint.decode_samples``, for :func:`gpufeed.measure.verdict.compare` with ``paired=True``).

    Args:
        images: PIL RGB images of one size, the uncompressed originals (e.g. ``synth.render``).
        qualities: JPEG qualities, 1-100 (Pillow's scale).
        decode: bytes to ``uint8 [3, H, W]``; default :func:`gpufeed.data.jpeg.decode_pil`.
        repeats: rounds of timed decodes, each decoding every image at every quality.
        luma: SSIM on luma instead of per channel.
        subsampling: ``"4:4:4"`` to keep full colour resolution; None: Pillow's default, 4:2:0 at
            every quality (see :func:`gpufeed.measure.synth.encode_jpeg`).
    """
    from gpufeed.data.jpeg import decode_pil
    from gpufeed.measure import progress
    from gpufeed.measure.harness import interleave
    from gpufeed.measure.synth import encode_jpeg

    if not images:
        raise ValueError("quality_sweep needs at least one image")
    decode = decode or decode_pil
    w, h = images[0].size
    originals = [to_tensor(im) for im in images]
    rows, encoded = [], {}
    for q in progress.bar(qualities, desc=f"quality sweep {w}x{h}, {len(images)} images", unit="quality"):
        data = encoded[q] = [encode_jpeg(im, q, subsampling) for im in images]
        decoded = [decode(d) for d in data]
        mean_bytes = statistics.fmean(len(d) for d in data)
        rows.append(QualityPoint(
            size=f"{w}x{h}", quality=int(q), bytes=mean_bytes, bits_per_pixel=8 * mean_bytes / (w * h),
            psnr=statistics.fmean(psnr(o, d) for o, d in zip(originals, decoded)),
            ssim=statistics.fmean(ssim(o, d, luma=luma) for o, d in zip(originals, decoded)),
            decode_ms=0.0, subsampling=subsampling or "4:2:0"))
    timed = interleave({f"q{q}": (lambda data=data: [decode(d) for d in data]) for q, data in encoded.items()},
                       repeats=repeats, warmup=1, desc=f"decoding {w}x{h} at each quality, in turns")
    for row, m in zip(rows, timed):  # ms per image
        row.decode_samples = [t / len(images) * 1e3 for t in m.samples]
        row.decode_ms = m.median / len(images) * 1e3
    return rows


def matching_quality(img, target_bytes: int, subsampling: str | None = None) -> int:
    """The Pillow quality whose JPEG of ``img`` is closest in size to ``target_bytes``.

    Bisection on quality 1..100 (file size grows with quality), then the closer neighbour.
    ``subsampling`` as in :func:`gpufeed.measure.synth.encode_jpeg` (``"4:4:4"`` to match ffmpeg).
    """
    from gpufeed.measure.synth import encode_jpeg

    size = lambda q: len(encode_jpeg(img, q, subsampling))  # noqa: E731
    lo, hi = 1, 100
    while lo < hi:
        mid = (lo + hi) // 2
        if size(mid) < target_bytes:
            lo = mid + 1
        else:
            hi = mid
    return min({max(1, lo - 1), lo}, key=lambda q: abs(size(q) - target_bytes))


def ffmpeg_exe() -> str | None:
    """The ffmpeg binary: the one imageio-ffmpeg ships with the course's environment, else PATH's.

    imageio-ffmpeg is a dependency of the course, so every learner has the same ffmpeg (and so
    measures the same ``-q:v`` mapping); ``None`` if neither exists.
    """
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):  # not installed, or no binary for this platform
        return shutil.which("ffmpeg")


def ffmpeg_jpeg(img, qv: int, ffmpeg: str | None = None) -> bytes:
    """``img`` encoded by ``ffmpeg -q:v qv`` (its MJPEG scale: 2 best, 31 worst).

    From an RGB image ffmpeg's MJPEG encoder keeps full colour resolution (4:4:4), unlike Pillow's
    default 4:2:0: compare it with ``encode_jpeg(img, q, "4:4:4")``.

    Raises:
        FileNotFoundError: no ffmpeg (see :func:`ffmpeg_exe`).
    """
    exe = ffmpeg or ffmpeg_exe()
    if exe is None:
        raise FileNotFoundError("ffmpeg is not installed: `pip install imageio-ffmpeg` (a course dependency) "
                                "or install ffmpeg (`apt install ffmpeg`) to map -q:v to a Pillow quality")
    with tempfile.TemporaryDirectory() as tmp:
        # PPM: the raw pixels, written in milliseconds where a PNG of 1280x960 takes most of a second
        # to compress; ffmpeg reads the same RGB values from either (alpha it would drop anyway)
        src, dst = Path(tmp) / "in.ppm", Path(tmp) / "out.jpg"
        (img if img.mode in ("RGB", "L") else img.convert("RGB")).save(src)
        subprocess.run([exe, "-loglevel", "error", "-y", "-i", str(src), "-q:v", str(qv), str(dst)],
                       check=True, capture_output=True, timeout=120)
        return dst.read_bytes()
