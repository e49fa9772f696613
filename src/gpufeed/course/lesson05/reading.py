"""The sentences that read lesson 05's measurements, whichever way the numbers point.

Each comparison arrives as a :class:`~gpufeed.measure.verdict.Verdict` of two arms timed in turns
(A against B; above 1, A was faster), and each sentence words it as it came out: faster, slower,
the same, or "this run cannot tell" (with what would tell). A cause is given only where the lesson
measured it (page faults counted, bytes read); otherwise the sentence says "one likely cause, not
measured here". Sizes are read against this CPU's last-level cache (:func:`cache_fit`): a rate
measured on bytes that fit in it is the cache's, not RAM's. Taught in ``notebooks/05_memmap.ipynb``.

Example:
    >>> from gpufeed.measure.verdict import Verdict
    >>> print(cache_fit(77 << 20, 260 << 20))
    fit in this CPU's last-level cache (260 MiB): a rate measured on them is the cache's, not RAM's
    >>> print(headline(Verdict(45.4, 40.1, 49.9, 5, "faster", True), memmap=66_037, folder=1_455, cores=2))  # doctest: +NORMALIZE_WHITESPACE
    Warm, the memmap fed **66,037 images/s** on one core and ran **45.40x faster** than the JPEG folder (40.10x to
    49.90x), which fed 1,455 images/s with 2 workers: the folder decodes every JPEG in every epoch, the memmap only
    copies bytes.
"""

from __future__ import annotations

import math

from gpufeed.measure.verdict import (
    CANNOT_TELL,
    FASTER,
    LIKELY,
    LIKELY_START,
    NOT_MEASURED,
    SAME,
    SLOWER,
    Verdict,
    what_would_tell,
)

#: Buffers at least this many times the last-level cache measure RAM ("several times" the cache).
RAM_TIMES = 4


def mib(nbytes: float) -> str:
    """Bytes as MiB in words: ``"260 MiB"``."""
    return f"{nbytes / 2**20:,.0f} MiB"


def cache_fit(nbytes: float, l3: int | None) -> str:
    """Where ``nbytes`` of buffers sit against a last-level cache of ``l3`` bytes, as words to put after
    a plural subject ("the epoch's 77 MB ..."): within the cache, a rate is the cache's; at
    :data:`RAM_TIMES` times it or more, RAM's; between, partly each.

    Example:
        >>> print(cache_fit(3 << 30, 260 << 20))
        are 12x this CPU's last-level cache (260 MiB): a rate measured on them is RAM's
        >>> print(cache_fit(600 << 20, 260 << 20))
        are 2.3x this CPU's last-level cache (260 MiB): a rate measured on them is partly the cache's, partly RAM's
        >>> print(cache_fit(1 << 20, None))
        may or may not fit in the last-level cache, which this OS does not report
    """
    if not l3:
        return "may or may not fit in the last-level cache, which this OS does not report"
    times_l3 = nbytes / l3
    if times_l3 <= 1:
        return f"fit in this CPU's last-level cache ({mib(l3)}): a rate measured on them is the cache's, not RAM's"
    if times_l3 < RAM_TIMES:
        return (f"are {times_l3:.1f}x this CPU's last-level cache ({mib(l3)}): a rate measured on them is partly "
                "the cache's, partly RAM's")
    return f"are {times_l3:.0f}x this CPU's last-level cache ({mib(l3)}): a rate measured on them is RAM's"


def tell(*verdicts: Verdict) -> str:
    """One closing sentence where any of ``verdicts`` cannot tell (what would tell); "" otherwise."""
    if any(v.kind == CANNOT_TELL for v in verdicts):
        return f" Where this run cannot tell, {what_would_tell()}."
    return ""


