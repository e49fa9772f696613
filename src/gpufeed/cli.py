"""The command line: ``python -m gpufeed doctor | data synth | data memmap | data prepare | bench | diagnose``.

Bad arguments give one line on stderr that says what is wrong and what to do, and exit status 2.

Example:
    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     main(["data", "synth", "--n", "-1", "--out", "/tmp/never"])
    2
    >>> print(err.getvalue().strip())
    error: --n must be a whole number of images, at least 1 (got -1)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gpufeed import config


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, like every other bad input here
        print(f"error: {message} (see `python -m gpufeed {self.prog.split()[-1]} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpufeed", description="Helpers for the gpufeed course.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("doctor", help="check what this machine offers the course")

    data = sub.add_parser("data", help="generate or convert datasets")
    data_sub = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    s = data_sub.add_parser("synth", help="write N distinct JPEGs (ImageFolder layout) cut from real photos")
    s.add_argument("--n", type=int, required=True, help="number of images")
    s.add_argument("--size", default="640x480", help="WIDTHxHEIGHT (default 640x480)")
    s.add_argument("--quality", type=int, default=90, help="JPEG quality 1-100 (default 90)")
    s.add_argument("--out", required=True, help="destination folder (created; must be new or empty)")
    s.add_argument("--classes", type=int, default=None, help="number of class folders (default 10, or N if smaller)")
    s.add_argument("--seed", type=int, default=0, help="the same seed gives the same bytes (default 0)")
    s.add_argument("--workers", type=int, default=1, help="processes to render with (default 1)")
    s.add_argument("--overwrite", action="store_true", help="replace a different generated dataset in --out")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")

    m = data_sub.add_parser("memmap", help="decode an image folder once into a memory-mapped uint8 dataset")
    m.add_argument("src", metavar="SRC", help="image folder in ImageFolder layout: SRC/<class>/<image>")
    m.add_argument("dst", metavar="DST", help="destination folder (created; must be new or empty)")
    m.add_argument("--size", default="224x224",
                   help="WIDTHxHEIGHT every image is brought to: resize the short side, crop the centre (default 224x224)")
    m.add_argument("--workers", type=int, default=1, help="processes that decode (default 1: this one)")
    m.add_argument("--skip-bad", action="store_true", help="skip unreadable images (and list them) instead of stopping")
    m.add_argument("--overwrite", action="store_true", help="replace a memmap dataset already in DST")
    m.add_argument("--order-seed", type=int, default=None,
                   help="store the images in a random order seeded by this (for a grouped shuffle); "
                        "default: folder order")
    m.add_argument("--no-progress", action="store_true", help="no progress bar")

    pr = data_sub.add_parser("prepare", help="build every dataset the lessons and the bench generate, once, "
                                              "with every core, into the cache folder (quick sizes with GPUFEED_QUICK=1)")
    pr.add_argument("--only", default=None,
                    help="comma-separated owners to build, e.g. lesson05,lesson11,bench (default: all)")
    pr.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="the device the lessons will run on: lesson 11 and the bench size their data by it "
                         "(default auto)")
    pr.add_argument("--workers", type=int, default=None, help="processes (default: every usable core)")

    b = sub.add_parser("bench", help="measure every input pipeline side by side (loader alone and with a "
                                     "ResNet training step: ResNet-50 on a GPU at full size, else ResNet-18) "
                                     "and write results.json + plots")
    b.add_argument("--out", default=None, help="folder for the results (default: results folder / machine)")
    b.add_argument("--quick", action="store_true", help="tiny sizes (same as GPUFEED_QUICK=1)")
    b.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="cuda: fail without a GPU; cpu: skip GPU measurements (default auto)")
    b.add_argument("--size", choices=["tiny", "quick", "full"], default=None,
                   help="dataset and image sizes (default: quick with --quick or GPUFEED_QUICK=1, else full; "
                        "tiny: seconds, for tests)")
    b.add_argument("--repeats", type=int, default=None, help="timed passes per case (default 5)")
    b.add_argument("--no-dali", action="store_true", help="leave DALI out even where it is installed")
    b.add_argument("--peers", action="store_true",
                   help="add FFCV (raw and JPEG), SPDL and torchdata.nodes where installed (`make peers-deps`), "
                        "each in its own process, timed in turns with the loader alone")
    b.add_argument("--ceilings", action="store_true",
                   help="measure this machine's ceilings instead (memcpy, copies, JPEG decode, disk): ceilings.json")
    d = sub.add_parser("diagnose", help="where the usual torchvision training loop over your image folder spends "
                       "its time, and what to change (gpufeed.measure.diagnose)")
    d.add_argument("--folder", required=True, help="images in the ImageFolder layout: class_a/*.jpg, class_b/*.jpg")
    d.add_argument("--workers", type=int, default=0, help="DataLoader num_workers (default 0, torch's)")
    d.add_argument("--batch-size", type=int, default=32)
    d.add_argument("--pin-memory", action="store_true", help="DataLoader pin_memory=True, copies non_blocking")
    d.add_argument("--model", default="resnet18", help="a torchvision classification model, random weights")
    d.add_argument("--crop", type=int, default=224, help="RandomResizedCrop's size")
    d.add_argument("--batches", type=int, default=10, help="timed batches of each measurement")
    d.add_argument("--fixes", type=float, default=10.0, metavar="SECONDS",
                   help="time the DataLoader settings a finding suggests may take to be re-timed (0: none)")
    return p


def _diagnose(args) -> int:
    """The usual pipeline (ImageFolder, RandomResizedCrop, flip, ToTensor, Normalize; a DataLoader; a
    torchvision model, SGD, the loss read every step) on ``--folder``, diagnosed. Every failure is one
    line on stderr (the loader's, the step's, the pipeline's own), never a traceback."""
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision import transforms as T

    from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
    from gpufeed.measure.batches import DiagnoseError, line
    from gpufeed.measure.diagnosis import diagnose

    device = "cuda" if torch.cuda.is_available() else "cpu"

    def build():
        if not hasattr(torchvision.models, args.model):
            raise DiagnoseError(f"--model {args.model}: torchvision.models has no such model (try resnet18)")
        tf = T.Compose([T.RandomResizedCrop(args.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        try:
            dataset = torchvision.datasets.ImageFolder(args.folder, transform=tf)
            loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                pin_memory=args.pin_memory, drop_last=True)
            model = getattr(torchvision.models, args.model)(num_classes=len(dataset.classes)).to(device)
        except Exception as e:
            raise DiagnoseError(f"diagnose: building the pipeline on --folder {args.folder} failed: "
                                f"{type(e).__name__}: {line(e)}") from e
        return loader, model

    def run():
        loader, model = build()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(batch):
            x, y = (t.to(device, non_blocking=args.pin_memory) for t in batch)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()  # as a loop that logs every step

        return diagnose(loader, step, batches=args.batches, fixes=args.fixes)

    report, status = _guarded(run, (DiagnoseError,))
    if not status:
        print(report)
        done = [r.setting for r in report.retimed if not r.note]
        left = [f"{r.setting} ({r.note})" for r in report.retimed if r.note]
        print(f"\nRe-timed within {args.fixes:g} s: {', '.join(done) or 'nothing'}" + (
            f"; not re-timed: {'; '.join(left)}." if left else ".") if report.retimed else
            "\nNothing re-timed: " + ("--fixes 0." if not args.fixes else "no DataLoader setting was suggested."))
    return status


def _guarded(work, errors):
    """``(result, 0)`` from ``work()``; an expected error is one line on stderr and exit status 2,
    Ctrl-C is exit status 130 (the writers are atomic, so nothing half-written is kept)."""
    try:
        return work(), 0
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return None, 2
    except KeyboardInterrupt:
        print("interrupted: nothing was kept", file=sys.stderr)
        return None, 130


def _synth(args) -> int:
    from gpufeed.measure.synth import SynthError, parse_size, synth_folder

    r, status = _guarded(lambda: synth_folder(
        args.out, n=args.n, size=parse_size(args.size), quality=args.quality, classes=args.classes,
        seed=args.seed, workers=args.workers, progress=not args.no_progress, overwrite=args.overwrite), SynthError)
    if status:
        return status
    verb = "already there, nothing to do" if r.reused else f"written in {r.seconds:.1f} s"
    print(f"{r.path}: {r.n} images, {r.total_bytes / 1e6:.1f} MB, {verb}")
    return 0


def _memmap_size(args) -> tuple[int, int]:
    from gpufeed.measure.synth import SynthError, parse_size

    if args.workers < 1:
        raise SynthError(f"--workers must be 1 or more (got {args.workers})")
    return parse_size(args.size)


def _memmap(args) -> int:
    from gpufeed.measure.synth import SynthError

    # Arguments first: a typo is answered at once, before torch and tensordict load.
    size, status = _guarded(lambda: _memmap_size(args), SynthError)
    if status:
        return status
    from gpufeed.data.memmap import MemmapError, build_memmap

    r, status = _guarded(lambda: build_memmap(args.src, args.dst, size, workers=args.workers, skip_bad=args.skip_bad,
                                              overwrite=args.overwrite, progress=not args.no_progress,
                                              order_seed=args.order_seed),
                           MemmapError)
    if status:
        return status
    w, h = r.size
    print(f"{r.path}: {r.n} images {w}x{h}, {r.nbytes / 1e6:.1f} MB, written in {r.seconds:.1f} s")
    if r.skipped:
        print(f"skipped {len(r.skipped)} unreadable image(s):")
        for bad in r.skipped:
            print(f"  {bad['path']}: {bad['error']}")
    return 0


def _prepare(args) -> int:
    import torch

    from gpufeed.data.memmap import MemmapError
    from gpufeed.measure.datasets import datasets, prepare
    from gpufeed.measure.machine import usable_cores
    from gpufeed.measure.synth import SynthError

    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    specs = datasets(config.mode(), cuda)
    if args.only:
        wanted = {o.strip() for o in args.only.split(",") if o.strip()}
        # a lesson that generates nothing (03, 06) is a known owner with nothing to build
        unknown = {o for o in wanted if o != "bench" and not re.fullmatch(r"lesson\d\d", o)}
        if unknown:
            print(f"error: --only: {', '.join(sorted(unknown))} is not a lesson (lesson00 to lesson12) "
                  f"or the bench (owners of datasets: {', '.join(dict.fromkeys(d.owner for d in specs))})",
                  file=sys.stderr)
            return 2
        specs = [d for d in specs if d.owner in wanted]
    if args.workers is not None and args.workers < 1:
        print(f"error: --workers must be 1 or more (got {args.workers})", file=sys.stderr)
        return 2
    root = config.cache_dir()
    print(f"preparing {len(specs)} datasets ({config.mode()} sizes, "
          f"{'cuda' if cuda else 'cpu'}) in {root}")
    _, status = _guarded(lambda: prepare(root, specs, workers=args.workers or usable_cores()),
                         (SynthError, MemmapError))
    return status


def _bench(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from gpufeed.measure import results

    if args.repeats is not None and args.repeats < 1:
        print(f"error: --repeats must be 1 or more (got {args.repeats})", file=sys.stderr)
        return 2
    if args.device == "cuda":
        try:
            config.device("cuda")
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    quick = args.quick or config.quick_mode()
    out = Path(args.out) if args.out else results.machine_dir()
    if args.ceilings:
        return _bench_ceilings(args, quick, out)
    from gpufeed.measure import pipelines
    from gpufeed.measure import suite as pipeline_bench
    from gpufeed.measure.pipelines import PipelineError

    device = config.device(None if args.device == "auto" else args.device)
    size = args.size or ("quick" if quick else "full")
    workload = pipelines.TINY if size == "tiny" else pipelines.workload(size == "quick", device)
    path, status = _guarded(lambda: pipeline_bench.run(out, quick=size != "full", device=device, workload=workload,
                                                       repeats=args.repeats, dali=False if args.no_dali else None,
                                                       peers=args.peers),
                            PipelineError)
    if status:
        return status
    print()
    print(pipeline_bench.summary(pipeline_bench.load(path)))
    print(f"\nwrote {path} and its plots beside it")
    return 0


def _bench_ceilings(args, quick: bool, out: Path) -> int:
    from gpufeed.measure import ceilings, plotting
    from gpufeed.measure.harness import compare, save
    from gpufeed.measure.machine import machine_info

    ms = ceilings.all_ceilings(config.cache_dir() / "bench", quick=quick, device=args.device)
    path = save(out / "ceilings.json", ms, quick=quick)
    info = machine_info()
    groups = {"memory": [m for m in ms if m.nbytes and not m.items and "read" not in m.name],
              "file read": [m for m in ms if m.name.startswith("read")]}
    for title, group in groups.items():
        if group:
            fig, _ = plotting.bars(group, rate="bytes", machine=info, title=title)
            plotting.save(fig, out / f"ceilings-{title.replace(' ', '-')}.png")
    decode = [m for m in ms if m.items]
    if decode:
        fig, _ = plotting.bars(decode, machine=info, title="JPEG decode, one core")
        plotting.save(fig, out / "ceilings-decode.png")
    print(compare([m for m in ms if not m.items], rate="bytes"))
    print()
    print(compare(decode))
    print(f"\nwrote {path} and plots beside it")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from gpufeed.course.doctor import main as doctor_main

        return doctor_main()
    if args.command == "data" and args.data_command == "synth":
        return _synth(args)
    if args.command == "data" and args.data_command == "memmap":
        return _memmap(args)
    if args.command == "data" and args.data_command == "prepare":
        return _prepare(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "diagnose":
        return _diagnose(args)
    raise AssertionError(args)


if __name__ == "__main__":
    sys.exit(main())
