"""``make test-gpu``: one GPU slot, one verdict; the references built up over several slots.

A GPU is often at hand for about ten minutes, its start included, one command at most 600 s. So
the run is a table of steps (:data:`gpurun.steps.STEPS`), run in the order of a plan
(:data:`gpurun.steps.ORDERS`: ``GPU_PLAN=default`` or ``references``), each under a limit taken
from one budget (``GPU_BUDGET_S``, counted from when ``make`` started, so that ``make node-env`` is
inside it):

1. ``preflight`` (seconds): GPU, driver, torch/CUDA, the wheelhouse and the commit file, and, once
   the plan is made, free disk for its datasets where the cache goes (the largest free disk); stops
   at once with one line if something is missing, so the GPU can be given back;
2. ``data`` (in the background): the full-mode datasets of the references planned;
3. ``cuda``: the ``cuda`` tests with pytest-xdist; ``csan``: the same under the CUDA Stream Sanitizer;
   every pytest with plugin autoload off and the plugins it needs named (a node's own plugins cannot
   break it);
4. ``quick``: every notebook in quick mode through the course's notebook runner, several at a time,
   each saved after every cell (a notebook cut at its limit keeps what it did);
5. ``references``: full-mode references one producer at a time (the lessons whose GPU figures are
   references, the bench, the ceilings), those of the lessons whose claims have no GPU number of
   ours first, then the stalest (``references.json``), as many as fit. ``GPU_PLAN=references``
   runs them right after ``cuda``, then ``csan`` and ``quick`` with what is left.

Before it runs a step it prints the plan (:mod:`gpurun.plan`): each step and item, stale or fresh
and why, its estimated seconds (from the runs on that GPU, else the newest committed run on another
GPU scaled by the cores each notebook lane has, else the registry's stated default), and what does
not fit: ``not run (budget)``, which is never a failure. A step stopped at its limit is ``cut``,
with what it finished. The run exits 0 when nothing that ran failed. ``$OUT`` gets the archive
(under 12 MiB), ``run.json``, ``summary.txt``, the node-env log and the junit files, each as soon as
it exists (:mod:`gpurun.outbox`).

Modules: :mod:`~gpurun.steps` (the table and the orders), :mod:`~gpurun.plan` (budget, estimates,
the planner), :mod:`gpufeed.measure.references` (hashes, staleness: the evidence boxes read them
too), :mod:`~gpurun.report` (run.json, junit, the summary), :mod:`~gpurun.outbox` (``$OUT``, the
archive), :mod:`~gpurun.notebook` (one notebook under nbclient, saved after every cell),
:mod:`~gpurun.preflight`, :mod:`~gpurun.procs` (limited child processes), :mod:`~gpurun.plugin`
(the pytest plugin, ``-p gpurun.plugin``), :mod:`~gpurun.runner` and :mod:`~gpurun.cli`.
Run it as ``python tools/gpurun run ...`` (``tools/gpurun/__main__.py``); ``python tools/gpurun
plan --gpu "NVIDIA H200" --cores 16`` prints the plan a GPU would get, running nothing.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
