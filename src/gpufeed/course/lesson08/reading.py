"""Sentences that read lesson 08's measurements (:mod:`gpufeed.course.lesson08.overlap` and section 4's
thread prefetcher), whichever way their numbers point.

Every comparison is worded through the course's one verdict method (:func:`gpufeed.measure.verdict.compare`:
faster, slower, the same within X%, or "this run cannot tell", with its interval): the arms' runs,
taken in turns, are compared as pairs; two traces' host time between steps, step by step. A cause
is given where the page measured it (the arms differ only in where the host work runs; a trace's
time between steps), else as "one likely cause, not measured here". A reference with too few runs
for a verdict (the old H100 run: one profiled run each way) is read as what that run showed, and
says that it is no verdict.

:func:`read` reads a result of :func:`gpufeed.course.lesson08.overlap.measure`; :func:`read_old`
reads a reference in the format the lesson saved before issue 29; :func:`reference` picks the
committed reference a machine without CUDA shows, the new format first; :func:`thread_reading`
reads section 4. ``notebooks/08_prefetch.ipynb``, sections 4 and 5.

Example:
    >>> v = arms([10.0, 10.2, 9.9, 10.1, 10.0], [8.0, 8.1, 7.9, 8.0, 8.05])  # ms a step, in turns
    >>> v.kind, v.words("the plain loop")
    ('slower', '1.25x slower than the plain loop (1.24x to 1.26x)')
"""

from __future__ import annotations

import re
import statistics

from gpufeed.course.lesson08.feeds import IN_LOOP, PLAIN
from gpufeed.course.lesson08.overlap import REGIMES, SYNCED, bound
from gpufeed.course.lesson08.traced import between_steps
from gpufeed.measure import harness, results, verdict
from gpufeed.measure.verdict import LIKELY, LIKELY_START, MIN_SAMPLES, Verdict, advice, compare
from gpufeed.measure.wording import times

#: What the committed reference of the old format ran: not today's CudaPrefetcher.
OLD_DESIGN = ("an earlier CudaPrefetcher that did its host work in your loop, between two steps, "
              "and allocated every batch anew (memory not bounded)")
#: What a trace's times can resolve (ms): a gap between two steps is at least this (a verdict
#: compares positive samples; the profiler records whole microseconds).
RESOLUTION_MS = 0.001


def arms(a: list[float], b: list[float]) -> Verdict:
    """Arm A against arm B from their runs (ms a step, one per round of the turns): how many times
    faster A ran, with its interval and verdict (:func:`gpufeed.measure.verdict.compare`, paired)."""
    return compare(a, b, paired=True)


def few_runs(pairs: list[tuple[list[float], list[float], str, str]]) -> str:
    """Comparisons of a reference's arms, ``(a_runs, b_runs, subject, than)`` each: with enough runs
    their verdicts' words; with fewer than a verdict needs, what those runs' medians showed, said
    once as no verdict: ``"the real step 1.06x faster than the plain loop and ... in the medians of
    3 runs each (too few for a verdict: ...)"``."""
    verdicts = [(arms(a, b), subject, than) for a, b, subject, than in pairs]
    n = min(v.samples for v, _, _ in verdicts)
    if n >= MIN_SAMPLES:
        return " and ".join(f"{subject} {v.words(than)}" for v, subject, than in verdicts)
    return (" and ".join(f"{subject} {times(v.ratio, than)}" for v, subject, than in verdicts)
            + f" in the medians of {n} run{'s' if n != 1 else ''} each (too few for a verdict: the course's "
            f"method needs {MIN_SAMPLES} of each, in turns)")


def share_of_bound(v: Verdict, top: float, lead: str = "That is") -> str:
    """What a prefetched loop's verdict says against the most overlap allows (``top``, from
    :func:`gpufeed.course.lesson08.overlap.bound`), where it gained and its interval stays at or
    below that bound: at it, or the share of the allowed gain (the sentence begins with ``lead``);
    "" otherwise (no gain, cannot tell, or above the bound, which its caller explains from the costs).

    Example:
        >>> share_of_bound(Verdict(1.36, 1.33, 1.42, 15, verdict.FASTER, True), 1.41)
        ' Its interval holds the bound: the overlap hid all it could.'
        >>> share_of_bound(Verdict(1.2, 1.1, 1.3, 9, verdict.FASTER, True), 1.5)
        ' That is 40% of the gain the bound allows.'
    """
    if v.kind != verdict.FASTER or top <= 1 or v.low > top:
        return ""
    if v.high >= top:
        return " Its interval holds the bound: the overlap hid all it could."
    return f" {lead} {(v.ratio - 1) / (top - 1):.0%} of the gain the bound allows."


