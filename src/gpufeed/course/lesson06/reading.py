"""The sentences that read lesson 06's measurements, whichever way the numbers point.

As in lesson 05 (:mod:`gpufeed.course.lesson05.reading`, whose wording pieces these reuse), each
comparison arrives as a :class:`~gpufeed.measure.verdict.Verdict` of two arms timed in turns, a
cause is given only where the lesson measured it (page faults counted, nanoseconds per index), and
otherwise as "one likely cause, not measured here". Taught in ``notebooks/06_batched.ipynb``.

Example:
    >>> from gpufeed.measure.verdict import Verdict
    >>> print(talk(Verdict(38.0, 35.0, 41.0, 20, "faster", True), calls_us=120, one_us=3.2))
    100 samples: 120 us one by one, 3.2 us in one call: the batched call ran **38.00x faster** than the calls one by one (35.00x to 41.00x); the talk measured 36x.
"""

from __future__ import annotations

from gpufeed.course.lesson05.reading import cache_fit, tell
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, LIKELY, SAME, SLOWER, Verdict


def talk(v: Verdict, *, calls_us: float, one_us: float) -> str:
    """Section 1: one batched call of 100 samples (A) against 100 ``__getitem__`` calls (B)."""
    return (f"100 samples: {calls_us:,.0f} us one by one, {one_us:,.1f} us in one call: the batched call "
            f"{v.ran('the calls one by one', bold=True)}; the talk measured 36x." + tell(v))


def epochs(vs: dict[str, Verdict], rates: dict[str, float]) -> str:
    """Section 1: each batched way (``FastLoader``, ``__getitems__``, the BatchSampler) against one
    ``__getitem__`` per sample (``"per sample"``), whole shuffled epochs in turns; ``rates`` in samples/s.

    Example:
        >>> w = Verdict(20.0, 18.0, 22.0, 5, "faster", True)
        >>> print(epochs({"FastLoader": w, "__getitems__": w, "BatchSampler, batch_size=None": w},
        ...              {"FastLoader": 2e6, "per sample": 1e5}))  # doctest: +NORMALIZE_WHITESPACE
        Fetching each batch in one call (`FastLoader`, 2,000,000 against 100,000 samples/s) ran **20.00x faster**
        than one `__getitem__` per sample (18.00x to 22.00x); inside the DataLoader, `__getitems__` ran 20.00x
        faster than it (18.00x to 22.00x) and the BatchSampler ran 20.00x faster than it (18.00x to 22.00x).
    """
    fast = vs["FastLoader"]
    text = (f"Fetching each batch in one call (`FastLoader`, {rates['FastLoader']:,.0f} against "
            f"{rates['per sample']:,.0f} samples/s) {fast.ran('one `__getitem__` per sample', bold=True)}; inside "
            f"the DataLoader, `__getitems__` {vs['__getitems__'].ran('it')} and the BatchSampler "
            f"{vs['BatchSampler, batch_size=None'].ran('it')}.")
    return text + tell(*vs.values())


def gathers(v_select: Verdict, v_buffer: Verdict, *, fresh_faults: float, buffer_faults: float, gb_s: float,
            source_bytes: int, l3: int | None) -> str:
    """Section 2: ``index_select`` (A) against ``t[idx]`` (``v_select``), and into a reused buffer (A)
    against into fresh memory (``v_buffer``), with the page faults a call of each (medians).

    Example:
        >>> print(gathers(Verdict(3.0, 2.5, 3.5, 20, "faster", True), Verdict(1.0, 0.97, 1.03, 20, "the same", True),
        ...               fresh_faults=0, buffer_faults=0, gb_s=9.0, source_bytes=77_000_000, l3=260 << 20))  # doctest: +NORMALIZE_WHITESPACE
        `index_select` ran **3.00x faster** than `t[idx]` (2.50x to 3.50x). Into a reused buffer it ran as fast as
        into fresh memory (within 4%), at 9.0 GB/s: a fresh batch took 0 page faults a call, the buffer 0, so here
        there was no fault to save (the allocator handed back the memory the previous batch freed, already
        touched). The source's 77 MB fit in this CPU's last-level cache (260 MiB): a rate measured on them is the
        cache's, not RAM's.
    """
    text = (f"`index_select` {v_select.ran('`t[idx]`', bold=True)}. Into a reused buffer it "
            f"{v_buffer.ran('into fresh memory')}, at {gb_s:.1f} GB/s: a fresh batch took {fresh_faults:,.0f} page "
            f"faults a call, the buffer {buffer_faults:,.0f}")
    if fresh_faults > buffer_faults + 1:
        text += ": fresh memory comes page by page, a fault on each first touch."
    else:
        text += (", so here there was no fault to save (the allocator handed back the memory the previous batch "
                 "freed, already touched).")
    if v_buffer.kind == SLOWER:
        text += " The buffer's loss is not what the faults predict: this run does not show why."
    elif v_buffer.kind == FASTER and fresh_faults <= buffer_faults + 1:
        text += (f" The buffer's gain is not the faults', then: {LIKELY} making a new tensor each call (the "
                 "allocator's and torch's bookkeeping), which the buffer skips.")
    text += f" The source's {source_bytes / 1e6:,.0f} MB {cache_fit(source_bytes, l3)}."
    return text + tell(v_select, v_buffer)


