"""The memmap format's light half: its names, its manifest, NumPy mapping, and the worker dataset.

:func:`gpufeed.data.memmap.load_memmap` returns a tensordict ``@tensorclass``; importing tensordict
takes seconds (it imports ``torch._dynamo``), and a data-parallel job or a spawned DataLoader worker
pays that on every start. This module needs only NumPy and torch:

* :func:`~gpufeed.data.manifest.read_manifest` (from :mod:`gpufeed.data.manifest`, the format's
  names, re-exported here): the dataset's manifest (format checked; version too where asked);
* :func:`open_arrays`: the two arrays, ``images.memmap`` and ``targets.memmap``, checked against the
  manifest's shapes and mapped with ``numpy.memmap`` as torch tensors (the same page cache as any
  other mapping of the files). When anything does not match (a missing or damaged folder, another
  tensordict layout) it falls back to :func:`~gpufeed.data.memmap.load_memmap`, which says what is
  wrong and how to fix it;
* :class:`MemmapDataset`: the dataset for DataLoader workers, per sample or a batch per call.

Used by :mod:`gpufeed.course.lesson12.distributed` (``notebooks/12_scaling.ipynb``) and lessons
07, 09-11.

Example:
    >>> import tempfile, torch
    >>> from gpufeed.data.memmap import ImageData
    >>> root = Path(tempfile.mkdtemp())
    >>> data = ImageData(images=torch.arange(2 * 3 * 4 * 5, dtype=torch.uint8).view(2, 3, 4, 5),
    ...                  targets=torch.tensor([1, 0]), batch_size=[2]).memmap(prefix=root / DATA)
    >>> doc = {"format": "gpufeed-memmap", "version": 1, "count": 2, "classes": ["a", "b"],
    ...        "images": {"shape": [2, 3, 4, 5], "dtype": "uint8"},
    ...        "targets": {"shape": [2], "dtype": "int64"}}
    >>> _ = (root / MANIFEST).write_text(json.dumps(doc))
    >>> images, targets, manifest = open_arrays(root)
    >>> (torch.equal(images, data.images.as_subclass(torch.Tensor)), targets.tolist(),
    ...  manifest["classes"])
    (True, [1, 0], ['a', 'b'])
"""

from __future__ import annotations

import json  # noqa: F401  (the example above)
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from gpufeed.data.gather import take_rows
from gpufeed.data.manifest import (  # noqa: F401 (re-exported)
    DATA,
    MANIFEST,
    MemmapError,
    data_files,
    read_manifest,
)


def _fast(folder: Path) -> tuple[torch.Tensor, torch.Tensor, dict] | None:
    """The mapped arrays and the manifest, or None if anything is not as expected (MemmapError for a
    file whose size is not the manifest's: :func:`data_files`)."""
    try:
        manifest = read_manifest(folder, check_version=True)
    except MemmapError:
        return None  # load_memmap says which version and what to do
    if manifest is None:
        return None
    files = data_files(folder, manifest)
    if files is None:
        return None
    out = []
    for file, dtype, shape in files.values():
        # read-only mapping: torch warns that it is not writable; we only read
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            out.append(torch.from_numpy(np.memmap(file, dtype=dtype, mode="r", shape=shape)))
    if len(out[0]) != len(out[1]):
        return None
    return out[0], out[1], manifest


