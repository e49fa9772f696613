"""Progress bars for the course's long loops, and the one rule that decides when they show.

A loop that runs for minutes in full mode (lesson 07's sweeps, the ladder, the quality sweep,
``gpufeed bench``, the peers) shows a ``tqdm.auto`` bar saying what it is doing: a widget in
JupyterLab, a text line in a terminal. Logs must stay clean, so a bar shows only where someone
watches. :func:`wanted` is that rule, in this order:

========================  ========================================================
``GPUFEED_PROGRESS``      ``1`` or ``0``: always or never (overrides the rest)
``GPUFEED_QUICK=1``       no bars: quick mode is for CI and a first look
``CI`` set                no bars (GitHub Actions and most CI services set it)
``PYTEST_CURRENT_TEST``   no bars: pytest runs it, and so do the kernels nbmake starts
                          (a kernel inherits the environment of the test that started it)
otherwise                 bars where someone watches: a Jupyter kernel, or a terminal
========================  ========================================================

Example:
    >>> import os
    >>> os.environ["GPUFEED_PROGRESS"] = "1"
    >>> wanted()
    True
    >>> os.environ["GPUFEED_PROGRESS"] = "0"
    >>> [x for x in bar(range(3), desc="counting")]  # no bar: the loop itself is unchanged
    [0, 1, 2]
    >>> del os.environ["GPUFEED_PROGRESS"]
    >>> wanted()  # under pytest
    False
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

from gpufeed import config

ENV_PROGRESS = "GPUFEED_PROGRESS"


def wanted() -> bool:
    """True when a long loop should draw a progress bar here (the rule in the module's docstring)."""
    if os.environ.get(ENV_PROGRESS, "").strip():
        return config._flag(ENV_PROGRESS)
    if config.quick_mode() or os.environ.get("PYTEST_CURRENT_TEST"):
        return False
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    if "ipykernel" in sys.modules:  # a notebook: tqdm.auto draws a widget
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def bar(iterable: Iterable | None = None, *, desc: str, total: int | None = None, unit: str = "it",
        show: bool | None = None, **kwargs):
    """A ``tqdm.auto`` bar over ``iterable`` (or one updated by hand with ``total``), labelled ``desc``.

    Shown when ``show`` is True, or, with ``show=None``, where :func:`wanted` says so; a hidden bar
    costs nothing and iterates the same. It disappears once done (``leave=False``): the cell's
    output keeps the results, not a finished bar.
    """
    from tqdm.auto import tqdm

    kwargs.setdefault("leave", False)
    return tqdm(iterable, desc=desc, total=total, unit=unit, disable=not (wanted() if show is None else show),
                dynamic_ncols=True, **kwargs)


def around(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log`` made safe to call while a bar is drawn in a terminal: the bar is taken down for the
    line and drawn again below it (else the line would be written into the middle of the bar)."""
    from tqdm.auto import tqdm

    def write(line: str) -> None:
        with tqdm.external_write_mode():
            log(line)

    return write
