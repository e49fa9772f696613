"""Starting torchrun from Python (a notebook, a test), on this machine only.

``torchrun`` may not be on the ``PATH`` of a Jupyter kernel, but ``python -m
torch.distributed.run`` (the same program) always runs with the kernel's own interpreter. On one
machine the ranks meet on the loopback address at a free port: no network beyond ``127.0.0.1``.
:func:`launch` runs :mod:`gpufeed.course.lesson12.distributed` and returns its JSON. Taught in
``notebooks/12_scaling.ipynb``.

Example:
    >>> cmd = torchrun_command(2, ["--data", "DIR"], port=29500, python="python")
    >>> " ".join(cmd)  # doctest: +NORMALIZE_WHITESPACE
    'python -m torch.distributed.run --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1
     --master-port 29500 -m gpufeed.course.lesson12.distributed --data DIR'
    >>> 1024 <= free_port() < 65536
    True
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from gpufeed.course.lesson12.ports import free_port, loopback_ifname  # noqa: F401  (re-exported)

#: What a failed launch shows of the processes' output (their last lines hold the error).
TAIL_LINES = 25



def torchrun_command(nproc: int, script_args, *, module: str = "gpufeed.course.lesson12.distributed", port: int | None = None,
                     python: str = sys.executable, log_dir: str | os.PathLike | None = None) -> list[str]:
    """The command that starts ``nproc`` processes of ``module`` on this machine with torchrun.

    ``--nnodes 1`` and an explicit loopback ``--master-addr``/``--master-port`` (torchrun's static
    rendezvous): the ranks find each other on ``127.0.0.1``, whatever the host name resolves to.
    With ``log_dir``, each process's stdout and stderr go to files there (``--redirects 3``):
    :func:`rank_logs` reads them back, one rank at a time, where a shared console would interleave them.
    """
    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a whole number, at least 1 (got {nproc!r})")
    logs = ["--log-dir", str(log_dir), "--redirects", "3"] if log_dir is not None else []
    return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--master-addr", "127.0.0.1", "--master-port", str(port or free_port()), *logs, "-m", module,
            *map(str, script_args)]


def shown(cmd: list[str]) -> str:
    """A command as a reader needs it: ``python`` for the interpreter's path, without the log
    folder (a temporary one), and each other absolute path by its name alone.

    Example:
        >>> shown(["/opt/venv/bin/python", "-m", "torch.distributed.run", "--log-dir", "/tmp/x/run0",
        ...        "--redirects", "3", "-m", "gpufeed.course.lesson12.distributed", "--data", "/home/me/.cache/mm-256"])
        'python -m torch.distributed.run -m gpufeed.course.lesson12.distributed --data mm-256'
    """
    out, skip = ["python"], 0
    for arg in cmd[1:]:
        if skip:
            skip -= 1
        elif arg in ("--log-dir", "--redirects"):
            skip = 1
        else:
            out.append(Path(arg).name if os.path.isabs(arg) else arg)
    return " ".join(out)


def rank_logs(log_dir: str | os.PathLike, stream: str = "stderr") -> dict[int, str]:
    """``{local rank: text}`` of what each process wrote to ``stream`` (``stdout`` or ``stderr``)
    in a torchrun run started with ``log_dir`` (its files: ``<run id>/attempt_<k>/<local rank>/<stream>.log``;
    the last attempt wins)."""
    out: dict[int, str] = {}
    for f in sorted(Path(log_dir).glob(f"*/attempt_*/*/{stream}.log"), key=lambda p: int(p.parent.parent.name[8:])):
        out[int(f.parent.name)] = f.read_text(errors="replace")
    return dict(sorted(out.items()))


def crashed_ranks(torchrun_output: str) -> dict[int, str]:
    """``{rank: signal name}`` for the processes whose crash ended the run: those killed by a signal
    (``exitcode : -6``) in the *Root Cause* part of torchrun's failure report. The others it lists
    were stopped by torchrun itself (SIGTERM) once the first one failed.

    Example:
        >>> crashed_ranks("Failures:\\n  rank      : 0 (local_rank: 0)\\n  exitcode  : -15 (pid: 6)\\n"
        ...               "Root Cause (first observed failure):\\n  rank      : 1 (local_rank: 1)\\n"
        ...               "  exitcode  : -6 (pid: 7)\\n")
        {1: 'SIGABRT'}
        >>> crashed_ranks("Root Cause (first observed failure):\\n  rank : 0 (local_rank: 0)\\n  exitcode : 2\\n")
        {}
    """
    root = torchrun_output.rpartition("Root Cause")[2]
    out = {}
    for rank, code in re.findall(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", root):
        if int(code) < 0:
            try:
                out[int(rank)] = signal.Signals(-int(code)).name
            except ValueError:
                out[int(rank)] = f"signal {-int(code)}"
    return out


def launch(nproc: int, script_args, out: str | os.PathLike, *, threads: int = 1, timeout: float = 600,
           env: dict | None = None, verbose: bool = True, retries: int = 1,
           module: str = "gpufeed.course.lesson12.distributed") -> tuple[list, dict]:
    """Runs ``module`` (:mod:`gpufeed.course.lesson12.distributed`) with ``nproc`` processes, ``--out out``; returns
    ``(measurements, document)`` of its JSON (:func:`gpufeed.measure.harness.load`).

    Each process writes its output to its own file (:func:`rank_logs`); a failure shows the end of
    every failed process's stderr, where the error is, rather than torchrun's report. Python's
    ``faulthandler`` is on in the processes, so a crash in native code (gloo, NCCL) shows where
    each thread was.

    Args:
        nproc: processes (ranks) on this machine: one per GPU, or a few on the CPU.
        script_args: the script's other arguments, e.g. ``["--data", DIR, "--train"]``.
        out: where rank 0 writes its JSON.
        threads: ``OMP_NUM_THREADS`` for every process (torch's threads each): keep
            ``nproc * threads`` at most the number of cores, or the processes fight over them.
        timeout: seconds before the whole run is stopped.
        env: more environment variables for the processes.
        verbose: print the command and rank 0's summary.
        retries: runs again, at most this many times, when the port was taken or a process was
            killed by a signal (a crash in native code such as gloo's TCP transport, which aborts
            the process on a lost connection, or a kill from outside); each retry is printed with
            the crashed process's last lines. A Python error (exit 1) or bad input (exit 2) is
            not retried: it would fail the same way.
        module: the script to run; it takes ``--out PATH`` and writes its results there with
            :func:`gpufeed.measure.harness.save` on rank 0.

    Raises:
        RuntimeError: the run failed; the message holds the end of each failed process's stderr.
    """
    import tempfile

    from gpufeed.measure.harness import load

    out = Path(out)
    child_env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONFAULTHANDLER": "1", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="gpufeed-torchrun-") as logs:
        for attempt in range(retries + 1):
            log_dir = Path(logs) / f"run{attempt}"
            cmd = torchrun_command(nproc, [*script_args, "--out", out], module=module, log_dir=log_dir)
            if verbose and attempt == 0:
                print("$", shown(cmd))
            r = subprocess.run(cmd, capture_output=True, text=True, env=child_env, timeout=timeout)
            if r.returncode == 0:
                break
            report = r.stdout + r.stderr
            errors = {rank: text for rank, text in rank_logs(log_dir).items() if text.strip()}
            crashed = crashed_ranks(report)
            why = _failure(nproc, r.returncode, report, errors, crashed)
            if attempt == retries or not (crashed or "address already in use" in report.lower()):
                raise RuntimeError(why)
            print(f"{why}\n(launch: running it again, attempt {attempt + 2} of {retries + 1})", file=sys.stderr)
        if verbose:
            print(rank_logs(log_dir, "stdout").get(0, "").strip())
    return load(out)


def _failure(nproc: int, code: int, report: str, errors: dict[int, str], crashed: dict[int, str]) -> str:
    """The message of a failed run: who failed how, then the end of each failed process's stderr
    (torchrun's own report when no process wrote any)."""
    head = f"torchrun with {nproc} process(es) failed (exit {code})"
    if crashed:
        head += ": " + ", ".join(f"rank {r} killed by {s}" for r, s in sorted(crashed.items()))
    parts = [head + ":"]
    for rank, text in errors.items():
        lines = text.strip().splitlines()
        parts.append(f"--- rank {rank}'s stderr (last {min(len(lines), TAIL_LINES)} of {len(lines)} lines):")
        parts.extend(lines[-TAIL_LINES:])
    if not errors:
        parts.extend(report.strip().splitlines()[-TAIL_LINES:])
    return "\n".join(parts)


def run_here(script_args, out: str | os.PathLike, *, threads: int = 1) -> tuple[list, dict]:
    """Runs :mod:`gpufeed.course.lesson12.distributed` in this process, alone (rank 0 of 1): no launcher, and no
    start-up cost, since torch is already imported. Returns ``(measurements, document)``.

    Raises:
        RuntimeError: the script failed (its one-line error went to stderr).
    """
    from gpufeed.course.lesson12.distributed import main
    from gpufeed.measure.harness import load

    code = main([*map(str, script_args), "--out", str(out), "--threads", str(threads)])
    if code != 0:
        raise RuntimeError(f"gpufeed.course.lesson12.distributed failed (exit {code}); its error is printed above")
    return load(out)
