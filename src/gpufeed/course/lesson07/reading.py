"""The sentences that read lesson 07's measurements, whichever way the numbers point.

As in lessons 05 and 06 (:mod:`gpufeed.course.lesson05.reading`, whose wording pieces these
reuse), each comparison arrives as a :class:`~gpufeed.measure.verdict.Verdict` of two arms timed
in turns (the sweeps of :func:`gpufeed.course.lesson07.knobs.sweep` take every configuration in
turns), a sentence says "this run cannot tell" where it cannot, and a cause is given only where the
lesson measured it, otherwise as "one likely cause, not measured here". Taught in
``notebooks/07_dataloader.ipynb``.

Example:
    >>> from gpufeed.measure.verdict import Verdict
    >>> print(threads(Verdict(1.6, 1.4, 1.8, 20, "faster", True), default_threads=2, many_ms=2.0, one_ms=3.2))
    With 2 threads the collate ran 1.60x faster than with one (1.40x to 1.80x): 2.00 against 3.20 ms.
"""

from __future__ import annotations

import math

from gpufeed.course.lesson05.reading import tell
from gpufeed.measure.verdict import FASTER, LIKELY, SAME, SLOWER, Verdict

#: Where the PyTorch tutorial on pinned memory says what pinning first costs.
TUTORIAL = "https://docs.pytorch.org/tutorials/intermediate/pinmem_nonblock.html"


def threads(v: Verdict, *, default_threads: int, many_ms: float, one_ms: float) -> str:
    """Section 1: a collate (``torch.stack``) with the default threads (A) against one thread (B)."""
    if default_threads <= 1:
        return "torch already runs one thread per process here: nothing to compare."
    return (f"With {default_threads} threads the collate {v.ran('with one')}: {many_ms:.2f} against {one_ms:.2f} ms."
            + tell(v))


def workers(v_gain: Verdict, v_past: Verdict, v_memmap: Verdict, v_handed: Verdict, *, cores: int, most: int) -> str:
    """Section 2: the JPEG folder at ``cores`` workers against none (``v_gain``) and at ``most``
    against ``cores`` (``v_past``); the memmap with no worker against the folder with none
    (``v_memmap``) and through one worker against none (``v_handed``). All from one sweep in turns.

    Example:
        >>> w, l, t = Verdict(1.8, 1.6, 2.0, 5, "faster", True), Verdict(0.5, 0.4, 0.6, 5, "slower", True), Verdict(1.0, 0.97, 1.03, 5, "the same", True)
        >>> print(workers(w, t, Verdict(40.0, 35.0, 45.0, 5, "faster", True), l, cores=2, most=3))  # doctest: +NORMALIZE_WHITESPACE
        The JPEG folder with 2 workers ran **1.80x faster** than with none (1.60x to 2.00x): decoding is CPU work
        that splits by sample. With 3 workers it ran as fast as with 2 (within 4%). The memmap with no workers ran
        40.00x faster than the folder with none (35.00x to 45.00x). Through one worker its batches came 2.00x slower
        than gathered in place (1.67x to 2.50x): one likely cause, not measured here: the hand-over (a copy into
        shared memory, fresh pages on both sides, messages between processes).
    """
    text = f"The JPEG folder with {cores} workers {v_gain.ran('with none', bold=True)}"
    if v_gain.kind == FASTER:
        text += ": decoding is CPU work that splits by sample. "
    elif v_gain.decided:
        text += (f": {LIKELY} on busy cores a worker competes with the main process and everything else running, "
                 "and still hands each batch over. ")
    else:
        text += ". "
    text += f"With {most} workers it {v_past.ran(f'with {cores}')}"
    if v_past.kind == SLOWER:
        text += f": {LIKELY} past the cores, no core is free for them. "
    elif v_past.kind == FASTER:
        text += f": {LIKELY} past the cores, the extra workers still found idle moments of a core. "
    else:
        text += ". "
    text += f"The memmap with no workers {v_memmap.ran('the folder with none')}. Through one worker its batches "
    text += "came " + (v_handed.words("gathered in place") if v_handed.decided else
                       f"not told apart from those gathered in place by this run ({v_handed.why()})")
    if v_handed.kind == SLOWER:
        text += (f": {LIKELY} the hand-over (a copy into shared memory, fresh pages on both sides, messages between "
                 "processes).")
    elif v_handed.decided:
        text += ": the worker kept up; its hand-over cost no more than the gather it took off the main process."
    else:
        text += "."
    return text + tell(v_gain, v_past, v_memmap, v_handed)


