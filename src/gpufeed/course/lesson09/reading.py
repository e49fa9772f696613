"""Sentences that read lesson 09's measurements, whichever way they point.

Every comparison here is a verdict of the one method (:mod:`gpufeed.measure.verdict`): arms timed
in turns, the ratio of medians with its interval, and faster, slower, the same, or "this run cannot
tell". A cause is stated only where the page measured it; otherwise the sentence says "one likely
cause, not measured here". Each reading has a ``*_verdicts`` function that returns the verdicts it
words, keyed by the question they answer, so that a test can check that one page never answers a
question both ways.

* :func:`section1`: the usual pipeline (per sample, in CPU workers) against the batched one and a
  Python loop over the batch; :func:`reference_headline`: our GPU reference's answer to the same
  question, for a machine without a GPU;
* :func:`late_convert`: ``uint8`` out of the workers, converted at the last step, against the usual;
* :func:`change` and :func:`tail_reading`: the eager pointwise tail against ``torch.compile``'s, with
  its share of a batch;
* :func:`reference_reading`: the committed GPU reference, section 4;
* :func:`batch_size_reading`: exercise 2, each version at two batch sizes.

Taught in ``notebooks/09_augment.ipynb``.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> usual = Measurement("usual", [1.0, 1.01, 0.99, 1.0, 1.02], items=64)
    >>> both = Measurement("both", [0.5, 0.51, 0.49, 0.5, 0.5], items=64)
    >>> print(late_convert(usual, both, cuda=True))
    Converting at the last step: 128 images/s against the usual pipeline's 64, timed in turns: **2.00x faster** than the usual pipeline (1.98x to 2.04x). One likely cause, not measured here: the workers hand over a quarter of the bytes, and the conversion runs once on a whole batch on the GPU.
    >>> change(26, 4), change(-1, 0), change(3, 3)
    ('6.50x fewer', 'none in either', 'as many')
"""

from __future__ import annotations

from gpufeed.measure import verdict
from gpufeed.measure.verdict import FASTER, LIKELY_START, SAME, SLOWER, Verdict, advice, compare
from gpufeed.measure.wording import sentences, times


def rate(m) -> str:
    """A measurement's median rate in images/s, as the lesson prints it: ``"2,860"``."""
    return f"{m.items_per_s:,.0f}"


# --- section 1 ----------------------------------------------------------------------------------

#: Section 1's questions, as :func:`advice` words them.
BATCHED_WORKERS, BATCHED_LOOP, LOOP_WORKERS = ("the batched version from the workers", "the batched version from the loop",
                                               "the loop from the workers")
ALL_ONE, ALL_WORKERS = "the batched version on all threads from one thread", "the batched version on all threads from the workers"


def section1_verdicts(usual, loop, batched, batched_all=None) -> dict[str, Verdict]:
    """Section 1's questions, each a verdict on arms timed in turns, keyed as :func:`advice` words
    them; :data:`ALL_ONE` and :data:`ALL_WORKERS` only with ``batched_all`` (the batched version on
    every thread)."""
    out = {BATCHED_WORKERS: compare(batched, usual, paired=True),
           BATCHED_LOOP: compare(batched, loop, paired=True),
           LOOP_WORKERS: compare(loop, usual, paired=True)}
    if batched_all is not None:
        out[ALL_ONE] = compare(batched_all, batched, paired=True)
        out[ALL_WORKERS] = compare(batched_all, usual, paired=True)
    return out


