"""The sentences that read lesson 11's training runs: the two loops, prefetching in training, loader
efficiency checked against what the rates allow, the GPU target, and when the memmap pays back.

Every comparison goes through the one verdict method (:func:`gpufeed.measure.verdict.compare`) on
images/s per sample (:func:`rates`): a sentence says "faster", "slower", "the same within X%" or
"this run cannot tell", and a cause only where the page measured it ("one likely cause, not
measured here: ..." otherwise). Taught in ``notebooks/11_together.ipynb`` (sections 5, 6 and 8).

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> rates(Measurement("course", [0.5, 0.25], items=100))
    [200.0, 400.0]
    >>> model = Measurement("resident", [1.0] * 5, items=100)  # 100 images/s, on batches already there
    >>> loader = Measurement("naive", [1.0] * 5, items=100)    # 100 images/s, timed alone
    >>> serial_rates(model, loader)  # make a batch, then train on it: 50 images/s
    [50.0, 50.0, 50.0, 50.0, 50.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufeed.measure import verdict
from gpufeed.measure.findings import efficiency_bounds
from gpufeed.measure.verdict import Verdict, advice, compare


def rates(m) -> list[float]:
    """Images/s of each sample of a :class:`~gpufeed.measure.harness.Measurement`: its items over
    each sample's seconds (samples of different arms may hold different numbers of images)."""
    return [m.items / s for s in m.samples]


def against(a, b, *, paired: bool = True, scale: float = 1.0) -> Verdict:
    """The verdict on ``a``'s images/s against ``b``'s (times ``scale``: 0.95 compares with 95% of
    ``b``); ``paired`` where the two were timed in turns, in one run. None on a side: not measured."""
    if a is None or b is None:
        return compare(None, None)
    return compare(rates(a), [scale * r for r in rates(b)], paired=paired, higher=True)


def serial_rates(model, loader) -> list[float]:
    """The images/s a loop would reach if nothing overlapped, ``1 / (1 / model + 1 / loader)``,
    sample by sample: the model's samples (on batches already there) with the loader's timed alone.
    The two come from different runs, so sample i of one goes with sample i of the other, as many
    as the shorter has."""
    return [1 / (1 / m + 1 / x) for m, x in zip(rates(model), rates(loader))]


def _pct(v: Verdict) -> str:
    return f"{math.ceil((v.within or 0.0) * 100 - 1e-9):.0f}%"


def _interval(v: Verdict) -> str:
    return f"{v.ratio:.2f} ({v.low:.2f} to {v.high:.2f})"


def read_training(course: Verdict, prefetch: Verdict, alone: Verdict | None, rates_: dict[str, float]) -> str:
    """Section 5's sentences: the course's loop against the naive loop in training, then prefetching
    isolated: the naive loop with a prefetch thread against the same loop without one.

    Args:
        course: the course's loop against the naive loop (training images/s, in turns).
        prefetch: the naive loop with a prefetch thread against it without (training, in turns).
        alone: the ladder's prefetch rung against the rung above it, timed without a model (or None).
        rates_: median images/s by pipeline (``naive``, ``course``).
    """
    text = (f"Same model, data and augmentation, {rates_['course']:,.0f} against {rates_['naive']:,.0f} images/s: the "
            f"course's loop {course.ran('the naive loop', 'trained', bold=True)}.")
    if course.kind == verdict.CANNOT_TELL:
        text += " " + course.advice
    text += (" Prefetching alone, a thread that makes the naive loop's next batch while the model computes, "
             f"{prefetch.ran('the same loop without it', 'trained')}")
    text += {verdict.FASTER: ": with a model step to overlap with, prefetching pays",
             verdict.SAME: ": the thread hid nothing this run could see",
             verdict.SLOWER: ": the thread cost more than it hid here",
             verdict.CANNOT_TELL: "", verdict.NOT_MEASURED: ""}[prefetch.kind]
    if alone is not None and alone.kind != verdict.NOT_MEASURED:
        text += f". Timed alone, with no model step to overlap with (section 4), the prefetch rung {alone.ran('the rung above')}"
    return text + "." + (" " + prefetch.advice if prefetch.kind == verdict.CANNOT_TELL and course.kind != verdict.CANNOT_TELL else "")


@dataclass(frozen=True)
class Check:
    """One pipeline's loader efficiency and what the rates allow it (:func:`check`).

    Attributes:
        name: the pipeline.
        efficiency: its training images/s against the model's on batches already there: ``ratio``
            is the loader efficiency, with its interval.
        serial: its training images/s against :func:`serial_rates`, the rate if nothing overlapped.
        bound: that serial rate as an efficiency, ``1 / (1 + model / loader)`` from the medians.
        overlaps: whether the pipeline can overlap its loading with the model at all (False: a loop
            without workers or a thread makes each batch, then trains on it).
    """

    name: str
    efficiency: Verdict
    serial: Verdict
    bound: float | None
    overlaps: bool = True


