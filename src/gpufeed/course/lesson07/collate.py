"""Moving batches to the device *in the workers*, and letting DataParallel/DDP move them (lesson 07).

Two designs from the talks the course grew from, which lesson 07 tries against the usual one
(workers build batches on the CPU; the main process pins them and copies them to the GPU):

* :class:`DeviceCollate`, the seed talk's ``Collate("cuda")``: each worker collates, pins and
  sends its batch to the GPU itself. It must live in a module (workers under ``spawn`` unpickle it
  by module and name), the DataLoader needs ``multiprocessing_context="spawn"`` (a forked child
  cannot use CUDA once the parent has) and ``persistent_workers=True`` (a CUDA tensor made in a
  worker is shared with the main process through CUDA IPC, and the worker that made it must stay
  alive while it is in use), and every worker opens a CUDA context of its own.
  :func:`worker_cuda_cost` measures what that costs against pinning in the main process;
  :func:`without_persistent_workers` what goes wrong when the workers end with every epoch.
* ``nn.DataParallel`` and ``DistributedDataParallel(device_ids=[i])`` move the inputs of
  ``forward`` themselves, nests included: :func:`dataparallel_split` shows what DataParallel's
  scatter makes of a nested batch (on the CPU, with its CUDA copy replaced by the same
  ``torch.chunk`` split), :func:`ddp_move` what DDP does (one device: the nest, moved whole; a
  CPU tensor with a plain, blocking ``.to()``).

Example:
    >>> c = DeviceCollate("cpu")
    >>> batch = c([{"x": torch.zeros(2), "id": 1}, {"x": torch.ones(2), "id": 2}])
    >>> batch["x"].shape, batch["id"].tolist()
    (torch.Size([2, 2]), [1, 2])
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import deque
from contextlib import contextmanager
from unittest import mock

import psutil
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

from gpufeed.data.memmap import ImageData
from gpufeed.data.movers import pin, to_device


class DeviceCollate:
    """``default_collate``, then (on CUDA) pin the batch and copy it to ``device``, in the worker.

    The seed talk's ``Collate("cuda")``. Use with ``multiprocessing_context="spawn"``,
    ``persistent_workers=True`` and ``pin_memory=False`` (the batch is already on the GPU; the
    DataLoader's pin thread cannot pin a CUDA tensor). On a CPU ``device`` it only collates, so
    it also works (and is tested) where there is no GPU.

    Args:
        device: where batches go, e.g. ``"cuda"`` or ``"cuda:1"``.
        non_blocking: asynchronous copies from the pinned batch (the worker synchronises its
            stream before handing the batch over, so the main process never sees a half-copied one).
        tensorclass: make an :class:`gpufeed.data.memmap.ImageData` batch (``images``,
            ``targets``) from ``(image, label)`` samples, as the talk's collate did: one object
            that pins and moves all its fields in one call.

    Example:
        >>> b = DeviceCollate("cpu", tensorclass=True)([(torch.zeros(3, 2, 2), 1), (torch.ones(3, 2, 2), 0)])
        >>> type(b).__name__, tuple(b.images.shape), b.targets.tolist()
        ('ImageData', (2, 3, 2, 2), [1, 0])
    """

    def __init__(self, device="cuda", non_blocking: bool = True, tensorclass: bool = False):
        self.device, self.non_blocking, self.tensorclass = str(device), non_blocking, tensorclass

    def __call__(self, samples):
        if self.tensorclass:
            images, targets = default_collate(samples)
            batch = ImageData(images=images, targets=targets, batch_size=[len(samples)])
        else:
            batch = default_collate(samples)
        device = torch.device(self.device)
        if device.type != "cuda":
            return to_device(batch, device)
        batch = to_device(pin(batch), device, self.non_blocking)
        torch.cuda.current_stream(device).synchronize()  # the main process reads it on another stream
        return batch

    def __repr__(self) -> str:
        return f"DeviceCollate({self.device!r}{', tensorclass=True' if self.tensorclass else ''})"


def _epoch_seconds(loader, epochs: int) -> tuple[float, list[float]]:
    """Seconds to the first batch of a new iterator, and per epoch after it (CUDA synchronised)."""
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - t0
    for _ in it:
        pass
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for batch in loader:
            to_device(batch, "cuda", non_blocking=True)  # no-op for DeviceCollate's batches
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return first, times


def wait_for_children(before: set[int], timeout_s: float = 2.0) -> bool:
    """Waits until this process has no child processes other than ``before`` (pids), polling, for
    at most ``timeout_s``; returns whether they were gone in time. A worker's CUDA context is freed
    by the driver when the worker exits, and what it prints at exit is written by then: polling
    ends as soon as that is so, instead of sleeping a fixed second (which a short GPU slot pays
    for every time).

    Example:
        >>> import subprocess, sys
        >>> before = {c.pid for c in psutil.Process().children()}
        >>> child = subprocess.Popen([sys.executable, "-c", "pass"])
        >>> wait_for_children(before), child.wait()
        (True, 0)
    """
    deadline = time.perf_counter() + timeout_s
    while True:
        alive = [c for c in psutil.Process().children() if c.pid not in before and _running(c)]
        if not alive:
            return True
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.01)


def _running(child: psutil.Process) -> bool:
    """True while ``child`` runs (a zombie has exited: its parent has not collected it yet)."""
    try:
        return child.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def worker_cuda_cost(dataset, *, batch_size: int, num_workers: int, epochs: int = 3) -> dict:
    """Moving batches to the GPU in the workers (:class:`DeviceCollate`) against in the main process.

    Both DataLoaders use ``spawn`` workers and ``persistent_workers=True``, so they differ only in
    where the pinning and the copy happen. For each: the seconds to the first batch (the workers'
    start-up, a CUDA context each for :class:`DeviceCollate`), the seconds per epoch, and the GPU
    memory in use on the device while the workers live (``torch.cuda.mem_get_info``: it sees every
    process's contexts, not only this one's allocations).

    Returns:
        ``{"main process": {...}, "in the workers": {...}}``, each with ``first_batch_s``,
        ``epoch_s`` (a list), ``gpu_mib_used`` (MiB more than before the loader started) and
        ``gpu_mib_per_worker``.

    Raises:
        RuntimeError: torch sees no GPU.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("worker_cuda_cost needs a CUDA GPU; torch sees none here")
    torch.cuda.init()
    kw = {"batch_size": batch_size, "num_workers": num_workers, "multiprocessing_context": "spawn",
          "persistent_workers": True}
    ways = {"main process": {"pin_memory": True}, "in the workers": {"collate_fn": DeviceCollate("cuda", tensorclass=True)}}
    out = {}
    for name, how in ways.items():
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        children = {c.pid for c in psutil.Process().children()}
        loader = DataLoader(dataset, **how, **kw)
        first, times = _epoch_seconds(loader, epochs)
        used = (free_before - torch.cuda.mem_get_info()[0]) / 2**20
        out[name] = {"first_batch_s": first, "epoch_s": times, "gpu_mib_used": used,
                     "gpu_mib_per_worker": used / max(1, num_workers)}
        del loader  # the persistent workers end here, their CUDA contexts with them
        wait_for_children(children)  # the driver frees a context when its process has exited
    return out


@contextmanager
def captured_stderr():
    """Redirects file descriptor 2 to a temporary file; yields a function that reads it so far.

    Child processes started inside inherit the redirection, so this catches what DataLoader
    workers print from C++ at exit (their ``LOG(WARNING)`` lines), which a notebook never shows:
    a kernel's children write to the terminal that started Jupyter.

    Example:
        >>> import subprocess, sys
        >>> with captured_stderr() as read:
        ...     _ = subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child')"])
        >>> read()
        'from a child'
    """
    kept: list[str] = []  # the text, once the block has ended and the file is gone

    def read() -> str:
        if kept:
            return kept[0]
        tmp.flush()
        tmp.seek(0)
        return tmp.read().decode(errors="replace")

    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield read
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            kept.append(read())


#: What a worker prints at exit when the main process still holds CUDA tensors it made
#: (``torch/csrc/CudaIPCTypes.cpp``; see "Sharing CUDA tensors" in torch.multiprocessing's docs).
PRODUCER_WARNING = "Producer process has been terminated before all shared CUDA tensors released"


def without_persistent_workers(dataset, *, batch_size: int, num_workers: int, epochs: int = 2) -> dict:
    """What goes wrong when :class:`DeviceCollate` workers end with every epoch.

    Runs ``epochs`` epochs of a spawn DataLoader with ``persistent_workers=False``, keeping the
    last batch of each epoch (as a loop that logs or evaluates it would) while the epoch's workers
    exit, and captures what the workers print. A CUDA tensor made in a worker lives in the
    worker's memory, shared through CUDA IPC: PyTorch's docs ask the producer to stay alive while
    the consumer uses it. Each new epoch also starts ``num_workers`` processes with a CUDA context
    each.

    Returns:
        ``first_batch_s`` (a list, one per epoch: the start-up paid every epoch),
        ``producer_warnings`` (how many times the workers printed :data:`PRODUCER_WARNING`),
        ``held_batches_intact`` (whether the kept batches still hold the values they had when they
        arrived) and ``stderr_tail`` (the last lines the workers printed).

    Raises:
        RuntimeError: torch sees no GPU.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("without_persistent_workers needs a CUDA GPU; torch sees none here")
    torch.cuda.init()
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, multiprocessing_context="spawn",
                        persistent_workers=False, collate_fn=DeviceCollate("cuda", tensorclass=True))
    firsts, kept = [], []  # kept: (the last batch of an epoch, its sum when it arrived)
    children = {c.pid for c in psutil.Process().children()}
    with captured_stderr() as read:
        for _ in range(epochs):
            t0 = time.perf_counter()
            it = iter(loader)
            batch = next(it)
            firsts.append(time.perf_counter() - t0)
            rest = deque(it, maxlen=1)  # runs the epoch to its end, keeping only its last batch
            batch = rest[0] if rest else batch
            kept.append((batch, float(batch.images.double().sum())))  # the workers exit when `it` is exhausted
            del it
            wait_for_children(children)  # what the exiting workers print is written by their exit
        intact = all(float(b.images.double().sum()) == s for b, s in kept)
        torch.cuda.synchronize()
    del kept, batch, loader
    text = read()
    return {"first_batch_s": firsts, "producer_warnings": text.count(PRODUCER_WARNING),
            "held_batches_intact": intact, "stderr_tail": "\n".join(text.strip().splitlines()[-5:])}


class _ChunkScatter:
    """Stands in for ``torch.nn.parallel._functions.Scatter`` on the CPU: the same split
    (``comm.scatter`` cuts with ``tensor.chunk`` when no sizes are given), without the copy."""

    @staticmethod
    def apply(target_gpus, chunk_sizes, dim, tensor):
        return tensor.chunk(len(target_gpus), dim)


@contextmanager
def _cpu_scatter():
    with mock.patch("torch.nn.parallel.scatter_gather.Scatter", _ChunkScatter):
        yield


def dataparallel_split(batch, replicas: int = 2) -> list:
    """What ``nn.DataParallel`` hands each of ``replicas`` GPUs, for a nested ``batch``.

    Runs torch's own ``torch.nn.parallel.scatter_gather.scatter`` (which DataParallel's
    ``forward`` calls), with only its per-tensor CUDA copy replaced by the same ``torch.chunk``
    split, so that it runs on the CPU. Every tensor, wherever it sits in the nest, is cut along
    dim 0; lists, tuples and dicts are rebuilt around the pieces; anything else is repeated.

    Example:
        >>> parts = dataparallel_split({"x": torch.arange(4), "boxes": [torch.zeros(3, 4)]}, 2)
        >>> [p["x"].tolist() for p in parts], [tuple(p["boxes"][0].shape) for p in parts]
        ([[0, 1], [2, 3]], [(2, 4), (1, 4)])
    """
    from torch.nn.parallel.scatter_gather import scatter

    with _cpu_scatter():
        return scatter(batch, list(range(replicas)), dim=0)


def ddp_move(batch, device) -> object:
    """What ``DistributedDataParallel(module, device_ids=[i])`` does to a ``forward`` input: its
    ``_to_kwargs`` moves the whole nest to ``cuda:i`` (tensors inside dicts, lists, tuples and named
    tuples). Nothing is split: each rank already has its own batch. Only a tensor already on a GPU
    is copied on a side stream (ordered with ``wait_stream``, kept alive with ``record_stream``); a
    CPU tensor, what a loader hands over, gets a plain ``.to(device)`` (``_recursive_to`` in
    ``torch/distributed/utils.py``), which holds the host until the copy is done, pinned or not. To
    overlap that copy, move the batch yourself first: pinned, ``.to(device, non_blocking=True)``.

    ``device`` without an index (``"cuda"``) means the current GPU, as DDP's ``device_ids=[i]``
    always names one: torch compares a tensor's ``cuda:0`` with the target device and, given a
    bare ``"cuda"``, would take the side-stream path for a tensor already there and fail
    (``_get_stream`` indexes its streams with the device's index, None).

    Example:
        >>> x = {"a": [torch.zeros(1)]}
        >>> ddp_move(x, "cpu")["a"][0] is x["a"][0]  # already there: the same tensor
        True
    """
    from torch.distributed.utils import _to_kwargs

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    inputs, _ = _to_kwargs((batch,), {}, device, use_side_stream_for_tensor_copies=True)
    return inputs[0][0]
