"""The dataset generator: N distinct JPEGs in ImageFolder layout, cut from real photos.

Each image is a random crop of one of the course's photos (``assets/photos``), resized to the
asked size, maybe flipped, colour-shifted and given a little sensor noise, then JPEG-encoded.
Image ``i`` depends only on ``(seed, i)``, so the same seed gives the same bytes whatever the
number of workers, and class ``c`` is always cut from photo ``c % len(photos)``, so with no more
classes than photos the labels are learnable. Used from ``notebooks/00_setup.ipynb`` on; the
command line is ``python -m gpufeed data synth``.

The folder appears all at once or not at all: images are written into a hidden staging folder
beside the destination, a manifest is written last, and the staging folder is renamed into place.
An interrupted run leaves no folder that a later run mistakes for a complete dataset.

:mod:`gpufeed.measure.datasets` lists every folder the lessons and ``gpufeed bench`` generate with
it and builds them all at once, before they run (``python -m gpufeed data prepare``).

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "tiny"
    >>> result = synth_folder(out, n=6, size=(64, 48), classes=2, progress=False)
    >>> sorted(p.relative_to(out).as_posix() for p in out.rglob("*.jpg"))[:3]
    ['class_00/000000.jpg', 'class_00/000002.jpg', 'class_00/000004.jpg']
    >>> result.reused, synth_folder(out, n=6, size=(64, 48), classes=2, progress=False).reused
    (False, True)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gpufeed.data import staging
from gpufeed.data.staging import free_bytes  # noqa: F401  (tests point synth.free_bytes at a tiny limit)
from gpufeed.measure.photos import load_photo, photo_paths

MANIFEST = "gpufeed-synth.json"
FORMAT_VERSION = 1
MIN_SIDE = 8
MAX_SIDE = 16384


class SynthError(ValueError):
    """Bad arguments or an unusable destination; the message says what to do."""


@dataclass(frozen=True)
class SynthSpec:
    """What to generate. :meth:`validate` checks it before anything touches the disk."""

    n: int
    width: int = 640
    height: int = 480
    quality: int = 90
    classes: int = 10
    seed: int = 0

    def validate(self) -> SynthSpec:
        if not isinstance(self.n, int) or self.n < 1:
            raise SynthError(f"--n must be a whole number of images, at least 1 (got {self.n})")
        for side, v in (("width", self.width), ("height", self.height)):
            if not MIN_SIDE <= v <= MAX_SIDE:
                raise SynthError(
                    f"--size: {side} must be between {MIN_SIDE} and {MAX_SIDE} pixels "
                    f"(got {self.width}x{self.height}); try 640x480"
                )
        if not 1 <= self.quality <= 100:
            raise SynthError(f"--quality must be a JPEG quality from 1 to 100 (got {self.quality}); try 90")
        if not 1 <= self.classes <= self.n:
            raise SynthError(f"--classes must be between 1 and --n ({self.n}) (got {self.classes})")
        if self.seed < 0:
            raise SynthError(f"--seed must be 0 or more (got {self.seed})")
        return self


@dataclass
class SynthResult:
    """What :func:`synth_folder` produced: the folder, how many files and bytes, and whether it
    found the same dataset already there (``reused``) instead of generating it."""

    path: Path
    n: int
    total_bytes: int
    reused: bool
    seconds: float


def parse_size(text: str) -> tuple[int, int]:
    """``"640x480"`` to ``(640, 480)`` (width first, as image sizes are spoken).

    Example:
        >>> parse_size("640x480"), parse_size(" 224X224 ")
        ((640, 480), (224, 224))
    """
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m:
        raise SynthError(f"--size must look like WIDTHxHEIGHT, e.g. 640x480 (got {text!r})")
    return int(m.group(1)), int(m.group(2))


def class_name(c: int) -> str:
    return f"class_{c:02d}"


def render(spec: SynthSpec, index: int):
    """Image ``index`` of the dataset as a PIL RGB image of ``spec``'s size (deterministic)."""
    from PIL import Image

    rng = np.random.default_rng([spec.seed, index])  # one stream per image: order-independent
    photos = photo_paths()
    photo = load_photo(photos[(index % spec.classes) % len(photos)])
    pw, ph = photo.size
    # Random crop: 10-100% of the photo's area, aspect ratio within ~20% of the target's.
    area = rng.uniform(0.1, 1.0) * pw * ph
    aspect = spec.width / spec.height * float(np.exp(rng.uniform(-0.2, 0.2)))
    cw = min(pw, max(1.0, (area * aspect) ** 0.5))
    ch = min(ph, max(1.0, (area / aspect) ** 0.5))
    x0, y0 = rng.uniform(0, pw - cw), rng.uniform(0, ph - ch)
    img = photo.resize((spec.width, spec.height), Image.BICUBIC, box=(x0, y0, x0 + cw, y0 + ch))
    flip = rng.random() < 0.5
    gain = rng.uniform(0.85, 1.15, size=3)  # colour cast per channel
    gamma = float(np.exp(rng.uniform(-0.3, 0.3)))  # brighter or darker
    # Colour shift as a lookup table per channel (768 entries): far cheaper than pow() per pixel.
    lut = np.clip((np.arange(256) / 255.0) ** gamma * gain[:, None], 0.0, 1.0) * 255.0  # [3, 256]
    img = img.point(np.rint(lut).astype(np.int64).ravel().tolist())
    if flip:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    # Sensor-like noise, ~1.5 grey levels: real photos are never perfectly smooth, and noise-free
    # upscaled crops would compress unrealistically well.
    noise = rng.standard_normal((spec.height, spec.width, 3), dtype=np.float32) * 1.5
    a = np.asarray(img, dtype=np.int16) + np.rint(noise).astype(np.int16)  # [H, W, 3]
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


