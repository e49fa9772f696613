"""A new model's first training step on an image size this process has not run, against the steps
after it.

The first call of anything pays once for what later calls reuse. A notebook that has run a model
has paid most of it for that model's shapes, so a new model on the same batch shows little. On a
size the process has not seen, the operators choose their kernels anew and the allocator finds
memory of new sizes: :func:`first_steps` builds a new model for each of several sizes and times
its first step and the steps after it. Each size gives one sample of each arm, so the two arms are
paired by size. (A training script's very first step likely pays more: thread pools, and on a GPU
the CUDA context; not measured here.) Taught in ``notebooks/02_profiling.ipynb``, section 7 (mistake 2).

Example:
    >>> import torch
    >>> first, steady = first_steps([24, 28], batch_size=2, steps=2, device=torch.device("cpu"))
    >>> len(first.samples), len(steady.samples), first.name, steady.params["sizes"]
    (2, 2, 'first step', [24, 28])
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from gpufeed.course.instrument import tiny_model, train_step
from gpufeed.measure.harness import Measurement, cuda_sync


def first_steps(sizes: Sequence[int], *, batch_size: int, steps: int, device: torch.device,
                num_classes: int = 10) -> tuple[Measurement, Measurement]:
    """For each size, a new model's first training step and the median of the ``steps`` after it.

    Args:
        sizes: image sides, each one this process has not trained on (one sample per size).
        batch_size: images per batch, ``uint8 [batch_size, 3, size, size]``.
        steps: steps after the first, whose median is that size's steady state.
        device: where the model runs; each step ends with ``loss.item()``, so the device's work
            is in the time.
        num_classes: the model's classes.

    Returns:
        ``(first, steady)``: seconds per step, one sample per size (``items`` = the batch).
    """
    if not sizes or steps < 1 or len(set(sizes)) != len(sizes):
        raise ValueError("first_steps needs distinct sizes and steps >= 1")
    y = torch.zeros(batch_size, dtype=torch.long, device=device)
    first, steady = [], []
    for size in sizes:
        x = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=device)
        step = train_step(tiny_model(num_classes).to(device))
        times = []
        for _ in range(steps + 1):
            cuda_sync()
            start = time.perf_counter()
            step(x, y)
            times.append(time.perf_counter() - start)
        first.append(times[0])
        steady.append(statistics.median(times[1:]))
    params = {"batch_size": batch_size, "sizes": list(sizes)}
    return (Measurement("first step", first, items=batch_size, params=params),
            Measurement("steady state", steady, items=batch_size, params=params))