def pinned(name: str, v: Verdict, cores: int) -> str:
    """Section 2, with CUDA: ``pin_memory=True`` (A) against without (B), at ``cores`` workers."""
    return f"{name}, `pin_memory=True` at {cores} workers {v.ran('without')}." + tell(v)


def prefetch(v: Verdict, *, rate: float, bound: float, batches: int, num_workers: int, factors: tuple[int, int]) -> str:
    """Section 2: the larger ``prefetch_factor`` (A) against the smaller (B), over ``batches`` batches
    with uneven steps, with A's images/s and the rate the steps alone allow (``bound``).

    Example:
        >>> print(prefetch(Verdict(1.2, 1.1, 1.3, 5, "faster", True), rate=700, bound=800, batches=64, num_workers=2,
        ...                factors=(1, 4)))  # doctest: +NORMALIZE_WHITESPACE
        Over 64 batches with uneven steps, `prefetch_factor=4` ran **1.20x faster** than factor 1 (1.10x to 1.30x):
        700 images/s, where the steps alone allow 800. One likely cause, not measured here: a queue of 8 batches
        (2 workers x 4) carries the loader through a burst of short steps, where a queue of 2 runs dry.
    """
    lo, hi = factors
    text = (f"Over {batches} batches with uneven steps, `prefetch_factor={hi}` {v.ran(f'factor {lo}', bold=True)}: "
            f"{rate:,.0f} images/s, where the steps alone allow {bound:,.0f}.")
    if v.kind == FASTER:
        text += (f" {LIKELY[0].upper()}{LIKELY[1:]} a queue of {num_workers * hi} batches ({num_workers} workers x {hi}) "
                 f"carries the loader through a burst of short steps, where a queue of {num_workers * lo} runs dry.")
    elif v.kind == SAME:
        text += (f" The deeper queue did not pay here: {LIKELY} the workers kept up with the short steps anyway, or "
                 "lagged behind the long ones whatever the queue.")
    return text + tell(v)


def persistence(v: Verdict, *, cores: int, method: str, without_ms: float, with_ms: float) -> str:
    """Section 2: whole epochs with persistent workers (A) against without (B), on the memmap.

    Example:
        >>> print(persistence(Verdict(1.5, 1.3, 1.7, 5, "faster", True), cores=2, method="fork", without_ms=90, with_ms=60))  # doctest: +NORMALIZE_WHITESPACE
        memmap: with persistent workers an epoch ran 1.50x faster than without (1.30x to 1.70x), 60 ms against 90
        ms: starting 2 workers (fork) every epoch cost about 50% of an epoch, which is why short epochs want
        `persistent_workers=True`.
    """
    text = (f"memmap: with persistent workers an epoch {v.ran('without')}, {with_ms:,.0f} ms against "
            f"{without_ms:,.0f} ms")
    if v.kind == FASTER:
        share = (without_ms - with_ms) / with_ms
        cost = f"{share:.1f}x" if share >= 1 else f"about {share:.0%} of"
        return text + (f": starting {cores} workers ({method}) every epoch cost {cost} an epoch, which is why short "
                       "epochs want `persistent_workers=True`.")
    return text + "." + tell(v)


