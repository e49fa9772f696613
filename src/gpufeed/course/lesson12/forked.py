"""Rank processes forked from one interpreter that has imported torch already: start-up paid once.

A rank that torchrun starts is a fresh interpreter: it imports torch, and its first optimizer or
DDP imports ``torch._dynamo`` too, seconds of CPU each time (about 5 s on a small machine: more
than the lesson's short runs themselves). Here one *fork server* (multiprocessing's
``forkserver``) imports them once (:data:`PRELOAD`), and every rank is a fork of it, ready in
milliseconds. The server forks while it runs no other thread (no lock held by a thread that the
child would not have), which forking a Jupyter kernel itself could not promise.

:func:`run` starts :mod:`gpufeed.course.lesson12.distributed` in ``nproc`` such ranks with the
variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...), so the script runs as it
does under torchrun; :func:`gpufeed.course.lesson12.distributed.uneven_inputs` starts its ranks
from :func:`context` too. Taught in ``notebooks/12_scaling.ipynb``.

Example:
    >>> env = rank_env(1, 2, 29500)
    >>> env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]
    ('1', '2', '127.0.0.1', '29500')
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

#: What the fork server imports before it forks the first rank: torch, and what DDP, Join and the
#: first optimizer import (``torch._dynamo``). The script itself is light; each rank runs it afresh.
PRELOAD = ("torch", "torch._dynamo", "torch.distributed", "torch.nn.parallel", "torch.distributed.algorithms.join")

#: What a failed run shows of each rank's output (its last lines hold the error).
TAIL_LINES = 25
#: Seconds the other ranks get to end by themselves once one has failed, before they are stopped.
GRACE_S = 5.0


def context() -> multiprocessing.context.BaseContext:
    """The ``forkserver`` context, its server started (one per process, kept until this process
    ends): it imports :data:`PRELOAD` once, before its first fork.

    The server, and so every rank, runs with ``TORCH_CPP_LOG_LEVEL=ERROR`` (read once, when torch
    loads): c10d's warnings stay off a notebook's page, its errors do not. A server already started
    otherwise (something else used ``forkserver`` first) still works: each rank then imports what
    it needs itself.
    """
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    level = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"  # inherited by the server when it starts here
    try:
        forkserver.ensure_running()
    finally:
        os.environ.pop("TORCH_CPP_LOG_LEVEL") if level is None else os.environ.update(TORCH_CPP_LOG_LEVEL=level)
    return ctx


def rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The variables torchrun gives rank ``rank`` of ``world_size`` on one machine, meeting at
    ``127.0.0.1:port`` (``init_process_group``'s ``env://``)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def _rank(module: str, argv: list[str], env: dict[str, str], log: str) -> None:
    """One rank: its output to ``log`` (a shared console would interleave the ranks'), then ``module``
    as ``python -m module argv`` runs it (its ``sys.exit(code)`` is the process's exit code)."""
    import faulthandler
    import runpy

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)  # sys.stdout and sys.stderr write there now, and so does C++ (gloo, c10d)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable()  # a crash in native code shows where each thread was
    os.environ.update(env)
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def run(nproc: int, script_args, out: str | os.PathLike, *, threads: int = 1, timeout: float = 600,
        verbose: bool = True, module: str = "gpufeed.course.lesson12.distributed") -> tuple[list, dict]:
    """Runs ``module`` (:mod:`gpufeed.course.lesson12.distributed`) in ``nproc`` ranks forked from
    :func:`context`'s server, ``--out out --threads threads``; returns ``(measurements, document)``
    as :func:`gpufeed.course.lesson12.launch.launch` does.

    Args:
        nproc: ranks on this machine.
        script_args: the script's other arguments, e.g. ``["--data", DIR, "--train"]``.
        out: where rank 0 writes its JSON.
        threads: torch's threads in each rank (``--threads``).
        timeout: seconds before the ranks still running are killed.
        verbose: print rank 0's summary.
        module: the script to run; it takes ``--out PATH`` and ``--threads N``, and writes its results
            there with :func:`gpufeed.measure.harness.save` on rank 0.

    Raises:
        RuntimeError: a rank failed or ran out of time; the message holds the end of its output.
    """
    from gpufeed.course.lesson12.ports import free_port
    from gpufeed.measure.harness import load

    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a whole number, at least 1 (got {nproc!r})")
    ctx, port = context(), free_port()
    argv = [*map(str, script_args), "--out", str(out), "--threads", str(threads)]
    with tempfile.TemporaryDirectory(prefix="gpufeed-forked-") as logs:
        paths = [Path(logs) / f"rank{r}.log" for r in range(nproc)]
        procs = [ctx.Process(target=_rank, args=(module, argv, rank_env(r, nproc, port), str(paths[r]))) for r in range(nproc)]
        for p in procs:
            p.start()
        deadline, running = time.monotonic() + timeout, {p.sentinel: p for p in procs}
        graced = False
        while running:  # as torchrun: a failed rank stops the others, after a grace period
            if not graced and any(p.exitcode for p in procs):
                # the others often fail on the same input a moment later, and only rank 0 prints
                # the error: give them GRACE_S from the first failure to say it before they stop
                deadline, graced = min(deadline, time.monotonic() + GRACE_S), True
            ended = wait(list(running), timeout=max(0.0, deadline - time.monotonic()))
            if not ended:  # out of time
                break
            for sentinel in ended:
                running.pop(sentinel).join()
        for p in running.values():
            p.kill()
            p.join()
        texts = [p.read_text(errors="replace") for p in paths]
    failed = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode != 0}
    if failed:
        parts = [f"{nproc} forked rank(s) failed: " + ", ".join(
            f"rank {r} " + (f"exit {c}" if c > 0 else "stopped (out of time, or after another rank failed)")
            for r, c in failed.items()) + ":"]
        for r in failed:
            lines = texts[r].strip().splitlines()
            parts += [f"--- rank {r}'s output (last {min(len(lines), TAIL_LINES)} of {len(lines)} lines):",
                      *lines[-TAIL_LINES:]]
        raise RuntimeError("\n".join(parts))
    if verbose:
        print(texts[0].strip())
    return load(out)