def headline(v: Verdict, *, memmap: float, folder: float, cores: int) -> str:
    """Section 1: the warm memmap (A, on one core) against the warm JPEG folder (B, ``cores`` workers),
    with both rates in images/s.

    Example:
        >>> print(headline(Verdict(1.1, 0.6, 1.9, 3, "cannot tell"), memmap=1_100, folder=1_000, cores=2))  # doctest: +NORMALIZE_WHITESPACE
        Warm, the memmap fed **1,100 images/s** on one core and was not told apart from the JPEG folder by this run
        (3 samples per arm), which fed 1,000 images/s with 2 workers. This run cannot tell: 3 samples per arm, and a
        verdict needs at least 5; ... would tell.
    """
    text = (f"Warm, the memmap fed **{memmap:,.0f} images/s** on one core and {v.ran('the JPEG folder', bold=True)}, "
            f"which fed {folder:,.0f} images/s with {cores} worker{'s' if cores != 1 else ''}")
    if v.kind == FASTER:
        return text + ": the folder decodes every JPEG in every epoch, the memmap only copies bytes."
    if v.kind == CANNOT_TELL:
        return f"{text}. {v.advice}"
    if v.kind == NOT_MEASURED:
        return text + "."
    return text + ". That goes against what this lesson expects: re-run it on an idle machine and compare the spreads."


def pages(v: Verdict, faults: dict[str, dict[str, float]], n_pages: int, dropped: bool) -> str:
    """Section 2: touching every page of a mapping cold (A: the file dropped from the page cache first)
    against warm (B: a new mapping of a cached file), with the faults of each pass (``faults[name]``:
    ``major`` and ``minor``, medians over the rounds; names ``cold``, ``warm``, ``again``: the same
    mapping touched a second time) and whether the OS dropped the file (``dropped``).

    Example:
        >>> f = {"cold": {"major": 1, "minor": 420}, "warm": {"major": 0, "minor": 420}, "again": {"major": 0, "minor": 0}}
        >>> print(pages(Verdict(1 / 20, 1 / 24, 1 / 17, 5, "slower", True), f, 8192, True))  # doctest: +ELLIPSIS
        Cold, touching 8,192 pages ran **20.00x slower** than warm (17.00x to 24.00x). Warm, there were far fewer faults than pages, 19.5 pages per fault: ... Of the cold pass's faults only 1 waited for the disk (*major*); the other 420 found their page already in the page cache (*minor*), brought there by the kernel's read-ahead. The same mapping touched again caused 0 faults: mapped pages are plain memory.
    """
    cold, warm, again = (faults[k] for k in ("cold", "warm", "again"))
    per_fault = n_pages / max(1, warm["minor"] + warm["major"])
    text = f"Cold, touching {n_pages:,} pages {v.ran('warm', bold=True)}. "
    if per_fault > 1.5:
        text += (f"Warm, there were far fewer faults than pages, {per_fault:.1f} pages per fault: on a fault, the kernel "
                 "also maps the neighbouring pages that are already in the page cache (*fault-around*, up to "
                 "`fault_around_bytes`, 64 KiB = 16 pages by default"
                 + (f"; for more than 16 per fault, {LIKELY} the page cache holds this file in large folios, several "
                    "pages each, and a fault maps a whole folio" if per_fault > 17 else "") + "). ")
    else:
        text += ("Warm, there was about one fault per page: fault-around (mapping cached neighbours on a fault) did "
                 "not help on this system. ")
    if dropped and cold["minor"] > cold["major"]:
        text += (f"Of the cold pass's faults only {cold['major']:,.0f} waited for the disk (*major*); the other "
                 f"{cold['minor']:,.0f} found their page already in the page cache (*minor*), brought there by the "
                 "kernel's read-ahead. ")
    elif dropped:
        text += f"The cold pass's faults were mostly *major* ({cold['major']:,.0f}): each waited for the disk. "
    text += f"The same mapping touched again caused {again['major'] + again['minor']:,.0f} faults: mapped pages are plain memory."
    if not dropped:
        return text + " This OS cannot drop a file's cached pages, so the 'cold' pass here is not the disk."
    if v.kind in (SAME, FASTER):
        return text + (" Here cold ran no slower than warm: this disk (or its file system's own cache) kept up, so "
                       "the 'cold' pass does not show a slow disk.")
    return text + (f" {v.advice}" if v.kind == CANNOT_TELL else "")


