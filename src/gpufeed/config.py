"""Course-wide settings: quick or full mode, the cache folder, the results folder and the device.

Everything is read from environment variables when asked, never at import time, so a notebook
can change a variable and call again. Taught in ``notebooks/00_setup.ipynb``.

========================  ==========================================================  ===========
variable                  meaning                                                     default
========================  ==========================================================  ===========
``GPUFEED_QUICK``         ``1`` shrinks every size so the course runs in CI in minutes  ``0``
``GPUFEED_CACHE``         where generated datasets live                               see below
``GPUFEED_RESULTS``       where notebooks and ``gpufeed bench`` write measurements    see below
``GPUFEED_REQUIRE_CUDA``  ``1`` makes :func:`device` fail instead of using the CPU    ``0``
``GPUFEED_PROGRESS``      ``1``/``0``: long loops' progress bars always/never         watched
========================  ==========================================================  ===========

Example:
    >>> import os
    >>> os.environ["GPUFEED_QUICK"] = "1"
    >>> quick_mode(), pick(quick=64, full=10_000)
    (True, 64)
    >>> os.environ["GPUFEED_QUICK"] = "0"
    >>> pick(quick=64, full=10_000)
    10000
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ENV_QUICK = "GPUFEED_QUICK"
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


def quick_mode() -> bool:
    """True when ``GPUFEED_QUICK`` asks for tiny sizes (CI, a first look); False for full mode."""
    return _flag(ENV_QUICK)


def pick(quick: T, full: T) -> T:
    """Returns ``quick`` in quick mode and ``full`` otherwise: the one switch every lesson uses."""
    return quick if quick_mode() else full


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