def pieces(vs: dict[int, Verdict]) -> str:
    """Deep dive: whole images per thread (A) against one image at a time (B), by thread count, each
    read against what the kernel's code predicts: on one thread a tie (the two paths differ only in
    how one image is copied), on more a gain (the threads no longer meet after every image).

    Example:
        >>> print(pieces({1: Verdict(1.0, 0.98, 1.02, 30, "the same", True), 2: Verdict(1.4, 1.3, 1.5, 30, "faster", True)}))  # doctest: +NORMALIZE_WHITESPACE
        Measured here: on 1 thread, whole images per thread ran as fast as one image at a time (within 3%), as
        predicted; on 2 threads, whole images per thread ran 1.40x faster than one image at a time (1.30x to 1.50x):
        one likely cause, not measured here: the threads no longer meet after every image.
        >>> print(pieces({1: Verdict(0.83, 0.72, 0.99, 30, "slower", True)}))  # doctest: +NORMALIZE_WHITESPACE
        Measured here: on 1 thread, whole images per thread ran 1.20x slower than one image at a time (1.01x to
        1.39x), not the tie predicted: this run does not show why.
    """
    def read(t: int, v: Verdict) -> str:
        said = f"on {t} thread{'s' if t != 1 else ''}, whole images per thread {v.ran('one image at a time')}"
        if t == 1 and v.kind == SAME:
            return said + ", as predicted"
        if t == 1 and v.decided:
            return said + ", not the tie predicted: this run does not show why"
        if v.kind == FASTER:
            return said + f": {LIKELY} the threads no longer meet after every image"
        if v.decided:
            return said + ": the pieces saved nothing here"
        return said

    return "Measured here: " + "; ".join(read(t, v) for t, v in vs.items()) + "." + tell(*vs.values())


def ring(v: Verdict, *, l3: int, l3_known: bool, batch: int, big_ring: int, image_bytes: int,
         small_rate: float, large_rate: float) -> str:
    """Deep dive: a ring of 2 buffers that fits the L3 (A) against a ring of ``big_ring`` (B) four
    times its size, in images/s.

    Example:
        >>> print(ring(Verdict(1.0, 0.7, 1.5, 7, "cannot tell", True), l3=32 << 20, l3_known=True, batch=53,
        ...            big_ring=16, image_bytes=150_528, small_rate=54_555, large_rate=28_874))  # doctest: +NORMALIZE_WHITESPACE
        L3 of this CPU: 32 MiB. Batches of 53 images (7.6 MiB): a ring of 2 (15.2 MiB) ran at 54,555 images/s, a
        ring of 16 (122 MiB) at 28,874: the small ring was not told apart from the large one by this run (0.70x to
        1.50x). Where this run cannot tell, ... would tell.
    """
    mib = 2**20
    text = (f"L3 {'of this CPU' if l3_known else '(not reported by this OS; assumed)'}: {l3 / mib:g} MiB. Batches "
            f"of {batch} images ({batch * image_bytes / mib:.1f} MiB): a ring of 2 ({2 * batch * image_bytes / mib:.1f} "
            f"MiB) ran at {small_rate:,.0f} images/s, a ring of {big_ring} ({big_ring * batch * image_bytes / mib:,.0f} "
            f"MiB) at {large_rate:,.0f}: the small ring {v.ran('the large one', bold=v.decided)}")
    if v.kind == FASTER:
        return text + f"; {LIKELY} its writes stay in the cache, the large ring's go to RAM."
    if v.kind == SAME:
        return text + (f"; {LIKELY} the gather's reads from the source, which miss the cache either way, set the "
                       "speed, not where its writes go.")
    if v.kind == SLOWER:
        return text + ", which the cache does not explain: this run does not show why."
    return text + "." + tell(v)


