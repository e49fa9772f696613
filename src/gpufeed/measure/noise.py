"""When a measurement is noisy, and how a notebook says so.

A :class:`~gpufeed.measure.harness.Measurement` is *noisy* when its inter-quartile range is above
:data:`NOISY` of its median. :func:`~gpufeed.measure.harness.benchmark` and
:func:`~gpufeed.measure.harness.interleave` then warn (:class:`NoisyMeasurementWarning`, naming the
measurements, :func:`noisy_note`); in a notebook the warning prints as one ``[noisy]`` line beside
the cell's numbers (:func:`show_noisy_as_marks`, which :func:`gpufeed.setup` calls) rather than on
stderr. Torch-free; it never imports the harness (the harness imports it).

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> Measurement("quiet", [1.0, 1.0, 1.0]).noisy, noisy_note([Measurement("quiet", [1.0, 1.0])])
    (False, None)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Protocol

#: IQR / median above which a measurement is flagged as noisy (torch.utils.benchmark uses ~10% too).
NOISY = 0.10


class Measured(Protocol):
    """What this module reads of a :class:`~gpufeed.measure.harness.Measurement`: its name, and
    whether its spread is above :data:`NOISY`."""

    name: str

    @property
    def noisy(self) -> bool: ...


class NoisyMeasurementWarning(UserWarning):
    """The spread of a measurement is large: the numbers may not be trustworthy."""


def noisy_note(measurements: Iterable[Measured]) -> str | None:
    """What a :class:`NoisyMeasurementWarning` says: which measurements are noisy, by name; None
    when none is. The text holds no number, so that Python, which shows a warning once per text
    and place, names a case of a sweep once however many sizes it is measured at (each one's
    spread is in its own ``[noisy]`` mark: :meth:`~gpufeed.measure.harness.Measurement.__str__`,
    :func:`gpufeed.measure.harness.compare`).

    Example:
        >>> from gpufeed.measure.harness import Measurement
        >>> noisy_note([Measurement("pinned", [1.0, 1.5, 2.0]), Measurement("quiet", [1.0, 1.0, 1.0])])
        'pinned: IQR above 10% of the median; close other programs or raise repeats'
        >>> noisy_note([Measurement("quiet", [1.0, 1.0])]) is None
        True
    """
    noisy = [m.name for m in measurements if m.noisy]
    if not noisy:
        return None
    return f"{', '.join(noisy)}: IQR above {NOISY:.0%} of the median; close other programs or raise repeats"


def warn_if_noisy(ms: list[Measured]) -> None:
    """Warns, naming each noisy measurement: Python shows one message once per place, so each
    noisy case is named once, where it was measured (3 levels up: the caller of
    :func:`~gpufeed.measure.harness.benchmark` or :func:`~gpufeed.measure.harness.interleave`,
    which call this)."""
    note = noisy_note(ms)
    if note:
        warnings.warn(note, NoisyMeasurementWarning, stacklevel=3)


def show_noisy_as_marks() -> None:
    """From now on, a :class:`NoisyMeasurementWarning` prints as the harness's own mark, one line on
    stdout beside the cell's numbers (``[noisy] pinned: IQR above 10% of the median; ...``), rather than
    as Python's warning on stderr, which starts with the file and line that warned (in a notebook,
    the kernel's temporary file). Other warnings show as before. :func:`gpufeed.setup` calls it;
    calling it again changes nothing.

    Example:
        >>> import warnings
        >>> from gpufeed.measure.harness import Measurement
        >>> saved = warnings.showwarning
        >>> show_noisy_as_marks()
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("always")
        ...     warn_if_noisy([Measurement("pinned", [1.0, 1.5, 2.0])])
        [noisy] pinned: IQR above 10% of the median; close other programs or raise repeats
        >>> warnings.showwarning = saved
    """
    if getattr(warnings.showwarning, "_noisy_as_marks", False):
        return
    shown_before = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, NoisyMeasurementWarning):
            print(f"[noisy] {message}")
        else:
            shown_before(message, category, filename, lineno, file, line)

    show._noisy_as_marks = True
    warnings.showwarning = show
