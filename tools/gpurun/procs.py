"""Child processes limited in time: each in a process group of its own, output to a log, the whole
tree killed at its limit (a notebook's kernel and its DataLoader workers included)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

from gpurun import ROOT


def kill_tree(pid: int) -> None:
    """Kills a process, every descendant, and what is left in its process group: a child started
    with ``start_new_session`` leads a group of its own, which keeps a worker that outlived its
    parent (reparented, so no longer its descendant); a kernel in a session of its own is a
    descendant while its parent lives."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]  # all found before any dies
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    # Until each is dead, 2 s at most. A killed grandchild stays a zombie until whoever adopted it
    # reaps it (in a container, maybe never), and psutil.wait_procs counts a zombie as running, so it
    # would wait out its timeout on every cut: a zombie is dead here, the time is the slot's.
    deadline = time.monotonic() + 2
    while any(map(_running, procs)) and time.monotonic() < deadline:
        time.sleep(0.01)


def _running(p) -> bool:
    """Whether a ``psutil.Process`` still runs (a zombie does not)."""
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Child:
    """One child process with its own process group, output to a log file, stopped at its limit
    (``cut`` is then True)."""

    def __init__(self, command: list[str], log: Path, env: dict, limit: float, cwd: Path = ROOT):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log, self.limit, self.command = log, limit, command
        self.start = time.monotonic()
        with open(log, "ab") as out:
            out.write(f"$ {shlex.join(command)}  # limit {limit:.0f} s\n".encode())
            out.flush()
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.cut = False
        self.seconds: float | None = None
        self.ended: float | None = None  # when it exited, seen by a thread (a background step is polled late)
        self.exited = threading.Event()  # set by that thread: wait() returns at once, not at its next look
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()
        self.exited.set()

    def poll(self) -> int | None:
        """The exit status once done (the child is killed first if past its limit), else None."""
        rc = self.proc.poll()
        if rc is None and time.monotonic() - self.start >= self.limit:
            kill_tree(self.proc.pid)
            rc, self.cut = self.proc.wait(), True
            with open(self.log, "a") as out:
                out.write(f"\n[gpurun] stopped at its limit of {self.limit:.0f} s\n")
        if rc is not None and self.seconds is None:
            self.seconds = round((self.ended or time.monotonic()) - self.start, 1)
            kill_tree(self.proc.pid)  # what it left behind (a worker that outlived its parent)
        return rc

    def wait(self, poll_s: float = 0.2) -> int:
        """The exit status, as soon as the child exits; its limit is looked at every ``poll_s`` seconds."""
        while (rc := self.poll()) is None:
            self.exited.wait(poll_s)
        return rc
