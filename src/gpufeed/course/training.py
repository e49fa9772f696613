"""Normalisation inside the model, and a mixed-precision training-step benchmark.

:class:`Normalize` turns a ``uint8`` batch into normalised floats *inside* the model
(``nn.Sequential(Normalize(...), model)``), so the loader and the wire carry bytes, the GPU does
the arithmetic, and an exported model (ONNX, TorchScript) carries its own preprocessing.
:func:`train_epoch` times a ResNet-18 (random weights: nothing is downloaded) with the batch sent
as ``uint8`` and converted on the device, or converted on the host first, from pinned or pageable
memory, and :func:`train_in_turns` times several such cases in turns, for the verdict method;
:func:`saved_bytes_per_pixel` and :func:`calibrate` say how much device memory a step
needs per input pixel. Taught in ``notebooks/03_dtypes.ipynb``.

Example:
    >>> x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    >>> from gpufeed.data.transforms import normalize
    >>> norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    >>> torch.equal(norm(x), normalize(x, torch.float32, IMAGENET_MEAN, IMAGENET_STD))
    True
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from contextlib import nullcontext

import torch
from torch import nn

from gpufeed.course.transfer import size_name
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, affine
from gpufeed.measure.harness import Measurement, benchmark, interleave

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
    """``nn.Sequential(Normalize(), resnet18(weights=None))``: random weights, nothing downloaded.

    The weights drawn after ``torch.manual_seed(seed)``, and the global generator left where that
    draw leaves it, as building it anew would; a copy of the first one built (a lesson builds one per
    measurement, 0.2 s each on a CPU).

    Example:
        >>> a, b = resnet18_with_normalize(3), resnet18_with_normalize(3)
        >>> a is not b and torch.equal(a[1].fc.weight, b[1].fc.weight)
        True
    """
    model, rng_after = _seeded_resnet18(num_classes, seed)
    torch.manual_seed(seed)  # every generator (CUDA's too), then the CPU one where the draw left it
    torch.set_rng_state(rng_after)
    return copy.deepcopy(model)


@functools.lru_cache(maxsize=4)
def _seeded_resnet18(num_classes: int, seed: int) -> tuple[nn.Sequential, torch.Tensor]:
    from torchvision.models import resnet18

    torch.manual_seed(seed)
    model = nn.Sequential(Normalize(), resnet18(weights=None, num_classes=num_classes))
    return model, torch.get_rng_state()


def autocast_dtype(device) -> torch.dtype:
    """The mixed-precision dtype for ``device``: float16 on CUDA (with a GradScaler), bfloat16 on CPU.

    bfloat16 has float32's exponent range, so gradients do not underflow and need no scaler.
    """
    return torch.float16 if torch.device(device).type == "cuda" else torch.bfloat16


def send(xb: torch.Tensor, wire: str, device, staging: torch.Tensor | None = None) -> torch.Tensor:
    """Moves a uint8 batch to ``device`` the ``wire`` way; the result goes into :class:`Normalize`.

    ``"uint8"``: copy the bytes, convert on the device (inside the model). ``"float16"`` or
    ``"float32"``: convert on the host, then copy 2 or 4 times the bytes. Every copy is
    ``non_blocking`` exactly when its source is pinned: from pageable memory the host waits while
    the driver stages the bytes, whatever the flag says.

    Args:
        xb: ``uint8 [B, 3, H, W]`` on the host, pinned or pageable.
        staging: for a float wire, a host buffer of ``xb``'s shape in the wire's dtype, pinned or
            pageable, that the conversion writes into (see :func:`staging_buffer`); its previous
            copy must have run (a buffer per batch, reused after a sync). None: a fresh pageable
            tensor, ``xb.half()`` as usually written, which also allocates every step.

    Example:
        >>> xb = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
        >>> send(xb, "float16", "cpu", staging=staging_buffer(xb, "float16", pinned=False)).dtype
        torch.float16
    """
    if wire not in WIRES:
        raise ValueError(f"wire must be one of {WIRES} (got {wire!r})")
    src = xb
    if wire != "uint8":
        src = xb.to(getattr(torch, wire)) if staging is None else staging.copy_(xb)  # the host converts
    return src.to(device, non_blocking=src.is_pinned())


def staging_buffer(xb: torch.Tensor, wire: str, pinned: bool) -> torch.Tensor | None:
    """The host buffer a float ``wire`` converts ``xb`` into before its copy; None for ``"uint8"``.

    Pinned buffers need CUDA (the driver page-locks them). Prepared once, so that a float wire's
    cost is the conversion and the bytes, not an allocation (``xb.half()`` allocates each step).
    """
    if wire == "uint8":
        return None
    return torch.empty(xb.shape, dtype=getattr(torch, wire), pin_memory=pinned)


#: Bytes of device memory per input pixel per image for a ResNet-18 training step: an *estimate*,
#: not a measurement of any GPU. Its base is what :func:`saved_bytes_per_pixel` measures on any
#: device: the tensors a step saves for backward, 237 bytes per input pixel under bfloat16 or
#: float16 autocast (442 in float32). 600 is that with a margin (about 2.5x) for what the peak holds
#: beside them: gradients of activations during backward, the allocator's rounding and cuDNN's
#: workspaces. A 1280x960 image then needs ~0.7 GB, so batch 64 ~48 GB (:func:`train_bytes`). On a
#: GPU, :func:`calibrate` measures the peak itself with ``max_memory_allocated``.
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
    """A ResNet-18 step ``step(x_uint8_on_host, labels, wire, staging=None)`` with its optimiser."""
    cuda = device.type == "cuda"
    model = resnet18_with_normalize(num_classes).to(device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)  # Tensor Cores prefer NHWC for convs
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp and cuda)
    ctx = (lambda: torch.autocast(device.type, dtype=autocast_dtype(device))) if amp else nullcontext
    model.train()

    def step(xb: torch.Tensor, yb: torch.Tensor, wire: str, staging: torch.Tensor | None = None) -> None:
        x = send(xb, wire, device, staging)
        with ctx():
            loss = nn.functional.cross_entropy(model(x), yb)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def _random_batch(batch: int, size: tuple[int, int], num_classes: int, g: torch.Generator):
    """``uint8 [batch, 3, H, W]`` images and ``int64 [batch]`` labels, on the host."""
    w, h = size
    return (torch.randint(0, 256, (batch, 3, h, w), dtype=torch.uint8, generator=g),
            torch.randint(0, num_classes, (batch,), generator=g))


def saved_bytes_per_pixel(device, size: tuple[int, int] = (32, 32), amp: bool = True,
                          num_classes: int = 10) -> float:
    """Bytes per input pixel per image of the tensors a ResNet-18 step saves for its backward.

    A ``saved_tensors_hooks`` pack hook sums the storages autograd keeps during the forward, at
    batch 4 minus batch 2 (the weights cancel out). No allocator is involved, so the figure is the
    same on any device for the same dtypes: the floor of what a step's peak holds per pixel, before
    the gradients of activations, the allocator's rounding and cuDNN's workspaces. The figure is
    per pixel whatever ``size`` is; a small one is quick.

    Example:
        >>> 200 < saved_bytes_per_pixel("cpu", (16, 16), amp=False) < 1000
        True
    """
    device = torch.device(device)
    model = resnet18_with_normalize(num_classes).to(device)
    ctx = torch.autocast(device.type, dtype=autocast_dtype(device)) if amp else nullcontext()
    g = torch.Generator().manual_seed(0)
    saved = []
    for batch in (2, 4):
        storages: dict[int, int] = {}  # data pointer -> bytes: views of one storage count once

        def pack(t: torch.Tensor, storages: dict[int, int] = storages) -> torch.Tensor:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        xb, yb = _random_batch(batch, size, num_classes, g)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
            nn.functional.cross_entropy(model(xb.to(device)), yb.to(device))
        saved.append(sum(storages.values()))
    return (saved[1] - saved[0]) / (2 * size[0] * size[1])


def step_peak_bytes(device, batch: int, size: tuple[int, int], amp: bool = True, num_classes: int = 10,
                    step=None) -> int:
    """Peak device memory (``max_memory_allocated``) of one ResNet-18 training step, after a warm-up.

    The warm-up step allocates the optimiser's state and lets cuDNN choose its algorithms for
    these shapes; the peak of the second step is what every later step needs. CUDA only.
    """
    device = torch.device(device)
    step = step or _trainer(device, amp, num_classes)
    xb, yb = _random_batch(batch, size, num_classes, torch.Generator().manual_seed(batch))
    yb = yb.to(device)
    step(xb, yb, "uint8")  # warm-up: optimiser state, cuDNN's choices for these shapes
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    step(xb, yb, "uint8")
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


def calibrate(device, size: tuple[int, int] = (224, 224), amp: bool = True, num_classes: int = 10) -> float | None:
    """Measured bytes of device memory per input pixel per image of a ResNet-18 training step.

    The peak of a step at batch 4 minus the peak at batch 2 (:func:`step_peak_bytes`), over the two
    extra images' pixels: the weights, gradients and momentum cancel out. A peak holds the saved
    activations (:func:`saved_bytes_per_pixel`), the gradients in flight, and the workspace of
    the cuDNN kernel running at that moment, which cuDNN picks per shape and which can grow by
    tens of MB from batch 2 to 4. At a small ``size`` that growth, over few pixels, dominates the
    figure: on an H100, 64x64 gave 5,936 bytes per pixel where the saved activations are a few
    hundred. Calibrate at a size like the cases you will run (the default, 224x224, has 12x the
    pixels of 64x64). None off CUDA, where the course does not check memory. Pass the result to
    :func:`fits` as ``per_pixel``.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    step = _trainer(device, amp, num_classes)
    small, large = (step_peak_bytes(device, b, size, step=step) for b in (2, 4))
    return max(large - small, 0) / (2 * size[0] * size[1])


