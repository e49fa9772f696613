"""Per-sample random augmentation of whole ``uint8`` batches, on any device, and its references.

A torchvision transform applied to a batched tensor draws *one* set of random parameters for the
whole batch (every image flipped, or none). Here the parameters are drawn per sample first
(:func:`draw_params`, seeded by a ``torch.Generator``), then applied to the batch in a few calls:

* :func:`crop_resize`: every sample's crop box resized to one size by two batched matrix products
  (a resampling matrix per sample and axis, the very weights of torch's bilinear, antialiased
  ``interpolate``); a horizontal flip is folded into the same matrix for free;
* (flipping by a mask, :func:`~gpufeed.data.transforms.flip`, normalising and the ImageNet
  constants are in :mod:`gpufeed.data.transforms`);
* :func:`color_jitter`: brightness, contrast and saturation by per-sample factors (torchvision's
  formulas, with the factors broadcast over the batch);
* :func:`augment`: all of it, then normalise; :func:`finish` is its pointwise tail (to float,
  jitter, normalise), the part that ``torch.compile`` fuses.

:func:`augment_one` is the reference: torchvision's ``v2.functional`` ops on one image with the same
parameters. ``augment(x, p)[i]`` equals ``augment_one(x[i], p.sample(i))`` to float rounding
(``TOLERANCE``), which the tests check. :func:`cpu_transform` with
:class:`gpufeed.data.arrays.MemmapDataset` is the usual per-sample CPU pipeline that DataLoader
workers pickle. Taught in
``notebooks/09_augment.ipynb``.

Example:
    >>> x = torch.randint(0, 256, (4, 3, 32, 40), dtype=torch.uint8)
    >>> p = draw_params(4, (32, 40), size=(24, 24), brightness=0.4,
    ...                 generator=torch.Generator().manual_seed(0))
    >>> out = augment(x, p)
    >>> out.shape, out.dtype
    (torch.Size([4, 3, 24, 24]), torch.float32)
    >>> all(torch.allclose(out[i], augment_one(x[i], p.sample(i)), atol=TOLERANCE)
    ...     for i in range(4))
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from gpufeed.data.transforms import (  # the one copy of each
    IMAGENET_MEAN,
    IMAGENET_STD,
    as_device,
    normalize,
)

#: RandomResizedCrop's defaults (torchvision's, and the ImageNet recipe's): the box's area as a
#: fraction of the image, and its aspect ratio (w / h), drawn log-uniformly.
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)

GRAY = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights

#: Largest |batched - reference| of :func:`augment`'s output (normalised units; 1e-4 is about
#: 0.006 grey levels): the sums are the same, done in another order, in float32.
TOLERANCE = 1e-4


@dataclass
class AugParams:
    """Per-sample parameters for a batch of ``N``; drawn by :func:`draw_params`.

    Attributes:
        boxes: ``int64 [N, 4]``: each crop as (top, left, height, width), in input pixels.
        flip: ``bool [N]``: flip horizontally.
        brightness, contrast, saturation: ``float32 [N]`` factors (1 = unchanged), or None: skipped.
        size: output (height, width).
    """

    boxes: torch.Tensor
    flip: torch.Tensor
    brightness: torch.Tensor | None
    contrast: torch.Tensor | None
    saturation: torch.Tensor | None
    size: tuple[int, int]

    def __len__(self) -> int:
        return len(self.boxes)

    def to(self, device) -> AugParams:
        """The same parameters, as tensors on ``device`` (to a GPU: pinned, then copied without
        making the host wait, :func:`gpufeed.data.transforms.as_device`)."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return AugParams(**{k: as_device(v, device) if isinstance(v, torch.Tensor) else v
                            for k, v in moved.items()})

    def sample(self, i: int) -> dict:
        """Sample ``i``'s parameters as Python numbers, for :func:`augment_one`."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v if k == "size" else (None if v is None else v[i].tolist())
                for k, v in out.items()}


def crop_boxes(n: int, height: int, width: int, scale=SCALE, ratio=RATIO,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """``n`` random crop boxes, ``int64 [n, 4]`` (top, left, height, width): RandomResizedCrop's
    rule.

    Area a uniform fraction ``scale`` of the image, aspect ratio log-uniform in ``ratio``; ten tries
    per sample (all drawn at once), the first that fits wins, else the centre crop torchvision falls
    back to. Drawn on the CPU, so a seed gives the same boxes on every device.
    """
    tries = 10
    area = height * width * torch.empty(n, tries).uniform_(scale[0], scale[1], generator=generator)
    log_r = torch.empty(n, tries).uniform_(math.log(ratio[0]), math.log(ratio[1]),
                                           generator=generator)
    w = torch.sqrt(area * log_r.exp()).round().long()
    h = torch.sqrt(area / log_r.exp()).round().long()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = torch.where(fits.any(1), fits.int().argmax(1), -1)  # index of the first fitting try
    pick = first.clamp_min(0)[:, None]
    h, w = h.gather(1, pick)[:, 0], w.gather(1, pick)[:, 0]
    in_ratio = width / height  # torchvision's fallback: the largest centred crop within `ratio`
    fw = width if in_ratio <= max(ratio) else int(round(height * max(ratio)))
    fh = height if in_ratio >= min(ratio) else int(round(width / min(ratio)))
    h, w = torch.where(first < 0, fh, h), torch.where(first < 0, fw, w)
    u = torch.rand(n, 2, generator=generator)  # position: uniform over the places the box fits
    top = (u[:, 0] * (height - h + 1)).long().clamp_max(height - h)
    left = (u[:, 1] * (width - w + 1)).long().clamp_max(width - w)
    top, left = (torch.where(first < 0, (height - h) // 2, top),
                 torch.where(first < 0, (width - w) // 2, left))
    return torch.stack([top, left, h, w], 1)


def draw_params(n: int, image_size: tuple[int, int], size: tuple[int, int], *, scale=SCALE,
                ratio=RATIO, flip_p: float = 0.5, brightness: float = 0.0,
                contrast: float = 0.0, saturation: float = 0.0,
                generator: torch.Generator | None = None) -> AugParams:
    """Draws every sample's parameters (on the CPU; move them with ``.to(device)``).

    Args:
        n: batch size.
        image_size: input (height, width).
        size: output (height, width).
        scale, ratio: RandomResizedCrop's ranges (area fraction, aspect ratio).
        flip_p: probability of a horizontal flip.
        brightness, contrast, saturation: ColorJitter's strengths: factors uniform in
            ``[max(0, 1 - s), 1 + s]``; 0 skips that step.
        generator: seeds the draw, so a run can be repeated and checked.

    Example:
        >>> p = draw_params(3, (64, 64), (32, 32), generator=torch.Generator().manual_seed(1))
        >>> p.boxes.shape, p.flip.dtype, p.brightness
        (torch.Size([3, 4]), torch.bool, None)
    """
    if n < 1 or min(image_size) < 1 or min(size) < 1:
        raise ValueError(f"draw_params: n, image_size and size must be positive (got {n}, "
                         f"{image_size}, {size})")
    boxes = crop_boxes(n, int(image_size[0]), int(image_size[1]), scale, ratio, generator)
    flips = torch.rand(n, generator=generator) < flip_p

    def factors(s):
        return None if s == 0 else torch.empty(n).uniform_(max(0.0, 1 - s), 1 + s,
                                                           generator=generator)

    return AugParams(boxes, flips, factors(brightness), factors(contrast), factors(saturation),
                     (int(size[0]), int(size[1])))


def resample_weights(start: torch.Tensor, length: torch.Tensor, in_size: int, out_size: int,
                     antialias: bool = True) -> torch.Tensor:
    """Per-sample resampling matrices ``float32 [N, out_size, in_size]`` along one axis.

    Row ``j`` of sample ``i`` holds the weights that output pixel ``j`` gives the input pixels of
    the crop ``[start_i, start_i + length_i)`` (zero elsewhere): torch's bilinear ``interpolate``
    (half-pixel centres, ``align_corners=False``), whose antialiased version widens the triangle
    filter by the shrink factor so that every input pixel contributes (no aliasing).

    Example:
        >>> resample_weights(torch.tensor([1]), torch.tensor([2]), in_size=4, out_size=4)[0]
        tensor([[0.0000, 1.0000, 0.0000, 0.0000],
                [0.0000, 0.7500, 0.2500, 0.0000],
                [0.0000, 0.2500, 0.7500, 0.0000],
                [0.0000, 0.0000, 1.0000, 0.0000]])
    """
    dev = start.device
    start, length = start.to(torch.float32), length.to(torch.float32)
    scale = length / out_size  # [N] input pixels per output pixel
    # [N, out], crop coordinates
    center = scale[:, None] * (torch.arange(out_size, device=dev) + 0.5)
    one = torch.ones_like(scale)  # a tensor, not 1.0: the CUDA simulator's where() needs tensors
    stretch = torch.where(scale >= 1, 1 / scale, one) if antialias else one
    local = torch.arange(in_size, device=dev)[None] - start[:, None]  # [N, in], crop coordinates
    w = 1 - ((local[:, None, :] + 0.5 - center[:, :, None]) * stretch[:, None, None]).abs()
    # outside the crop: 0
    w = w.clamp_min_(0) * ((local >= 0) & (local < length[:, None]))[:, None, :]
    # rows sum to 1; at the crop's edges this is torch's clamping
    return w / w.sum(-1, keepdim=True)


def crop_resize(x: torch.Tensor, boxes: torch.Tensor, size: tuple[int, int], *,
                flip: torch.Tensor | None = None, antialias: bool = True,
                out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Crops every sample's box and resizes it to ``size`` (height, width), in two batched matmuls.

    Args:
        x: ``[N, C, H, W]``, uint8 or float, on any device.
        boxes: ``[N, 4]`` (top, left, height, width), e.g. ``AugParams.boxes``.
        size: output (height, width).
        flip: optional ``bool [N]``: flip those outputs horizontally, for free (the rows of the
            horizontal matrix are taken in reverse order).
        antialias: as torchvision's ``resize(antialias=True)``, its default.
        out_dtype: float32 (values in the input's range), or uint8 (rounded, as torchvision does
            for a uint8 image on the GPU).

    Returns:
        ``[N, C, size[0], size[1]]``; sample ``i`` is
        ``resized_crop(x[i].float(), *boxes[i], size)`` to float rounding. The matrices are dense:
        ``H W w + h H w`` multiply-adds per channel, wasteful for small crops but one call for the
        batch, which a GPU does best.
    """
    if x.dim() != 4 or boxes.shape != (x.shape[0], 4):
        raise ValueError("crop_resize: x must be [N, C, H, W] and boxes [N, 4] (got "
                         f"{tuple(x.shape)}, {tuple(boxes.shape)})")
    boxes = as_device(boxes, x.device)
    wy = resample_weights(boxes[:, 0], boxes[:, 2], x.shape[2], size[0], antialias)  # [N, h, H]
    wx = resample_weights(boxes[:, 1], boxes[:, 3], x.shape[3], size[1], antialias)  # [N, w, W]
    if flip is not None:
        # output column j <- w - 1 - j
        wx = torch.where(as_device(flip, x.device)[:, None, None], wx.flip(1), wx)
    n, c, height, width = x.shape
    xf = x if x.is_floating_point() else x.to(torch.float32)
    # [N, C H, W] @ [N, W, w]
    rows = torch.bmm(xf.reshape(n, c * height, width), wx.transpose(1, 2))
    # [N, 1, h, H] @ [N, C, H, w] -> [N, C, h, w]
    out = torch.matmul(wy.unsqueeze(1), rows.view(n, c, height, -1))
    if out_dtype == torch.uint8:
        return out.round_().clamp_(0, 255).to(torch.uint8)
    return out.to(out_dtype)


