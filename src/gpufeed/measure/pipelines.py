"""The input pipelines that ``python -m gpufeed bench`` and ``notebooks/11_together.ipynb`` compare.

Every pipeline reads the same generated dataset and yields the same thing: ``(images, targets)``
with ``images`` ``float32 [B, 3, crop, crop]`` normalised with ImageNet's mean and std, and
``targets`` ``int64 [B]``, both on the device the model runs on. The augmentation is the same
too: resize the short side to ``resize``, a random ``crop x crop`` window, a random horizontal flip.

* :func:`naive`: torchvision's ``ImageFolder`` of JPEGs, Pillow decode, ``Resize``, ``RandomCrop``,
  ``RandomHorizontalFlip``, ``ToTensor`` and ``Normalize`` per sample on the CPU, a ``DataLoader``
  with its defaults (no workers), float32 batches sent to the device (lesson 01's "naive").
* :func:`tuned`: the same JPEGs with the lessons 03-07 fixes: torchvision's decoder, ``uint8``
  until the device (4x fewer bytes to collate, pin and copy), one worker per core, pinned memory
  where CUDA exists, conversion and normalisation on the device.
* :func:`course`: decoded and resized once into a memmap (lesson 05), fetched a batch at a time
  (lesson 06), prefetched (lesson 08), cropped, flipped and normalised per sample in one batched
  step on the device (lesson 09): :class:`Course`, which is the library's front door,
  :class:`gpufeed.data.ImageLoader`, so the bench measures what the README tells learners to use.
* ``course_uint8`` (loader alone): :class:`Course` with ``uint8`` out, the crops as stored bytes and
  no float tail: what the CPU hands a GPU that normalises on its side (lesson 03), so the one
  pipeline here that yields something else; :data:`LOADER_ONLY` keeps it out of training.
* :func:`dali`: DALI reads, decodes, crops, flips and normalises (lesson 10), where installed.
* :func:`resident`: batches already on the device: the ceiling every loader is measured against.

The memmap stores the centre ``resize x resize`` square; the JPEG pipelines crop anywhere in the
resized image (a little wider for non-square photos). That is the one difference in what they see.

The crop, flip and normalise are :mod:`gpufeed.data.transforms` (one implementation for all).

Example:
    >>> [w.crop for w in (TINY, QUICK, FULL_CPU, FULL_GPU)]
    [32, 112, 224, 224]
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, CropFlip, normalize

#: The pipelines in the order the course builds them.
ORDER = ("naive", "tuned", "course", "dali")
#: The training step's models (torchvision names) and how the results name them.
MODELS = {"resnet18": "ResNet-18", "resnet50": "ResNet-50"}
#: Pipelines timed as loaders only: their batches are not a model's input.
LOADER_ONLY = ("course_uint8",)


class PipelineError(ValueError):
    """The benchmark's dataset could not be made or read; the message names the folder and what to do."""


@dataclass(frozen=True)
class Workload:
    """What every pipeline reads and makes: one dataset, one augmentation, one batch size.

    Attributes:
        n: images in the dataset. jpeg_size: (width, height) of the JPEGs. quality: their JPEG quality.
        resize: the short side after resizing (and the memmap's square side). crop: the model's input side.
        batch: images per batch. classes: class folders.
        model: the torchvision model of the training step (a key of :data:`MODELS`).
    """

    n: int
    jpeg_size: tuple[int, int]
    resize: int
    crop: int
    batch: int
    quality: int = 90
    classes: int = 10
    model: str = "resnet18"

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"Workload: model must be one of {sorted(MODELS)} (got {self.model!r})")
        if not 0 < self.crop <= self.resize <= min(self.jpeg_size):
            raise ValueError(f"Workload: need 0 < crop <= resize <= the JPEGs' short side (got crop={self.crop}, "
                             f"resize={self.resize}, jpeg_size={self.jpeg_size})")
        if self.batch < 1 or self.n < self.batch:
            raise ValueError(f"Workload: need 1 <= batch <= n (got batch={self.batch}, n={self.n})")

    def to_dict(self) -> dict:
        return asdict(self)

    def folders(self) -> tuple[str, str]:
        """The names of this workload's JPEG folder and of the memmap made from it (:func:`prepare`).

        Example:
            >>> TINY.folders()
            ('jpeg-64x48-q90-n16-c2', 'memmap-40-jpeg-64x48-q90-n16-c2')
        """
        (jw, jh), r = self.jpeg_size, self.resize
        jpeg = f"jpeg-{jw}x{jh}-q{self.quality}-n{self.n}-c{self.classes}"
        return jpeg, f"memmap-{r}-{jpeg}"


