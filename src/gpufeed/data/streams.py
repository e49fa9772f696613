"""What a loader's asynchronous copies to a GPU need: a side stream of its own, and buffers that
are refilled only once the copies out of them are done.

* :class:`SideStreams`: a loader's own CUDA side stream per device, made at first use and kept.
* :class:`BufferRing`: gather buffers used in turn, pinned where a copy to a GPU reads them, each
  with an event that must be done before the buffer is refilled.

Used by :class:`gpufeed.data.loader.FastLoader` (``device="cuda"``, ``reuse_buffers``) and
:class:`gpufeed.data.ImageLoader`. Lesson 06 measures a ring of buffers
(``notebooks/06_batched.ipynb``); lesson 08 shows what goes wrong when a pinned buffer is refilled
before the copy out of it is done (``notebooks/08_prefetch.ipynb``).

Example:
    >>> ring = BufferRing([torch.zeros(10, 3), torch.zeros(10)], rows=4, count=2)
    >>> first, second, third = (ring.next(4) for _ in range(3))
    >>> [t.shape for t in first], third[0] is first[0], second[0] is first[0]
    ([torch.Size([4, 3]), torch.Size([4])], True, False)
    >>> ring.next(2)[0].shape  # a short last batch: the first rows of the slot
    torch.Size([2, 3])
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class SideStreams:
    """A loader's own CUDA side stream per device, made at its first use there and kept: one owner,
    so every epoch's blocks come back to the same stream's pool of the caching allocator. Used by
    :class:`~gpufeed.data.loader.FastLoader` (``device="cuda"``) and
    :class:`gpufeed.data.ImageLoader`."""

    def __init__(self):
        self._streams: dict[int, torch.cuda.Stream] = {}

    def on(self, device: torch.device | None = None) -> torch.cuda.Stream:
        """The side stream on ``device``; None, or ``"cuda"`` without an index: the current one."""
        index = (device.index if device is not None and device.index is not None
                 else torch.cuda.current_device())
        if index not in self._streams:
            self._streams[index] = torch.cuda.Stream(index)
        return self._streams[index]


class BufferRing:
    """``count`` gather buffers for a loader's batches, used in turn. One belongs to one iterator
    at a time (:meth:`gpufeed.data.loader.FastLoader.epoch_batches`). Pinned where the loader
    copies to a GPU (``cuda``) or pins (``pin_memory``), each slot then with an event that must be
    done before the slot is refilled: recorded after the loader's own copy out of it (``cuda``:
    :meth:`copied`), or, for a copy the consumer makes (``pin_memory``), on the consumer's current
    stream when it asks for the next batch (:meth:`asked`; see
    :class:`~gpufeed.data.loader.FastLoader`'s warning).

    Args:
        fields: one tensor per field (``[N, ...]``): each slot holds a ``[rows, ...]`` buffer of
            its dtype.
        rows: a full batch's rows.
        count: the slots.
        cuda: the loader copies each batch to a GPU itself (on its side stream).
        pin_memory: the loader pins, and the consumer copies.
    """

    def __init__(self, fields: Iterable[torch.Tensor], rows: int, count: int, *, cuda: bool = False,
                 pin_memory: bool = False):
        pinned, fields = cuda or pin_memory, list(fields)
        # one buffer [rows, ...] per field, in the fields' order, for each of the count slots
        self.buffers = [[torch.empty((rows, *t.shape[1:]), dtype=t.dtype, pin_memory=pinned)
                         for t in fields] for _ in range(count)]
        self.events = [torch.cuda.Event() if pinned else None for _ in self.buffers]
        self.full, self.slot = rows, -1
        self.guard = pinned and not cuda  # the consumer copies: guard with its stream (asked)
        self._handed = False  # the current slot is out and its consumer's event not yet recorded

    def asked(self) -> None:
        """The consumer asks for the next batch: the copies out of the one it has were issued by
        now, on its current stream; the slot's event marks them."""
        if self.guard and self._handed:
            self.events[self.slot].record(torch.cuda.current_stream())
        self._handed = False

    def next(self, b: int) -> list[torch.Tensor]:
        """The next slot's buffers, one per field in the loader's order (the first ``b`` rows)."""
        self.asked()
        self.slot = (self.slot + 1) % len(self.buffers)
        if self.events[self.slot] is not None:
            self.events[self.slot].synchronize()  # the async copy out of this buffer must be done
        self._handed = True
        bufs = self.buffers[self.slot]
        return bufs if b == self.full else [v[:b] for v in bufs]

    def copied(self, stream) -> None:
        """The loader's own copy out of the current slot was issued on ``stream``."""
        self.events[self.slot].record(stream)
