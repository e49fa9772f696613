"""gpufeed.course: the lessons' plumbing (simulators, sweeps, plots, scripts).

One folder per lesson that has helpers of its own, holding its sweeps, plots and the sentences it
prints; beside them, flat, the plumbing several lessons share:

* ``lesson00/``: the sentences that read this machine's ceilings; ``lesson01/``: the sliders over the
  pipeline simulator; ``lesson02/``: a first step on new image sizes, the verdicts'
  sentences; ``lesson03/``: the sentences that read dtypes and transfer order; ``lesson04/``:
  JPEG quality, decoders and storage formats; ``lesson05/``: the sentences that read the memmap's
  measurements; ``lesson06/``: a dataset larger than the memory, shuffles; ``lesson07/``: DataLoader
  sweeps, moving batches in workers and DataParallel, tensors saved on one device loaded on
  another; ``lesson08/``: the stream hazards on :mod:`gpufeed.simcuda`, the prefetcher's timed
  experiment and the sentences that read it; ``lesson09/`` and ``lesson10/``: the sentences that
  read their measurements; ``lesson11/``: the ladder, loader efficiency, the
  engines; ``lesson12/``: the distributed script, its launcher, shards, the page cache, ports.
* shared: :mod:`~gpufeed.course.prose` (``say``: a sentence shown as Markdown in a notebook),
  :mod:`~gpufeed.course.timeline` and :mod:`~gpufeed.course.simulator` (the pipeline simulator and
  its Gantt charts, lessons 01 and 08), :mod:`~gpufeed.course.instrument` and
  :mod:`~gpufeed.course.trace` (a real loop's timings, a profiler trace: 01, 02, 08),
  :mod:`~gpufeed.course.transfer` and :mod:`~gpufeed.course.training` (bytes on the wire and the
  model that normalises: 00, 03, 04, 07, 12), :mod:`~gpufeed.course.doctor` and
  :mod:`~gpufeed.course.session` (the environment check and every notebook's setup cell),
  :mod:`~gpufeed.course.gpucell` (what a CUDA-only cell shows without a GPU: 07).

Each module's "Taught in" line names a lesson that imports it (``tests/test_layout.py`` checks).
It may import :mod:`gpufeed.data`, :mod:`gpufeed.measure` and :mod:`gpufeed.simcuda`; they never
import it.
"""

from __future__ import annotations

import importlib

_MODULES = {'doctor', 'gpucell', 'instrument', 'prose', 'session', 'simulator', 'timeline', 'trace', 'training', 'transfer',
            'lesson00', 'lesson01', 'lesson02', 'lesson03', 'lesson04', 'lesson05', 'lesson06', 'lesson07', 'lesson08',
            'lesson09', 'lesson10', 'lesson11', 'lesson12'}

__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
