"""Prefetchers: get the next batch ready while the current one is being used.

* :class:`CudaPrefetcher` (``notebooks/08_prefetch.ipynb``, section 2): a thread of its own makes
  the next batches on the GPU while your loop computes on this one, as FFCV's ``EpochIterator``
  does. On that thread it asks the loader, pins what is not pinned, copies with
  ``non_blocking=True`` on a side CUDA stream, optionally converts and normalises the images there
  (:func:`prepare`, then your ``transform``) and records an event after that work. Your loop's
  ``next()`` only takes a finished batch from a queue of ``depth``, makes your current stream wait
  for its event (on the device: the host does not wait) and marks each of its tensors with
  ``record_stream``, so that the caching allocator does not give their memory to the side stream
  again while your stream may still read them. No host work for the next batch sits between two
  of your steps, so a loop that waits for the GPU every step (``loss.item()``) still overlaps it.
* :class:`ThreadPrefetcher` (section 3): the fallback without CUDA. A background thread pulls
  batches into a bounded queue.
* :func:`prefetch` picks one; :func:`prepare` is the on-device transform (it applies
  :func:`gpufeed.data.transforms.normalize` to the images of a batch), a pure function tested on the
  CPU too.

Both wrap any iterable (a DataLoader, :class:`gpufeed.data.loader.FastLoader`, a generator) of
tensors, tuples/lists/dicts of them, TensorDicts or tensorclasses; each ``iter()`` starts a new pass
over the wrapped iterable (``iter()`` of it is called on your thread, its ``next()`` on the
prefetcher's). Both share one thread machinery: batches come out in order; an exception in the
wrapped loader (or the work on the thread) is raised once in your loop, after the batches made
before it, with its traceback, then the iterator is exhausted; ``break``, garbage collection,
``close()``, ``with`` and the end of the data all stop the thread and drop the batches in flight
(it never blocks for good on a full queue: it ``put`` s with a timeout and watches a stop event;
``close()`` returns within :data:`gpufeed.data.producer.GRACE_S` whatever the thread is doing).
That machinery is :mod:`gpufeed.data.producer`; this module is what each prefetcher makes there.
Threads are named ``gpufeed-prefetch-N``.

Example:
    >>> import threading
    >>> batches = [(torch.full((2, 3, 4, 4), 255, dtype=torch.uint8), torch.tensor([0, 1]))] * 3
    >>> def loader():  # which thread asks for the batches?
    ...     for b in batches:
    ...         yield threading.current_thread().name, b
    >>> with prefetch(loader(), "cpu", dtype=torch.float32) as p:
    ...     out = list(p)
    >>> from gpufeed.data.producer import THREAD_PREFIX
    >>> len(out), out[0][0].startswith(THREAD_PREFIX), out[0][1][0].dtype, out[0][1][0].max().item()
    (3, True, torch.float32, 1.0)
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterable

import torch

from gpufeed.data.movers import leaves, pin, to_device, tree_map
from gpufeed.data.producer import _END, _POLL_S, _check_depth, _Closable
from gpufeed.data.transforms import normalize


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


# --- the thread machinery both prefetchers share ----------------------------------------------

_SLOT_POLL_S = (5e-5, 1e-3)  # a producer waiting for a slot polls its release event: first, at most

class _Ring:
    """One pass's ring of ``slots`` batches on the GPU, as FFCV's ``EpochIterator`` keeps
    ``batches_ahead + 2``: the producer makes batch ``k`` only once the consumer's stream is done
    with batch ``k - slots``, which it learns from an event recorded on that stream when the
    consumer gave that batch up (its next ``next()``, or ``close()``), polled on the producer's
    thread. ``after``: an event the first batch waits for (the last pass's close), or None."""

    def __init__(self, slots: int, after: torch.cuda.Event | None):
        self.slots = slots
        self.released: queue.Queue = queue.Queue()  # events, one per batch given up, in order
        if after is not None:
            self.released.put(after)
        self.made = -1 if after is not None else 0  # the first batch waits for ``after``
        self.held: torch.cuda.Stream | None = None  # the stream the consumer's batch is used on

    def wait_for_slot(self, stop: threading.Event) -> bool:
        """On the producer's thread: returns once a slot is free (False: stopped first)."""
        if self.made >= self.slots or self.made < 0:
            while True:
                if stop.is_set():
                    return False
                try:
                    released = self.released.get(timeout=_POLL_S)
                    break
                except queue.Empty:
                    continue
            # This thread polls (never the consumer's), and not in released.synchronize(): behind
            # a deep GPU queue that could block for seconds, and close() would wait as long.
            pause, longest = _SLOT_POLL_S
            while not released.query():
                if stop.wait(pause):
                    return False
                pause = min(2 * pause, longest)
        self.made = max(self.made, 0) + 1
        return True

    def give_up(self) -> torch.cuda.Event | None:
        """On the consumer's side: the batch in use is given up; its release event, or None."""
        if self.held is None:
            return None
        released = torch.cuda.Event(blocking=True)
        released.record(self.held)  # after all the work queued on that batch so far
        self.held = None
        self.released.put(released)
        return released


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
        >>> from gpufeed.data.producer import THREAD_PREFIX
        >>> [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]
        []
    """

    def __init__(self, loader: Iterable, depth: int = 2, transform: Callable | None = None):
        _check_depth("ThreadPrefetcher", depth)
        self.loader, self.depth, self.transform = loader, depth, transform
        self._iterators = weakref.WeakSet()

    def __iter__(self):
        transform = self.transform
        return self._started(None if transform is None else lambda batch, stop: transform(batch))


class CudaPrefetcher(_Closable):
    """Makes the next batches on the GPU, from a thread of its own, while you use this one.

    All the host work of a batch happens on the prefetcher's thread (``gpufeed-prefetch-N``):
    asking the loader for it, pinning it if it is not pinned, issuing its ``non_blocking`` copy on
    the side stream, launching :func:`prepare` and ``transform`` there, and recording an event
    after them. Your ``next()`` takes a finished batch from the queue, makes your current stream
    wait for its event (``wait_event``: the device waits, the host does not) and marks its tensors
    as used by your stream (``record_stream``: the caching allocator does not hand their memory to
    the side stream again before your work on them is done). So your loop may synchronise every
    step (``loss.item()`` for logging, as most do): while your thread waits for the GPU, this one
    asks for, pins and copies the next batch, and the next step is launched at once. Done in
    ``next()`` instead (the classic apex prefetcher), that host work would sit between the end of
    one step and the launch of the next, with the GPU idle.

    **The stream contract**: a batch is ready on, and its memory kept for, the stream that is
    current when your ``next()`` takes it (your loop's: the default stream unless you say
    otherwise). Use it there. To use it on another stream ``s`` (a loop whose ``next()`` runs
    outside a ``with torch.cuda.stream(s):`` block it computes in), order and mark it yourself::

        s.wait_stream(torch.cuda.current_stream())  # s waits (on the device) for the batch's copy
        for t in tensors_of_the_batch:
            t.record_stream(s)  # its memory is not handed out again before s is done with it

    and, for the memory bound below, make the stream of ``next()`` wait for ``s`` before the next
    ``next()`` (``torch.cuda.current_stream().wait_stream(s)``): the release of a batch is
    recorded there. Without the first two lines ``s`` may read a batch before its copy has run.
    The prefetcher cannot see which stream you use a batch on; the CUDA-ordering simulator can: run
    your loop under :func:`gpufeed.simcuda.simulated_cuda` (a few batches) and a batch read out of
    order raises :class:`gpufeed.simcuda.CudaRaceError` where it is read.

    **How long a batch stays valid**: as long as you hold it. Its memory is not handed out again
    before you drop it and the work your stream queued on it is done, so two batches never share
    memory, whatever you keep (``list(p)`` keeps them all, and that memory is yours).

    **GPU memory** is bounded whatever your loop does on that stream, even a loop that never
    synchronises and so lets the host run far ahead of the GPU: ``depth + 2`` converted batches in
    flight (``depth`` queued, the one the thread is making, the one you use), besides the loader's
    own, the conversion's working memory and the batches you keep. As FFCV's ``EpochIterator``
    does with its ``batches_ahead + 2`` slots, the thread makes batch ``k`` only once your stream
    is done with batch ``k - depth - 2``: at your ``next()`` (or ``close()``) an event is recorded
    on your stream for the batch you give up, and the thread polls that event before it allocates
    the next one's memory. The thread waits, not you; in a loop that syncs every step the event is
    long done when it looks. Likewise a pass's first batch waits for the last pass's final
    release. FFCV overwrites a slot's memory; here the caching allocator hands it out again only
    once your last reference is gone, so a batch your loop has given up but not yet let go of (your
    loop variable is rebound just after ``next()`` returns) can make it ``depth + 3`` for a moment.

    What it costs, honestly:

    * The conversion and ``transform`` are kernels on the side stream. They share the GPU with your
      step: memory-bound kernels take turns with the step's rather than run beside them for free.
      What the side stream hides is the copy and the host work; the kernels' time still counts.
    * The thread shares the GIL with your loop: its Python (the loader's, walking the batch) takes
      turns with your step's launches; what releases the GIL (a wait for the GPU such as
      ``.item()``, torch's copies and pinning, a DataLoader's queue) runs beside them.
    * A batch that is not pinned is pinned on the thread (``pin_memory=True``), never on yours:
      from pageable memory a copy is not asynchronous (the host stages it through the driver's
      buffer and waits), so it would hold the host through the copy. The pinned copy is dropped as
      soon as its copy is issued: torch's caching host allocator keeps a freed pinned block until
      the copies that read it are done. Pinning is a host memcpy on the thread; better let the
      loader hand over pinned batches (``DataLoader(pin_memory=True)``, ``FastLoader``'s
      ``pin_memory``).

    Args:
        loader: any iterable of batches (tensors, nested structures, TensorDicts) on the CPU, or
            already on the GPU (see below).
        device: the CUDA device; the thread makes it its current device (as torch's own pin-memory
            thread does), so pinned memory and new tensors belong to it.
        dtype, mean, std: convert and normalise the images on the GPU (:func:`prepare`), on the side
            stream; None leaves them as they came (``uint8`` stays ``uint8``).
        transform: applied to each batch on the GPU, on the side stream, after the copy (and
            :func:`prepare`), e.g. :class:`gpufeed.data.device_augment.DeviceAugment`; None:
            nothing.
            It must return a batch: a ``StopIteration`` from it is raised as a ``RuntimeError``.
        depth: finished batches the queue holds ahead of the one in use (1: one in flight).
        pin_memory: pin batches that are not pinned yet (on the thread, see above).
        stream: the side stream, on ``device``; None: a new one, this prefetcher's own for its life.
            The thread keeps it current for its whole life, so the wrapped loader is asked for each
            batch with this stream current: GPU work the loader does itself runs there, ahead of
            the copies, and a loader that guards pinned buffers with an event on the current stream
            (a :class:`~gpufeed.data.loader.FastLoader` with ``pin_memory`` and ``reuse_buffers``)
            covers the copies issued here. Make one prefetcher and iterate it every epoch (or pass
            one stream, as :class:`gpufeed.data.ImageLoader` does): the caching allocator reuses a
            freed block only on the stream that allocated it, so a new stream per epoch would strand
            every epoch's blocks in a pool of their own until an allocation fails.

    **Your loop's work before ``iter()``**: at ``iter()`` (after the loader's own ``iter()``, before
    the thread first asks it for a batch) an event is recorded on your current stream and the side
    stream waits for it, once a pass. So the loader's kernels (they run on the side stream, current
    where it is asked) and the copies come after whatever your loop queued before ``iter()``: GPU
    tensors it made or wrote, which the loader may hand over or gather from. Not for your latest
    step at every batch, which would put every copy behind the step before it (no overlap at all).
    Tensors the loader hands over already on the GPU must be ready on the stream current where it
    is asked (a loader that works on a stream of its own makes the current one wait for it, as
    ``FastLoader(device="cuda")`` does); they are marked as used by the side stream
    (``record_stream``). ``"cuda"`` without an index is the current device when the prefetcher is
    made (build it after ``torch.cuda.set_device(local_rank)``).

    **CUDA graphs**: while you capture a graph (``torch.cuda.graph``), the thread goes on
    allocating, pinning, recording and polling events. Under the default
    ``capture_error_mode="global"`` such calls from another thread during a capture are errors;
    capture with ``capture_error_mode="thread_local"`` (only your thread's calls are checked), or
    before ``iter()`` (or between two passes, the last one closed), then copy each batch into the
    graph's static inputs.

    **Stopping**: ``break``, ``close()``, ``with`` and garbage collection return within
    :data:`~gpufeed.data.producer.GRACE_S` (0.25 s) whatever the thread is doing: waiting for a
    slot it polls the release event and the stop flag, never blocking in ``synchronize()``
    behind a deep GPU queue.

    Raises:
        RuntimeError: torch sees no CUDA GPU (use :func:`prefetch`, which falls back to threads).
        ValueError: ``depth`` is not a whole number of at least 1.
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
        _check_depth("CudaPrefetcher", depth)
        self.loader, self.depth, self.pin_memory = loader, depth, pin_memory
        self.dtype, self.mean, self.std, self.transform = dtype, mean, std, transform
        # the side stream for copies and conversions
        self.stream = stream if stream is not None else torch.cuda.Stream(self.device)
        self._iterators = weakref.WeakSet()
        self._last_close: torch.cuda.Event | None = None  # the last pass's last release

    @contextlib.contextmanager
    def _on_side_stream(self):
        """Entered once on the producer thread, for its whole life: our device and side stream."""
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            yield

    def _make(self, batch, ring: _Ring, stop: threading.Event):
        """On the producer thread, the side stream current: once a slot is free, one batch's copy,
        conversion and transform issued, and the event after them."""
        if not ring.wait_for_slot(stop):
            return _END
        for t in leaves(batch):
            if t.is_cuda:  # its memory is not handed out again while the side stream reads it
                t.record_stream(self.stream)
        if self.pin_memory:
            batch = pin(batch)  # pinned here, on this thread; dropped once its copy is issued
        batch = prepare(to_device(batch, self.device, non_blocking=True), self.dtype, self.mean,
                        self.std)
        if self.transform is not None:
            batch = self.transform(batch)
        done = torch.cuda.Event()
        done.record(self.stream)
        return batch, done

    def _take(self, made, ring: _Ring):
        """On the consumer's thread: its current stream waits for the batch's work and keeps the
        batch's memory from being reused before its own work on it is done; then the batch before
        is given up (its release event after that wait, so that it covers every use of it)."""
        batch, done = made
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        for t in leaves(batch):
            if t.is_cuda:
                t.record_stream(current)
        ring.give_up()
        ring.held = current
        return batch

    def _closed(self, ring: _Ring) -> None:
        self._last_close = ring.give_up() or self._last_close

    def _after_your_work(self) -> None:
        """At ``iter()``, on your thread, before the loader is first asked: the side stream waits
        (on the device) for what your current stream queued so far, once a pass."""
        inputs_made = torch.cuda.Event()
        inputs_made.record(torch.cuda.current_stream(self.device))
        self.stream.wait_event(inputs_made)

    def __iter__(self):
        ring = _Ring(self.depth + 2, self._last_close)
        return self._started(lambda batch, stop: self._make(batch, ring, stop),
                             before=self._after_your_work, scope=self._on_side_stream,
                             take=lambda made: self._take(made, ring),
                             on_close=lambda: self._closed(ring))


def prefetch(loader: Iterable, device="cuda", dtype: torch.dtype | None = None, mean=None, std=None,
             depth: int | None = None):
    """The right prefetcher for ``device``: :class:`CudaPrefetcher` on a CUDA device that exists,
    else :class:`ThreadPrefetcher`, which moves batches to ``device`` and applies the same
    :func:`prepare` on its thread. Either way the batches come out the same.

    ``depth`` (the batches queued ahead) defaults to 1 on CUDA and 2 for the thread.

    Raises:
        RuntimeError: ``device`` is CUDA but torch sees no GPU.
        ValueError: ``depth`` is given and is not a whole number of at least 1.
    """
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("prefetch: device is CUDA but torch sees no GPU; pass the device "
                               "you compute on (e.g. gpufeed.config.device(), which is the CPU "
                               "here)")
        return CudaPrefetcher(loader, device, dtype, mean, std, depth=1 if depth is None else depth)

    def transform(batch):
        return prepare(to_device(batch, device), dtype, mean, std)

    return ThreadPrefetcher(loader, depth=2 if depth is None else depth, transform=transform)
