"""Whether the library draws a progress bar: only where someone watches this process (a terminal or
a notebook's kernel). It was ``gpufeed.data.watch`` (that name still works, for one release).

Example:
    >>> in_a_notebook()  # a script or a test run, not a Jupyter kernel
    False
"""

from __future__ import annotations

import os
import sys


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
    """Whether to draw a progress bar: asked for, and someone watches: stderr is a terminal or this
    is a notebook's kernel, and neither ``CI`` nor ``GPUFEED_QUICK`` (the test runs) is set. A log
    file or a CI job gets no bar (a redrawn bar there is thousands of lines)."""
    if not progress or os.environ.get("CI") or os.environ.get("GPUFEED_QUICK"):
        return False
    return sys.stderr.isatty() or in_a_notebook()
