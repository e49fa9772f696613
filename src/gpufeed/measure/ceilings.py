"""The ceilings of this machine: the fastest any image pipeline on it can possibly go.

* **memcpy**: bytes copied per second in RAM, the bound for anything that touches every byte;
* **the loader's bounds**: the memmap's images streamed in file order against FastLoader's raw fetch;
* **host to device**: pageable, pinned (page-locked) and pin-then-copy, where CUDA exists;
* **JPEG decode**: images per second on one core, the usual bound of a JPEG folder loader;
* **file read**: a file read cold and warm (:mod:`gpufeed.measure.storage`; :func:`make_file` writes it).

Each function returns a :class:`gpufeed.measure.harness.Measurement` (what they bound is worked out
in :mod:`gpufeed.measure.rates`). ``notebooks/00_setup.ipynb`` does the memcpy one by hand first;
``python -m gpufeed bench --ceilings`` runs them all (:func:`all_ceilings`).

A machine without CUDA is shown the host-to-device copies of a real GPU instead, labelled with the
GPU and where the numbers come from: our committed reference (:func:`committed`: lesson 00's own
file, else ``python -m gpufeed bench --ceilings``'s ``results/<gpu>/ceilings.json``), beside the
figures NVIDIA published (the sentence and the table that read them are lesson code:
:func:`gpufeed.course.transfer.h2d_sentence`, :func:`gpufeed.course.transfer.h2d_table`).

Example:
    >>> m = memcpy(1 << 20, repeats=5)
    >>> m.gb_per_s > 0 and m.nbytes == 1 << 20
    True
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from gpufeed.measure import results
from gpufeed.measure.harness import Measurement, benchmark, interleave
from gpufeed.measure.machine import slug
from gpufeed.measure.results import Reference
from gpufeed.measure.storage import file_read
from gpufeed.measure.units import MB, size_label


def _written_bytes(nbytes: int) -> torch.Tensor:
    """``uint8 [nbytes]`` holding 0, 1, ..., 255, 0, ...: every page written, so a copy reads RAM
    (pages never written all map the kernel's one zero page). A copy's speed does not depend on the
    values; ``torch.randint`` filled a 1 GiB source at 0.15 GB/s, this at 1.5 GB/s.

    Example:
        >>> _written_bytes(258)[-3:].tolist()
        [255, 0, 1]
    """
    return torch.arange(nbytes, dtype=torch.uint8)  # wraps modulo 256


def memcpy(nbytes: int, repeats: int = 10, threads: int | None = None) -> Measurement:
    """RAM to RAM copy of ``nbytes`` (uint8 tensors, ``dst.copy_(src)``), in GB/s copied.

    Each copied byte is read once and written once, so the memory bus moves twice ``nbytes``.
    ``threads`` caps torch's intra-op threads (large copies are split across cores). Each timed
    sample repeats the copy until it has copied at least 64 MiB: a 64 KiB copy takes microseconds,
    and timed alone it would measure the timer and the call's overhead, not the copy.
    """
    src = _written_bytes(nbytes)
    dst = torch.empty_like(src)
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return benchmark(lambda: dst.copy_(src), name=f"memcpy {size_label(nbytes)}", repeats=repeats,
                         warmup=2, number=max(1, 64 * MB // nbytes), nbytes=nbytes, params={"nbytes": nbytes, "threads": torch.get_num_threads()})
    finally:
        torch.set_num_threads(old)


def ram_bytes(l3: int | None, floor: int, times: int = 4) -> int:
    """The size of a copy that measures RAM rather than the caches: ``times`` the last-level cache
    ``l3`` (bytes; None where the OS does not say), at least ``floor``, rounded up to a whole MiB.

    A buffer that fits the caches is copied from them, several times faster than from RAM (lesson 00
    measures the step), so a sentence about RAM needs source and destination far beyond the L3.

    Example:
        >>> ram_bytes(260 * MB, floor=16 * MB) // MB, ram_bytes(None, floor=16 * MB) // MB
        (1040, 16)
    """
    return -(-max(floor, times * (l3 or 0)) // MB) * MB


def sweep_sizes(largest: int, first: int = 1 << 16, step: int = 4) -> list[int]:
    """Copy sizes from ``first`` bytes up, ``step`` times larger each while under half of ``largest``,
    then ``largest`` itself (never a size beyond it: the largest is chosen for what it must measure,
    :func:`ram_bytes`; nor one just under it, which would measure the same).

    Example:
        >>> [n // 1024 for n in sweep_sizes(3 * MB, first=256 * 1024)]  # KiB
        [256, 1024, 3072]
        >>> [n // MB for n in sweep_sizes(1040 * MB, first=MB)]  # not 1024 beside 1040
        [1, 4, 16, 64, 256, 1040]
    """
    sizes = []
    n = first
    while 2 * n <= largest:
        sizes.append(n)
        n *= step
    return [*sizes, largest]


def memcpy_threads(nbytes: int, threads: Sequence[int], repeats: int = 5) -> list[Measurement]:
    """:func:`memcpy` of one pair of buffers with each count of torch threads in ``threads``, timed
    in turns (one thread, two threads, one thread, ...): how much of the copy rate the other cores add.

    Each call sets torch's intra-op threads for its copies and restores them. Returns one
    Measurement per count, in the order given, named ``"memcpy <size>, <t> thread(s)"``.

    Example:
        >>> one, two = memcpy_threads(1 << 20, (1, 2), repeats=3)
        >>> one.params["threads"], two.params["threads"], one.nbytes == 1 << 20, torch.get_num_threads() > 0
        (1, 2, True, True)
    """
    src = _written_bytes(nbytes)
    dst = torch.empty_like(src)
    number = max(1, 64 * MB // nbytes)

    def with_threads(t: int) -> Callable[[], None]:
        def run():
            old = torch.get_num_threads()
            torch.set_num_threads(t)
            try:
                for _ in range(number):
                    dst.copy_(src)
            finally:
                torch.set_num_threads(old)
        return run

    names = {t: f"memcpy {size_label(nbytes)}, {t} thread{'s' if t > 1 else ''}" for t in threads}
    ms = interleave({names[t]: with_threads(t) for t in threads}, repeats=repeats, warmup=1,
                    params={names[t]: {"nbytes": nbytes, "threads": t} for t in threads},
                    desc="memcpy with each thread count, in turns")
    for m in ms:  # seconds per copy, as memcpy reports them
        m.samples = [s / number for s in m.samples]
        m.nbytes = nbytes
    return ms


def _stream_epoch(images: torch.Tensor, batch: int, buffers: int) -> tuple[Callable[[], None], int]:
    """One epoch of ``images`` copied in file order, ``batch`` rows at a time, into a ring of
    ``buffers`` reused buffers (as the fetch writes); and the images it copies."""
    ring = [torch.empty((batch, *images.shape[1:]), dtype=images.dtype) for _ in range(buffers)]
    n = images.shape[0] // batch * batch

    def epoch():
        for b, start in enumerate(range(0, n, batch)):
            ring[b % buffers].copy_(images[start:start + batch])

    return epoch, n


def _fetch_epoch(images: torch.Tensor, batch: int, seed: int, buffers: int) -> tuple[Callable[[], None], int]:
    """One epoch of shuffled batches gathered by FastLoader into a ring of ``buffers``; and its images."""
    from gpufeed.data.loader import FastLoader

    loader = FastLoader(images, batch, seed=seed, drop_last=True, reuse_buffers=buffers)

    def epoch():
        for _ in loader:
            pass

    return epoch, len(loader) * batch


def loader_bounds(images: torch.Tensor, batch: int, repeats: int = 5, seed: int = 0, buffers: int = 2,
                  min_bytes: int = 256 * MB) -> list[Measurement]:
    """The two honest bounds of a loader that reads ``images`` (``[N, ...]``, e.g. the memmap), in
    images/s: ``memcpy_stream`` and ``batch_fetch``.

    * ``memcpy_stream``: an epoch of the images copied in file order, ``batch`` rows at a time, into
      the same ring of ``buffers`` as the fetch. Every image is distinct and comes from the mapping
      (the page cache), as a loader's do; unlike :func:`memcpy`, whose one small buffer stays in the
      CPU cache and bounds nothing. It is the limit of any gather of these rows into that ring.
    * ``batch_fetch``: an epoch of shuffled batches gathered by :class:`~gpufeed.data.loader.FastLoader`
      (:func:`~gpufeed.data.gather.take_rows` into a ring of ``buffers``), nothing else: the course
      pipeline's raw fetch. Two buffers is the least a pipelined loader needs (one batch in use while
      the next is gathered); more is slower once the ring outgrows the CPU's last-level cache (four
      11 MB batches of 240x240 images do not fit 32 MB), since every write then goes to RAM.

    Both write into the same ring because the size of the ring, not the order of the rows, sets
    the speed: a stream into one reused buffer keeps its 9.6 MB of writes in a 32 MB L3 and never
    writes RAM, a ring of two (19 MB) does not (:func:`gpufeed.data.gather.take_rows` has the
    measurements). The raw fetch's fraction of the stream (:func:`gpufeed.measure.rates.fetch_fraction`)
    is the number to quote, so both are timed in turns (stream, fetch, stream, fetch, ...: a slow
    spell of a shared machine slows both), and each
    sample copies at least ``min_bytes`` in whole epochs (22 epochs of the quick bench's 12.6 MB
    dataset: tens of milliseconds, not the half millisecond of one such epoch, which a scheduler
    tick can double). Returns the two Measurements in that order, in seconds per epoch, with
    ``params`` ``ceiling`` (the name), ``batch``, ``row_bytes``, ``threads``, ``epochs`` (per
    sample) and ``buffers``.

    Example:
        >>> images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
        >>> stream, fetch = loader_bounds(images, batch=16, repeats=3, min_bytes=1 << 20)
        >>> stream.params["ceiling"], fetch.params["ceiling"], stream.params["epochs"], stream.items
        ('memcpy_stream', 'batch_fetch', 6, 64)
        >>> stream.params["buffers"] == fetch.params["buffers"] == 2, fetch.items_per_s > 0
        (True, True)
    """
    epochs_of = {"memcpy_stream": _stream_epoch(images, batch, buffers),
                 "batch_fetch": _fetch_epoch(images, batch, seed, buffers)}
    row = images[0].numel() * images.element_size()
    epochs = max(1, -(-min_bytes // max(1, epochs_of["memcpy_stream"][1] * row)))  # per sample, rounded up
    names = {"memcpy_stream": f"memcpy stream {batch}x{size_label(row)}", "batch_fetch": f"batch fetch {batch}x{size_label(row)}"}

    def sample(epoch):
        def run():
            for _ in range(epochs):
                epoch()
        return run

    common = {"batch": batch, "row_bytes": row, "threads": torch.get_num_threads(), "epochs": epochs,
              "buffers": buffers}
    ms = interleave({names[c]: sample(epoch) for c, (epoch, _) in epochs_of.items()}, repeats=repeats, warmup=1,
                    params={names[c]: {"ceiling": c, **common} for c in epochs_of},
                    desc="the loader's two bounds: memcpy stream, batch fetch")
    for m, (_, n) in zip(ms, epochs_of.values()):  # seconds per epoch
        m.samples = [t / epochs for t in m.samples]
        m.items, m.nbytes = n, n * row
    return ms


#: The three ways a batch can go from host to device, as ``host_to_device(source=...)`` takes them.
H2D_SOURCES = ("pageable", "pinned", "pin+copy")


def host_to_device(nbytes: int, pinned: bool = False, repeats: int = 10, device: str = "cuda",
                   source: str | None = None) -> Measurement:
    """Host-to-device copy of ``nbytes``, in GB/s, from one of three sources (:data:`H2D_SOURCES`).

    * ``"pageable"``: ``dst.copy_(src)`` from ordinary memory. The driver copies into a pinned
      staging buffer of its own, then DMAs that; the call returns when the copy is done.
    * ``"pinned"``: the buffer was page-locked once, *before* timing; the copy engine reads it
      directly and ``non_blocking=True`` lets the host go on. This leaves out the cost of pinning.
    * ``"pin+copy"``: pageable -> ``pin_memory()`` -> ``copy_(non_blocking=True)``, all timed: what
      a loop that pins every batch pays (a DataLoader's pin-memory thread does this). After the
      warm-up, ``pin_memory()`` gets a block from PyTorch's caching host allocator, so the pin is a
      RAM copy into already page-locked memory, not a fresh page-locking.

    ``pinned`` is the older spelling (``pinned=True`` means ``source="pinned"``). Needs CUDA.
    """
    source = source or ("pinned" if pinned else "pageable")
    if source not in H2D_SOURCES:
        raise ValueError(f"host_to_device(source={source!r}): choose one of {H2D_SOURCES}")
    if not torch.cuda.is_available():
        raise RuntimeError("host_to_device needs a CUDA GPU; see the reference results instead")
    src = _written_bytes(nbytes)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if source == "pinned":
        src = src.pin_memory()
        fn = lambda: dst.copy_(src, non_blocking=True)  # noqa: E731
    elif source == "pin+copy":
        fn = lambda: dst.copy_(src.pin_memory(), non_blocking=True)  # noqa: E731
    else:
        fn = lambda: dst.copy_(src)  # noqa: E731
    return benchmark(fn, name=f"H2D {source} {size_label(nbytes)}", repeats=repeats, warmup=3, nbytes=nbytes,
                     params={"nbytes": nbytes, "pinned": source != "pageable", "source": source})


def h2d_source(m: Measurement) -> str:
    """The source of a host-to-device measurement; older results only say ``pinned`` True/False."""
    return m.params.get("source") or ("pinned" if m.params.get("pinned") else "pageable")


def h2d_series(sizes: Sequence[int], repeats: int = 10,
               measure: Callable[..., Measurement] | None = None) -> list[Measurement]:
    """:func:`host_to_device` for every size and every source: pageable, pinned, pin+copy per size.

    Args:
        sizes: bytes per copy, e.g. ``[1 << 20, 1 << 24]``.
        repeats: timed samples per case.
        measure: the function that measures one case (default :func:`host_to_device`; tests
            give a fake one, since this needs CUDA).
    """
    measure = measure or host_to_device
    return [measure(n, repeats=repeats, source=s) for n in sizes for s in H2D_SOURCES]


def decode_rate(jpegs: Sequence[bytes], decode: Callable[[bytes], torch.Tensor], name: str,
                repeats: int = 5, threads: int = 1) -> Measurement:
    """Images per second decoding ``jpegs`` (already in memory) on ``threads`` torch threads.

    One thread gives the rate *per core*: a DataLoader worker decodes on one core, so a folder
    loader's best case is roughly this rate times the number of workers.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return benchmark(lambda: [decode(b) for b in jpegs], name=name, repeats=repeats, warmup=1,
                         items=len(jpegs), nbytes=sum(map(len, jpegs)), params={"threads": threads})
    finally:
        torch.set_num_threads(old)


def make_file(path: str | Path, nbytes: int) -> Path:
    """A file of ``nbytes`` random bytes (random: no file system can compress it away).

    Kept if it already has the right size; written beside and renamed otherwise, so a killed run
    never leaves a short file that looks finished.
    """
    path = Path(path)
    if path.is_file() and path.stat().st_size == nbytes:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    rng = torch.Generator().manual_seed(0)
    try:
        with open(tmp, "wb") as f:
            for start in range(0, nbytes, 16 * MB):
                n = min(16 * MB, nbytes - start)
                f.write(torch.randint(0, 256, (n,), dtype=torch.uint8, generator=rng).numpy().tobytes())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def all_ceilings(workdir: str | Path, quick: bool, device: str = "auto") -> list[Measurement]:
    """Every ceiling, at sizes fit for ``quick`` mode or full mode (what ``gpufeed bench`` runs).

    Args:
        workdir: a folder for the generated JPEGs and the read-test file (kept for next time).
        quick: tiny sizes (CI) instead of the full ones.
        device: ``"cuda"`` to require the host-to-device ceilings, ``"cpu"`` to skip them,
            ``"auto"`` to measure them where CUDA exists.
    """
    from gpufeed.data.jpeg import available_decoders
    from gpufeed.measure.synth import synth_folder

    workdir = Path(workdir)
    size = 8 * MB if quick else 256 * MB
    out = [memcpy(size)]
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        out += h2d_series([size])  # pageable, pinned, pin+copy
    for w, h in ((224, 224), (640, 480)):
        folder = synth_folder(workdir / f"jpeg-{w}x{h}-q90", n=16 if quick else 128, size=(w, h),
                              quality=90, progress=False).path
        jpegs = [p.read_bytes() for p in sorted(folder.rglob("*.jpg"))]
        for dec_name, decode in available_decoders().items():
            m = decode_rate(jpegs, decode, name=f"decode {dec_name} {w}x{h}", repeats=3 if quick else 7)
            m.params.update(width=w, height=h, decoder=dec_name)
            out.append(m)
    path = make_file(workdir / f"read-test-{size // MB}MB.bin", size)
    out += [file_read(path, cold=True, repeats=3 if quick else 5), file_read(path, cold=False, repeats=3 if quick else 5)]
    return out


# What a machine without CUDA is shown instead: our committed GPU reference, beside what others published.

#: Our committed references that hold host-to-device copies, the preferred first: lesson 00's own
#: (``notebooks/00_setup.ipynb`` run on a GPU: a series of sizes), then the ceilings of
#: ``python -m gpufeed bench --ceilings`` (one size). Both live in ``results/<gpu>/``.
H2D_REFERENCES = ("lesson00", "ceilings")


def committed(keep: Callable[[Measurement], bool], names: Sequence[str] = H2D_REFERENCES) -> Reference | None:
    """The first committed GPU reference among ``names`` holding measurements that ``keep`` selects.

    Reads ``results/<gpu>/<name>.json`` with :func:`gpufeed.measure.results.committed` (full-mode
    files of machines with a GPU only), every machine's in turn until one holds what ``keep``
    selects. Returns None where none is committed.

    Example:
        >>> ref = committed(lambda m: m.name.startswith("H2D"))  # the checkout's H100 run, if present
        >>> ref is None or ref.source.startswith("our reference, `results/")
        True
    """
    for name in names:
        for ms, doc in results.committed(name, results.has_gpu):
            kept = [m for m in ms if keep(m)]
            if kept:
                machine, date = doc["machine"], results.measured_on(doc)
                return Reference(kept, machine, f"our reference, `results/{slug(machine)}/{name}.json`, "
                                                f"full mode" + (f", measured on {date}" if date else ""))
    return None


def h2d_at(ms: Sequence[Measurement], nbytes: int) -> dict[str, Measurement]:
    """Each source's host-to-device copy of the size nearest ``nbytes``: ``{"pageable": m, ...}``."""
    size = min({m.params["nbytes"] for m in ms}, key=lambda n: abs(math.log(n / nbytes)))
    return {h2d_source(m): m for m in ms if m.params["nbytes"] == size}
