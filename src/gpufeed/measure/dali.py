"""NVIDIA DALI helpers for ``notebooks/10_dali.ipynb``; DALI itself is imported only inside functions.

DALI may be missing (its wheels are for Linux, one per CUDA major version, and large) and importing
it takes seconds, so importing this module never imports ``nvidia.dali``. What is here:

* :func:`available`, :func:`version`, :func:`install_hint`, :func:`device_id`: is DALI here, which
  one, how to install it for this machine's CUDA, and the ``device_id`` a pipeline takes (``None``:
  CPU-only mode, CPU operators only, which is how CI runs it);
* :func:`train_pipeline`: the benchmark's training pipeline (random crop and flip);
* :func:`eval_pipeline`: the deterministic part of a pipeline (read in order, decode, resize,
  normalise), and :func:`torchvision_eval`, the torchvision reference it is tested against;
* :class:`MemmapSource`: batches of a memmap dataset for ``fn.external_source``, so DALI only augments;
* :func:`tuned_folder` (with :func:`read_jpeg`): the tuned DataLoader's dataset that DALI is measured
  against, beside the untuned one;
* :func:`unpack`: a ``DALIGenericIterator`` batch as ``(images, int64 labels)``;
* :func:`reference_with_dali`: committed results that include DALI's numbers.

``GPUFEED_DALI=0`` makes :func:`available` say no, to run the lesson as a machine without DALI would.

Example:
    >>> import os
    >>> os.environ["GPUFEED_DALI"] = "0"
    >>> available(), "pip install" in install_hint()
    (False, True)
    >>> del os.environ["GPUFEED_DALI"]
"""

from __future__ import annotations

import importlib.util
import os
import platform
from pathlib import Path

import torch

from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD

ENV_DALI = "GPUFEED_DALI"
#: ImageNet's mean and std on the 0..255 scale, as ``fn.crop_mirror_normalize`` takes them for uint8 input.
MEAN255 = [255 * m for m in IMAGENET_MEAN]
STD255 = [255 * s for s in IMAGENET_STD]
#: How far :func:`eval_pipeline` may be from :func:`torchvision_eval`, in grey levels (0..255).
#: Inside a one-pixel frame: half a level (DALI rounds the resized image to uint8; the antialiased
#: filters are the same). The frame itself: the filters treat the border differently, so only the
#: mean over the whole image is bounded.
INTERIOR_TOLERANCE, MEAN_TOLERANCE = 0.51, 0.5  # + float32 rounding of the normalisation
#: The same bounds when DALI decodes with nvJPEG on the GPU ("mixed") and torchvision with
#: libjpeg-turbo: their IDCTs and chroma upsampling round differently, by a few grey levels at
#: edges. Wide enough for that, far below what a real mistake gives (swapped channels, a wrong
#: resize or normalisation: tens of grey levels on average). Not yet checked against a GPU run.
GPU_INTERIOR_TOLERANCE, GPU_MEAN_TOLERANCE = 16.0, 1.5


def available() -> bool:
    """True when ``nvidia.dali`` can be imported (not imported here), unless ``GPUFEED_DALI=0``."""
    if os.environ.get(ENV_DALI, "").strip().lower() in {"0", "false", "no", "off"}:
        return False
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):  # a broken or namespace-only "nvidia" package
        return False


def version() -> str | None:
    """The installed DALI wheel, e.g. ``"nvidia-dali-cuda130 2.4.0"``, or None (read from metadata)."""
    from importlib import metadata

    if not available():
        return None
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.startswith("nvidia-dali"):
            return f"{name} {dist.version}"
    return "nvidia-dali (version unknown)"


def install_hint() -> str:
    """How to install DALI on this machine: the wheel matching torch's CUDA major version."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return (f"DALI publishes wheels for Linux (x86_64, aarch64) only; this is {platform.system()} "
                f"{platform.machine()}. Run lesson 10 on Linux or Colab (`pip install nvidia-dali-cuda130` there).")
    cuda = torch.version.cuda
    major = int(cuda.split(".")[0]) if cuda else 13
    wheel = "nvidia-dali-cuda130" if major >= 13 else "nvidia-dali-cuda120"
    why = f"torch is built for CUDA {cuda}" if cuda else "torch has no CUDA build; DALI's CPU-only mode still works"
    return f"pip install {wheel}   ({why}; see https://docs.nvidia.com/deeplearning/dali/user-guide/docs/installation.html)"


def device_id() -> int | None:
    """``0`` when torch sees a GPU, else ``None``: DALI's CPU-only mode (no GPU operators)."""
    return 0 if torch.cuda.is_available() else None


