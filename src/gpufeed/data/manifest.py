"""The memmap format's names and its manifest: what both of its halves need, in one place.

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

from gpufeed.data import staging

MANIFEST = "gpufeed-memmap.json"
DATA = "data"  # the tensordict memmap folder inside the dataset folder
FORMAT = "gpufeed-memmap"
FORMAT_VERSION = 1


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
