"""Output buffers reused once nothing holds them: the safe way to skip fresh memory's page faults.

A batch made into fresh memory pays a page fault per 4 KiB page the first time it is written
(``notebooks/06_batched.ipynb``, the ring of buffers). :class:`FreeBuffers` hands out a buffer
that nobody holds any more (torch's own use count of its storage), else fresh memory: a batch you
keep is never written again. :class:`gpufeed.data.ImageLoader`'s CPU path writes into them.
"""

from __future__ import annotations

import sys
import threading

import torch


def _use_count(t: torch.Tensor) -> int:
    """How many tensors (and NumPy arrays, DLPack capsules) hold ``t``'s memory, counted by torch
    itself."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _storage_refs(t: torch.Tensor) -> int:
    """Python references to ``t``'s storage object: torch keeps one storage object per storage, so
    an ``untyped_storage()`` someone holds is this count going up, not the use count."""
    return sys.getrefcount(t.untyped_storage())


# private; registered with torch's CUDA module (2.x)
_HAS_USE_COUNT = hasattr(torch._C, "_storage_Use_Count")
# the count of a tensor nothing else holds
_ALONE = _use_count(torch.empty(1)) if _HAS_USE_COUNT else None
_ALONE_REFS = _storage_refs(torch.empty(1))  # the same for the storage object


def _free(buf: torch.Tensor) -> bool:
    """Whether nothing but the pool holds ``buf``: no other tensor, array or storage object here,
    and no other process (memory moved to shared memory, e.g. by pickling a batch out of a
    DataLoader worker, may be mapped elsewhere: never free again)."""
    return not buf.is_shared() and _use_count(buf) == _ALONE and _storage_refs(buf) == _ALONE_REFS


class FreeBuffers:
    """Output buffers reused only when nothing outside holds them: the safe default's page-fault
    saver.

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
        >>> # b was dropped: its buffer comes back
        >>> pool.take(4).data_ptr() == ptr or not _HAS_USE_COUNT
        True
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, keep: int,
                 memory_format: torch.memory_format = torch.contiguous_format):
        self.shape, self.dtype, self.keep, self.memory_format = shape, dtype, keep, memory_format
        self.buffers: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, rows: int) -> torch.Tensor:
        """A ``[rows, *shape[1:]]`` view of a buffer nobody else holds."""
        with self._lock:  # the check and the taking (the view raises the count) as one step
            if _HAS_USE_COUNT:
                # theirs now, not ours
                self.buffers = [buf for buf in self.buffers if not buf.is_shared()]
                for buf in self.buffers:
                    if _free(buf):
                        return buf[:rows]
            buf = torch.empty(self.shape, dtype=self.dtype, memory_format=self.memory_format)
            if _HAS_USE_COUNT and len(self.buffers) < self.keep:
                self.buffers.append(buf)
            return buf[:rows]
