"""The thread both prefetchers run on: a producer that makes batches ahead into a bounded queue.

:class:`gpufeed.data.prefetch.ThreadPrefetcher` and :class:`gpufeed.data.prefetch.CudaPrefetcher`
share it (``notebooks/08_prefetch.ipynb``, sections 2 and 3): one pass is a
:class:`_ThreadIterator` whose thread (``gpufeed-prefetch-N``) asks the wrapped loader for each
batch, makes it (``make``: nothing, a transform, or a copy and conversion on a CUDA side stream)
and puts it into a queue of ``depth``; the consumer's ``next()`` takes it. Batches come out in
order; an exception in the loader or in ``make`` is carried through the queue and raised once, in
the consumer's thread, after the batches made before it; ``break``, garbage collection,
``close()`` and the end of the data stop the thread and drop the batches in flight. The thread
never blocks for good: it ``put`` s with a timeout and watches a stop event, so ``close()``
returns within :data:`GRACE_S` whatever it is doing.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import warnings
from collections.abc import Callable, Iterable

THREAD_PREFIX = "gpufeed-prefetch"
_counter = itertools.count(1)
_POLL_S = 0.05  # how often a blocked producer looks at its stop event


class _Failure:
    """An exception from the producer thread, carried through the queue."""

    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()
#: How long ``close()`` waits for the producer, whatever it is doing: it stops by itself where it
#: waits (a full queue, a slot the GPU has not freed: both poll the stop flag), and a producer still
#: inside the loader's ``next()`` (or a transform) ends when that returns, making nothing more.
GRACE_S = 0.25


class _Shared:
    """What the two threads of one pass share besides the queue."""

    def __init__(self):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.close_error: BaseException | None = None  # from the loader's close() after a stop
        self.abandoned = False  # close() returned before the producer ended: it warns instead

    def closing_failed(self, e: BaseException) -> None:
        """The loader's ``close()`` raised after a stop: ``close()`` raises it, or, if it no longer
        waits, a warning says it (a finaliser cannot raise)."""
        with self.lock:
            self.close_error = e
            if self.abandoned:
                warnings.warn(f"the prefetcher's loader raised in close(): {e!r}", RuntimeWarning,
                              stacklevel=2)


def _put(q: queue.Queue, item, stop: threading.Event) -> bool:
    """Puts ``item`` unless ``stop`` is set first; never blocks for long on a full queue."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _made(make: Callable, batch, stop: threading.Event, k: int):
    """``make(batch, stop)``; a ``StopIteration`` from it is an error, not the end of the data."""
    try:
        return make(batch, stop)
    except StopIteration as e:  # raised in the consumer's next(), it would end the epoch quietly
        raise RuntimeError(f"the prefetcher's transform (or prepare) raised StopIteration on "
                           f"batch {k} of this pass; a transform must return a batch: only the "
                           "loader ends the data") from e


def _produce(source, q: queue.Queue, shared: _Shared, make: Callable | None,
             scope: Callable[[], contextlib.AbstractContextManager]) -> None:
    """The producer thread: inside ``scope()`` (entered on this thread), each batch of ``source``
    through ``make`` into ``q``, then the loader's ``close()`` (a generator's finally blocks run
    here, in scope; its error is raised like the loader's), then the end. It holds no reference to
    the consumer's iterator, so dropping that iterator (``break``) lets it be collected, which sets
    ``stop``; after a stop nothing more is made, and what a late ``put`` left is dropped here."""
    stop = shared.stop
    try:
        with scope():
            try:
                for k in itertools.count():
                    batch = next(source, _END)
                    if batch is _END or stop.is_set():
                        break
                    batch = _made(make, batch, stop, k) if make is not None else batch
                    if batch is _END or not _put(q, batch, stop):  # _END: stopped while waiting
                        break
                    del batch  # not kept alive while the loader makes the next one
            finally:
                _close_source(source, shared)
        _put(q, _END, stop)
    except BaseException as e:  # noqa: BLE001  everything goes to the consumer, traceback included
        _put(q, _Failure(e), stop)
    finally:
        if stop.is_set():
            _drop(q)  # a put that crossed the consumer's close()


def _close_source(source, shared: _Shared) -> None:
    close = getattr(source, "close", None)
    if close is None:
        return
    try:
        close()
    except BaseException as e:  # noqa: BLE001
        if not shared.stop.is_set():
            raise  # into the queue, after the batches made before it
        shared.closing_failed(e)


def _drop(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


class _ThreadIterator:
    """One pass of a prefetcher: ``make(batch, stop)`` runs on the producer thread (inside
    ``scope``), ``take`` on the consumer's, on each batch as it leaves the queue; ``on_close``
    when the pass closes (on the consumer's thread, or a finaliser's)."""

    def __init__(self, source, depth: int, make: Callable | None, name: str, *,
                 scope: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 take: Callable | None = None, on_close: Callable[[], None] | None = None):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._shared = _Shared()
        self._stop = self._shared.stop
        self._take, self._on_close = take, on_close
        self._thread = threading.Thread(target=_produce,
                                        args=(source, self._queue, self._shared, make, scope),
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
        return self._take(item) if self._take is not None else item

    def close(self) -> None:
        """Stops the producer and waits for it :data:`GRACE_S` at most (not at all when called
        from the producer thread itself): where it waits (a full queue, a slot) it sees the stop
        at once; inside the loader's ``next()`` or the work on a batch it ends by itself when that
        returns, making nothing more.

        Raises:
            Exception: what the loader's ``close()`` raised after the stop, if the producer got
                there within the grace (later, a warning says it).
        """
        first = not self._done
        self._done = True
        self._stop.set()
        if first and self._on_close is not None:
            self._on_close()
        _drop(self._queue)  # now, not when this iterator is collected
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(GRACE_S)
        _drop(self._queue)  # and what a producer blocked on put put there as the queue emptied
        with self._shared.lock:
            self._shared.abandoned = self._thread.is_alive()
            error, self._shared.close_error = self._shared.close_error, None
        if error is not None:
            raise error

    def __del__(self):
        # never raise from a finaliser (e.g. at interpreter exit): a warning says what close() met
        with contextlib.suppress(Exception):
            try:
                self.close()  # GRACE_S at most
            except Exception as e:  # noqa: BLE001
                warnings.warn(f"the prefetcher's loader raised in close(): {e!r}", RuntimeWarning,
                              stacklevel=2)


def _check_depth(who: str, depth) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"{who}: depth must be a whole number >= 1 (the batches made ahead of the "
                         f"one you use), got {depth!r}")


class _Closable:
    """What both prefetchers share: the wrapped loader, ``len``, ``close`` and ``with``."""

    loader: Iterable

    def __len__(self) -> int:
        return len(self.loader)  # TypeError if the loader has no length, as for any iterable

    def close(self) -> None:
        """Closes every pass still open; then raises the first error a loader's ``close()`` gave."""
        errors = []
        for it in list(self._iterators):
            try:
                it.close()
            except Exception as e:  # noqa: BLE001  the others are closed first
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _started(self, make: Callable | None, before: Callable[[], None] | None = None,
                 **kwargs) -> _ThreadIterator:
        # iter() here, on the caller's thread: an error in it is raised at once, and a DataLoader
        # starts its workers from the main thread (where its signal handlers can be installed).
        source = iter(self.loader)
        if before is not None:  # on the caller's thread, before the producer asks for anything
            before()
        it = _ThreadIterator(source, self.depth, make, f"{THREAD_PREFIX}-{next(_counter)}",
                             **kwargs)
        self._iterators.add(it)
        return it