def shuffle_cost(v: Verdict, *, n: int, full_ms: float, grouped_ms: float, ns: dict[str, tuple[float, float]],
                 at_n: int, at_n_ms: float, epoch_ms: float, by_size: dict[int, Verdict] | None = None) -> str:
    """Section 3: the grouped shuffle (A) against ``randperm`` (B) of ``n`` indices (the largest
    size), with each one's nanoseconds per index at the smallest and the largest size (``ns``), the
    same verdict at each smaller size (``by_size``: where the grouped shuffle starts to pay), and what
    ``randperm`` of ``at_n`` indices costs against an epoch of as many samples.

    Example:
        >>> ns = {"randperm": (50.0, 140.0), "grouped": (60.0, 58.0)}
        >>> sizes = {10**5: Verdict(0.8, 0.75, 0.86, 7, "slower", True), 10**6: Verdict(1.02, 0.96, 1.07, 7, "the same", True)}
        >>> print(shuffle_cost(Verdict(2.4, 2.2, 2.6, 5, "faster", True), n=10**7, full_ms=1400, grouped_ms=580,
        ...                    ns=ns, at_n=300_000, at_n_ms=12, epoch_ms=150, by_size=sizes))  # doctest: +NORMALIZE_WHITESPACE
        Shuffling 10,000,000 indices took 1,400 ms with randperm and 580 ms grouped: the grouped shuffle ran
        **2.40x faster** than randperm (2.20x to 2.60x); at 100,000 indices it ran 1.25x slower (1.16x to 1.33x),
        at 1,000,000 it ran as fast (within 7%). Per index, randperm took 50 ns at the smallest size and 140 ns at the
        largest, the grouped shuffle 60 and 58 ns: one likely cause, not measured here: randperm writes each index
        to a random place of an array of 80 MB, and the larger the array, the more of those writes miss the CPU's
        caches, while each block of the grouped shuffle stays small. At 300,000 samples randperm costs 12 ms,
        **8%** of the 150 ms of a FastLoader epoch over as many (section 1's rate), paid once per epoch.
    """
    (full_lo, full_hi), (grp_lo, grp_hi) = ns["randperm"], ns["grouped"]
    smaller = {size: w for size, w in (by_size or {}).items() if size != n}
    text = (f"Shuffling {n:,} indices took {full_ms:,.0f} ms with randperm and {grouped_ms:,.0f} ms grouped: the "
            f"grouped shuffle {v.ran('randperm', bold=True)}")
    if smaller:  # where it starts to pay
        text += "; " + ", ".join(f"at {size:,}{' indices' if i == 0 else ''} it {w.ran()}"
                                 for i, (size, w) in enumerate(smaller.items()))
    text += (f". Per index, randperm took {full_lo:,.0f} ns at the smallest size and {full_hi:,.0f} ns at the largest, "
             f"the grouped shuffle {grp_lo:,.0f} and {grp_hi:,.0f} ns")
    if v.kind == FASTER and full_hi > 1.5 * full_lo:
        text += (f": {LIKELY} randperm writes each index to a random place of an array of {8 * n / 1e6:,.0f} MB, and "
                 "the larger the array, the more of those writes miss the CPU's caches, while each block of the "
                 "grouped shuffle stays small.")
    elif v.kind == CANNOT_TELL:
        text += f". {v.advice}"
    else:
        text += "."
    return text + (f" At {at_n:,} samples randperm costs {at_n_ms:,.0f} ms, **{at_n_ms / epoch_ms:.0%}** of the "
                   f"{epoch_ms:,.0f} ms of a FastLoader epoch over as many (section 1's rate), paid once per epoch."
                   + tell(*smaller.values()) * (v.kind != CANNOT_TELL))


