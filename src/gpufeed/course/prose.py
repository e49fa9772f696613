"""Sentences that read a measurement, shown as prose: Markdown in a notebook, plain text elsewhere.

A lesson's conclusion is a sentence built from the numbers just measured; in a notebook it should
read as text, not as the output of a long ``print``: :func:`say` shows it. The sentences themselves
come from each lesson's ``reading.py``, which decides every comparison with the one verdict method
(:mod:`gpufeed.measure.verdict`) and words ratios with :mod:`gpufeed.measure.wording`. Used by every
lesson's "what the number means" cells.

Example:
    >>> say("Pinned memory is **2.0x** pageable.")  # outside a notebook: printed
    Pinned memory is **2.0x** pageable.
"""

from __future__ import annotations

from gpufeed.data.progress_bar import in_a_notebook

__all__ = ["in_notebook", "say"]


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
