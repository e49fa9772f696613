"""The CPU's one pass from stored ``uint8`` images to the model's input, on a pool of threads.

* :func:`crop_flip_normalize`: each sample read once from the stored images (the memmap itself: no
  gathered copy first), cropped, flipped, written once into the batch as float and scaled while it
  is in the cache (or, into a ``uint8`` out, the crops alone); the same values as
  :func:`gpufeed.data.transforms.crop_flip` then :func:`gpufeed.data.transforms.normalize`.
* :func:`crop_tasks`: the same work as one task per :data:`GROUP` samples (:data:`RAW_GROUP` for
  ``uint8`` crops), for a caller that keeps the pool busy with the next batch while it waits
  (:class:`gpufeed.data.ImageLoader`).
* :func:`crop_pool`: the long-lived pool of threads that runs the tasks, one intra-op thread each.

:class:`gpufeed.data.device_augment.DeviceAugment` runs these on a CPU batch. Taught in
``notebooks/11_together.ipynb`` (the one pass, :data:`GROUP`).

Example:
    >>> from gpufeed.data.transforms import draw_crops
    >>> src = torch.randint(0, 256, (5, 3, 6, 6), dtype=torch.uint8)
    >>> corners, flips = draw_crops(2, (6, 6), 4, torch.Generator().manual_seed(0))
    >>> out = torch.empty(2, 3, 4, 4)
    >>> tasks = crop_tasks(src, [4, 1], corners, flips, 4, out)  # one task: 2 samples < GROUP
    >>> len(tasks), crop_flip_normalize(src, [4, 1], corners, flips, 4, out, threads=2) is out
    (1, True)
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, affine


def crop_flip_normalize(src: torch.Tensor, rows: Sequence[int], corners: torch.Tensor,
                        flips: torch.Tensor, crop: int, out: torch.Tensor,
                        mean: Sequence[float] | None = IMAGENET_MEAN,
                        std: Sequence[float] | None = IMAGENET_STD, *,
                        threads: int = 1) -> torch.Tensor:
    """The CPU's one pass from stored ``uint8`` to the model's input: ``out[i]`` = row ``rows[i]``
    of ``src`` ``[N, C, H, W]``, cropped at ``corners[i]``, flipped if ``flips[i]``, normalised.

    The same values as :func:`~gpufeed.data.transforms.crop_flip` into ``out`` followed by
    :func:`~gpufeed.data.transforms.normalize`'s ``(x / 255 - mean) / std`` (tests check bit for
    bit), without their extra passes over the batch: each sample is read once from ``src`` (the
    memmap itself: no gathered copy first) and written once into ``out`` as float, and
    :data:`GROUP` samples at a time are then scaled while their ~2.4 MB of float32 are still in
    the CPU's cache. A ``uint8`` ``out`` gets the crops alone (the stored bytes; normalise where
    they go). ``threads`` > 1 hands the groups to a small pool of threads (torch releases the GIL
    inside each op), so every core works on the batch; the groups are there because the Python
    between the ops holds the GIL: one scaling (two ops) per group instead of per sample.
    :func:`crop_tasks` gives the same work as tasks, for a caller that keeps the pool busy with
    the next batch while it waits.

    Args:
        src: ``uint8 [N, C, H, W]``, e.g. the memmap's images.
        rows: the batch's row numbers, ``B`` of them.
        corners, flips: ``int64 [B, 2]`` (top, left) and ``bool [B]``, from
            :func:`~gpufeed.data.transforms.draw_crops`.
        crop: the output side.
        out: ``[B, C, crop, crop]`` to write into, float (normalised) or ``uint8`` (the crops
            alone: then mean and std must be None); returned.
        mean, std: per channel on the [0, 1] scale; None for both: only ``/ 255``.
        threads: threads that share the batch.

    Example:
        >>> from gpufeed.data.transforms import crop_flip, draw_crops, normalize
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
    bench's bandwidth bound allows (:func:`gpufeed.measure.rates.bandwidth_bound`), converting
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