def took(v: Verdict, than: str) -> str:
    """A duration's verdict: ``"took 1.15x longer than alone (1.05x to 1.25x)"``, ``"took as long
    as alone (within 3%)"``, or ``"took a time not told apart from its time alone by this run (...)"``."""
    if v.kind == verdict.CANNOT_TELL:
        return "took a time " + v.words(f"its time {than}")
    return v.ran(than, "took", more="less time", less="longer", same="as long")


def gap_verdict(result_gaps: dict, other: str) -> Verdict | None:
    """The host's time between two steps with ``other`` against the plain loop, step by step from
    their traces (:func:`gpufeed.course.lesson08.traced.gaps`), or None without both."""
    if not result_gaps or PLAIN not in result_gaps or other not in result_gaps:
        return None
    a, b = ([max(g, RESOLUTION_MS) for g in result_gaps[name]] for name in (other, PLAIN))
    return compare(a, b) if a and b else None


def trace_reading(summaries: dict, other: str, syncs: bool = True, lead: str = "Over",
                  result_gaps: dict | None = None) -> tuple[str, list[str]]:
    """A sentence on the two traces of a regime, and the causes they measured for ``other`` to lose.

    Args:
        summaries: variant name to :func:`gpufeed.course.trace.summary` (:data:`PLAIN` among them).
        other: the prefetcher's name.
        syncs: the step synchronised every step (then host time between steps idles the GPU).
        lead: the sentence's first words, before the number of steps.
        result_gaps: variant name to its trace's gaps between steps (ms); without them (an old
            reference) the host's time is given as numbers, and no cause.
    """
    a, b = between_steps(summaries[PLAIN]), between_steps(summaries[other])
    text = (f"{lead} {a['steps']} profiled steps a step came every {a['per_step_ms']:.2f} ms with the copy "
            f"on the default stream and every {b['per_step_ms']:.2f} ms with {other}; the host spent "
            f"{a['host_ms']:.1f} ms and {b['host_ms']:.1f} ms outside the steps")
    reasons = []
    v = gap_verdict(result_gaps or {}, other)
    if v is not None:
        ga, gb = (statistics.median(result_gaps[n]) for n in (PLAIN, other))
        text += (f"; between two steps it spent a median of {ga:.2f} ms and {gb:.2f} ms: with {other} it "
                 f"{took(v, 'with the copy on the default stream')}")
        if v.kind == verdict.SLOWER and syncs:  # a loop that never syncs need not lose by it: no cause there
            reasons.append(f"between two steps the host took {v.words(more='less time', less='longer')} with "
                           f"{other}, time in which a step that syncs gives the GPU no step to run")
    if a["gpu_busy_ms"] is not None:
        text += (f"; kernels ran {a['gpu_busy_ms']:.1f} ms and {b['gpu_busy_ms']:.1f} ms of the window, and no "
                 f"kernel ran {a['gpu_idle']:.1%} and {b['gpu_idle']:.1%} of the time (a copy alone counts there)")
    return text + ".", reasons


def against_bound(result: dict, regime: str) -> str:
    """What a regime's verdict on the prefetcher says against its bound
    (:func:`gpufeed.course.lesson08.overlap.bound`): above it, at it (its interval holds it), the
    share of the gain it allows, or no gain, with the trace's measured causes."""
    other, runs = result["prefetcher"], result["regimes"][regime]
    v = arms(runs[other]["runs_ms"], runs[PLAIN]["runs_ms"])
    top = result.get("bounds", {}).get(regime, result["bound"])
    if v.kind == verdict.CANNOT_TELL:
        return v.advice
    plain_ms, pre_ms = runs[PLAIN]["median_ms"], runs[other]["median_ms"]
    feed, work = result["feed_ms"], result["work_ms"]
    longest = max(result.get("stages_ms") or (feed, work))
    if v.kind == verdict.FASTER and v.low > top:
        parts = []
        if plain_ms > feed + work:
            parts.append(f"the plain loop took {plain_ms - feed - work:.2f} ms a step more than its stages alone "
                         f"({feed + work:.2f} ms): " + (
                             "host time between its steps, which the bound leaves out" if REGIMES[regime]
                             else "gaps between the device's work, which the bound leaves out"))
        if pre_ms < longest:
            parts.append(f"with {other} a step took {longest - pre_ms:.2f} ms less than the longest stage "
                         f"alone ({longest:.2f} ms): the costs timed alone were higher than in the loop")
        return ("Above the bound, its whole interval: " + ("; ".join(parts) or
                "the costs timed alone were not the runs' costs, and these runs cannot say which") + ".")
    if v.kind == verdict.FASTER and v.high >= top:
        return "At the bound (its interval holds it): the prefetcher hid all it could."
    summaries = result.get("traces", {}).get(regime)
    reasons = (trace_reading(summaries, other, REGIMES[regime], result_gaps=result.get("gaps", {}).get(regime))[1]
               if summaries else [])
    if v.kind == verdict.FASTER:
        text = f"That is {(v.ratio - 1) / (top - 1):.0%} of the gain the bound allows."
        return text + (f" Where the rest went, in the trace: {'; '.join(reasons)}." if reasons else "")
    why = "; ".join(reasons) if reasons else (
        "no trace was taken of this regime" if not summaries else "its trace measured no cause") + (
        "" if reasons else f" ({LIKELY} the conversion's kernels, which share the "
        "GPU with the step's)")
    return f"{other} did not pay here: {why}."


