"""Starting torchrun from Python (a notebook, a test), on this machine only.

``torchrun`` may not be on the ``PATH`` of a Jupyter kernel, but ``python -m
torch.distributed.run`` (the same program) always runs with the kernel's own interpreter. On one
machine the ranks meet on the loopback address at a free port: no network beyond ``127.0.0.1``.
:func:`launch` runs :mod:`gpufeed.course.distributed` and returns its JSON. Taught in
``notebooks/12_scaling.ipynb``.

Example:
    >>> cmd = torchrun_command(2, ["--data", "DIR"], port=29500, python="python")
    >>> " ".join(cmd)  # doctest: +NORMALIZE_WHITESPACE
    'python -m torch.distributed.run --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1
     --master-port 29500 -m gpufeed.course.distributed --data DIR'
    >>> 1024 <= free_port() < 65536
    True
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

#: What a failed launch shows of the processes' output (their last lines hold the error).
TAIL_LINES = 25


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it; another program could take it
    before we do, which :func:`launch` answers by trying once more)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def loopback_ifname() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), or None."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def torchrun_command(nproc: int, script_args, *, module: str = "gpufeed.course.distributed", port: int | None = None,
                     python: str = sys.executable) -> list[str]:
    """The command that starts ``nproc`` processes of ``module`` on this machine with torchrun.

    ``--nnodes 1`` and an explicit loopback ``--master-addr``/``--master-port`` (torchrun's static
    rendezvous): the ranks find each other on ``127.0.0.1``, whatever the host name resolves to.
    """
    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a whole number, at least 1 (got {nproc!r})")
    return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--master-addr", "127.0.0.1", "--master-port", str(port or free_port()), "-m", module,
            *map(str, script_args)]


def launch(nproc: int, script_args, out: str | os.PathLike, *, threads: int = 1, timeout: float = 600,
           env: dict | None = None, verbose: bool = True) -> tuple[list, dict]:
    """Runs :mod:`gpufeed.course.distributed` with ``nproc`` processes, ``--out out``; returns
    ``(measurements, document)`` of its JSON (:func:`gpufeed.measure.harness.load`).

    Args:
        nproc: processes (ranks) on this machine: one per GPU, or a few on the CPU.
        script_args: the script's other arguments, e.g. ``["--data", DIR, "--train"]``.
        out: where rank 0 writes its JSON.
        threads: ``OMP_NUM_THREADS`` for every process (torch's threads each): keep
            ``nproc * threads`` at most the number of cores, or the processes fight over them.
        timeout: seconds before the whole run is stopped.
        env: more environment variables for the processes.
        verbose: print the command and rank 0's summary.

    Raises:
        RuntimeError: the run failed; the message holds the last lines of its output.
    """
    from gpufeed.measure.harness import load

    out = Path(out)
    child_env = {**os.environ, "OMP_NUM_THREADS": str(threads), **(env or {})}
    for attempt in range(2):
        cmd = torchrun_command(nproc, [*script_args, "--out", out])
        if verbose and attempt == 0:
            print("$", " ".join(["python", *cmd[1:]]))
        r = subprocess.run(cmd, capture_output=True, text=True, env=child_env, timeout=timeout)
        if r.returncode == 0 or "address already in use" not in (r.stdout + r.stderr).lower():
            break  # a taken port is the one failure worth a second try
    if r.returncode != 0:
        lines = (r.stdout + r.stderr).strip().splitlines()
        # The processes' own one-line errors first: torchrun's report after them hides them otherwise.
        ours = list(dict.fromkeys(x for x in lines if x.startswith(("gpufeed.", "usage:")) or ": error:" in x))
        tail = "\n".join([*ours, *lines[-TAIL_LINES:]])
        raise RuntimeError(f"torchrun with {nproc} process(es) failed (exit {r.returncode}):\n{tail}")
    if verbose:
        print(r.stdout.strip())
    return load(out)


def run_here(script_args, out: str | os.PathLike, *, threads: int = 1) -> tuple[list, dict]:
    """Runs :mod:`gpufeed.course.distributed` in this process, alone (rank 0 of 1): no launcher, and no
    start-up cost, since torch is already imported. Returns ``(measurements, document)``.

    Raises:
        RuntimeError: the script failed (its one-line error went to stderr).
    """
    from gpufeed.course.distributed import main
    from gpufeed.measure.harness import load

    code = main([*map(str, script_args), "--out", str(out), "--threads", str(threads)])
    if code != 0:
        raise RuntimeError(f"gpufeed.course.distributed failed (exit {code}); its error is printed above")
    return load(out)
