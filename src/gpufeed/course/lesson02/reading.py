"""The sentences lesson 02 prints about what it timed, each from a verdict.

Every comparison goes through :func:`gpufeed.measure.verdict.compare`, with the two arms timed in
turns: a lazy ``map`` against decoding (:func:`lazy_reading`), a first call against the calls
after it (:func:`first_reading`), a timer without a CUDA sync against one with it
(:func:`sync_reading`), ``torch.utils.benchmark.Timer`` against the course's harness
(:func:`tools_agree`), ``torch.stack`` against :func:`gpufeed.data.jpeg.collate_images`
(:func:`collate_reading`), and the verdicts side by side (:func:`verdict_table`, section 8's lesson).
A cause is stated only where the lesson measured it. Taught in ``notebooks/02_profiling.ipynb``.

Example:
    >>> from gpufeed.measure.verdict import compare
    >>> v = compare([2.0, 2.1, 1.9, 2.0, 2.05], [1.0, 1.02, 0.98, 1.0, 1.01], paired=True)
    >>> first_reading(v, "the first batch", "the batches after it")
    'The first batch took **2.00x longer** than the batches after it (1.94x to 2.06x).'
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufeed.measure.verdict import (
    CANNOT_TELL,
    FASTER,
    LIKELY,
    LIKELY_START,
    MIN_SAMPLES,
    NOT_MEASURED,
    SAME,
    SLOWER,
    Verdict,
    advice,
    what_would_tell,
)
from gpufeed.measure.wording import sentences

#: Words for durations: a shorter time is the gain.
TIME_WORDS = {"more": "shorter", "less": "longer", "same": "as long"}


def places(v: Verdict) -> int:
    """Decimals a ratio of noisy timings can carry, by its size: 2 below 10x, 1 below 100x, none above.

    Example:
        >>> [places(Verdict(r, r, r, 5, FASTER)) for r in (1.5, 1 / 40, 3e4)]
        [2, 1, 0]
    """
    value = max(v.ratio, 1 / v.ratio) if v.ratio else 1.0
    return 2 if value < 10 else 1 if value < 100 else 0


def lazy_reading(v: Verdict, images: int, lazy_s: float, eager_s: float) -> str:
    """Mistake 1: ``v`` is decoding for real against creating the lazy ``map`` (times)."""
    head = f"'Decoding' {images} images lazily: {lazy_s * 1e9:,.0f} ns. Really decoding them: {eager_s * 1e3:.1f} ms"
    if v.kind == SLOWER:
        return f"{head}, {v.words('', bold=True, digits=places(v), **TIME_WORDS)}: the lazy time measured nothing."
    if v.decided:  # decoding as fast as making a map object: not what happens, but say what was measured
        return f"{head}, {v.words('', digits=2, **TIME_WORDS)}: this run's timer did not see the work; run it again."
    return f"{head}. {v.advice_on('the real decode from the lazy time') or 'The two were not compared.'}"


def first_reading(v: Verdict, first: str, rest: str, cause: str = "") -> str:
    """A first call against the calls after it (``v``: first against rest, times), as a sentence on
    ``first`` ("the first step") and ``rest`` ("the steps after it"). ``cause``: what the first call
    pays for, not measured here (said only where the first call took longer)."""
    if v.kind == NOT_MEASURED:
        return f"{first[:1].upper()}{first[1:]} was not measured here."
    if v.kind == CANNOT_TELL:
        return v.advice_on(f"{first} from {rest}")
    text = f"{first[:1].upper()}{first[1:]} took {v.words(rest, bold=True, **TIME_WORDS)}."
    if v.kind == SLOWER and cause:
        text += f" {LIKELY_START} {cause}."
    elif v.kind != SLOWER:
        text += " Here the first call paid nothing that shows: whatever it sets up was already set up."
    return text


def sync_reading(v: Verdict, gpu: str) -> str:
    """Mistake 3: ``v`` is the timer stopped without a sync against the one stopped after
    ``torch.cuda.synchronize()`` (times), on ``gpu``."""
    if v.kind == NOT_MEASURED:
        return f"On {gpu}, the two timers were not measured."
    if v.kind == CANNOT_TELL:
        return f"On {gpu}: {v.advice_on('the timer without a sync from the one with it')}"
    text = f"On {gpu}, the timer without a sync read {v.words('the one with a sync', bold=True, **TIME_WORDS)}"
    if v.kind == FASTER:
        return text + ": it timed the queueing, not the work."
    return text + (f": the host waited for the work anyway ({LIKELY} the queue "
                   "was full, so each launch waited for room)." if v.kind == SAME else
                   ": one run cannot say why; run the cell again.")


def tools_agree(v: Verdict, rounds: int) -> str:
    """``Timer``'s median against the harness's, taken in turns (``v``: harness against Timer)."""
    if v.kind == NOT_MEASURED:
        return "The two tools were not compared here."
    head = f"Timed in turns, {rounds} rounds each, the harness read "
    if v.kind == SAME:
        return head + f"{v.words('Timer', same='the same', bold=True)}: the same work gives the same answer."
    if v.kind == CANNOT_TELL:
        return v.advice_on(f"the harness from Timer, timed in turns ({rounds} rounds each)")
    return (head + f"{v.words('Timer', bold=True, **TIME_WORDS)}: the two tools disagree beyond this run's noise. "
            f"{LIKELY_START} they count different things (the harness times one call per "
            "sample; Timer, blocks of calls, then divides).")


def collate_reading(v: Verdict, images: int, megabytes: float) -> str:
    """``torch.stack`` of decoded views against :func:`gpufeed.data.jpeg.collate_images` (times)."""
    if v.kind == NOT_MEASURED:
        return "The two collates were not compared here."
    if v.kind == CANNOT_TELL:
        return v.advice_on(f"torch.stack from collate_images on {images} images")
    text = f"Stacking {images} decoded images ({megabytes:.1f} MB), torch.stack took {v.words('collate_images', bold=True, **TIME_WORDS)}"
    if v.kind == SLOWER:
        return (text + ". Both copy every byte once; torch.stack writes each image's bytes to new places "
                "(the strides above), collate_images writes them in the order they lie.")
    return text + ": on this machine the transposing copy cost nothing that shows."


def aa_reading(v: Verdict) -> str:
    """An A/A test: one function timed in turns against itself, where the truth is "the same"."""
    if v.kind == SAME:
        return f"The A/A test reads {v.words('itself', same='the same')}: the method invents no difference."
    if v.kind == CANNOT_TELL:
        if v.samples < MIN_SAMPLES:
            return f"The A/A test: {v.advice_on('collate_images from itself')}"
        return (f"Even one function against itself was {v.words('itself')}: calls this short move by more than 10% "
                f"here, so a smaller difference than that is not told; {what_would_tell()}.")
    if v.kind == NOT_MEASURED:
        return "The A/A test was not run."
    return (f"The A/A test reads a difference where there is none ({v.words('itself')}): a 90% interval misses "
            f"about one time in ten; {LIKELY} the arms' places within each round, or a burst of other work on one "
            "arm's turns. A difference between two real arms no larger than this one is not believed from one run.")


def verdict_table(rows: Mapping[str, Verdict]) -> str:
    """Verdicts side by side, one question per line: samples per arm, ratio, interval, verdict.

    Example:
        >>> print(verdict_table({"a against b": Verdict(2.0, 1.8, 2.2, 5, FASTER, True)}))
        A against B  samples  ratio  interval        verdict
        a against b        5  2.00x  1.80x to 2.20x  faster
    """
    header = ["A against B", "samples", "ratio", "interval", "verdict"]
    lines = [header]
    for question, v in rows.items():
        ratio = "-" if v.ratio is None else f"{v.ratio:.2f}x"
        interval = "-" if v.low is None else f"{v.low:.2f}x to {v.high:.2f}x"
        kind = v.kind + (f" (fewer than {MIN_SAMPLES})" if v.kind == CANNOT_TELL and v.samples < MIN_SAMPLES else "")
        lines.append([question, str(v.samples), ratio, interval, kind])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    right = {1, 2}  # numbers line up on the right
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()
                     for line in lines)


def iter_reading(with_workers: Verdict, in_next: Verdict, start_up: Verdict, ms: Mapping[str, float]) -> str:
    """Exercise 3: where a DataLoader's work lands, from three verdicts on times.

    Args:
        with_workers: ``iter()`` with 2 workers against ``iter()`` with 0.
        in_next: the first ``next()`` with 0 workers against ``iter()`` with 0.
        start_up: ``iter()`` with 2 workers against the first ``next()`` with 2.
        ms: the medians in ms: ``iter0``, ``next0``, ``iter2``, ``next2``.
    """
    said, open_ = [], {}  # the verdicts this run cannot tell, named: their advice is said once
    if with_workers.decided:
        said.append(f"iter() took {ms['iter2']:.1f} ms with 2 workers and {ms['iter0']:.2f} ms with 0: with workers "
                    f"{with_workers.words('with 0', bold=True, digits=places(with_workers), **TIME_WORDS)}.")
    else:
        open_["iter() with 2 workers from iter() with 0"] = with_workers
        said.append("" if with_workers.kind == CANNOT_TELL else "iter() with 2 workers and with 0 were not compared.")
    if in_next.kind == SLOWER:
        said.append(f"With 0 workers the work is in next(): {ms['next0']:.2f} ms, "
                    f"{in_next.words('iter()', digits=places(in_next), **TIME_WORDS)}; timing only iter() measures "
                    "nothing (mistake 1).")
    elif in_next.decided:
        said.append(f"With 0 workers the first next() took {in_next.words('iter()', **TIME_WORDS)}: this dataset's "
                    "batch costs next to nothing.")
    else:
        open_["the first next() from iter() with 0 workers"] = in_next
        said.append("" if in_next.kind == CANNOT_TELL else "With 0 workers, the first next() and iter() were not compared.")
    if start_up.kind == SLOWER:
        said.append(f"With 2 workers most of the start-up landed in iter(), which starts the worker processes: "
                    f"{ms['iter2']:.1f} ms, {start_up.words('the first next()', **TIME_WORDS)}. Timing only the first "
                    "batch would miss it, and timing both together measures the start-up, not the steady state "
                    "(mistake 2).")
    elif start_up.kind == FASTER:
        said.append(f"With 2 workers the first next() took longer: {ms['next2']:.1f} ms, iter() "
                    f"{start_up.words('it', **TIME_WORDS)}. It waits for a worker to start and load, so timing only "
                    "the first batch measures the start-up, not the steady state (mistake 2).")
    elif start_up.kind == SAME:
        said.append(f"With 2 workers iter() took {start_up.words('the first next()', **TIME_WORDS)}: the start-up is "
                    "split between them, and timing either alone misses part of it (mistake 2).")
    else:
        open_["iter() from the first next() with 2 workers"] = start_up
        said.append("" if start_up.kind == CANNOT_TELL else "With 2 workers, iter() and the first next() were not compared.")
    return sentences(*said, advice(open_))
