"""A loader's settings, checked once: which samples in which batches, and what each image becomes.

FFCV separates its ``Loader`` (the settings, built once) from its ``EpochIterator`` (one pass); the
course's loaders do the same, and their settings live here, each checked in one place with an
error that names the loader you built:

* :class:`Batching`: what :class:`gpufeed.data.loader.FastLoader` and
  :class:`gpufeed.data.ImageLoader` share: the batch size, the order (shuffled, seeded, grouped),
  the shard of this rank, the last short batch, reused buffers;
* :class:`ImageSettings`: what :class:`gpufeed.data.ImageLoader` adds: the device, the crop and
  flip (or RandomResizedCrop's ``scale`` and ``ratio``), the normalisation and dtype, the layout,
  the depth of prefetching and the CPU's threads, checked against the stored images' size.

Example:
    >>> Batching(batch_size=64, owner="FastLoader").world_size
    1
    >>> Batching(batch_size=0, owner="FastLoader")
    Traceback (most recent call last):
    ...
    ValueError: FastLoader: batch_size must be a whole number, at least 1 (got 0)
    >>> s = ImageSettings.checked("ImageLoader", stored=(10, 3, 32, 32), path="mm", batch_size=4,
    ...                           crop=24)
    >>> s.crop, s.device.type, s.resume_key(10)["crop"]
    (24, 'cpu', 24)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

import torch

from gpufeed.data.augment import RATIO
from gpufeed.data.resized import check_range
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, output_stats


def _whole(owner: str, name: str, value, least: int, none_ok: bool = False) -> None:
    """A ValueError unless ``value`` is a whole number ``>= least`` (or None where allowed)."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        what = "None or " if none_ok else ""
        raise ValueError(f"{owner}: {name} must be {what}a whole number, at least {least} "
                         f"(got {value!r})")


@dataclass(frozen=True)
class Batching:
    """Which samples, in which batches (one check, for every loader that batches a dataset).

    Attributes:
        batch_size: samples per batch.
        shuffle: a new random order each epoch; False: the stored order.
        seed: the order of epoch ``e`` depends only on ``(seed, e)``.
        drop_last: drop each epoch's last, short batch.
        rank, world_size: this process's shard of every epoch (``0 <= rank < world_size``).
        group_size: FFCV's quasi-random order in blocks of this many neighbouring rows; None: a
            full shuffle.
        reuse_buffers: 0: every batch is fresh (or unheld) memory; ``k``: ``k`` buffers in turn.
        owner: the loader's name, which every error starts with (not part of the settings).
    """

    batch_size: int
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = False
    rank: int = 0
    world_size: int = 1
    group_size: int | None = None
    reuse_buffers: int = 0
    owner: str = field(default="loader", compare=False, repr=False)

    def __post_init__(self):
        _whole(self.owner, "batch_size", self.batch_size, 1)
        rank, world = self.rank, self.world_size
        if not (isinstance(world, int) and world >= 1 and isinstance(rank, int)
                and 0 <= rank < world):
            raise ValueError(f"{self.owner}: need 0 <= rank < world_size (got rank={rank}, "
                             f"world_size={world}); rank counts from 0")
        _whole(self.owner, "group_size", self.group_size, 1, none_ok=True)
        _whole(self.owner, "reuse_buffers", self.reuse_buffers, 0)

    def batching(self) -> dict:
        """These settings as keyword arguments (``FastLoader(data, **s.batching())``)."""
        return {f.name: getattr(self, f.name) for f in fields(Batching) if f.name != "owner"}


@dataclass(frozen=True)
class ImageSettings(Batching):
    """What :class:`gpufeed.data.ImageLoader` makes of each image, on top of :class:`Batching`
    (its docstring says what each one does). Build it with :meth:`checked`, which knows the stored
    images' size; the fields hold the checked values (``crop`` filled in, ``mean``/``std`` as
    tuples or None, ``threads`` a count, ``reuse_buffers`` 0 on CUDA)."""

    device: torch.device = torch.device("cpu")
    crop: int = 0
    flip: bool = True
    mean: tuple | None = IMAGENET_MEAN
    std: tuple | None = IMAGENET_STD
    dtype: torch.dtype = torch.float32
    depth: int = 2
    threads: int = 1
    scale: tuple[float, float] | None = None
    ratio: tuple[float, float] = RATIO
    memory_format: torch.memory_format = torch.contiguous_format

    @classmethod
    def checked(cls, owner: str, *, stored: tuple[int, ...], path, batch_size: int, device="cpu",
                crop: int | None = None, mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype=torch.float32,
                depth: int = 2, threads: int | None = None, scale=None, ratio=RATIO,
                memory_format=torch.contiguous_format, reuse_buffers: int = 0,
                **batching) -> ImageSettings:
        """The settings, each checked once, for images stored as ``stored`` (``(n, 3, height,
        width)``) in ``path`` (named in errors).

        Raises:
            ValueError: a bad argument: the message names it and says what to do.
        """
        device = torch.device(device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{owner}: device={str(device)!r} but torch sees no CUDA GPU; pass "
                             "device='cpu' (or gpufeed.config.device(), which picks what this "
                             "machine has)")
        _whole(owner, "depth", depth, 1)
        _whole(owner, "threads", threads, 1, none_ok=True)
        # a clear ValueError if they do not fit dtype
        mean, std = output_stats(owner, dtype, mean, std)
        n, _, height, width = stored
        crop = min(height, width) if crop is None else crop
        if scale is not None:  # resized: any output side
            scale, ratio = check_range(owner, "scale", scale), check_range(owner, "ratio", ratio)
            if isinstance(crop, bool) or not isinstance(crop, int) or crop < 1:
                raise ValueError(f"{owner}: crop={crop!r} must be a whole number >= 1 (the side of "
                                 "the resized crops)")
        elif (isinstance(crop, bool) or not isinstance(crop, int)
              or not 0 < crop <= min(height, width)):
            raise ValueError(f"{owner}: crop={crop!r} does not fit the stored {height}x{width} "
                             f"(height x width) images of {path}; pick 1..{min(height, width)} or "
                             "rebuild the memmap with a larger size")
        if memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError(f"{owner}: memory_format must be torch.contiguous_format or "
                             f"torch.channels_last (got {memory_format!r})")
        _whole(owner, "reuse_buffers", reuse_buffers, 0)
        threads = threads or min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                 else os.cpu_count() or 1)
        s = cls(batch_size=batch_size, device=device, crop=crop, mean=mean, std=std, dtype=dtype,
                depth=depth, threads=threads, scale=scale, ratio=ratio, memory_format=memory_format,
                reuse_buffers=reuse_buffers if device.type != "cuda" else 0, owner=owner,
                **batching)
        world, shard = s.world_size, n // s.world_size + (s.rank < n % s.world_size)
        if s.drop_last and s.batch_size > n // world:
            raise ValueError(f"{owner}: batch_size={s.batch_size} is larger than the {shard} "
                             f"images of {'this shard of ' if world > 1 else ''}{path}, so "
                             "drop_last=True would yield no batch; use a smaller batch_size or "
                             "drop_last=False")
        return s

    def resume_key(self, samples: int) -> dict:
        """What a saved position only means for (the same samples, order, crops and shard),
        JSON-ready: lists, not tuples, so that it reads the same after a round trip through JSON."""
        return {"samples": samples, "batch_size": self.batch_size, "seed": self.seed,
                "rank": self.rank, "world_size": self.world_size, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "group_size": self.group_size, "crop": self.crop,
                "flip": self.flip,
                "scale": self.scale and list(self.scale), "ratio": self.scale and list(self.ratio)}
