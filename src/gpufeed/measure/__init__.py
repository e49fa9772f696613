"""gpufeed.measure: measuring, honestly.

* :mod:`~gpufeed.measure.harness`: warm up, sync CUDA, keep every sample, median and spread;
  :mod:`~gpufeed.measure.noise`: when a measurement is noisy, and the ``[noisy]`` line that says so;
  :mod:`~gpufeed.measure.units`: times, rates and sizes in the units a reader takes in.
* :mod:`~gpufeed.measure.machine`: what a measurement ran on; :mod:`~gpufeed.measure.results`:
  where measurements are kept, this machine's and the committed GPU references;
  :mod:`~gpufeed.measure.published`: figures others published, shown where no GPU reference is committed.
* :mod:`~gpufeed.measure.ceilings`: the fastest any pipeline on this machine can go, measured;
  :mod:`~gpufeed.measure.storage`: a file read cold and warm, and the storage ladder;
  :mod:`~gpufeed.measure.rates`: what measured copies bound (GB/s per sample, bandwidth bounds).
* :mod:`~gpufeed.measure.synth` and :mod:`~gpufeed.measure.photos`: the generated datasets every
  measurement reads; :mod:`~gpufeed.measure.datasets`: every one the lessons and the bench use,
  built at once; :mod:`~gpufeed.measure.lessons`: the lessons, listed once (for the tools too).
* :mod:`~gpufeed.measure.pipelines`, :mod:`~gpufeed.measure.suite` and :mod:`~gpufeed.measure.dali`:
  ``python -m gpufeed bench``, every input pipeline side by side; :mod:`~gpufeed.measure.bench_report`
  reads a run for people (the Markdown table, the bounds in words, the plots).
* :mod:`~gpufeed.measure.memory` and :mod:`~gpufeed.measure.cpu`: what a pipeline costs beside its
  speed, the peak memory and the cores busy of its process and workers; :mod:`~gpufeed.measure.peers`:
  other loaders (FFCV, SPDL, torchdata.nodes) doing the same work, each in its own process.
* :mod:`~gpufeed.measure.progress`: the progress bars of the long loops, and when they show.
* :mod:`~gpufeed.measure.plotting`: the plot style of every result (units, ratios, "measured on");
  :mod:`~gpufeed.measure.wording`: ratios in words; :mod:`~gpufeed.measure.verdict`: the one verdict
  on two measurements (faster, slower, the same, or this run cannot tell);
  :mod:`~gpufeed.measure.traces`: a profiler trace read.
* :mod:`~gpufeed.measure.evidence`: each lesson's headline claims and where their evidence comes
  from; :mod:`~gpufeed.measure.references`: whether a committed GPU reference ran today's code.
* :func:`diagnose` (:mod:`~gpufeed.measure.diagnosis`, the orchestration; :mod:`~gpufeed.measure.probe`,
  the device's clock, syncs, copies and the trace; :mod:`~gpufeed.measure.batches`, the loader's
  batches and one-line errors; :mod:`~gpufeed.measure.report`; :mod:`~gpufeed.measure.findings`;
  :mod:`~gpufeed.measure.dataloaders`, a DataLoader's settings re-timed): the course's measurements
  pointed at your own loader and training step; :func:`watch` (:mod:`~gpufeed.measure.inplace`): the
  same measured in your loop as it runs.

It may import :mod:`gpufeed.data`, never :mod:`gpufeed.course`.
"""

from __future__ import annotations

import importlib

_MODULES = {'ceilings', 'pipelines', 'suite', 'synth', 'machine', 'harness', 'plotting', 'dali', 'results', 'photos',
            'memory', 'peers', 'cpu', 'published', 'progress', 'datasets', 'wording', 'traces', 'diagnosis',
            'findings', 'lessons', 'verdict', 'references', 'evidence', 'bench_report', 'probe', 'report', 'batches',
            'dataloaders', 'inplace', 'noise', 'units', 'storage', 'rates'}

__all__ = sorted(_MODULES | {"diagnose", "watch"})


def __getattr__(name: str):
    if name == "diagnose":  # the one entry point, as a function: gpufeed.measure.diagnose(loader, step)
        return importlib.import_module(f"{__name__}.diagnosis").diagnose
    if name == "watch":  # the in-place mode: with gpufeed.measure.watch(loader) as feed: ...
        return importlib.import_module(f"{__name__}.inplace").watch
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