def memory_reading(result: dict, regime: str = SYNCED, bound_too: bool = True) -> str:
    """The memory of a regime's runs: each arm's peak beyond what a run began with, in converted
    batches, and the allocator's counters (reserved before and after, retries); then (``bound_too``)
    what the prefetcher keeps at most, in the library's words; "" without memory figures."""
    runs, batch = result["regimes"][regime], result["converted_bytes"]
    if not all(r["memory"] for r in runs.values()):
        return ""
    parts = []
    for name, r in runs.items():
        m = r["memory"]
        text = f"{name} {m['in_flight_peak'] / batch:.1f}"
        if "reserved_after" in m:
            text += (f" (reserved {m['reserved_before'] / 1e9:.2f} GB before its first run, "
                     f"{m['reserved_after'] / 1e9:.2f} GB after its last, {m['alloc_retries']} "
                     f"allocation {'retry' if m['alloc_retries'] == 1 else 'retries'})")
        parts.append(text)
    depth = result["depth"]
    text = (f"Memory with the step that {regime}, at the peak beyond what each run began with, in "
            f"converted batches of {batch / 1e6:.0f} MB (the step's own activations included): "
            + "; ".join(parts) + ".")
    if bound_too:
        text += (f" {result['prefetcher']} keeps at most depth + 2 = {depth + 2} converted batches in flight "
                 f"(depth queued, the one its thread makes, the one you use), {depth + 3} for a moment while "
                 "your loop lets go of the last one, besides those you keep: each in fresh memory that the "
                 "caching allocator hands out again only once your stream is done with it.")
    return text


def read(result: dict) -> str:
    """The sentences of section 5 for a result of :func:`gpufeed.course.lesson08.overlap.measure`."""
    other, paragraphs = result["prefetcher"], []
    for k, (regime, runs) in enumerate(result["regimes"].items()):
        a, top = runs[PLAIN], result.get("bounds", {}).get(regime, result["bound"])
        told = []
        for name in (n for n in runs if n != PLAIN):
            words = f"with {name} {runs[name]['median_ms']:.2f} ms, {arms(runs[name]['runs_ms'], a['runs_ms']).words('the plain loop', bold=True)}"
            if name == other and IN_LOOP in runs:
                v = arms(runs[other]["runs_ms"], runs[IN_LOOP]["runs_ms"])
                words += f", and {v.words(f'the {IN_LOOP}', bold=True)}" + (
                    ": the two differ only in where the host work runs (asking the loader, which gathers and "
                    "pins; issuing the copy), on its thread or between your steps" if k == 0 else "")
            told.append(words)
        paragraphs.append(
            f"**The step that {regime}**: {a['median_ms']:.2f} ms a step with the copy on the default stream; "
            + "; ".join(told) + f" (medians of {len(a['runs_ms'])} runs of {result['steps']} steps each, in "
            f"turns, after {result['warmup']} untimed). The bound with this step was {top:.2f}x. "
            + against_bound(result, regime))
    if SYNCED in result.get("traces", {}):
        paragraphs.append(trace_reading(result["traces"][SYNCED], other,
                                        lead=f"In the profiler trace of the step that {SYNCED}, over",
                                        result_gaps=result.get("gaps", {}).get(SYNCED))[0])
    last = list(result["regimes"])[-1]
    paragraphs += [memory_reading(result, regime, bound_too=regime == last) for regime in result["regimes"]]
    return "\n\n".join(p for p in paragraphs if p)