#: Pillow's ``subsampling=`` values by name: 0 keeps full colour resolution, 2 halves it both ways.
SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}


def encode_jpeg(img, quality: int, subsampling: str | int | None = None) -> bytes:
    """JPEG bytes of a PIL image at ``quality`` (1-100, Pillow's scale).

    ``subsampling``: ``None`` keeps Pillow's default, which is **4:2:0 at every quality** (the
    colour planes at half width and half height, even at 95 and 100: that caps the PSNR at the top
    of the scale); ``"4:4:4"`` (or 0) keeps full colour resolution, like ``ffmpeg`` does from RGB.

    Example:
        >>> img = render(SynthSpec(n=1, width=64, height=48), 0)
        >>> len(encode_jpeg(img, 95, "4:4:4")) > len(encode_jpeg(img, 95))
        True
    """
    extra = {}
    if subsampling is not None:
        if subsampling not in SUBSAMPLING and subsampling not in SUBSAMPLING.values():
            raise ValueError(f"encode_jpeg(subsampling={subsampling!r}): give one of {list(SUBSAMPLING)} or None")
        extra["subsampling"] = SUBSAMPLING.get(subsampling, subsampling)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, **extra)
    return buf.getvalue()


def relative_path(spec: SynthSpec, index: int) -> str:
    return f"{class_name(index % spec.classes)}/{index:06d}.jpg"


def _write_range(spec: SynthSpec, staging: str, start: int, stop: int) -> int:
    """Renders and writes images ``start..stop-1`` into ``staging``; returns the bytes written."""
    total = 0
    for i in range(start, stop):
        data = encode_jpeg(render(spec, i), spec.quality)
        with open(os.path.join(staging, relative_path(spec, i)), "wb") as f:
            f.write(data)
        total += len(data)
    return total


def estimate_bytes(spec: SynthSpec) -> int:
    """A generous upper estimate of the dataset's size on disk, for the free-space check."""
    bytes_per_pixel = 0.6 + 2.4 * (spec.quality / 100) ** 4  # ~0.8 at q90, 3 at q100 (noisy photos)
    return int(spec.n * (spec.width * spec.height * bytes_per_pixel + 4096))


def read_manifest(folder: Path) -> dict | None:
    """The generator's manifest in ``folder``, or None if there is none or it is unreadable."""
    return staging.read_manifest(folder, MANIFEST, "gpufeed-synth")


def _check_destination(out: Path, spec: SynthSpec, overwrite: bool) -> bool:
    """True if ``out`` already holds this very dataset; raises if it holds anything else."""
    if out.is_file() or (out.exists() and not out.is_dir()):
        raise SynthError(f"--out {out} is a file; give a folder path (the folder will be created)")
    if not out.exists() or not any(out.iterdir()):
        return False
    manifest = read_manifest(out)
    if manifest is not None and manifest.get("spec") == asdict(spec):
        return True
    if overwrite and manifest is not None:
        return False
    what = "a different generated dataset" if manifest else "files that gpufeed did not write"
    hint = "pass --overwrite to replace it, or" if manifest else ""
    raise SynthError(f"--out {out} already holds {what}; {hint} choose a new folder".replace("  ", " "))


