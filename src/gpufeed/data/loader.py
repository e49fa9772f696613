"""Batched fetching: one index operation per batch instead of one Python call per sample.

:class:`FastLoader` is the course's minimal fast loader. Each epoch it draws a permutation of the
sample indices (seeded by ``seed`` and the epoch, so every epoch has a new order and the same seed
gives the same orders), cuts it into slices of ``batch_size``, and fetches each slice with one
``torch.index_select`` per field (:func:`gather`). It works on the memmap dataset
(:class:`gpufeed.data.memmap.ImageData`), on in-memory tensors, tuples or dicts of tensors,
TensorDicts and NumPy arrays (``np.memmap`` included). ``rank``/``world_size`` give each process its
shard of every epoch, the same number of batches on every rank (lesson 12), and ``group_size``
switches to a grouped shuffle (:func:`grouped_permutation`). Taught in
``notebooks/06_batched.ipynb``; used in 05 and later.

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
import functools
import math
import sys
import warnings
from collections.abc import Iterator

import numpy as np
import torch

from gpufeed.data.settings import Batching


def _seed(*key: int) -> int:
    """A 63-bit seed from a tuple of ints (seed, epoch) via NumPy's SeedSequence, which spreads
    nearby keys far apart: (0, 1) and (1, 0) give unrelated streams."""
    return int(np.random.SeedSequence([k & 0xFFFFFFFF for k in key])
               .generate_state(1, np.uint64)[0] >> 1)


def seeded_generator(*key: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from a tuple of ints, e.g. ``(seed, epoch, rank)``."""
    return torch.Generator().manual_seed(_seed(*key))


def permutation(n: int, seed: int = 0, epoch: int = 0) -> torch.Tensor:
    """A random order of ``range(n)`` (``int64 [n]``), the same for the same ``(seed, epoch)``."""
    return torch.randperm(n, generator=seeded_generator(seed, epoch))


def grouped_permutation(n: int, group: int, seed: int = 0, epoch: int = 0) -> torch.Tensor:
    """A grouped shuffle of ``range(n)``: blocks of ``group`` neighbouring indices in a random
    order, each block shuffled within itself.

    Cheaper than :func:`permutation` for large ``n`` (each block's shuffle fits in the CPU cache,
    and a loader can make the blocks one at a time), and reads stay within one region of the file
    at a time. The price is randomness: a batch holds samples from only a few blocks, so samples
    stored near each other (e.g. the same class, in a folder-ordered dataset) land in the same
    batches. Store the data in a random order once, at build time, before relying on it.

    Example:
        >>> p = grouped_permutation(12, group=4, seed=0)
        >>> sorted(p.tolist()) == list(range(12))  # every index once
        True
        >>> len({i // 4 for i in p[:4].tolist()})  # the first 4 all come from one block
        1
    """
    return torch.cat(list(_grouped_chunks(n, group, seed, epoch, 0, n)))


def _grouped_chunks(n: int, group: int, seed: int, epoch: int, lo: int,
                    hi: int) -> Iterator[torch.Tensor]:
    """Positions ``lo..hi-1`` of the grouped order, one block at a time. Each block is shuffled by
    its own generator (seed, epoch, block), so every rank computes only the blocks it needs."""
    base = _seed(seed, epoch)
    blocks = torch.randperm(math.ceil(n / group),
                            generator=torch.Generator().manual_seed(base)).tolist()
    gen = torch.Generator()
    pos = 0  # position in the global order where the current block starts
    for b in blocks:
        start, length = b * group, min(group, n - b * group)
        if pos + length > lo and pos < hi:
            # block b's own stream: any rank can make it alone
            gen.manual_seed((base + b + 1) % 2**63)
            order = start + torch.randperm(length, generator=gen)
            yield order[max(0, lo - pos):hi - pos]
        pos += length
        if pos >= hi:
            return


def _segments(lo: int, hi: int, n: int) -> Iterator[tuple[int, int]]:
    """Positions ``lo..hi-1`` of an order of ``n`` read around and around: ``[a, b)`` runs within
    ``0..n``.

    Example:
        >>> list(_segments(4, 12, 5))
        [(4, 5), (0, 5), (0, 2)]
    """
    while lo < hi:
        a = lo % n
        b = min(n, a + hi - lo)
        yield a, b
        lo += b - a


