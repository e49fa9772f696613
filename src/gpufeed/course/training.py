"""Normalisation inside the model, and a mixed-precision training-step benchmark.

:class:`Normalize` turns a ``uint8`` batch into normalised floats *inside* the model
(``nn.Sequential(Normalize(...), model)``), so the loader and the wire carry bytes, the GPU does
the arithmetic, and an exported model (ONNX, TorchScript) carries its own preprocessing.
:func:`train_epoch` times a ResNet-18 (random weights: nothing is downloaded) with the batch sent
as ``uint8`` and converted on the device, or converted on the host first. Taught in
``notebooks/03_dtypes.ipynb``.

Example:
    >>> x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    >>> from gpufeed.data.transforms import normalize
    >>> norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    >>> torch.equal(norm(x), normalize(x, torch.float32, IMAGENET_MEAN, IMAGENET_STD))
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch
from torch import nn

from gpufeed.course.transfer import size_name
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, affine
from gpufeed.measure.harness import Measurement, benchmark

#: How a batch travels: ``uint8`` (convert on the device) or a float dtype (convert on the host).
WIRES = ("uint8", "float16", "float32")


class Normalize(nn.Module):
    """``(x / 255 - mean) / std`` as the first layer of a model; takes uint8 or float in [0, 255].

    The library's :func:`gpufeed.data.transforms.normalize` (one multiply-add with the same
    constants), as a module: it gives the same float32 values, and its constants are buffers that
    move with ``model.to(device)`` and are saved in the state dict and in exports.

    Args:
        mean: per-channel mean of images scaled to [0, 1].
        std: per-channel standard deviation, same scale.
    """

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD):
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"Normalize: mean has {len(mean)} channels but std has {len(std)}; give one value per channel")
        if any(s <= 0 for s in std):
            raise ValueError(f"Normalize: std must be positive (got {tuple(std)})")
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))
        scale, shift = affine(self.mean, self.std, torch.float32, torch.device("cpu"))
        self.register_buffer("scale", scale.clone())  # [C, 1, 1]: x * scale + shift
        self.register_buffer("shift", shift.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.shift, x.to(torch.float32), self.scale)  # as normalize: one multiply-add

    def extra_repr(self) -> str:
        return f"mean={tuple(round(v, 4) for v in self.mean)}, std={tuple(round(v, 4) for v in self.std)}"


def resnet18_with_normalize(num_classes: int = 10, seed: int = 0) -> nn.Sequential:
    """``nn.Sequential(Normalize(), resnet18(weights=None))``: random weights, nothing downloaded."""
    from torchvision.models import resnet18

    torch.manual_seed(seed)
    return nn.Sequential(Normalize(), resnet18(weights=None, num_classes=num_classes))


def autocast_dtype(device) -> torch.dtype:
    """The mixed-precision dtype for ``device``: float16 on CUDA (with a GradScaler), bfloat16 on CPU.

    bfloat16 has float32's exponent range, so gradients do not underflow and need no scaler.
    """
    return torch.float16 if torch.device(device).type == "cuda" else torch.bfloat16


def send(xb: torch.Tensor, wire: str, device) -> torch.Tensor:
    """Moves a uint8 batch to ``device`` the ``wire`` way; the result goes into :class:`Normalize`.

    ``"uint8"``: copy the bytes (non-blocking from pinned memory), convert on the device (inside
    the model). ``"float16"``/``"float32"``: convert on the host, then copy 2 or 4 times the bytes.

    The two are not like for like on purpose: this is what each loop does as usually written. A
    uint8 batch from a loader with ``pin_memory=True`` is pinned; ``x.half()`` makes a fresh
    *pageable* tensor, so its copy goes through the driver's staging buffer and holds the host
    (``non_blocking`` would not change that). The float wires' cost includes that, on top of 2-4x the bytes.
    """
    if wire == "uint8":
        return xb.to(device, non_blocking=xb.is_pinned())
    if wire in ("float16", "float32"):
        return xb.to(getattr(torch, wire)).to(device)  # a fresh, pageable tensor: copied synchronously
    raise ValueError(f"wire must be one of {WIRES} (got {wire!r})")


#: Bytes of device memory per input pixel per image for a ResNet-18 training step: an *estimate*,
#: not a measurement of this GPU. On a CPU, the tensors a step saves for backward (summed by a
#: ``saved_tensors_hooks`` pack hook, batch 4 minus batch 2) came to 237 bytes per input pixel
#: under bfloat16 autocast and 442 in float32; 600 leaves a margin for gradients of activations,
#: the allocator's rounding and cuDNN's workspaces. A 1280x960 image then needs ~0.7 GB, so batch 64
#: ~48 GB. On a GPU, :func:`calibrate` measures the real figure with ``max_memory_allocated``.
TRAIN_BYTES_PER_PIXEL = 600
#: Device memory for the model, its gradients, the optimiser's momentum and cuDNN workspaces.
TRAIN_FIXED_BYTES = 512 << 20


def train_bytes(batch: int, size: tuple[int, int], per_pixel: float = TRAIN_BYTES_PER_PIXEL) -> int:
    """Estimated device memory of one ResNet-18 training step on ``batch`` images of ``size``.

    Args:
        per_pixel: bytes per input pixel per image; the fixed estimate, or :func:`calibrate`'s.

    Example:
        >>> round(train_bytes(64, (1280, 960)) / 1e9)
        48
    """
    pixels = size[0] * size[1]
    return int(batch * pixels * (per_pixel + 3)) + TRAIN_FIXED_BYTES  # + 3: the uint8 input


def fits(batch: int, size: tuple[int, int], device, mem_get_info=None, headroom: float = 0.8,
         per_pixel: float = TRAIN_BYTES_PER_PIXEL) -> bool:
    """Whether a training step on ``batch`` images of ``size`` fits in ``device``'s free memory.

    Always True off CUDA (host memory is not checked). On CUDA the estimate :func:`train_bytes`
    must stay under ``headroom`` of the free bytes that ``torch.cuda.mem_get_info`` reports
    (Colab's T4 has 15 GB; by the fixed estimate, full mode's 1280x960 at batch 64 needs ~48 GB).

    Args:
        mem_get_info: ``device -> (free, total)`` bytes; default ``torch.cuda.mem_get_info``
            (tests pass a fake one).
        per_pixel: bytes per input pixel per image (:func:`calibrate` measures it on a GPU).

    Example:
        >>> fits(64, (1280, 960), "cuda", mem_get_info=lambda d: (15 << 30, 16 << 30))
        False
        >>> fits(8, (384, 384), "cuda", mem_get_info=lambda d: (15 << 30, 16 << 30))
        True
    """
    device = torch.device(device)
    if device.type != "cuda":
        return True
    free, _total = (mem_get_info or torch.cuda.mem_get_info)(device)
    return train_bytes(batch, size, per_pixel) <= headroom * free


def _trainer(device: torch.device, amp: bool, num_classes: int):
    """A ResNet-18 step ``step(x_uint8_on_host, labels, wire)`` with its optimiser and scaler."""
    cuda = device.type == "cuda"
    model = resnet18_with_normalize(num_classes).to(device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)  # Tensor Cores prefer NHWC for convs
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp and cuda)
    ctx = (lambda: torch.autocast(device.type, dtype=autocast_dtype(device))) if amp else nullcontext
    model.train()

    def step(xb: torch.Tensor, yb: torch.Tensor, wire: str) -> None:
        x = send(xb, wire, device)
        with ctx():
            loss = nn.functional.cross_entropy(model(x), yb)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def calibrate(device, size: tuple[int, int] = (224, 224), amp: bool = True, num_classes: int = 10) -> float | None:
    """Measured bytes of device memory per input pixel per image of a ResNet-18 training step.

    Runs one step at batch 2 and one at batch 4 and reads each peak with
    ``torch.cuda.max_memory_allocated``; their difference divided by the two extra images' pixels
    is what each image costs (the weights, gradients and momentum cancel out). None off CUDA,
    where the course does not check memory. Pass the result to :func:`fits` as ``per_pixel``.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    step = _trainer(device, amp, num_classes)
    g = torch.Generator().manual_seed(0)
    w, h = size
    peaks = []
    for batch in (2, 4):
        xb = torch.randint(0, 256, (batch, 3, h, w), dtype=torch.uint8, generator=g)
        yb = torch.randint(0, num_classes, (batch,), generator=g).to(device)
        step(xb, yb, "uint8")  # first: allocations of the optimiser's state, cuDNN's choices
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step(xb, yb, "uint8")
        torch.cuda.synchronize(device)
        peaks.append(torch.cuda.max_memory_allocated(device))
    return max(peaks[1] - peaks[0], 0) / (2 * w * h)


