"""The grid every wording helper's test runs on: samples and verdicts of each kind, and the check a
noisy run's page must pass (no ratio read as a verdict where the run cannot tell)."""

from __future__ import annotations

import re

from gpufeed.measure.verdict import CANNOT_TELL, FASTER, NOT_MEASURED, SAME, SLOWER, Verdict

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]  # about 1% of spread: decided
WIDE = [1.0, 1.6, 0.6, 1.4, 0.7, 1.5, 0.8]              # about 80%: a win inside it cannot be told

WIN = Verdict(1.5, 1.3, 1.7, 7, FASTER, True)            # A 1.5x faster
LOSS = Verdict(0.5, 0.45, 0.55, 7, SLOWER, True)         # A 2x slower
TIE = Verdict(1.0, 0.97, 1.03, 7, SAME, True)            # the same within 4%
CANT = Verdict(1.1, 0.7, 1.6, 7, CANNOT_TELL, True)      # a wide interval
FEW = Verdict(3.0, 2.0, 4.0, 3, CANNOT_TELL, True)       # too few samples, however large the gap
NONE = Verdict(None, None, None, 0, NOT_MEASURED, True)  # a side not measured

#: A ratio worded as a verdict: "1.50x faster", "2x longer".
VERDICT_WORDS = re.compile(r"\d+(\.\d+)?x (faster|slower|longer|shorter)")


def reads_as_cannot_tell(text: str) -> bool:
    """Whether a sentence of a noisy run says the run cannot tell, and reads no ratio as a verdict."""
    return "This run cannot tell" in text and not VERDICT_WORDS.search(text)