#: Sizes: a test's few images; the 2-core CI run; a learner's CPU; a GPU (the talks' 640x480 JPEGs, 224
#: crops, and the loader-efficiency bar of the course: a ResNet-50 in bf16, channels-last, batches of 256).
TINY = Workload(n=16, jpeg_size=(64, 48), resize=40, crop=32, batch=4, classes=2)
QUICK = Workload(n=256, jpeg_size=(320, 240), resize=128, crop=112, batch=32)
FULL_CPU = Workload(n=1024, jpeg_size=(640, 480), resize=256, crop=224, batch=64)
FULL_GPU = Workload(n=8192, jpeg_size=(640, 480), resize=256, crop=224, batch=256, model="resnet50")


def workload(quick: bool, device) -> Workload:
    """The workload for this run: :data:`QUICK`, or the full size for the device's kind."""
    if quick:
        return QUICK
    return FULL_GPU if torch.device(device).type == "cuda" else FULL_CPU


@dataclass
class Data:
    """Where a workload's dataset lives: the JPEG folder, the memmap made from it, and build times (s)."""

    jpeg: Path
    memmap: Path
    synth_s: float
    memmap_s: float


def prepare(w: Workload, root: str | os.PathLike, *, workers: int = 1, progress: bool | None = None) -> Data:
    """Generates the JPEG folder and the memmap made from it under ``root``; a second call reuses them.

    ``progress``: bars for both builds; None: where someone watches (:func:`gpufeed.data.progress_bar.show_progress`).

    The memmap build is the one-off price of the course pipeline (decode and resize once); it is
    reported beside the throughputs, not hidden.
    """
    from gpufeed.data.memmap import MemmapError, build_memmap
    from gpufeed.data.progress_bar import show_progress
    from gpufeed.measure.synth import SynthError, synth_folder

    root = Path(root)
    progress = show_progress() if progress is None else progress
    jpeg_name, memmap_name = w.folders()
    try:
        jpeg = synth_folder(root / jpeg_name, n=w.n, size=w.jpeg_size, quality=w.quality, classes=w.classes,
                            workers=workers, progress=progress)
        mm = build_memmap(jpeg.path, root / memmap_name, size=(w.resize, w.resize), workers=workers,
                          reuse=True, progress=progress)
    except (SynthError, MemmapError) as e:
        raise PipelineError(f"cannot prepare the benchmark's dataset under {root}: {e}") from None
    return Data(Path(jpeg.path), Path(mm.path), 0.0 if jpeg.reused else jpeg.seconds,
                0.0 if mm.reused else mm.seconds)


