"""Runs the CUDA-path suite on many mutants of the package from one process that imported torch
once (``tests/test_simcuda_mutations.py`` starts it): each request is a pytest run in a forked
child, so a mutant costs its own tests and the import of its copy of ``gpufeed``, not another
interpreter start and torch import (about 8 of each run's 10 to 20 seconds on a 2-core machine).

Protocol, one JSON object per line: the test writes ``{"src": ..., "env": {...}, "args": [...],
"log": ...}`` on stdin; the server forks, the child puts ``src`` first on ``sys.path``, sets
``env``, sends its stdout and stderr to ``log`` and runs ``pytest.main(args)``; the server answers
``{"exit": N}`` (pytest's exit code; minus a signal's number when the child died of it, e.g. -14
after the child's own 600 s alarm).

Nothing here imports ``gpufeed``: each child imports its mutant's copy (``tests/mutant_run.py``
refuses a run that imported another).
"""

import json
import os
import signal
import sys

import matplotlib  # noqa: F401  (what the suite imports, once, before any fork)
import numpy  # noqa: F401
import pytest
import torch  # noqa: F401
import torchvision  # noqa: F401

TIMEOUT_S = 600


def child(request: dict) -> int:
    sys.path[:0] = [request["src"]]
    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    signal.alarm(TIMEOUT_S)  # a run that hangs dies of SIGALRM: the test reads -14
    return int(pytest.main(request["args"]))


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                code = child(request)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
