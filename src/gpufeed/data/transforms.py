"""The transforms, each written once: normalise, per-sample crop + flip, on any device.

* :data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`: the one copy of ImageNet's per-channel constants
  (for images scaled to [0, 1]).
* :func:`normalize`: ``uint8`` (or float on the same 0..255 scale) images to ``(x / 255 - mean) /
  std`` in a float dtype, as one multiply-add whose constants are made once per device and dtype
  (:func:`affine`): no host-to-device copy per call, and the input is never changed;
  :func:`output_stats` checks a mean and std against the output dtype (``uint8``: none).
* :func:`draw_crops`: per-sample crop corners and flips, drawn on the CPU from a seeded generator
  (so a seed gives the same batches on every device); :func:`crop_flip` cuts them out of a batch,
  as one gather on a GPU (:func:`gather_crops`) or one slice copy per sample on a CPU
  (:func:`copy_crops`); :func:`flip` flips by a mask; :class:`CropFlip` is the per-sample version
  for DataLoader workers.
* :func:`as_device`: small parameter tensors to a device without making the host wait.

The CPU's one pass from stored bytes to normalised crops, on a pool of threads, is
:mod:`gpufeed.data.cpu_crops`; both together on a whole batch, wherever it lives,
:class:`gpufeed.data.device_augment.DeviceAugment`. Taught in ``notebooks/08_prefetch.ipynb``
(normalise) and ``notebooks/09_augment.ipynb`` (crops).

Example:
    >>> x = torch.arange(2 * 3 * 4 * 5, dtype=torch.uint8).view(2, 3, 4, 5)
    >>> corners = torch.tensor([[0, 1], [1, 0]]); flips = torch.tensor([False, True])
    >>> out = crop_flip(x, corners, flips, 3)
    >>> torch.equal(out[1], x[1, :, 1:4, 0:3].flip(-1)), out.shape
    (True, torch.Size([2, 3, 3, 3]))
    >>> normalize(torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2)).flatten().tolist()
    [0.0, 1.0]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

#: ImageNet's per-channel mean and standard deviation, for images scaled to [0, 1].
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def as_device(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` on ``device``; a CPU tensor bound for a GPU is pinned first and copied with
    ``non_blocking=True``. A copy from pageable memory makes the host wait for the GPU's stream
    (the caching host allocator keeps the pinned copy alive until the copy is done)."""
    device = torch.device(device)
    if t.device == device or (device.type == t.device.type and device.index is None):
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return (t if t.is_pinned() else t.pin_memory()).to(device, non_blocking=True)
    return t.to(device)


