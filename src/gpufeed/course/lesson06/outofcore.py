"""A dataset larger than the memory: what the full shuffle and the grouped one read from disk.

Lesson 06 reads one memmap dataset (:func:`write_dataset`), four times larger than the memory
the reading process may use, in two orders: a full shuffle (``torch.randperm``) and the grouped
shuffle FFCV calls ``QUASI_RANDOM`` (:func:`gpufeed.data.orders.grouped_permutation`). The epochs run
one after another in one reader process (:func:`read_epochs`: one interpreter start, and for
ImageLoader one torch import, about 3 s of CPU, for all of them); each starts with none of the file in the page cache and reports
images/s and the bytes it read from the disk (psutil's ``io_counters().read_bytes``: what
reached the block device, read-ahead included). Two readers:

* ``"numpy"``, a stand-in with nothing but NumPy (no torch: the lightest process): one fancy
  index of the mapped file per batch, as :class:`gpufeed.data.loader.FastLoader` gathers, on a
  plain mapping or with ``madvise(MADV_RANDOM)`` (no read-ahead);
* ``"imageloader"``: :class:`gpufeed.data.ImageLoader` itself (``group_size=None`` or ``g``),
  on one thread, its batches ``uint8``; the same rows in the same order as the stand-in's.

The memory limit, in the order tried (:func:`limit_method`):

* ``"cgroup v2"`` / ``"cgroup v1"``: a memory cgroup made for the reader (as root), which the
  reader joins once it has started (so its interpreter, NumPy or torch, stay charged outside),
  its limit counting the page cache it fills from then on: once full, the kernel evicts its
  oldest pages, as it would on a machine with that much memory;
* ``"fadvise"``, where no cgroup can be made: the reader keeps the file's pages it touched in an
  LRU list of 1 MiB blocks, and past the limit drops the oldest with ``madvise(MADV_DONTNEED)``
  and ``posix_fadvise(POSIX_FADV_DONTNEED)``, so the measurement stays honest (the rest of the
  machine's memory does not serve the re-reads).

Example:
    >>> limit_method() in ("cgroup v2", "cgroup v1", "fadvise")
    True
"""

from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import subprocess
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil

from gpufeed.data.manifest import DATA, FORMAT, FORMAT_VERSION, MANIFEST, data_files, read_manifest

# psutil neither makes cgroups nor reads a device's read-ahead: those are read and written in the
# kernel's own files below (/sys/fs/cgroup, /sys/dev/block).
V2, V1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")
BLOCK = 1 << 20  # the fadvise fallback's unit of eviction (bytes)
READERS = ("numpy", "imageloader")
# glibc's malloc: one arena (not one per thread) and a fixed mmap threshold, so a freed batch goes
# back to the system at once; else the reader keeps freed memory that a cgroup counts against the
# limit (the page cache's room), and ImageLoader's was OOM-killed now and then under 32 MiB.
READER_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}


def _v2_root() -> Path | None:
    for root in (V2, V2 / "unified"):
        controllers = root / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            return root
    return None


def _try_mkdir(root: Path) -> Path | None:
    path = root / f"gpufeed-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def _remove(cgroup: Path) -> None:
    for _ in range(50):  # the reader has exited; its cache charges move to the parent
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def limit_method() -> str:
    """How this machine can hold a process to a memory limit: ``"cgroup v2"``, ``"cgroup v1"`` (a
    memory cgroup can be made here: Linux, as root) or ``"fadvise"`` (the fallback)."""
    with memory_cgroup(1 << 30) as (method, _):
        return method


