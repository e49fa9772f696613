"""The steps of ``make test-gpu``, one row each, in the order of their value; and the producers of
references (the lessons whose GPU figures are references come from the registry). Adding a step
is one row here: the runner reads its kind, its limits, its arguments and whether it runs on the
CPU stand-in, and both plans' orders follow the table (:func:`order`). A step that runs a command
of its own is a ``command`` row carrying its argv, as ``topology`` (``nvidia-smi topo -m``) does.

Example:
    >>> [s.name for s in STEPS]
    ['preflight', 'topology', 'data', 'cuda', 'csan', 'quick', 'references']
    >>> ORDERS["references"]
    ('preflight', 'topology', 'data', 'cuda', 'references', 'csan', 'quick')
    >>> [p.name for p in producers()][-3:]
    ['lesson12', 'bench', 'ceilings']
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufeed.measure.lessons import LESSONS, Lesson

#: What the runner does for a kind of step: ``preflight`` (in the runner itself), ``data`` (a
#: command in the background, joined before the first step that reads its datasets), ``tests``
#: (pytest with plugin autoload off, the plugins it needs named: xdist's and the run's own, and
#: junit), ``notebooks`` (every lesson in quick mode through :mod:`gpurun.notebook`, several at a
#: time, each saved after every cell), ``references`` (the producers one at a time, in the plan's order),
#: ``command`` (the row's own argv, run once under its limit, its output kept as the step's log;
#: ``"python"`` as the first word is the run's own python).
KINDS = ("preflight", "data", "tests", "notebooks", "references", "command")


@dataclass(frozen=True)
class Step:
    """One row of the run.

    Attributes:
        name: as ``run.json`` and ``LESSONS=...`` name it. kind: one of :data:`KINDS`. what: one line.
        least: seconds of the budget it needs left to be worth starting. cap: seconds at most.
        estimate_s: stated default on one H100 node, until a run on that GPU timed it.
        args: its command's arguments (for ``tests``: pytest's; for ``command``: the whole argv).
            standin: the arguments under the CPU stand-in, or None where it cannot run there (then
            ``not run``, with the reason).
        needs_cuda_why: the reason it is not run on the stand-in.
        share: the most of the budget it may take (its limit is at most ``share * budget``), so that a
            step cut by a slow machine leaves the steps after it their turn.
    """

    name: str
    kind: str
    what: str
    least: float
    cap: float
    estimate_s: float
    args: tuple[str, ...] = ()
    standin: tuple[str, ...] | None = ()
    needs_cuda_why: str = ""
    share: float = 1.0


#: The stand-in's "cuda" tests: each on_cuda test under one schedule of the simulator, as the one GPU would run it.
#: (tests/ only: src/ holds no simulator test, and collecting it costs a loaded machine a minute.)
_SIMCUDA = ("-m", "simcuda", "-k", "not simcuda1 and not simcuda2 and not simcuda3", "tests")

STEPS: tuple[Step, ...] = (
    Step("preflight", "preflight", "GPU, driver, torch and CUDA, wheelhouse, commit file, free disk", 0, 15, 8),
    Step("topology", "command", "how the GPU is linked to the CPUs and its peers (nvidia-smi topo -m), beside the "
         "host-to-device figures", 5, 20, 2, ("nvidia-smi", "topo", "-m"), None, "nvidia-smi needs a GPU's driver",
         share=0.05),
    Step("data", "data", "the full-mode datasets of the references planned, in the background", 20, 300, 60),
    Step("cuda", "tests", "the cuda tests (pytest-xdist)", 20, 120, 60, ("-m", "cuda", "tests", "src"), _SIMCUDA,
         share=0.25),
    Step("csan", "tests", "the cuda tests under the CUDA Stream Sanitizer", 20, 120, 60,
         ("-m", "cuda", "--cuda-sanitizer", "tests", "src"), None, "the CUDA Stream Sanitizer needs CUDA", share=0.25),
    Step("quick", "notebooks", "every notebook in quick mode (the course's notebook runner), several at a time",
         20, 240, 150),
    Step("references", "references", "full-mode references one at a time, those of the lessons with no GPU number "
         "first, then the stalest, as many as fit", 20, 10_000, 0),
)

def order(plan: str, table: tuple[Step, ...] | None = None) -> tuple[str, ...]:
    """The steps' names in the order they run for a plan (``GPU_PLAN``): ``default`` is the table's
    order (the tests and every notebook get a verdict first); ``references`` moves the references
    right after the ``cuda`` tests, so the slot is spent on them, then the sanitizer and the quick
    notebooks get what is left. A new row takes its place in both from the table alone."""
    names = [s.name for s in (STEPS if table is None else table)]
    if plan == "references":
        names.remove("references")
        names.insert(names.index("cuda") + 1, "references")
    elif plan != "default":
        raise ValueError(f"GPU_PLAN={plan!r}: the plans are default and references")
    return tuple(names)


#: :func:`order` of each plan.
ORDERS: dict[str, tuple[str, ...]] = {name: order(name) for name in ("default", "references")}


@dataclass(frozen=True)
class Producer:
    """What makes one reference: a lesson's notebook in full mode, alone, or a command.

    Attributes:
        name: the reference's name (``lesson08``, ``bench``). source: the file whose hash says it is
            stale (with the package's). estimate_s: stated default on one H100 node.
        command: ``python -m gpufeed ...`` arguments, or empty for the lesson's notebook.
        lesson: the registry's lesson, for a lesson.
    """

    name: str
    source: str
    estimate_s: float
    command: tuple[str, ...] = ()
    lesson: Lesson | None = None


#: The references that are no lesson's: the bench (lesson 11 shows it) and the ceilings (lessons 00 and 07).
OTHERS: tuple[Producer, ...] = (
    Producer("bench", "src/gpufeed/measure/suite.py", 150, ("bench",)),
    Producer("ceilings", "src/gpufeed/measure/ceilings.py", 35, ("bench", "--ceilings")),
)


def producers() -> list[Producer]:
    """Every producer of references: the lessons whose GPU figures are references, then :data:`OTHERS`."""
    return [Producer(x.owner, x.source, x.gpu_s[1], lesson=x) for x in LESSONS if x.references] + list(OTHERS)


def step(name: str) -> Step:
    return next(s for s in STEPS if s.name == name)
