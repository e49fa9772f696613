"""RandomResizedCrop for whole batches: the ImageNet recipe's crop, drawn per sample, made where
the batch lives.

:class:`ResizedCropAugment` is :class:`gpufeed.data.device_augment.DeviceAugment`'s sibling for
``ImageLoader(..., scale=(0.08, 1.0))``: each sample gets a box whose area is a uniform fraction
``scale`` of the stored image and whose aspect ratio is log-uniform in ``ratio``
(:func:`gpufeed.data.augment.crop_boxes`, torchvision's rule), resized to ``size x size`` with
antialiased bilinear interpolation, flipped with probability 1/2, normalised. The boxes and flips
are drawn on the CPU from one generator in batch order, so a seed gives the same batches on every
device. Two ways to the same values:

* on a GPU, the whole batch at once: :func:`gpufeed.data.augment.crop_resize`, two batched
  matmuls with per-sample resampling matrices (one call per batch, what a GPU does best);
* on the CPU, one ``interpolate`` per sample straight out of the memmap
  (:meth:`ResizedCropAugment.tasks`, :data:`gpufeed.data.cpu_crops.GROUP` samples a task on the
  crop pool): the separable kernel
  reads only the box, where the dense matrices would multiply by the whole image.

Sample ``i`` equals torchvision's ``v2.functional.resized_crop(x[i].float(), *boxes[i], [size,
size], antialias=True)``, flipped and normalised: on the CPU to the normalisation's float rounding
(the same ``interpolate``), on a GPU to :data:`gpufeed.data.augment.TOLERANCE` (the same sums in
another order). Taught in ``notebooks/09_augment.ipynb``.

Example:
    >>> aug = ResizedCropAugment(8, generator=torch.Generator().manual_seed(0))
    >>> x = torch.randint(0, 256, (2, 3, 16, 12), dtype=torch.uint8)
    >>> boxes, flips = aug.params(x)
    >>> out = torch.empty(2, 3, 8, 8)
    >>> for task in aug.tasks(x, [0, 1], (boxes, flips), out):
    ...     task()
    >>> out.shape, bool((boxes[:, 2] <= 16).all() and (boxes[:, 3] <= 12).all())
    (torch.Size([2, 3, 8, 8]), True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from gpufeed.data.augment import RATIO, SCALE, crop_boxes, crop_resize
from gpufeed.data.cpu_crops import GROUP
from gpufeed.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    affine,
    normalize,
    output_stats,
)

#: torchvision's defaults for RandomResizedCrop (area fraction, aspect ratio).


def check_range(who: str, name: str, pair) -> tuple[float, float]:
    """``pair`` as two floats ``0 < lo <= hi`` (``scale`` also ``hi <= 1``), else a ValueError."""
    try:
        lo, hi = (float(v) for v in pair)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {name} must be a pair (low, high), got {pair!r}") from None
    if not 0 < lo <= hi or (name == "scale" and hi > 1):
        bound = "0 < low <= high <= 1" if name == "scale" else "0 < low <= high"
        raise ValueError(
            f"{who}: {name}={pair!r} needs {bound} (torchvision's default: "
            f"{SCALE if name == 'scale' else RATIO})"
        )
    return lo, hi


class ResizedCropAugment:
    """Per-sample RandomResizedCrop + flip + float + normalise of a ``uint8 [B, C, H, W]`` batch.

    Args:
        size: the square output's side.
        scale, ratio: RandomResizedCrop's ranges (area fraction of the input, aspect ratio w / h).
        mean, std: per channel on the [0, 1] scale; None for both: only the scaling to [0, 1].
        flip: draw random horizontal flips (probability 1/2); False: none.
        dtype: floating (normalised), or ``torch.uint8``: the resized crops rounded to bytes.
        generator: the CPU generator the boxes and flips are drawn from, in batch order.
        memory_format: the output's layout (``torch.channels_last`` for a channels-last model).
    """

    def __init__(
        self,
        size: int,
        scale=SCALE,
        ratio=RATIO,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        *,
        flip: bool = True,
        dtype: torch.dtype = torch.float32,
        generator: torch.Generator | None = None,
        memory_format: torch.memory_format = torch.contiguous_format,
    ):
        self.size, self.flip, self.dtype, self.memory_format = size, flip, dtype, memory_format
        self.scale = check_range("ResizedCropAugment", "scale", scale)
        self.ratio = check_range("ResizedCropAugment", "ratio", ratio)
        self.mean, self.std = output_stats("ResizedCropAugment", dtype, mean, std)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)

    def params(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch's boxes ``int64 [B, 4]`` (top, left, height, width) and flips
        ``bool [B]``, on the CPU, in batch order (only ``x``'s shape is read)."""
        n, (h, w) = x.shape[0], x.shape[-2:]
        boxes = crop_boxes(n, int(h), int(w), self.scale, self.ratio, self.generator)
        return boxes, torch.rand(n, generator=self.generator) < (0.5 if self.flip else 0.0)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The whole batch where it lives: boxes drawn here, resampled in two batched matmuls."""
        boxes, flips = self.params(x)
        raw = self.dtype == torch.uint8
        out = crop_resize(
            x,
            boxes,
            (self.size, self.size),
            flip=flips,
            out_dtype=torch.uint8 if raw else torch.float32,
        )  # [B, C, size, size], 0..255
        out = out.contiguous(memory_format=self.memory_format)
        return out if raw else normalize(out, self.dtype, self.mean, self.std)  # keeps the layout

    def tasks(
        self,
        src: torch.Tensor,
        rows: Sequence[int],
        params: tuple[torch.Tensor, torch.Tensor],
        out: torch.Tensor,
    ) -> list[Callable[[], None]]:
        """The CPU's work as one task per :data:`~gpufeed.data.cpu_crops.GROUP` samples: ``out[i]``
        = row ``rows[i]`` of ``src`` (the memmap itself), its box ``params[0][i]`` resized, flipped
        if ``params[1][i]``, normalised. Each task writes its own rows of ``out`` (any layout)."""
        rows, boxes, flips = [int(r) for r in rows], params[0].tolist(), params[1].tolist()
        raw, size = out.dtype == torch.uint8, (self.size, self.size)
        scale_shift = None
        if not raw and self.mean is not None:
            scale_shift = affine(self.mean, self.std, out.dtype, out.device)

        nhwc = not out.is_contiguous() and out.is_contiguous(memory_format=torch.channels_last)

        def group(a: int, b: int) -> None:
            for i in range(a, b):
                top, left, h, w = boxes[i]
                box = src[
                    rows[i], :, top : top + h, left : left + w
                ]  # a view: only the box is read
                small = F.interpolate(
                    box[None].to(torch.float32),
                    size=size,
                    mode="bilinear",
                    align_corners=False,
                    antialias=True,
                )[0]  # [C, size, size], 0..255
                small = small.flip(-1) if flips[i] else small
                small = small.round_().clamp_(0, 255) if raw else small
                if nhwc:  # one strided copy per channel plane beats torch's transposing copy
                    for c, plane in enumerate(small.unbind(0)):
                        out[i, c].copy_(plane)
                else:
                    out[i].copy_(small)
            if raw:
                return
            o = out[a:b]
            if scale_shift is None:
                o.mul_(1.0 / 255)
            else:
                o.mul_(scale_shift[0]).add_(scale_shift[1])  # while the group is in the cache

        n = len(rows)
        return [functools.partial(group, a, min(n, a + GROUP)) for a in range(0, n, GROUP)]
