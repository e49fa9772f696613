"""The memmap dataset's two arrays, mapped with NumPy alone: for processes that must start fast.

:func:`gpufeed.data.memmap.load_memmap` returns a tensordict ``@tensorclass``; importing tensordict
takes seconds (it imports ``torch._dynamo``), and a data-parallel job pays that in every rank on
every start. :func:`open_arrays` reads the dataset's manifest, finds its ``images.memmap`` and
``targets.memmap`` files, checks their sizes against the manifest's shapes, and maps them with
``numpy.memmap`` as torch tensors, sharing the same page cache as any other mapping of the files.
When anything does not match (a missing or damaged folder, another tensordict layout) it falls
back to :func:`~gpufeed.data.memmap.load_memmap`, which says what is wrong and how to fix it. Used by
:mod:`gpufeed.course.distributed`; taught in ``notebooks/12_scaling.ipynb``.

Example:
    >>> import tempfile, torch
    >>> from gpufeed.data.memmap import ImageData, MANIFEST, DATA
    >>> root = Path(tempfile.mkdtemp())
    >>> data = ImageData(images=torch.arange(2 * 3 * 4 * 5, dtype=torch.uint8).view(2, 3, 4, 5),
    ...                  targets=torch.tensor([1, 0]), batch_size=[2]).memmap(prefix=root / DATA)
    >>> doc = {"format": "gpufeed-memmap", "version": 1, "count": 2, "classes": ["a", "b"],
    ...        "images": {"shape": [2, 3, 4, 5], "dtype": "uint8"}, "targets": {"shape": [2], "dtype": "int64"}}
    >>> _ = (root / MANIFEST).write_text(json.dumps(doc))
    >>> images, targets, manifest = open_arrays(root)
    >>> torch.equal(images, data.images.as_subclass(torch.Tensor)), targets.tolist(), manifest["classes"]
    (True, [1, 0], ['a', 'b'])
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch

_MANIFEST, _FORMAT, _VERSION = "gpufeed-memmap.json", "gpufeed-memmap", 1  # as in gpufeed.data.memmap
_DTYPES = {"uint8": np.uint8, "int64": np.int64}


def _fast(folder: Path) -> tuple[torch.Tensor, torch.Tensor, dict] | None:
    """The mapped arrays and the manifest, or None if anything is not as expected."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT or manifest.get("version") != _VERSION:
        return None
    out = []
    for name in ("images", "targets"):
        spec = manifest.get(name) or {}
        files = list((folder / "data").rglob(f"{name}.memmap"))
        dtype = _DTYPES.get(spec.get("dtype"))
        if len(files) != 1 or dtype is None or not spec.get("shape"):
            return None
        shape = tuple(int(s) for s in spec["shape"])
        if files[0].stat().st_size != int(np.prod(shape)) * np.dtype(dtype).itemsize:
            return None  # a damaged or foreign file: let load_memmap say so
        with warnings.catch_warnings():  # read-only mapping: torch warns that it is not writable; we only read
            warnings.simplefilter("ignore", UserWarning)
            out.append(torch.from_numpy(np.memmap(files[0], dtype=dtype, mode="r", shape=shape)))
    if len(out[0]) != len(out[1]):
        return None
    return out[0], out[1], manifest


def open_arrays(folder: str | os.PathLike) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(images uint8 [N, 3, H, W], targets int64 [N], manifest)`` of a memmap dataset folder.

    Nothing is read yet: pages come in from the page cache (or the disk) when a batch touches them.

    Raises:
        gpufeed.data.memmap.MemmapError: the folder is missing, incomplete or damaged; the message says
            how to build or rebuild it.
    """
    folder = Path(folder).expanduser().absolute()
    got = _fast(folder)
    if got is not None:
        return got
    from gpufeed.data.memmap import load_memmap, read_manifest  # the slow import, only on this path

    data = load_memmap(folder)  # raises with the reason and the fix
    images, targets = (t.as_subclass(torch.Tensor) for t in (data.images, data.targets))
    return images, targets, read_manifest(folder)
