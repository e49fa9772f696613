"""One verdict for every comparison the course words: faster, slower, the same, or "this run cannot tell".

A ratio of two medians is a number; whether it says anything depends on how much the samples
behind it move. Every sentence that compares two measurements (a lesson's, ``gpufeed bench``'s,
:mod:`~gpufeed.measure.diagnosis`'s) reads its verdict from here, so that one rule decides:

* the two arms are timed **in turns** (A, B, A, B, ...: :func:`in_turns`), so that a burst of other
  work slows both a little rather than one a lot;
* the **ratio of the medians** (how many times faster A ran than B) gets an **interval**: the 5th
  and 95th percentiles of the same ratio over :data:`RESAMPLES` bootstrap resamples of the samples
  (of the pairs, for arms taken in turns), seeded, so the same samples always give the same words;
* four verdicts: **faster** or **slower** when the interval lies on one side of 1; **the same within
  X%** when it holds 1 and is narrow (within :data:`NARROW` of 1 either way); and **this run cannot
  tell** when it holds 1 and is wide, or when an arm has fewer than :data:`MIN_SAMPLES` samples.
  "Cannot tell" says how wide the interval is and what would tell (:attr:`Verdict.advice`).

The one measure of a measurement's own spread, IQR over median, is
:attr:`gpufeed.measure.harness.Measurement.spread`, and the one band built from it is
:func:`gpufeed.measure.wording.band`; nothing else decides "the same". Taught in
``notebooks/02_profiling.ipynb`` (section 8); every lesson's sentences use it.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> fast = Measurement("fast", [1.00, 1.02, 0.98, 1.01, 0.99])
    >>> slow = Measurement("slow", [2.00, 2.05, 1.97, 2.02, 1.99])
    >>> v = compare(fast, slow, paired=True)
    >>> v.kind, round(v.ratio, 2), v.words("slow")
    ('faster', 2.0, '2.00x faster than slow (2.00x to 2.01x)')
    >>> compare(slow, fast, paired=True).words("fast")
    '2.00x slower than fast (2.00x to 2.01x)'
    >>> same = Measurement("same", [1.01, 0.99, 1.00, 1.02, 0.98])
    >>> compare(same, fast, paired=True).words("fast")
    'as fast as fast (within 4%)'
    >>> noisy = Measurement("noisy", [0.5, 1.6, 1.0, 0.7, 1.9])
    >>> v = compare(noisy, fast, paired=True)
    >>> v.kind, v.words("fast")
    ('cannot tell', 'not told apart from fast by this run (0.52x to 2.00x)')
    >>> import os; os.environ["GPUFEED_MODE"] = "site"
    >>> print(v.advice)
    This run cannot tell: the ratio's interval, 0.52x to 2.00x, holds both a gain and a loss; full mode (GPUFEED_MODE=full: more samples, larger sizes) or an idle machine would tell.
    >>> del os.environ["GPUFEED_MODE"]
    >>> compare(Measurement("a", [1.0, 1.0]), Measurement("b", [2.0, 2.0])).words("b")
    'not told apart from b by this run (2 samples per arm)'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Samples each arm needs before a verdict may be anything but "this run cannot tell".
MIN_SAMPLES = 5
#: An interval that holds 1 and stays within this of it either way reads "the same within X%";
#: a wider one reads "this run cannot tell".
NARROW = 0.10
#: Bootstrap resamples behind an interval, and the share of them it holds (5th to 95th percentile).
RESAMPLES = 2000
LEVEL = 0.90

FASTER, SLOWER, SAME, CANNOT_TELL, NOT_MEASURED = "faster", "slower", "the same", "cannot tell", "not measured"
#: How a sentence that gives a cause the page did not measure begins (lower case, to follow a colon;
#: :data:`LIKELY_START` begins a sentence).
LIKELY = "one likely cause, not measured here:"
LIKELY_START = LIKELY[0].upper() + LIKELY[1:]


def what_would_tell() -> str:
    """What would tell where this run cannot, for the mode it ran in (:func:`gpufeed.config.mode`).

    Example:
        >>> import os
        >>> os.environ["GPUFEED_MODE"] = "site"
        >>> what_would_tell()
        'full mode (GPUFEED_MODE=full: more samples, larger sizes) or an idle machine would tell'
        >>> del os.environ["GPUFEED_MODE"]
    """
    from gpufeed import config

    return {"quick": "site or full mode (GPUFEED_MODE=site or full: more samples, larger sizes) or an idle machine "
                     "would tell",
            "site": "full mode (GPUFEED_MODE=full: more samples, larger sizes) or an idle machine would tell",
            "full": "more repeats or an idle machine would tell"}[config.mode()]


def _samples(n: int) -> str:
    return f"{n} sample{'s' if n != 1 else ''} per arm"


@dataclass(frozen=True)
class Verdict:
    """How arm A compares with arm B, in one of five kinds.

    Attributes:
        ratio: how many times faster A is than B (B's median time over A's; for values where more is
            better, A's median over B's): above 1, A is faster. None where a side was not measured.
        low, high: the interval of ``ratio`` (:data:`LEVEL` of the bootstrap resamples), or None.
        samples: the samples of the arm that has fewer.
        kind: :data:`FASTER`, :data:`SLOWER`, :data:`SAME`, :data:`CANNOT_TELL` or :data:`NOT_MEASURED`.
        paired: whether the arms were taken in turns and resampled as pairs.
    """

    ratio: float | None
    low: float | None
    high: float | None
    samples: int
    kind: str
    paired: bool = False

    @property
    def decided(self) -> bool:
        """Whether this run tells (faster, slower or the same), rather than cannot tell or did not measure."""
        return self.kind in (FASTER, SLOWER, SAME)

    @property
    def within(self) -> float | None:
        """How far from 1 the interval reaches, the larger way, as a fraction (0.04: "within 4%")."""
        if self.low is None or self.high is None:
            return None
        return max(self.high - 1, 1 / self.low - 1, 0.0)

    def interval(self, digits: int = 2) -> str:
        """The interval in words, as the ratio is worded: ``"1.31x to 1.70x"``; for a loss, as
        times slower (``"1.10x to 1.40x"``, the inverse of each end, smaller first)."""
        if self.low is None or self.high is None:
            return "no interval"
        lo, hi = (1 / self.high, 1 / self.low) if self.kind == SLOWER else (self.low, self.high)
        return f"{lo:.{digits}f}x to {hi:.{digits}f}x"

    def words(self, than: str = "", *, more: str = "faster", less: str = "slower", same: str = "as fast",
              bold: bool = False, digits: int = 2) -> str:
        """The verdict as words to put after the subject: ``"1.52x faster than X (1.31x to 1.70x)"``,
        ``"1.25x slower than X (1.10x to 1.40x)"``, ``"as fast as X (within 4%)"``, ``"not told
        apart from X by this run (0.71x to 1.52x)"``, ``"not measured against X"``.

        Args:
            than: what A is compared with ("with none", "the folder"); "" for the bare words.
            more, less, same: the words for a gain, a loss and a tie ("smaller", "larger", "as large").
            bold: the ratio (or the tie) in Markdown bold.
            digits: decimals of the ratio and its interval.
        """
        mark = "**" if bold else ""
        if self.kind == NOT_MEASURED:
            return f"not measured against {than}" if than else "not measured"
        if self.kind == CANNOT_TELL:
            why = self.why(digits)
            return (f"not told apart from {than} by this run ({why})" if than
                    else f"not told apart by this run ({why})")
        if self.kind == SAME:
            head = f"{mark}{same}{mark}" + (f" as {than}" if than else "")
            return f"{head} (within {math.ceil(self.within * 100 - 1e-9):.0f}%)"
        value = max(self.ratio, 1 / self.ratio)
        head = f"{mark}{value:.{digits}f}x {more if self.kind == FASTER else less}{mark}"
        return f"{head}{f' than {than}' if than else ''} ({self.interval(digits)})"

    def why(self, digits: int = 2) -> str:
        """What the verdict rests on, for a parenthesis: its interval (``"0.90x to 1.70x"``), or its
        too few samples (``"3 samples per arm"``), or ``"not measured"``."""
        if self.kind == NOT_MEASURED:
            return "not measured"
        return self.interval(digits) if self.samples >= MIN_SAMPLES else _samples(self.samples)

    def ran(self, than: str = "", verb: str = "ran", **kw) -> str:
        """The verdict after its verb: ``"ran 1.52x faster than X (1.31x to 1.70x)"`` (``verb``:
        "trained", "read", ...), and for a run that cannot tell, ``"was not told apart from X by this
        run (...)"`` (``kw``: :meth:`words`'s).

        Example:
            >>> Verdict(1.3, 1.2, 1.4, 5, FASTER).ran("X"), Verdict(1.3, 0.9, 1.7, 5, CANNOT_TELL).ran("X", "trained")
            ('ran 1.30x faster than X (1.20x to 1.40x)', 'was not told apart from X by this run (0.90x to 1.70x)')
        """
        return f"{verb if self.decided else 'was'} {self.words(than, **kw)}"

    def advice_on(self, what: str = "") -> str:
        """For a run that cannot tell, what a reader should know and do, naming ``what`` it could
        not tell ("the loop from the workers"); "" otherwise.

        Example:
            >>> Verdict(1.0, 0.5, 2.0, 3, CANNOT_TELL).advice_on("a from b").split(";")[0]
            'This run cannot tell a from b: 3 samples per arm, and a verdict needs at least 5'
        """
        if self.kind != CANNOT_TELL:
            return ""
        head = f"This run cannot tell{' ' + what if what else ''}:"
        if self.samples < MIN_SAMPLES:
            return f"{head} {_samples(self.samples)}, and a verdict needs at least {MIN_SAMPLES}; {what_would_tell()}."
        return f"{head} the ratio's interval, {self.interval()}, holds both a gain and a loss; {what_would_tell()}."

    @property
    def advice(self) -> str:
        """For a run that cannot tell, what a reader should know and do; "" otherwise (:meth:`advice_on`)."""
        return self.advice_on()

    def agrees(self, other: Verdict) -> bool:
        """Whether two verdicts on one question do not contradict: no faster against slower, and no
        "the same" against a difference outside its band. "Cannot tell" contradicts nothing."""
        if not (self.decided and other.decided):
            return True
        if {self.kind, other.kind} == {FASTER, SLOWER}:
            return False
        if SAME in (self.kind, other.kind) and self.kind != other.kind:
            tie, diff = (self, other) if self.kind == SAME else (other, self)
            edge = 1 + max(tie.within or 0.0, NARROW)
            return 1 / edge <= diff.ratio <= edge
        return True

    def reads(self, first: Verdict, where: str) -> str:
        """A sentence for the second measurement of one question on a page, reading the first
        (``where``: "section 2"): that they agree, or that they differ and by how much.

        Example:
            >>> a = Verdict(1.5, 1.3, 1.7, 5, FASTER, True)
            >>> b = Verdict(1.4, 1.2, 1.6, 5, FASTER, True)
            >>> b.reads(a, "section 2")
            'This agrees with section 2 (1.50x faster there, 1.40x faster here).'
            >>> Verdict(0.8, 0.7, 0.9, 5, SLOWER, True).reads(a, "section 2")
            'This differs from section 2, which found it 1.50x faster (1.30x to 1.70x); here it ran 1.25x slower (1.11x to 1.43x).'
        """
        if not (self.decided and first.decided):
            return (f"Section by section: {where} found it {first.words()}, this run here {self.words()}; "
                    "where either cannot tell, the two do not disagree.")
        if self.agrees(first):
            return f"This agrees with {where} ({first.words().split(' (')[0]} there, {self.words().split(' (')[0]} here)."
        return (f"This differs from {where}, which found it {first.words()}; here it ran {self.words()}.")


def advice(verdicts) -> str:
    """Once for a part of a page that words several verdicts, what would tell where any cannot: a
    dict names what each tells apart (``{"the loop from the workers": v}``); a list does not, so its
    sentence is general (or, where a verdict lacks samples, says how many it needs); "" where every
    one tells (or was not measured).

    Example:
        >>> import os
        >>> os.environ["GPUFEED_MODE"] = "full"
        >>> print(advice({"the loop from the workers": Verdict(1.0, 0.5, 2.0, 5, CANNOT_TELL),
        ...               "the tails apart": Verdict(2.0, 1.9, 2.1, 5, FASTER)}))
        This run cannot tell the loop from the workers: the ratio's interval, 0.50x to 2.00x, holds both a gain and a loss; more repeats or an idle machine would tell.
        >>> advice([Verdict(2.0, 1.9, 2.1, 5, FASTER)]), advice([Verdict(1.1, 0.7, 1.6, 5, CANNOT_TELL)] * 2)
        ('', 'Where this run cannot tell, more repeats or an idle machine would tell.')
        >>> del os.environ["GPUFEED_MODE"]
    """
    named = verdicts if isinstance(verdicts, dict) else {f"#{i}": v for i, v in enumerate(verdicts)}
    open_ = {what: v for what, v in named.items() if v.kind == CANNOT_TELL}
    if not open_:
        return ""
    if len(open_) == 1 and isinstance(verdicts, dict):
        (what, v), = open_.items()
        return v.advice_on(what)
    if isinstance(verdicts, dict):
        *most, last = open_
        return (f"This run cannot tell {', '.join(most)} or {last}: each interval holds both a gain and a loss, "
                f"or an arm has too few samples; {what_would_tell()}.")
    few = [v for v in open_.values() if v.samples < MIN_SAMPLES]  # the samples a verdict needs, said once
    return few[0].advice if few else f"Where this run cannot tell, {what_would_tell()}."


def _ratio_of_medians(a: Sequence[float], b: Sequence[float], higher: bool) -> float:
    ma, mb = statistics.median(a), statistics.median(b)
    return ma / mb if higher else mb / ma


def compare(a, b, *, paired: bool = False, higher: bool = False, narrow: float = NARROW) -> Verdict:
    """The verdict on arm ``a`` against arm ``b``.

    Args:
        a, b: :class:`~gpufeed.measure.harness.Measurement` objects (seconds per call) or sequences
            of positive samples; None for a side that was not measured.
        paired: the arms were taken in turns (sample i of each in one round): resample pairs.
        higher: the samples are values where more is better (images/s, GB/s), not times.
        narrow: how close to 1 an interval that holds 1 must stay to read "the same" (:data:`NARROW`).

    Returns:
        A :class:`Verdict`; fewer than :data:`MIN_SAMPLES` samples on a side give "cannot tell".
    """
    if a is None or b is None:
        return Verdict(None, None, None, 0, NOT_MEASURED, paired)
    xs, ys = [float(s) for s in getattr(a, "samples", a)], [float(s) for s in getattr(b, "samples", b)]
    if not xs or not ys:
        return Verdict(None, None, None, 0, NOT_MEASURED, paired)
    if not all(s > 0 and math.isfinite(s) for s in xs + ys):
        raise ValueError("compare: samples are positive, finite times or rates (got a zero, a negative or a nan)")
    if paired and len(xs) != len(ys):
        raise ValueError(f"compare: arms taken in turns have as many samples each (got {len(xs)} and {len(ys)})")
    import numpy as np

    ratio = _ratio_of_medians(xs, ys, higher)
    n = min(len(xs), len(ys))
    x, y = np.asarray(xs), np.asarray(ys)
    rng = np.random.default_rng(0)  # seeded: the same samples always give the same interval and words
    if paired:  # resample rounds: sample i of A with sample i of B
        idx = rng.integers(0, n, size=(RESAMPLES, n))
        ma, mb = np.median(x[idx], axis=1), np.median(y[idx], axis=1)
    else:
        ma = np.median(x[rng.integers(0, len(x), size=(RESAMPLES, len(x)))], axis=1)
        mb = np.median(y[rng.integers(0, len(y), size=(RESAMPLES, len(y)))], axis=1)
    ratios = ma / mb if higher else mb / ma
    tail = (1 - LEVEL) / 2
    low, high = (float(q) for q in np.quantile(ratios, [tail, 1 - tail]))
    low, high = min(low, ratio), max(high, ratio)
    if n < MIN_SAMPLES:
        kind = CANNOT_TELL
    elif low > 1:
        kind = FASTER
    elif high < 1:
        kind = SLOWER
    elif high <= 1 + narrow and low >= 1 / (1 + narrow):
        kind = SAME
    else:
        kind = CANNOT_TELL
    return Verdict(ratio, low, high, n, kind, paired)


@dataclass
class Turns:
    """Two arms timed in turns (:func:`in_turns`): their measurements and the verdict on A against B."""

    a: object
    b: object
    verdict: Verdict

    def words(self, than: str | None = None, **kw) -> str:
        """:meth:`Verdict.words`, comparing with arm B's name unless ``than`` says otherwise."""
        return self.verdict.words(self.b.name if than is None else than, **kw)


def in_turns(a: Callable[[], object], b: Callable[[], object], *, names: tuple[str, str] = ("a", "b"),
             repeats: int = MIN_SAMPLES, warmup: int = 1, items: float | None = None, params: dict | None = None,
             desc: str | None = None) -> Turns:
    """Times ``a()`` and ``b()`` in turns (a, b, a, b, ...; :func:`gpufeed.measure.harness.interleave`,
    CUDA synchronised around each call) and gives the verdict on A against B.

    Example:
        >>> t = in_turns(lambda: sum(range(20000)), lambda: sum(range(20000)), names=("one", "other"), repeats=5)
        >>> [len(m.samples) for m in (t.a, t.b)], t.verdict.paired
        ([5, 5], True)
    """
    from gpufeed.measure.harness import interleave

    if names[0] == names[1]:
        raise ValueError(f"in_turns: the two arms need two names (got {names[0]!r} twice)")
    ma, mb = interleave({names[0]: a, names[1]: b}, repeats=repeats, warmup=warmup, items=items,
                        params={names[0]: dict(params or {}), names[1]: dict(params or {})}, desc=desc)
    return Turns(ma, mb, compare(ma, mb, paired=True))
