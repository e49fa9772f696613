"""The scaling-out script: data-parallel loading (and training) under torchrun, one process per GPU.

Run it with two processes on the CPU (gloo), or one per GPU (nccl), unchanged::

    torchrun --nproc-per-node 2 -m gpufeed.course.lesson12.distributed --data DIR --out run.json [--train]
    python -m torch.distributed.run --nproc-per-node 2 -m gpufeed.course.lesson12.distributed --data DIR ...

Every process (*rank*) maps the same memmap dataset (built once: ``python -m gpufeed data memmap
SRC DIR``), reads its shard of every epoch (:mod:`gpufeed.course.lesson12.shards`: ``--loader fast`` or
``sampler``), optionally trains a small CNN in ``DistributedDataParallel`` (``--train``), and times
its epochs with :func:`gpufeed.measure.harness.benchmark` (warm-up epochs untimed, CUDA synchronised). Rank 0
gathers every rank's numbers, checks that the shards of every epoch were disjoint and complete (an
all-reduce of per-sample read counts), and writes one JSON (:func:`gpufeed.measure.harness.save`) to
``--out``. Without torchrun it runs as one process. :mod:`gpufeed.course.lesson12.launch` starts it from Python.
Taught in ``notebooks/12_scaling.ipynb``.

Example:
    >>> choose_backend("gloo", local_world_size=2)
    ('gloo', 'cpu')
    >>> tiny_cnn(num_classes=4)(torch.zeros(2, 3, 32, 32, dtype=torch.uint8)).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import socket
import sys
import time
import warnings
from contextlib import contextmanager
from datetime import timedelta

import torch

from gpufeed.course.lesson12 import pagecache
from gpufeed.course.lesson12.ports import free_port, loopback_ifname
from gpufeed.measure.harness import Measurement, benchmark, save

#: Up to this many samples, the JSON lists each rank's indices per epoch (beyond: digests only).
RECORD_LIMIT = 4096


def batch_per_rank(n: int, world_size: int, wanted: int) -> int:
    """The largest batch up to ``wanted`` that gives each of ``world_size`` ranks one full batch of ``n`` samples.

    Training uses full batches only (every rank must take as many steps), and each rank holds
    ``n // world_size`` samples, so a batch larger than that leaves a rank with no step at all:
    256 images in batches of 128 run on 1 or 2 GPUs, but not on 3 (85 samples a rank).

    Raises:
        ValueError: fewer samples than ranks (no batch size helps).

    Example:
        >>> batch_per_rank(256, 2, 128), batch_per_rank(256, 3, 128), batch_per_rank(256, 8, 128)
        (128, 85, 32)
    """
    if n < world_size:
        raise ValueError(f"{n} samples over {world_size} ranks leave a rank with none; use a larger dataset "
                         "or fewer processes (--nproc-per-node)")
    return max(1, min(wanted, n // world_size))


def tiny_cnn(num_classes: int, seed: int = 0) -> torch.nn.Sequential:
    """A small CNN for ``uint8 [N, 3, H, W]`` images (normalised inside): cheap enough to train on
    two CPU cores, so that the loader and the all-reduce are not lost behind the model."""
    from torch import nn

    from gpufeed.course.training import Normalize

    torch.manual_seed(seed)  # the same start on every rank (DDP also broadcasts rank 0's weights)
    return nn.Sequential(Normalize(), nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def torchrun_env() -> dict:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` as torchrun sets them, and the
    ``init_method`` that meets the others (``env://``: torchrun's ``MASTER_ADDR``/``MASTER_PORT``).
    Without torchrun: this process alone, rank 0 of 1, at a free port on 127.0.0.1; ``os.environ``
    is left alone, so that :func:`main` can run inside a notebook's kernel."""
    if "RANK" not in os.environ:
        return {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 1,
                "init_method": f"tcp://127.0.0.1:{free_port()}"}
    env = {k: int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["LOCAL_WORLD_SIZE"] = int(os.environ.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
    return {**env, "init_method": "env://"}


@contextmanager
def process_group(backend: str, env: dict, device: torch.device, threads: int, timeout: float):
    """Joins the process group for the ``with`` block, then leaves it (also on errors) and puts
    back what it changed in this process: torch's thread count and ``GLOO_SOCKET_IFNAME``."""
    import torch.distributed as dist

    saved_threads, saved_ifname = torch.get_num_threads(), os.environ.get("GLOO_SOCKET_IFNAME")
    if backend == "gloo" and env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] and saved_ifname is None and loopback_ifname():
        os.environ["GLOO_SOCKET_IFNAME"] = loopback_ifname()  # one machine: the ranks meet on loopback
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before anything touches CUDA: this process owns this GPU only
    if threads:
        torch.set_num_threads(threads)
    try:
        dist.init_process_group(backend, init_method=env["init_method"], rank=env["RANK"],
                                world_size=env["WORLD_SIZE"], timeout=timedelta(seconds=timeout),
                                **({"device_id": device} if device.type == "cuda" else {}))
        try:
            yield
        finally:
            dist.destroy_process_group()  # sockets closed, no leak warning at exit
    finally:
        torch.set_num_threads(saved_threads)
        if saved_ifname is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)


