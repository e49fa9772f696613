"""gpufeed: the helper package of the course on feeding images to the GPU.

The notebooks in ``notebooks/`` teach; this package holds the plumbing and the reusable pieces they
share, each module pointing back to the notebook that teaches it. Importing it has no side effects
and imports nothing heavy: modules are loaded when first used (``gpufeed.bench``, ...).

Example:
    >>> import gpufeed
    >>> gpufeed.__version__
    '0.1.0'
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_MODULES = {"bench", "ceilings", "cli", "config", "doctor", "jpeg", "machine", "photos", "plotting",
            "results", "session", "synth"}
_MODULES |= {"explorer", "instrument", "simulator", "timeline", "trace"}  # lessons 01-02
_MODULES |= {"folders", "quality", "training", "transfer"}  # lessons 03-04
_MODULES |= {"folder", "loader", "memmap", "staging"}  # lessons 05-06
_MODULES |= {"knobs", "movers", "prefetch"}  # lessons 07-08
_MODULES |= {"augment", "dali"}  # lessons 09-10 (gpufeed.dali never imports DALI until asked)
_MODULES |= {"efficiency", "ladder", "pipeline_bench", "pipelines"}  # lesson 11 and `python -m gpufeed bench`
_MODULES |= {"arrays", "distributed", "launch", "pagecache", "shards"}  # lesson 12

__all__ = sorted(_MODULES | {"setup", "Session"})


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"gpufeed.{name}")
    if name in ("setup", "Session"):
        return getattr(importlib.import_module("gpufeed.session"), name)
    raise AttributeError(f"module 'gpufeed' has no attribute {name!r}")
