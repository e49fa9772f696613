"""What the page cache holds of a file, what a fresh process pays to read it, and what each of
several processes that map it is charged for it.

The page cache is the kernel's, not a process's: when one process (one rank) has read a file, the
next process on the same machine finds its pages in RAM, and a dataset memory-mapped by eight
ranks takes its size in RAM once, not eight times. :func:`resident` asks the kernel which pages of
a file are cached (``mincore``, on Linux), :func:`touch` reads one byte per page of a file through
a fresh mapping and counts the page faults that cost. Run as a script, it does that in a new
process and prints JSON (``python -m gpufeed.course.lesson12.pagecache FILE...``), which is how
``notebooks/12_scaling.ipynb`` shows a second process finding the file warm (:func:`cold_then_warm`,
in rounds). With ``--hold`` the process keeps its mapping until its stdin closes, so that
:func:`shared_readers` can read, from ``/proc/<pid>/smaps``, each process's RSS and PSS of the file
while all of them map it (:func:`mapping_memory`): RSS counts every page a process maps, PSS
divides each page among the processes that map it.

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


def touch(paths, keep: list | None = None) -> dict:
    """Reads one byte per page of every file in ``paths`` through a new mapping.

    Args:
        paths: the files.
        keep: where given, the mappings are appended to it and stay mapped (else each is unmapped).

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
        if keep is not None:
            keep.append(m)
        del m
    seconds, (major1, minor1) = time.perf_counter() - t0, faults()
    return {"pages": pages, "major": major1 - major0, "minor": minor1 - minor0, "seconds": seconds}


def mapping_memory(pid: int, paths) -> tuple[int, int] | None:
    """``(RSS, PSS)`` in bytes of the mappings of ``paths`` in process ``pid``, read from
    ``/proc/<pid>/smaps``; None where there is no such file (not Linux, or the process is gone).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "demo.bin"
        >>> _ = path.write_bytes(bytes(4 * mmap.PAGESIZE))
        >>> held = []
        >>> _ = touch([path], keep=held)
        >>> got = mapping_memory(os.getpid(), [path])
        >>> got is None or got == (4 * mmap.PAGESIZE, 4 * mmap.PAGESIZE)  # mapped here alone: PSS = RSS
        True
    """
    names = {str(Path(p).resolve()) for p in paths}
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return None
    rss = pss = 0
    inside = False
    for line in text.splitlines():
        head = line.split(None, 1)[0] if line.strip() else ""
        if head and not head.endswith(":"):  # a mapping: address range, perms, offset, device, inode, path
            parts = line.split(None, 5)
            inside = len(parts) == 6 and parts[5].strip() in names
        elif inside and head in ("Rss:", "Pss:"):
            kb = int(line.split()[1]) * 1024
            rss, pss = (rss + kb, pss) if head == "Rss:" else (rss, pss + kb)
    return rss, pss


def shared_readers(paths, n: int, timeout: float = 120) -> list[dict]:
    """Starts ``n`` processes that each map ``paths`` (files) and touch every page
    (``python -m gpufeed.course.lesson12.pagecache --hold``); once all of them hold their mapping,
    reads each one's RSS and PSS of the files (:func:`mapping_memory`), then lets them end.

    Returns:
        One dict per process: :func:`touch`'s report, ``pid``, and ``rss`` and ``pss`` in bytes
        (None where the OS reports no smaps).
    """
    import subprocess

    cmd = [sys.executable, "-m", __name__, "--hold", *map(str, paths)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    try:
        reports = [json.loads(p.stdout.readline() or "{}") for p in procs]  # each has touched every page
        if not all(reports):
            raise RuntimeError("pagecache.shared_readers: a reader ended before it had mapped the files")
        for p, r in zip(procs, reports):  # all of them map the files now
            got = mapping_memory(p.pid, paths)
            r["rss"], r["pss"] = (None, None) if got is None else got
    finally:
        for p in procs:
            p.stdin.close()  # the reader's stdin ends: it unmaps and exits
        for p in procs:
            p.wait(timeout=timeout)
    return reports


def cold_then_warm(folder, rounds: int) -> dict:
    """``rounds`` times: the folder's memmap files dropped from the page cache
    (:func:`gpufeed.data.folder.drop_cached`), then read by a new process, then by another
    (``python -m gpufeed.course.lesson12.pagecache``, :func:`main`).

    Returns:
        ``{"dropped": whether the OS took the request every time, "first": [report per round],
        "second": [...]}``: each report is :func:`main`'s JSON.
    """
    import subprocess

    from gpufeed.data.folder import drop_cached

    files, out = memmap_files(folder), {"dropped": True, "first": [], "second": []}
    for _ in range(rounds):
        out["dropped"] &= drop_cached(files)
        for which in ("first", "second"):
            r = subprocess.run([sys.executable, "-m", __name__, str(folder)], capture_output=True, text=True, check=True)
            out[which].append(json.loads(r.stdout))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m gpufeed.course.lesson12.pagecache [--hold] FILE_OR_FOLDER...``: in this (new) process, how
    much of the files the page cache held, then what touching every page cost; one JSON line on
    stdout. With ``--hold``, the files stay mapped until stdin ends (:func:`shared_readers`)."""
    args = sys.argv[1:] if argv is None else argv
    hold = bool(args) and args[0] == "--hold"
    args = args[1:] if hold else args
    if not args:
        print("usage: python -m gpufeed.course.lesson12.pagecache [--hold] FILE_OR_MEMMAP_FOLDER...", file=sys.stderr)
        return 2
    paths: list[Path] = []
    for a in map(Path, args):
        if not a.exists():
            print(f"gpufeed.course.lesson12.pagecache: {a} does not exist; give a file or a memmap dataset folder", file=sys.stderr)
            return 2
        paths += memmap_files(a) if a.is_dir() else [a]
    before, held = resident(paths), []
    report = touch(paths, keep=held if hold else None)
    report["resident_before"] = None if before is None else before[0] / max(before[1], 1)
    report["pid"] = os.getpid()
    print(json.dumps(report), flush=True)
    if hold:
        sys.stdin.read()  # mapped until whoever started us closes our stdin
    return 0


if __name__ == "__main__":
    sys.exit(main())