def in_turns(arms: dict[str, tuple[int, int]], script_args, out_dir: str | os.PathLike, rounds: int = 5,
             ) -> dict[str, dict[str, object]]:
    """Runs the script (:func:`run`) once per arm in each of ``rounds`` rounds, the arms in turns
    (A, B, A, B, ...), so that a burst of other work on the machine slows both a little rather than
    one a lot, and the verdict can pair them round by round (:func:`gpufeed.measure.verdict.compare`).

    Args:
        arms: ``name -> (nproc, threads)``, e.g. ``{"1 process": (1, 1), "2 processes": (2, 1)}``.
        script_args: the script's arguments, the same for every arm.
        out_dir: where each run's JSON goes.
        rounds: runs of each arm.

    Returns:
        ``name -> {measurement name -> Measurement}``, the script's measurement names with
        ``"N process(es)"`` written ``"all"`` (``"load, all"``, ``"train, rank 1"``): each holds the
        median sample (seconds) of each round's run, one per round, and is named ``"<arm>: <name>"``.
    """
    from gpufeed.measure.harness import Measurement

    out: dict[str, dict[str, Measurement]] = {name: {} for name in arms}
    for r in range(rounds):
        for i, (name, (nproc, threads)) in enumerate(arms.items()):
            ms, _ = run(nproc, script_args, Path(out_dir) / f"turn{r}-arm{i}.json", threads=threads, verbose=False)
            for m in ms:
                key = f"{m.params['phase']}, all" if m.params.get("rank") == "all" else m.name
                got = out[name].setdefault(key, Measurement(f"{name}: {key}", [], m.items, params={**m.params, "arm": name}))
                got.samples.append(m.median)
    return out

