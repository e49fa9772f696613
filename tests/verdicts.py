"""Verdicts of every kind, for the grid tests of the lessons' wording helpers (lessons 05, 06, 07):
a win, a loss, a tie, a win inside the spread (the interval holds 1), too few samples, not measured,
and verdicts built from the samples of a noisy run (wide, made-up intervals)."""

from __future__ import annotations

from gpufeed.measure import verdict
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, SAME, SLOWER, Verdict, compare

WIN = Verdict(2.0, 1.8, 2.2, 5, FASTER, True)
LOSS = Verdict(0.5, 0.45, 0.55, 5, SLOWER, True)
TIE = Verdict(1.01, 0.97, 1.04, 5, SAME, True)
INSIDE = Verdict(1.3, 0.8, 1.9, 5, CANNOT_TELL, True)  # a win inside the spread: the interval holds 1
FEW = Verdict(3.0, 2.5, 3.5, 3, CANNOT_TELL, True)  # a large gap from 3 samples per arm
NONE = Verdict(None, None, None, 0, verdict.NOT_MEASURED, True)

#: name -> verdict, for parametrised grids
GRID = {"win": WIN, "loss": LOSS, "tie": TIE, "inside the spread": INSIDE, "few samples": FEW, "not measured": NONE}

#: what a verdict's words must contain, by kind, so that a sentence cannot read one kind as another
MARKS = {FASTER: "faster", SLOWER: "slower", SAME: "as fast", CANNOT_TELL: "not told apart", verdict.NOT_MEASURED: "not measured"}


def noisy(a: list[float], b: list[float]) -> Verdict:
    """The verdict on two arms of a noisy run, taken in turns (seconds per call)."""
    return compare(Measurement("a", a), Measurement("b", b), paired=True)


#: samples of a noisy 2-core run: each pair of arms overlaps, so no verdict may be decided
NOISY_A = [1.0, 1.9, 0.6, 1.4, 0.8]
NOISY_B = [1.3, 0.7, 1.6, 0.9, 1.2]
