"""Whether a progress bar is drawn: the one rule, for the library's loops and the course's alike.

A loop that runs for minutes (a memmap build, lesson 07's sweeps, ``gpufeed bench``) shows a bar
saying what it does; logs must stay clean, so a bar shows only where someone watches. (The course's
modes play no part: a learner's first look in quick mode shows its bars too.)
:func:`show_progress` decides, in this order:

========================  ========================================================
``progress=False``        no bar (the caller asked for none)
``GPUFEED_PROGRESS``      ``1`` or ``0``: always or never (overrides the rest; the course's
                          site build sets ``0``: its pages keep results, not bars)
``PYTEST_CURRENT_TEST``   no bars: pytest runs it, and so do the kernels nbmake starts
                          (a kernel inherits the environment of the test that started it)
``CI`` set, not false     no bars (GitHub Actions and most CI services set it)
otherwise                 bars where someone watches: a Jupyter kernel, or a terminal
========================  ========================================================

The bars themselves (``tqdm.auto``) are :func:`gpufeed.measure.progress.bar`, which asks this rule.

Example:
    >>> in_a_notebook()  # a script or a test run, not a Jupyter kernel
    False
    >>> show_progress(False), show_progress()  # under pytest
    (False, False)
"""

from __future__ import annotations

import os
import sys

ENV_PROGRESS = "GPUFEED_PROGRESS"
_YES, _NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def in_a_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Colab, nbmake), False in a terminal or a script.

    The running shell is asked, not whether ``ipykernel`` was imported: a test run or a script that
    imported Jupyter's modules is no notebook. Colab's shell subclasses Jupyter's, hence the MRO.
    """
    ipython = sys.modules.get("IPython")  # not imported: certainly no notebook
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and any(c.__name__ == "ZMQInteractiveShell"
                                     for c in type(shell).__mro__)


def show_progress(progress: bool = True) -> bool:
    """Whether to draw a progress bar here (the rule in the module's docstring).

    Args:
        progress: False when the caller asked for no bar; True to draw one where the rule allows.

    Raises:
        ValueError: ``GPUFEED_PROGRESS`` holds a value that is not understood (the message says
            what to set).
    """
    if not progress:
        return False
    switch = os.environ.get(ENV_PROGRESS, "").strip().lower()
    if switch:
        if switch not in _YES + _NO:
            raise ValueError(f"{ENV_PROGRESS}={os.environ[ENV_PROGRESS]!r} is not understood: "
                             "set it to 1 or 0")
        return switch in _YES
    if os.environ.get("PYTEST_CURRENT_TEST"):
        return False
    if os.environ.get("CI", "").strip().lower() not in ("", *_NO):
        return False
    return in_a_notebook() or bool(getattr(sys.stderr, "isatty", lambda: False)())