def section1(usual, loop, batched, batched_all=None, *, cores: int, cuda: bool, threads: int | None = None) -> str:
    """Section 1's reading: the usual pipeline's ``cores`` workers against the batched version and a
    Python loop over the batch, on the GPU (``cuda``) or on one CPU thread; on a CPU with several
    threads, ``batched_all`` is the batched version on all of them.

    Args:
        usual, loop, batched, batched_all: :class:`~gpufeed.measure.harness.Measurement` objects of
            one epoch each, timed in turns (as many samples each); ``batched_all`` may be None.
        cores: the workers of the usual pipeline. cuda: the in-process versions ran on a GPU.
        threads: torch's threads for ``batched_all``.
    """
    v = section1_verdicts(usual, loop, batched, batched_all)
    dev = "the GPU" if cuda else "one CPU thread"
    text = (f"The {cores} CPU workers made {rate(usual)} images/s ({usual.items_per_s / cores:,.0f} per core), a "
            f"Python loop over the batch on {dev} {rate(loop)}, and the batched version on {dev} {rate(batched)}: "
            f"{v[BATCHED_WORKERS].words('the workers', bold=True)} and {v[BATCHED_LOOP].words('the loop')}.")
    if cuda:  # the loop ran on the GPU: read it against the workers too
        return sentences(text, f"Image by image, the GPU's loop {v[LOOP_WORKERS].ran('the workers')}.",
                     _batched_lost(v, cuda), advice(v))
    hand_over = (f"{LIKELY_START} each worker also collates a float32 batch and hands it over to this process (4 bytes a "
                 "value), work that one process does not do.")
    text = sentences(text, f"The loop, on one thread, {v[LOOP_WORKERS].ran(f'the {cores} workers')}.")
    if v[LOOP_WORKERS].kind == FASTER:  # one core beat every core's worker: the cause once, here
        text, hand_over = sentences(text, hand_over), ""
    if batched_all is not None:
        on = f"{threads} threads" if threads else "all of torch's threads"
        text = sentences(text, f"On {on} the batched version made {rate(batched_all)} images/s: "
                           f"{v[ALL_ONE].words('one thread')} and {v[ALL_WORKERS].words('the workers')}.")
    best = v[ALL_WORKERS] if batched_all is not None else v[BATCHED_WORKERS]
    if best.kind == FASTER:
        text = sentences(text, f"On this CPU one process did more than {cores} workers.", hand_over)
    elif best.kind == SLOWER:
        text = sentences(text, f"On this CPU the batched version did not catch the {cores} workers"
                           + (", even on every thread." if batched_all is not None else "."))
    elif best.kind == SAME:
        text = sentences(text, "On this CPU neither way is ahead.")
    return sentences(text, _batched_lost(v, cuda), advice(v))


def _batched_lost(v: dict[str, Verdict], cuda: bool) -> str:
    """Section 1's likely cause where the batched version lost to the loop over the batch; "" otherwise."""
    if v[BATCHED_LOOP].kind != SLOWER:
        return ""
    return (f"The batched version lost to the loop. {LIKELY_START} its dense resampling matrices make every output pixel "
            "weigh a whole input row, work that a per-image resize skips; " + (
                "exercise 2 times a larger batch, over which its costs per batch are spread."
                if cuda else "a GPU does that arithmetic far faster than one core (section 4)."))


def _named(ms, *prefixes: str) -> dict:
    """The measurements of a committed reference by the start of their names (names carry core counts)."""
    return {p: next((m for m in ms if m.name == p), None) or next((m for m in ms if m.name.startswith(p)), None)
            for p in prefixes}


def _machine(doc: dict) -> str:
    return (f"{doc['machine'].get('gpu')}, {doc['cores']} CPU cores, {doc['n_images']} images of "
            f"{doc['stored'][0]}x{doc['stored'][1]} to {doc['out_size'][0]}x{doc['out_size'][1]}")


def _timed(doc: dict) -> str:
    """How a reference timed its arms, as a clause: ``", its arms timed in turns"``."""
    return (", its arms timed in turns" if doc.get("in_turns") else
            ", its arms timed one after another rather than in turns (each interval resamples them apart)")