def quiz(vs: dict[str, Verdict], slowest: str) -> str:
    """Section 4: each loop (A) against the slowest (B), by name; the fastest is the first named.

    Example:
        >>> print(quiz({"NumPy": Verdict(300.0, 280.0, 320.0, 5, "faster", True),
        ...             "DataLoader with workers": Verdict(1.2, 0.8, 1.7, 5, "cannot tell", True)}, "pure Python"))  # doctest: +NORMALIZE_WHITESPACE
        Fastest: NumPy, which ran 300.00x faster than the slowest, pure Python (280.00x to 320.00x); DataLoader with
        workers was not told apart from pure Python by this run (0.80x to 1.70x). Where this run cannot tell, ... would tell.
    """
    (first, v), *rest = vs.items()
    text = f"Fastest: {first}, which {v.ran(f'the slowest, {slowest}')}"
    text += "".join(f"; {name} {w.ran(slowest)}" for name, w in rest) + "."
    return text + tell(*vs.values())


def workers(*, cores: int, dl_rate: float) -> str:
    """Section 4: what the DataLoader with ``cores`` workers pays per batch, and what it delivered (the
    quiz's verdicts are the comparison; this names what section 1 measured of the cost).

    Example:
        >>> print(workers(cores=2, dl_rate=150_000))  # doctest: +NORMALIZE_WHITESPACE
        Per batch, the DataLoader pays for 300 `__getitem__` calls and a collate (section 1 timed them against one
        call per batch) and for a hand-over between processes; NumPy makes one call per batch, in C. 2 workers at
        best divide the per-sample cost by 2: with them the DataLoader delivered 150,000 samples/s.
    """
    return ("Per batch, the DataLoader pays for 300 `__getitem__` calls and a collate (section 1 timed them against one "
            "call per batch) and for a hand-over between processes; NumPy makes one call per batch, in C. "
            f"{cores} workers at best divide the per-sample cost by {cores}: with them the DataLoader delivered "
            f"{dl_rate:,.0f} samples/s.")


def batch_sizes(v_per_sample: Verdict, v_fast: Verdict) -> str:
    """Exercise 1: batch 1024 (A) against batch 32 (B), for the per-sample DataLoader and FastLoader.

    Example:
        >>> print(batch_sizes(Verdict(1.0, 0.96, 1.04, 5, "the same", True), Verdict(8.0, 7.0, 9.0, 5, "faster", True)))  # doctest: +NORMALIZE_WHITESPACE
        From batch 32 to 1024, the per-sample DataLoader ran as fast as itself at batch 32 (within 5%) and FastLoader
        ran **8.00x faster** than itself at batch 32 (7.00x to 9.00x). FastLoader's rate depends on the batch size:
        part of its cost is per batch (32x the samples a batch made it 8.00x faster, not the 32x of a cost wholly per
        batch). The per-sample loader's does not: its cost is per sample.
    """
    text = (f"From batch 32 to 1024, the per-sample DataLoader {v_per_sample.ran('itself at batch 32')} and "
            f"FastLoader {v_fast.ran('itself at batch 32', bold=True)}. ")
    if v_fast.kind == FASTER and v_fast.high < 32:
        text += (f"FastLoader's rate depends on the batch size: part of its cost is per batch (32x the samples a batch "
                 f"made it {v_fast.ratio:.2f}x faster, not the 32x of a cost wholly per batch). ")
    elif v_fast.kind == FASTER:
        text += "FastLoader's rate depends on the batch size: its cost is per batch. "
    elif v_fast.decided:
        text += "FastLoader did not gain, against the prediction: re-run on a quieter machine. "
    if v_per_sample.kind == SAME:
        text += "The per-sample loader's does not: its cost is per sample."
    elif v_per_sample.kind == FASTER:
        text += (f"The per-sample loader gained too: {LIKELY} besides a call per sample it pays per batch (the "
                 "sampler's and the fetcher's Python, one collate call), a share that 32 samples a batch leave visible.")
    elif v_per_sample.kind == SLOWER:
        text += "The per-sample loader lost, which its cost per sample does not explain: this run does not show why."
    return text.rstrip() + tell(v_per_sample, v_fast)