def naive_transform(w: Workload):
    """The per-sample transform everyone starts with (torchvision v1 API, Pillow images in, float out)."""
    from torchvision import transforms as T

    return T.Compose([T.Resize(w.resize), T.RandomCrop(w.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class JpegUint8:
    """A picklable per-sample transform for JPEG files: decode (torchvision or TorchCodec), resize,
    random crop and flip, all in ``uint8``; the float conversion waits for the device (lesson 03)."""

    def __init__(self, w: Workload):
        self.resize, self.crop_flip = w.resize, CropFlip(w.crop)

    def __call__(self, path: str) -> torch.Tensor:
        from torchvision.transforms import v2

        from gpufeed.data.jpeg import decode_jpeg

        with open(path, "rb") as f:
            image = decode_jpeg(f.read())  # uint8 [3, H, W]
        image = v2.functional.resize(image, [self.resize], antialias=True)
        return self.crop_flip(image)


def _jpeg_loader(path: str) -> str:
    return path  # ImageFolder hands the path to the transform, which reads and decodes it


def naive_loader(data: Data, w: Workload, workers: int = 0):
    """The DataLoader of :func:`naive`: torchvision's defaults. With ``workers`` (the second rung
    of lesson 11's ladder) the workers persist across epochs, as in :func:`tuned_loader`."""
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    return DataLoader(ImageFolder(str(data.jpeg), transform=naive_transform(w)), batch_size=w.batch,
                      shuffle=True, drop_last=True, num_workers=workers, persistent_workers=workers > 0)


def naive(data: Data, w: Workload, device, loader=None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Lesson 01's naive loop: default DataLoader, per-sample float transforms, float32 on the wire.
    ``loader``: a :func:`naive_loader` to reuse (default: a new one, without workers)."""
    for images, targets in naive_loader(data, w) if loader is None else loader:
        yield images.to(device), targets.to(device)


def tuned_loader(data: Data, w: Workload, device, workers: int, dataset=None):
    """The DataLoader of :func:`tuned` (kept for reuse across epochs: its workers persist).

    ``dataset``: another map-style dataset of ``uint8`` samples to load with the same settings
    (lesson 11's ladder passes the memmap read per sample); default: the JPEG folder.
    """
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    cuda = torch.device(device).type == "cuda"
    if dataset is None:
        dataset = ImageFolder(str(data.jpeg), transform=JpegUint8(w), loader=_jpeg_loader)
    return DataLoader(dataset, batch_size=w.batch, shuffle=True, drop_last=True, num_workers=workers, pin_memory=cuda,
                      persistent_workers=workers > 0, prefetch_factor=4 if workers else None)


def tuned(loader, device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of :func:`tuned_loader`: uint8 batches, copied (asynchronously from pinned
    memory on CUDA), then converted and normalised on the device."""
    for images, targets in loader:
        images = images.to(device, non_blocking=True)
        yield normalize(images, torch.float32, IMAGENET_MEAN, IMAGENET_STD), targets.to(device, non_blocking=True)


class Course:
    """The course pipeline: the front door :class:`gpufeed.data.ImageLoader` (memmap +
    :class:`~gpufeed.data.loader.FastLoader` + prefetching + per-sample crop/flip/normalise).

    Each ``iter()`` is one epoch (reshuffled). On CUDA: gathered into pinned memory on a thread,
    copied and augmented on a side stream; on the CPU: cropped and normalised straight from the
    memmap by a pool of threads, a few batches ahead. ``dtype=torch.uint8``: the crops alone.
    """

    def __init__(self, data: Data, w: Workload, device, seed: int = 0, dtype: torch.dtype = torch.float32):
        from gpufeed.data.image_loader import ImageLoader

        # The bench only counts each batch and drops it, so it opts into a fixed ring of output buffers
        # on the CPU (ImageLoader's safe default reuses a batch's memory only once nothing holds it: a
        # check per batch, and a pool of depth + 3 buffers instead of 2 that stay in the cache longer).
        # 2 is enough here: a batch is overwritten 2 batches later, and the bench holds one at a time.
        self.loader = ImageLoader(data.memmap, w.batch, device=device, crop=w.crop, seed=seed, drop_last=True,
                                  depth=2, reuse_buffers=2, dtype=dtype)
        self.device = self.loader.device

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self.loader)


def resident(w: Workload, device, batches: int = 4, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``batches`` ready batches already on the device: iterate over them to measure the model alone."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batches):
        x = torch.randint(0, 256, (w.batch, 3, w.crop, w.crop), dtype=torch.uint8, generator=g)
        y = torch.randint(0, w.classes, (w.batch,), generator=g)
        out.append((normalize(x.to(device), torch.float32, IMAGENET_MEAN, IMAGENET_STD), y.to(device)))
    return out