def reference_headline(ref) -> str:
    """Section 1's question answered by our committed GPU reference (``(measurements, document)`` of
    :func:`gpufeed.measure.results.reference`), for a page without a GPU; "" where none is committed.

    A reference saved with ``in_turns`` (today's lesson saves it) is read as pairs; an older one,
    whose arms were timed one after the other, is resampled apart, and the sentence says so.
    """
    if ref is None:
        return ""
    ms, doc = ref
    n = _named(ms, "per sample,", "batched,")
    if None in n.values():
        return ""
    v = compare(n["batched,"], n["per sample,"], paired=bool(doc.get("in_turns")))
    return (f"On a GPU, our reference ({_machine(doc)}) answers the same question{_timed(doc)}: the {doc['cores']} CPU workers "
            f"made {rate(n['per sample,'])} images/s, the batched version on the GPU {rate(n['batched,'])}: "
            f"{v.words('the workers', bold=True)}; section 4 shows the rest.")


# --- section 3 ----------------------------------------------------------------------------------

def late_convert(usual, both, *, cuda: bool) -> str:
    """Section 3's first reading: ``uint8`` from the workers, converted and normalised at the last step
    (``both``), against the usual pipeline (``usual``), the two timed in turns."""
    v = compare(both, usual, paired=True)
    text = (f"Converting at the last step: {rate(both)} images/s against the usual pipeline's {rate(usual)}, "
            f"timed in turns: {v.words('the usual pipeline', bold=True)}.")
    if v.kind == FASTER:
        text = sentences(text, f"{LIKELY_START} the workers hand over a quarter of the bytes, and the conversion runs once on "
                           "a whole batch" + (" on the GPU." if cuda else "."))
    elif v.kind == SLOWER:
        text = sentences(text, f"{LIKELY_START} without a GPU the 'device' is this process, on the cores the workers use, so "
                           "the conversion moved out of the workers competes with them; with a GPU the last step "
                           "runs there." if not cuda else
                     "Slower, although the last step ran on the GPU: rerun on an idle machine before reading more.")
    return sentences(text, advice({"the two pipelines apart": v}))


def change(before: int, after: int) -> str:
    """How a count changed, in words that fit either direction. Counts are what profiling one call
    counted less what profiling an empty call counted, so noise can make one negative: below 0
    reads as 0 (no ratio of counts of opposite signs).

    Example:
        >>> change(0, 0), change(5, 0), change(0, 3), change(4, 8), change(-2, 3)
        ('none in either', 'all gone', 'none before, 3 after', '2.00x more', 'none before, 3 after')
    """
    before, after = max(before, 0), max(after, 0)
    if before == after:
        return "none in either" if before == 0 else "as many"
    if 0 in (before, after):
        return "all gone" if after == 0 else f"none before, {after} after"
    return times(before / after, more="fewer", less="more")


def tail_reading(eager, compiled, counts: dict, *, per_batch_s: float | None, cuda: bool, waits: str,
                 plain=None, note: str = "") -> str:
    """Section 3's second reading: the eager pointwise tail against the compiled one (timed in turns),
    what the profiler counted for each, and the tail's share of a whole batch (:func:`share_of_batch`).

    Args:
        eager, compiled: Measurements of one call each, in turns; ``compiled`` None where
            ``torch.compile`` was not measured (``note`` says why).
        counts: ``{"eager": {what: n}, "torch.compile": {what: n}}``, profiled per call (the idle
            profile already subtracted; below 0 reads as 0).
        per_batch_s: seconds a whole batch took in section 1's batched version on the same device and
            threads, or None.
        cuda: on a GPU (kernels and host waits counted) or a CPU (operators counted).
        waits: the key of ``counts`` that holds the host waits, on a GPU.
        plain: the eager tail without the jitter (section 1's own tail), timed in the same turns, or None.
    """
    listed = "; ".join(f"{name}: " + ", ".join(f"{max(n, 0)} {k}" for k, n in c.items()) for name, c in counts.items())
    if compiled is None:
        return f"{listed}. Eager tail: {rate(eager)} images/s; torch.compile not measured ({note})."
    v = compare(compiled, eager, paired=True)
    text = (f"{listed}. The compiled tail made {rate(compiled)} images/s against the eager one's {rate(eager)}, timed "
            f"in turns: {v.words('the eager one', bold=True)}.")
    for what in counts["eager"]:  # the same keys for both
        before, after = counts["eager"][what], counts["torch.compile"][what]
        text = sentences(text, f"{what}: {max(before, 0)} -> {max(after, 0)} ({change(before, after)}).")
    fewer = [k for k in counts["eager"] if max(counts["torch.compile"][k], 0) < max(counts["eager"][k], 0)]
    if v.kind == FASTER:
        if not cuda:
            why = "fewer passes over the batch: the compiled tail runs its pointwise steps as generated loops"
        elif max(counts["eager"].get(waits, 0), 0) == 0:
            why = "the fusion, fewer kernels and so fewer passes over the batch; neither tail makes the host wait"
        elif waits in fewer:
            why = "fewer kernels, and fewer host waits"
        else:
            why = (f"fewer kernels; the {counts['eager'][waits]} host wait(s) per call stayed, so compiling did "
                   "not remove them")
        text = sentences(text, f"{LIKELY_START} {why}.", share_of_batch(eager, compiled, per_batch_s, plain))
    elif v.kind in (SAME, SLOWER):
        text = sentences(text, ("Not faster here" + (", despite the fewer operators or kernels." if fewer else ".")))
    return sentences(text, advice({"the two tails apart": v}))