def fast_vs_numpy(v: Verdict) -> str:
    """Exercise 3: FastLoader (A) against the NumPy loop (B), in turns.

    Example:
        >>> print(fast_vs_numpy(Verdict(0.9, 0.85, 0.95, 5, "slower", True)))
        FastLoader ran 1.11x slower than NumPy (1.05x to 1.18x): one likely cause, not measured here: its Python per batch (slicing the permutation, building the output).
    """
    text = f"FastLoader {v.ran('NumPy')}"
    if v.kind == SLOWER:
        return text + f": {LIKELY} its Python per batch (slicing the permutation, building the output)."
    return text + "." + tell(v)


def order_or_footprint(v_two: Verdict, v_one: Verdict, *, stream_two: float, stream_one: float) -> str:
    """Deep dive: the shuffled gather (A) against a copy of the same rows in file order (B), into a
    ring of two buffers (``v_two``) and into one (``v_one``); each pair in turns, the two pairs not.

    Example:
        >>> print(order_or_footprint(Verdict(0.8, 0.75, 0.85, 7, "slower", True), Verdict(1.0, 0.97, 1.03, 7, "the same", True),
        ...                          stream_two=60_000, stream_one=90_000))  # doctest: +NORMALIZE_WHITESPACE
        Into a ring of two, the shuffled gather ran at 80% of the speed of the copy in file order: it ran 1.25x
        slower than that copy (1.18x to 1.33x). Into one buffer, at 100%: it ran as fast as that copy (within
        4%). The copy in file order ran at 60,000 images/s into two buffers and 90,000 into one: two runs, not
        taken in turns, so this page does not compare them. The two arms of a pair differ only in the order of the
        rows (the same rows, into the same buffers), so where the gather ran slower than its copy, that gap is what
        the shuffled order cost. Where the gather kept up with the copy, the order of the rows cost nothing
        measurable.
    """
    def at(v):
        return "an unmeasured share" if v.ratio is None else f"{v.ratio:.0%}"

    text = (f"Into a ring of two, the shuffled gather ran at {at(v_two)} of the speed of the copy in file order: it "
            f"{v_two.ran('that copy')}. Into one buffer, at {at(v_one)}: it {v_one.ran('that copy')}. The copy "
            f"in file order ran at {stream_two:,.0f} images/s into two buffers and {stream_one:,.0f} into one: two "
            "runs, not taken in turns, so this page does not compare them.")
    if SLOWER in (v_two.kind, v_one.kind):
        text += (" The two arms of a pair differ only in the order of the rows (the same rows, into the same buffers), "
                 "so where the gather ran slower than its copy, that gap is what the shuffled order cost.")
    if SAME in (v_two.kind, v_one.kind):
        text += " Where the gather kept up with the copy, the order of the rows cost nothing measurable."
    if FASTER in (v_two.kind, v_one.kind):
        text += " A gather faster than its copy in file order is not what the order predicts: this run does not show why."
    return text + tell(v_two, v_one)


