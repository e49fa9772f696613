"""The sentences that read lesson 12's measurements: the page cache a second process finds warm,
what RSS and PSS charge each process that maps the dataset, who paid for the reads in a two-rank
run, and 1 against 2 processes (and 1 against 2 threads each), every comparison a verdict of
:func:`gpufeed.measure.verdict.compare` on runs taken in turns. Counts (page faults, bytes) are read
as they are; a cause the page did not measure is worded as one likely cause, not measured here.
Taught in ``notebooks/12_scaling.ipynb`` (sections 4 and 5, exercise 2).

Example:
    >>> span([2, 2, 3])
    '2 to 3'
    >>> mib(3 * 2**20)
    '3.0 MiB'
"""

from __future__ import annotations

import math
import statistics

from gpufeed.measure.verdict import (
    CANNOT_TELL,
    FASTER,
    NOT_MEASURED,
    SAME,
    SLOWER,
    advice,
    compare,
)


def span(xs) -> str:
    """``"2"`` where every value is 2, ``"2 to 3"`` otherwise: counts over several rounds or ranks."""
    lo, hi = min(xs), max(xs)
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def mib(n: float) -> str:
    """Bytes in MiB, one decimal."""
    return f"{n / 2**20:.1f} MiB"


def read_cold_warm(rounds: dict) -> str:
    """Reads :func:`gpufeed.course.lesson12.pagecache.cold_then_warm`: whether the cache was dropped,
    what each process found cached and the major faults (reads from the disk) it took, and the
    second process's time against the first's, round by round (a verdict, paired)."""
    first, second = rounds["first"], rounds["second"]
    found = [r["resident_before"] for r in first]
    if not rounds["dropped"] or None in found or statistics.median(found) >= 0.5:
        return ("This machine kept the file cached despite the request to drop it (some file systems do), so both "
                "processes found it warm, and this run cannot show who pays for the reads.")
    v = compare([r["seconds"] for r in second], [r["seconds"] for r in first], paired=True)
    n = len(first)
    return (f"{'In each of ' + str(n) + ' rounds' if n > 1 else 'In one round'}, after the file was dropped from the "
            f"cache, the first process found {max(found):.0%} of it cached and took {span([r['major'] for r in first])} "
            f"major faults, reads from the disk; the second found {min(r['resident_before'] for r in second):.0%} "
            f"cached, read by the first, and took {span([r['major'] for r in second])}. Touching every page, the "
            f"second {v.ran('the first')}." + (" " + v.advice if v.kind == CANNOT_TELL else ""))


def read_memory(readers: list[dict], file_bytes: int) -> str:
    """Reads :func:`gpufeed.course.lesson12.pagecache.shared_readers`: each process's RSS of the file
    against its PSS, summed over the processes, against the file's size."""
    n = len(readers)
    if not readers or any(r.get("rss") is None for r in readers):
        return "This OS reports no RSS and PSS per mapping (Linux's /proc/<pid>/smaps): not measured here."
    rss, pss = sum(r["rss"] for r in readers), sum(r["pss"] for r in readers)
    if pss <= 0:
        return f"The {n} processes' mappings held no pages of the file: nothing to add up."
    return (f"{n} processes each mapped the {mib(file_bytes)} file and touched every page. Each one's RSS counts "
            f"{mib(statistics.median(r['rss'] for r in readers))} for it, {mib(rss)} added up: {rss / pss:.1f} times "
            f"the {mib(pss)} their PSS adds up to, which splits each page among the processes that map it and so "
            f"comes to the file's size, the one copy the page cache holds.")


def _later_from_the_other(ranks: list[dict]) -> list[int] | None:
    """Per rank: samples it read in its second epoch of loading that it had not read in its first
    (so that another rank had: the shards cover the dataset); None where indices were not kept."""
    out = []
    for r in ranks:
        epochs = r["phases"]["load"]["epochs"]
        if len(epochs) < 2 or epochs[0].get("indices") is None or epochs[1].get("indices") is None:
            return None
        out.append(len(set(epochs[1]["indices"]) - set(epochs[0]["indices"])))
    return out


