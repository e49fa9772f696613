"""The sentences lesson 00 prints about this machine's ceilings, each decided by the verdict method.

Every comparison here goes through :func:`gpufeed.measure.verdict.compare`: copies of different
sizes are compared as rates (GB/s per sample, :func:`gpufeed.measure.rates.byte_rates`), never as
ratios of times; two arms timed in turns are compared as pairs. A cause is named only where the
page measured it; otherwise the sentence says "one likely cause, not measured here". Taught in
``notebooks/00_setup.ipynb``.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> ram = Measurement("memcpy 1040 MB", [0.2, 0.21, 0.2, 0.19, 0.2], nbytes=1040 * 2**20)
    >>> small = Measurement("memcpy 1 MB", [1e-4, 1.02e-4, 0.99e-4, 1e-4, 1.01e-4], nbytes=2**20)
    >>> print(cache_sentence(small, ram, l3=260 * 2**20, what="The 1 MiB copy"))  # doctest: +NORMALIZE_WHITESPACE
    The 1 MiB copy ran at 10.5 GB/s (source and destination, 2 MiB together, fit in the 260 MiB L3),
    **1.92x faster** than the RAM copy (1.85x to 2.00x): a buffer that fits the caches is copied from them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpufeed.measure.ceilings import h2d_at
from gpufeed.measure.harness import Measurement
from gpufeed.measure.rates import byte_rates
from gpufeed.measure.results import Reference
from gpufeed.measure.units import MB
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, SAME, SLOWER, Verdict, compare
from gpufeed.measure.wording import times

#: Where the CUDA documentation says when a copy from pageable memory returns (section 4 quotes it).
SYNC_BEHAVIOR = "https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html"


#: The cause a slow copy is given where the page measured none.
OTHER_WORK = "One likely cause, not measured here: other work shared the cores during those samples"


def _mib(nbytes: float) -> str:
    return f"{nbytes / MB:g} MiB"


def ram_sentence(ram: Measurement, l3: int | None, image_bytes: int = 3 * 224 * 224) -> str:
    """What the largest copy says: the RAM rate, and what it bounds, or why it may not be RAM's.

    Args:
        ram: the sweep's largest copy (:func:`gpufeed.measure.ceilings.memcpy`).
        l3: the last-level cache in bytes, or None where the OS does not say.
        image_bytes: one image as uint8 (a 224x224 RGB image by default), to state the rate in images/s.

    Example:
        >>> ram = Measurement("memcpy 1040 MB", [0.2] * 5, nbytes=1040 * MB)
        >>> print(ram_sentence(ram, 260 * MB))  # doctest: +NORMALIZE_WHITESPACE
        Copying 1040 MiB, 4x the 260 MiB L3 (so from RAM, not from the caches), runs at **5.5 GB/s**
        (the median of 5 samples, spread 0%), 36,223 224x224 uint8 images/s: no step that copies every
        byte can go faster on this machine.
        >>> print(ram_sentence(ram, None).split(":")[0])  # doctest: +NORMALIZE_WHITESPACE
        Copying 1040 MiB runs at **5.5 GB/s** (the median of 5 samples, spread 0%), 36,223 224x224
        uint8 images/s; this OS does not report its L3 size, so whether this is RAM's rate or a cache's
        is not known
    """
    rate = ram.gb_per_s
    stats = f"**{rate:.1f} GB/s** (the median of {len(ram.samples)} samples, spread {ram.spread:.0%})"
    images = f"{rate * 1e9 / image_bytes:,.0f} 224x224 uint8 images/s"
    if l3 is None:
        return (f"Copying {_mib(ram.nbytes)} runs at {stats}, {images}; this OS does not report its L3 size, so "
                "whether this is RAM's rate or a cache's is not known: read it as a bound on copies this large.")
    ratio = ram.nbytes / l3
    if ratio < 2:
        return (f"Copying {_mib(ram.nbytes)} runs at {stats}, {images}. That buffer is not several times the "
                f"{_mib(l3)} L3, so part of it may still come from the caches: this is not yet RAM's rate.")
    return (f"Copying {_mib(ram.nbytes)}, {ratio:.0f}x the {_mib(l3)} L3 (so from RAM, not from the caches), runs "
            f"at {stats}, {images}: no step that copies every byte can go faster on this machine.")


def cache_verdict(m: Measurement, ram: Measurement) -> Verdict:
    """The verdict on copy ``m`` against the RAM copy, as rates per sample (the two copy different
    byte counts, so their times do not compare)."""
    return compare(byte_rates(m), byte_rates(ram), higher=True)


def cache_sentence(m: Measurement, ram: Measurement, l3: int | None, what: str,
                   earlier: tuple[Verdict, str] | None = None, cause: bool = True) -> str:
    """How a smaller copy ``m`` compares with the RAM copy, as rates (the sizes differ), with the verdict.

    Args:
        m: a copy smaller than the RAM one (the first cell's, or the sweep's fastest in the L3).
        ram: the RAM copy (:func:`ram_sentence`).
        l3: the last-level cache in bytes, or None.
        what: the subject, e.g. ``"The first cell's 16 MiB copy"``.
        earlier: where the page already answered the same question (a copy inside the caches against
            RAM): ``(its verdict, where)``; the sentence then reads it (:meth:`Verdict.reads`).
        cause: name a likely cause where the copy ran slower; False where the page times one next
            (:func:`split_copy_sentence`).

    The words follow the verdict: faster (from the caches), the same (no edge from the caches
    here), slower (which no cache explains: the likely cause is named as not measured), or this run
    cannot tell (how wide, and what would tell).
    """
    both = 2 * m.nbytes  # source and destination
    where = ("" if l3 is None else
             f" (source and destination, {_mib(both)} together, {'fit in' if both <= l3 else 'exceed'} the {_mib(l3)} L3)")
    v = cache_verdict(m, ram)
    head = f"{what} ran at {m.gb_per_s:.1f} GB/s{where}, {v.words('the RAM copy', bold=True)}"
    if v.kind == FASTER:
        text = head + (": a buffer that fits the caches is copied from them." if l3 and both <= l3 else ".")
    elif v.kind == SAME:
        text = head + ": on this machine, in this run, the caches gave it no edge."
    elif v.kind == SLOWER:
        text = head + (", which no cache explains." + (f" {OTHER_WORK} (their spread: {m.spread:.0%}); rerun the cell."
                                                        if cause else ""))
    else:
        text = head + ". " + v.advice
    return text + (f" {v.reads(*earlier)}" if earlier else "")


def h2d_ratio(ours: Reference, nbytes: int = 16 * MB):
    """The verdict on pinned against pageable copies of ``ours`` at the size nearest ``nbytes``, and
    the two measurements: ``(verdict, pinned, pageable)``."""
    at = h2d_at(ours.measurements, nbytes)
    return compare(at["pinned"], at["pageable"]), at["pinned"], at["pageable"]


def pinning_then_and_now(ours: Reference, theirs: Sequence) -> str:
    """Our GPU's pinned-over-pageable ratio beside each machine of NVIDIA's 2012 post, the copy sizes
    named, and how each path's rate changed from their fastest machine to ours.

    Args:
        ours: our host-to-device copies (:class:`gpufeed.measure.results.Reference`).
        theirs: published figures with ids ``h2d-pageable-<machine>`` and ``h2d-pinned-<machine>``.

    Example:
        >>> from gpufeed.measure import published
        >>> def m(source, s):
        ...     return Measurement(f"H2D {source}", [s * f for f in (1, 1.01, 0.99, 1, 1.02)], nbytes=1 << 28,
        ...                        params={"nbytes": 1 << 28, "source": source})
        >>> ref = Reference([m("pageable", 0.0309), m("pinned", 0.0049)], {"gpu": "GPU X"}, "a file, full mode")
        >>> print(pinning_then_and_now(ref, published.for_lesson("lesson00")))  # doctest: +NORMALIZE_WHITESPACE
        Pinned over pageable: **6.31x** on GPU X (a file; a 256 MiB copy, 6.18x to 6.43x), **1.15x** on
        NVIDIA's GeForce GTX 680 with an Intel Core i7-3930K (desktop) and **2.50x** on its NVS 4200M (PCIe
        Gen2 x16) with an Intel Core i7-2620M (laptop) (16 MiB copies; published by NVIDIA Technical Blog,
        not measured here). The copy sizes differ: read the ratios as orders of magnitude.
        From NVIDIA's fastest pinned copy (GeForce GTX 680 with an Intel Core i7-3930K (desktop)) to GPU X,
        pinned copies got 8.86x faster (6.19 to 54.8 GB/s) and pageable ones 1.62x faster (5.37 to 8.69 GB/s):
        the pageable path kept up with the bus far less. One likely cause, not measured here: its extra
        copy into the driver's staging buffer runs at the speed of the host's memory, not of the bus.
    """
    v, pinned, pageable = h2d_ratio(ours)
    pairs: dict[str, dict] = {}
    for f in theirs:
        if f.id.startswith("h2d-"):
            pairs.setdefault(f.hardware, {})[f.id.split("-")[1]] = f
    pairs = {hw: p for hw, p in pairs.items() if {"pageable", "pinned"} <= p.keys()}
    source = ours.source.split(",")[0]
    text = (f"Pinned over pageable: **{v.ratio:.2f}x** on {ours.hardware} ({source}; a "
            f"{_mib(pinned.params['nbytes'])} copy, {v.interval()})")
    if not pairs:
        return text + "; no published pair of copies to set beside it."
    listed = [f"**{p['pinned'].figure / p['pageable'].figure:.2f}x** on {'NVIDIA' if i == 0 else 'its'}'s {hw}"
              .replace("its's", "its") for i, (hw, p) in enumerate(pairs.items())]
    publisher = next(iter(pairs.values()))["pinned"].publisher
    text += (f", {' and '.join(listed)} (16 MiB copies; published by {publisher}, not measured here)."
             + (" The copy sizes differ: read the ratios as orders of magnitude."
                if pinned.params["nbytes"] != 16 * MB else ""))
    hw, fastest = max(pairs.items(), key=lambda kv: kv[1]["pinned"].figure)
    grew = {k: (fastest[k].figure, (pinned if k == "pinned" else pageable).gb_per_s) for k in ("pinned", "pageable")}
    text += (f"\nFrom NVIDIA's fastest pinned copy ({hw}) to {ours.hardware}, pinned copies got "
             f"{times(grew['pinned'][1] / grew['pinned'][0])} ({grew['pinned'][0]:.2f} to {grew['pinned'][1]:.1f} GB/s) "
             f"and pageable ones {times(grew['pageable'][1] / grew['pageable'][0])} ({grew['pageable'][0]:.2f} to "
             f"{grew['pageable'][1]:.2f} GB/s)")
    if grew["pinned"][1] / grew["pinned"][0] > 1.5 * grew["pageable"][1] / grew["pageable"][0]:
        text += (": the pageable path kept up with the bus far less. One likely cause, not measured here: its extra "
                 "copy into the driver's staging buffer runs at the speed of the host's memory, not of the bus.")
    else:
        text += "."
    return text


def read_sentence(cold: Measurement, warm: Measurement, on_disk: bool) -> str:
    """Cold against warm reads of one file (times of the same bytes), with the verdict, and whether
    the cold read reached the disk at all.

    Args:
        cold, warm: :func:`gpufeed.measure.storage.file_read` with ``cold=True`` and ``False``.
        on_disk: :func:`gpufeed.measure.storage.reached_disk`.
    """
    v = compare(warm, cold)
    text = (f"Cold {cold.gb_per_s:.2f} GB/s, warm {warm.gb_per_s:.2f} GB/s ({len(cold.samples)} and "
            f"{len(warm.samples)} reads): the page-cache read was {v.words('the cold read', bold=True)}.")
    if v.kind == CANNOT_TELL:
        text += " " + v.advice
    share = cold.params.get("from_storage")
    if not cold.params.get("fadvise"):
        return text + (" This OS has no `posix_fadvise`, so no drop was requested: the 'cold' reads came from the "
                       "page cache as well, and this number does not show the disk. Clear the cache by hand (macOS: "
                       "`sudo purge`) to see it.")
    if not on_disk:
        return text + (f" Each 'cold' read fetched {share:.0%} of the file from storage: this file system kept it "
                       "cached despite the request, so this number does not show the disk." if share is not None else
                       " This OS does not say what came from storage, and cold was not clearly slower: the file "
                       "system may have kept the file cached, so this number may not show the disk.")
    return text + ("" if share is None else f" Each cold read fetched {share:.0%} of the file from storage: it "
                   "reached the disk.")


def rung_lines(figures: Sequence, disk: Measurement) -> str:
    """Each published read rate beside this machine's cold read, as a list: orders of magnitude, not a
    verdict (a published figure is one number, on other hardware, often with many threads; ours is one
    thread's ``read()``), so the ratio is rounded to one decimal (:func:`gpufeed.measure.wording.times`).

    Example:
        >>> from gpufeed.measure import published
        >>> efs = [f for f in published.load() if f.id == "efs-per-client-read-write"]
        >>> print(rung_lines(efs, Measurement("read cold", [1.0] * 5, nbytes=1e9)))
        - an Amazon EFS file system accessed over NFS, one client: 512 MiBps (0.54 GB/s), about 1.9x slower than the disk here.
    """
    return "\n".join(f"- {f.hardware}: {f.number()} {f.unit} ({f.gb_per_s:.2f} GB/s), about "
                     f"{times(f.gb_per_s / disk.gb_per_s, 'the disk here', digits=1)}."
                     for f in figures)


def rates_table(ms: Sequence[Measurement]) -> str:
    """A Markdown table of copy and read rates: GB/s at the median, the spread, the samples. No ratio
    column: the rows move different byte counts, so the rates, not the times, compare.

    Example:
        >>> print(rates_table([Measurement("memcpy 1 MB", [0.001, 0.0011, 0.0009], nbytes=2**20)]))
        | measurement | GB/s (median) | spread (IQR / median) | samples |
        |---|---|---|---|
        | memcpy 1 MB | 1.05 | 10% | 3 |
    """
    rows = ["| measurement | GB/s (median) | spread (IQR / median) | samples |", "|---|---|---|---|"]
    rows += [f"| {m.name} | {m.gb_per_s:.3g} | {m.spread:.0%} | {len(m.samples)} |" for m in ms]
    return "\n".join(rows)


def threads_sentence(one: Measurement, many: Measurement) -> str:
    """All threads against one on the same copy, timed in turns
    (:func:`gpufeed.measure.ceilings.memcpy_threads`), with the verdict and, for each outcome, what
    it means; causes beyond the measurement are named as not measured here.

    Example:
        >>> one = Measurement("1", [0.2, 0.21, 0.2, 0.19, 0.2], nbytes=1 << 30, params={"threads": 1})
        >>> two = Measurement("2", [0.1, 0.105, 0.1, 0.095, 0.1], nbytes=1 << 30, params={"threads": 2})
        >>> print(threads_sentence(one, two))  # doctest: +NORMALIZE_WHITESPACE
        Copying 1024 MiB: **5.4 GB/s** on one thread, **10.7 GB/s** on 2, **2.00x faster** than one
        (2.00x to 2.00x): the other cores add what one thread leaves of the memory's rate. One likely
        cause, not measured here: a core keeps only so many cache-line misses in flight.
    """
    v = compare(many, one, paired=True)
    n = many.params["threads"]
    head = (f"Copying {_mib(one.nbytes)}: **{one.gb_per_s:.1f} GB/s** on one thread, **{many.gb_per_s:.1f} GB/s** "
            f"on {n}, {v.words('one', bold=True)}")
    if v.kind == FASTER:
        return head + (": the other cores add what one thread leaves of the memory's rate. One likely cause, not "
                       "measured here: a core keeps only so many cache-line misses in flight.")
    if v.kind == SAME:
        return head + ": one thread already gets what this machine's memory gives."
    if v.kind == SLOWER:
        return head + (". One likely cause, not measured here: the threads wait for each other, and another "
                       "program held a core.")
    return head + ". " + v.advice


def split_copy_sentence(one: Measurement, many: Measurement, slow: bool = True) -> str:
    """Whether splitting a small copy over torch's threads pays, and, where that copy ran slower than
    the RAM copy (``slow``), whether the threads are why: the same copy on one thread and on all,
    timed in turns (:func:`gpufeed.measure.ceilings.memcpy_threads`), with the verdict.

    Example:
        >>> one = Measurement("1", [0.0014 * f for f in (1, 1.01, 0.99, 1, 1.02)], nbytes=16 << 20, params={"threads": 1})
        >>> two = Measurement("2", [0.008 * f for f in (1, 0.99, 1.01, 1, 1.0)], nbytes=16 << 20, params={"threads": 2})
        >>> print(split_copy_sentence(one, two))  # doctest: +NORMALIZE_WHITESPACE
        The same 16 MiB copy, on one thread and on 2 in turns: **12.0 GB/s** and **2.1 GB/s**; 2 threads are
        **5.71x slower** than one (5.60x to 5.83x): split over threads, a copy this small cost more than it
        saved. One likely cause, not measured here: each copy waits for the other threads to wake up, which
        some virtual machines make slow.
    """
    v = compare(many, one, paired=True)
    n = many.params["threads"]
    head = (f"The same {_mib(one.nbytes)} copy, on one thread and on {n} in turns: **{one.gb_per_s:.1f} GB/s** and "
            f"**{many.gb_per_s:.1f} GB/s**; {n} threads are {v.words('one', bold=True)}")
    if v.kind == SLOWER:
        return head + (": split over threads, a copy this small cost more than it saved. One likely cause, not measured "
                       "here: each copy waits for the other threads to wake up, which some virtual machines make slow.")
    if v.kind == CANNOT_TELL:
        return head + ". " + v.advice
    if slow:
        return head + f": the threads are not what slowed it. {OTHER_WORK}."
    return head + (": splitting it over threads paid." if v.kind == FASTER else ": splitting it gained nothing.")


def lower_ceiling(ram: Measurement, decode: Measurement, cores: int, size: tuple[int, int]) -> tuple[str, float]:
    """Which ceiling is lower for images of ``size``: copying them (memcpy's bytes/s over an image's
    bytes) or decoding them on every core (one core's images/s times ``cores``), with the verdict
    on their rates; and the ratio of the medians (memcpy's over decoding's).

    Example:
        >>> ram = Measurement("memcpy", [0.2, 0.21, 0.2, 0.19, 0.2], nbytes=1 << 30)
        >>> dec = Measurement("torchvision 640x480", [0.02, 0.021, 0.02, 0.019, 0.02], items=16)
        >>> text, ratio = lower_ceiling(ram, dec, 2, (640, 480))
        >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
        memcpy could move 5,825 images/s of 640x480; 2 cores decode at most 1,600 images/s with torchvision:
        the copy's ceiling is **3.64x higher** than decoding's (3.47x to 3.82x), so the lower ceiling is **decoding**.
    """
    image = 3 * size[0] * size[1]
    copies = [r * 1e9 / image for r in byte_rates(ram)]  # images/s per sample
    decodes = [decode.items / s * cores for s in decode.samples]
    v = compare(copies, decodes, higher=True)
    words = v.words("decoding's", more="higher", less="lower", same="as high", bold=True)
    lower = {FASTER: "decoding", SLOWER: "copying"}.get(v.kind)
    text = (f"memcpy could move {statistics.median(copies):,.0f} images/s of {size[0]}x{size[1]}; {cores} cores decode "
            f"at most {statistics.median(decodes):,.0f} images/s with {decode.name.split()[0]}: the copy's ceiling is "
            f"{words}" + (f", so the lower ceiling is **{lower}**." if lower else
                          ": neither is the lower one here." if v.kind == SAME else ". " + v.advice))
    return text, statistics.median(copies) / statistics.median(decodes)