def read_old(doc: dict) -> str:
    """The sentences for a reference saved before issue 29: one profiled run of each variant, so
    what it showed, said as no verdict, and its likely cause as not measured by one."""
    summaries, machine = doc["trace_summaries"], doc.get("machine") or {}
    other = next(k for k in summaries if k != PLAIN)
    a, b = between_steps(summaries[PLAIN]), between_steps(summaries[other])
    ms = {d["name"]: harness.Measurement.from_dict(d) for d in doc.get("measurements", [])}
    step = next((m for name, m in ms.items() if name.startswith("step, width")), None)
    text = (f"No CUDA here: the reference is our run on {machine.get('gpu') or 'a GPU'} with the OLD "
            f"design, {OLD_DESIGN}: not the {other} you run today, and no new reference exists yet. It "
            f"is one profiled run of {a['steps']} steps each way, with a step that syncs every step; "
            "not this section's timing in turns. ")
    if step is not None and "copy of a batch" in ms:
        copy = ms["copy of a batch"].median
        width = re.sub(r"\D", "", step.name)
        text += (f"There the copy took {copy * 1e3:.2f} ms and the step (width {width}) "
                 f"{step.median * 1e3:.2f} ms alone: overlap could gain at most "
                 f"{bound(copy, step.median):.2f}x. ")
    x = a["per_step_ms"] / b["per_step_ms"]
    sentence, _ = trace_reading(summaries, other)
    text += (f"In that one run the loop was {times(x)} with the prefetcher: one run each way is no "
             f"verdict (the course's method needs {MIN_SAMPLES} runs of each arm, in turns). {sentence}")
    if x < 1 and b["host_ms"] > a["host_ms"]:
        text += (f" One likely cause, not measured here by a verdict: the host's time outside the steps "
                 f"({a['host_ms']:.1f} ms against {b['host_ms']:.1f} ms), in which a step that syncs gives "
                 "the GPU no step to run.")
    return text


def read_reference(doc: dict) -> str:
    """What a machine without CUDA shows for a committed reference, in either format."""
    if "overlap" not in doc:
        return read_old(doc)
    machine = doc.get("machine") or {}
    return (f"No CUDA here: the reference measured on {machine.get('gpu') or 'a GPU'}, whose "
            f"CudaPrefetcher does its {doc.get('prefetcher', 'host work as the library describes it')}."
            "\n\n" + read(doc["overlap"]))


def chart_data(doc: dict) -> tuple[dict, dict]:
    """``(pictures, summaries)`` of the syncing regime's traces, each keyed by variant, from a
    results document of either format (``{}, {}`` if it has none). In the old format the
    prefetcher is named as the old design: it is not today's ``CudaPrefetcher``."""
    if "overlap" in doc:
        result = doc["overlap"] or {}
        return result.get("picture", {}), result.get("traces", {}).get(SYNCED, {})

    def named(d: dict) -> dict:
        return {k if k == PLAIN else f"{k}, old design": v for k, v in d.items()}

    return named(doc.get("trace_intervals", {})), named(doc.get("trace_summaries", {}))


def reference(name: str = "lesson08"):
    """The committed GPU reference ``(measurements, document)``: one with the experiment of
    :func:`gpufeed.course.lesson08.overlap.measure` (field ``overlap``) first, else one of the old format,
    else None."""
    found = list(results.committed(name, results.has_gpu))
    return next((r for r in found if "overlap" in r[1]), found[0] if found else None)