def share_of_batch(eager, compiled, per_batch_s: float | None, plain=None) -> str:
    """The jittered tail's share of a whole batch, and what compiling it saves of one: arithmetic on
    medians of different cells, said as such; "" where the batch time is unknown.

    Section 1's batches run a tail without the jitter. With ``plain`` (that tail, timed here) a batch
    with the jitter is section 1's batch less ``plain`` plus ``eager``; without it, section 1's batch is
    shorter than one with the jitter, so the share and the gain are upper bounds.

    Example:
        >>> from gpufeed.measure.harness import Measurement
        >>> e, c = Measurement("e", [0.000532], items=64), Measurement("c", [0.000107], items=64)
        >>> share_of_batch(e, c, 0.003137)
        'The eager tail took 0.53 ms; a whole batch of section 1, whose tail skips the jitter, took 3.14 ms, so the tail is at most 17% of a batch with the jitter, and compiling it (0.43 ms saved) makes such a batch at most about 1.16x faster (14% less time): worked out from the timings, not measured end to end.'
        >>> print(share_of_batch(e, c, 0.003137, plain=Measurement("p", [0.000132], items=64)))
        A batch of section 1 took 3.14 ms with a tail that skips the jitter (0.13 ms); with this one (0.53 ms) it would take 3.54 ms, 15% of it the tail. Compiling saves 0.43 ms: such a batch would run about 1.14x faster (12% less time), worked out from the timings, not measured end to end.
    """
    if not per_batch_s:
        return ""
    tail_s, saved = eager.median, eager.median - compiled.median
    batch_s = per_batch_s + (tail_s - plain.median if plain is not None else 0.0)
    if tail_s >= batch_s or (plain is not None and plain.median >= per_batch_s):
        return ("The tails alone took as long as a whole batch of section 1: the two were timed in different "
                "cells, so this run does not give the tail's share of a batch.")
    cut, ms = saved / batch_s, lambda s: f"{s * 1e3:.2f} ms"
    gain = times(1 / (1 - cut))
    if plain is None:
        return (f"The eager tail took {ms(tail_s)}; a whole batch of section 1, whose tail skips the jitter, took "
                f"{ms(per_batch_s)}, so the tail is at most {tail_s / batch_s:.0%} of a batch with the jitter, and "
                f"compiling it ({ms(saved)} saved) makes such a batch at most about {gain} ({cut:.0%} less time): "
                "worked out from the timings, not measured end to end.")
    return (f"A batch of section 1 took {ms(per_batch_s)} with a tail that skips the jitter ({ms(plain.median)}); "
            f"with this one ({ms(tail_s)}) it would take {ms(batch_s)}, {tail_s / batch_s:.0%} of it the tail. "
            f"Compiling saves {ms(saved)}: such a batch would run about {gain} ({cut:.0%} less time), worked out "
            "from the timings, not measured end to end.")


