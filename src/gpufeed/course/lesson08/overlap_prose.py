"""Sentences that read lesson 08's overlap experiment (:mod:`gpufeed.course.lesson08.overlap`), whichever
way its numbers point.

A sentence comparing two measured things is built here from them: "faster" or "slower" from the
side of 1 the ratio falls on (:func:`times`: never "0.86x" where slower is meant); a measurement
above its bound is explained by what the bound leaves out; a prefetcher that loses is explained
by its trace (:func:`trace_reading`). :func:`read` reads a result of
:func:`gpufeed.course.lesson08.overlap.measure`; :func:`read_old` reads a reference in the format the lesson
saved before issue 29 (one profiled run of each variant, no timing in turns); :func:`reference`
picks the committed reference a machine without CUDA shows, the new format first.
``notebooks/08_prefetch.ipynb``, sections 4 and 5.

Example:
    >>> times(1.25), times(0.8), times(1.01)
    ('1.25x faster', '1.25x slower', 'the same speed (within 2%)')
"""

from __future__ import annotations

import re
import statistics

from gpufeed.course import prose
from gpufeed.course.lesson08.overlap import PLAIN, REGIMES, between_steps, bound
from gpufeed.measure import harness, results

#: Ratios within this of 1 read as "the same".
FLAT = 0.02
#: The regime whose trace the lesson draws and reads.
SYNCED = "syncs every step"
#: What the committed reference of the old format ran: not today's CudaPrefetcher.
OLD_DESIGN = ("an earlier CudaPrefetcher that did its host work in your loop, between two steps, "
              "and allocated every batch anew (memory not bounded)")


def times(x: float, flat: float = FLAT) -> str:
    """A ratio of times (baseline over candidate) as words: faster, slower, or the same speed."""
    return prose.times(x, same=f"the same speed (within {flat:.0%})", flat=flat)


