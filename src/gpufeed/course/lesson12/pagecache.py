"""What the page cache holds of a file, and what a fresh process pays to read it.

The page cache is the kernel's, not a process's: when one process (one rank) has read a file, the
next process on the same machine finds its pages in RAM, and a dataset memory-mapped by eight
ranks takes its size in RAM once, not eight times. :func:`resident` asks the kernel which pages of
a file are cached (``mincore``, on Linux), :func:`touch` reads one byte per page of a file through
a fresh mapping and counts the page faults that cost. Run as a script, it does that in a new
process and prints JSON (``python -m gpufeed.course.lesson12.pagecache FILE...``), which is how
``notebooks/12_scaling.ipynb`` shows a second process finding the file warm.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "demo.bin"
    >>> _ = path.write_bytes(bytes(3 * mmap.PAGESIZE))
    >>> touch([path])["pages"]
    3
    >>> got = resident([path])  # None where the OS has no mincore
    >>> got is None or (got[1] == 3 and 0 <= got[0] <= 3)
    True
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

_PROT_READ, _MAP_SHARED = 1, 1


def memmap_files(folder: str | os.PathLike) -> list[Path]:
    """The ``*.memmap`` files of a memmap dataset folder (``gpufeed.data.memmap``), largest first."""
    files = [p for p in Path(folder).rglob("*.memmap") if p.is_file()]
    return sorted(files, key=lambda p: (-p.stat().st_size, str(p)))


def _pages(size: int) -> int:
    return (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def _resident_one(libc, path: Path) -> tuple[int, int] | None:
    size = path.stat().st_size
    if size == 0:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        # Map without touching: mapping faults nothing in, and mincore on a file mapping reports
        # the page cache (whoever read the pages), not this process's own use.
        addr = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return None
        try:
            vec = (ctypes.c_ubyte * _pages(size))()  # one byte per page; bit 0 = in RAM
            if libc.mincore(addr, size, vec) != 0:
                return None
            return int((np.frombuffer(vec, dtype=np.uint8) & 1).sum()), len(vec)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident(paths) -> tuple[int, int] | None:
    """``(pages in the page cache, pages in all)`` over ``paths`` (files), or None where the OS
    cannot say (not Linux, or ``mincore`` refused)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = _libc()
    except (OSError, AttributeError):
        return None
    cached = total = 0
    for path in paths:
        got = _resident_one(libc, Path(path))
        if got is None:
            return None
        cached, total = cached + got[0], total + got[1]
    return cached, total


def faults() -> tuple[int, int]:
    """``(major, minor)`` page faults of this process so far: major ones waited for the disk,
    minor ones found the page in RAM (the page cache, or a fresh zeroed page) and only mapped it."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_majflt, r.ru_minflt


def touch(paths) -> dict:
    """Reads one byte per page of every file in ``paths`` through a new mapping.

    Returns:
        ``{"pages", "major", "minor", "seconds"}``: the pages touched, the page faults that took
        (from :func:`faults`) and the time.
    """
    (major0, minor0), t0 = faults(), time.perf_counter()
    pages = 0
    for path in paths:
        if Path(path).stat().st_size == 0:
            continue
        m = np.memmap(path, dtype=np.uint8, mode="r")
        int(m[:: mmap.PAGESIZE].sum())  # one byte per page: every page faults in once
        pages += _pages(m.size)
        del m
    seconds, (major1, minor1) = time.perf_counter() - t0, faults()
    return {"pages": pages, "major": major1 - major0, "minor": minor1 - minor0, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    """``python -m gpufeed.course.lesson12.pagecache FILE_OR_FOLDER...``: in this (new) process, how much of the
    files the page cache held, then what touching every page cost; one JSON line on stdout."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m gpufeed.course.lesson12.pagecache FILE_OR_MEMMAP_FOLDER...", file=sys.stderr)
        return 2
    paths: list[Path] = []
    for a in map(Path, args):
        if not a.exists():
            print(f"gpufeed.course.lesson12.pagecache: {a} does not exist; give a file or a memmap dataset folder", file=sys.stderr)
            return 2
        paths += memmap_files(a) if a.is_dir() else [a]
    before = resident(paths)
    report = touch(paths)
    report["resident_before"] = None if before is None else before[0] / max(before[1], 1)
    report["pid"] = os.getpid()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
