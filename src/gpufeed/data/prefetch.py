"""Prefetchers: get the next batch ready while the current one is being used.

* :class:`CudaPrefetcher` (``notebooks/08_prefetch.ipynb``, section 2): copies the next batch to
  the GPU on a side CUDA stream, from pinned memory with ``non_blocking=True``, and optionally
  converts and normalises its images there, while the default stream computes on this batch.
  Before handing a batch over, the default stream waits for its copy (an event recorded after the
  copy: ``wait_stream`` when one batch is in flight), and each tensor is marked with
  ``record_stream`` so that the caching allocator does not give its memory to the side stream
  again while the default stream still reads it.
* :class:`ThreadPrefetcher` (section 3): the fallback without CUDA. A background thread pulls
  batches into a bounded queue; an exception in the wrapped loader is raised once in the consumer,
  with its traceback; ``break``, garbage collection, :meth:`~ThreadPrefetcher.close` and the end of
  the data all stop the thread (it never blocks for good on a full queue: it ``put`` s with a
  timeout and watches a stop event).
* :func:`prefetch` picks one; :func:`prepare` is the on-device transform (it applies
  :func:`gpufeed.data.transforms.normalize` to the images of a batch), a pure function tested on the
  CPU too.

Both wrap any iterable (a DataLoader, :class:`gpufeed.data.loader.FastLoader`, a generator) of
tensors, tuples/lists/dicts of them, TensorDicts or tensorclasses; each ``iter()`` starts a new pass
over the wrapped iterable. Threads are named ``gpufeed-prefetch-N``.

Example:
    >>> batches = [(torch.full((2, 3, 4, 4), 255, dtype=torch.uint8), torch.tensor([0, 1]))] * 3
    >>> with prefetch(batches, "cpu", dtype=torch.float32) as p:
    ...     out = list(p)
    >>> len(out), out[0][0].dtype, out[0][0].max().item(), out[0][1].tolist()
    (3, torch.float32, 1.0, [0, 1])
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable

import torch

from gpufeed.data.movers import leaves, pin, to_device, tree_map
from gpufeed.data.transforms import normalize

THREAD_PREFIX = "gpufeed-prefetch"
_counter = itertools.count(1)
_POLL_S = 0.05  # how often a blocked producer looks at its stop event


def prepare(batch, dtype: torch.dtype | None = None, mean=None, std=None):
    """:func:`~gpufeed.data.transforms.normalize` applied to the images of a batch: every ``uint8``
    tensor with 4 dimensions (``[B, C, H, W]``); labels, boxes and masks (fewer dimensions) pass
    unchanged. With neither ``dtype`` nor ``mean``/``std``, the batch is returned as it is.

    Example:
        >>> out = prepare((torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.tensor([1, 2])),
        ...               torch.float16)
        >>> out[0].dtype, out[1].dtype
        (torch.float16, torch.int64)
    """
    if dtype is None and mean is None and std is None:
        return batch
    dtype = dtype or torch.float32

    def convert(t: torch.Tensor) -> torch.Tensor:
        return normalize(t, dtype, mean, std) if t.dtype == torch.uint8 and t.dim() == 4 else t

    return tree_map(convert, batch)


class _Closable:
    """What both prefetchers share: the wrapped loader, ``len``, ``close`` and ``with``."""

    loader: Iterable

    def __len__(self) -> int:
        return len(self.loader)  # TypeError if the loader has no length, as for any iterable

    def close(self) -> None:
        for it in list(self._iterators):
            it.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CudaPrefetcher(_Closable):
    """Copies the next ``depth`` batches to the GPU on a side stream while the current one is used.

    Args:
        loader: any iterable of batches (tensors, nested structures, TensorDicts) on the CPU.
        device: the CUDA device.
        dtype, mean, std: convert and normalise the images on the GPU (:func:`prepare`), on the side
            stream; None leaves them as they came (``uint8`` stays ``uint8``).
        transform: applied to each batch on the GPU, on the side stream, after the copy (and
            :func:`prepare`), e.g. :class:`gpufeed.data.transforms.DeviceAugment`; None: nothing.
        depth: batches in flight ahead of the one in use (1: the classic apex prefetcher).
        pin_memory: pin batches that are not pinned yet (on this thread: better let the DataLoader's
            pin-memory thread do it with ``pin_memory=True``); from pageable memory a copy is not
            asynchronous.
        stream: the side stream to use, on ``device``; None: a new one, this prefetcher's own. The
            wrapped loader is asked for each batch with this stream current, so GPU work the
            loader does itself runs there, ahead of yours, and a loader that guards pinned buffers
            with an event on the current stream covers the copies issued here; tensors it hands
            over that were made on another stream (your current one) are waited for
            (``wait_stream``) and kept alive (``record_stream``). An
            owner that makes a prefetcher per epoch passes its one stream (as
            :class:`gpufeed.data.ImageLoader` does): the caching allocator reuses a freed block
            only on the stream that allocated it, so a new stream per epoch would strand every
            epoch's blocks in a pool of their own until an allocation fails.

    ``"cuda"`` without an index is the current device when the prefetcher is made (build it after
    ``torch.cuda.set_device(local_rank)``).

    Raises:
        RuntimeError: torch sees no CUDA GPU (use :func:`prefetch`, which falls back to threads).
    """

    def __init__(self, loader: Iterable, device="cuda", dtype: torch.dtype | None = None, mean=None,
                 std=None, depth: int = 1, pin_memory: bool = True,
                 transform: Callable | None = None, stream: torch.cuda.Stream | None = None):
        if not torch.cuda.is_available():
            raise RuntimeError("CudaPrefetcher needs a CUDA GPU and torch sees none; use "
                               "gpufeed.data.prefetch.prefetch(loader, device), which falls back "
                               "to ThreadPrefetcher")
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"CudaPrefetcher: device must be a CUDA device, got {self.device}")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"CudaPrefetcher: depth must be a whole number >= 1, got {depth!r}")
        self.loader, self.depth, self.pin_memory = loader, depth, pin_memory
        self.dtype, self.mean, self.std, self.transform = dtype, mean, std, transform
        # the side stream for copies and conversions
        self.stream = stream if stream is not None else torch.cuda.Stream(self.device)
        self._iterators = weakref.WeakSet()

    def _start(self, batch):
        """Issues one batch's copy (and conversion) on the side stream; returns it and its event."""
        on_gpu = [t for t in leaves(batch) if t.is_cuda]
        if on_gpu:
            # Inputs already on the GPU were made on the current stream: the side stream must not
            # read them before that work is done, and the allocator must not hand their memory to
            # anyone else while the side stream still reads them.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            for t in on_gpu:
                t.record_stream(self.stream)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            if self.pin_memory:
                batch = pin(batch)
            batch = prepare(to_device(batch, self.device, non_blocking=True), self.dtype, self.mean,
                            self.std)
            if self.transform is not None:
                batch = self.transform(batch)
            done = torch.cuda.Event()
            done.record(self.stream)
        return batch, done

    def _finish(self, started):
        """Makes the current stream wait for this batch's copy, and keeps its memory from being
        reused before the current stream is done with it."""
        batch, done = started
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)  # with depth=1 this is current.wait_stream(self.stream)
        for t in leaves(batch):
            if t.is_cuda:
                t.record_stream(current)
        return batch

    def _asked_on_stream(self, source):
        """The loader's batches, each asked for with the side stream current: a loader that guards
        the pinned buffers it reuses with an event on the current stream (a
        :class:`~gpufeed.data.loader.FastLoader` with ``pin_memory`` and ``reuse_buffers``) then
        covers the copies this prefetcher issued on that stream."""
        try:
            while True:
                with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                    try:
                        batch = next(source)
                    except StopIteration:
                        return
                yield batch
        finally:
            if hasattr(source, "close"):
                source.close()

    def __iter__(self):
        it = Lookahead(self._asked_on_stream(iter(self.loader)), self.depth, self._start,
                       self._finish)
        self._iterators.add(it)
        return it


