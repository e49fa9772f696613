"""Batched fetching: one index operation per batch instead of one Python call per sample.

:class:`FastLoader` is the course's minimal fast loader. Each epoch it draws a permutation of the
sample indices (:mod:`gpufeed.data.orders`: seeded by ``seed`` and the epoch, so every epoch has a
new order and the same seed gives the same orders), cuts it into slices of ``batch_size``, and
fetches each slice with one ``torch.index_select`` per field (:func:`gpufeed.data.gather.gather`).
It works on the memmap dataset (:class:`gpufeed.data.memmap.ImageData`), on in-memory tensors,
tuples or dicts of tensors, TensorDicts and NumPy arrays (``np.memmap`` included).
``rank``/``world_size`` give each process its shard of every epoch, the same number of batches on
every rank (lesson 12), and ``group_size`` switches to a grouped shuffle
(:func:`gpufeed.data.orders.grouped_permutation`). Its asynchronous copies run on
:mod:`gpufeed.data.streams`. Taught in ``notebooks/06_batched.ipynb``; used in 05 and later.

Example:
    >>> x, y = torch.arange(10) * 10, torch.arange(10)  # 10 samples: features x, labels y
    >>> loader = FastLoader((x, y), batch_size=4, seed=0)
    >>> epoch0 = [yb for xb, yb in loader]
    >>> [len(yb) for yb in epoch0], sorted(torch.cat(epoch0).tolist()) == list(range(10))
    ([4, 4, 2], True)
    >>> epoch1 = torch.cat([yb for xb, yb in loader])  # the next epoch: a new order
    >>> torch.equal(torch.cat(epoch0), epoch1)
    False
    >>> again = FastLoader((x, y), batch_size=4, seed=0)  # same seed: same order
    >>> torch.equal(torch.cat([yb for xb, yb in again]), torch.cat(epoch0))
    True
    >>> len(FastLoader((x, y), batch_size=4, drop_last=True))
    2
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

import torch

from gpufeed.data.gather import Fields, take_rows
from gpufeed.data.orders import grouped_chunks, permutation, segments
from gpufeed.data.settings import Batching
from gpufeed.data.streams import BufferRing, SideStreams


class FastLoader:
    """Shuffled index permutation + slicing + one gather per batch; seeded, reshuffled each epoch.

    Args:
        data: what :func:`gpufeed.data.gather.gather` accepts; all fields share their first
            dimension (a tensorclass: its tensor fields).
        batch_size: samples per batch.
        shuffle: a new random order each epoch; False keeps ``0..n-1``.
        seed: the order of epoch ``e`` depends only on ``(seed, e)``: the same on every rank.
        drop_last: drop the last, short batch (with ``world_size > 1``: each rank's part of the
            epoch is cut to the smallest's full batches).
        rank, world_size: this process's shard: the epoch's order is cut into ``world_size``
            contiguous parts that together cover it. Every rank yields the same number of batches,
            which DistributedDataParallel needs (a rank with one batch fewer would wait forever in
            the others' last all-reduce): without ``drop_last`` each part has ``ceil(n /
            world_size)`` samples, the order padded with its own first samples as
            ``DistributedSampler`` pads (DALI: ``pad_last_batch``), so up to ``world_size - 1``
            samples are seen twice an epoch; with ``drop_last`` the parts are disjoint (sizes
            differ by at most one) and each yields the smallest's full batches.
        pad: False: without ``drop_last`` too, disjoint parts whose sizes differ by one, so ranks
            may yield different numbers of batches (lesson 12 shows why DDP then hangs).
        group_size: use the grouped shuffle (:func:`~gpufeed.data.orders.grouped_permutation`)
            with blocks of this size.
        sort_indices: sort the indices within each batch. The batch holds the same samples (the
            mean loss and its gradient are unchanged) and reads go forward through the file,
            which helps a cold page cache; but a batch is no longer in random order, so code that
            splits it (micro-batches, ``DataParallel``) gets index-ordered, often class-ordered,
            parts.
        device: ``"cuda"``: gather into pinned memory and copy each batch whole with
            ``non_blocking=True`` on a side stream of the loader's own (one per device), so the
            copy overlaps the work already queued on your stream instead of waiting behind it; the
            stream current when you ask for the batch (on the thread that iterates) waits for the
            copy (``wait_stream``, on the device: the host does not wait), and the batch's memory
            is marked as used there (``record_stream``). The batch you get lives on the device, in
            new memory. ``"cuda"`` without an index is the current device when a batch is made.
        reuse_buffers: 0 (the default): every batch is new memory, so a batch stays valid however
            long you keep it. ``k > 0``: gather into ``k`` preallocated buffers in turn (fresh
            memory costs a page fault per 4 KiB page on first touch). **A batch is then overwritten
            ``k`` batches later** (on the CPU the batch *is* the buffer): use or copy it before
            that, and keep ``k`` above the batches alive at once (a prefetcher's queue holds
            ``depth`` more). The buffers belong to each ``iter()``: two live iterators never share
            them.
        pin_memory: gather into pinned (page-locked) memory, so that a later ``.to("cuda",
            non_blocking=True)`` is asynchronous; with ``reuse_buffers=0`` from torch's caching host
            allocator, which does not reuse a block before the copies out of it are done.

    .. warning::
        With ``pin_memory=True`` and ``reuse_buffers=k``, your ``non_blocking`` copy of a batch
        reads its pinned buffer when the GPU gets to it, perhaps after the loader has moved on.
        When you ask for the next batch, the loader records an event on the stream then current
        (on the thread that iterates) and waits for that event before it refills the buffer
        ``k`` batches later: so issue the copies out of a batch on that stream (the default
        stream, or :class:`gpufeed.data.prefetch.CudaPrefetcher`'s side stream, which it makes
        current while it asks), before asking for the next one. A copy issued on another stream,
        or after the next batch was asked for (a queue between the loader and the copy, e.g. a
        :class:`~gpufeed.data.prefetch.ThreadPrefetcher` whose consumer copies on a side stream),
        is not covered: use ``reuse_buffers=0`` there.
    """

    def __init__(self, data, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, rank: int = 0, world_size: int = 1,
                 group_size: int | None = None, sort_indices: bool = False, device=None,
                 reuse_buffers: int = 0, pin_memory: bool = False, pad: bool = True):
        #: the batching settings, checked once (:class:`gpufeed.data.settings.Batching`)
        self.settings = Batching(batch_size=batch_size, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last, rank=rank, world_size=world_size,
                                 group_size=group_size, reuse_buffers=reuse_buffers,
                                 owner="FastLoader")
        self.data, self.fields = data, Fields(data)
        self.pad, self.sort_indices, self.pin_memory = pad, sort_indices, pin_memory
        self.device = torch.device(device) if device is not None else None
        self._cuda = self.device is not None and self.device.type == "cuda"
        if self._cuda and not torch.cuda.is_available():
            raise ValueError("FastLoader: device='cuda' but torch sees no GPU; pass device=None to "
                             "stay on the CPU")
        self.epoch = 0
        self._spare: list[BufferRing] = []  # rings of finished iterators, for the next ones
        self._streams = SideStreams()  # device="cuda": the copies' side stream per device

    def __getattr__(self, name: str):
        """The batching settings by name (``loader.batch_size``, ``loader.shuffle``, ...), read from
        :attr:`settings`."""
        settings = self.__dict__.get("settings")
        names = {f.name for f in dataclasses.fields(Batching)} - {"owner"}
        if settings is not None and name in names:
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration uses (each iteration then moves on by one)."""
        self.epoch = epoch

    def _bounds(self) -> tuple[int, int]:
        """This rank's positions ``[lo, hi)`` in the epoch's order. With ``drop_last`` (or without
        ``pad``): the ``torch.tensor_split`` parts (sizes differ by at most one; with ``drop_last``
        ``__len__`` counts the smallest's full batches). Else ``ceil(n / world_size)`` positions
        each, as ``DistributedSampler`` pads, the ones past ``n`` wrapping to the order's start, so
        every rank yields as many batches."""
        n, ws = self.fields.n, self.world_size
        if self.pad and not self.drop_last:
            per = -(-n // ws)
            return self.rank * per, (self.rank + 1) * per
        base, extra = divmod(n, ws)
        lo = self.rank * base + min(self.rank, extra)
        return lo, lo + base + (self.rank < extra)

    def __len__(self) -> int:
        lo, hi = self._bounds()
        if self.drop_last:  # the smallest shard sets the count, so every rank yields as many
            return (self.fields.n // self.world_size) // self.batch_size
        return math.ceil((hi - lo) / self.batch_size)

    def _chunks(self, epoch: int) -> Iterator[torch.Tensor]:
        """This rank's part of the epoch's order, in pieces; positions past ``n`` (the padding)
        wrap to the order's start."""
        lo, hi = self._bounds()
        n = self.fields.n
        if self.shuffle and self.group_size is not None:
            for a, b in segments(lo, hi, n):
                yield from grouped_chunks(n, self.group_size, self.seed, epoch, a, b)
            return
        order = permutation(n, self.seed, epoch) if self.shuffle else None
        parts = [order[a:b] if order is not None else torch.arange(a, b)
                 for a, b in segments(lo, hi, n)]
        yield parts[0] if len(parts) == 1 else torch.cat(parts)

    def indices(self, epoch: int | None = None) -> list[torch.Tensor]:
        """The index batches of an epoch (default: the next one) on this rank, without fetching."""
        return list(self._index_batches(self.epoch if epoch is None else epoch))

    def _index_batches(self, epoch: int) -> Iterator[torch.Tensor]:
        bs, left = self.batch_size, len(self)
        if self.group_size is None:  # one chunk: split it into views, one torch call per epoch
            (order,) = self._chunks(epoch)
            yield from order.split(bs)[:left]
            return
        pending: list[torch.Tensor] = []  # grouped: blocks of any size, re-cut into batches
        have = 0
        for chunk in self._chunks(epoch):
            while chunk.numel() and left:
                take = min(bs - have, chunk.numel())
                pending.append(chunk[:take])
                have, chunk = have + take, chunk[take:]
                if have == bs:
                    yield pending[0] if len(pending) == 1 else torch.cat(pending)
                    pending, have, left = [], 0, left - 1
        if have and left:
            yield torch.cat(pending)

    def __iter__(self) -> Iterator:
        epoch, self.epoch = self.epoch, self.epoch + 1  # now, not at the first next()
        return self.epoch_batches(epoch)

    def _on_device(self):
        """On CUDA: make ``self.device`` this thread's current device (as torch's pin-memory thread
        does), so pinned memory, the copy and its event all belong to it and its current stream."""
        return torch.cuda.device(self.device) if self._cuda else contextlib.nullcontext()

    def epoch_batches(self, epoch: int, ring: BufferRing | None = None) -> Iterator:
        """Epoch ``epoch``'s batches (``iter()`` is this for the next epoch), gathered into ``ring``
        if given (its owner then says when they may be overwritten), else, with ``reuse_buffers``,
        into a ring of this iterator's own: taken from the ones that finished iterators gave back
        (no fresh memory, so no page faults, each epoch), or made; two live iterators never share
        one."""
        own = ring is None and self.reuse_buffers > 0
        if own:
            with self._on_device():
                ring = (self._spare.pop() if self._spare
                        else BufferRing(self.fields.tensors.values(), self.batch_size,
                                        self.reuse_buffers, cuda=self._cuda,
                                        pin_memory=self.pin_memory))
        try:
            for idx in self._index_batches(epoch):
                yield self.gather(idx.sort().values if self.sort_indices else idx, ring)
            if ring is not None:
                # the caller asked past the last batch: its copies out of it are issued
                ring.asked()
        finally:
            # its slots go on in turn: the next epoch's first batch overwrites the oldest one
            if own:
                self._spare.append(ring)

    def gather(self, idx: torch.Tensor, ring: BufferRing | None = None):
        """One batch made as this loader makes its batches: rows ``idx`` (``int64 [B]``) of every
        field, on the CPU, or in pinned memory (``pin_memory``), or copied to ``device`` on the
        loader's side stream (ordered before your current stream's later work, as an epoch's
        batches are). Into new memory, or into ``ring``'s next slot (:meth:`epoch_batches` passes
        its own).

        Example:
            >>> loader = FastLoader((torch.arange(5) * 2, torch.arange(5)), batch_size=2)
            >>> loader.gather(torch.tensor([4, 0]))
            (tensor([8, 0]), tensor([4, 0]))
        """
        b, tensors, cuda = idx.shape[0], self.fields.tensors, self._cuda
        if not cuda and not self.pin_memory:  # the CPU paths: as little Python per batch as can be
            if ring is None:
                return self.fields.build({k: take_rows(t, idx) for k, t in tensors.items()}, b)
            return self.fields.build({k: take_rows(t, idx, out=o)
                                      for (k, t), o in zip(tensors.items(), ring.next(b))}, b)
        with self._on_device():  # pinned: for a copy to a GPU, here (cuda) or later (pin_memory)
            if ring is not None:
                out = ring.next(b)
            else:  # fresh pinned memory from torch's caching host allocator, which keeps a block
                # from reuse until the copies out of it are done: no event needed here
                out = [torch.empty((b, *t.shape[1:]), dtype=t.dtype, pin_memory=True)
                       for t in tensors.values()]
            got = {k: take_rows(t, idx, out=o) for (k, t), o in zip(tensors.items(), out)}
            if cuda:
                # Whole batch, one copy per field; from pinned memory it is asynchronous (lesson 03,
                # 08), on the side stream: it need not wait for the compute already queued on the
                # caller's.
                current, side = torch.cuda.current_stream(), self._streams.on()
                with torch.cuda.stream(side):
                    got = {k: v.to(side.device, non_blocking=True) for k, v in got.items()}
                    if ring is not None:
                        ring.copied(side)
                current.wait_stream(side)  # the caller's later work reads the batch after the copy
                for v in got.values():
                    # its memory is not the side stream's again before that work is done
                    v.record_stream(current)
        return self.fields.build(got, b)
