"""A dataset larger than the memory: what the full shuffle and the grouped one read from disk.

Lesson 06 reads one file of images, four times larger than the memory the reading process may
use, in two orders: a full shuffle (``torch.randperm``) and the grouped shuffle FFCV calls
``QUASI_RANDOM`` (:func:`gpufeed.data.loader.grouped_permutation`, ``ImageLoader(...,
group_size=g)``). Each epoch runs in a fresh process (:func:`read_epoch`) that starts with none of
the file in the page cache and reports images/s and the bytes it read from the disk
(``read_bytes`` of ``/proc/self/io``: what reached the block device, read-ahead included).

The memory limit, in the order tried (:func:`limit_method`):

* ``"cgroup v2"`` / ``"cgroup v1"``: a memory cgroup made for the reader (as root), its limit
  counting the page cache the process fills: once it is full the kernel evicts the process's
  oldest pages, as it would on a machine with that much memory;
* ``"fadvise"``, where no cgroup can be made: the reader keeps the file's pages it touched in an
  LRU list of 1 MiB blocks, and past the limit drops the oldest with ``madvise(MADV_DONTNEED)``
  and ``posix_fadvise(POSIX_FADV_DONTNEED)``, so the measurement stays honest (the rest of the
  machine's memory does not serve the re-reads).

The reader is NumPy alone (no torch: its own memory would eat the limit) and gathers each batch
with one fancy index of the mapped file, as :class:`gpufeed.data.loader.FastLoader` does.

Example:
    >>> limit_method() in ("cgroup v2", "cgroup v1", "fadvise")
    True
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

V2, V1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")
BLOCK = 1 << 20  # the fadvise fallback's unit of eviction (bytes)


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
                (path / "memory.swap.max").write_text(
                    "0"
                )  # evict the cache, do not swap the process
            yield method, path
            return
        except OSError:
            pass
        finally:
            for _ in range(50):  # the reader has exited; its cache charges move to the parent
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    yield "fadvise", None


def read_epoch(
    images: str | os.PathLike,
    shape: tuple[int, ...],
    order: np.ndarray,
    batch: int,
    limit: int,
    advice: str = "normal",
) -> dict:
    """One epoch over the ``uint8`` rows ``shape`` of the file ``images``, in ``order``, batches of
    ``batch``, in a new process held to ``limit`` bytes, starting with the file out of the cache.
    ``advice``: ``"normal"`` (a plain mapping: a page fault reads ahead around the page, up to
    the device's ``read_ahead_kb``) or ``"random"`` (``madvise(MADV_RANDOM)``: only the page).

    Returns:
        ``{"images_per_s", "seconds", "read_bytes", "file_bytes", "method", "limit"}``.
    """
    images = Path(images)
    order_file = images.with_name(f"order-{uuid.uuid4().hex[:8]}.npy")
    np.save(order_file, np.asarray(order, dtype=np.int64))
    try:
        with memory_cgroup(limit) as (method, cgroup):
            args = [
                sys.executable,
                "-m",
                "gpufeed.course.outofcore",
                str(images),
                ",".join(map(str, shape)),
                str(order_file),
                str(batch),
                str(limit),
                method,
                str(cgroup or ""),
                advice,
            ]
            run = subprocess.run(args, capture_output=True, text=True, timeout=1800)
        if run.returncode != 0:
            raise RuntimeError(
                f"gpufeed.course.outofcore: the reader failed ({run.returncode}): "
                f"{run.stderr[-2000:]}"
            )
        return json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        order_file.unlink(missing_ok=True)


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


def compare(
    images: str | os.PathLike,
    shape: tuple[int, ...],
    batch: int,
    group: int,
    limit: int,
    seed: int = 0,
    first: int | None = None,
) -> dict[str, dict]:
    """:func:`read_epoch` of the full shuffle (plain, and with ``MADV_RANDOM``) and of the grouped
    one (blocks of ``group`` rows), seeded by ``seed``; only the epoch's ``first`` images if given.

    Returns:
        ``{"full shuffle": ..., "full shuffle, MADV_RANDOM": ..., "grouped": ...}``.
    """
    from gpufeed.data.loader import grouped_permutation, permutation

    n = Path(images).stat().st_size // int(np.prod(shape))
    full, grouped = (
        permutation(n, seed).numpy()[:first],
        grouped_permutation(n, group, seed).numpy()[:first],
    )
    runs = {
        "full shuffle": (full, "normal"),
        "full shuffle, MADV_RANDOM": (full, "random"),
        "grouped": (grouped, "normal"),
    }
    return {
        name: read_epoch(images, shape, order, batch, limit, advice)
        for name, (order, advice) in runs.items()
    }


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


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no read_bytes (a kernel without task I/O accounting)")


def _reader(
    images: str,
    shape: tuple[int, ...],
    order_file: str,
    batch: int,
    limit: int,
    method: str,
    cgroup: str,
    advice: str,
) -> dict:
    """The child's side of :func:`read_epoch`."""
    if cgroup:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))  # from now on our pages count
    order = np.load(order_file)
    fd = os.open(images, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # start cold: none of the file in the cache
    size = os.fstat(fd).st_size
    row = int(np.prod(shape))
    mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    if advice == "random":
        mapped.madvise(
            mmap.MADV_RANDOM
        )  # a fault reads its page, not the read-ahead window around it
    rows = np.frombuffer(mapped, dtype=np.uint8).reshape(
        -1, *shape
    )  # [N, *shape], nothing read yet
    lru: OrderedDict[int, None] = OrderedDict()  # the fadvise fallback's blocks, oldest first
    keep = max(1, limit // BLOCK)
    io0, t0, total = _read_bytes(), time.perf_counter(), 0
    for a in range(0, len(order), batch):
        idx = order[a : a + batch]
        total += int(
            rows[idx].sum(dtype=np.uint64) & 1
        )  # the gather; the sum keeps it from being skipped
        if method == "fadvise":
            for r in idx.tolist():
                for blk in range(r * row // BLOCK, ((r + 1) * row - 1) // BLOCK + 1):
                    lru[blk] = None
                    lru.move_to_end(blk)
            while len(lru) > keep:
                blk, _ = lru.popitem(last=False)
                start, length = blk * BLOCK, min(BLOCK, size - blk * BLOCK)
                mapped.madvise(
                    mmap.MADV_DONTNEED, start, length
                )  # unmap from us, then drop from the cache
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)
    seconds = time.perf_counter() - t0
    read = _read_bytes() - io0
    del rows
    mapped.close()
    os.close(fd)
    return {
        "images_per_s": len(order) / seconds,
        "images": len(order),
        "advice": advice,
        "seconds": seconds,
        "read_bytes": read,
        "file_bytes": size,
        "method": method,
        "limit": limit,
        "check": total,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m gpufeed.course.outofcore IMAGES SHAPE ORDER.npy BATCH LIMIT METHOD CGROUP
    ADVICE``: the reader :func:`read_epoch` starts; one JSON line on stdout."""
    a = sys.argv[1:] if argv is None else argv
    if len(a) != 8:
        print(
            "usage: python -m gpufeed.course.outofcore IMAGES SHAPE ORDER.npy BATCH LIMIT METHOD "
            "CGROUP ADVICE",
            file=sys.stderr,
        )
        return 2
    shape = tuple(int(s) for s in a[1].split(","))
    print(json.dumps(_reader(a[0], shape, a[2], int(a[3]), int(a[4]), a[5], a[6], a[7])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
