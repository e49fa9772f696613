"""Numbers in the units a reader takes in at a glance: times (ns to s), rates with a k/M/G prefix,
and sizes in the names of measurements (MiB). Torch-free; :class:`gpufeed.measure.harness.Measurement`
prints with these, and so do the diagnosis report and the published figures.

Example:
    >>> format_time(0.0125), format_rate(12.3e9, "B/s"), size_label(256 * MB)
    ('12.5 ms', '12.3 GB/s', '256 MB')
"""

from __future__ import annotations

import math

#: Bytes in a MiB (``MB`` in the names of measurements: 2**20 bytes; GB/s rates are 10^9 bytes).
MB = 1 << 20


def format_time(seconds: float) -> str:
    """Seconds in the unit a reader takes in at a glance.

    Example:
        >>> format_time(3.4e-6), format_time(0.0125), format_time(42.0)
        ('3.40 us', '12.5 ms', '42.0 s')
    """
    if seconds == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale or unit == "ns":
            return f"{_three_digits(seconds / scale)} {unit}"
    raise AssertionError("unreachable")


def format_rate(per_s: float, unit: str = "") -> str:
    """A rate with a k/M/G prefix, three significant digits.

    Example:
        >>> format_rate(1234.5, "images/s"), format_rate(12.3e9, "B/s"), format_rate(2.5)
        ('1.23 kimages/s', '12.3 GB/s', '2.50')
    """
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)):
        if abs(per_s) >= scale or prefix == "":
            return f"{_three_digits(per_s / scale)} {prefix}{unit}".rstrip()
    raise AssertionError("unreachable")


def _three_digits(x: float) -> str:
    """``x`` with three significant digits (at least two decimals below 1; as is if 0 or not finite)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:.2f}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{digits}f}"


def size_label(nbytes: int) -> str:
    """A size in the names of measurements, e.g. ``"256 MB"`` (MiB: ``MB`` is 2**20 bytes here).

    Example:
        >>> size_label(64 * 1024), size_label(1040 * MB)
        ('0.0625 MB', '1040 MB')
    """
    return f"{nbytes / MB:g} MB"