def out_of_core(runs: dict[str, dict], *, held: str, first: int, used_mib: float, ahead_kb: int | None,
                group_rows: int, own_memory: bool, quick: bool) -> str:
    """Deep dive: a file four times the memory allowed, read in each order
    (:func:`gpufeed.course.lesson06.outofcore.compare`'s ``runs``: images/s, bytes read from the
    disk, the reader's own memory). One run of each order, one after another: the bytes are a count
    and are compared; the rates are shown, not compared (no samples taken in turns). ``quick``: the
    run's sizes are the small ones (quick and site mode), and the sentence says so.

    Example:
        >>> r = lambda ips, mib, own=0: {"images_per_s": ips, "read_bytes": mib << 20, "own_bytes": own << 20}
        >>> runs = {"full shuffle": r(300, 400), "full shuffle, MADV_RANDOM": r(900, 40), "grouped": r(4000, 20),
        ...         "ImageLoader, full shuffle": r(250, 420, 40), "ImageLoader, grouped": r(3000, 22, 40)}
        >>> print(out_of_core(runs, held="a memory cgroup held the reader to 32 MiB", first=64, used_mib=3, ahead_kb=128,
        ...                   group_rows=64, own_memory=True, quick=False))  # doctest: +NORMALIZE_WHITESPACE
        Here a memory cgroup held the reader to 32 MiB. Reading 64 images (3 MiB), the stand-in's full shuffle read
        **400 MiB** from the disk (300 images/s); the grouped one read 20 MiB (4,000 images/s), **20.0x** fewer bytes.
        Most of the full shuffle's bytes are read-ahead: with `MADV_RANDOM` (no read-ahead) the same order read 40
        MiB (900 images/s), and a page fault on a plain mapping reads up to 128 KiB around the page on this disk,
        pages evicted before they are used. `ImageLoader` itself, under the same limit: 420 MiB read with a full
        shuffle (250 images/s), 22 MiB with `group_size=64` (3,000 images/s), **19.1x** fewer bytes. Its own memory
        (its batches, its thread) grew by 40 MiB inside the same limit, the stand-in's by 0 MiB: that much less room
        for the page cache. One run of each order: the rates are shown as measured, not compared.
    """
    from gpufeed.measure.wording import times  # a ratio of two counts of bytes, not of timings

    def fewer(a, b):
        return times(max(1, a["read_bytes"]) / max(1, b["read_bytes"]), more="fewer", less="more", same="as many",
                     digits=None, bold=True)

    full_r, rnd_r, grp_r = runs["full shuffle"], runs["full shuffle, MADV_RANDOM"], runs["grouped"]
    il_full, il_grp = runs["ImageLoader, full shuffle"], runs["ImageLoader, grouped"]
    mib = 2**20
    text = (f"Here {held}. Reading {first} images ({used_mib:.0f} MiB), the stand-in's full shuffle read "
            f"**{full_r['read_bytes'] / mib:,.0f} MiB** from the disk ({full_r['images_per_s']:,.0f} images/s); the "
            f"grouped one read {grp_r['read_bytes'] / mib:,.0f} MiB ({grp_r['images_per_s']:,.0f} images/s), "
            f"{fewer(full_r, grp_r)} bytes. ")
    if ahead_kb and full_r["read_bytes"] > 2 * rnd_r["read_bytes"]:
        text += (f"Most of the full shuffle's bytes are read-ahead: with `MADV_RANDOM` (no read-ahead) the same order "
                 f"read {rnd_r['read_bytes'] / mib:,.0f} MiB ({rnd_r['images_per_s']:,.0f} images/s), and a page fault "
                 f"on a plain mapping reads up to {ahead_kb} KiB around the page on this disk, pages evicted before "
                 "they are used. ")
    else:
        text += (f"With `MADV_RANDOM` (no read-ahead) the full shuffle read {rnd_r['read_bytes'] / mib:,.0f} MiB "
                 f"({rnd_r['images_per_s']:,.0f} images/s). ")
    if rnd_r["read_bytes"] <= grp_r["read_bytes"]:
        text += ("So without read-ahead the full shuffle read no more bytes than the grouped one: what a full shuffle "
                 "wastes is the read-ahead of a plain mapping, and the grouped shuffle's saving in bytes is against "
                 "that. ")
    text += (f"`ImageLoader` itself, under the same limit: {il_full['read_bytes'] / mib:,.0f} MiB read with a full "
             f"shuffle ({il_full['images_per_s']:,.0f} images/s), {il_grp['read_bytes'] / mib:,.0f} MiB with "
             f"`group_size={group_rows}` ({il_grp['images_per_s']:,.0f} images/s), {fewer(il_full, il_grp)} bytes. ")
    if own_memory:
        text += (f"Its own memory (its batches, its thread) grew by {il_grp['own_bytes'] / mib:.0f} MiB inside the "
                 f"same limit, the stand-in's by {grp_r['own_bytes'] / mib:.0f} MiB"
                 + (": that much less room for the page cache. " if il_grp["own_bytes"] > 2 * grp_r["own_bytes"] else ". "))
    text += "One run of each order: the rates are shown as measured, not compared."
    return text + (" (This run reads only the start of an epoch, from a small file; full mode reads more.)" if quick
                   else "")
