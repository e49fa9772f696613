"""Sentences that read a measurement, shown as prose: Markdown in a notebook, plain text elsewhere.

A lesson's conclusion is a sentence built from the numbers just measured; in a notebook it should
read as text, not as the output of a long ``print``. Used by every lesson's "what the number
means" cells.

:func:`times` words a ratio so that it reads right either way: a sentence that compares two
measurements must not say "0.80x faster" when the first was slower; :func:`versus` is the same
for two rates, as words between them; :func:`band` is the ``flat`` of a ratio of two measurements,
from their spread. All three live in :mod:`gpufeed.measure.wording` (the measure room words its
own reports with them, and may not import the course) and are re-exported here, beside the one
verdict method that decides every comparison a lesson words (:func:`compare`, :func:`in_turns`,
:class:`Verdict`, from :mod:`gpufeed.measure.verdict`): faster, slower, the same, or "this run
cannot tell".

Example:
    >>> say("Pinned memory is **2.0x** pageable.")  # outside a notebook: printed
    Pinned memory is **2.0x** pageable.
    >>> times(0.8, "pageable")
    '1.25x slower than pageable'
"""

from __future__ import annotations

from gpufeed.data.progress_bar import in_a_notebook
from gpufeed.measure.verdict import Verdict, compare, in_turns
from gpufeed.measure.wording import band, times, versus

__all__ = ["Verdict", "band", "compare", "in_notebook", "in_turns", "say", "times", "versus"]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Colab, nbmake), False in a terminal or a script
    (:func:`gpufeed.data.progress_bar.in_a_notebook`)."""
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
