"""Gathers: rows of every field of a dataset by index, one ``index_select`` per field per batch.

* :class:`Fields`: a dataset (a tensor, a tuple/list or dict of tensors, a TensorDict, a
  tensorclass, NumPy arrays and ``np.memmap`` included) as named tensors of one length, and how to
  rebuild a batch of the same kind.
* :func:`take_rows`: ``torch.index_select`` along dim 0, faster for large rows on the CPU (each
  row cut into pieces below :data:`GRAIN_SIZE`, so the threads share whole rows).
* :func:`gather`: a batch of the same kind as the dataset, one :func:`take_rows` per field.
* :class:`BatchTensorDataset`: tensors fetched a batch per call by a DataLoader (its
  ``__getitems__``), with :func:`no_collate` as the ``collate_fn`` of any dataset that returns
  whole batches.

:class:`gpufeed.data.loader.FastLoader` gathers its batches with these. Taught in
``notebooks/06_batched.ipynb``.

Example:
    >>> x, y = torch.arange(5) * 10, torch.arange(5)
    >>> gather((x, y), [3, 0])
    (tensor([30,  0]), tensor([3, 0]))
    >>> Fields({"x": x, "y": y}).n
    5
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings

import numpy as np
import torch


class Fields:
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
        """A batch of ``b`` rows of the data's kind from ``fields`` (name -> ``[b, ...]``, in the
        order of :attr:`tensors`)."""
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
    fields = data if isinstance(data, Fields) else Fields(data)
    idx = torch.as_tensor(idx, dtype=torch.int64)
    got = {k: take_rows(t, idx, out=None if out is None else out[k])
           for k, t in fields.tensors.items()}
    return fields.build(got, len(idx))


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
        self.fields = Fields(tensors)
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