@contextmanager
def memory_cgroup(limit: int):
    """``(method, cgroup folder or None)``: a fresh memory cgroup limited to ``limit`` bytes,
    removed afterwards; ``("fadvise", None)`` where none can be made."""
    for method, root, knob in (
        ("cgroup v2", _v2_root(), "memory.max"),
        ("cgroup v1", V1, "memory.limit_in_bytes"),
    ):
        if root is None or not (root / "cgroup.procs").exists():
            continue
        path = _try_mkdir(root)
        if path is None:
            continue
        try:
            (path / knob).write_text(str(limit))
            if method == "cgroup v2" and (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")  # evict the cache, do not swap
        except OSError:  # a controller this cgroup cannot use: try the next way
            _remove(path)
            continue
        try:
            yield method, path
        finally:
            _remove(path)
        return
    yield "fadvise", None


def write_images(path: str | os.PathLike, source: np.ndarray, rows: int) -> Path:
    """A raw ``uint8`` file of ``rows`` images, ``source``'s ``[k, *shape]`` rows repeated (the
    bytes do not matter to the disk), written and synced: no dirty page is left in the cache,
    so a reader's ``POSIX_FADV_DONTNEED`` can drop all of it."""
    path = Path(path)
    chunk = np.ascontiguousarray(source, dtype=np.uint8)
    with open(path, "wb") as f:
        for a in range(0, rows, len(chunk)):
            f.write(chunk[: rows - a].tobytes())
        f.flush()
        os.fsync(f.fileno())
    return path


def write_dataset(folder: str | os.PathLike, source: np.ndarray, rows: int) -> Path:
    """A memmap dataset at ``folder`` (the format of :func:`gpufeed.data.memmap.build_memmap`,
    which :class:`gpufeed.data.ImageLoader` and :func:`gpufeed.data.memmap.load_memmap` read) of
    ``rows`` images: ``source``'s ``uint8 [k, 3, H, W]`` repeated (:func:`write_images`), every
    label 0. Decoding that many JPEGs would take minutes; the disk sees the same bytes."""
    import torch

    from gpufeed.data.memmap import ImageData

    folder, shape = Path(folder), tuple(source.shape[1:])
    images = torch.zeros((), dtype=torch.uint8).expand(rows, *shape)  # shapes only: no memory
    targets = torch.zeros((), dtype=torch.int64).expand(rows)
    # tensordict's files at full size (sparse: nothing written yet) and its meta.json
    ImageData(images=images, targets=targets, batch_size=[rows]).memmap_like(prefix=folder / DATA)
    (images_file,) = (folder / DATA).rglob("images.memmap")
    write_images(images_file, source, rows)
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, "count": rows, "classes": ["any"],
                "images": {"shape": [rows, *shape], "dtype": "uint8"}, "size": [shape[2], shape[1]],
                "targets": {"shape": [rows], "dtype": "int64"}, "source": "outofcore.write_dataset"}
    (folder / MANIFEST).write_text(json.dumps(manifest) + "\n")
    return folder


def read_epochs(dataset: str | os.PathLike, runs: Sequence[tuple[np.ndarray, dict]], batch: int,
                limit: int, *, reader: str = "numpy", seed: int = 0) -> list[dict]:
    """Reads each ``(order, options)`` of ``runs``: the first ``len(order)`` images of ``dataset``
    (:func:`write_dataset`) in ``order``, batches of ``batch``, one run after another in one new
    process held to ``limit`` bytes (one memory cgroup): one interpreter start for them all, and for
    ``"imageloader"`` one import of torch.

    Every run starts with none of the file cached (the reader drops it) and with the previous run's
    mapping and loader gone. The reader joins the cgroup after its imports and the first run's
    loader are set up; a later run's ImageLoader is made inside it (its index order: a few KiB,
    against a limit of MiB).

    Args:
        reader: ``"numpy"`` (the stand-in) or ``"imageloader"`` (:class:`gpufeed.data.ImageLoader`
            with ``group_size=group`` and ``seed``, whose order must be ``order``: checked).
        runs: ``(order, options)``; options: ``advice``, the stand-in's mapping, ``"normal"`` (a
            page fault reads ahead around the page, up to the device's ``read_ahead_kb``) or
            ``"random"`` (``madvise(MADV_RANDOM)``: only the page); ``group`` for ImageLoader.

    Returns:
        One result per run, in order: ``{"images_per_s", "images", "seconds", "read_bytes",
        "own_bytes", "file_bytes", "method", "limit", "reader", "advice"}``; ``own_bytes``: what the
        reader's own memory grew by while it read (a cgroup counts it against the limit, leaving
        the page cache less).
    """
    if reader not in READERS:
        raise ValueError(f"read_epochs: reader must be one of {READERS} (got {reader!r})")
    dataset = Path(dataset).resolve()  # the reader finds its mapping by this path in psutil's (absolute) maps
    order_files = []
    try:
        steps = []
        for order, options in runs:
            order_files.append(dataset / f"order-{uuid.uuid4().hex[:8]}.npy")
            np.save(order_files[-1], np.asarray(order, dtype=np.int64))
            steps.append({"order": str(order_files[-1]), "advice": options.get("advice", "normal"),
                          "group": options.get("group")})
        with memory_cgroup(limit) as (method, cgroup):
            spec = {"dataset": str(dataset), "batch": batch, "limit": limit, "method": method,
                    "cgroup": str(cgroup or ""), "reader": reader, "seed": seed, "runs": steps}
            run = subprocess.run([sys.executable, "-m", "gpufeed.course.lesson06.outofcore",
                                  json.dumps(spec)], capture_output=True, text=True, timeout=1800,
                                 env={**os.environ, **READER_ENV})
        if run.returncode == -9 and method != "fadvise":
            raise RuntimeError(f"gpufeed.course.lesson06.outofcore: the {reader} reader was killed by the "
                               f"kernel: its own memory and its page cache outgrew the {method} "
                               f"limit of {limit >> 20} MiB; give it a larger limit")
        if run.returncode != 0:
            raise RuntimeError(f"gpufeed.course.lesson06.outofcore: the {reader} reader failed "
                               f"({run.returncode}): {run.stderr[-2000:]}")
        return json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        for f in order_files:
            f.unlink(missing_ok=True)


