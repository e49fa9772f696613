"""The device transforms, each written once: normalise, per-sample crop + flip, and both on a batch.

* :data:`IMAGENET_MEAN`, :data:`IMAGENET_STD`: the one copy of ImageNet's per-channel constants
  (for images scaled to [0, 1]).
* :func:`normalize`: ``uint8`` (or float on the same 0..255 scale) images to ``(x / 255 - mean) /
  std`` in a float dtype, as one multiply-add whose constants are made once per device and dtype
  (:func:`affine`): no host-to-device copy per call, and the input is never changed.
* :func:`draw_crops`: per-sample crop corners and flips, drawn on the CPU from a seeded generator
  (so a seed gives the same batches on every device); :func:`crop_flip` cuts them out of a batch,
  as one gather on a GPU (:func:`gather_crops`) or one slice copy per sample on a CPU
  (:func:`copy_crops`); :func:`flip` flips by a mask; :class:`CropFlip` is the per-sample version
  for DataLoader workers.
* :func:`crop_flip_normalize`: the CPU's one pass from stored bytes to the model's input (or, into
  a ``uint8`` out, to the crops alone), :data:`GROUP` samples a task (:func:`crop_tasks`) on a
  pool of threads (:func:`crop_pool`).
* :class:`DeviceAugment`: crop + flip + normalise of a whole ``uint8`` batch where it lives;
  :func:`output_stats` checks a mean and std against the output dtype (``uint8``: none).
* :func:`as_device`: small parameter tensors to a device without making the host wait.

Taught in ``notebooks/08_prefetch.ipynb`` (normalise) and ``notebooks/09_augment.ipynb`` (crops).

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
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

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


def crop_flip_normalize(src: torch.Tensor, rows: Sequence[int], corners: torch.Tensor,
                        flips: torch.Tensor, crop: int, out: torch.Tensor,
                        mean: Sequence[float] | None = IMAGENET_MEAN,
                        std: Sequence[float] | None = IMAGENET_STD, *,
                        threads: int = 1) -> torch.Tensor:
    """The CPU's one pass from stored ``uint8`` to the model's input: ``out[i]`` = row ``rows[i]``
    of ``src`` ``[N, C, H, W]``, cropped at ``corners[i]``, flipped if ``flips[i]``, normalised.

    The same values as :func:`crop_flip` into ``out`` followed by :func:`normalize`'s
    ``(x / 255 - mean) / std`` (tests check bit for bit), without their extra passes over the
    batch: each sample is read once from ``src`` (the memmap itself: no gathered copy first) and
    written once into ``out`` as float, and :data:`GROUP` samples at a time are then scaled while
    their ~2.4 MB of float32 are still in the CPU's cache. A ``uint8`` ``out`` gets the crops
    alone (the stored bytes; normalise where they go). ``threads`` > 1 hands the groups to a
    small pool of threads (torch releases the GIL inside each op), so every core works on the
    batch; the groups are there because the Python between the ops holds the GIL: one scaling
    (two ops) per group instead of per sample. :func:`crop_tasks`
    gives the same work as tasks, for a caller that keeps the pool busy with the next batch
    while it waits.

    Args:
        src: ``uint8 [N, C, H, W]``, e.g. the memmap's images.
        rows: the batch's row numbers, ``B`` of them.
        corners, flips: ``int64 [B, 2]`` (top, left) and ``bool [B]``, from :func:`draw_crops`.
        crop: the output side.
        out: ``[B, C, crop, crop]`` to write into, float (normalised) or ``uint8`` (the crops
            alone: then mean and std must be None); returned.
        mean, std: per channel on the [0, 1] scale; None for both: only ``/ 255``.
        threads: threads that share the batch.

    Example:
        >>> src = torch.randint(0, 256, (5, 3, 6, 6), dtype=torch.uint8)
        >>> corners, flips = draw_crops(2, (6, 6), 4, torch.Generator().manual_seed(0))
        >>> out = crop_flip_normalize(src, [4, 1], corners, flips, 4, torch.empty(2, 3, 4, 4),
        ...                           threads=2)
        >>> ref = normalize(crop_flip(src[[4, 1]], corners, flips, 4, out=torch.empty(2, 3, 4, 4)),
        ...                 torch.float32, IMAGENET_MEAN, IMAGENET_STD, max_value=255)
        >>> bool((out - ref).abs().max() < 1e-6)
        True
        >>> raw = crop_flip_normalize(src, [4, 1], corners, flips, 4,
        ...                           torch.empty(2, 3, 4, 4, dtype=torch.uint8), None, None)
        >>> torch.equal(raw, crop_flip(src[[4, 1]], corners, flips, 4))
        True
    """
    tasks = crop_tasks(src, rows, corners, flips, crop, out, mean, std)
    threads = max(1, min(threads, len(tasks)))
    if threads == 1:
        for task in tasks:
            task()
        return out
    pool = crop_pool(threads)
    for f in [pool.submit(task) for task in tasks]:
        f.result()  # re-raises a worker's exception here
    return out


def crop_tasks(src: torch.Tensor, rows: Sequence[int], corners: torch.Tensor, flips: torch.Tensor,
               crop: int, out: torch.Tensor, mean: Sequence[float] | None = IMAGENET_MEAN,
               std: Sequence[float] | None = IMAGENET_STD) -> list[Callable[[], None]]:
    """:func:`crop_flip_normalize`'s work as one task per :data:`GROUP` samples (:data:`RAW_GROUP`
    for ``uint8`` crops), to run in any order on any thread (each writes its own rows of ``out``;
    the scratch is the thread's own).

    Many small tasks instead of one slice of the batch per thread: a thread that finishes early
    takes the next group instead of waiting for the other (flipped samples cost an extra copy, so
    equal halves are not equal work), and a caller can queue the next batch's groups behind this
    one's (:class:`gpufeed.data.ImageLoader` does), so the pool never waits between batches.

    Why a float task is three passes over its crops (convert, multiply, add) and not one: torch
    has no ``uint8`` -> float multiply-add. ``torch.addcmul(shift, crops, scale)`` on ``uint8``
    crops first makes a float copy of them (on the CPU, TensorIterator promotes an input by
    copying it), and ``addcmul`` on floats with ``[C, 1, 1]`` operands ran at a ninth of the speed
    of ``mul_`` then ``add_`` (236 against 28 µs an image at 224, one core, in the cache). Nor is
    the memory's bandwidth what holds the float path back: side by side in one run on a 2-core
    EPYC (twice), writing a batch's float32 alone (``fill_``) ran at 0.80 and 0.95 of the rate the
    bench's bandwidth bound allows (:func:`gpufeed.measure.ceilings.bandwidth_bound`), converting
    ready ``uint8`` crops to float at 0.80 and 0.85, and this path at 0.31 and 0.29: the rest is
    the work per sample (its crop, its flip, the scaling passes, the Python between ops). One
    read and one write a value
    would take a fused kernel written outside torch (C++ or a compiler), which this package does
    not ship.
    """
    rows, corner_list, flip_list = [int(r) for r in rows], corners.tolist(), flips.tolist()
    raw = out.dtype == src.dtype  # the crops alone, as stored
    if not (raw or out.dtype.is_floating_point):
        raise ValueError(f"crop_flip_normalize: out must be {src.dtype} (the crops alone) or a "
                         f"float type (normalised), got {out.dtype}")
    if raw and (mean is not None or std is not None):
        raise ValueError(f"crop_flip_normalize: a {out.dtype} out gets the crops as stored bytes, "
                         "which are not normalised; pass mean=None, std=None (and normalise where "
                         "the bytes go) or a float out")
    if raw or mean is None:
        scale = shift = None
    else:
        scale, shift = affine(tuple(map(float, mean)), tuple(map(float, std)), out.dtype,
                              out.device)

    nhwc = not out.is_contiguous() and out.is_contiguous(memory_format=torch.channels_last)

    def group(a: int, b: int) -> None:
        windows = []
        for i in range(a, b):
            top, left = corner_list[i]
            # a view into src: nothing read yet
            window = src[rows[i], :, top:top + crop, left:left + crop]
            # a flip is a copy, in uint8
            windows.append(window.flip(-1) if flip_list[i] else window)
        if raw:
            # the one read of each image, straight into the batch
            torch.stack(windows, out=out[a:b])
            return
        o = out[a:b]
        if nhwc:  # channels_last: one strided copy per channel plane beats torch's transposing copy
            # this thread's own, kept between batches
            scratch = _scratch((GROUP, *out.shape[1:]), src.dtype)
            stacked = torch.stack(windows, out=scratch[:b - a])
            for c, plane in enumerate(stacked.unbind(1)):
                o.select(1, c).copy_(plane)
        else:
            for k, window in enumerate(windows):
                # uint8 -> float straight from the stored image: read once, written once (a stack
                # into a uint8 scratch first would be one more pass)
                o[k].copy_(window)
        if scale is None:
            o.mul_(1.0 / 255)
        else:
            o.mul_(scale).add_(shift)  # while the group is in the cache: (x / 255 - mean) / std

    n, step = len(rows), RAW_GROUP if raw else GROUP
    return [functools.partial(group, a, min(n, a + step)) for a in range(0, n, step)]


#: Samples :func:`crop_flip_normalize` stacks, converts and scales together (see there). Four
#: float32 crops at 224 are 2.4 MB, so a task's three passes (convert, multiply, add) run in the
#: cache with both cores at work (4.8 MB of the 32 MB L3); eight (9.6 MB) spill more of each pass.
#: Measured with :class:`gpufeed.data.ImageLoader` (crop 224 of 256, batches of 64, float32),
#: groups in turns in one process, 9 epochs each, on a 2-core AMD EPYC VM (32 MB L3): 4 gave
#: 5,970 images/s, 8 gave 5,250, 2 gave 5,689; again at 3x224x224 stored, 7,824 against 6,703.
#: Each sample is converted straight from the stored image into ``out`` rather than stacked into a
#: ``uint8`` scratch and converted as a group (one pass fewer over the crop): with 4 a task, side
#: by side in one run (9 epochs each in turns), 1.16x the images/s with two threads and 1.10x
#: with one (1.09x and 1.14x in a run with other work on the machine).
GROUP = 4

#: Samples a task for ``uint8`` crops (one ``stack``, no passes over floats): fewer, larger tasks
#: cost less Python. In the same run as :data:`GROUP`'s second figures, 8 gave 23,630 images/s and
#: 4 gave 19,696.
RAW_GROUP = 8

_LOCAL = threading.local()


def _scratch(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A buffer of this thread's, made once per shape (fresh memory every batch would
    page-fault)."""
    buf = getattr(_LOCAL, "scratch", None)
    if buf is None or buf.shape != shape or buf.dtype != dtype:
        buf = _LOCAL.scratch = torch.empty(shape, dtype=dtype)
    return buf


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _one_intra_op_thread() -> None:
    """A crop pool thread's initializer: its torch ops run on this thread alone (see
    :func:`crop_pool`)."""
    # torch's per-thread lazy init first: at the first op it would undo the next line
    torch.get_num_threads()
    torch.set_num_threads(1)


def crop_pool(threads: int) -> ThreadPoolExecutor:
    """The long-lived pool of ``threads`` threads that runs :func:`crop_tasks` (threads started per
    batch would cost more than the copies). One per size and process: a forked child (a DataLoader
    worker) gets its own, since the parent's threads do not exist in it.

    Each pool thread runs its ops on itself alone. A task's ops (a group of eight crops) are above
    torch's grain size, so with torch's default each thread would open an OpenMP team of
    ``get_num_threads()`` (the cores): 8 pool threads x 32 cores = 256 threads on 32 cores. The
    pool is the parallelism here, so its threads take one intra-op thread each. How, from
    ``aten/src/ATen/ParallelOpenMP.cpp``: ``torch.set_num_threads(n)`` sets the calling thread's
    OpenMP team size (``omp_set_num_threads``, a per-thread setting) and MKL's
    (``mkl_set_num_threads_local``), but also a process-wide default that threads read when they
    first run an op (``init_num_threads``); so each pool thread first runs torch's lazy init, then
    sets 1, and once all have started the caller sets its own count back as that default. (Sizing
    the pool from the budget instead, ``cores // get_num_threads()``, gives one thread with
    torch's defaults, and loses what the pool is for: several threads between ops that hold the
    GIL.) Threads that start their first op while a pool is being made may read 1.
    """
    key = (os.getpid(), threads)
    if key not in _POOLS:
        own = torch.get_num_threads()
        pool = ThreadPoolExecutor(threads, thread_name_prefix="gpufeed-crop",
                                  initializer=_one_intra_op_thread)
        started = threading.Barrier(threads)
        # every thread started: each ran the initializer
        list(pool.map(lambda _: started.wait(30), range(threads)))
        torch.set_num_threads(own)  # the process-wide default back to the caller's
        _POOLS[key] = pool
    return _POOLS[key]


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
            :func:`output_stats`).
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
        """The CPU's work for ``rows`` of ``src`` with :meth:`params`' draw (:func:`crop_tasks`)."""
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