def thread_reading(real: Verdict, waiting: Verdict, best: float, decode: Verdict, more: Verdict, *,
                   device_type: str, cores: int | None = None, waiting_bound: float | None = None,
                   ref: dict | None = None, rates: tuple[float, float] | None = None) -> str:
    """Section 4's sentences: the thread prefetcher with the real step and with a waiting step.

    Args:
        real, waiting: the prefetched loop against the plain one, epochs in turns, with each step.
        best: the bound from decoding and step timed alone, with the epoch's first decode, which
            nothing hides (:func:`gpufeed.course.lesson08.overlap.bound` with ``n``).
        decode: decoding beside the real step (prefetched epochs) against alone (plain epochs),
            batch by batch.
        more: the waiting step's gains against the real step's, round by round (values where more
            is better).
        device_type: where the real step ran (``"cpu"`` or ``"cuda"``).
        cores: the machine's cores, for the CPU's sentence.
        waiting_bound: the bound from the costs the waiting step's runs really had.
        ref: a committed GPU reference document of this lesson, shown beside a CPU's numbers.
        rates: images/s with the real step, with and without the prefetcher.
    """
    where = "on the CPU" if device_type == "cpu" else f"on {device_type}"
    shown = f" ({rates[0]:,.0f} images/s with the thread prefetcher, {rates[1]:,.0f} without)" if rates else ""
    text = (f"Training step {where}{shown}: with the thread prefetcher the loop {real.ran('the plain loop', bold=True)}"
            f"; with the waiting step it {waiting.ran('its plain loop', bold=True)}. The overlap allows at "
            f"most {best:.2f}x (the epoch's first decode, which nothing hides, included)."
            + share_of_bound(real, best, lead="With the real step, that is")
            + f" Beside the real step, decoding {took(decode, 'alone in the plain loop')}.")
    if waiting.kind == verdict.FASTER and waiting.low > best and waiting_bound is not None:
        text += (f" The waiting step beat that bound, which used the costs timed before the runs: with the "
                 f"costs its runs had, the bound is {waiting_bound:.2f}x"
                 + ("; its interval lies above that too, and these runs cannot say why." if waiting.low > waiting_bound
                    else "."))
    told = advice({"the real step's loop from its plain loop": real,
                   "the waiting step's loop from its plain loop": waiting})
    text += f" {told}" if told else ""
    if verdict.FASTER in (real.kind, waiting.kind):
        text += (" The waiting step's gain " + more.ran("the real step's", "was", more="larger", less="smaller",
                                                      same="as large") + ".")
        if more.kind == verdict.FASTER:
            machine = f" (one torch thread, beside the decoding thread, on {cores} cores)" if cores else ""
            why = (f"the real step computes on the CPU{machine} and holds the GIL between its native calls"
                   if device_type == "cpu" else
                   "the real step's host side (kernel launches, autograd, the optimiser) holds the GIL between its "
                   "native calls, and the decoding thread waits for it")
            text += (" Decoding slowed beside the real step (measured above); one likely cause of that and of the "
                     f"rest, not measured here: {why}." if decode.kind == verdict.SLOWER else
                     f" {LIKELY_START} {why}.")
    elif real.decided and waiting.decided:
        text += " Neither step gained from the thread here."
    if ref is not None and "thread_speedup" in ref:
        text += reference_thread(ref)
    return text


def reference_thread(ref: dict) -> str:
    """Section 4's experiment in a committed GPU reference: its verdicts (or, with too few runs, what
    their medians showed) and its bound, the epoch's first decode included as on this page (its
    epochs held ``items / batch_size`` batches); a median above that bound is said as such. "" where
    the reference lacks the four loops."""
    ms = {d["name"]: d for d in ref.get("measurements", [])}
    names = ("plain loop", "ThreadPrefetcher", "plain loop, waiting step", "ThreadPrefetcher, waiting step")
    if not all(k in ms for k in names):
        return ""
    samples = {k: ms[k]["samples"] for k in names}
    items = ms["plain loop"].get("items")
    n = int(items // ref["batch_size"]) if items and ref.get("batch_size") else None
    ref_best = bound(ref["decode_ms"], ref["compute_ms"], n=n)
    # epochs timed: a rate's samples are seconds an epoch, so faster is the plain's over the other's
    shown = few_runs([(samples["ThreadPrefetcher"], samples["plain loop"], "the loop with the real step ran",
                       "its plain loop"),
                      (samples["ThreadPrefetcher, waiting step"], samples["plain loop, waiting step"],
                       "with the waiting step", "its plain loop")])
    text = (f" On the {ref['machine'].get('gpu') or 'GPU'} of our reference run, with the thread prefetcher "
            f"{shown}; the bound there was {ref_best:.2f}x"
            + (f" over its epochs of {n} batches, the first decode included" if n else "") + ".")
    for step, (pre, plain) in (("waiting", ("ThreadPrefetcher, waiting step", "plain loop, waiting step")),
                               ("real", ("ThreadPrefetcher", "plain loop"))):
        if statistics.median(samples[plain]) / statistics.median(samples[pre]) <= ref_best:
            continue
        alone = ref["decode_ms"] + ref["compute_ms"]
        per_batch = statistics.median(samples[plain]) / n * 1e3 if n else None
        text += (f" The {step} step's ratio lies above that bound: " + (
            f"its plain loop took {per_batch:.1f} ms a batch there, less than the {alone:.1f} ms that decoding and "
            "the step timed alone add up to, so the costs in those runs were lower than the costs the bound took."
            if per_batch is not None and per_batch < alone else
            "the costs timed before those runs were not the runs' costs, and the reference kept no log to say which."))
        break  # the first such step says it for both
    return text