def check(name: str, trained, resident, alone=None, *, overlaps: bool = True) -> Check:
    """:class:`Check` of a pipeline from its training measurement, the model's on batches already
    there (``resident``, timed in turns with it) and its loader timed alone (``alone``: None where
    not measured). Measurements of :mod:`gpufeed.measure.harness`."""
    bound = None if alone is None else efficiency_bounds(alone.items_per_s, resident.items_per_s)[0]
    serial = compare(None, None) if alone is None else compare(rates(trained), serial_rates(resident, alone), higher=True)
    return Check(name, against(trained, resident), serial, bound, overlaps)


#: What each verdict on the efficiency says about the model's waiting (``{run}``: "this run").
_FED = {verdict.SAME: "the model waited for data no more than {run} can see (within {pct} of 1.0)",
        verdict.SLOWER: "the model waited for data",
        verdict.CANNOT_TELL: "{run} cannot tell whether the model waited for data"}


def read_check(c: Check, run: str = "this run") -> str:
    """One pipeline's efficiency in words: its value and interval, whether the model waited, and
    where it stands against its rate if nothing overlapped; **"cannot be right"** where the
    numbers break a bound (above 1.0, or a loop that cannot overlap above its serial rate).
    ``run``: the run the numbers come from, as the sentence names it ("that run": a committed one)."""
    v, s = c.efficiency, c.serial
    if v.kind == verdict.NOT_MEASURED:
        return f"{c.name}: not measured."
    head = f"{c.name}: {_interval(v)}"
    if v.kind == verdict.FASTER:
        return (f"{head}, above 1.0, which **cannot be right**: no loader trains faster than the model on batches "
                "already there, so these numbers did not all see the same machine; re-run on an idle one.")
    text = f"{head}: " + _FED[v.kind].format(pct=_pct(v), run=run)
    if s.kind == verdict.NOT_MEASURED or c.bound is None:
        return text + "."
    at = f"{c.bound:.2f}, its efficiency if nothing overlapped"
    if v.kind == verdict.CANNOT_TELL and s.kind == verdict.CANNOT_TELL:
        return text + f", nor tell it from {at}."
    if not c.overlaps:
        return text + {
            verdict.FASTER: f"; yet it ran above {at}, which **cannot be right** for a loop that makes each batch and then "
                    "trains on it: the loader alone (section 4) and training ran at different times, and one of them "
                    "saw a busier machine; re-run on an idle one.",
            verdict.SAME: f"; it ran at {at}, as a loop that makes each batch and then trains on it must.",
            verdict.SLOWER: f"; it ran below even {at}: beside the model its loading cost more than alone (one likely cause, "
                    "not measured here: other work on the machine while it trained).",
            verdict.CANNOT_TELL: f"; this run cannot tell it from {at}.",
        }[s.kind]
    return text + {
        verdict.FASTER: f"; above {at}: part of its loading ran beside the model.",
        verdict.SAME: _at_serial(at, c.bound, s),
        verdict.SLOWER: f"; below even {at}: beside the model its loading cost more than alone (one likely cause, not "
                "measured here: its workers and threads compete with the model for the same cores or device).",
        verdict.CANNOT_TELL: f"; this run cannot tell it from {at}.",
    }[s.kind]


def _at_serial(at: str, bound: float, s: Verdict) -> str:
    """A loop that can overlap, trained at its rate if nothing overlapped (``s``: the same within X%):
    no loading seen to hide, unless all its loading could hide inside that X% (``bound`` near 1.0:
    a loader many times faster than the model), which this run then cannot see.

    Example:
        >>> tie = Verdict(1.0, 0.97, 1.03, 5, verdict.SAME)
        >>> _at_serial("0.60, its efficiency if nothing overlapped", 0.6, tie)
        '; at 0.60, its efficiency if nothing overlapped (within 4%): this run sees none of its loading hide behind the model.'
        >>> _at_serial("0.98, its efficiency if nothing overlapped", 0.98, tie)
        '; at 0.98, its efficiency if nothing overlapped (within 4%): its loading is 2% of the loop, too little for this run to see whether it hid behind the model.'
    """
    head = f"; at {at} (within {_pct(s)})"
    if 1.0 / bound - 1.0 <= (s.within or 0.0):  # all of the loading, hidden, would lie inside the tie
        return f"{head}: its loading is {1.0 - bound:.0%} of the loop, too little for this run to see whether it hid behind the model."
    return f"{head}: this run sees none of its loading hide behind the model."