# --- section 4: the committed reference ---------------------------------------------------------

_REF = ("per sample,", "per-sample loop", "batched,", "uint8 from", "tail, eager", "tail, torch.compile")


def reference_verdicts(ms, in_turns: bool = False) -> dict[str, Verdict]:
    """The reference's questions, keyed as :func:`advice` words them: as pairs where its arms were
    timed ``in_turns``, else resampled apart (the reference of an older lesson timed them one after
    another)."""
    n = _named(ms, *_REF)
    return {BATCHED_WORKERS: compare(n["batched,"], n["per sample,"], paired=in_turns),
            BATCHED_LOOP: compare(n["batched,"], n["per-sample loop"], paired=in_turns),
            "the late conversion from the usual pipeline": compare(n["uint8 from"], n["per sample,"]),
            "the two tails apart": compare(n["tail, torch.compile"], n["tail, eager"], paired=in_turns)}


def reference_reading(ms, doc: dict) -> str:
    """Section 4's reading of our committed GPU reference: every comparison the lesson makes, on the
    GPU that ran it, and the compiled tail's share of a batch there."""
    n = _named(ms, *_REF)
    v = reference_verdicts(ms, bool(doc.get("in_turns")))
    text = (f"On {_machine(doc)}{_timed(doc)}: the {doc['cores']} CPU workers made {rate(n['per sample,'])} images/s, a "
            f"per-sample loop on the GPU {rate(n['per-sample loop'])}, and the batched version on the GPU "
            f"{rate(n['batched,'])}: {v[BATCHED_WORKERS].words('the workers')} and "
            f"{v[BATCHED_LOOP].words('the loop')}. uint8 from the workers, finished on the GPU: "
            f"{rate(n['uint8 from'])} images/s, "
            f"{v['the late conversion from the usual pipeline'].words('the usual pipeline')}.")
    if n["tail, torch.compile"] is not None:
        kernels = {name: cs.get("GPU kernels and copies") for name, cs in doc.get("counts", {}).items()}
        text = sentences(text, f"The torch.compile'd tail {v['the two tails apart'].ran('the eager one')}" + (
            f", {kernels['eager']} GPU kernels and copies per call to {kernels['torch.compile']}."
            if None not in kernels.values() and len(kernels) == 2 else "."))
        batches = -(-doc["n_images"] // doc["batch_size"])
        text = sentences(text, share_of_batch(n["tail, eager"], n["tail, torch.compile"], n["batched,"].median / batches)
                     .replace("of section 1", "of its section 1"))
    return sentences(text, advice(v))


# --- exercise 2 ---------------------------------------------------------------------------------

#: Why a version may run faster or slower at a larger batch: likely causes, none measured by the exercise.
WHY = {("batched", FASTER): "its cost per batch (drawing the parameters, building the matrices, Python) is "
                            "spread over more images, while its matrix work per image stays",
       ("batched", SLOWER): "larger matrices and batches, which fit the CPU's caches less well",
       ("workers", FASTER): "fewer batches to hand over between processes",
       ("workers", SLOWER): "fewer batches to share among the workers",
       ("loop", FASTER): "fewer batches an epoch, so fewer parameter draws and gathers, while its work per image stays",
       ("loop", SLOWER): "the float32 batch it stacks grows with the batch and fits the CPU's caches less well"}


def batch_size_verdicts(pairs: dict) -> dict[str, Verdict]:
    """Exercise 2's questions, keyed as :func:`advice` words them: each version at the larger batch
    against the smaller, the two timed in turns."""
    return {f"{name} at the two sizes": compare(b, a, paired=True) for name, (a, b) in pairs.items()}


def _possessive(words: str) -> str:
    """``"the loop's"``, ``"the workers'"``."""
    return words + ("'" if words.endswith("s") else "'s")


def across_cells(earlier: dict, here: dict, where: str = "section 1", setting: str = "at this batch size",
                 called: dict | None = None) -> str:
    """Why rates of one arm from two cells are not compared, in the numbers: ``earlier`` and ``here``
    map a version's name to its Measurement (one epoch each) in the two cells, ``where`` and here,
    both ``setting``; each rate here is set against the range ``earlier``'s own epochs spanned.
    ``called``: a version's name in words (default ``"the <name>"``). "" without a version in both.
    Lesson 10's exercise 2 uses it too.

    Example:
        >>> from gpufeed.measure.harness import Measurement
        >>> e = {"workers": Measurement("w", [0.20, 0.25, 0.32], items=512)}
        >>> print(across_cells(e, {"workers": Measurement("w", [0.30], items=512)}))
        Section 1 timed the workers at this batch size too: 2,048 images/s there, 1,707 here, inside the range its own epochs spanned there (1,600 to 2,560): two cells' rates are no further apart than one cell's epochs, so only arms timed in turns are compared.
    """
    names = [n for n in here if earlier.get(n) is not None and here[n] is not None]
    if not names:
        return ""
    called = {n: (called or {}).get(n, f"the {n}") for n in names}
    span = {n: (earlier[n].items / max(earlier[n].samples), earlier[n].items / min(earlier[n].samples)) for n in names}
    outside = [n for n in names if not span[n][0] <= here[n].items_per_s <= span[n][1]]
    def listed(words: list[str]) -> str:
        return ", ".join(words[:-1]) + (" and " if len(words) > 1 else "") + words[-1]

    text = (f"{where.capitalize()} timed {listed([called[n] for n in names])} {setting} too: "
            f"{listed([rate(earlier[n]) for n in names])} images/s there, {listed([rate(here[n]) for n in names])} here")
    if not outside:
        ranges = "; ".join(f"{span[n][0]:,.0f} to {span[n][1]:,.0f}" for n in names)
        return (text + f", {'each ' if len(names) > 1 else ''}inside the range its own epochs spanned there ({ranges}): two "
                "cells' rates are no further apart than one cell's epochs, so only arms timed in turns are compared.")
    said = "; ".join(f"{_possessive(called[n])} {rate(here[n])} lies outside the {span[n][0]:,.0f} to {span[n][1]:,.0f} its epochs "
                     f"spanned in {where}" for n in outside)
    return (text + f". {said[0].upper()}{said[1:]}: the two cells ran at different times beside different arms, and "
            "this page does not say which made the difference; only arms timed in turns are compared.")


def batch_size_reading(pairs: dict, *, small: int, big: int, batches: int, cores: int, all_images: bool,
                       earlier: dict | None = None) -> str:
    """Exercise 2's reading: each version at batch ``small`` and ``big``, the two timed in turns.

    Args:
        pairs: version name (``"workers"``, ``"loop"``, ``"batched"``) to ``(at small, at big)``
            Measurements of one epoch each.
        batches: batches an epoch holds at ``big``. cores: the workers.
        all_images: ``big`` is every image this mode has (fewer than asked for).
        earlier: version name to section 1's Measurement of it at ``small`` (:func:`across_cells`);
            None: no word on section 1's rates.
    """
    vs = batch_size_verdicts(pairs)
    v = {name: vs[f"{name} at the two sizes"] for name in pairs}
    lines = [f"{name:>8}: {rate(a)} images/s at batch {small}, {rate(b)} at {big}: {v[name].words(f'batch {small}')}"
             for name, (a, b) in pairs.items()]
    moved = [name for name in v if v[name].kind in (FASTER, SLOWER)]
    text = (f"At batch {big}" + (" (every image this mode has)" if all_images else "") + ", an epoch holds "
            f"{batches} batch{'es' if batches != 1 else ''} for {cores} workers. ")
    text += " ".join(f"{name.capitalize()} ran {v[name].words()}: {verdict.LIKELY_START} {WHY[(name, v[name].kind)]}."
                     for name in moved) if moved else f"No version ran faster or slower than at batch {small} here."
    return "\n".join(lines) + "\n" + sentences(text, advice(vs), across_cells(
        earlier or {}, {name: a for name, (a, _) in pairs.items()}, called={"batched": "the batched version"}))
