"""What a lesson's CUDA-only cell shows: its own measurement on a GPU, else our committed reference.

A cell that needs CUDA measures where there is one. On a machine without, it shows what the same
cell measured on a GPU of ours (the lesson's committed full-mode reference,
:func:`gpufeed.measure.results.reference`), after one line that says which machine that was; where
no reference holds it, one line that says what the cell shows on a GPU. :func:`measured_or_reference`
is that branch, written once. Taught in ``notebooks/07_dataloader.ipynb`` (each of its GPU cells);
any lesson's GPU cell can use it.

Example:
    >>> measured_or_reference("no-such-lesson", lambda: 42, "x", cuda=True, shows="a number")
    42
    >>> measured_or_reference("no-such-lesson", lambda: 42, "x", cuda=False, shows="a number") is None
    No CUDA here, and no GPU run of ours holds this measurement: on a GPU this cell shows a number.
    True
    >>> measured_or_reference("no-such-lesson", lambda: 42, "x", cuda=True, shows="a number", full_only=True,
    ...                       mode="quick") is None
    This cell measures on a GPU in full mode only (GPUFEED_QUICK=0): it starts CUDA in worker processes, seconds each. No GPU run of ours holds this measurement: on a GPU in full mode this cell shows a number.
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufeed import config
from gpufeed.measure import results
from gpufeed.measure.machine import describe


def measured_or_reference(lesson: str, measure: Callable[[], Any], pick: str | Callable[[list, dict], Any], *,
                          cuda: bool, shows: str, full_only: bool = False, mode: str | None = None) -> Any:
    """``measure()`` where there is CUDA; else what our committed GPU reference for ``lesson`` holds.

    Without CUDA it prints where the value comes from, in one line: the machine of the reference
    (its GPU, CPU, cores and torch), or, where no reference holds the value, what the cell shows on
    a GPU; then returns the value, or None. A measurement too long for quick mode on a GPU (one
    that starts CUDA in worker processes, lesson 07's deep dives) passes ``full_only=True``: on a
    GPU outside full mode it says so and shows the reference as a machine without CUDA would.

    Args:
        lesson: the results' name, e.g. ``"lesson07"``.
        measure: runs the cell's measurement (called only with CUDA) and returns what it found.
        pick: the key of the reference's document that holds the same value (``"cuda_fork_error"``),
            or a function of its ``(measurements, document)`` that returns it; a value that is None
            or empty counts as missing (an older reference, saved before the cell measured it).
        cuda: whether this machine has CUDA (``S.cuda`` in a lesson).
        shows: what the cell measures on a GPU, to finish "on a GPU this cell shows ...".
        full_only: measure only in full mode (:func:`gpufeed.config.mode`), even where there is CUDA.
        mode: the mode to read ``full_only`` against; None: this process's.

    Returns:
        The measured value, the reference's, or None.
    """
    skipped = cuda and full_only and (mode or config.mode()) != "full"
    if cuda and not skipped:
        return measure()
    ref = results.reference(lesson)
    value = None
    if ref is not None:
        value = ref[1].get(pick) if isinstance(pick, str) else pick(*ref)
    lead = ("This cell measures on a GPU in full mode only (GPUFEED_QUICK=0): it starts CUDA in worker processes, "
            "seconds each. " if skipped else "No CUDA here")
    if value is None or (hasattr(value, "__len__") and len(value) == 0):
        print(f"{lead}{'No' if skipped else ', and no'} GPU run of ours holds this measurement: on a GPU"
              f"{' in full mode' if skipped else ''} this cell shows {shows}.")
        return None
    print(f"{lead}{'Our' if skipped else ': our'} reference, measured on {describe(ref[1].get('machine') or {})}:")
    return value
