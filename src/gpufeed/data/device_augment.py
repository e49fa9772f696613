"""Crop + flip + normalise of a whole ``uint8`` batch where it lives: :class:`DeviceAugment`.

Each sample gets its own crop and flip, drawn on the CPU from a seeded generator in batch order
(:func:`gpufeed.data.transforms.draw_crops`: the same batches on every device); then one batched
step on the batch's device: on a GPU one gather (:func:`gpufeed.data.transforms.crop_flip`) and
one fused multiply-add (:func:`gpufeed.data.transforms.normalize`), on the CPU the one pass of
:func:`gpufeed.data.cpu_crops.crop_flip_normalize`. :class:`gpufeed.data.ImageLoader` uses it for
its fixed-size crop, as it uses :class:`gpufeed.data.resized.ResizedCropAugment` for the resized
one. Taught in ``notebooks/11_together.ipynb``.

Example:
    >>> aug = DeviceAugment(crop=4, seed=0, dtype=torch.uint8)
    >>> aug(torch.full((2, 3, 6, 6), 7, dtype=torch.uint8)).unique().tolist()
    [7]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from gpufeed.data.cpu_crops import crop_flip_normalize, crop_tasks
from gpufeed.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    crop_flip,
    draw_crops,
    normalize,
    output_stats,
)


class DeviceAugment:
    """Random crop + flip + float + normalise of a whole ``uint8 [B, C, H, W]`` batch where it
    lives.

    Each sample gets its own crop and flip, drawn on the CPU from a seeded generator in batch order
    (the same batches on every device); then one batched step on the batch's device: on a GPU one
    gather and one fused multiply-add, on the CPU one slice copy per sample (converting to float)
    and the multiply-add in place in that new memory.

    Args:
        crop: the square output's side.
        seed: seeds the generator (or pass ``generator``).
        mean, std: per channel on the [0, 1] scale; None for both: only the scaling to [0, 1].
        flip: draw random horizontal flips (probability 1/2); False: none.
        dtype: the output's dtype: floating (normalised), or ``torch.uint8``, the crops alone as
            stored bytes (for a model or a device that normalises them itself; see
            :func:`~gpufeed.data.transforms.output_stats`).
        buffers: 0 (the default): every call returns new memory. ``k > 0`` (CPU only): write into
            ``k`` reused buffers in turn, which saves a page fault per 4 KiB of fresh memory but
            means a result is **overwritten ``k`` calls later**: use (or copy) it before then.
        generator: a ``torch.Generator`` to draw from instead of one seeded by ``seed``.
        memory_format: the output's layout on a GPU (``torch.channels_last`` for a channels-last
            model: the ``uint8`` crops are laid out so, and the normalisation keeps the layout).

    Example:
        >>> aug = DeviceAugment(crop=4, seed=0)
        >>> out = aug(torch.full((2, 3, 6, 6), 255, dtype=torch.uint8))
        >>> out.shape, round(out[0, 0, 0, 0].item(), 3)
        (torch.Size([2, 3, 4, 4]), 2.249)
    """

    def __init__(self, crop: int, seed: int = 0, mean=IMAGENET_MEAN, std=IMAGENET_STD, *,
                 flip: bool = True, dtype: torch.dtype = torch.float32, buffers: int = 0,
                 generator: torch.Generator | None = None,
                 memory_format: torch.memory_format = torch.contiguous_format):
        if not isinstance(buffers, int) or buffers < 0:
            raise ValueError(f"DeviceAugment: buffers must be a whole number >= 0, got {buffers!r}")
        self.crop, self.flip, self.dtype = crop, flip, dtype
        self.mean, self.std = output_stats("DeviceAugment", dtype, mean, std)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(seed)
        self.buffers, self._ring, self._slot = buffers, [], 0
        self.memory_format = memory_format

    def params(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch's corners ``int64 [B, 2]`` and flips ``bool [B]`` (CPU), in batch
        order."""
        return draw_crops(x.shape[0], tuple(x.shape[-2:]), self.crop, self.generator,
                          0.5 if self.flip else 0.0)

    def tasks(self, src: torch.Tensor, rows: Sequence[int],
              params: tuple[torch.Tensor, torch.Tensor],
              out: torch.Tensor) -> list[Callable[[], None]]:
        """The CPU's work for ``rows`` of ``src`` with :meth:`params`' draw
        (:func:`~gpufeed.data.cpu_crops.crop_tasks`)."""
        return crop_tasks(src, rows, *params, self.crop, out, self.mean, self.std)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        corners, flips = self.params(x)
        if x.is_cuda:  # one gather, then one fused multiply-add into fresh (cached) GPU memory
            crops = crop_flip(x, corners, flips, self.crop)
            crops = crops.contiguous(memory_format=self.memory_format)  # in uint8: 1/4 of the bytes
            return (crops if self.dtype == torch.uint8
                    else normalize(crops, self.dtype, self.mean, self.std))
        shape = (x.shape[0], x.shape[1], self.crop, self.crop)
        if self.buffers == 0:
            buf = torch.empty(shape, dtype=self.dtype)
        else:
            if len(self._ring) < self.buffers or self._ring[self._slot].shape != shape:
                self._ring[self._slot:self._slot + 1] = [torch.empty(shape, dtype=self.dtype)]
            buf = self._ring[self._slot]
            self._slot = (self._slot + 1) % self.buffers
        # one pass per sample: read uint8, write float, scale it while it is in the cache (uint8:
        # the crop alone)
        return crop_flip_normalize(x, range(x.shape[0]), corners, flips, self.crop, buf, self.mean,
                                   self.std)