def choose_backend(requested: str, local_world_size: int) -> tuple[str, str]:
    """``(backend, device type)``: nccl on GPUs when CUDA exists (``auto``), else gloo on the CPU.

    Raises:
        ValueError: nccl without CUDA, or more processes on this machine than GPUs.
    """
    if requested not in ("auto", "gloo", "nccl"):
        raise ValueError(f"--backend must be auto, gloo or nccl (got {requested!r})")
    backend = requested if requested != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ValueError("--backend nccl needs CUDA GPUs and torch sees none; use --backend gloo (CPU)")
        if local_world_size > gpus:
            raise ValueError(f"{local_world_size} processes on this machine but {gpus} GPU(s): one process per GPU, "
                             f"so pass --nproc-per-node {gpus}")
        return backend, "cuda"
    return backend, "cpu"


def ddp_step(model: str, num_classes: int, device: torch.device):
    """``step(images, targets)``: one SGD step of ``model`` (``tiny``: :func:`tiny_cnn`, or
    ``resnet18``) wrapped in ``DistributedDataParallel``; bfloat16 autocast on GPUs that have it.

    A single process trains the bare model: DDP would have no one to all-reduce with, and building
    it imports ``torch._dynamo``, seconds of start-up on a small machine."""
    import torch.distributed as dist
    from torch import nn

    from gpufeed.course.training import resnet18_with_normalize

    net = tiny_cnn(num_classes) if model == "tiny" else resnet18_with_normalize(num_classes)
    cuda = device.type == "cuda"
    net = net.to(device, memory_format=torch.channels_last) if cuda else net  # NHWC: Tensor Cores' layout
    if dist.get_world_size() > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    amp = cuda and torch.cuda.is_bf16_supported()

    def step(images, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(net(images), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients bucket by bucket, overlapped with the backward pass
        opt.step()

    return step


def time_epochs(name: str, loader, step, device, warmup: int, epochs: int, barrier,
                passes: int = 1) -> tuple[Measurement, list[dict]]:
    """Times ``warmup`` (untimed) + ``epochs`` samples of ``passes`` epochs of ``loader`` each, each
    sample started together (``barrier``), each batch sent to ``device`` and given to ``step`` (None:
    loading only). An epoch of loading a small dataset lasts milliseconds, within a timer's and a
    busy machine's noise: ``passes`` makes each timed sample long enough to mean something.

    Returns:
        The :class:`~gpufeed.measure.harness.Measurement` (seconds per sample; ``items``: images per
        sample on this rank) and, per epoch, the indices read (``int64 [k]``) and the page faults taken.
    """
    records: list[dict] = []

    def epoch():
        loader.set_epoch(len(records))
        major, minor = pagecache.faults()
        seen = []
        for images, targets, idx in loader:
            images = images.to(device, non_blocking=True)  # already there with the fast loader on CUDA
            if step is not None:
                step(images, targets.to(device, non_blocking=True))
            seen.append(idx)
        major2, minor2 = pagecache.faults()
        got = torch.cat(seen).cpu() if seen else torch.empty(0, dtype=torch.int64)
        records.append({"epoch": len(records), "indices": got, "major": major2 - major, "minor": minor2 - minor})

    with warnings.catch_warnings():  # a noisy warning per rank is clutter: the JSON keeps every sample
        warnings.simplefilter("ignore")
        m = benchmark(lambda: [epoch() for _ in range(passes)], name=name, warmup=warmup, repeats=epochs,
                      setup=barrier, with_machine=False)
    m.items = len(records[-1]["indices"]) * passes
    return m, records


def run(args: argparse.Namespace, env: dict, backend: str, device: torch.device) -> dict:
    """This rank's part of the run; returns what rank 0 writes (every rank gets the same)."""
    import torch.distributed as dist

    from gpufeed.course.lesson12.shards import coverage, digest, make_loader
    from gpufeed.data.arrays import open_arrays

    rank, world = env["RANK"], env["WORLD_SIZE"]
    (images, targets, manifest), files = open_arrays(args.data), pagecache.memmap_files(args.data)
    resident_start = pagecache.resident(files)
    n = len(targets)
    tensors = (images, targets, torch.arange(n))  # the index travels with each batch: proof of what was read
    kw = {"rank": rank, "world_size": world, "seed": args.seed, "device": device}
    loaders = {"load": make_loader(tensors, args.batch_size, args.loader, drop_last=args.drop_last, **kw)}
    if args.train:  # DDP needs the same number of steps on every rank: full batches, equal shards
        loaders["train"] = make_loader(tensors, args.batch_size, args.loader, drop_last=True, **kw)
    if any(len(loader) == 0 for loader in loaders.values()):
        raise ValueError(f"{n} images over {world} ranks give no full batch of {args.batch_size} per rank "
                         "(--train and --drop-last use full batches only); lower --batch-size")
    steps = {"train": ddp_step(args.model, len(manifest["classes"]), device)} if args.train else {}
    mine, report = {"rank": rank, "local_rank": env["LOCAL_RANK"], "host": socket.gethostname(), "pid": os.getpid(),
                    "device": str(device), "phases": {}}, {}
    for phase, loader in loaders.items():
        epochs, passes = (args.load_epochs, args.load_passes) if phase == "load" else (args.epochs, 1)
        m, records = time_epochs(phase, loader, steps.get(phase), device, args.warmup, epochs, dist.barrier, passes)
        mine["phases"][phase] = {"samples": m.samples, "items": m.items, "epochs": [
            {"epoch": r["epoch"], "count": len(r["indices"]), "digest": digest(r["indices"]), "major": r["major"],
             "minor": r["minor"], "indices": r["indices"].tolist() if n <= RECORD_LIMIT else None} for r in records]}
        report[phase] = []
        for r in records:  # how often each sample was read, summed over the ranks
            counts = torch.bincount(r["indices"], minlength=n).to(device)
            dist.all_reduce(counts)
            report[phase].append({"epoch": r["epoch"], **coverage(counts.cpu())})
    mine["resident"] = [None if x is None else x[0] / max(x[1], 1) for x in (resident_start, pagecache.resident(files))]
    ranks: list = [None] * world
    dist.all_gather_object(ranks, mine)
    return {"ranks": ranks, "shards": report, "n": n, "image_shape": list(images.shape[1:])}


def measurements(doc: dict) -> list[Measurement]:
    """Per phase: one :class:`~gpufeed.measure.harness.Measurement` per rank (``"load, rank 1"``) and one
    for all ranks together (``"load, 2 processes"``: each epoch as long as its slowest rank, the
    images of every rank)."""
    out, world = [], len(doc["ranks"])
    params = {k: doc["distributed"][k] for k in ("world_size", "backend", "loader", "batch_size", "model")}
    for phase in doc["ranks"][0]["phases"]:
        per = [r["phases"][phase] for r in doc["ranks"]]
        for r, p in zip(doc["ranks"], per):
            out.append(Measurement(f"{phase}, rank {r['rank']}", p["samples"], p["items"],
                                   params={**params, "phase": phase, "rank": r["rank"]}))
        slowest = [max(p["samples"][i] for p in per) for i in range(len(per[0]["samples"]))]
        out.append(Measurement(f"{phase}, {world} process{'es' if world > 1 else ''}", slowest,
                               sum(p["items"] for p in per), params={**params, "phase": phase, "rank": "all"}))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m gpufeed.course.lesson12.distributed",
                                description="Data-parallel loading (and training) over one memmap dataset; "
                                            "rank 0 writes the per-rank numbers as JSON.")
    p.add_argument("--data", required=True, help="a memmap dataset folder (python -m gpufeed data memmap SRC DIR)")
    p.add_argument("--out", help="the JSON rank 0 writes (default: only print a summary)")
    p.add_argument("--loader", choices=("fast", "sampler"), default="fast",
                   help="fast: gpufeed's FastLoader shards; sampler: DistributedSampler in a BatchSampler")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch, per rank")
    p.add_argument("--epochs", type=int, default=3, help="timed training epochs (with --train)")
    p.add_argument("--load-epochs", type=int, default=10, help="timed samples of loading alone (short: take more)")
    p.add_argument("--load-passes", type=int, default=1,
                   help="epochs per timed sample of loading alone (an epoch of a small dataset lasts milliseconds)")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs first")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed, the same on every rank")
    p.add_argument("--drop-last", action="store_true", help="equal shards of full batches (training always does)")
    p.add_argument("--train", action="store_true", help="also time training epochs in DistributedDataParallel")
    p.add_argument("--model", choices=("tiny", "resnet18"), default="tiny", help="the model --train trains")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl with one GPU per process where CUDA exists, else gloo on the CPU")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: OMP_NUM_THREADS or torch's choice)")
    p.add_argument("--timeout", type=float, default=300, help="seconds a collective may wait for the other ranks")
    args = p.parse_args(argv)
    if min(args.batch_size, args.epochs, args.load_epochs, args.load_passes) < 1 or min(args.warmup, args.threads) < 0:
        p.error("--batch-size, --epochs, --load-epochs and --load-passes must be at least 1, --warmup and --threads "
                "at least 0")
    return args