def read_efficiency(checks: list[Check]) -> str:
    """Every pipeline's :func:`read_check`, one per line, and once the advice of a run that cannot tell."""
    said = advice([v for c in checks for v in (c.efficiency, c.serial)])
    return "\n".join([f"- {read_check(c)}" for c in checks] + ([f"\n{said}"] if said else []))


def read_bench_training(doc: dict) -> str:
    """The training rows of a ``gpufeed bench`` document (``results/<machine>/results.json``) read as
    section 6 reads this page's: each pipeline's loader efficiency, its training images/s against
    ``resident``'s (timed in turns in that run), with its interval and what it says (:func:`read_check`).

    Example:
        >>> doc = {"records": [{"pipeline": p, "mode": "train"} for p in ("naive", "resident")],
        ...        "measurements": [{"name": f"{p} train", "samples": s, "items": 8} for p, s in
        ...                         (("naive", [1.6, 1.8, 1.7, 1.6, 1.7]), ("resident", [1.0, 1.1, 1.0, 1.0, 1.0]))]}
        >>> print(read_bench_training(doc))
        Its training rows, read as section 6 reads this page's (each against `resident` in turns, in that run):
        <BLANKLINE>
        - naive: 0.59 (0.59 to 0.62): the model waited for data.
    """
    from gpufeed.measure.harness import Measurement

    ms = {m["name"]: Measurement.from_dict(m) for m in doc.get("measurements", [])}
    names = [r["pipeline"] for r in doc.get("records", []) if r["mode"] == "train" and r["pipeline"] != "resident"]
    if "resident train" not in ms or not names:
        return "Its training rows have no run on batches already on the device to read them against."
    checks = [check(n, ms.get(f"{n} train"), ms["resident train"]) for n in names]
    unsure = any(c.efficiency.kind == verdict.CANNOT_TELL for c in checks)
    return ("Its training rows, read as section 6 reads this page's (each against `resident` in turns, in that run):\n\n"
            + "\n".join(f"- {read_check(c, 'that run')}" for c in checks)
            + ("\n\nWhere that run cannot tell, more passes (`gpufeed bench --repeats`) or an idle machine would tell."
               if unsure else ""))


def read_target(v: Verdict, target: float) -> str:
    """Whether the course pipeline's efficiency reaches ``target``, from ``v``: its training images/s
    against ``target`` times the model's (:func:`against` with ``scale=target``)."""
    return {verdict.FASTER: f"The course pipeline's efficiency is above the {target:.2f} target ({v.interval()} of it).",
            verdict.SAME: f"The course pipeline's efficiency is at the {target:.2f} target (within {_pct(v)}).",
            verdict.SLOWER: f"The course pipeline's efficiency is below the {target:.2f} target ({v.interval()} below it).",
            verdict.CANNOT_TELL: f"This run cannot tell whether the course pipeline reaches the {target:.2f} target. {v.advice}",
            verdict.NOT_MEASURED: f"The {target:.2f} target was not measured here."}[v.kind]


def read_all_cores(v: Verdict, cores: int, course: Verdict | None = None) -> str:
    """The model alone on every core against on one thread (``v``, in turns), and, where it gained,
    the course pipeline's efficiency against it (``course``): what sharing the cores costs."""
    text = f"The model alone on all {cores} cores {v.ran('on one thread', 'trained')}."
    if v.kind == verdict.FASTER and course is not None and course.kind != verdict.NOT_MEASURED:
        return text + (f" Against it, the course pipeline's efficiency is {_interval(course)}: what leaving the cores to "
                       "the loader costs on a CPU-only machine.")
    if v.kind == verdict.SAME:
        return text + " More threads did not speed the model up: leaving cores to the loader cost it nothing this run can see."
    return text + (" " + advice([v]) if v.kind == verdict.CANNOT_TELL else "")  # the interval is said once, above


_RANK = {verdict.FASTER: 2, verdict.SAME: 1, verdict.SLOWER: 0}


