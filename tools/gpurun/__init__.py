"""``make test-gpu``: one GPU slot, one verdict; the references built up over several slots.

A GPU is often at hand for about ten minutes, its start included, one command at most 600 s. So
the run is a table of steps in the order of their value (:data:`gpurun.steps.STEPS`), each under
a limit taken from one budget (``GPU_BUDGET_S``, counted from when ``make`` started, so that
``make node-env`` is inside it):

1. ``preflight`` (seconds): GPU, driver, torch/CUDA, the wheelhouse and the commit file, free disk;
   stops at once with one line if something is missing, so the GPU can be given back;
2. ``data`` (in the background): the full-mode datasets of the references planned;
3. ``cuda``: the ``cuda`` tests with pytest-xdist; ``csan``: the same under the CUDA Stream Sanitizer;
4. ``quick``: every notebook in quick mode with nbmake, several at a time, pass or fail by name;
5. ``references``: full-mode references one producer at a time (the lessons whose GPU figures are
   references, the bench, the ceilings), stale ones first (``references.json``), as many as fit.

Before it runs a step it prints the plan (:mod:`gpurun.plan`): each step and lesson, stale or fresh
and why, its estimated seconds (from the last run on that GPU, else the registry's stated
default), and what does not fit: ``not run (budget)``, which is never a failure. A step stopped at
its limit is ``cut``, with what it finished. The run exits 0 when nothing that ran failed.

Modules: :mod:`~gpurun.steps` (the table), :mod:`~gpurun.plan` (budget, estimates, the planner),
:mod:`gpufeed.measure.references` (hashes, staleness: the evidence boxes read them too), :mod:`~gpurun.report` (run.json, junit, the
summary), :mod:`~gpurun.notebook` (one notebook under nbclient, saved after every cell),
:mod:`~gpurun.preflight`, :mod:`~gpurun.procs` (limited child processes), :mod:`~gpurun.plugin`
(the pytest plugin, ``-p gpurun.plugin``), :mod:`~gpurun.runner` and :mod:`~gpurun.cli`.
Run it as ``python tools/gpurun run ...`` (``tools/gpurun/__main__.py``).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