def _summary(doc: dict, ms: list[Measurement]) -> str:
    d, world = doc["distributed"], doc["distributed"]["world_size"]
    lines = [f"{world} process{'es' if world > 1 else ''} ({d['backend']}, {d['device']}), loader {d['loader']}, "
             f"batch {d['batch_size']}, {doc['n']} images:"]
    for m in ms:
        if m.params["rank"] == "all":
            ranks = ", ".join(f"{x.items_per_s:,.0f}" for x in ms if x.params["phase"] == m.params["phase"]
                              and x.params["rank"] != "all")
            lines.append(f"  {m.params['phase']}: {m.items_per_s:,.0f} images/s for the ranks together, each epoch "
                         f"as long as its slowest rank (per rank: {ranks}), spread {m.spread:.0%}")
    ok = all(e["disjoint"] for p in doc["shards"].values() for e in p)
    full = all(e["complete"] for p in doc["shards"].values() for e in p)
    lines.append(f"  shards: {'disjoint' if ok else 'OVERLAPPING'} in every epoch, "
                 f"{'covering the dataset' if full else 'not covering every sample (drop_last, or padding)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The script: returns the exit code (0, or 2 with a one-line error for bad input)."""
    from gpufeed.data.arrays import open_arrays

    args = parse_args(argv)
    env = torchrun_env()
    try:
        backend, device_type = choose_backend(args.backend, env["LOCAL_WORLD_SIZE"])
        open_arrays(args.data)  # checked before the rendezvous: a bad folder is one line here, not a hang there
    except ValueError as e:  # gpufeed.data.memmap.MemmapError is a ValueError; its message names the folder
        if env["LOCAL_RANK"] == 0:  # one line per machine, not one per process
            print(f"gpufeed.course.lesson12.distributed: {e}", file=sys.stderr)
        return 2
    device = torch.device("cuda", env["LOCAL_RANK"]) if device_type == "cuda" else torch.device("cpu")
    with process_group(backend, env, device, args.threads, args.timeout):
        try:
            doc = run(args, env, backend, device)
        except ValueError as e:
            if env["RANK"] == 0:
                print(f"gpufeed.course.lesson12.distributed: {e}", file=sys.stderr)
            return 2
        threads = torch.get_num_threads()
    if env["RANK"] == 0:
        doc["distributed"] = {
            "world_size": env["WORLD_SIZE"], "backend": backend, "device": device.type, "loader": args.loader,
            "batch_size": args.batch_size, "epochs": args.epochs, "load_epochs": args.load_epochs,
            "load_passes": args.load_passes,
            "warmup": args.warmup, "seed": args.seed, "drop_last": args.drop_last, "train": args.train,
            "model": args.model if args.train else None, "ddp": args.train and env["WORLD_SIZE"] > 1,
            "threads": threads, "data": str(args.data), "torch": torch.__version__}
        ms = measurements(doc)
        print(_summary(doc, ms))
        if args.out:
            print(f"  wrote {save(args.out, ms, **doc).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- uneven inputs: what happens without Join, and with it (taught in lesson 12) ---------------

def _uneven_worker(rank: int, world_size: int, steps: list[int], joins: list[bool], init_methods: list[str],
                   timeout: float, results) -> None:
    """One rank of :func:`uneven_inputs`: per run, ``steps[rank]`` DDP steps of a linear model on gloo, in a
    process group of its own (``init_methods``, one per run: a run without ``Join`` leaves its group broken)."""
    from contextlib import nullcontext

    import torch.distributed as dist
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # DDP's and Join's warnings would land on the notebook's page: the result says it
    ifname = loopback_ifname()
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname  # one machine: meet over loopback
    failed = None
    for use_join, init_method in zip(joins, init_methods):
        out = {"join": use_join, "rank": rank, "steps": 0, "error": None, "weight": None}
        if failed is not None:  # the group may be stuck: no new one after a failure
            out["error"] = f"not run: the run before failed ({failed})"
            results.put(out)
            continue
        try:
            # Meeting and setting up get a minute (a loaded machine starts the ranks seconds apart); only
            # the training's all-reduces run in the group with the short timeout the lesson shows.
            dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=max(timeout, 60)))
            short = dist.new_group(timeout=timedelta(seconds=timeout))  # every rank, short timeout; waits for all
            torch.manual_seed(0)
            module = torch.nn.Linear(4, 1)
            dist.barrier()  # both ranks here before DDP's first collective (its check of the shapes) starts the clock
            model = DDP(module, process_group=short)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            with Join([model]) if use_join else nullcontext():  # Join: finished ranks shadow the others' all-reduces
                for _ in range(steps[rank]):
                    loss = model(torch.randn(8, 4)).square().mean()
                    optimizer.zero_grad()
                    loss.backward()  # all-reduce of the gradients: every rank must take part
                    optimizer.step()
                    out["steps"] += 1
                if not use_join:  # stay alive a while, as a rank busy evaluating would: the others meet the timeout
                    time.sleep(timeout + 1)
            out["weight"] = model.module.weight.detach().flatten().tolist()
        except Exception as e:  # the rank left waiting: a timeout, or the peer's closed connection
            out["error"] = failed = one_line(e)
        results.put(out)
        if out["error"] is None:
            dist.destroy_process_group()