def cold(v_folder: Verdict, v_disk: Verdict, v_sorted: Verdict, *, epoch_bytes: int, jpeg_bytes: int,
         can_drop: bool, image_bytes: int = 3 * 224 * 224) -> str:
    """Section 5: the cold memmap against the cold JPEG folder (``v_folder``), against the same epoch
    served by the page cache (``v_disk``: whether "cold" reached the disk), and sorted indices against
    shuffled ones, cold (``v_sorted``: what sorting promises, a forward read, read against what it
    did); the bytes of the pixels and of the JPEGs, and of one stored image.

    Example:
        >>> win, loss = Verdict(4.4, 3.9, 5.0, 5, "faster", True), Verdict(0.2, 0.15, 0.25, 5, "slower", True)
        >>> print(cold(win, loss, Verdict(1.3, 0.9, 1.7, 5, "cannot tell", True), epoch_bytes=19_000_000,
        ...            jpeg_bytes=1_900_000, can_drop=True))  # doctest: +NORMALIZE_WHITESPACE
        Cold, the memmap ran 4.40x faster than the cold JPEG folder (3.90x to 5.00x). Read from the disk, its epoch
        ran 5.00x slower than the same epoch from the page cache (4.00x to 6.67x): it reads 10.0x as many bytes as
        the folder's JPEGs (19 MB of pixels against 2 MB), so the slower the disk, the smaller its lead. The cold
        epoch with each batch's indices sorted was not told apart from the one with them shuffled by this run (0.90x
        to 1.70x). Where this run cannot tell, ... would tell.
    """
    text = f"Cold, the memmap {v_folder.ran('the cold JPEG folder')}. "
    if not can_drop:
        text += "This OS cannot drop a file's cached pages (it has no `posix_fadvise`), so this 'cold' is not the disk. "
    elif v_disk.kind == SLOWER:
        text += (f"Read from the disk, its epoch ran {v_disk.words('the same epoch from the page cache')}: it reads "
                 f"{epoch_bytes / jpeg_bytes:.1f}x as many bytes as the folder's JPEGs ({epoch_bytes / 1e6:,.0f} MB of "
                 f"pixels against {jpeg_bytes / 1e6:,.0f} MB), so the slower the disk, the smaller its lead. ")
    elif v_disk.decided:
        text += (f"Its cold epoch ran {v_disk.words('the same epoch from the page cache')}: this disk (or the file "
                 "system's own cache) kept up with the reads, so this 'cold' does not show a slow disk. ")
    else:
        text += f"This run cannot tell its cold epoch from the same epoch served by the page cache ({v_disk.why()}). "
    text += f"The cold epoch with each batch's indices sorted {v_sorted.ran('the one with them shuffled')}"
    if v_sorted.kind == FASTER:
        text += (f": reading forward through the file paid; {LIKELY} the kernel's read-ahead, which serves a forward "
                 "read from the pages it has already fetched.")
    elif v_sorted.decided:
        text += (f": sorting did not speed the cold read up here. {LIKELY_START} each image is already one forward run "
                 f"of the file ({image_bytes / 1024:,.0f} KiB), so sorting reorders only the jumps between images.")
    else:
        text += "."
    return text + tell(v_folder, v_disk, v_sorted)