def open_arrays(folder: str | os.PathLike) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(images uint8 [N, 3, H, W], targets int64 [N], manifest)`` of a memmap dataset folder.

    Nothing is read yet: pages come in from the page cache (or the disk) when a batch touches them.
    The tensors are read-only mappings: copy (``clone``, ``index_select``) before writing.

    Raises:
        gpufeed.data.arrays.MemmapError: the folder is missing, incomplete or damaged (a file
            shorter or longer than its manifest says is named, and left as it is); the message says
            how to build or rebuild it.
    """
    folder = Path(folder).expanduser().absolute()
    got = _fast(folder)
    if got is not None:
        return got
    from gpufeed.data.memmap import load_memmap  # the slow import, only on this path

    data = load_memmap(folder)  # raises with the reason and the fix
    images, targets = (t.as_subclass(torch.Tensor) for t in (data.images, data.targets))
    return images, targets, read_manifest(folder)


class MemmapDataset(Dataset):
    """A memmap dataset (:func:`gpufeed.data.memmap.build_memmap`) for DataLoader workers.

    ``ds[i]`` is ``(image, target)``: ``transform(images[i])``, or a ``uint8 [3, H, W]`` copy
    without a transform, and an ``int``. ``ds.__getitems__(indices)``, which a DataLoader calls
    with each batch's indices, depends on ``batched``:

    * ``batched=True``: the finished batch ``(images [B, ...], int64 [B])``: without a transform,
      one ``index_select`` per field (lesson 06: one gather instead of B copies), with one, each
      sample transformed and the results stacked. Pass ``collate_fn=no_collate``
      (:func:`gpufeed.data.gather.no_collate`): the batch is already made.
    * ``batched=False``: the samples as a list, as torch datasets do, for the DataLoader's default
      collate (the usual per-sample pipeline of lessons 09-11).

    The files are mapped on first use in each process, with NumPy alone (:func:`open_arrays`: no
    tensordict import in a spawned worker); pickling (``spawn``, ``forkserver``) sends the path
    and the transform, never the mapping.

    Args:
        path: a folder written by :func:`gpufeed.data.memmap.build_memmap`.
        transform: a picklable callable on one ``uint8 [3, H, W]`` image (e.g.
            :func:`gpufeed.data.augment.cpu_transform`); None: the stored pixels.
        batched: what ``__getitems__`` returns, as above.

    Raises:
        MemmapError: ``path`` is not a complete memmap dataset (the message says how to build one).

    Example:
        >>> import tempfile, pathlib
        >>> from torch.utils.data import DataLoader
        >>> from gpufeed.data.gather import no_collate
        >>> from gpufeed.measure.synth import synth_folder
        >>> from gpufeed.data.memmap import build_memmap
        >>> tmp = pathlib.Path(tempfile.mkdtemp())
        >>> src = synth_folder(tmp / "jpeg", n=4, size=(48, 40), classes=2, progress=False).path
        >>> mm = build_memmap(src, tmp / "mm", size=(32, 32), progress=False).path
        >>> ds = MemmapDataset(mm)
        >>> image, target = ds[1]
        >>> image.shape, image.dtype, target
        (torch.Size([3, 32, 32]), torch.uint8, 0)
        >>> images, targets = next(iter(DataLoader(ds, batch_size=3, collate_fn=no_collate)))
        >>> images.shape, targets.tolist()
        (torch.Size([3, 3, 32, 32]), [0, 0, 1])
        >>> images, targets = next(iter(DataLoader(MemmapDataset(mm, batched=False), batch_size=3)))
        >>> images.shape, targets.tolist()  # the default collate stacked the samples
        (torch.Size([3, 3, 32, 32]), [0, 0, 1])
    """

    def __init__(self, path: str | os.PathLike, transform=None, *, batched: bool = True):
        self.path = Path(path).expanduser().absolute()
        self.transform, self.batched = transform, bool(batched)
        # checks it now
        self._arrays: tuple[torch.Tensor, torch.Tensor] | None = open_arrays(self.path)[:2]
        self.n = len(self._arrays[1])

    def _open(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._arrays is None:
            self._arrays = open_arrays(self.path)[:2]
        return self._arrays

    def __getstate__(self) -> dict:
        # a worker maps the files itself (free; shared page cache)
        return {**self.__dict__, "_arrays": None}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        images, targets = self._open()
        image = images[i]  # uint8 [3, H, W], a read-only view of the mapped file
        return (self.transform(image) if self.transform is not None
                else image.clone()), int(targets[i])

    def __getitems__(self, indices) -> tuple[torch.Tensor,
                                             torch.Tensor] | list[tuple[torch.Tensor, int]]:
        if not self.batched:
            return [self[i] for i in indices]
        images, targets = self._open()
        idx = torch.as_tensor(indices, dtype=torch.int64)
        if self.transform is None:
            return take_rows(images, idx), torch.index_select(targets, 0, idx)
        return (torch.stack([self.transform(images[i]) for i in idx.tolist()]),
                torch.index_select(targets, 0, idx))
