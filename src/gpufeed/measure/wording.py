"""Ratios in words: "2.00x faster", "1.25x slower", "as fast", never "0.80x faster".

Every sentence that compares two measurements words their ratio here, so that it reads right
whichever way the ratio goes: the course's lessons (each lesson's ``reading.py``) and
:mod:`~gpufeed.measure.diagnosis`'s report on a learner's own loop.

Example:
    >>> times(2.0), times(0.8), times(0.999)
    ('2.00x faster', '1.25x slower', 'as fast')
    >>> times(0.5, "naive"), times(1.0, "naive"), times(4.0, "eager", more="more", less="fewer")
    ('2.00x slower than naive', 'as fast as naive', '4.00x more than eager')
"""

from __future__ import annotations

import math


def times(ratio: float, than: str = "", *, more: str = "faster", less: str = "slower", same: str = "as fast",
          flat: float | None = None, digits: int | None = 2, bold: bool = False) -> str:
    """``ratio`` (new / old, e.g. images/s over images/s) in words, from its sign: ``"2.00x faster"``
    above 1, ``"1.25x slower"`` (the inverse) below, ``same`` when it rounds to 1 at ``digits``
    either way (or, with ``flat``, when the larger of it and its inverse is within ``flat`` of 1: one
    band for a win and a loss); with ``than``, what it is compared with: ``"2.00x faster than
    naive"``, ``"as fast as naive"``.

    Args:
        ratio: a positive ratio (for speed: a ratio of rates, or the other's time over this one's).
        than: the thing compared with, or "" for the bare words.
        more, less, same: the words for above 1, below 1, and equal (e.g. "smaller", "larger",
            "the same size" for file sizes; "longer", "shorter", "as long" for durations).
        flat: the band around 1 read as ``same`` (e.g. 0.02 for noisy timings); None: rounding only.
        digits: decimals of the ratio shown (thousands are grouped: ``"2,345x shorter"``); None: as
            many as a ratio of noisy timings can carry, 2 below 10x, 1 below 100x, none above
            (``"1.07x"``, ``"21.3x"``, ``"339x"``).
        bold: the ratio in Markdown bold (``"**6.3x** as fast as"``).

    Example:
        >>> times(1.015, flat=0.02), times(1.03, flat=0.02)
        ('as fast', '1.03x faster')
        >>> times(4.0, more="smaller", less="larger", digits=1), times(1 / 2345, more="longer", less="shorter", digits=0)
        ('4.0x smaller', '2,345x shorter')
        >>> times(1.07, digits=None), times(21.34, digits=None), times(1 / 338.68, digits=None)
        ('1.07x faster', '21.3x faster', '339x slower')
    """
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ValueError(f"times: a ratio of two positive measurements is positive and finite (got {ratio!r})")
    value = max(ratio, 1 / ratio)
    if digits is None:
        digits = 2 if round(value, 2) < 10 else 1 if round(value, 1) < 100 else 0  # by the value as shown
    if value - 1 <= flat if flat is not None else round(value, digits) == 1:  # the same band either way
        return f"{same} as {than}" if than else same
    mark = "**" if bold else ""
    words = f"{mark}{value:,.{digits}f}x{mark} {more if ratio > 1 else less}"
    return f"{words} than {than}" if than else words


def band(*measurements, floor: float = 0.05) -> float:
    """The band around 1 inside which a ratio of ``measurements`` reads as "the same" (:func:`times`'s
    ``flat``): the largest relative spread (IQR over median) among them, and at least ``floor``. Two
    timings whose ratio lies inside it are not told apart by this run.

    Args:
        measurements: objects with a ``spread`` (:class:`gpufeed.measure.harness.Measurement`).
        floor: the smallest band, for runs whose spread is tiny (timers and machines vary by more).

    Example:
        >>> from types import SimpleNamespace as M
        >>> band(M(spread=0.02), M(spread=0.3)), band(M(spread=0.01)), band(M(spread=0.01), floor=0.1)
        (0.3, 0.05, 0.1)
    """
    return max([floor, *(m.spread for m in measurements)])


def versus(a: float, b: float, bold: bool = True) -> str:
    """How rate ``a`` compares with rate ``b``, as words to put between the two: "about as fast as"
    within 5%, else the ratio (:func:`times`), in Markdown bold unless ``bold=False``.

    Example:
        >>> versus(54.5, 8.7), versus(8.7, 54.5, bold=False), versus(10.0, 10.3)
        ('**6.3x** as fast as', '6.3x slower than', 'about as fast as')
    """
    return times(a / b, more="as fast as", less="slower than", same="about as fast as", flat=0.05, digits=1,
                 bold=bold)


def sentences(*parts: str) -> str:
    """The non-empty ``parts`` as one paragraph, a space between two: a reading built from optional
    sentences (a cause only where there is one) has no double spaces.

    Example:
        >>> sentences("2.00x faster.", "", "One likely cause, not measured here: the copies.")
        '2.00x faster. One likely cause, not measured here: the copies.'
    """
    return " ".join(p for p in parts if p)
