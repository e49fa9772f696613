"""A new model's first training step in a fresh process, against the steps after it.

The first call of anything pays once for what later calls reuse. Inside a notebook that has run
the same model before, a new model's first step reuses most of it (the operators' kernels chosen
for these shapes, the allocator's memory, the autograd engine's threads), so a first step timed
there shows little. :func:`in_fresh_processes` runs each sample in a new Python process, as a
training script starts: it builds lesson 01's small CNN, times its first step and the steps
after it, and reports both. Each process gives one sample of each arm, so the two arms are
paired by process. Taught in ``notebooks/02_profiling.ipynb``, section 7 (mistake 2).

Run as a script (what :func:`in_fresh_processes` starts), it prints one JSON line::

    python -m gpufeed.course.lesson02.firststep --batch 8 --size 224 --steps 5 --device cpu

Example:
    >>> first, steady = in_fresh_processes(1, batch_size=2, size=32, steps=2, device="cpu")
    >>> len(first.samples), len(steady.samples), first.name, steady.name
    (1, 1, 'first step', 'steady state')
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from gpufeed.measure.harness import Measurement


def one_process(batch_size: int, size: int, steps: int, device: str) -> dict:
    """In this process: a new model's first step and the median of the ``steps`` after it, in
    seconds (``{"first_s": ..., "steady_s": ...}``). Each step ends with ``loss.item()``."""
    import statistics

    import torch

    from gpufeed.course.instrument import tiny_model, train_step

    dev = torch.device(device)
    x = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=dev)
    y = torch.zeros(batch_size, dtype=torch.long, device=dev)
    step = train_step(tiny_model(10).to(dev))
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        step(x, y)  # loss.item(): the device's work is in the time
        times.append(time.perf_counter() - start)
    return {"first_s": times[0], "steady_s": statistics.median(times[1:])}


def in_fresh_processes(n: int, *, batch_size: int, size: int, steps: int, device: str = "cpu",
                       timeout: float = 300.0) -> tuple[Measurement, Measurement]:
    """Runs :func:`one_process` in ``n`` new Python processes, one after the other.

    Args:
        n: processes, each one sample of each arm.
        batch_size, size: the batch, ``uint8 [batch_size, 3, size, size]``.
        steps: steps after the first, whose median is the process's steady state.
        device: ``"cpu"`` or ``"cuda"``.
        timeout: seconds a process may take.

    Returns:
        ``(first, steady)``: seconds per step, one sample per process (``items`` = the batch).

    Raises:
        RuntimeError: a process failed; the message ends with its last line of errors.
    """
    if n < 1 or steps < 1:
        raise ValueError("in_fresh_processes needs n >= 1 and steps >= 1")
    argv = [sys.executable, "-m", __name__, "--batch", str(batch_size), "--size", str(size),
            "--steps", str(steps), "--device", device]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}  # the child's notes would not reach a reader anyway
    first, steady = [], []
    for _ in range(n):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
            raise RuntimeError(f"the fresh process failed (exit {done.returncode}): {last}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        first.append(out["first_s"])
        steady.append(out["steady_s"])
    params = {"batch_size": batch_size, "size": size, "device": device}
    return (Measurement("first step", first, items=batch_size, params=params),
            Measurement("steady state", steady, items=batch_size, params=params))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a new model's first training step and the steps after it")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    print(json.dumps(one_process(args.batch, args.size, args.steps, args.device)))


if __name__ == "__main__":
    main()