def read_order(verdicts: dict[str, Verdict], what: str) -> str:
    """One technique measured in two places (``where -> verdict``, each against the same loader
    without it): both verdicts in words, then where it does better, only where their kinds order
    the two (a gain above a tie above a loss); two losses, two gains or a run that cannot tell are
    not ordered (that would compare two ratios, which the verdict method does not).

    Example:
        >>> win, loss = Verdict(1.4, 1.2, 1.6, 5, verdict.FASTER), Verdict(0.8, 0.7, 0.9, 5, verdict.SLOWER)
        >>> print(read_order({"before": loss, "after": win}, "prefetching"))
        Prefetching: before, it ran 1.25x slower than the same loader without it (1.11x to 1.43x); after, it ran 1.40x faster than the same loader without it (1.20x to 1.60x). It does better after.
    """
    (a, va), (b, vb) = verdicts.items()
    text = (f"{what[:1].upper()}{what[1:]}: {a}, it {va.ran('the same loader without it')}; {b}, it "
            f"{vb.ran('the same loader without it')}.")
    if va.decided and vb.decided and _RANK[va.kind] != _RANK[vb.kind]:
        return text + f" It does better {a if _RANK[va.kind] > _RANK[vb.kind] else b}."
    return text + " This run does not tell where it does better (the two verdicts are of one kind, or one cannot tell)."


def read_payback(against_what: str, build_s: float, before_s: float, v: Verdict) -> str:
    """When the memmap's one-off build (``build_s`` seconds) pays for itself against ``against_what``,
    whose epoch takes ``before_s`` seconds, from ``v``: the course pipeline's images/s against it.
    An epoch saves ``before_s * (1 - 1 / ratio)``; the interval of the ratio gives the epochs' range.

    Example:
        >>> print(read_payback("the naive loop", 3.0, 2.0, Verdict(2.0, 1.6, 2.5, 5, verdict.FASTER)))
        against the naive loop: 1.00 s saved per epoch, so the 3.00 s build is paid back after 3.0 epochs (2.5 to 4.0).
    """
    head = f"against {against_what}: "
    if v.kind == verdict.FASTER:
        def epochs(x: float) -> float:
            return build_s / (before_s * (1 - 1 / x))

        saved = before_s * (1 - 1 / v.ratio)
        return (f"{head}{saved:.2f} s saved per epoch, so the {build_s:.2f} s build is paid back after "
                f"{epochs(v.ratio):.1f} epochs ({epochs(v.high):.1f} to {epochs(v.low):.1f}).")
    if v.kind == verdict.SAME:
        return f"{head}the course pipeline {v.ran('it')}: no saving this run can see, so no payback to read."
    if v.kind == verdict.SLOWER:
        return f"{head}the course pipeline {v.ran('it')}: the build never pays back on this machine."
    if v.kind == verdict.CANNOT_TELL:
        return f"{head}this run cannot tell whether an epoch gets shorter ({v.interval()}), so not when the build pays back."
    return f"{head}not measured."


def read_watched(naive, course, first: Verdict | None = None, where: str = "section 5") -> str:
    """Section 10: the two loops as :func:`gpufeed.measure.watch` saw them run (``naive`` and ``course``:
    the :class:`~gpufeed.measure.report.Report` of each one's ``what_ifs``): how much of its period
    each waited for data, the course's loop against the naive one on their seconds per batch (a
    verdict, not paired: the two loops ran one after the other), that verdict read against ``first``
    (the same question, timed in turns at ``where``), and what the report tells the naive loop.

    Example:
        >>> from gpufeed.measure.report import Report
        >>> naive = Report(items=32, batches=5, device="cpu", period_s=0.2, host_wait_s=0.1, loop_s=[0.2] * 5)
        >>> course = Report(items=32, batches=5, device="cpu", period_s=0.1, host_wait_s=0.0, loop_s=[0.1] * 5)
        >>> print(read_watched(naive, course, Verdict(1.8, 1.5, 2.1, 5, verdict.FASTER, True)).splitlines()[0])
        The naive loop waited for data 50% of its period (data bound), the course's 0% (compute bound). Watched as they ran, one after the other (not in turns), the course's loop ran 2.00x faster than the naive one (2.00x to 2.00x). This agrees with section 5 (1.80x faster there, 2.00x faster here).
    """
    from gpufeed.measure.findings import say_all
    from gpufeed.measure.report import BOUND_WORDS

    v = compare(course.loop_s or None, naive.loop_s or None)
    text = (f"The naive loop waited for data {naive.wait_fraction:.0%} of its period ({BOUND_WORDS[naive.bound]}), the "
            f"course's {course.wait_fraction:.0%} ({BOUND_WORDS[course.bound]}). Watched as they ran, one after the other "
            f"(not in turns), the course's loop {v.ran('the naive one')}.")
    if first is not None and first.kind != verdict.NOT_MEASURED and v.kind != verdict.NOT_MEASURED:
        text += " " + v.reads(first, where)
    elif v.kind == verdict.CANNOT_TELL:
        text += " " + v.advice
    return text + "\nWhat the report tells the naive loop:\n\n" + say_all(naive.findings)