def read_faults(doc: dict, dropped: bool) -> str:
    """Reads the page faults of a multi-rank run of :mod:`gpufeed.course.lesson12.distributed`
    started after the dataset was dropped from the page cache: what each rank found cached, the
    major faults of its first epoch of loading and of every epoch after it, and how many samples
    each read later that only another rank had read before."""
    ranks = sorted(doc["ranks"], key=lambda r: r["rank"])
    cached = [r.get("resident", [None])[0] for r in ranks]
    if not dropped or None in cached or max(cached) >= 0.5:
        return ("The file was cached when the ranks started (the request to drop it did not take), so this run "
                "cannot show who pays for the reads.")
    first = [r["phases"]["load"]["epochs"][0]["major"] for r in ranks]
    later = [sum(e["major"] for e in r["phases"]["load"]["epochs"][1:]) for r in ranks]
    epochs = len(ranks[0]["phases"]["load"]["epochs"]) - 1
    names = " and ".join(f"rank {r['rank']} took {x}" for r, x in zip(ranks, first))
    text = (f"After the drop, the ranks found {span([round(100 * c) for c in cached])}% of the file cached when they "
            f"started. In the first epoch, each reading its own shard, {names} major faults, reads from the disk: "
            "few against the file's pages (one likely cause, not measured here: each read brings in more than its "
            "page, as the kernel reads ahead).")
    other = _later_from_the_other(ranks)
    if sum(later) == 0:
        text += f" In the {epochs} epochs after it, none took a major fault"
        text += (": in the second epoch " + " and ".join(f"rank {r['rank']} read {x} samples" for r, x in zip(ranks, other))
                 + " that only another rank had read before, and found them in the page cache they share."
                 if other else ": what a rank read that another had read before was in the page cache they share.")
    else:
        text += (f" In the {epochs} epochs after it they still took {span(later)} major faults each: pages were read "
                 "from the disk again (one likely cause, not measured here: the page cache did not keep the file).")
    return text


def read_scaling(two: dict, one: dict, phases=("load", "train"), short_because: str = "") -> str:
    """2 processes against 1, phase by phase, from :func:`gpufeed.course.lesson12.forked.in_turns`
    (``two`` and ``one``: its measurements for each arm): images/s of the ranks together, a verdict
    paired round by round, and, where that is decided, against the ideal 2x (twice one process's rate);
    ``short_because`` (the likely causes, not measured) follows where a phase fell short of it.

    Example:
        >>> from gpufeed.measure.harness import Measurement
        >>> quiet = [1.0, 1.01, 0.99, 1.005, 0.995]
        >>> one = {f"{p}, all": Measurement(p, quiet, items=100) for p in ("load", "train")}
        >>> two = {f"{p}, all": Measurement(p, [x / 1.5 for x in quiet], items=100) for p in ("load", "train")}
        >>> print(read_scaling(two, one, phases=("load",)))
        Two processes, each epoch as long as its slower rank, in images/s for the ranks together (5 runs of each, in turns): they load 150 against 100 images/s for one, 1.50x faster (1.50x to 1.50x), short of the ideal 2x.
    """
    said, unsure, short = [], {}, False
    for phase in phases:
        a, b = two[f"{phase}, all"], one[f"{phase}, all"]
        v = compare(a, b, paired=True)
        ideal = compare(a, [s / 2 for s in b.samples], paired=True)  # twice as fast as one: half its time
        what = {FASTER: "more than the ideal 2x, which **cannot be right** for two processes: these runs did not see "
                        "the same machine",
                SAME: f"the ideal 2x (within {math.ceil((ideal.within or 0) * 100 - 1e-9):.0f}%)",
                SLOWER: "short of the ideal 2x", CANNOT_TELL: "and this run cannot tell it from the ideal 2x",
                NOT_MEASURED: ""}[ideal.kind]
        said.append(f"{phase} {a.items_per_s:,.0f} against {b.items_per_s:,.0f} images/s for one, {v.words()}"
                    + (f", {what}" if v.kind in (FASTER, SAME) else ""))
        doing = _ING.get(phase, phase)
        if v.kind == CANNOT_TELL:
            unsure[f"two processes' {doing} from one's"] = v
        elif v.kind == FASTER and ideal.kind == CANNOT_TELL:
            unsure[f"two processes' {doing} from the ideal 2x"] = ideal
        short = short or v.kind in (SAME, SLOWER) or (v.kind == FASTER and ideal.kind == SLOWER)
    rounds = len(two[f"{phases[0]}, all"].samples)
    said_once = advice(unsure)
    return (f"Two processes, each epoch as long as its slower rank, in images/s for the ranks together ({rounds} "
            f"run{'s' if rounds > 1 else ''} of each, in turns): they " + "; they ".join(said) + "."
            + (f" {said_once}" if said_once else "") + (f" {short_because}" if short and short_because else ""))


#: A phase of the script as a noun, for what a run could not tell.
_ING = {"load": "loading", "train": "training"}


def read_threads(two_threads: dict, one_thread: dict, cores: int) -> str:
    """Exercise 2: two processes with two torch threads each against the same two with one thread
    each (runs in turns), phase by phase; once, what would tell where a phase cannot."""
    v = {phase: compare(two_threads[f"{phase}, all"], one_thread[f"{phase}, all"], paired=True)
         for phase in ("load", "train")}
    said = [f"{phase} {x.ran('the same two with one thread each')}" for phase, x in v.items()]
    slower = any(x.kind == SLOWER for x in v.values())
    said_once = advice({f"{_ING[p]} with two threads each from one": x for p, x in v.items()})
    return (f"With two threads in each of two processes, four threads for {cores} cores: " + "; ".join(said) + "."
            + (" One likely cause, not measured here: each parallel operation waits for its slowest thread, and a "
               "thread that waits for a core holds up its whole team." if slower else "")
            + (f" {said_once}" if said_once else ""))
