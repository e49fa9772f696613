"""The command line: ``python tools/gpurun run|plan|notebook|index`` (``make test-gpu`` runs ``run``;
``plan`` prints the plan a GPU would get, without running anything)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from gpufeed.measure import references
from gpurun import ROOT, outbox, plan, preflight
from gpurun.steps import ORDERS


def index(folder: Path, at: str, when: str, seconds: dict[str, float]) -> Path:
    """Writes ``folder/references.json`` for the references already committed there, with the
    hashes of commit ``at`` (the commit their machine record names): each producer's files are its
    ``name.json`` and the plots named after it."""
    from gpurun.steps import producers

    tree = references.commit_files(at)
    made = references.load(folder)
    full = references.subprocess.run(["git", "rev-parse", at], cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout.strip()
    for p in producers():
        files = sorted(f.name for f in folder.glob(f"{p.name}*") if f.stem == p.name or f.stem.startswith(f"{p.name}-"))
        if f"{p.name}.json" in files:
            made[p.name] = {**references.record(p.source, files, full, seconds.get(p.name), when, tree), "mode": "full"}
    return references.save(folder, made, None if not made else _gpu(folder))


def _gpu(folder: Path) -> str | None:
    import json

    for f in sorted(folder.glob("*.json")):
        gpu = (json.loads(f.read_text()).get("machine") or {}).get("gpu")
        if gpu:
            return gpu
    return None


def cache_candidates(run_dir: Path) -> list[Path]:
    """Where the datasets may go: the course's cache, the checkout's ``build/`` (beside the run
    folder), the temporary folder (``$TMPDIR``) and ``/var/tmp``; a cluster's scratch where named."""
    import tempfile

    from gpufeed import config

    extra = [Path(os.environ[v]) / "gpufeed-cache" for v in ("SCRATCH", "LOCAL_SCRATCH") if os.environ.get(v)]
    return [config.cache_dir(), run_dir.parent / "gpufeed-cache", Path(tempfile.gettempdir()) / "gpufeed-cache",
            Path("/var/tmp/gpufeed-cache"), *extra]


