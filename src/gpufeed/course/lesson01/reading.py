"""The sentences lesson 01 prints about what it measured, each from a verdict.

Every comparison goes through :func:`gpufeed.measure.verdict.compare`: the two loops measured in
turns (:func:`workers_gain`), the simulator's prediction against the measured loop
(:func:`prediction`), the naive loader against what a GPU consumes (:func:`keeps_up`), the two
decoders (:func:`decoders`). A prediction or a published figure is one number, not a measurement:
:func:`against` compares a measured arm with it as an arm that does not vary, so the interval is
the measured arm's own. A cause is stated only where the lesson measured it. Taught in
``notebooks/01_bottlenecks.ipynb``, sections 5 and 6, and exercise 3.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> per_batch = Measurement("naive", [0.0100, 0.0101, 0.0099, 0.0100, 0.0102], items=8)
    >>> prediction(800.0, per_batch, "the naive loop")
    'The simulator predicted 800 images/s for the naive loop; it measured 800 (median of 5 samples): the loop ran as fast as predicted (within 2%).'
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpufeed.measure import verdict
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import LIKELY_START, Verdict, advice, compare
from gpufeed.measure.wording import sentences, times


def rates(m: Measurement) -> list[float]:
    """A measurement's samples as items per second (seconds per call, ``items`` per call)."""
    return [m.items / s for s in m.samples]


def against(samples: Sequence[float], figure: float, *, higher: bool = True) -> Verdict:
    """The verdict on measured ``samples`` against one fixed ``figure`` (a prediction, a published
    rate): the figure is an arm that does not vary, so the interval is the samples' own.

    Example:
        >>> against([100.0, 101.0, 99.0, 100.5, 99.5], 50.0).words("the figure")
        '2.00x faster than the figure (1.98x to 2.02x)'
        >>> against([100.0, 101.0], 50.0).kind  # two samples: too few
        'cannot tell'
    """
    if figure is None or not samples:
        return compare(None, None)
    return compare(list(samples), [float(figure)] * len(samples), higher=higher)


def prediction(predicted: float, measured: Measurement | None, what: str) -> str:
    """Reads the simulator's predicted images/s for ``what`` against the measured loop.

    Args:
        predicted: images/s the simulator predicted.
        measured: seconds per batch (``items`` = the batch size), or None where not measured.
        what: the loop, as the sentence names it ("the naive loop").
    """
    head = f"The simulator predicted {predicted:,.0f} images/s for {what}"
    if measured is None or not measured.samples or not measured.items:
        return f"{head}; it was not measured here."
    v = against(measured.samples, measured.items / predicted, higher=False)  # seconds per batch, both
    n = len(measured.samples)
    head += f"; it measured {measured.items_per_s:,.0f} ({f'median of {n} samples' if n > 1 else 'one sample'})"
    if v.decided:
        return f"{head}: the loop {v.ran('predicted')}."
    return f"{head}. {v.advice_on('the loop from the prediction')}"


def workers_gain(loop: Verdict, decode: Verdict, threads: int) -> str:
    """Reads the loop with ``threads`` loading threads against the naive loop, measured in turns.

    Args:
        loop: the verdict on the loop with threads against the naive loop (times per batch).
        decode: the verdict on one image's decode on a thread against on the loop's own thread.
        threads: the loading threads.
    """
    if loop.kind == verdict.NOT_MEASURED:
        return f"The loop with {threads} loading threads was not measured here."
    rounds = f"{loop.samples} round{'s' if loop.samples != 1 else ''} of each, in turns"
    if loop.kind == verdict.CANNOT_TELL:
        return loop.advice_on(f"the loop with {threads} loading threads from the naive loop ({rounds})")
    said = [f"Timed in turns, {loop.samples} rounds of each, the loop with {threads} loading threads "
            f"{loop.ran('the naive loop', bold=True)}."]
    if loop.kind == verdict.FASTER:
        said.append("Loading in parallel pays here.")
    on_threads = decode.words("on the loop's own thread")
    if decode.kind == verdict.SLOWER:  # measured: each decode took longer on a thread
        said.append(f"Decoding an image on a thread was {on_threads}, so the threads gained less than their number.")
    elif decode.decided and loop.kind != verdict.FASTER:
        said.append(f"Decoding an image on a thread was {on_threads}.")
    if loop.kind != verdict.FASTER or decode.kind == verdict.SLOWER:
        said.append(f"{LIKELY_START} the threads share this machine's cores with each other "
                    "and with whatever else runs on it, and take turns holding Python's lock between decodes.")
    return sentences(*said)


def keeps_up(loading: Sequence[float], figures: Sequence[tuple[float, str]]) -> str:
    """Reads how fast a loader delivers images against what GPUs consume, as published by others.

    Args:
        loading: the loader's images/s, one sample per batch.
        figures: ``(images/s, label)`` of each published training rate.
    """
    if not loading:
        return "The loader was not measured here."
    head = (f"This machine's naive loading (read, decode and collate on one core, no model) delivered "
            f"{statistics.median(loading):,.0f} images/s (median of {len(loading)} batches).")
    said, open_ = [], {}
    for rate, label in figures:
        v = against(loading, rate)
        if v.kind == verdict.FASTER:
            said.append(f"It would keep up with a GPU training at {rate:,.0f} images/s ({label}): "
                        f"{v.words('that GPU consumes', digits=1)}.")
        elif v.kind == verdict.SLOWER:
            said.append(f"It would keep a GPU training at {rate:,.0f} images/s ({label}) waiting: "
                        f"{v.words('that GPU consumes', digits=1)}.")
        elif v.kind == verdict.SAME:
            said.append(f"It delivers about what a GPU training at {rate:,.0f} images/s ({label}) consumes: "
                        f"{v.words('that GPU', same='as fast')}, with nothing to spare.")
        else:
            said.append(f"Against a GPU training at {rate:,.0f} images/s ({label}), it was "
                        f"{v.words('what that GPU consumes', digits=1)}.")
            open_[f"this loader from a GPU at {rate:,.0f} images/s"] = v
    return sentences(head, *said, advice(open_))


def decoders(decode: Verdict, gains: dict[str, float], slowest: str) -> str:
    """Reads exercise 3: torchvision's decoder against Pillow's (measured in turns), and what the
    simulator predicts from their median costs for each preset (``gains``: preset to predicted
    rate with torchvision over with Pillow; ``slowest``: the slowest stage of the last preset)."""
    if not decode.decided:
        what = "torchvision's decoder from Pillow's, timed in turns"
        return (f"{decode.advice_on(what)} The predictions above "
                "rest on the two medians, which this run does not tell apart.")
    measured = f"torchvision's decoder was {decode.words('Pillow')} per image, timed in turns"
    if decode.kind == verdict.SAME:
        return f"{measured}: fed to the simulator, the two medians change its predictions by no more than that."
    predicted = ", ".join(f"the '{name}' preset's predicted rate {times(g, 'with Pillow')}" for name, g in gains.items())
    where = ("compute is the slowest stage here, so a faster decoder pays only where loading is not overlapped"
             if slowest == "compute" else "loading is the slowest stage, so the decoder's speed sets the loop's")
    return f"{measured}. Fed to the simulator: {predicted}; {where}."