class Lookahead:
    """An iterator that keeps ``depth`` items *started* ahead of the one handed out.

    ``start(item)`` begins the work on an item (e.g. an asynchronous copy) and ``finish(started)``
    makes it ready to use. Items come out in order; an exception from the source is raised once,
    after the items started before it, then the iterator is exhausted. Used by
    :class:`CudaPrefetcher`; with identity functions it is plain iteration, which is how the tests
    check its order and error handling without a GPU.

    Example:
        >>> list(Lookahead(iter(range(4)), depth=2, start=lambda x: x * 10, finish=lambda x: x + 1))
        [1, 11, 21, 31]
    """

    def __init__(self, source, depth: int, start: Callable, finish: Callable):
        self._source, self._depth, self._start, self._finishing = source, depth, start, finish
        self._ready: deque = deque()
        self._error: BaseException | None = None
        self._fill()

    def _fill(self) -> None:
        while self._source is not None and self._error is None and len(self._ready) < self._depth:
            try:
                started = self._start(next(self._source))
            except StopIteration:
                self._source = None
                return
            except Exception as e:  # raised in __next__ once the items before it are out
                self._error = e
                return
            self._ready.append(started)

    def __iter__(self):
        return self

    def __next__(self):
        if not self._ready:
            error, self._error = self._error, None
            self.close()
            if error is not None:
                raise error
            raise StopIteration
        item = self._finishing(self._ready.popleft())
        self._fill()  # start the next one now: its copy overlaps the caller's work on this one
        return item

    def close(self) -> None:
        """Drops the source and the items in flight (a generator source is closed)."""
        source, self._source = self._source, None
        self._ready.clear()
        self._error = None
        if hasattr(source, "close"):
            source.close()