def copies(v: Verdict, *, returns_us: float, pinned_ms: float, pageable_returns_ms: float, pageable_ms: float) -> str:
    """Section 3, with CUDA: the copy from pinned memory (A) against from pageable memory (B), both
    ``non_blocking=True``, timed until done; and when each call returned.

    Example:
        >>> print(copies(Verdict(2.5, 2.3, 2.7, 20, "faster", True), returns_us=12, pinned_ms=0.4,
        ...              pageable_returns_ms=0.95, pageable_ms=1.0))  # doctest: +NORMALIZE_WHITESPACE
        From pinned memory, `non_blocking=True` returned after 12 us of a 0.40 ms copy (3% of it); from pageable
        memory after 0.95 ms of 1.00 ms. The pinned copy ran 2.50x faster than the pageable one (2.30x to 2.70x).
    """
    return (f"From pinned memory, `non_blocking=True` returned after {returns_us:,.0f} us of a {pinned_ms:.2f} ms copy "
            f"({returns_us / 1e3 / pinned_ms:.0%} of it); from pageable memory after {pageable_returns_ms:.2f} ms of "
            f"{pageable_ms:.2f} ms. The pinned copy {v.ran('the pageable one')}." + tell(v))


def pin_caveat(pin_then_copy_gb_s: float | None) -> str:
    """What follows :func:`gpufeed.course.transfer.h2d_sentence` (which says the reference's "pin,
    then copy" series pinned into a block PyTorch's caching host allocator kept): the PyTorch
    tutorial's finding for fresh memory, which went the other way, and where this page times both.
    "" where the reference has no such series (the sentence then says so itself).

    Example:
        >>> print(pin_caveat(24.0))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
        That tutorial ([A guide on good usage of non_blocking and pin_memory()](https://docs.pytorch.org/...)),
        timing `pageable_tensor.pin_memory().to("cuda:0")` on its own GPU, found it slower than the plain pageable
        copy. The deep dive below times a fresh block and a cached one where there is a GPU.
    """
    if pin_then_copy_gb_s is None:
        return ""
    return (f"That tutorial ([A guide on good usage of non_blocking and pin_memory()]({TUTORIAL})), timing "
            "`pageable_tensor.pin_memory().to(\"cuda:0\")` on its own GPU, found it slower than the plain pageable copy. "
            "The deep dive below times a fresh block and a cached one where there is a GPU.")


def pins(vs: dict[str, Verdict], ms: dict[str, float], blocks: dict[str, int]) -> str:
    """Deep dive, with CUDA: ``pin_memory()`` into a cached and into a fresh block (A), each against a
    plain pageable copy (B, ``x.clone()``), with each one's median ms and the pinned blocks it made."""
    parts = [f"into a {kind} block, {ms[kind]:.2f} ms: it {v.ran('a plain copy')} "
             f"({blocks.get(kind, '?')} new pinned blocks in the series)" for kind, v in vs.items()]
    return "`pin_memory()` of one 9.6 MB batch: " + "; ".join(parts) + "." + tell(*vs.values())


def movers(vs: dict[str, Verdict], baseline: str, us: dict[str, float], cuda: bool) -> str:
    """Section 4: each way of moving the nested batch (A) against ``baseline`` (B), in turns, with
    each one's median microseconds per batch.

    Example:
        >>> w, l = Verdict(1.3, 1.2, 1.4, 10, "faster", True), Verdict(0.2, 0.18, 0.22, 10, "slower", True)
        >>> print(movers({"pytree": w, "TensorDict, consolidated": l}, "hand-written recursive",
        ...              {"hand-written recursive": 50, "pytree": 38, "TensorDict, consolidated": 250}, cuda=False))  # doctest: +NORMALIZE_WHITESPACE
        Against the hand-written recursive walk (50 us per batch): pytree ran 1.30x faster (1.20x to 1.40x), 38 us;
        TensorDict, consolidated ran 5.00x slower (4.55x to 5.56x), 250 us. On the CPU nothing is copied
        (`.to('cpu')` returns the tensor itself): these times are the cost of walking the structure, in Python or
        C++, and of building the result.
    """
    parts = [f"{name} {v.ran('')}, {us[name]:,.0f} us" for name, v in vs.items()]
    text = f"Against the {baseline.replace('hand-written recursive', 'hand-written recursive walk')} ({us[baseline]:,.0f} us per batch): " + "; ".join(parts) + ". "
    if cuda:
        text += "On a GPU the copies count too: how many there are, and whether their source is pinned."
    else:
        text += ("On the CPU nothing is copied (`.to('cpu')` returns the tensor itself): these times are the cost of "
                 "walking the structure, in Python or C++, and of building the result.")
    return text + tell(*vs.values())