def compare(dataset: str | os.PathLike, batch: int, group: int, limit: int, seed: int = 0,
            first: int | None = None, image_loader: bool = True) -> dict[str, dict]:
    """:func:`read_epochs` of the full shuffle (plain, and with ``MADV_RANDOM``) and of the grouped
    one (blocks of ``group`` rows) by the NumPy stand-in, then (``image_loader``) of both orders by
    ImageLoader itself; seeded by ``seed``; only the epoch's ``first`` images if given.

    Returns:
        ``{"full shuffle": ..., "full shuffle, MADV_RANDOM": ..., "grouped": ...,
        "ImageLoader, full shuffle": ..., "ImageLoader, grouped": ...}``.
    """
    from gpufeed.data.orders import grouped_permutation, permutation

    n = read_manifest(dataset)["count"]
    full = permutation(n, seed).numpy()[:first]
    grouped = grouped_permutation(n, group, seed).numpy()[:first]
    by_reader = {"numpy": {"full shuffle": (full, {"advice": "normal"}),
                           "full shuffle, MADV_RANDOM": (full, {"advice": "random"}),
                           "grouped": (grouped, {"advice": "normal"})}}
    if image_loader:
        by_reader["imageloader"] = {"ImageLoader, full shuffle": (full, {}),
                                    "ImageLoader, grouped": (grouped, {"group": group})}
    out = {}
    for reader, runs in by_reader.items():  # one process per reader, its epochs one after another
        out.update(zip(runs, read_epochs(dataset, list(runs.values()), batch, limit, reader=reader,
                                         seed=seed)))
    return out


def read_ahead_kb(path: str | os.PathLike) -> int | None:
    """The ``read_ahead_kb`` of the block device holding ``path`` (Linux; None if unknown): how much
    a page fault on a plain mapping may read around the page."""
    dev = os.stat(path).st_dev
    base = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for queue in (
        base / "queue",
        base.parent / "queue" if base.exists() else None,
        base / ".." / "queue",
    ):
        if queue is not None and (queue / "read_ahead_kb").exists():
            return int((queue / "read_ahead_kb").read_text())
    return None


