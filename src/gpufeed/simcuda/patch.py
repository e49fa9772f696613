"""``with simulated_cuda(seed=...) as sim:``: the simulator in place of ``torch.cuda`` for a block.

Inside the block:

* ``torch.cuda``'s availability, device, stream, event, synchronisation, sync-debug and memory
  functions are the simulator's (``torch.cuda.is_available()`` is True; ``_lazy_init`` does nothing);
* the CUDA kernels of ``empty`` and ``empty_strided`` (which every factory and every copy to the
  device reach) make simulated tensors, and the CPU kernels of ``is_pinned`` and ``_pin_memory``
  use the simulated pinned memory: registered with ``torch.library`` for the block and removed
  after it, so any thread sees them;
* ``torch.empty``/``empty_strided``/``zeros``/``ones``/``full`` with ``pin_memory=True`` give
  simulated pinned memory, and ``torch.tensor``/``torch.as_tensor`` with ``device="cuda"``,
  ``Tensor.to`` and ``Tensor.cuda`` fill in the device index ``0`` (PyTorch's C++ asks the CUDA
  runtime for the current device of a bare ``"cuda"``, which fails without a driver);
  ``.to("cuda")`` of a simulated tensor gives the tensor itself, as on a GPU.

On leaving it every queued step runs, and all of this is undone.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from gpufeed.simcuda import copies, tensor
from gpufeed.simcuda.device import Simulator
from gpufeed.simcuda.nominal import NominalSpeeds


def _cuda_functions(sim: Simulator) -> dict:
    """``torch.cuda``'s names and what they become."""
    memory = sim.device_memory

    def set_sync_debug_mode(mode) -> None:
        sim.debug_mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode)

    def reset_peak(device=None) -> None:
        memory.peak = memory.in_use

    return {
        "is_available": lambda: True, "is_initialized": lambda: True, "_lazy_init": lambda: None,
        "init": lambda: None, "device_count": lambda: 1, "current_device": sim.current_device,
        "set_device": sim.set_device, "device": sim.device_context, "Stream": sim.Stream, "Event": sim.Event,
        "stream": sim.stream_context, "current_stream": sim.current_stream,
        "default_stream": lambda device=None: sim.default, "set_stream": sim.set_stream,
        "synchronize": sim.synchronize, "set_sync_debug_mode": set_sync_debug_mode,
        "get_sync_debug_mode": lambda: sim.debug_mode, "_sleep": sim.sleep,
        "get_device_name": lambda device=None: "simulated CUDA (ordering rules, not speed)",
        "get_device_capability": lambda device=None: (9, 0),
        "memory_allocated": lambda device=None: memory.in_use,
        "max_memory_allocated": lambda device=None: memory.peak,
        "memory_reserved": lambda device=None: memory.reserved,
        "reset_peak_memory_stats": reset_peak, "empty_cache": lambda: None,
    }