@functools.lru_cache(maxsize=64)
def affine(mean: tuple, std: tuple, dtype: torch.dtype, device: torch.device,
           max_value: float = 255.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, shift)``, each ``[C, 1, 1]`` in ``dtype`` on ``device``, with ``x * scale + shift
    == (x / max_value - mean) / std``. Made once per (constants, dtype, device) and cached: a copy
    to the GPU on every batch would make the host wait for the stream."""
    std_t = torch.tensor(std, dtype=torch.float64)
    scale = (1.0 / (max_value * std_t)).view(-1, 1, 1)
    shift = (-torch.tensor(mean, dtype=torch.float64) / std_t).view(-1, 1, 1)
    return scale.to(dtype=dtype, device=device), shift.to(dtype=dtype, device=device)


def normalize(images: torch.Tensor, dtype: torch.dtype = torch.float32,
              mean: Sequence[float] | None = None, std: Sequence[float] | None = None, *,
              max_value: float = 255.0) -> torch.Tensor:
    """Images ``[..., C, H, W]`` as ``dtype`` in [0, 1], then ``(x - mean) / std`` per channel.

    Args:
        images: ``uint8``, or float on the same scale (0..``max_value``). Never changed: the result
            is new memory.
        dtype: a floating dtype (float32, float16, bfloat16).
        mean, std: per channel, on the [0, 1] scale (e.g. :data:`IMAGENET_MEAN`,
            :data:`IMAGENET_STD`); neither: only the scaling.
        max_value: the input value that becomes 1 (255 for bytes; 1.0 for images already in [0, 1]).

    Both steps are one multiply-add per element, ``x * (1 / (255 std)) - mean / std``. Run it where
    the images are: on the GPU, ``uint8`` travels (4x fewer bytes than float32) and the conversion
    is one short bandwidth-bound kernel, which still shares the GPU with the step (lesson 03).

    Example:
        >>> x = torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2)
        >>> normalize(x, mean=[0.5], std=[0.5]).flatten().tolist()
        [-1.0, 1.0000001192092896]
        >>> # 1.0000001: the folded multiply-add rounds differently from (x / 255 - mean) / std
        >>> # the input is left alone
        >>> f = torch.full((1, 1, 1, 1), 255.0); _ = normalize(f); f.item()
        255.0
    """
    if not dtype.is_floating_point:
        raise ValueError("normalize: dtype must be a floating type such as torch.float32 or "
                         f"torch.float16, got {dtype}")
    if (mean is None) != (std is None):
        raise ValueError("normalize: give both mean and std (per channel, on the [0, 1] scale), or "
                         "neither")
    # uint8: new memory; float of the same dtype: the input itself (not written to)
    x = images.to(dtype)
    if mean is None:
        return x * (1.0 / max_value)  # out of place: the caller's float tensor stays as it was
    channels = images.shape[-3] if images.dim() >= 3 else 0
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"normalize: mean and std need one value per channel ({channels}), "
                         f"got {len(mean)} and {len(std)}")
    if any(s <= 0 for s in std):
        raise ValueError(f"normalize: std must be positive (got {tuple(std)})")
    key = (tuple(map(float, mean)), tuple(map(float, std)), dtype, x.device, float(max_value))
    scale, shift = affine.__wrapped__(*key) if torch.compiler.is_compiling() else affine(*key)
    return torch.addcmul(shift, x, scale)  # shift + x * scale: one kernel, into new memory


def output_stats(who: str, dtype: torch.dtype, mean, std) -> tuple[tuple | None, tuple | None]:
    """``(mean, std)`` as tuples for output images of ``dtype``, after checking they fit it.

    A floating ``dtype`` is normalised with them (both or neither). ``torch.uint8`` means the crops
    alone, not normalised: ImageNet's defaults are then dropped (so ``dtype=torch.uint8`` is
    enough), and any other ``mean``/``std`` is an error rather than silently unused. ``who`` names
    the caller.

    Example:
        >>> output_stats("me", torch.uint8, IMAGENET_MEAN, IMAGENET_STD)
        (None, None)
        >>> output_stats("me", torch.float16, [0.5], [0.25])
        ((0.5,), (0.25,))
    """
    if dtype == torch.uint8:
        defaults = (mean is not None and std is not None
                    and tuple(map(float, mean)) == IMAGENET_MEAN
                    and tuple(map(float, std)) == IMAGENET_STD)
        if not (defaults or (mean is None and std is None)):
            raise ValueError(f"{who}: dtype=torch.uint8 gives the crops as stored bytes, not "
                             f"normalised, so mean={mean!r}, std={std!r} would go unused; "
                             "normalise after the copy (gpufeed.data.transforms.normalize) or pick "
                             "a float dtype")
        return None, None
    if not dtype.is_floating_point:
        raise ValueError(f"{who}: dtype must be torch.uint8 (the crops alone) or a floating type "
                         f"such as torch.float32 (normalised), got {dtype}")
    if (mean is None) != (std is None):
        raise ValueError(f"{who}: give both mean and std (per channel, on the [0, 1] scale), or "
                         "neither")
    return (None if mean is None else tuple(mean)), (None if std is None else tuple(std))


def draw_crops(n: int, in_hw: tuple[int, int], crop: int, generator: torch.Generator | None = None,
               flip_p: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample random crop corners ``int64 [n, 2]`` (top, left) and flips ``bool [n]``, on the
    CPU.

    Drawn on the CPU from ``generator``, so a seed gives the same crops whatever the device.

    Example:
        >>> corners, flips = draw_crops(3, (8, 8), 6, torch.Generator().manual_seed(0))
        >>> corners.shape, flips.dtype, bool((corners <= 2).all())
        (torch.Size([3, 2]), torch.bool, True)
    """
    h, w = in_hw
    if not 0 < crop <= min(h, w):
        raise ValueError(f"draw_crops: crop must be in 1..{min(h, w)} for {h}x{w} images (got "
                         f"{crop})")
    corners = torch.stack([torch.randint(0, h - crop + 1, (n,), generator=generator),
                           torch.randint(0, w - crop + 1, (n,), generator=generator)], dim=1)
    return corners, torch.rand(n, generator=generator) < flip_p