def show_plan(gpu: str, cores: int, order: str, budget: float, spent: float | None, lessons: str = "all") -> str:
    """The plan ``make test-gpu`` (``GPU_PLAN=order``) would print on a node with ``gpu`` and
    ``cores``, from the committed runs (:func:`gpurun.plan.build`), before anything runs: the
    budget less what ``make node-env`` and the preflight spend (as the newest committed run timed
    them, where ``spent`` is None) and the reserve."""
    from gpufeed.measure.machine import slug
    from gpurun.runner import at_a_time, lanes, selection

    name = slug({"gpu": gpu})
    if spent is None:
        runs = plan.committed_runs()
        same = [d for s, d in runs if s == name] or [d for _, d in runs]
        steps = {s["name"]: s.get("seconds") or 0 for s in (same[0].get("steps", []) if same else [])}
        spent = float(steps.get("node-env", 0) + steps.get("preflight", 0))
    left = max(0.0, budget - plan.RESERVE_S - spent)
    selected, numbers = selection(lessons)
    rows, _ = plan.build(order=ORDERS[order], selected=selected, lessons=numbers, slug=name, standin=False,
                         cores=cores, lanes=lanes(cores), left=left, budget=budget, earlier=[])
    header = (f" on {name} ({cores} cores, {at_a_time(lanes(cores))}), GPU_PLAN={order}, budget {budget:.0f} s "
              f"less {spent:.0f} s (node-env and preflight) and the {plan.RESERVE_S:.0f} s reserve")
    return plan.describe(rows, left, header)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="make test-gpu: one GPU slot, one verdict (tools/gpurun)")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the whole run under one budget")
    r.add_argument("--budget", type=float, default=float(os.environ.get("GPU_BUDGET_S", 460)))
    r.add_argument("--started", type=float, default=None,
                   help="when the budget began (seconds since the epoch; make passes its own start): default now")
    r.add_argument("--run-dir", type=Path, default=ROOT / "build" / "gpu-run")
    r.add_argument("--archive", type=Path, default=None,
                   help="the archive packed after every step (default: $OUT/gpu-run.tar.gz, else beside --run-dir)")
    r.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
                   help="where the archive, run.json, summary.txt, the node-env log and the junit files go as "
                        "soon as they exist (default: $OUT where set)")
    r.add_argument("--plan", choices=sorted(ORDERS), default=os.environ.get("GPU_PLAN") or "default",
                   help="default: tests, quick notebooks, references; references: the cuda tests, then references")
    r.add_argument("--lessons", default=os.environ.get("LESSONS", "all"))
    r.add_argument("--standin", choices=["cpu"], default=os.environ.get("GPUFEED_GPU_STANDIN") or None)
    r.add_argument("--jobs", type=int, default=None, help="quick notebooks at a time (default: cores / 3, at most 6)")
    r.add_argument("--measure-s", type=float, default=None, help="GPUFEED_MEASURE_S: seconds per measured case (5; 2 stand-in)")
    r.add_argument("--cache", type=Path, default=None,
                   help="the datasets' cache folder (default: $GPUFEED_CACHE, else the largest free disk among "
                        "the course's cache, the checkout's build/ and the temporary folders)")
    pl = sub.add_parser("plan", help="print the plan a GPU would get from the committed runs, running nothing")
    pl.add_argument("--gpu", required=True, help='the GPU\'s name as torch says it, e.g. "NVIDIA H200"')
    pl.add_argument("--cores", type=int, required=True)
    pl.add_argument("--plan", choices=sorted(ORDERS), default="default")
    pl.add_argument("--budget", type=float, default=460)
    pl.add_argument("--spent", type=float, default=None,
                    help="seconds spent before the plan is made (default: make node-env and the preflight as the "
                         "newest committed run timed them)")
    pl.add_argument("--lessons", default="all")
    n = sub.add_parser("notebook", help="(a step) run one notebook, saving it after every cell")
    n.add_argument("src", type=Path)
    n.add_argument("--executed", type=Path, required=True)
    n.add_argument("--result", type=Path, required=True)
    n.add_argument("--cell-timeout", type=int, default=3600)
    i = sub.add_parser("index", help="write references.json for references already committed")
    i.add_argument("folder", type=Path)
    i.add_argument("--at", required=True, help="the commit they were measured at")
    i.add_argument("--when", required=True, help="the date they were measured")
    i.add_argument("--seconds", default="", help="NAME=SECONDS,... each producer took")
    args = parser.parse_args(argv[1:])
    if args.command == "notebook":
        from gpurun.notebook import run_notebook

        return run_notebook(args.src, args.executed, args.result, args.cell_timeout)
    if args.command == "index":
        secs = {k: float(v) for k, v in (x.split("=") for x in args.seconds.split(",") if x)}
        print(index(args.folder, args.at, args.when, secs))
        return 0
    if args.command == "plan":
        print(show_plan(args.gpu, args.cores, args.plan, args.budget, args.spent, args.lessons))
        return 0
    from gpufeed import config
    from gpurun.runner import Run, selection

    if args.archive is None:
        args.archive = args.out / outbox.ARCHIVE if args.out else args.run_dir.with_name(f"{args.run_dir.name}.tar.gz")
    args.measure_s = args.measure_s or (2.0 if args.standin else 5.0)
    args.cache_candidates = []
    if args.cache is None and os.environ.get(config.ENV_CACHE):
        args.cache = config.cache_dir()
    elif args.cache is None:
        args.cache, args.cache_candidates = preflight.choose_cache(cache_candidates(args.run_dir))
    steps, numbers = selection(args.lessons)
    if args.run_dir.exists() and any(args.run_dir.iterdir()):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(args.run_dir.stat().st_mtime))
        args.run_dir.rename(args.run_dir.with_name(f"{args.run_dir.name}-{stamp}"))  # an earlier run: kept
    return Run(args).main(steps, numbers)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