def _kernels(sim: Simulator) -> torch.library.Library:
    """The CUDA and CPU kernels the block replaces (see the module docstring)."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        lib.impl("empty.memory_format", lambda size, **kw: copies.device_empty(sim, size, **kw), "CUDA")
        lib.impl("empty_strided", lambda size, stride, **kw: copies.device_empty(sim, size, stride, **kw), "CUDA")
        lib.impl("is_pinned", lambda t, device=None: copies.is_pinned(sim, t), "CPU")
        lib.impl("_pin_memory", lambda t, device=None: copies.pin_memory(sim, t), "CPU")
    return lib


def _indexed(x):
    """``"cuda"`` as ``cuda:0`` (see the module docstring)."""
    if (isinstance(x, str) and x == "cuda") or (isinstance(x, torch.device) and x.type == "cuda" and x.index is None):
        return torch.device("cuda", 0)
    return x


def _python_functions(sim: Simulator) -> dict:
    """(owner, name) -> the replacement, for the functions the block wraps."""
    to = torch.Tensor.to

    def to_(self, *args, **kwargs):
        args = tuple(_indexed(a) for a in args)
        kwargs = {k: _indexed(v) for k, v in kwargs.items()}
        if args and isinstance(args[0], tensor.SimTensor):  # to(other): other's device and dtype
            args = (torch.device("cuda", 0), args[0].dtype, *args[1:])
        if isinstance(self, tensor.SimTensor):
            device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
            same = (device is None or device.type == "cuda") and dtype in (None, self.dtype)
            if same and not kwargs.get("copy") and memory_format in (None, torch.preserve_format):
                return self
        return to(self, *args, **kwargs)

    def cuda_(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        if isinstance(self, tensor.SimTensor):
            return self
        return to(self, torch.device("cuda", 0), non_blocking=non_blocking, memory_format=memory_format)

    def on_device(make):
        @functools.wraps(make)
        def made(data, *args, device=None, **kwargs):
            if device is not None and torch.device(device).type == "cuda":
                return make(data, *args, **kwargs).to(torch.device("cuda", 0))  # a blocking copy, as torch does
            return make(data, *args, device=device, **kwargs)
        return made

    def pinnable(make):
        fill = make.__name__ not in ("empty", "empty_strided")  # zeros, ones, full: their values too

        @functools.wraps(make)
        def made(*args, pin_memory=False, **kwargs):
            plain = make(*args, **kwargs)
            if not pin_memory:
                return plain
            out = copies.pinned(sim, plain.dtype, plain.shape, plain.stride())
            return out.copy_(plain) if fill else out
        return made

    def scalars_on_the_host(op):
        # torch.where(c, x, 1.0) wraps 1.0 as a tensor on x's C++ device, which for a simulated
        # tensor is "meta": the value would be lost. As a 0-dim CPU tensor (which CUDA kernels take
        # as a scalar) it reaches the step that runs later.
        @functools.wraps(op)
        def wrapped(*args, **kwargs):
            if any(isinstance(a, tensor.SimTensor) for a in (*args, *kwargs.values())):
                host = lambda a: torch.tensor(a) if isinstance(a, (bool, int, float)) else a  # noqa: E731
                args, kwargs = tuple(host(a) for a in args), {k: host(v) for k, v in kwargs.items()}
            return op(*args, **kwargs)
        return wrapped

    out = {(torch.Tensor, "to"): to_, (torch.Tensor, "cuda"): cuda_,
           (torch, "where"): scalars_on_the_host(torch.where), (torch.Tensor, "where"): scalars_on_the_host(torch.Tensor.where)}
    out.update({(torch, name): on_device(getattr(torch, name)) for name in ("tensor", "as_tensor")})
    out.update({(torch, name): pinnable(getattr(torch, name)) for name in ("empty", "empty_strided", "zeros", "ones",
                                                                            "full")})
    return out


@contextlib.contextmanager
def simulated_cuda(seed: int = 0, *, races: str = "raise", speeds: NominalSpeeds | None = None):
    """A simulated CUDA device for the duration of the block (one at a time).

    Args:
        seed: the schedule: 0 runs every step as late as the program's synchronisation allows;
            other seeds are other legal orders (:mod:`~gpufeed.simcuda.device`).
        races: ``"raise"`` (default): an unsynchronised access raises
            :class:`~gpufeed.simcuda.clocks.CudaRaceError` where it is found;
            ``"record"``: it is only listed in ``sim.races`` and the program runs on with whatever
            values the schedule gives (how lesson 08 shows the wrong batches).
        speeds: the nominal device of the timeline (:class:`~gpufeed.simcuda.nominal.NominalSpeeds`).

    Yields:
        The :class:`~gpufeed.simcuda.device.Simulator`: ``sim.syncs``, ``sim.waits``,
        ``sim.races``, ``sim.ran``, ``sim.busy(ms)``, ``sim.timeline()``.

    Example:
        >>> import torch
        >>> with simulated_cuda() as sim:
        ...     x = torch.arange(4, dtype=torch.float32).pin_memory().to("cuda", non_blocking=True)
        ...     y = (x * 2).sum()
        ...     print(x.device, y.item(), len(sim.syncs))
        cuda:0 12.0 1
    """
    if tensor.ACTIVE[0] is not None:
        raise RuntimeError("simulated_cuda: a simulated device is already in place; leave its block first")
    sim = Simulator(seed, races, speeds)
    swaps = {(torch.cuda, name): value for name, value in _cuda_functions(sim).items()}
    swaps.update(_python_functions(sim))
    saved = {key: getattr(*key, None) for key in swaps}
    sim.outside = {name: saved[torch.cuda, name] for name in ("is_available", "_lazy_init", "device_count")}
    tensor.ACTIVE[0] = sim
    for (owner, name), value in swaps.items():
        setattr(owner, name, value)
    lib = _kernels(sim)
    try:
        yield sim
    finally:
        try:
            sim.close()
        finally:
            lib._destroy()
            for (owner, name), value in saved.items():
                if value is None:
                    delattr(owner, name)
                else:
                    setattr(owner, name, value)
            tensor.ACTIVE[0] = None


def active() -> Simulator | None:
    """The simulator in place of ``torch.cuda`` now (inside a ``simulated_cuda`` block), else None.

    What reads this machine's hardware asks it, because the simulated device is no GPU of this
    machine: ``sim.outside`` holds ``torch.cuda``'s own ``is_available``, ``_lazy_init`` and
    ``device_count`` (:func:`gpufeed.measure.machine.machine_info` reads the real GPU through them).

    Example:
        >>> with simulated_cuda() as sim:
        ...     print(active() is sim, torch.cuda.is_available())
        True True
        >>> active() is None
        True
    """
    return tensor.ACTIVE[0]