def loading(v: Verdict, *, mib: float, device: str, map_ms: float, move_ms: float, cuda: bool, same: bool) -> str:
    """Section 4: ``torch.load(f, map_location=device)`` (A) against load-then-move (B), in turns.

    Example:
        >>> print(loading(Verdict(1.0, 0.96, 1.05, 15, "the same", True), mib=10, device="cpu", map_ms=12.0,
        ...               move_ms=12.1, cuda=False, same=True))  # doctest: +NORMALIZE_WHITESPACE
        Loading 10 MiB to cpu: `map_location` took 12.0 ms, loading then moving 12.1 ms: `map_location` ran as fast
        as load-then-move (within 5%). On the CPU neither copies (`.to('cpu')` returned the very tensors it was
        given: True), and they agree. Where they differ is the copy to a GPU, which needs one to time.
    """
    text = (f"Loading {mib:,.0f} MiB to {device}: `map_location` took {map_ms:.1f} ms, loading then moving "
            f"{move_ms:.1f} ms: `map_location` {v.ran('load-then-move')}. ")
    if cuda:
        return text + ("Both read the file into pageable host memory and make blocking copies; `map_location` copies "
                       "each tensor as it is read, so the host holds one tensor at a time rather than the whole file."
                       + tell(v))
    text += f"On the CPU neither copies (`.to('cpu')` returned the very tensors it was given: {same})"
    if v.kind == SAME:
        text += ", and they agree. "
    elif v.decided:
        text += (f", yet they differ: {LIKELY} the little Python each adds to the same read (mapping each "
                 "storage's location, or walking the nest to call `.to`). ")
    else:
        text += ". "
    return text + "Where they differ is the copy to a GPU, which needs one to time."


def main_threads(vs: dict[tuple[str, int], Verdict], default_threads: int) -> str:
    """Exercise 1: each (dataset, ``num_workers``) row with the default threads in the main process
    (A) against one thread (B); names the row that moved most among those this run decided.

    Example:
        >>> vs = {("memmap", 0): Verdict(1.6, 1.4, 1.8, 5, "faster", True), ("JPEG folder", 2): Verdict(1.0, 0.97, 1.03, 5, "the same", True)}
        >>> print(main_threads(vs, 2))  # doctest: +NORMALIZE_WHITESPACE
        at num_workers=0, the memmap with 2 threads ran 1.60x faster than with 1 (1.40x to 1.80x); at num_workers=2,
        the JPEG folder with 2 threads ran as fast as with 1 (within 4%). The row that moves is memmap at num_workers=0, where the main process
        loads the batches itself: one likely cause, not measured here: its torch copies split over free cores.
    """
    parts = [f"at num_workers={w}, the {name} with {default_threads} threads {v.ran('with 1')}"
             for (name, w), v in vs.items()]
    text = "; ".join(parts) + ". "
    if default_threads <= 1:
        return text + "torch runs one thread by default here: both runs are the same configuration."
    moved = {k: v for k, v in vs.items() if v.kind in (FASTER, SLOWER)}
    if not moved:
        decided = any(v.decided for v in vs.values())
        return text + ("No row moved: here the main process's threads neither help nor hurt." if decided else
                       "This run cannot tell any row apart." + tell(*vs.values()))
    (name, w), v = max(moved.items(), key=lambda kv: abs(math.log(kv[1].ratio)))
    text += f"The row that moves is {name} at num_workers={w}"
    if w == 0:
        text += (", where the main process loads the batches itself: " + LIKELY + (
            " its torch copies split over free cores." if v.kind == FASTER else
            f" each torch op now runs as a team of {default_threads} threads that waits for its slowest member, and on "
            "a busy machine that member waits for a core."))
    else:
        text += f": {LIKELY} the main process's threads {'leave' if v.kind == FASTER else 'take'} cores the workers need."
    return text + tell(*vs.values())