def ceiling(v: Verdict, *, epoch_bytes: int, l3: int | None) -> str:
    """Section 5: the loader's shuffled fetch (A) against a copy of the same images in file order into
    the same buffers (B; :func:`gpufeed.measure.ceilings.loader_bounds`), an epoch of ``epoch_bytes``.

    Example:
        >>> print(ceiling(Verdict(0.81, 0.78, 0.84, 5, "slower", True), epoch_bytes=19_000_000, l3=260 << 20))  # doctest: +NORMALIZE_WHITESPACE
        The shuffled fetch ran at **81%** of the speed of a copy of the same images in file order into the same
        buffers: it ran 1.23x slower than that copy (1.19x to 1.28x). The epoch's 19 MB fit in this CPU's last-level cache
        (260 MiB): a rate measured on them is the cache's, not RAM's.
    """
    if v.ratio is None:
        return "The loader's fetch and the copy of the same images were not both measured."
    share = f"**{v.ratio:.0%}**" if v.decided else f"{v.ratio:.0%}"  # no bold for a number the run cannot carry
    text = (f"The shuffled fetch ran at {share} of the speed of a copy of the same images in file order into the "
            f"same buffers: it {v.ran('that copy')}")
    if v.kind == CANNOT_TELL and v.ratio > 1 and v.low < 1:
        text += ": its median is above the bound, but by less than this run's noise, so the bound stands"
    text += f". The epoch's {epoch_bytes / 1e6:,.0f} MB {cache_fit(epoch_bytes, l3)}."
    if v.kind == SLOWER and v.ratio < 0.5:
        text += (f" Less than half: {LIKELY} a shuffled gather reads rows from places spread over the file, and each "
                 "batch pays for the loader's Python.")
    elif v.kind == FASTER:
        text += " A gather faster than the copy that bounds it is not what the bound predicts: this run does not show why."
    return text + (f" {v.advice}" if v.kind == CANNOT_TELL else "")