def eval_pipeline(root: str | os.PathLike, size: tuple[int, int], *, batch_size: int = 16, num_threads: int = 1,
                  device_id: int | None = None):
    """A built DALI pipeline: read ``root`` in order, decode, resize to ``size`` (width, height), normalise.

    Outputs ``(images float32 [3, H, W] normalised, labels int32 [1])`` per sample. Decoding is on
    the GPU (``"mixed"``) when ``device_id`` is a GPU, else on the CPU. No randomness: it is what
    the test compares with :func:`torchvision_eval`.
    """
    from nvidia.dali import fn, pipeline_def, types

    from gpufeed.data.folder import scan

    width, height = size
    samples, _ = scan(root)
    files, targets = [p for p, _ in samples], [t for _, t in samples]

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id)
    def pipe():
        # The file list comes from gpufeed.data.folder.scan, not file_root: DALI's own listing also
        # takes hidden files (macOS "._x.jpg") for images and fails on them.
        jpegs, labels = fn.readers.file(files=files, labels=targets, random_shuffle=False, name="reader")
        images = fn.decoders.image(jpegs, device="cpu" if device_id is None else "mixed", output_type=types.RGB)
        images = fn.resize(images, resize_x=width, resize_y=height, antialias=True)  # uint8 HWC, rounded
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=MEAN255, std=STD255)
        return images, labels

    p = pipe()
    p.build()
    return p


def train_pipeline(root: str | os.PathLike, resize: int, crop: int, *, batch_size: int, num_threads: int = 1,
                   device_id: int | None = None, seed: int = 0):
    """A built DALI pipeline doing :mod:`gpufeed.measure.pipelines`' augmentation: read shuffled, decode,
    resize the short side to ``resize``, a random ``crop`` square, a random flip, normalise.

    Outputs ``(images float32 [3, crop, crop], labels int32 [1])`` per sample; the JPEGs are
    decoded on the GPU (``"mixed"``) when ``device_id`` is a GPU. Used by ``python -m gpufeed bench``.
    """
    from nvidia.dali import fn, pipeline_def, types

    from gpufeed.data.folder import scan

    samples, _ = scan(root)
    files, targets = [p for p, _ in samples], [t for _, t in samples]

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    def pipe():
        jpegs, labels = fn.readers.file(files=files, labels=targets, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device="cpu" if device_id is None else "mixed", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=resize, antialias=True)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", crop=(crop, crop), mean=MEAN255, std=STD255,
            crop_pos_x=fn.random.uniform(range=(0.0, 1.0)), crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
            mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    p = pipe()
    p.build()
    return p


def torchvision_eval(path: str | os.PathLike, size: tuple[int, int]) -> torch.Tensor:
    """The reference for :func:`eval_pipeline`: ``float32 [3, H, W]``, normalised.

    ``torchvision.io.decode_jpeg`` (libjpeg-turbo, like DALI's CPU decoder), ``v2.functional.resize``
    to exactly ``size`` (width, height) with antialiasing, scaled to [0, 1], normalised.
    """
    from torchvision.transforms.v2 import functional as F

    from gpufeed.data.jpeg import decode_torchvision

    image = decode_torchvision(Path(path).read_bytes())
    resized = F.resize(image.to(torch.float32), [size[1], size[0]], antialias=True) / 255
    return F.normalize(resized, list(IMAGENET_MEAN), list(IMAGENET_STD))


def grey_level_error(a: torch.Tensor, b: torch.Tensor) -> dict:
    """How far two normalised ``[3, H, W]`` images are, in grey levels: inside a one-pixel frame
    (max) and over the whole image (mean)."""
    levels = (a - b).abs() * torch.tensor(STD255).view(3, 1, 1)  # back to the 0..255 scale
    return {"interior_max": levels[:, 1:-1, 1:-1].max().item(), "mean": levels.mean().item(),
            "max": levels.max().item()}


