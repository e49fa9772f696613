"""The front door: the course's whole pipeline for your own training loop, in one class.

:class:`ImageLoader` reads a memmap dataset (a folder of images decoded once by
:func:`gpufeed.data.memmap.build_memmap`) and yields shuffled batches ``(images, targets)`` on the
device, each image cropped and flipped on its own and normalised: ``images`` ``float32 [B, 3, crop,
crop]`` (or, with ``dtype=torch.uint8``, the crops as stored bytes, for a device that normalises
them itself) and ``targets`` ``int64 [B]``. It is lessons 05-09 put together:

* on CUDA, one gather per batch (:class:`gpufeed.data.loader.FastLoader`, lesson 06) into pinned
  memory on a background thread (:class:`gpufeed.data.prefetch.ThreadPrefetcher`, lesson 08), then
  the copy and the per-sample crop/flip/normalise (:class:`gpufeed.data.transforms.DeviceAugment`,
  lesson 09) on a side stream (:class:`gpufeed.data.prefetch.CudaPrefetcher`), ordered with the
  compute stream by an event and kept alive with ``record_stream``;
* on the CPU, no gather: each sample is cropped, flipped and normalised straight out of the memmap
  in one pass (:func:`gpufeed.data.transforms.crop_flip_normalize`), eight samples a task, by a
  small pool of threads that has the next batch or two queued behind the one it is making.

The crops and flips are drawn on the CPU from a generator seeded by ``(seed, epoch, rank)``: the
same seed gives the same batches on a CPU and on a GPU. Each ``iter()`` is one epoch, reshuffled;
:meth:`ImageLoader.set_epoch` picks the epoch (as DistributedSampler's does).

Example:
    >>> import tempfile, pathlib
    >>> from gpufeed.measure.synth import synth_folder
    >>> from gpufeed.data.memmap import build_memmap
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> src = synth_folder(tmp / "jpeg", n=10, size=(48, 40), classes=2, progress=False).path
    >>> mm = build_memmap(src, tmp / "mm", size=(32, 32), progress=False).path
    >>> loader = ImageLoader(mm, batch_size=4, crop=24, device="cpu", drop_last=True)
    >>> [(tuple(x.shape), x.dtype, y.dtype) for x, y in loader]
    [((4, 3, 24, 24), torch.float32, torch.int64), ((4, 3, 24, 24), torch.float32, torch.int64)]
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, wait

import torch

from gpufeed.data.arrays import open_arrays
from gpufeed.data.loader import FastLoader, seeded_generator
from gpufeed.data.prefetch import CudaPrefetcher, ThreadPrefetcher
from gpufeed.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DeviceAugment,
    crop_pool,
    crop_tasks,
    output_stats,
)


def _use_count(t: torch.Tensor) -> int:
    """How many tensors (and NumPy arrays, DLPack capsules) hold ``t``'s memory, counted by torch itself."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _storage_refs(t: torch.Tensor) -> int:
    """Python references to ``t``'s storage object: torch keeps one storage object per storage, so
    an ``untyped_storage()`` someone holds is this count going up, not the use count."""
    return sys.getrefcount(t.untyped_storage())


_HAS_USE_COUNT = hasattr(torch._C, "_storage_Use_Count")  # private; registered with torch's CUDA module (2.x)
_ALONE = _use_count(torch.empty(1)) if _HAS_USE_COUNT else None  # the count of a tensor nothing else holds
_ALONE_REFS = _storage_refs(torch.empty(1))  # the same for the storage object


def _free(buf: torch.Tensor) -> bool:
    """Whether nothing but the pool holds ``buf``: no other tensor, array or storage object here,
    and no other process (memory moved to shared memory, e.g. by pickling a batch out of a
    DataLoader worker, may be mapped elsewhere: never free again)."""
    return not buf.is_shared() and _use_count(buf) == _ALONE and _storage_refs(buf) == _ALONE_REFS