def copies(v: Verdict, *, fresh_faults: float, reused_faults: float, other_fresh: str, other_faults: float,
           nbytes: int, l3: int | None, other_vs_reused: Verdict | None = None, small_faults: float | None = None,
           huge_vs_small: Verdict | None = None) -> str:
    """Deep dive: the same copy into a tensor that exists (A) against into fresh memory (B:
    ``torch.tensor(a)``), with the page faults per call of each (medians); then the other call that
    copies into fresh memory (``other_fresh``, e.g. ``np.array(t)``): its faults, the copy into the
    existing tensor against it (``other_vs_reused``), and, where NumPy's huge-page advice was turned
    off for a second arm, that arm's faults (``small_faults``) and the call with the advice against
    it (``huge_vs_small``): whether fewer faults took less time. All arms in turns.

    Example:
        >>> print(copies(Verdict(6.5, 5.8, 7.1, 5, "faster", True), fresh_faults=8192, reused_faults=0,
        ...              other_fresh="np.array(t)", other_faults=8192, nbytes=32 << 20, l3=260 << 20))  # doctest: +NORMALIZE_WHITESPACE
        Into a tensor that already existed the same copy ran **6.50x faster** than into fresh memory (5.80x to 7.10x).
        Counted: into fresh memory it took 8,192 page faults a call, into the existing tensor 0: fresh memory comes
        page by page, a fault on each first touch. `np.array(t)`, into fresh memory too, took 8,192. The buffers'
        32 MiB also fit in this CPU's last-level cache (260 MiB): a rate measured on them is the cache's, not RAM's;
        for part of the gap, one likely cause, not measured here: the reused tensor is still in the cache when the
        copy comes round.
        >>> win, tie = Verdict(1.8, 1.6, 2.0, 5, "faster", True), Verdict(1.0, 0.97, 1.03, 5, "the same", True)
        >>> print(copies(win, fresh_faults=8193, reused_faults=0, other_fresh="np.array(t)", other_faults=17,
        ...              nbytes=32 << 20, l3=None, other_vs_reused=win, small_faults=8193,
        ...              huge_vs_small=tie).split("first touch. ")[1])  # doctest: +NORMALIZE_WHITESPACE
        `np.array(t)`, into fresh memory too, took 17: NumPy asks the kernel for huge pages for a large array (about
        1.9 MiB a fault); with that advice off it took 8,193, and with it the call ran as fast as with 4 KiB pages
        (within 4%): here the number of faults cost nothing measurable. The copy into the existing tensor ran 1.80x
        faster than `np.array(t)` (1.60x to 2.00x): fresh memory costs even in a few large pages; one likely cause,
        not measured here: the kernel clears every new page before handing it over, whatever its size.
    """
    text = f"Into a tensor that already existed the same copy {v.ran('into fresh memory', bold=True)}."
    fewer = other_faults < fresh_faults / 2  # the other call's memory came in larger pages
    if fresh_faults > reused_faults:
        text += (f" Counted: into fresh memory it took {fresh_faults:,.0f} page faults a call, into the existing tensor "
                 f"{reused_faults:,.0f}: fresh memory comes page by page, a fault on each first touch.")
    else:
        text += (f" Both took about as many page faults a call ({fresh_faults:,.0f} and {reused_faults:,.0f}): this "
                 "allocator hands back memory already touched, so the faults do not tell them apart here.")
    text += f" `{other_fresh}`, into fresh memory too, took {other_faults:,.0f}"
    if fewer and small_faults is not None and huge_vs_small is not None:
        text += (f": NumPy asks the kernel for huge pages for a large array (about {nbytes / max(1, other_faults) / 2**20:.1f} "
                 f"MiB a fault); with that advice off it took {small_faults:,.0f}, and with it the call "
                 f"{huge_vs_small.ran('with 4 KiB pages')}")
        if small_faults < 2 * other_faults:
            text += ": the advice is not what kept its faults down."
        elif huge_vs_small.kind == FASTER:
            text += ": fewer faults, less time."
        elif huge_vs_small.kind == SAME:
            text += ": here the number of faults cost nothing measurable."
        elif huge_vs_small.kind == SLOWER:
            text += ", which its fewer faults do not explain: this run does not show why."
        else:
            text += "."
    elif fewer:
        text += f": fewer; {LIKELY} its allocator got larger pages from the kernel."
    else:
        text += "."
    if other_vs_reused is not None and other_vs_reused.kind != NOT_MEASURED:
        text += f" The copy into the existing tensor {other_vs_reused.ran(f'`{other_fresh}`')}"
        text += (f": fresh memory costs even in a few large pages; {LIKELY} the kernel clears every new page before "
                 "handing it over, whatever its size." if fewer and other_vs_reused.kind == FASTER else ".")
    if l3 and nbytes <= l3 and v.kind == FASTER:
        text += (f" The buffers' {mib(nbytes)} also {cache_fit(nbytes, l3)}; for part of the gap, {LIKELY} the "
                 "reused tensor is still in the cache when the copy comes round.")
    elif v.kind == SLOWER:
        text += " Slower than fresh memory: this run does not show why; re-run to see whether it holds."
    return text + tell(*(x for x in (v, other_vs_reused, huge_vs_small) if x is not None))


