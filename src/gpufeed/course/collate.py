"""Moving batches to the device *in the workers*, and letting DataParallel/DDP move them (lesson 07).

Two designs from the talks the course grew from, which lesson 07 tries against the usual one
(workers build batches on the CPU; the main process pins them and copies them to the GPU):

* :class:`DeviceCollate`, the seed talk's ``Collate("cuda")``: each worker collates, pins and
  sends its batch to the GPU itself. It must live in a module (workers under ``spawn`` unpickle it
  by module and name), the DataLoader needs ``multiprocessing_context="spawn"`` (a forked child
  cannot use CUDA once the parent has) and ``persistent_workers=True`` (a CUDA tensor made in a
  worker is shared with the main process through CUDA IPC, and the worker that made it must stay
  alive while it is in use), and every worker opens a CUDA context of its own.
  :func:`worker_cuda_cost` measures what that costs against pinning in the main process.
* ``nn.DataParallel`` and ``DistributedDataParallel(device_ids=[i])`` move the inputs of
  ``forward`` themselves, nests included: :func:`dataparallel_split` shows what DataParallel's
  scatter makes of a nested batch (on the CPU, with its CUDA copy replaced by the same
  ``torch.chunk`` split), :func:`ddp_move` what DDP does (one device: the nest, moved whole).

Example:
    >>> c = DeviceCollate("cpu")
    >>> batch = c([{"x": torch.zeros(2), "id": 1}, {"x": torch.ones(2), "id": 2}])
    >>> batch["x"].shape, batch["id"].tolist()
    (torch.Size([2, 2]), [1, 2])
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from unittest import mock

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

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
    """

    def __init__(self, device="cuda", non_blocking: bool = True):
        self.device, self.non_blocking = str(device), non_blocking

    def __call__(self, samples):
        batch = default_collate(samples)
        device = torch.device(self.device)
        if device.type != "cuda":
            return to_device(batch, device)
        batch = to_device(pin(batch), device, self.non_blocking)
        torch.cuda.current_stream(device).synchronize()  # the main process reads it on another stream
        return batch

    def __repr__(self) -> str:
        return f"DeviceCollate({self.device!r})"


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
    ways = {"main process": {"pin_memory": True}, "in the workers": {"collate_fn": DeviceCollate("cuda")}}
    out = {}
    for name, how in ways.items():
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        loader = DataLoader(dataset, **how, **kw)
        first, times = _epoch_seconds(loader, epochs)
        used = (free_before - torch.cuda.mem_get_info()[0]) / 2**20
        out[name] = {"first_batch_s": first, "epoch_s": times, "gpu_mib_used": used,
                     "gpu_mib_per_worker": used / max(1, num_workers)}
        del loader  # the persistent workers end here, their CUDA contexts with them
        time.sleep(1)  # let the driver release the workers' contexts before the next measurement
    return out


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
    tuples; on a side stream, ordered with ``wait_stream`` and kept alive with ``record_stream``).
    Nothing is split: each rank already has its own batch.

    Example:
        >>> x = {"a": [torch.zeros(1)]}
        >>> ddp_move(x, "cpu")["a"][0] is x["a"][0]  # already there: the same tensor
        True
    """
    from torch.distributed.utils import _to_kwargs

    inputs, _ = _to_kwargs((batch,), {}, torch.device(device), use_side_stream_for_tensor_copies=True)
    return inputs[0][0]