class FreeBuffers:
    """Output buffers reused only when nothing outside holds them: the safe default's page-fault saver.

    A batch is a view of one buffer. :meth:`take` hands out a buffer whose memory nobody holds any
    more (torch's own use count of the storage: every view, ``.numpy()`` array or tensor saved for
    backward counts; and the references to its storage object, which a held ``untyped_storage()``
    adds), else fresh memory, which joins the pool while the pool has fewer than ``keep``. A
    buffer in shared memory (a batch pickled to another process, as a DataLoader worker sends
    it) leaves the pool for good: the other process's mapping is not counted here. A batch you
    keep is never written again; one you dropped is reused, so its pages are not faulted in again
    every batch. Where torch has no use count (``torch._C._storage_Use_Count`` is private; a
    build without it, or a torch that renames it), nothing is ever reused: every batch is fresh
    memory, which is always correct and costs the page faults of fresh memory (lesson 06).
    Thread-safe: two producers never take the same buffer.

    Example:
        >>> pool = FreeBuffers((4, 3, 8, 8), torch.float32, keep=2)
        >>> a = pool.take(4); b = pool.take(4)
        >>> a.data_ptr() != b.data_ptr()  # a is held: b is other memory
        True
        >>> ptr = b.data_ptr(); del b
        >>> pool.take(4).data_ptr() == ptr or not _HAS_USE_COUNT  # b was dropped: its buffer comes back
        True
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, keep: int):
        self.shape, self.dtype, self.keep = shape, dtype, keep
        self.buffers: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, rows: int) -> torch.Tensor:
        """A ``[rows, *shape[1:]]`` view of a buffer nobody else holds."""
        with self._lock:  # the check and the taking (the view raises the count) as one step
            if _HAS_USE_COUNT:
                self.buffers = [buf for buf in self.buffers if not buf.is_shared()]  # theirs now, not ours
                for buf in self.buffers:
                    if _free(buf):
                        return buf[:rows]
            buf = torch.empty(self.shape, dtype=self.dtype)
            if _HAS_USE_COUNT and len(self.buffers) < self.keep:
                self.buffers.append(buf)
            return buf[:rows]


class ImageLoader:
    """Shuffled, per-sample cropped, flipped and normalised batches from a memmap dataset, on ``device``.

    Args:
        path: a folder written by :func:`gpufeed.data.memmap.build_memmap`.
        batch_size: images per batch.
        device: where the batches go: ``"cpu"``, ``"cuda"`` (or ``"cuda:1"``, ...). ``"cuda"``
            alone is the current device when each ``iter()`` starts (under torchrun call
            ``torch.cuda.set_device(local_rank)`` before the first epoch).
        crop: the side of the square random crop; None: the stored images' short side.
        flip: random horizontal flips (probability 1/2).
        mean, std: per channel on the [0, 1] scale (default ImageNet's); None for both: only
            scaling to [0, 1].
        dtype: the images' floating dtype (float32, float16, bfloat16); or ``torch.uint8``: the
            crops as stored bytes, not normalised (ImageNet's default mean and std are then not
            used), 4x fewer bytes for a GPU to normalise on its side
            (:func:`gpufeed.data.transforms.normalize`).
        shuffle: a new random order each epoch; False: the stored order.
        drop_last: drop each epoch's last, short batch.
        seed: the order and the crops of epoch ``e`` depend only on ``(seed, e)`` (and the rank).
        rank, world_size: this process's shard of every epoch (DistributedDataParallel); every rank
            yields the same number of batches (:class:`~gpufeed.data.loader.FastLoader`: without
            ``drop_last`` the order is padded with its own start, as ``DistributedSampler`` pads).
        depth: batches prepared ahead of the one in use.
        threads: on the CPU, threads that crop and normalise the batches (default: the usable
            cores, at most 8); they work ``depth`` batches ahead of you, beside the training step.
        reuse_buffers: 0 (the default, safe): a batch stays valid however long you keep it; on
            the CPU its memory is reused only once nothing holds it any more (:class:`FreeBuffers`),
            which saves the page faults of fresh memory. ``k > 0`` (CPU only; ignored on CUDA): the
            images are written into ``k`` buffers in turn without that check, **so a batch's images
            are overwritten ``k`` batches later**: finish with them (or copy them) first.

    .. warning::
        On the CPU the crops are made by a pool of threads that lives as long as the process
        (:func:`gpufeed.data.transforms.crop_pool`), so a ``fork`` after the first epoch (a
        DataLoader's workers, ``multiprocessing``) forks a process with threads. They wait on
        their queue holding no lock and each runs its ops on itself alone (no OpenMP team of its
        own), and a forked child makes its own pool; but prefer the ``spawn`` or ``forkserver``
        start method for processes started after training began, as PyTorch advises for any
        threaded process.

    Raises:
        gpufeed.data.memmap.MemmapError: ``path`` is not a complete memmap dataset.
        ValueError: a bad argument (the message names it and says what to do).
    """

    def __init__(self, path: str | os.PathLike, batch_size: int, *, device="cpu", crop: int | None = None,
                 flip: bool = True, mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype: torch.dtype = torch.float32,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, rank: int = 0, world_size: int = 1,
                 depth: int = 2, reuse_buffers: int = 0, threads: int | None = None):
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"ImageLoader: device={str(device)!r} but torch sees no CUDA GPU; pass device='cpu' "
                             "(or gpufeed.config.device(), which picks what this machine has)")
        if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
            raise ValueError(f"ImageLoader: need 0 <= rank < world_size (got rank={rank}, world_size={world_size}); "
                             "rank counts from 0")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"ImageLoader: batch_size must be a whole number, at least 1 (got {batch_size!r})")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"ImageLoader: depth must be a whole number >= 1 (got {depth!r})")
        if not isinstance(reuse_buffers, int) or reuse_buffers < 0:
            raise ValueError(f"ImageLoader: reuse_buffers must be a whole number >= 0 (got {reuse_buffers!r})")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"ImageLoader: threads must be None or a whole number >= 1 (got {threads!r})")
        mean, std = output_stats("ImageLoader", dtype, mean, std)  # a clear ValueError if they do not fit dtype
        images, targets, _ = open_arrays(path)  # read-only; MemmapError in one line if path is not a dataset
        n, _, height, width = images.shape
        crop = min(height, width) if crop is None else crop
        if not isinstance(crop, int) or not 0 < crop <= min(height, width):
            raise ValueError(f"ImageLoader: crop={crop!r} does not fit the stored {height}x{width} (height x width) images of {path}; "
                             f"pick 1..{min(height, width)} or rebuild the memmap with a larger size")
        shard = n // world_size + (rank < n % world_size)
        if drop_last and batch_size > n // world_size:
            raise ValueError(f"ImageLoader: batch_size={batch_size} is larger than the {shard} images of "
                             f"{'this shard of ' if world_size > 1 else ''}{path}, so drop_last=True would yield "
                             "no batch; use a smaller batch_size or drop_last=False")
        self.path, self.batch_size, self.crop, self.flip, self.dtype = path, batch_size, crop, flip, dtype
        self.mean, self.std = mean, std
        self.seed, self.rank, self.world_size, self.depth = seed, rank, world_size, depth
        self.threads = threads or min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else
                                      os.cpu_count() or 1)
        self.reuse_buffers = reuse_buffers if self.device.type != "cuda" else 0
        self.cuda = self.device.type == "cuda"
        self._streams: dict[int, torch.cuda.Stream] = {}  # CUDA: the loader's one side stream per device
        # CUDA: gathered into fresh pinned memory from torch's caching host allocator, which keeps
        # each block until the copy out of it is done. The CPU path only takes its indices (_on_cpu).
        self.loader = FastLoader((images, targets), batch_size, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last, rank=rank, world_size=world_size, pin_memory=self.cuda)
        self.epoch = 0
        self._cpu_rings: list[tuple[list[torch.Tensor], int]] = []  # CPU, reuse_buffers > 0: (ring, cursor)
        self._free: FreeBuffers | None = None  # the CPU path's outputs by default: reused once dropped

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` uses (each ``iter()`` then moves on by one by itself)."""
        self.epoch = epoch

    def indices(self, epoch: int | None = None) -> list[torch.Tensor]:
        """The sample indices of each batch of an epoch (default: the next one) on this rank."""
        return self.loader.indices(self.epoch if epoch is None else epoch)

    def augmentation(self, epoch: int) -> DeviceAugment:
        """Epoch ``epoch``'s crop/flip/normalise, its generator seeded by ``(seed, epoch, rank)``."""
        return DeviceAugment(self.crop, mean=self.mean, std=self.std, flip=self.flip, dtype=self.dtype,
                             generator=seeded_generator(self.seed, epoch, self.rank, 1))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch, self.epoch = self.epoch, self.epoch + 1  # now, not at the first next()
        if self.cuda:
            augment, device = self.augmentation(epoch), self._cuda_device()
            host = ThreadPrefetcher(self._gathered(self.loader.epoch_batches(epoch), device), depth=self.depth)

            def on_gpu(batch):  # on the side stream, after the copy
                images, targets = batch
                return augment(images), targets

            # A new prefetcher per epoch, on the loader's one stream (see CudaPrefetcher's stream)
            return iter(CudaPrefetcher(host, device, depth=self.depth, pin_memory=False, transform=on_gpu,
                                       stream=self._stream(device)))
        if self.device.type == "cpu":
            return self._on_cpu(epoch)
        return self._to_device(self._on_cpu(epoch))  # another accelerator (e.g. mps): made here, copied there

    def _to_device(self, batches: Iterator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, targets in batches:
            yield images.to(self.device), targets.to(self.device)

    def _cuda_device(self) -> torch.device:
        """``device`` with its index: ``"cuda"`` alone is the current device when ``iter()`` is called
        (not when the loader was made), so a loader made before ``set_device(local_rank)`` still
        lands on its rank's GPU."""
        return self.device if self.device.index is not None else torch.device("cuda", torch.cuda.current_device())

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        """The loader's side stream on ``device``, made at its first epoch there and kept: every
        epoch's blocks come back to the same stream's pool of the caching allocator."""
        if device.index not in self._streams:
            self._streams[device.index] = torch.cuda.Stream(device)
        return self._streams[device.index]

    @staticmethod
    def _gathered(batches: Iterator, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """CUDA: the loader's batches, on the producer thread (whose current CUDA device is set first, as
        torch's pin-memory thread does: pinned memory then belongs to our device)."""
        torch.cuda.set_device(device)
        yield from batches

    def _on_cpu(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The CPU: each batch cropped, flipped and normalised straight from the memmap in one pass per
        sample (:func:`gpufeed.data.transforms.crop_tasks`, eight samples a task: no gathered uint8
        copy first) by a pool of ``threads`` threads. ``depth`` batches wait in the pool's queue
        behind the one it is making, so it goes from batch to batch without waiting for this thread
        (measured side by side on 2 cores against one batch at a time from a producer thread:
        1.2-1.6x at 224 over three runs, 1.8 cores busy instead of 1.5; 1.0-1.3x at 112). The same
        crops, in the same order, as the other devices' path (one generator, drawn in batch order,
        here)."""
        augment = self.augmentation(epoch)
        images, targets = self.loader.fields.tensors["0"], self.loader.fields.tensors["1"]  # plain views of the memmap
        shape = (self.batch_size, images.shape[1], self.crop, self.crop)
        # Reused outputs: the promise is "overwritten reuse_buffers batches after you got it", and
        # depth more are queued behind the one you hold. Kept for the next epochs (fresh memory
        # costs a page fault per 4 KiB, every epoch); a live iterator owns its ring.
        count = self.reuse_buffers + self.depth + 1 if self.reuse_buffers else 0
        # the ring keeps its cursor: the next epoch goes on from the slot after the last one written
        ring, start = self._cpu_rings.pop() if self._cpu_rings else ([torch.empty(shape, dtype=self.dtype)
                                                                     for _ in range(count)], 0)
        taken = 0  # ring slots written this epoch
        if not ring and self._free is None:  # the batch you hold, the last one, the queue and the one being made
            self._free = FreeBuffers(shape, self.dtype, keep=self.depth + 3)
        free, pool = self._free, crop_pool(self.threads)
        queued: deque[tuple[torch.Tensor, torch.Tensor, list[Future]]] = deque()  # oldest first
        try:
            for k, idx in enumerate(self.loader.indices(epoch)):
                b = len(idx)
                corners, flips = augment.params(images[:b])  # only the shape is read: draws in batch order
                out = ring[(start + k) % len(ring)][:b] if ring else free.take(b)
                taken = k + 1
                tasks = crop_tasks(images, idx.tolist(), corners, flips, self.crop, out, self.mean, self.std)
                queued.append((out, torch.index_select(targets, 0, idx), [pool.submit(t) for t in tasks]))
                if len(queued) > self.depth:
                    yield _finished(queued.popleft())
            while queued:
                yield _finished(queued.popleft())
        finally:  # a break or an error leaves batches queued: none may be written once the next epoch owns the ring
            left = [f for *_, futures in queued for f in futures]
            for f in left:
                f.cancel()  # not started yet: never will be
            wait(left)  # the running ones (an error there has no one to go to)
            if ring:
                self._cpu_rings.append((ring, start + taken))


def _finished(batch: tuple[torch.Tensor, torch.Tensor, list[Future]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A queued batch once its tasks are done (a task's exception is raised here, in your thread)."""
    images, targets, futures = batch
    for f in futures:
        f.result()
    return images, targets