def one_line(error: BaseException, limit: int = 160) -> str:
    """``"Type: message"`` in one line for a reader: the message's first line, without the C++ source
    location (``[/build/path/file.cc:78] ``) that gloo and c10d put in front, cut at a word within
    ``limit`` characters.

    Example:
        >>> one_line(RuntimeError("[/__w/pytorch/third_party/gloo/tcp/unbound_buffer.cc:78] Timed out "
        ...                       "waiting 3000ms for recv operation to complete\\nmore"))
        'RuntimeError: Timed out waiting 3000ms for recv operation to complete'
        >>> one_line(ValueError("a b c d e f"), limit=8)
        'ValueError: a b c d ...'
    """
    text = (str(error).strip().splitlines() or [""])[0]
    text = re.sub(r"\[[^\]]*\.(?:c|cc|cpp|cu|h|hpp):\d+\]\s*", "", text).strip()
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return f"{type(error).__name__}: {text}"


def uneven_inputs(steps=(2, 4), *, joins=(False, True), timeout: float = 5.0) -> dict[bool, list[dict]]:
    """Trains a linear model in DDP on ``len(steps)`` CPU processes (gloo), rank r taking ``steps[r]`` steps,
    once without ``Join`` and once with it (or as ``joins`` says).

    Without ``Join``, a rank that runs out of batches stops calling the all-reduce that the others
    still wait in: they fail once ``timeout`` seconds pass (here the finished rank stays alive that
    long; had it exited, its closed connection would fail them at once). With it (``torch.distributed.algorithms.join.Join``),
    finished ranks take part with zero gradients until every rank is done, and all the copies of
    the model stay equal. The processes are started once, forked from a server that has imported
    torch already (:func:`gpufeed.course.lesson12.forked.context`), and make every run, each in a
    process group of its own; the runs with ``Join`` go first, since a run without it ends in a
    timeout that leaves its group broken.

    Returns:
        ``{join: one dict per rank, by rank}`` in the order of ``joins``; a rank's dict holds ``steps``
        taken, ``error`` (None or one line), ``weight`` (the final weights, a list, None after an error).
    """
    joins = list(dict.fromkeys(joins))
    order = sorted(joins, key=lambda j: not j)  # with Join first: the run without it fails its group
    from gpufeed.course.lesson12.forked import context

    ctx = context()  # its server runs with c10d's warnings off: they would land on the notebook's page
    results = ctx.Queue()
    inits: list[str] = []
    while len(inits) < len(order):  # one port per run's group, never the same twice
        init = f"tcp://127.0.0.1:{free_port()}"
        inits += [] if init in inits else [init]
    procs = [ctx.Process(target=_uneven_worker, args=(r, len(steps), list(steps), order, inits, timeout, results))
             for r in range(len(steps))]
    for p in procs:
        p.start()
    expected = len(procs) * len(order)
    got, deadline = [], time.monotonic() + len(order) * (timeout + 2) + 120  # start-up + the collective timeouts
    try:
        while len(got) < expected:
            try:
                got.append(results.get(timeout=0.5))
            except queue.Empty:
                if time.monotonic() > deadline or not any(p.is_alive() for p in procs):
                    raise RuntimeError(f"uneven_inputs: {expected - len(got)} result(s) of rank(s) that died or hung; "
                                       "see their output above") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():  # stuck in a collective that never returns: do not leave it behind
                p.kill()
                p.join()
    return {j: sorted((r for r in got if r["join"] == j), key=lambda r: r["rank"]) for j in joins}