class MemmapSource:
    """Batches of a memmap dataset (:mod:`gpufeed.data.memmap`) for ``fn.external_source``.

    Use as ``fn.external_source(source=MemmapSource(...), num_outputs=2, batch=True, cycle="raise",
    layout=["CHW", ""])``: each ``iter()`` is a new epoch of :class:`gpufeed.data.loader.FastLoader`
    (shuffled, seeded), each ``next()`` one batch ``(uint8 [B, 3, H, W], int64 [B])`` as NumPy arrays
    (no copy; DALI copies them into its own buffers). Epoch ``e``'s labels are
    ``targets[i]`` for ``i`` in ``loader.indices(e)``.

    Example:
        >>> src = MemmapSource((torch.zeros(5, 3, 2, 2, dtype=torch.uint8), torch.arange(5)), 2, shuffle=False)
        >>> [(images.shape, labels.tolist()) for images, labels in src]
        [((2, 3, 2, 2), [0, 1]), ((2, 3, 2, 2), [2, 3]), ((1, 3, 2, 2), [4])]
    """

    def __init__(self, data, batch_size: int, *, shuffle: bool = True, seed: int = 0):
        """``data``: a memmap folder, an :class:`~gpufeed.data.memmap.ImageData`, or ``(images, targets)``."""
        from gpufeed.data.loader import FastLoader
        from gpufeed.data.memmap import load_memmap

        if isinstance(data, (str, os.PathLike)):
            data = load_memmap(data)
        self.images, self.targets = (data.images, data.targets) if hasattr(data, "images") else data
        self.loader = FastLoader((self.images, self.targets), batch_size, shuffle=shuffle, seed=seed)

    def __iter__(self):
        for images, labels in self.loader:  # one epoch; the next iter() is the next epoch
            yield images.numpy(), labels.numpy()


def read_jpeg(path: str | os.PathLike) -> torch.Tensor:
    """One JPEG file decoded to ``uint8 [3, H, W]`` by :func:`gpufeed.data.jpeg.decode_jpeg`
    (libjpeg-turbo through TorchCodec or torchvision, no Pillow): ``ImageFolder``'s ``loader=`` for
    :func:`tuned_folder`, a module-level function so that DataLoader workers can pickle it."""
    from gpufeed.data.jpeg import decode_jpeg

    with open(path, "rb") as f:
        return decode_jpeg(f.read())


def tuned_folder(root: str | os.PathLike, size: tuple[int, int]):
    """The tuned DataLoader's dataset (lesson 10's baseline beside the untuned one): torchvision's
    ``ImageFolder`` that decodes with :func:`read_jpeg` and crops, resizes and flips on ``uint8``
    (:func:`gpufeed.data.augment.cpu_transform` with ``to_float=False``). Item ``i`` is
    ``(uint8 [3, *size], label)``: a quarter of float32's bytes through the workers; the batch is
    converted and normalised after the hand-over (:func:`gpufeed.data.augment.finish`).

    Example:
        >>> from gpufeed.measure.synth import synth_folder
        >>> import tempfile
        >>> root = synth_folder(tempfile.mkdtemp() + "/jpeg", n=4, size=(64, 48), classes=2, progress=False).path
        >>> image, label = tuned_folder(root, (32, 32))[0]
        >>> image.dtype, tuple(image.shape), label
        (torch.uint8, (3, 32, 32), 0)
    """
    from torchvision.datasets import ImageFolder

    from gpufeed.data.augment import cpu_transform

    return ImageFolder(str(root), transform=cpu_transform(size, to_float=False), loader=read_jpeg)


def unpack(batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` from a ``DALIGenericIterator`` batch (``[{"images": ..., "labels": ...}]``,
    one dict per pipeline); labels become ``int64 [B]``, as losses take them."""
    out = batch[0]
    return out["images"], out["labels"].reshape(-1).long()


def os_threads() -> int:
    """OS threads of this process, C++ ones included (DALI's pool): what ``threading`` cannot see.

    Example:
        >>> import threading
        >>> before, done = os_threads(), threading.Event()
        >>> t = threading.Thread(target=done.wait); t.start()
        >>> os_threads() - before
        1
        >>> done.set(); t.join()
    """
    import psutil  # counts the kernel's threads on Linux, macOS and Windows alike

    return psutil.Process().num_threads()


def reference_with_dali(name: str = "lesson10"):
    """The first committed ``(measurements, document)`` for ``name`` that holds DALI's numbers, or None."""
    from gpufeed.measure import results

    return next(results.committed(name, lambda doc: bool(doc.get("dali"))), None)