def spread(runs: list[float]) -> float:
    """The range of runs relative to their median (0.05: all within 5% of each other)."""
    ordered = sorted(runs)
    return (ordered[-1] - ordered[0]) / ordered[len(ordered) // 2]


def trace_reading(summaries: dict, other: str, syncs: bool = True,
                  lead: str = "Over") -> tuple[str, list[str]]:
    """A sentence on the two traces of a regime, and the reasons they show for ``other`` to lose.

    Args:
        summaries: variant name to :func:`gpufeed.course.trace.summary` (:data:`PLAIN` among them).
        other: the prefetcher's name.
        syncs: the step synchronised every step (then host time between steps idles the GPU).
        lead: the sentence's first words, before the number of steps.
    """
    a, b = between_steps(summaries[PLAIN]), between_steps(summaries[other])
    text = (f"{lead} {a['steps']} profiled steps a step came every {a['per_step_ms']:.2f} ms with the copy "
            f"on the default stream and every {b['per_step_ms']:.2f} ms with {other}; the host spent "
            f"{a['host_ms']:.1f} ms and {b['host_ms']:.1f} ms outside the steps")
    reasons = []
    if b["host_ms"] - a["host_ms"] > FLAT * a["per_step_ms"] * a["steps"]:
        reasons.append(f"the host spent {b['host_ms'] - a['host_ms']:.1f} ms more outside the steps with "
                       f"{other}" + (", time in which a step that syncs gives the GPU no step to run" if syncs else ""))
    if a["gpu_busy_ms"] is not None:
        text += f"; kernels ran {a['gpu_busy_ms']:.1f} ms and {b['gpu_busy_ms']:.1f} ms"
        if b["gpu_busy_ms"] > a["gpu_busy_ms"] * (1 + FLAT):
            reasons.append(f"kernels ran {b['gpu_busy_ms'] - a['gpu_busy_ms']:.1f} ms more with {other} "
                           "(the conversion's kernels share the GPU with the step's)")
        elif abs(b["gpu_busy_ms"] - a["gpu_busy_ms"]) <= FLAT * a["gpu_busy_ms"]:
            text += f" (the same work, within {FLAT:.0%})"
        text += (f", and no kernel ran {a['gpu_idle']:.1%} and {b['gpu_idle']:.1%} of the time "
                 "(a copy alone counts there)")
    return text + ".", reasons


def against_bound(result: dict, regime: str) -> str:
    """What a regime's gain says against the bound of :func:`gpufeed.course.lesson08.overlap.plan`."""
    other, runs = result["prefetcher"], result["regimes"][regime]
    plain_ms, pre_ms = runs[PLAIN]["median_ms"], runs[other]["median_ms"]
    top, feed, work = result.get("bounds", {}).get(regime, result["bound"]), result["feed_ms"], result["work_ms"]
    x = plain_ms / pre_ms
    summaries = result.get("traces", {}).get(regime)
    reasons = trace_reading(summaries, other, REGIMES[regime])[1] if summaries else []
    if x > top * (1 + FLAT):
        parts = []
        if plain_ms > feed + work:
            parts.append(f"the plain loop took {plain_ms - feed - work:.2f} ms a step more than copy, "
                         f"conversion and step alone ({feed + work:.2f} ms): " + (
                             "host time between its steps, which the bound leaves out" if REGIMES[regime]
                             else "gaps between the device's work, which the bound leaves out"))
        if pre_ms < max(feed, work):
            parts.append(f"with {other} a step took {max(feed, work) - pre_ms:.2f} ms less than the "
                         f"longer of the two sides alone ({max(feed, work):.2f} ms): " + (
                             "the costs timed alone were higher than in the loop (a step timed alone "
                             "with a sync pays that sync; in the loop some of the conversion may run "
                             "beside the step's kernels)" if result["convert_with_step"] else
                             "the costs timed alone were higher than in the loop (noise)"))
        return "Above the bound: " + ("; ".join(parts) or "within the noise of the runs") + "."
    if x >= top:
        return f"At the bound (within {FLAT:.0%}): the prefetcher hid all it could."
    if x <= 1 + max(spread(runs[PLAIN]["runs_ms"]), spread(runs[other]["runs_ms"])):
        why = "; ".join(reasons) if reasons else (
            f"the trace shows no cause; the bound ({top:.2f}x) left little to gain" if top < 1 + 2 * FLAT
            else "the trace shows no cause" if summaries else "no trace was taken of this regime")
        return f"{other} did not pay here (no gain beyond the runs' spread): {why}."
    text = f"That is {(x - 1) / (top - 1):.0%} of the gain the bound allows."
    return text + (f" Where the rest went, in the trace: {'; '.join(reasons)}." if reasons else "")


def memory_reading(result: dict, regime: str = SYNCED) -> str:
    """The memory of a regime's runs: each arm's peak beyond what a run began with, in converted
    batches, and the allocator's counters (reserved before and after, retries); "" without them."""
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
    return (f"Memory with the step that {regime}, at the peak beyond what each run began with, in "
            f"converted batches of {batch / 1e6:.0f} MB (the step's own activations included): "
            + "; ".join(parts) + f". {result['prefetcher']} holds at most depth + 2 = "
            f"{result['depth'] + 2} converted batches in flight.")


def verdict(plain_runs: list[float], other_runs: list[float]) -> tuple[float, str]:
    """The ratio of medians (plain over other) and its words, "the same" within the wider of the
    two arms' spreads (:func:`spread`): a difference the runs themselves vary by is no verdict.

    Example:
        >>> verdict([10.0, 10.2, 9.8], [9.9, 10.0, 10.1])[1]  # 1.00x, runs within 4%
        'the same speed (within 4%)'
        >>> verdict([10.0, 10.1, 9.9], [5.0, 5.05, 4.95])[1]
        '2.00x faster'
    """
    x = statistics.median(plain_runs) / statistics.median(other_runs)
    return x, times(x, max(spread(plain_runs), spread(other_runs)))


def read(result: dict) -> str:
    """The sentences of section 5 for a result of :func:`gpufeed.course.lesson08.overlap.measure`."""
    other, paragraphs = result["prefetcher"], []
    for regime, runs in result["regimes"].items():
        a, top = runs[PLAIN], result.get("bounds", {}).get(regime, result["bound"])
        arms = [name for name in runs if name != PLAIN]
        compared = "; ".join(f"{runs[name]['median_ms']:.2f} ms with {name}: **{verdict(a['runs_ms'], runs[name]['runs_ms'])[1]}**"
                             for name in arms)
        widest = max(spread(r["runs_ms"]) for r in runs.values())
        paragraphs.append(
            f"**The step that {regime}**: {a['median_ms']:.2f} ms a step with the copy on the default stream; "
            f"{compared} (medians of {len(a['runs_ms'])} runs of {result['steps']} steps each, in turns, "
            f"after {result['warmup']} untimed; each arm's runs within {widest:.0%} of each other). "
            f"The bound with this step was {top:.2f}x. {against_bound(result, regime)}")
    if SYNCED in result.get("traces", {}):
        paragraphs.append(trace_reading(result["traces"][SYNCED], other,
                                        lead=f"In the profiler trace of the step that {SYNCED}, over")[0])
    paragraphs += [memory_reading(result, regime) for regime in result["regimes"]]
    return "\n\n".join(p for p in paragraphs if p)


def read_old(doc: dict) -> str:
    """The sentences for a reference saved before issue 29: one profiled run of each variant."""
    summaries, machine = doc["trace_summaries"], doc.get("machine") or {}
    other = next(k for k in summaries if k != PLAIN)
    a, b = between_steps(summaries[PLAIN]), between_steps(summaries[other])
    x = a["per_step_ms"] / b["per_step_ms"]
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
    sentence, reasons = trace_reading(summaries, other)
    text += f"With the prefetcher the loop was **{times(x)}**. {sentence}"
    if x < 1 + FLAT and reasons:
        text += f" Why it did not pay: {'; '.join(reasons)}."
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


def as_long(ratio: float, than: str = "in the plain loop", flat: float = FLAT) -> str:
    """A ratio of durations (with / without) as words, e.g. ``1.32x as long as in the plain loop``."""
    if abs(ratio - 1) <= flat:
        return f"as long as {than} (within {flat:.0%})"
    return f"{ratio:.2f}x as long as {than}" if ratio > 1 else f"{1 - ratio:.0%} less time than {than}"


def thread_reading(speedup: float, waiting: float, best: float, slower: dict, *, device_type: str,
                   cores: int | None = None, waiting_bound: float | None = None,
                   ref: dict | None = None, rates: tuple[float, float] | None = None) -> str:
    """Section 4's sentences: the thread prefetcher with the real step and with a waiting step.

    Args:
        speedup, waiting: the prefetcher's gain (plain time over prefetched) with each step.
        best: the bound from decoding and step timed alone.
        slower: ``{"decode": r, "compute": r}``: each stage's time beside the other over alone.
        device_type: where the real step ran (``"cpu"`` or ``"cuda"``).
        cores: the machine's cores, for the CPU's sentence.
        waiting_bound: the bound from the costs the waiting step's runs really had.
        ref: a committed GPU reference document of this lesson, shown beside a CPU's numbers.
        rates: images/s with the real step, with and without the prefetcher.
    """
    where = "on the CPU" if device_type == "cpu" else f"on {device_type}"
    shown = f" ({rates[0]:,.0f} vs {rates[1]:,.0f} images/s)" if rates else ""
    text = (f"Training step {where}: **{times(speedup)}** with the thread prefetcher{shown}; waiting step: "
            f"**{times(waiting)}**. The overlap allows at most {best:.2f}x. Beside the step, decoding "
            f"took {as_long(slower['decode'])}, and the step {as_long(slower['compute'])}.")
    if waiting > best * (1 + FLAT) and waiting_bound is not None:
        text += (f" The waiting step beat that bound, which used the costs timed alone before the runs: "
                 f"with the costs its runs really had, the bound is {waiting_bound:.2f}x"
                 + (", and the rest is noise." if waiting > waiting_bound * (1 + FLAT) else "."))
    if max(speedup, waiting) <= 1 + FLAT:
        text += " Neither step gained from the thread here."
    elif waiting > speedup * (1 + 2 * FLAT):
        text += " The waiting step gained more: " + (
            "it leaves the cores and the GIL to the decoding thread, while the real step computes on the "
            "CPU beside it" + (f" ({cores} cores, shared with other programs)" if cores else "")
            + " and holds the GIL between its native calls." if device_type == "cpu" else
            "the real step is not all waiting. Its host side launches every kernel and runs autograd and "
            "the optimiser, in Python and C++ that hold the GIL between native calls, and the decoding "
            "thread waits for the GIL.")
    else:
        text += " The real step gained about as much as the waiting one, or more."
    if ref is not None and "thread_speedup" in ref:
        ref_best = bound(ref["decode_ms"], ref["compute_ms"])
        text += (f" On the {ref['machine'].get('gpu') or 'GPU'} of our reference run, with the thread prefetcher the "
                 f"real step was **{times(ref['thread_speedup'])}** and the waiting step "
                 f"**{times(ref['waiting_speedup'])}** (bound {ref_best:.2f}x).")
    return text