class _Evictor:
    """The fadvise fallback: the file's 1 MiB blocks this process touched, oldest first; past
    ``limit``, the oldest are unmapped from the process (``madvise``, given ``unmap(start,
    length)``), then every page of the file that no mapping holds is dropped from the page cache
    (``posix_fadvise`` of the whole file: the blocks just unmapped, and the read-ahead around
    faults, which no block list sees)."""

    def __init__(self, fd: int, size: int, row: int, limit: int, unmap):
        self.fd, self.size, self.row, self.unmap = fd, size, row, unmap
        self.keep, self.lru = max(1, limit // BLOCK), OrderedDict()

    def touched(self, rows) -> None:
        for r in rows:
            for blk in range(r * self.row // BLOCK, ((r + 1) * self.row - 1) // BLOCK + 1):
                self.lru[blk] = None
                self.lru.move_to_end(blk)
        if len(self.lru) <= self.keep:
            return
        while len(self.lru) > self.keep:
            blk, _ = self.lru.popitem(last=False)
            self.unmap(blk * BLOCK, min(BLOCK, self.size - blk * BLOCK))  # mapped pages stay cached
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _mapping_start(path: Path) -> int:
    """Where this process maps ``path`` (its lowest address), from psutil's memory maps."""
    starts = [int(m.addr.split("-")[0], 16) for m in psutil.Process().memory_maps(grouped=False)
              if Path(m.path) == path]
    if not starts:
        raise RuntimeError(f"{path} is not mapped in this process")
    return min(starts)


def _madvise_at(address: int):
    """``unmap(start, length)`` for memory mapped at ``address`` by someone else (a loader's
    ``numpy.memmap``), through the C library's ``madvise``: Python's needs the mmap object."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def unmap(start: int, length: int) -> None:
        if libc.madvise(address + start, length, mmap.MADV_DONTNEED) != 0:
            raise OSError(ctypes.get_errno(), "madvise(MADV_DONTNEED) failed")

    return unmap


def _anonymous() -> int:
    """This process's resident memory that no file backs (its own: buffers, stacks), in bytes."""
    info = psutil.Process().memory_info()
    return info.rss - getattr(info, "shared", 0)  # Linux: shared = resident file-backed pages


def _join(cgroup: str, method: str) -> str:
    """Moves this process into ``cgroup`` (from now on its new pages count against the limit);
    the method that holds it: ``method``, or ``"fadvise"`` where it may not join (a cgroup made
    but not delegated to us)."""
    if not cgroup:
        return method
    try:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return "fadvise"
    return method


def _numpy_epoch(files, order, spec, fd, size) -> int:
    """The stand-in: one fancy index of the mapped file per batch."""
    shape = files["images"][2]
    row = int(np.prod(shape[1:]))
    mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    if spec["advice"] == "random":  # a fault reads its page, not the read-ahead window around it
        mapped.madvise(mmap.MADV_RANDOM)
    rows = np.frombuffer(mapped, dtype=np.uint8).reshape(-1, *shape[1:])  # nothing read yet
    evict = _Evictor(fd, size, row, spec["limit"], lambda s, n: mapped.madvise(
        mmap.MADV_DONTNEED, s, n)) if spec["method"] == "fadvise" else None
    total = 0
    for a in range(0, len(order), spec["batch"]):
        idx = order[a : a + spec["batch"]]
        total += int(rows[idx].sum(dtype=np.uint64) & 1)  # the gather; the sum keeps it honest
        if evict is not None:
            evict.touched(idx.tolist())
    del rows
    mapped.close()
    return total


def _image_loader(spec, order):
    """ImageLoader on one thread, whose epoch 0 must be ``order`` (the stand-in's rows)."""
    import torch

    from gpufeed.data.image_loader import ImageLoader

    torch.set_num_threads(1)
    loader = ImageLoader(spec["dataset"], spec["batch"], dtype=torch.uint8, flip=False,
                         seed=spec["seed"], group_size=spec["group"], threads=1)
    mine = torch.cat(loader.indices(0)).numpy()[: len(order)]
    if not np.array_equal(mine, order):
        raise RuntimeError("ImageLoader's order is not the stand-in's: the comparison is void")
    return loader


def _loader_epoch(loader, files, order, spec, fd, size) -> int:
    """ImageLoader's batches until ``len(order)`` images have come."""
    images_file, _, shape = files["images"]
    evict = _Evictor(fd, size, int(np.prod(shape[1:])), spec["limit"],
                     _madvise_at(_mapping_start(images_file))) if spec["method"] == "fadvise" else None
    total, done = 0, 0
    for images, _ in loader:
        total += int(images.sum()) & 1
        if evict is not None:
            evict.touched(order[done : done + len(images)].tolist())
        done += len(images)
        if done >= len(order):
            break
    return total


def _reader(spec: dict) -> dict:
    """The child's side of :func:`read_epochs`."""
    folder = Path(spec["dataset"])
    files = data_files(folder, read_manifest(folder))
    order = np.load(spec["order"])
    loader = _image_loader(spec, order) if spec["reader"] == "imageloader" else None
    # after the imports and the loader's setup: from here on, the data's pages count
    spec = {**spec, "method": _join(spec["cgroup"], spec["method"])}
    anon0 = _anonymous()
    fd = os.open(files["images"][0], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # start cold: none of the file cached
    size = os.fstat(fd).st_size
    io = psutil.Process().io_counters
    io0, t0 = io().read_bytes, time.perf_counter()
    if loader is None:
        total = _numpy_epoch(files, order, spec, fd, size)
    else:
        total = _loader_epoch(loader, files, order, spec, fd, size)
    seconds, read = time.perf_counter() - t0, io().read_bytes - io0
    own = max(0, _anonymous() - anon0)
    os.close(fd)
    return {"images_per_s": len(order) / seconds, "images": len(order), "seconds": seconds,
            "read_bytes": read, "own_bytes": own, "file_bytes": size, "method": spec["method"],
            "limit": spec["limit"], "reader": spec["reader"], "advice": spec["advice"],
            "check": total}


def _readers(spec: dict) -> list[dict]:
    """The child's side of :func:`read_epochs`: :func:`_reader` for each of ``spec["runs"]``, the
    previous run's loader and mapping collected before the next starts."""
    out = []
    for run in spec["runs"]:
        out.append(_reader({**{k: v for k, v in spec.items() if k != "runs"}, **run}))
        gc.collect()  # the run's loader (and its mapping of the file) is gone before the next one
    return out


USAGE = "usage: python -m gpufeed.course.lesson06.outofcore SPEC  (SPEC: the JSON that read_epochs writes)"


def main(argv: list[str] | None = None) -> int:
    """``python -m gpufeed.course.lesson06.outofcore SPEC``: the reader :func:`read_epochs` starts,
    given its JSON spec; one JSON line on stdout, a list of one result per run."""
    a = sys.argv[1:] if argv is None else argv
    try:
        spec = json.loads(a[0]) if len(a) == 1 else None
    except json.JSONDecodeError:
        spec = None
    if not isinstance(spec, dict) or not isinstance(spec.get("runs"), list):
        print(USAGE, file=sys.stderr)
        return 2
    print(json.dumps(_readers(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
