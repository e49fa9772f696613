"""The disk and the page cache: a file read cold and warm, whether the cold read reached the disk,
and the storage ladder that sets this machine's reads beside a reference node's and published rates.

A cold read drops the file's pages first (:func:`gpufeed.data.folder.drop_page_cache`); some file
systems keep the data anyway, so each read also counts the bytes the OS fetched from storage
(:func:`storage_bytes`) and :func:`reached_disk` says whether the disk was read. Lesson 00 shows
the reads and the ladder; ``python -m gpufeed bench --ceilings`` keeps them among the ceilings
(:func:`gpufeed.measure.ceilings.all_ceilings`; :func:`gpufeed.measure.ceilings.make_file` writes the file).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "f.bin"
    >>> _ = path.write_bytes(bytes(3 * MB))
    >>> warm = file_read(path, cold=False, repeats=2)
    >>> warm.name, warm.nbytes == 3 * MB, [r.what for r in storage_ladder(None, warm)]
    ('read warm 3 MB', True, ["this machine's page cache (a warm read)"])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpufeed.data.folder import drop_page_cache
from gpufeed.measure.harness import Measurement, benchmark
from gpufeed.measure.published import Figure
from gpufeed.measure.results import Reference
from gpufeed.measure.units import MB, size_label


def read_file(path: str | Path, chunk: int = 8 * MB) -> int:
    """Reads a whole file into one reused buffer (no allocation per chunk); returns bytes read."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            total += n
    return total


def storage_bytes() -> int | None:
    """Bytes this process has had fetched from storage so far (psutil's ``io_counters().read_bytes``,
    Linux's ``read_bytes`` of ``/proc/self/io``: page-cache misses, readahead included), or None
    where the OS does not count them (macOS has no ``io_counters``; a container may deny it).

    Example:
        >>> n = storage_bytes()
        >>> n is None or n >= 0
        True
    """
    try:
        return int(psutil.Process().io_counters().read_bytes)
    except (AttributeError, NotImplementedError, psutil.Error, OSError):
        return None


def file_read(path: str | Path, cold: bool, repeats: int = 5) -> Measurement:
    """GB/s reading ``path`` whole, with the page cache dropped before each read (``cold``) or not.

    ``params["from_storage"]`` is the median fraction of the file that each read fetched from
    storage (:func:`storage_bytes`; None where the OS does not count): near 1, the read reached the
    disk; near 0, the file system served it from RAM whatever was asked (:func:`reached_disk`).
    """
    path = Path(path)
    size = path.stat().st_size
    setup = (lambda: drop_page_cache(path)) if cold else None
    fetched = []  # bytes fetched from storage, per read

    def read():
        before = storage_bytes()
        read_file(path)
        after = storage_bytes()
        if before is not None and after is not None:
            fetched.append(after - before)

    m = benchmark(read, name=f"read {'cold' if cold else 'warm'} {size_label(size)}",
                  repeats=repeats, warmup=1, nbytes=size, setup=setup,
                  params={"nbytes": size, "cold": cold, "fadvise": hasattr(os, "posix_fadvise")})
    m.params["from_storage"] = sorted(fetched)[len(fetched) // 2] / size if fetched and size else None
    return m


def reached_disk(cold: Measurement, warm: Measurement) -> bool:
    """Whether a "cold" :func:`file_read` read the disk: it fetched most of the file from storage,
    where the OS counts that; elsewhere (no count: macOS, Windows), it asked to drop the pages and
    ran 1.5x slower than ``warm`` at least (a fast disk may then read as cached).

    Example:
        >>> m = lambda s, **p: Measurement("read", [s], nbytes=1, params={"fadvise": True, **p})
        >>> reached_disk(m(1.0, from_storage=1.0), m(1.0)), reached_disk(m(3.0, from_storage=0.0), m(1.0))
        (True, False)
        >>> reached_disk(m(2.0, from_storage=None), m(1.0)), reached_disk(m(1.2, from_storage=None), m(1.0))
        (True, False)
    """
    share = cold.params.get("from_storage")
    if share is not None:
        return share >= 0.5  # a disk as fast as the page cache still counts: its bytes came from it
    return bool(cold.params.get("fadvise")) and cold.median >= 1.5 * warm.median


@dataclass(frozen=True)
class Rung:
    """One rung of the storage ladder: a read rate, what was read, and whose number it is.

    Attributes:
        what: what the bytes were read from, e.g. "this machine's page cache (a warm read)".
        gb_per_s: the rate, in GB/s (a published one converted from its own unit).
        source: "measured here", our reference's source, or the publisher's label and link.
        published: the number as published, with its unit ("" for ours).
        ours: measured by the course (here or on a committed reference machine), not by others.
    """

    what: str
    gb_per_s: float
    source: str
    published: str = ""
    ours: bool = True


def storage_ladder(cold: Measurement | None, warm: Measurement, figures: Sequence[Figure] = (),
                   reference: Reference | None = None) -> list[Rung]:
    """The storage ladder, fastest first: this machine's page cache (``warm``) and disk (``cold``;
    None where the cold read did not reach the disk, e.g. the file system kept the file cached:
    then there is no rung for this disk), the same two read on a committed reference machine, and
    each published read rate of ``figures`` (NVMe, RAID, network storage;
    :attr:`gpufeed.measure.published.Figure.gb_per_s`).

    Example:
        >>> cold = Measurement("read cold", [1.0], nbytes=1e9, params={"cold": True})
        >>> warm = Measurement("read warm", [0.25], nbytes=1e9, params={"cold": False})
        >>> [(r.what, r.gb_per_s) for r in storage_ladder(cold, warm)]
        [("this machine's page cache (a warm read)", 4.0), ("this machine's disk (a cold read)", 1.0)]
        >>> [r.what for r in storage_ladder(None, warm)]
        ["this machine's page cache (a warm read)"]
    """
    def ours(m: Measurement, whose: str, source: str) -> Rung:
        what = "disk (a cold read)" if m.params.get("cold") else "page cache (a warm read)"
        return Rung(f"{whose} {what}", m.gb_per_s, source)

    rungs = [ours(m, "this machine's", "measured here") for m in (warm, cold) if m is not None]
    if reference is not None:
        rungs += [ours(m, f"{reference.hardware} node's", reference.source) for m in reference.measurements]
    rungs += [Rung(f.hardware, f.gb_per_s, f"{f.label()}: [{f.title}]({f.url})",
                   f"{f.number()} {f.unit}", ours=False) for f in figures]
    return sorted(rungs, key=lambda r: -r.gb_per_s)
