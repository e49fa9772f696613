"""The memmap format's names, its manifest and its files checked against it (:func:`data_files`):
what both of its halves need, in one place.

:mod:`gpufeed.data.memmap` (the build, tensordict's loader) and :mod:`gpufeed.data.arrays` (NumPy
mapping, the worker dataset) both import these, and neither imports the other at import time
of this module: the format is defined once, below both.

Example:
    >>> import tempfile
    >>> read_manifest(tempfile.mkdtemp()) is None  # a folder without a manifest
    True
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gpufeed.data import staging

MANIFEST = "gpufeed-memmap.json"
DATA = "data"  # the tensordict memmap folder inside the dataset folder
FORMAT = "gpufeed-memmap"
FORMAT_VERSION = 1
_DTYPES = {"uint8": np.uint8, "int64": np.int64}


class MemmapError(ValueError):
    """Bad arguments, an unusable source or destination, or a folder that is not a complete
    memmap dataset; the message says what to do."""


def read_manifest(folder: str | os.PathLike, *, check_version: bool = False) -> dict | None:
    """The manifest of a memmap dataset in ``folder``, or None if it has none (or a foreign one).

    With ``check_version``, a manifest of another format version raises :class:`MemmapError`
    saying to rebuild.
    """
    return staging.read_manifest(
        folder,
        MANIFEST,
        FORMAT,
        version=FORMAT_VERSION if check_version else None,
        error=MemmapError,
        hint="rebuild it with --overwrite",
    )


def data_files(folder: Path,
               manifest: dict) -> dict[str, tuple[Path, np.dtype, tuple[int, ...]]] | None:
    """``{"images": (file, dtype, shape), "targets": ...}``: the dataset's two raw files, each
    checked against the manifest; None for a layout this reader does not know (another
    tensordict's).

    Checked before anything maps a file: tensordict maps a writable file shared, and
    ``torch.from_file`` then *extends* a short file with zeros, so a truncated dataset would load
    as black images and be rewritten full size on disk. Nothing here writes.

    Raises:
        MemmapError: a file's size is not what the manifest's shape and dtype give; the message
            names the file and says how to rebuild.
    """
    found = {}
    for name in ("images", "targets"):
        spec = manifest.get(name) or {}
        files = list((folder / DATA).rglob(f"{name}.memmap"))
        dtype = _DTYPES.get(spec.get("dtype"))
        if len(files) != 1 or dtype is None or not spec.get("shape"):
            return None
        shape = tuple(int(s) for s in spec["shape"])
        want, size = int(np.prod(shape)) * np.dtype(dtype).itemsize, files[0].stat().st_size
        if size != want:
            raise MemmapError(
                f"{files[0]} holds {size:,} bytes but {folder / MANIFEST} says {name} "
                f"{list(shape)} {spec['dtype']}: {want:,} bytes; the dataset is damaged (truncated "
                "or overwritten) and was left as it is; rebuild it with `python -m gpufeed data "
                f"memmap {manifest.get('source', 'SRC')} {folder} --overwrite`")
        found[name] = (files[0], dtype, shape)
    return found