class _Fields:
    """``data`` as named tensors sharing their first dimension, and how to rebuild a batch of the
    same kind: a tensor, a tuple/list or dict of tensors, a TensorDict or a tensorclass."""

    def __init__(self, data):
        self.kind, self.cls = "tensor", None
        # if tensordict is not imported, data is none of its kinds
        td = sys.modules.get("tensordict")
        if td is not None and td.is_tensorclass(data):
            self.kind, self.cls = "tensorclass", type(data)
            names = [f.name for f in dataclasses.fields(data)]
            tensors = {k: getattr(data, k) for k in names
                       if isinstance(getattr(data, k), torch.Tensor)}
        elif td is not None and isinstance(data, td.TensorDictBase):
            self.kind, tensors = "tensordict", dict(data.items())
        elif isinstance(data, dict):
            self.kind, tensors = "dict", dict(data)
        elif isinstance(data, (tuple, list)):
            self.kind, tensors = "sequence", {str(i): t for i, t in enumerate(data)}
        else:
            tensors = {"": data}
        self.tensors = {k: _as_tensor(v, k) for k, v in tensors.items()}
        if not self.tensors:
            raise ValueError("FastLoader: data holds no tensors")
        lengths = {k: len(v) for k, v in self.tensors.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError("FastLoader: every field must have the same length along dim 0, got "
                             f"{lengths}")
        self.n = next(iter(lengths.values()))

    def build(self, fields: dict[str, torch.Tensor], b: int):
        if self.kind == "tensor":
            return fields[""]
        if self.kind == "sequence":
            return tuple(fields.values())  # built in the order of self.tensors
        if self.kind == "dict":
            return fields
        if self.kind == "tensordict":
            from tensordict import TensorDict

            return TensorDict(fields, batch_size=[b])
        return self.cls(**fields, batch_size=[b])


def _as_tensor(value, name: str) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        with warnings.catch_warnings():  # a read-only np.memmap: we only ever read it
            warnings.simplefilter("ignore", UserWarning)
            value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        raise TypeError(f"FastLoader: field {name!r} must be a tensor or array with a first "
                        f"(sample) dimension, got {type(value).__name__}")
    return value.as_subclass(torch.Tensor)  # a plain view: no subclass dispatch on every batch


#: torch's CPU ``index_select`` hands whole rows to its threads only when a row holds fewer elements
#: than this (``at::internal::GRAIN_SIZE``); it copies a larger row, such as an image, one at a
#: time, each copy split across all the threads, which then meet after every image.
GRAIN_SIZE = 32768


@functools.lru_cache(maxsize=64)
def _pieces(row: int) -> int:
    """The fewest equal pieces that cut a row of ``row`` elements below :data:`GRAIN_SIZE`, or 1
    when none of at least 1,024 elements does (a row that is short already, or a prime length)."""
    if row < GRAIN_SIZE:
        return 1
    for k in range(-(-row // (GRAIN_SIZE - 1)), row // 1024 + 1):
        if row % k == 0:
            return k
    return 1


@functools.lru_cache(maxsize=64)
def _piece_offsets(k: int) -> torch.Tensor:
    """``0..k-1`` (``int64 [k]``), made once per ``k``: row ``i``'s pieces are ``i*k + offsets``."""
    return torch.arange(k)


def take_rows(t: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.index_select(t, 0, idx, out=out)``: the same rows, faster for large rows on the CPU.

    An image row (``3*240*240`` = 172,800 bytes) is above :data:`GRAIN_SIZE`, so ``index_select``
    copies the batch one image at a time and splits each image's copy over the threads, which must
    meet 64 times a batch. Viewed as ``k`` equal pieces of fewer than 32,768 elements per row
    (``[N*k, row/k]``), the same gather takes the other path of the kernel: a ``parallel_for``
    over pieces, so each thread copies its own run of whole images with plain ``memcpy``. Same
    bytes, same order (lesson 06 measures both paths side by side).

    A batch costs one more small op (the piece indices) than ``index_select``, which matters for
    small images.

    **Where a shuffled gather's time goes** (lesson 06's deep dive measures it again). Against a
    copy of the same rows in file order, the shuffle costs nothing measurable; the output's size
    in the cache costs a third. Measured on a 2-core AMD EPYC VM (32 MB L3, 4 KiB pages), 2,400
    rows of 3x224x224 from a memmap fully in the page cache, batches of 64, 2 threads, every case
    an epoch, in turns, 11 rounds (load 1.2; medians, images/s over a file-order copy into one
    reused buffer, 75,759 images/s): the same copy into a ring of two buffers 0.66; this gather
    into a ring of two (``FastLoader(reuse_buffers=2)``) 0.68, into one buffer 0.98, with each
    batch's rows sorted into file order 0.71; plain ``index_select`` 0.53. One 9.6 MB buffer stays
    in the L3 and its writes never reach RAM; two (19 MB) do not fit beside the rows read. In
    another run (load 1.9): a loop of ``copy_`` per row 0.42, ``os.preadv`` of each row from the
    file into the buffer (no map) 0.33 on one thread and 0.41 on two, the map advised
    ``MADV_RANDOM`` 0.75, ``MADV_WILLNEED`` 0.81, ``MADV_HUGEPAGE`` 0.69 or mapped with
    ``MAP_POPULATE`` 0.78 against 0.71 for this gather (within the runs' spread, 12-24%), the rows
    in anonymous memory with transparent huge pages 0.70 against 4 KiB pages 0.62. No case took a
    minor page fault after its first epoch (``resource.getrusage``): the map's page tables stay
    filled, so there is no page-table work to save. ``perf`` runs here, but this VM exposes no
    hardware counters (``dTLB-load-misses``: not supported). So the limit of a gather into a ring
    of two is a streaming copy into the same ring, and ``gpufeed bench`` measures it so
    (:func:`gpufeed.measure.ceilings.loader_bounds`).

    Example:
        >>> x = torch.arange(4 * 3 * 128 * 128,
        ...                  dtype=torch.int32).view(4, 3, 128, 128)  # 49,152 a row
        >>> idx = torch.tensor([2, 0, 3])
        >>> torch.equal(take_rows(x, idx), torch.index_select(x, 0, idx)), _pieces(3 * 128 * 128)
        (True, 2)
    """
    if (t.dim() < 2 or idx.dim() != 1 or idx.dtype not in (torch.int64, torch.int32)
            or t.device.type != "cpu" or not t.is_contiguous()):
        return torch.index_select(t, 0, idx, out=out)
    row = t.stride(0)  # contiguous: the elements of one row
    k = _pieces(row)
    if k == 1:
        return torch.index_select(t, 0, idx, out=out)
    if out is None:
        out = torch.empty((idx.shape[0], *t.shape[1:]), dtype=t.dtype)
    elif (out.dtype != t.dtype or out.shape[0] != idx.shape[0] or out.shape[1:] != t.shape[1:]
          or not out.is_contiguous() or out.device.type != "cpu"):
        return torch.index_select(t, 0, idx, out=out)  # index_select's own checks and messages
    # row i -> pieces i*k .. i*k+k-1: [B, k] in one op (offsets + k * idx), read as [B*k]
    pieces = torch.add(_piece_offsets(k), idx.view(-1, 1), alpha=k).view(-1)
    torch.index_select(t.view(-1, row // k), 0, pieces, out=out.view(-1, row // k))
    return out


def gather(data, idx, out: dict[str, torch.Tensor] | None = None):
    """Rows ``idx`` of every field of ``data``, as a batch of the same kind as ``data``.

    One ``torch.index_select`` per field (:func:`take_rows`): a tight copy loop in C++, 10 times and
    more faster than ``data[idx]`` on large rows, which goes through torch's general advanced
    indexing.

    Args:
        data: a tensor, tuple/list/dict of tensors, TensorDict, tensorclass or NumPy array.
        idx: indices (a tensor, list or array of ints).
        out: optional buffers per field (``[len(idx), ...]``) to write into instead of allocating.

    Example:
        >>> gather((torch.arange(5) * 2, torch.arange(5)), [4, 0])
        (tensor([8, 0]), tensor([4, 0]))
    """
    fields = data if isinstance(data, _Fields) else _Fields(data)
    idx = torch.as_tensor(idx, dtype=torch.int64)
    got = {k: take_rows(t, idx, out=None if out is None else out[k])
           for k, t in fields.tensors.items()}
    return fields.build(got, len(idx))


class FastLoader:
    """Shuffled index permutation + slicing + one gather per batch; seeded, reshuffled each epoch.

    Args:
        data: what :func:`gather` accepts; all fields share their first dimension (a tensorclass:
            its tensor fields).
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
        group_size: use the grouped shuffle (:func:`grouped_permutation`) with blocks of this size.
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
        self.data, self.fields = data, _Fields(data)
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
            for a, b in _segments(lo, hi, n):
                yield from _grouped_chunks(n, self.group_size, self.seed, epoch, a, b)
            return
        order = permutation(n, self.seed, epoch) if self.shuffle else None
        parts = [order[a:b] if order is not None else torch.arange(a, b)
                 for a, b in _segments(lo, hi, n)]
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
                ring = self._spare.pop() if self._spare else BufferRing(self, self.reuse_buffers)
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


class SideStreams:
    """A loader's own CUDA side stream per device, made at its first use there and kept: one owner,
    so every epoch's blocks come back to the same stream's pool of the caching allocator. Used by
    :class:`FastLoader` (``device="cuda"``) and :class:`gpufeed.data.ImageLoader`."""

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
    """``count`` gather buffers for ``loader``'s batches, used in turn. One belongs to one iterator
    at a time (:meth:`FastLoader.epoch_batches`). Pinned where the loader copies to a GPU or pins,
    each slot then with an event that must be done before the slot is refilled: recorded after
    the loader's own copy out of it (``device="cuda"``: :meth:`copied`), or, for a copy the
    consumer makes (``pin_memory=True``), on the consumer's current stream when it asks for the
    next batch (:meth:`asked`; see :class:`FastLoader`'s warning)."""

    def __init__(self, loader: FastLoader, count: int):
        cuda = loader.device is not None and loader.device.type == "cuda"
        pinned = cuda or loader.pin_memory
        # in the fields' order
        self.buffers = [[torch.empty((loader.batch_size, *t.shape[1:]), dtype=t.dtype,
                                     pin_memory=pinned)
                         for t in loader.fields.tensors.values()] for _ in range(count)]
        self.events = [torch.cuda.Event() if pinned else None for _ in self.buffers]
        self.full, self.slot = loader.batch_size, -1
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


class BatchTensorDataset(torch.utils.data.Dataset):
    """Tensors indexed together, fetched per sample (``ds[i]``) or per batch (``ds[[i, j, ...]]``
    and ``__getitems__``): the map-style dataset of ``notebooks/06_batched.ipynb``.

    A DataLoader calls ``__getitems__(indices)`` when it exists, then ``collate_fn`` on the result.
    Ours returns the finished batch, so use ``collate_fn=no_collate``; or pass a ``BatchSampler``
    as the sampler with ``batch_size=None``, which calls ``ds[indices]`` once per batch.

    Example:
        >>> ds = BatchTensorDataset(torch.arange(5) * 2, torch.arange(5))
        >>> ds[3], ds[[3, 1]]
        ((tensor(6), tensor(3)), (tensor([6, 2]), tensor([3, 1])))
    """

    def __init__(self, *tensors: torch.Tensor):
        self.fields = _Fields(tensors)
        self.tensors = tensors

    def __len__(self) -> int:
        return self.fields.n

    def __getitem__(self, i):
        if isinstance(i, (int, np.integer)):
            return tuple(t[i] for t in self.tensors)
        return gather(self.fields, i)

    def __getitems__(self, indices):
        return gather(self.fields, indices)


def no_collate(batch):
    """The collate function for datasets whose ``__getitems__`` already returns a whole batch."""
    return batch