def _epoch(batch: int, size: tuple[int, int], wire: str, device: torch.device, epoch_images: int, amp: bool,
           num_classes: int, pinned: bool | None):
    """One case of :func:`train_epoch`, built: ``(epoch, steps, pinned)``, ``epoch()`` running one epoch."""
    cuda = device.type == "cuda"
    pinned = cuda if pinned is None else pinned
    if pinned and not cuda:
        raise ValueError(f"train_epoch(pinned=True) needs CUDA: pinned memory is page-locked by the CUDA driver "
                         f"(device is {device}); pass pinned=False")
    step = _trainer(device, amp, num_classes)
    steps = max(1, epoch_images // batch)
    g = torch.Generator().manual_seed(0)
    pairs = [_random_batch(batch, size, num_classes, g) for _ in range(steps)]
    batches = [xb.pin_memory() if pinned else xb for xb, _ in pairs]
    labels = [yb.to(device) for _, yb in pairs]
    # One buffer per batch: a buffer is refilled only in the next epoch, after the harness's sync.
    staging = [staging_buffer(xb, wire, pinned) for xb in batches]

    def epoch():
        if pinned and wire != "uint8":  # the last epoch's copies read these buffers: done before refilling
            torch.cuda.synchronize(device)  # (free in a timed epoch: the harness synced after the last one)
        for xb, yb, buf in zip(batches, labels, staging):
            step(xb, yb, wire, buf)

    return epoch, steps, pinned


def _params(batch, size, wire, pinned, amp, steps, device) -> dict:
    return {"size": size_name(size), "batch": batch, "wire": wire, "pinned": pinned, "amp": amp, "steps": steps,
            "device": str(device)}


def train_epoch(batch: int, size: tuple[int, int], wire: str, device, epoch_images: int, amp: bool = True,
                repeats: int = 3, warmup: int = 1, num_classes: int = 10, name: str = "",
                pinned: bool | None = None, min_time: float = 0.0, max_repeats: int = 100) -> Measurement:
    """Times one epoch of ResNet-18 training steps, the batch sent the ``wire`` way.

    An epoch is ``max(1, epoch_images // batch)`` steps over batches prepared in advance, so only
    the conversion, the transfer and the step are timed, not a loader. A float wire converts into
    a host buffer prepared per batch (:func:`staging_buffer`), pinned or pageable as the batch is.
    Mixed precision: ``autocast`` in :func:`autocast_dtype`, with a ``GradScaler`` on CUDA. To
    compare cases, time them in turns instead (:func:`train_in_turns`).

    Args:
        pinned: the batches (and a float wire's buffers) are in pinned memory and copied
            ``non_blocking``; default: where CUDA is, as a DataLoader with ``pin_memory=True``
            hands them over. Pinning needs CUDA.
        min_time: keep timing epochs (at least ``repeats``, at most ``max_repeats``) until this
            many seconds are spent: a time budget rather than a count, for long cases.

    Returns:
        A :class:`Measurement` of seconds per epoch, named ``name`` or ``"<wire> on the wire,
        <pinned or pageable>"``; ``items`` are images, ``params`` hold ``size``, ``batch``,
        ``wire``, ``pinned``, ``amp``, ``steps`` and ``device``.
    """
    device = torch.device(device)
    epoch, steps, pinned = _epoch(batch, size, wire, device, epoch_images, amp, num_classes, pinned)
    return benchmark(epoch, name=name or f"{wire} on the wire, {'pinned' if pinned else 'pageable'}", repeats=repeats,
                     warmup=warmup, min_time=min_time, max_repeats=max_repeats, items=steps * batch,
                     params=_params(batch, size, wire, pinned, amp, steps, device))


def train_in_turns(cases: dict[str, dict], device, epoch_images: int, repeats: int = 5, warmup: int = 1,
                   num_classes: int = 10) -> list[Measurement]:
    """Times several training cases **in turns** (a, b, c, a, b, c, ...), one epoch per call, so that
    the verdict method can compare any two as pairs (:func:`gpufeed.measure.verdict.compare`).

    Args:
        cases: name -> :func:`train_epoch`'s case arguments: ``batch``, ``size``, ``wire``, and
            optionally ``amp`` (default True) and ``pinned`` (default: where CUDA is).
        epoch_images: images per epoch (``epoch_images // batch`` steps, at least one).

    Returns:
        One :class:`Measurement` per case, in the order given, as :func:`train_epoch` returns them.

    Example:
        >>> a, b = train_in_turns({"u8": dict(batch=2, size=(16, 16), wire="uint8", amp=False),
        ...                        "f16": dict(batch=2, size=(16, 16), wire="float16", amp=False)}, "cpu", 2, repeats=2)
        >>> [m.name for m in (a, b)], len(a.samples) == len(b.samples) == 2, b.params["wire"]
        (['u8', 'f16'], True, 'float16')
    """
    device = torch.device(device)
    built, params, items = {}, {}, {}
    for name, c in cases.items():
        amp = c.get("amp", True)
        epoch, steps, pinned = _epoch(c["batch"], c["size"], c["wire"], device, epoch_images, amp, num_classes,
                                      c.get("pinned"))
        built[name], items[name] = epoch, steps * c["batch"]
        params[name] = _params(c["batch"], c["size"], c["wire"], pinned, amp, steps, device)
    return interleave(built, repeats=repeats, warmup=warmup, items=items, params=params,
                      desc=f"{len(cases)} training cases in turns")
