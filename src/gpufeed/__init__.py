"""gpufeed: the helper package of the course on feeding images to the GPU.

One package in four rooms, so that you know where each thing lives:

* :mod:`gpufeed.data`, **the library**: what you take home into your own training (the image-folder
  dataset, the memmap format, batched loading, prefetchers, moving nested batches, device
  transforms). It imports nothing from the other rooms and no plotting library.
* :mod:`gpufeed.measure`, **measurement**: the benchmark harness, the machine record, results,
  the machine's ceilings, the generated datasets and ``python -m gpufeed bench``.
* :mod:`gpufeed.simcuda`, **the CUDA-ordering simulator**: streams, events, copies and the caching
  allocators modelled on the CPU, which the library's tests and lesson 08 run under. It imports
  nothing else of ``gpufeed``.
* :mod:`gpufeed.course`, **the lessons' plumbing**: simulators, sweeps, quality curves, the
  ladder, the distributed script. It may import the other rooms; they never import it.

Beside them: :mod:`gpufeed.config` (quick mode, folders, device) and :mod:`gpufeed.cli`.
Importing ``gpufeed`` has no side effects and imports nothing heavy: each room and module is
loaded when first used (``gpufeed.measure.harness``, ...).

Example:
    >>> import gpufeed
    >>> gpufeed.__version__
    '0.1.0'
    >>> gpufeed.data.loader.FastLoader.__name__
    'FastLoader'
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_MODULES = {"data", "measure", "simcuda", "course", "cli", "config"}

__all__ = sorted(_MODULES | {"setup", "Session"})


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"gpufeed.{name}")
    if name in ("setup", "Session"):
        return getattr(importlib.import_module("gpufeed.course.session"), name)
    raise AttributeError(f"module 'gpufeed' has no attribute {name!r}")
