"""The front door: the course's whole pipeline for your own training loop, in one class.

:class:`ImageLoader` reads a memmap dataset (a folder of images decoded once by
:func:`gpufeed.data.memmap.build_memmap`) and yields shuffled batches ``(images, targets)`` on the
device, each image cropped and flipped on its own and normalised: ``images`` ``float32 [B, 3, crop,
crop]`` (or, with ``dtype=torch.uint8``, the crops as stored bytes, for a device that normalises
them itself) and ``targets`` ``int64 [B]``. It is lessons 05-09 put together:

* on CUDA, one gather per batch (:class:`gpufeed.data.loader.FastLoader`, lesson 06) into pinned
  memory on a background thread (:class:`gpufeed.data.prefetch.ThreadPrefetcher`, lesson 08), then
  the copy and the per-sample crop/flip/normalise
  (:class:`gpufeed.data.device_augment.DeviceAugment`, lesson 09) issued on a side stream from a
  second thread (:class:`gpufeed.data.prefetch.CudaPrefetcher`), ordered with the compute stream
  by an event and kept alive with ``record_stream``: your loop's ``next()`` does no host work for
  the next batch;
* on the CPU, no gather: each sample is cropped, flipped and normalised straight out of the memmap
  in one pass (:func:`gpufeed.data.cpu_crops.crop_flip_normalize`), eight samples a task, by a
  small pool of threads that has the next batch or two queued behind the one it is making.

The crops and flips are drawn on the CPU from a generator seeded by ``(seed, epoch, rank)``: the
same seed gives the same batches on a CPU and on a GPU. Each ``iter()`` is one epoch, reshuffled;
:meth:`ImageLoader.set_epoch` picks the epoch (as DistributedSampler's does).

What an ImageNet recipe asks for: ``scale``/``ratio`` make the crop RandomResizedCrop's
(:mod:`gpufeed.data.resized`), ``memory_format=torch.channels_last`` lays the batch out for a
channels-last model, ``group_size`` reads in FFCV's quasi-random order (a dataset larger than the
memory, lesson 06), and :meth:`ImageLoader.state_dict` / :meth:`ImageLoader.load_state_dict`
resume an interrupted epoch at its next batch.

**The lifecycle of an iterator** (``it = iter(loader)``, an :class:`ImageLoaderIterator`; a ``for``
loop makes one). The loader holds the settings, checked once when it is built
(:class:`gpufeed.data.settings.ImageSettings`); each iterator owns one pass (FFCV splits its
``Loader`` and ``EpochIterator`` the same way):

* *Start.* ``iter()`` takes the epoch (the next one, or the one :meth:`ImageLoader.set_epoch` or
  :meth:`ImageLoader.load_state_dict` set) at once. On CUDA the producer threads start and begin
  the first batches then; on the CPU the crop pool is given work at the first ``next()``.
  Several iterators may be live at once; they share no state.
* *Running.* At most ``depth`` batches are prepared ahead of the one you hold (plus one being
  made). Every batch handed to you stays valid however long you keep it (fresh memory, or memory
  nothing else holds any more), unless you opted into ``reuse_buffers``.
* *End of the epoch.* ``StopIteration``; the threads' work for this iterator is over, and
  :meth:`ImageLoader.state_dict` reads the next epoch's batch 0.
* *``break``, or dropping the iterator.* When the last reference goes (at once in CPython; a
  reference cycle waits for the garbage collector), the iterator closes itself, as
  ``it.close()`` does: batches not yet started are cancelled, the ones being made are waited for
  (no thread writes into anything afterwards), the producer threads are stopped and joined, the
  reused buffers go back to the loader. Batches you already hold are untouched.
* *An exception in your loop body.* As a ``break`` once the iterator is unreachable. A name of
  yours (``it``) held by the exception's traceback keeps it alive with its threads waiting (they
  stop at ``depth`` batches ahead): call ``it.close()`` in a ``finally`` or leave the loop first.
* *An exception in the loader* (a crop task, a gather, a bad file): the batches before it are
  handed out, then it is raised in your thread by ``next()``, its traceback pointing at where it
  happened, and the iterator is closed (the next ``next()`` raises ``StopIteration``).
* *Interpreter exit.* The producer threads are daemons and do not delay exit; the crop pool's
  threads finish the tasks already queued (at most ``depth + 1`` batches) and are joined by
  :mod:`concurrent.futures`' exit hook.
* *fork.* A child process has none of its parent's threads: an iterator inherited from the parent
  must not be used there (it would wait for work that no thread will do). Call ``iter()`` in the
  child, whose crop pool is its own. On CUDA, use the ``spawn`` start method (CUDA cannot be
  used in a forked child).

.. warning::
    ``reuse_buffers=k`` makes a batch's images **be overwritten ``k`` batches later**: finish with
    them, or copy them, before then.

.. warning::
    On CUDA a batch is made on the loader's side stream and handed over to the stream that is
    current when you call ``next()`` (an event, then ``record_stream``). Use it on that stream; to
    use it on another one, order that stream after it (``wait_stream``) and ``record_stream`` it
    there yourself, as for any tensor that crosses streams.

.. warning::
    :meth:`ImageLoader.state_dict` counts the batches handed to you, not the ones your model has
    finished with: save it together with the checkpoint of the step that used the last batch.

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
    >>> it = iter(loader); first = next(it)  # a run stops after one batch of epoch 1...
    >>> state = loader.state_dict(); state["epoch"], state["batch"]
    (1, 1)
    >>> again = ImageLoader(mm, batch_size=4, crop=24, drop_last=True)  # ...a new one resumes it
    >>> again.load_state_dict(state)
    >>> torch.equal(next(iter(again))[0], next(it)[0])  # the very batch the first would have given
    True
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, wait
from dataclasses import fields

import torch

from gpufeed.data.arrays import open_arrays
from gpufeed.data.augment import RATIO
from gpufeed.data.buffers import FreeBuffers
from gpufeed.data.cpu_crops import crop_pool
from gpufeed.data.device_augment import DeviceAugment
from gpufeed.data.loader import FastLoader
from gpufeed.data.orders import seeded_generator
from gpufeed.data.prefetch import CudaPrefetcher, ThreadPrefetcher
from gpufeed.data.resized import ResizedCropAugment
from gpufeed.data.settings import ImageSettings
from gpufeed.data.streams import SideStreams
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD


class ImageLoader:
    """Shuffled, per-sample cropped, flipped and normalised batches from a memmap dataset, on
    ``device``.

    Args:
        path: a folder written by :func:`gpufeed.data.memmap.build_memmap`.
        batch_size: images per batch.
        device: where the batches go: ``"cpu"``, ``"cuda"`` (or ``"cuda:1"``, ...). ``"cuda"``
            alone is the current device when each ``iter()`` starts (under torchrun call
            ``torch.cuda.set_device(local_rank)`` before the first epoch).
        crop: the side of the square output; None: the stored images' short side. Without
            ``scale``, a random ``crop x crop`` window of the stored image.
        scale, ratio: RandomResizedCrop instead (the ImageNet recipe's; FFCV's and DALI's): a box
            whose area is a uniform fraction ``scale`` of the stored image (e.g. ``(0.08, 1.0)``)
            and whose aspect ratio (w / h) is log-uniform in ``ratio`` (default ``(3/4, 4/3)``),
            resized to ``crop x crop`` (antialiased bilinear, as torchvision's
            ``v2.RandomResizedCrop``; :class:`gpufeed.data.resized.ResizedCropAugment`). ``crop``
            may then exceed the stored size.
        flip: random horizontal flips (probability 1/2).
        mean, std: per channel on the [0, 1] scale (default ImageNet's); None for both: only
            scaling to [0, 1].
        dtype: the images' floating dtype (float32, float16, bfloat16); or ``torch.uint8``: the
            crops as stored bytes, not normalised (ImageNet's default mean and std are then not
            used), 4x fewer bytes for a GPU to normalise on its side
            (:func:`gpufeed.data.transforms.normalize`).
        shuffle: a new random order each epoch; False: the stored order.
        group_size: with ``shuffle``, FFCV's ``QUASI_RANDOM`` order for datasets larger than the
            memory: blocks of ``group_size`` neighbouring rows in a random order, each block
            shuffled within itself (:func:`gpufeed.data.orders.grouped_permutation`), so the reads
            stay inside a few blocks of the file at a time and the page cache needs to hold only
            those. A batch then mixes only a few blocks: build the memmap in a shuffled order
            (``build_memmap(..., order_seed=0)``) so neighbours are not the same class.
            None (the default): a full shuffle.
        memory_format: the images' layout: ``torch.contiguous_format`` (NCHW, the default) or
            ``torch.channels_last`` (NHWC in memory, same shape: what a channels-last model reads
            without a conversion of its own). The memmap stores NCHW rows: the CPU path writes
            each channel plane into the batch with a stride of 3 in the same pass; on CUDA the
            ``uint8`` crops are laid out before the normalisation, which keeps the layout.
        drop_last: drop each epoch's last, short batch.
        seed: the order and the crops of epoch ``e`` depend only on ``(seed, e)`` (and the rank).
        rank, world_size: this process's shard of every epoch (DistributedDataParallel); every rank
            yields the same number of batches (:class:`~gpufeed.data.loader.FastLoader`: without
            ``drop_last`` the order is padded with its own start, as ``DistributedSampler`` pads).
        depth: batches prepared ahead of the one in use.
        threads: on the CPU, threads that crop and normalise the batches (default: the usable
            cores, at most 8); they work ``depth`` batches ahead of you, beside the training step.
        reuse_buffers: 0 (the default, safe): a batch stays valid however long you keep it; on
            the CPU its memory is reused only once nothing holds it any more
            (:class:`~gpufeed.data.buffers.FreeBuffers`), which saves the page faults of fresh
            memory. ``k > 0`` (CPU only; ignored on CUDA): the images are written into ``k``
            buffers in turn without that check, **so a batch's images are overwritten ``k``
            batches later**: finish with them (or copy them) first.

    .. warning::
        On the CPU the crops are made by a pool of threads that lives as long as the process
        (:func:`gpufeed.data.cpu_crops.crop_pool`), so a ``fork`` after the first epoch (a
        DataLoader's workers, ``multiprocessing``) forks a process with threads. They wait on
        their queue holding no lock and each runs its ops on itself alone (no OpenMP team of its
        own), and a forked child makes its own pool; but prefer the ``spawn`` or ``forkserver``
        start method for processes started after training began, as PyTorch advises for any
        threaded process.

    Raises:
        gpufeed.data.memmap.MemmapError: ``path`` is not a complete memmap dataset.
        ValueError: a bad argument (the message names it and says what to do).
    """

    def __init__(self, path: str | os.PathLike, batch_size: int, *, device="cpu",
                 crop: int | None = None, flip: bool = True, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                 dtype: torch.dtype = torch.float32, shuffle: bool = True, drop_last: bool = False,
                 seed: int = 0, rank: int = 0, world_size: int = 1, depth: int = 2,
                 reuse_buffers: int = 0, threads: int | None = None, scale=None, ratio=RATIO,
                 group_size: int | None = None,
                 memory_format: torch.memory_format = torch.contiguous_format):
        # read-only; MemmapError in one line if path is not a dataset
        images, targets, _ = open_arrays(path)
        #: every setting, checked once (:class:`gpufeed.data.settings.ImageSettings`); the loader's
        #: attributes of the same names read them
        self.settings = ImageSettings.checked(
            "ImageLoader", stored=tuple(images.shape), path=path, batch_size=batch_size,
            device=device, crop=crop, flip=flip, mean=mean, std=std, dtype=dtype, shuffle=shuffle,
            drop_last=drop_last, seed=seed, rank=rank, world_size=world_size, depth=depth,
            reuse_buffers=reuse_buffers, threads=threads, scale=scale, ratio=ratio,
            group_size=group_size, memory_format=memory_format)
        self.path, self.cuda = path, self.settings.device.type == "cuda"
        self._streams = SideStreams()  # CUDA: the loader's one side stream per device
        # plain read-only views of the memmap: the CPU path reads them
        self._images, self._targets = images, targets
        # CUDA: gathered into fresh pinned memory from torch's caching host allocator, which keeps
        # each block until the copy out of it is done. The CPU path only takes its indices
        # (_on_cpu). The loader's own buffers are the CPU path's (reuse_buffers is 0 on CUDA).
        self.loader = FastLoader((images, targets),
                                 **{**self.settings.batching(), "reuse_buffers": 0},
                                 pin_memory=self.cuda)
        self.epoch = 0
        self._resume = 0  # batches of self.epoch the next iter() skips (load_state_dict)
        # the latest iter()'s position, [epoch, batches handed out], which state_dict reads (its
        # position only: holding the iterator would keep its threads alive after you drop it)
        self._latest: list[int] | None = None
        # CPU, reuse_buffers > 0: (ring, cursor)
        self._cpu_rings: list[tuple[list[torch.Tensor], int]] = []
        # the CPU path's outputs by default: reused once dropped
        self._free: FreeBuffers | None = None

    def __getattr__(self, name: str):
        """The settings by name (``loader.crop``, ``loader.device``, ...), read from
        :attr:`settings`."""
        settings = self.__dict__.get("settings")
        if settings is not None and name in {f.name for f in fields(settings)} - {"owner"}:
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` uses (each ``iter()`` then moves on by one by itself), from
        its first batch."""
        self.epoch, self._resume, self._latest = epoch, 0, None

    def _config(self) -> dict:
        """What a saved position only means for: the same samples, order, crops and shard."""
        return self.settings.resume_key(self.loader.fields.n)

    def _position(self, epoch: int, done: int) -> dict:
        """A position as :meth:`state_dict` gives it: a finished epoch reads as the next one's
        batch 0."""
        if done >= len(self):
            epoch, done = epoch + 1, 0
        return {"epoch": epoch, "batch": done, "config": self._config()}

    def state_dict(self) -> dict:
        """Where the loader stands: the epoch and the batch within it that come next.

        torchdata's ``StatefulDataLoader`` convention: save it beside the model's checkpoint, and
        :meth:`load_state_dict` on a new loader (in a new process) makes the next ``iter()`` start
        at exactly the next batch, with the same samples and the same crops and flips as the
        interrupted epoch would have given. It counts the batches the latest ``iter()`` *handed
        to you* (not those prepared ahead); a finished epoch reads as the next one's batch 0. With
        several iterators live at once, each one's own position is its
        :meth:`ImageLoaderIterator.state_dict`.

        (The module's example resumes a loader this way.)
        """
        return self._position(*(self._latest or (self.epoch, self._resume)))

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`: the next ``iter()`` is its epoch, from its batch on.

        Raises:
            ValueError: the state was saved by a loader with other data, batch size, seed, shard or
                crop settings (the message names them): its position would mean other batches.
        """
        if not isinstance(state, dict) or not {"epoch", "batch", "config"} <= state.keys():
            raise ValueError("ImageLoader.load_state_dict: expected the dict that "
                             "ImageLoader.state_dict() returns (keys epoch, batch, config), got "
                             f"{type(state).__name__}")
        ours = self._config()
        diff = {k: (v, ours.get(k)) for k, v in state["config"].items() if ours.get(k) != v}
        if diff:
            raise ValueError("ImageLoader.load_state_dict: the state was saved by a loader with "
                             f"other settings (saved, here): {diff}; build this loader as the "
                             "saved one was")
        self.epoch, self._resume, self._latest = int(state["epoch"]), int(state["batch"]), None

    def indices(self, epoch: int | None = None) -> list[torch.Tensor]:
        """The sample indices of each batch of an epoch (default: the next one) on this rank."""
        return self.loader.indices(self.epoch if epoch is None else epoch)

    def augmentation(self, epoch: int, skip: int = 0) -> DeviceAugment | ResizedCropAugment:
        """Epoch ``epoch``'s crop/flip/normalise, its generator seeded by ``(seed, epoch, rank)``,
        with the draws of the epoch's first ``skip`` batches already made (a resumed epoch)."""
        common = {"mean": self.mean, "std": self.std, "flip": self.flip, "dtype": self.dtype,
                  "generator": seeded_generator(self.seed, epoch, self.rank, 1),
                  "memory_format": self.memory_format}
        if self.scale is None:
            augment = DeviceAugment(self.crop, **common)
        else:
            augment = ResizedCropAugment(self.crop, self.scale, self.ratio, **common)
        stored = self._images.shape[1:]
        for idx in self.loader.indices(epoch)[:skip]:  # draws in batch order; only shapes read
            augment.params(torch.empty((len(idx), *stored), dtype=torch.uint8, device="meta"))
        return augment

    def __iter__(self) -> ImageLoaderIterator:
        epoch, self.epoch = self.epoch, self.epoch + 1  # now, not at the first next()
        start, self._resume = self._resume, 0
        it = ImageLoaderIterator(self, epoch, start)
        self._latest = it.position
        return it

    def _batches(self, epoch: int, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Epoch ``epoch``'s batches from batch ``start`` on."""
        if self.cuda:
            augment, device = self.augmentation(epoch, start), self._cuda_device()
            # each gathered into fresh pinned memory (the loader's pin_memory)
            batches = (self.loader.gather(idx) for idx in self.loader.indices(epoch)[start:])
            host = ThreadPrefetcher(self._gathered(batches, device), depth=self.depth)

            def on_gpu(batch):  # on the side stream, after the copy
                images, targets = batch
                return augment(images), targets

            # A new prefetcher per epoch, on the loader's one stream (see CudaPrefetcher's stream)
            return iter(CudaPrefetcher(host, device, depth=self.depth, pin_memory=False,
                                       transform=on_gpu, stream=self._streams.on(device)))
        if self.device.type == "cpu":
            return self._on_cpu(epoch, start)
        return self._to_device(self._on_cpu(epoch, start))  # e.g. mps: made here, copied there

    def _to_device(self, batches: Iterator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, targets in batches:
            yield images.to(self.device), targets.to(self.device)

    def _cuda_device(self) -> torch.device:
        """``device`` with its index: ``"cuda"`` alone is the current device when ``iter()`` is
        called (not when the loader was made), so a loader made before ``set_device(local_rank)``
        still lands on its rank's GPU."""
        return (self.device if self.device.index is not None
                else torch.device("cuda", torch.cuda.current_device()))

    @staticmethod
    def _gathered(batches: Iterator,
                  device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """CUDA: the loader's batches, on the producer thread (whose current CUDA device is set
        first, as torch's pin-memory thread does: pinned memory then belongs to our device)."""
        torch.cuda.set_device(device)
        yield from batches

    def _on_cpu(self, epoch: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The CPU: each batch cropped, flipped and normalised straight from the memmap in one pass
        per sample (:func:`gpufeed.data.cpu_crops.crop_tasks`, eight samples a task: no gathered
        uint8 copy first) by a pool of ``threads`` threads. ``depth`` batches wait in the pool's
        queue behind the one it is making, so it goes from batch to batch without waiting for this
        thread (``make bench`` measures the front door against the other pipelines). The same
        crops, in the same order, as the other devices' path (one generator, drawn in batch order,
        here)."""
        augment = self.augmentation(epoch, start)
        images, targets = self._images, self._targets
        shape = (self.batch_size, images.shape[1], self.crop, self.crop)
        # Reused outputs: the promise is "overwritten reuse_buffers batches after you got it", and
        # depth more are queued behind the one you hold. Kept for the next epochs (fresh memory
        # costs a page fault per 4 KiB, every epoch); a live iterator owns its ring.
        count = self.reuse_buffers + self.depth + 1 if self.reuse_buffers else 0
        layout = {"dtype": self.dtype, "memory_format": self.memory_format}
        # the ring keeps its cursor: the next epoch goes on from the slot after the last one written
        ring, cursor = self._cpu_rings.pop() if self._cpu_rings else ([torch.empty(shape, **layout)
                                                                      for _ in range(count)], 0)
        taken = 0  # ring slots written this epoch
        # the batch you hold, the last one, the queue and the one being made
        if not ring and self._free is None:
            self._free = FreeBuffers(shape, self.dtype, keep=self.depth + 3,
                                     memory_format=self.memory_format)
        free, pool = self._free, crop_pool(self.threads)
        queued: deque[tuple[torch.Tensor, torch.Tensor, list[Future]]] = deque()  # oldest first
        try:
            for idx in self.loader.indices(epoch)[start:]:
                b = len(idx)
                params = augment.params(images[:b])  # only the shape is read: draws in batch order
                out = ring[(cursor + taken) % len(ring)][:b] if ring else free.take(b)
                taken += 1
                tasks = augment.tasks(images, idx.tolist(), params, out)
                queued.append((out, torch.index_select(targets, 0, idx),
                               [pool.submit(t) for t in tasks]))
                if len(queued) > self.depth:
                    yield _finished(queued.popleft())
            while queued:
                yield _finished(queued.popleft())
        finally:
            # a break or an error leaves batches queued: none may be written once the next epoch
            # owns the ring
            left = [f for *_, futures in queued for f in futures]
            for f in left:
                f.cancel()  # not started yet: never will be
            wait(left)  # the running ones (an error there has no one to go to)
            if ring:
                self._cpu_rings.append((ring, cursor + taken))


def _finished(batch: tuple[torch.Tensor, torch.Tensor,
                           list[Future]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A queued batch once its tasks are done (a task's exception is raised here, in your
    thread)."""
    images, targets, futures = batch
    for f in futures:
        f.result()
    return images, targets


class ImageLoaderIterator:
    """One pass of an :class:`ImageLoader` (what ``iter(loader)`` returns; FFCV's
    ``EpochIterator``): it owns its epoch's producer (on CUDA the prefetchers' threads, streams
    and pinned batches; on the CPU the queued crop tasks and its buffers), its position, and
    :meth:`close`. Several may be live at once; they share nothing but the loader's settings and
    reusable buffers.

    Args:
        loader: the loader whose settings this pass follows.
        epoch: the epoch it walks; start: the batch it starts at (a resumed epoch).
    """

    def __init__(self, loader: ImageLoader, epoch: int, start: int = 0):
        self.loader = loader
        self.position = [epoch, start]  # [its epoch, batches handed out so far]
        self._batches = loader._batches(epoch, start)

    def __iter__(self) -> ImageLoaderIterator:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            batch = next(self._batches)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()  # an error in the loader ends the pass: its threads are released now
            raise
        self.position[1] += 1
        return batch

    def state_dict(self) -> dict:
        """This pass's position: the epoch and the batch that come next (as
        :meth:`ImageLoader.state_dict`)."""
        return self.loader._position(*self.position)

    def close(self) -> None:
        """Ends the pass now (a ``break`` does it when the iterator is dropped): batches not yet
        started are cancelled, the ones being made are waited for, the producer threads are
        stopped and joined. Batches already handed out are untouched. Calling it again does
        nothing."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()

    def __del__(self):
        self.close()
