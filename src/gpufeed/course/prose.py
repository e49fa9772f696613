"""Sentences that read a measurement, shown as prose: Markdown in a notebook, plain text elsewhere.

A lesson's conclusion is a sentence built from the numbers just measured; in a notebook it should
read as text, not as the output of a long ``print``. Used by every lesson's "what the number
means" cells.

:func:`times` words a ratio so that it reads right either way: a sentence that compares two
measurements must not say "0.80x faster" when the first was slower.

Example:
    >>> say("Pinned memory is **2.0x** pageable.")  # outside a notebook: printed
    Pinned memory is **2.0x** pageable.
    >>> times(2.0), times(0.8), times(0.999)
    ('2.00x faster', '1.25x slower', 'as fast')
    >>> times(0.5, "naive"), times(1.0, "naive"), times(4.0, "eager", more="more", less="fewer")
    ('2.00x slower than naive', 'as fast as naive', '4.00x more than eager')
"""

from __future__ import annotations

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


def times(ratio: float, than: str = "", *, more: str = "faster", less: str = "slower", same: str = "as fast") -> str:
    """``ratio`` (new / old, e.g. images/s over images/s) in words, from its sign: ``"2.00x faster"``
    above 1, ``"1.25x slower"`` (the inverse) below, ``same`` when it rounds to 1.00 either way;
    with ``than``, what it is compared with: ``"2.00x faster than naive"``, ``"as fast as naive"``.

    Args:
        ratio: a positive ratio of two rates (a ratio of times is the other way round: invert it).
        than: the thing compared with, or "" for the bare words.
        more, less, same: the words for above 1, below 1, and equal (e.g. "more", "fewer", "as many").
    """
    if not ratio > 0:
        raise ValueError(f"times: a ratio of two rates is positive (got {ratio!r})")
    if f"{ratio:.2f}" == "1.00" and f"{1 / ratio:.2f}" == "1.00":
        return f"{same} as {than}" if than else same
    words = f"{ratio:.2f}x {more}" if ratio >= 1 else f"{1 / ratio:.2f}x {less}"
    return f"{words} than {than}" if than else words