def _per_sample(f: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # [N] -> [N, 1, 1, 1], broadcast over C, H, W
    return as_device(f, x.device).to(x.dtype).view(-1, 1, 1, 1)


def _gray(x: torch.Tensor) -> torch.Tensor:
    r, g, b = x.unbind(dim=-3)
    return (r * GRAY[0] + g * GRAY[1] + b * GRAY[2]).unsqueeze(-3)  # [N, 1, H, W]


def color_jitter(x: torch.Tensor, brightness=None, contrast=None, saturation=None,
                 bound: float = 1.0) -> torch.Tensor:
    """Brightness, then contrast, then saturation, each with per-sample factors (``[N]`` or None).

    torchvision's formulas on a float image in ``[0, bound]``: brightness scales, contrast blends
    with the image's mean grey, saturation with each pixel's grey, each clamped to ``[0, bound]``.
    (``v2.ColorJitter`` also draws a random order of the steps per call; this order is fixed.)
    """
    if brightness is not None:
        x = (x * _per_sample(brightness, x)).clamp(0, bound)
    if contrast is not None:
        f = _per_sample(contrast, x)
        x = (x * f + (1 - f) * _gray(x).mean(dim=(-3, -2, -1), keepdim=True)).clamp(0, bound)
    if saturation is not None:
        f = _per_sample(saturation, x)
        x = (x * f + (1 - f) * _gray(x)).clamp(0, bound)
    return x


def finish(x: torch.Tensor, brightness=None, contrast=None, saturation=None, mean=IMAGENET_MEAN,
           std=IMAGENET_STD) -> torch.Tensor:
    """The pointwise tail: uint8 (or float in 0..255) to float in [0, 1], jitter, normalise.

    In eager mode each step reads and writes the whole batch in float32; ``torch.compile(finish)``
    fuses them into a reduction (contrast's mean) and one pass that reads uint8 and writes float.
    """
    jittered = color_jitter(x.to(torch.float32) / 255, brightness, contrast, saturation)
    return normalize(jittered, torch.float32, mean, std, max_value=1.0)


def augment(x: torch.Tensor, p: AugParams, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> torch.Tensor:
    """Per-sample crop + resize + flip + colour jitter + normalise of a ``uint8 [N, 3, H, W]``
    batch.

    Args:
        x: the batch, on any device (``p`` is moved there).
        p: the parameters, from :func:`draw_params`.

    Returns:
        ``float32 [N, 3, *p.size]``, normalised; sample ``i`` equals
        ``augment_one(x[i], p.sample(i))`` within ``TOLERANCE``.
    """
    small = crop_resize(x, p.boxes, p.size, flip=p.flip)  # float32, 0..255, the flip folded in
    return finish(small, p.brightness, p.contrast, p.saturation, mean, std)


def augment_one(image: torch.Tensor, p: dict, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> torch.Tensor:
    """The per-sample reference: torchvision ``v2.functional`` on one ``uint8 [3, H, W]`` image.

    ``p`` is ``AugParams.sample(i)``. The image goes to float (0..255) for ``resized_crop``
    (antialiased bilinear), is scaled to [0, 1], then flipped, jittered (brightness, contrast,
    saturation, in that order) and normalised.
    """
    from torchvision.transforms.v2 import functional as F

    top, left, h, w = p["boxes"]
    img = F.resized_crop(image.to(torch.float32), top, left, h, w, list(p["size"]),
                         antialias=True) / 255
    if p["flip"]:
        img = F.horizontal_flip(img)
    for name, fn in (("brightness", F.adjust_brightness), ("contrast", F.adjust_contrast),
                     ("saturation", F.adjust_saturation)):
        if p[name] is not None:
            img = fn(img, p[name])
    return F.normalize(img, list(mean), list(std))


def cpu_transform(size: tuple[int, int], *, scale=SCALE, ratio=RATIO,
                  flip_p: float = 0.5, brightness: float = 0.0, contrast: float = 0.0,
                  saturation: float = 0.0, to_float: bool = True, mean=IMAGENET_MEAN,
                  std=IMAGENET_STD):
    """The usual per-sample pipeline, torchvision v2, for ``uint8 [3, H, W]`` tensors or PIL images.

    RandomResizedCrop, RandomHorizontalFlip, ColorJitter (if any strength is set), then ToDtype with
    scaling (``ToTensor``'s job) and Normalize. A ``v2.Compose`` of modules: workers can pickle it.
    With ``to_float=False`` it stops at ``uint8`` (a quarter of the bytes to collate, pin and send);
    :func:`finish` then converts and normalises the whole batch on the device.
    """
    from torchvision.transforms import v2

    steps = [v2.RandomResizedCrop(list(size), scale=scale, ratio=ratio, antialias=True),
             v2.RandomHorizontalFlip(flip_p)]
    if brightness or contrast or saturation:
        steps.append(v2.ColorJitter(brightness=brightness, contrast=contrast,
                                    saturation=saturation))
    # a PIL image (torchvision's ImageFolder) becomes a uint8 tensor; a tensor stays
    steps.append(v2.ToImage())
    if to_float:
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))]
    return v2.Compose(steps)
