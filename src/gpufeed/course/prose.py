"""Sentences that read a measurement, shown as prose: Markdown in a notebook, plain text elsewhere.

A lesson's conclusion is a sentence built from the numbers just measured; in a notebook it should
read as text, not as the output of a long ``print``. Used by every lesson's "what the number
means" cells.

Example:
    >>> say("Pinned memory is **2.0x** pageable.")  # outside a notebook: printed
    Pinned memory is **2.0x** pageable.
"""

from __future__ import annotations

import math

from gpufeed.data.watch import in_a_notebook


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Colab, nbmake), False in a terminal or a script
    (:func:`gpufeed.data.watch.in_a_notebook`)."""
    return in_a_notebook()


def say(text: str) -> None:
    """Shows ``text`` (Markdown) rendered in a notebook, printed anywhere else.

    Args:
        text: one or a few sentences in Markdown; numbers already formatted.
    """
    if in_notebook():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)


def times(ratio: float, more: str = "faster", less: str = "slower", same: str = "as fast", digits: int = 2,
          than: str = "") -> str:
    """A ratio as words that read right either way: ``"2.50x faster"``, ``"1.25x slower"``.

    A sentence built from a measurement must not print "0.80x faster" when the thing was slower:
    under 1 the ratio is inverted and the other word used; when it rounds to 1 either way, ``same``.

    Args:
        ratio: how many times *more* (for speed: the other's time over this one's).
        more, less: the words for a ratio above and below 1 ("smaller"/"larger" for sizes).
        same: what to say when the ratio shows as 1 at ``digits`` digits.
        than: what it is compared with, if the words should name it: "than X", or "as X" after ``same``.

    Example:
        >>> times(2.5), times(0.8), times(1.001)
        ('2.50x faster', '1.25x slower', 'as fast')
        >>> times(0.5, than="naive"), times(1.0, than="naive")
        ('2.00x slower than naive', 'as fast as naive')
        >>> times(4.0, "smaller", "larger", "the same size", digits=1), times(1 / 2345, "longer", "shorter", digits=0)
        ('4.0x smaller', '2,345x shorter')
    """
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ValueError(f"times() needs a positive, finite ratio (got {ratio!r}): check that both medians are > 0")
    value = max(ratio, 1 / ratio)
    if round(value, digits) == 1:
        return f"{same} as {than}" if than else same
    return f"{value:,.{digits}f}x {more if ratio > 1 else less}" + (f" than {than}" if than else "")