def two_threads(v: Verdict, *, cores: int, one_rate: float, two_rate: float) -> str:
    """Exercise 2: one worker with two torch threads (A) against with one (B), on the JPEG folder.

    Example:
        >>> print(two_threads(Verdict(1.02, 0.9, 1.15, 5, "cannot tell", True), cores=2, one_rate=600, two_rate=610))  # doctest: +NORMALIZE_WHITESPACE
        JPEG folder, one worker: 600 images/s with one torch thread in it, 610 with two, on 2 cores: with two it
        was not told apart from with one by this run (0.90x to 1.15x). Where this run cannot tell, ... would tell.
    """
    text = (f"JPEG folder, one worker: {one_rate:,.0f} images/s with one torch thread in it, {two_rate:,.0f} with two, "
            f"on {cores} cores: with two it {v.ran('with one')}")
    if v.kind == SAME:
        return text + ": the decode, most of a sample's time, is one thread either way."
    if v.kind == FASTER:
        return text + f": {LIKELY} the stack splits over a free core."
    if v.kind == SLOWER:
        return text + (f": {LIKELY} the stack and the copy now run as a team of two threads that waits for its "
                       "slowest member, which waits for a core the main process or another program holds.")
    return text + "." + tell(v)


__all__ = ["copies", "loading", "main_threads", "movers", "persistence", "pin_caveat", "pinned",
           "pins", "prefetch", "threads", "two_threads", "workers"]


def pin_by_difference(v: Verdict, *, hardware: str, source: str, nbytes: int, both_ms: float, copy_ms: float) -> str:
    """Deep dive without CUDA: from a reference, pinning then copying (A) against copying from memory
    pinned beforehand (B); where A is decided slower, the pin's cost by difference.

    Example:
        >>> print(pin_by_difference(Verdict(0.45, 0.4, 0.5, 10, "slower", False), hardware="H100", source="ceilings",
        ...                         nbytes=256 << 20, both_ms=11.2, copy_ms=4.9))  # doctest: +NORMALIZE_WHITESPACE
        On H100 (ceilings), pinning then copying 256 MiB took 11.20 ms against 4.90 ms for the copy from memory
        pinned beforehand: it ran 2.22x slower than that copy (2.00x to 2.50x): the pin alone, by difference, took
        about 6.3 ms (43 GB/s), a copy in RAM into a block the caching host allocator kept from the warm-up. Fresh
        blocks, locked anew each time, need a GPU to time.
    """
    text = (f"On {hardware} ({source}), pinning then copying {nbytes >> 20} MiB took {both_ms:.2f} ms against "
            f"{copy_ms:.2f} ms for the copy from memory pinned beforehand: it {v.ran('that copy')}")
    if v.kind != SLOWER:
        return text + ": this reference cannot say what the pin cost."
    pin_ms = both_ms - copy_ms
    return text + (f": the pin alone, by difference, took about {pin_ms:.1f} ms ({nbytes / pin_ms / 1e6:.0f} GB/s), a "
                   "copy in RAM into a block the caching host allocator kept from the warm-up. Fresh blocks, locked "
                   "anew each time, need a GPU to time.")