def writes(v_save: Verdict, v_bytes: Verdict, *, tobytes_ms: float, fsync_ms: dict[str, float], fs: str,
           on_disk: bool, nbytes: int) -> str:
    """Deep dive: ``np.save`` (``v_save``) and ``f.write(a.tobytes())`` (``v_bytes``), each against
    ``a.tofile(f)``, without fsync; ``a.tobytes()`` alone; the median fsync after each (ms, by call);
    the file system (``on_disk``: one with a disk below it).

    Example:
        >>> same, win = Verdict(1.0, 0.97, 1.04, 5, "the same", True), Verdict(1.5, 1.3, 1.7, 5, "faster", True)
        >>> print(writes(Verdict(0.8, 0.7, 0.9, 5, "slower", True), win, tobytes_ms=21, fsync_ms={"a.tofile(f)": 18},
        ...              fs="ext4", on_disk=True, nbytes=32 << 20))  # doctest: +NORMALIZE_WHITESPACE
        Without fsync, `np.save` ran 1.25x slower than `a.tofile(f)` (1.11x to 1.43x): it writes a short header,
        then the array as `tofile` does. `f.write(a.tobytes())` ran 1.50x faster than `a.tofile(f)` (1.30x to
        1.70x), and `a.tobytes()` alone took 21 ms: it copies the whole array before writing it. So the notes' order
        (np.save slow, tofile fast, write(tobytes) very fast) holds here. In the synced writes, `os.fsync` alone took
        18 ms after `a.tofile(f)`: that is the disk (1.9 GB/s), the part that a write without fsync leaves for the
        kernel to do later, when the call has long returned.
    """
    text = (f"Without fsync, `np.save` {v_save.ran('`a.tofile(f)`')}: it writes a short header, then the array "
            f"as `tofile` does. `f.write(a.tobytes())` {v_bytes.ran('`a.tofile(f)`')}, and `a.tobytes()` alone "
            f"took {tobytes_ms:,.0f} ms: it copies the whole array before writing it. ")
    order = "the notes' order (np.save slow, tofile fast, write(tobytes) very fast)"
    if v_save.kind == SLOWER and v_bytes.kind == FASTER:
        text += f"So {order} holds here. "
    elif v_save.kind in (FASTER, SAME) or v_bytes.kind in (SLOWER, SAME):
        text += f"So {order} does not hold here. "
    else:
        text += f"This run cannot tell whether {order} holds here. "
    fsync_s = sorted(fsync_ms.values())[len(fsync_ms) // 2] / 1e3  # the median call's
    text += "In the synced writes, `os.fsync` alone took " + ", ".join(
        f"{ms:,.0f} ms after `{name}`" for name, ms in fsync_ms.items())
    rate = nbytes / 1e9 / fsync_s if fsync_s > 0 else math.inf
    if on_disk:
        text += (f": that is the disk ({rate:.1f} GB/s), the part that a write without fsync leaves for the kernel to "
                 "do later, when the call has long returned.")
    else:
        text += f" ({rate:.1f} GB/s): on {fs} that is not a disk's own rate, only what its fsync costs."
    return text + tell(v_save, v_bytes)


def smaller_images(v: Verdict, *, small_gb_s: float, big_gb_s: float) -> str:
    """Exercise 2: a warm epoch at 112x112 (A) against the same images at 224x224 (B), with the bytes
    each moved per second.

    Example:
        >>> print(smaller_images(Verdict(2.2, 1.9, 2.5, 9, "faster", True), small_gb_s=5.0, big_gb_s=9.2))  # doctest: +NORMALIZE_WHITESPACE
        112x112 ran **2.20x faster** than 224x224 (1.90x to 2.50x), for a quarter of the bytes (5.00 against 9.20 GB/s
        moved). Less than the 4x the bytes alone would give: one likely cause, not measured here: costs per batch
        (Python, the shuffled indices) that do not shrink with the image.
    """
    text = (f"112x112 {v.ran('224x224', bold=True)}, for a quarter of the bytes ({small_gb_s:.2f} against "
            f"{big_gb_s:.2f} GB/s moved).")
    if v.decided and v.high < 4:
        return text + (f" Less than the 4x the bytes alone would give: {LIKELY} costs per batch (Python, the shuffled "
                       "indices) that do not shrink with the image.")
    if v.decided and v.low > 4:
        return text + f" More than the 4x the bytes alone would give: {LIKELY} small images fit the CPU's caches better."
    if v.decided:
        return text + f" This run cannot tell it from the 4x the bytes alone would give ({v.why()})."
    return text + (f" {v.advice}" if v.kind == CANNOT_TELL else "")


def larger_batch(v_folder: Verdict, v_memmap: Verdict, *, batch: int, big: int, n_images: int, cores: int,
                 l3: int | None, image_bytes: int = 3 * 224 * 224) -> str:
    """Exercise 3: batch ``big`` (A) against ``batch`` (B), warm, for the folder and for the memmap.

    Example:
        >>> loss = Verdict(0.5, 0.45, 0.55, 5, "slower", True)
        >>> print(larger_batch(loss, loss, batch=64, big=256, n_images=128, cores=2, l3=260 << 20))  # doctest: +NORMALIZE_WHITESPACE
        At batch 256 the folder ran 2.00x slower than itself at batch 64 (1.82x to 2.22x), the memmap ran 2.00x
        slower than itself at batch 64 (1.82x to 2.22x). With 128 images, batch 256 makes 1 batch an epoch, fewer than the 2
        workers can share. The memmap's two output buffers of 256 images (77 MB) fit in this CPU's last-level cache
        (260 MiB): a rate measured on them is the cache's, not RAM's; so the cache does not explain its loss, and this
        run does not show what does.
    """
    text = (f"At batch {big} the folder {v_folder.ran(f'itself at batch {batch}')}, the memmap "
            f"{v_memmap.ran(f'itself at batch {batch}')}.")
    batches = -(-n_images // big)
    if batches < cores:
        text += (f" With {n_images} images, batch {big} makes {batches} batch{'es' if batches != 1 else ''} an "
                 f"epoch, fewer than the {cores} workers can share.")
    if v_memmap.kind == SLOWER:
        buffers = 2 * big * image_bytes
        text += f" The memmap's two output buffers of {big} images ({buffers / 1e6:,.0f} MB) {cache_fit(buffers, l3)}"
        if l3 and buffers <= l3:
            text += "; so the cache does not explain its loss, and this run does not show what does."
        else:
            text += f"; {LIKELY} once its buffers outgrow the cache, every write goes to RAM."
    return text + tell(v_folder, v_memmap)


#: FFCV's published loading rates (``results/published.json``) that the GPU cell reads, by what each is.
FFCV = {"ram raw 256": "ffcv-load-ram-raw-256", "ram jpeg 512": "ffcv-load-ram-jpeg-512",
        "ebs raw 512": "ffcv-load-ebs-raw-512", "ebs jpeg 512": "ffcv-load-ebs-jpeg-512"}


def published_formats(rates: dict[str, float]) -> str:
    """The GPU cell without CUDA: FFCV's published rates (images/s, by figure id: :data:`FFCV`), read
    for what they show and what they cannot: from RAM the raw and the JPEG rows differ in size as
    well as in format; from network storage they share one size. One figure each, no spread: the
    figures are shown side by side, not as a verdict. "" where a figure is missing.

    Example:
        >>> print(published_formats({"ffcv-load-ram-raw-256": 172801, "ffcv-load-ram-jpeg-512": 31278,
        ...                          "ffcv-load-ebs-raw-512": 1956, "ffcv-load-ebs-jpeg-512": 16631}))  # doctest: +NORMALIZE_WHITESPACE
        Read as theirs, one figure each: from RAM, raw pixels at 256 px loaded 172,801 images/s and JPEGs at 512 px
        31,278, but a 512-px image has four times the pixels of a 256-px one, so this pair does not isolate the
        format. From network storage (EBS), at 512 px both, the order reverses: JPEGs 16,631 images/s, raw pixels
        1,956: where reads are slow, the fewer bytes of the JPEGs win.
        >>> published_formats({})
        ''
    """
    if not all(fid in rates for fid in FFCV.values()):
        return ""
    ram_raw, ram_jpeg, ebs_raw, ebs_jpeg = (rates[FFCV[k]] for k in FFCV)
    text = (f"Read as theirs, one figure each: from RAM, raw pixels at 256 px loaded {ram_raw:,.0f} images/s and JPEGs "
            f"at 512 px {ram_jpeg:,.0f}, but a 512-px image has four times the pixels of a 256-px one, so this pair "
            "does not isolate the format. From network storage (EBS), at 512 px both, ")
    if ebs_jpeg > ebs_raw:
        return text + (f"the order reverses: JPEGs {ebs_jpeg:,.0f} images/s, raw pixels {ebs_raw:,.0f}: where reads are "
                       "slow, the fewer bytes of the JPEGs win.")
    return text + f"raw pixels loaded {ebs_raw:,.0f} images/s and JPEGs {ebs_jpeg:,.0f}."
