"""gpufeed.course: the lessons' plumbing (simulators, sweeps, plots, scripts).

Each module points back to the notebook that teaches it: the pipeline simulator, timelines and
sliders (lesson 01), profiler traces (02), dtypes and transfer order (03), the stream hazards
played on the CUDA-ordering simulator (:mod:`~gpufeed.course.hazards`, on :mod:`gpufeed.simcuda`:
lesson 08), the prefetcher's timed experiment on a GPU
(:mod:`~gpufeed.course.overlap` and the sentences that read it, :mod:`~gpufeed.course.overlap_prose`:
lesson 08), storage formats and JPEG quality (04), a dataset larger than the memory read in two
orders (06), DataLoader sweeps and tensors saved on one device loaded on another (07), the ladder,
loader efficiency and the model's side (11), the distributed script, shards and the page cache (12),
the environment check and the notebooks' setup cell.

It may import :mod:`gpufeed.data`, :mod:`gpufeed.measure` and :mod:`gpufeed.simcuda`; they never import it.
"""

from __future__ import annotations

import importlib

_MODULES = {'collate', 'devicefiles', 'distributed', 'doctor', 'efficiency', 'engines', 'explorer', 'formats', 'hazards',
            'instrument', 'knobs', 'ladder', 'launch', 'outofcore', 'overlap', 'overlap_prose', 'pagecache', 'ports',
            'prose', 'quality', 'session', 'shards', 'shuffles', 'simulator', 'timeline', 'trace', 'training',
            'transfer'}

__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
