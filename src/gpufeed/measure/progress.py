"""Progress bars for the course's long loops (``tqdm.auto``): a widget in JupyterLab, a text line
in a terminal, none in a log. When they show is one rule, the library's:
:func:`gpufeed.data.progress_bar.show_progress` (``GPUFEED_PROGRESS``, quick mode, pytest, ``CI``, then
whether someone watches).

Example:
    >>> import os
    >>> os.environ["GPUFEED_PROGRESS"] = "0"
    >>> [x for x in bar(range(3), desc="counting")]  # no bar: the loop itself is unchanged
    [0, 1, 2]
    >>> del os.environ["GPUFEED_PROGRESS"]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpufeed.data.progress_bar import show_progress


def bar(iterable: Iterable | None = None, *, desc: str, total: int | None = None, unit: str = "it",
        show: bool | None = None, **kwargs):
    """A ``tqdm.auto`` bar over ``iterable`` (or one updated by hand with ``total``), labelled ``desc``.

    Shown when ``show`` is True, or, with ``show=None``, where :func:`~gpufeed.data.progress_bar.show_progress`
    says so; a hidden bar
    costs nothing and iterates the same. It disappears once done (``leave=False``): the cell's
    output keeps the results, not a finished bar.
    """
    from tqdm.auto import tqdm

    kwargs.setdefault("leave", False)
    return tqdm(iterable, desc=desc, total=total, unit=unit, disable=not (show_progress() if show is None else show),
                dynamic_ncols=True, **kwargs)


def around(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log`` made safe to call while a bar is drawn in a terminal: the bar is taken down for the
    line and drawn again below it (else the line would be written into the middle of the bar)."""
    from tqdm.auto import tqdm

    def write(line: str) -> None:
        with tqdm.external_write_mode():
            log(line)

    return write