def synth_folder(
    out: str | os.PathLike,
    n: int,
    size: tuple[int, int] = (640, 480),
    quality: int = 90,
    classes: int | None = None,
    seed: int = 0,
    workers: int = 1,
    progress: bool | None = None,
    overwrite: bool = False,
    pool: Executor | None = None,
) -> SynthResult:
    """Writes ``n`` distinct JPEGs to ``out/class_XX/NNNNNN.jpg``, or finds them already there.

    Args:
        out: the destination folder; created with its parents; must be new, empty, or hold the
            same dataset (then nothing is done and ``reused`` is True).
        n: number of images.
        size: (width, height) in pixels.
        quality: JPEG quality, 1-100.
        classes: number of class folders (default: 10, or ``n`` if smaller); image ``i`` goes to
            class ``i % classes``.
        seed: the same seed gives the same bytes.
        workers: processes to render with (the bytes do not depend on it).
        progress: show a progress bar; None: where someone watches (:func:`gpufeed.data.progress_bar.show_progress`).
        overwrite: replace a *different* dataset that gpufeed generated earlier in ``out``.
        pool: processes to render with, shared by several folders
            (:func:`gpufeed.measure.datasets.prepare`, which passes its size as ``workers``); default:
            a new pool of ``workers`` processes for this folder (none for 1).

    Raises:
        SynthError: bad arguments, an unusable destination, too little disk space, or a full disk;
            nothing is left behind.
    """
    if classes is None:
        classes = min(10, n) if isinstance(n, int) and n >= 1 else 1
    spec = SynthSpec(n, size[0], size[1], quality, classes, seed).validate()
    out = Path(out).expanduser().absolute()
    t0 = time.perf_counter()
    if _check_destination(out, spec, overwrite):
        manifest = read_manifest(out) or {}
        return SynthResult(out, spec.n, manifest.get("total_bytes", 0), True, time.perf_counter() - t0)
    staging.prepare_parent(out, SynthError, "--out")
    staging.check_space(estimate_bytes(spec), free_bytes(out.parent), out.parent, SynthError,
                        "choose a smaller --n or --size")
    with staging.staged(out, SynthError, "--out") as tmp:
        for c in range(spec.classes):
            (tmp / class_name(c)).mkdir()
        total = _generate(spec, tmp, workers, progress, pool)
        manifest = {
            "format": "gpufeed-synth",
            "version": FORMAT_VERSION,
            "spec": asdict(spec),
            "classes": [class_name(c) for c in range(spec.classes)],
            "photos": [p.name for p in photo_paths()],
            "total_bytes": total,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")  # written last
    return SynthResult(out, spec.n, total, False, time.perf_counter() - t0)


def _generate(spec: SynthSpec, staging: Path, workers: int, progress: bool | None, pool: Executor | None) -> int:
    from gpufeed.measure.progress import bar as progress_bar

    # Chunks of up to 64 images, at least ~4 per process: a small folder keeps every process busy too.
    chunk = max(1, min(64, -(-spec.n // (4 * max(1, workers)))))
    ranges = [(s, min(s + chunk, spec.n)) for s in range(0, spec.n, chunk)]
    bar = progress_bar(total=spec.n, unit="img", desc=f"synth {spec.width}x{spec.height} q{spec.quality}", show=progress)
    total = 0
    try:
        if pool is None and workers <= 1:
            for s, e in ranges:
                total += _write_range(spec, str(staging), s, e)
                bar.update(e - s)
            return total
        with contextlib.ExitStack() as stack:
            if pool is None:
                import multiprocessing as mp

                # spawn: safe whatever the parent holds (CUDA, threads); the workers import only this module
                pool = stack.enter_context(ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")))
            futures = {pool.submit(_write_range, spec, str(staging), s, e): e - s for s, e in ranges}
            for fut in futures:
                total += fut.result()
                bar.update(futures[fut])
    finally:
        bar.close()
    return total