def train_epoch(batch: int, size: tuple[int, int], wire: str, device, epoch_images: int, amp: bool = True,
                repeats: int = 3, warmup: int = 1, num_classes: int = 10, name: str = "") -> Measurement:
    """Times one epoch of ResNet-18 training steps, the batch sent the ``wire`` way.

    An epoch is ``max(1, epoch_images // batch)`` steps over batches prepared in advance (pinned
    where CUDA exists), so only the transfer, the conversion and the step are timed, not a loader.
    Mixed precision: ``autocast`` in :func:`autocast_dtype`, with a ``GradScaler`` on CUDA.

    Returns:
        A :class:`Measurement` of seconds per epoch, named ``name`` or ``"<wire> on the wire"``;
        ``items`` are images, ``params`` hold
        ``size``, ``batch``, ``wire``, ``amp``, ``steps`` and ``device``.
    """
    device = torch.device(device)
    cuda = device.type == "cuda"
    step = _trainer(device, amp, num_classes)
    steps = max(1, epoch_images // batch)
    g = torch.Generator().manual_seed(0)
    w, h = size
    batches = [torch.randint(0, 256, (batch, 3, h, w), dtype=torch.uint8, generator=g) for _ in range(steps)]
    batches = [b.pin_memory() for b in batches] if cuda else batches
    labels = [torch.randint(0, num_classes, (batch,), generator=g).to(device) for _ in range(steps)]

    def epoch():
        for xb, yb in zip(batches, labels):
            step(xb, yb, wire)

    return benchmark(epoch, name=name or f"{wire} on the wire", repeats=repeats, warmup=warmup, items=steps * batch,
                     params={"size": size_name(size), "batch": batch, "wire": wire, "amp": amp,
                             "steps": steps, "device": str(device)})
