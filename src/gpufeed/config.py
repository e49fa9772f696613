"""Course-wide settings: the mode (quick, site or full), the cache folder, the results folder and the device.

Everything is read from environment variables when asked, never at import time, so a notebook
can change a variable and call again. Taught in ``notebooks/00_setup.ipynb``.

========================  ==========================================================  ===========
variable                  meaning                                                     default
========================  ==========================================================  ===========
``GPUFEED_MODE``          ``quick``, ``site`` or ``full``: the sizes (see :func:`mode`)  ``full``
``GPUFEED_QUICK``         ``1`` is ``GPUFEED_MODE=quick`` (where that is unset)         ``0``
``GPUFEED_CACHE``         where generated datasets live                               see below
``GPUFEED_RESULTS``       where notebooks and ``gpufeed bench`` write measurements    see below
``GPUFEED_REQUIRE_CUDA``  ``1`` makes :func:`device` fail instead of using the CPU    ``0``
``GPUFEED_PROGRESS``      ``1``/``0``: long loops' progress bars always/never         watched
========================  ==========================================================  ===========

Three modes, one switch (:func:`pick`) that every lesson reads its sizes from:

* **quick** (``make test``): tiny sizes, so that all 13 lessons run in CI in minutes; its numbers
  only show that a lesson runs, and most of its verdicts read "this run cannot tell".
* **site** (``make book``): sizes and repeats chosen per measurement so that the verdicts the site
  prints are decided on a 2-core machine wherever the effect is real; a size a lesson does not
  choose for the site is the quick one.
* **full** (a learner's own run, the GPU references): the talks' sizes.

Example:
    >>> import os
    >>> os.environ["GPUFEED_QUICK"] = "1"
    >>> mode(), quick_mode(), pick(quick=64, full=10_000)
    ('quick', True, 64)
    >>> os.environ["GPUFEED_MODE"] = "site"
    >>> mode(), quick_mode(), pick(quick=64, full=10_000, site=512), pick(quick=64, full=10_000)
    ('site', False, 512, 64)
    >>> del os.environ["GPUFEED_MODE"]
    >>> os.environ["GPUFEED_QUICK"] = "0"
    >>> mode(), pick(quick=64, full=10_000, site=512)
    ('full', 10000)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ENV_MODE = "GPUFEED_MODE"
ENV_QUICK = "GPUFEED_QUICK"
#: The modes, smallest first.
MODES = ("quick", "site", "full")
ENV_CACHE = "GPUFEED_CACHE"
ENV_RESULTS = "GPUFEED_RESULTS"
ENV_REQUIRE_CUDA = "GPUFEED_REQUIRE_CUDA"
#: Seconds per case at most, where set (``make test-gpu`` sets it to fit a short GPU slot).
ENV_MEASURE_S = "GPUFEED_MEASURE_S"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def _flag(name: str) -> bool:
    """Reads a yes/no environment variable; anything unexpected is an error, not a silent no."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{name}={os.environ[name]!r} is not understood: set it to 1 or 0")


def mode() -> str:
    """``"quick"``, ``"site"`` or ``"full"``: ``GPUFEED_MODE`` where set, else ``"quick"`` when
    ``GPUFEED_QUICK=1`` (the older switch, which CI and the README use), else ``"full"``."""
    raw = os.environ.get(ENV_MODE, "").strip().lower()
    if raw:
        if raw not in MODES:
            raise ValueError(f"{ENV_MODE}={os.environ[ENV_MODE]!r} is not understood: set it to quick, site or full")
        return raw
    return "quick" if _flag(ENV_QUICK) else "full"


def quick_mode() -> bool:
    """True in quick mode (tiny sizes: CI, a first look)."""
    return mode() == "quick"


def pick(quick: T, full: T, site: T | None = None) -> T:
    """``quick``, ``site`` or ``full`` for the mode: the one switch every lesson uses. Where a lesson
    gives no ``site`` value, the site uses the quick one (a size the site's sentences do not read)."""
    m = mode()
    if m == "full":
        return full
    return site if m == "site" and site is not None else quick