class _Failure:
    """An exception from the producer thread, carried through the queue."""

    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()


def _put(q: queue.Queue, item, stop: threading.Event) -> bool:
    """Puts ``item`` unless ``stop`` is set first; never blocks for long on a full queue."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(source, q: queue.Queue, stop: threading.Event, transform) -> None:
    """The producer thread. It holds no reference to the consumer's iterator, so dropping that
    iterator (``break``) lets it be collected, which sets ``stop``."""
    try:
        for batch in source:
            if stop.is_set():
                return
            if not _put(q, transform(batch) if transform is not None else batch, stop):
                return
        _put(q, _END, stop)
    except BaseException as e:  # noqa: BLE001  everything goes to the consumer, traceback included
        _put(q, _Failure(e), stop)
    finally:
        if hasattr(source, "close"):  # a generator: run its finally blocks here, in its own thread
            source.close()


class _ThreadIterator:
    def __init__(self, source, depth: int, transform, name: str):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_produce,
                                        args=(source, self._queue, self._stop, transform),
                                        name=name, daemon=True)
        self._done = False
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        while True:
            try:
                item = self._queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self.close()
                    raise RuntimeError(f"{self._thread.name} ended without a result") from None
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc  # the producer's traceback is in item.exc.__traceback__
        return item

    def close(self, timeout: float = 5.0) -> None:
        """Stops the producer and waits for it (unless called from the producer thread itself)."""
        self._done = True
        self._stop.set()
        while True:  # drop queued batches now, not when this iterator is collected
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __del__(self):
        # never raise from a finaliser (e.g. at interpreter exit)
        with contextlib.suppress(Exception):
            self.close(timeout=5.0)  # returns in milliseconds unless the loader itself is stuck


class ThreadPrefetcher(_Closable):
    """Pulls batches from ``loader`` on a background thread into a queue of ``depth`` batches.

    Useful where the loop's own work releases the GIL (torch ops, JPEG decoding in Pillow, file
    reads): the next batch is made while this one is used. Without CUDA it is the prefetcher
    :func:`prefetch` returns.

    Args:
        loader: any iterable of batches.
        depth: batches the thread may have ready ahead of the consumer (the queue's size).
        transform: applied to each batch on the thread (e.g. :func:`prepare`), or None.

    Example:
        >>> import threading
        >>> p = ThreadPrefetcher(range(100), depth=2)
        >>> for i in p:
        ...     if i == 3:
        ...         break
        >>> del i
        >>> [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]
        []
    """

    def __init__(self, loader: Iterable, depth: int = 2, transform: Callable | None = None):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"ThreadPrefetcher: depth must be a whole number >= 1, got {depth!r}")
        self.loader, self.depth, self.transform = loader, depth, transform
        self._iterators = weakref.WeakSet()

    def __iter__(self):
        # iter() here, on the caller's thread: an error in it is raised at once, and a DataLoader
        # starts its workers from the main thread (where its signal handlers can be installed).
        it = _ThreadIterator(iter(self.loader), self.depth, self.transform,
                             f"{THREAD_PREFIX}-{next(_counter)}")
        self._iterators.add(it)
        return it


def prefetch(loader: Iterable, device="cuda", dtype: torch.dtype | None = None, mean=None, std=None,
             depth: int | None = None):
    """The right prefetcher for ``device``: :class:`CudaPrefetcher` on a CUDA device that exists,
    else :class:`ThreadPrefetcher`, which moves batches to ``device`` and applies the same
    :func:`prepare` on its thread. Either way the batches come out the same.

    ``depth`` defaults to 1 batch in flight on CUDA and 2 queued for the thread.

    Raises:
        RuntimeError: ``device`` is CUDA but torch sees no GPU.
    """
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("prefetch: device is CUDA but torch sees no GPU; pass the device "
                               "you compute on (e.g. gpufeed.config.device(), which is the CPU "
                               "here)")
        return CudaPrefetcher(loader, device, dtype, mean, std, depth=depth or 1)

    def transform(batch):
        return prepare(to_device(batch, device), dtype, mean, std)

    return ThreadPrefetcher(loader, depth=depth or 2, transform=transform)