def crop_flip(x: torch.Tensor, corners: torch.Tensor, flips: torch.Tensor, crop: int,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Sample ``i`` of ``x`` ``[N, C, H, W]`` cropped to ``crop x crop`` at ``corners[i]``, flipped
    if ``flips[i]``.

    Two ways to the same values: on a GPU :func:`gather_crops`, one kernel for the whole batch; on
    the CPU :func:`copy_crops`, one slice copy per sample (on a CPU the gather's index arithmetic
    per byte costs more than the bytes it moves). ``out``
    (``[N, C, crop, crop]``, any dtype) receives the result.
    """
    return (gather_crops if x.is_cuda else copy_crops)(x, corners, flips, crop, out)


def gather_crops(x: torch.Tensor, corners: torch.Tensor, flips: torch.Tensor, crop: int,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`crop_flip` as one gather: per-sample row and column indices, the flip folded into
    the column order. One kernel for the batch on a GPU; slow on a CPU (index arithmetic per
    byte)."""
    n, ar = x.shape[0], torch.arange(crop, device=x.device)
    # pinned, non-blocking
    corners, flips = as_device(corners, x.device), as_device(flips, x.device)
    rows = corners[:, :1] + ar  # [N, crop]
    # [N, crop], reversed if flipped
    cols = corners[:, 1:] + torch.where(flips[:, None], crop - 1 - ar, ar)
    got = x[torch.arange(n, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    # the advanced indices come first: [N, crop, crop, C] -> [N, C, crop, crop]
    got = got.permute(0, 3, 1, 2)
    return got.contiguous() if out is None else out.copy_(got)


def copy_crops(x: torch.Tensor, corners: torch.Tensor, flips: torch.Tensor, crop: int,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`crop_flip` as one slice copy per sample: plain memory traffic, the CPU's fast way."""
    out = torch.empty((x.shape[0], x.shape[1], crop, crop), dtype=x.dtype,
                      device=x.device) if out is None else out
    for i, ((top, left), flipped) in enumerate(zip(corners.tolist(), flips.tolist())):
        window = x[i, :, top:top + crop, left:left + crop]  # a view: no copy yet
        out[i].copy_(window.flip(-1) if flipped else window)  # the one copy (and dtype conversion)
    return out


def flip(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Flips horizontally the samples of ``x`` ``[N, C, H, W]`` where ``mask`` (``bool [N]``) is
    True.

    Example:
        >>> flip(torch.arange(4).view(2, 1, 1, 2), torch.tensor([True, False])).flatten().tolist()
        [1, 0, 2, 3]
    """
    return torch.where(as_device(mask, x.device).view(-1, 1, 1, 1), x.flip(-1), x)


class CropFlip:
    """A picklable per-sample transform: ``uint8 [C, H, W]`` -> a random ``crop x crop`` window,
    flipped with probability 1/2, still ``uint8`` (the float conversion waits for the device), a
    copy.

    ``seed``: a private generator (reproducible in one process); None draws from torch's global
    generator, which each DataLoader worker seeds differently.

    Example:
        >>> image = torch.arange(3 * 4 * 5, dtype=torch.uint8).view(3, 4, 5)
        >>> CropFlip(3, seed=0)(image).shape
        torch.Size([3, 3, 3])
    """

    def __init__(self, crop: int, seed: int | None = None):
        self.crop = crop
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        corners, flips = draw_crops(1, tuple(image.shape[-2:]), self.crop, self.generator)
        # a copy: the source stays untouched
        return crop_flip(image[None], corners, flips, self.crop)[0]