def picker(name: str):
    """:func:`pick` for mode ``name`` rather than this process's: what ``gpufeed data prepare`` and
    the lesson registry use to list a mode's datasets.

    Example:
        >>> picker("site")(1, 3, 2), picker("site")(1, 3), picker("full")(1, 3, 2)
        (2, 1, 3)
    """
    if name not in MODES:
        raise ValueError(f"no mode {name!r}: the modes are {', '.join(MODES)}")
    return lambda quick, full, site=None: full if name == "full" else (
        site if name == "site" and site is not None else quick)


def repo_root() -> Path | None:
    """The course checkout this package runs from, or None when installed from a wheel (Colab)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "notebooks").is_dir():
            return parent
    return None


def cache_dir() -> Path:
    """Where generated datasets go: ``$GPUFEED_CACHE``, else ``$XDG_CACHE_HOME/gpufeed``.

    Not created here: the writers create what they need, so asking never has side effects.

    Example:
        >>> os.environ["GPUFEED_CACHE"] = "/tmp/gpufeed-doc"
        >>> str(cache_dir())
        '/tmp/gpufeed-doc'
        >>> del os.environ["GPUFEED_CACHE"]
    """
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gpufeed"


def results_dir() -> Path:
    """Where this machine's measurements are written: ``$GPUFEED_RESULTS``, else the cache.

    The committed reference results live in the repository's ``results/``; a run writes there only
    when ``GPUFEED_RESULTS`` points at it (``make test-gpu`` does), so running a notebook never
    dirties the checkout by surprise.
    """
    env = os.environ.get(ENV_RESULTS)
    return Path(env).expanduser() if env else cache_dir() / "results"


def measure_cap() -> float | None:
    """The time cap per case from ``GPUFEED_MEASURE_S`` (seconds), or None where unset.

    A case (one :func:`gpufeed.measure.harness.benchmark`, or one case of :func:`gpufeed.measure.harness.interleave`) stops warming up and sampling
    once it has spent this long, after one warm-up call and :data:`gpufeed.measure.harness.MIN_SAMPLES` samples (or
    ``repeats`` if fewer): the repeats a lesson asks for are then a most, not a least.

    Example:
        >>> import os
        >>> os.environ[ENV_MEASURE_S] = "2.5"
        >>> measure_cap()
        2.5
        >>> del os.environ[ENV_MEASURE_S]
        >>> measure_cap() is None
        True
    """
    raw = os.environ.get(ENV_MEASURE_S, "").strip()
    if not raw:
        return None
    try:
        cap = float(raw)
    except ValueError:
        cap = -1.0
    if not cap > 0:
        raise ValueError(f"{ENV_MEASURE_S}={raw!r}: give the seconds each measured case may take, e.g. 8")
    return cap


def require_cuda() -> bool:
    """True when ``GPUFEED_REQUIRE_CUDA`` forbids falling back to the CPU (the GPU CI runner)."""
    return _flag(ENV_REQUIRE_CUDA)


def device(prefer: str | None = None):
    """The device the lessons compute on: CUDA when present, else the CPU.

    Args:
        prefer: ``"cuda"`` or ``"cpu"`` to choose; None picks CUDA when available.

    Raises:
        RuntimeError: if CUDA is asked for (by ``prefer`` or ``GPUFEED_REQUIRE_CUDA=1``) and absent.

    Example:
        >>> device("cpu")
        device(type='cpu')
    """
    import torch

    has_cuda = torch.cuda.is_available()
    if prefer == "cpu" and not require_cuda():
        return torch.device("cpu")
    if (prefer == "cuda" or require_cuda()) and not has_cuda:
        raise RuntimeError(
            "CUDA was required (GPUFEED_REQUIRE_CUDA=1 or device('cuda')) but torch sees no GPU: "
            "run `python -m gpufeed doctor` to see why, or unset GPUFEED_REQUIRE_CUDA to use the CPU"
        )
    if prefer not in (None, "cpu", "cuda"):
        return torch.device(prefer)
    return torch.device("cuda" if has_cuda else "cpu")
