"""Simulated CUDA tensors: every operator on one becomes work queued on the current stream.

A :class:`SimTensor` says ``device="cuda:0"`` and holds a view of a simulated
:class:`~gpufeed.simcuda.memory.Block`. Its ``__torch_dispatch__`` (the hook PyTorch's own
fake and sanitizer tensors use: ``torch/_subclasses/fake_tensor.py``,
``torch/cuda/_sanitizer.py``) sees every ATen operator on it:

* an operator gets its output shapes from PyTorch's meta kernels at once, its outputs allocated
  on the current stream, and its work queued there; the values are computed only when the
  scheduler runs that step;
* a view (``x[:4]``, ``permute``, ``view``) is no work: a view of the same block;
* an operator whose result the host needs (``.item()``, ``bool()``, ``.tolist()``, ``nonzero``,
  ``masked_select``, ``torch.equal``, boolean indexing) makes the host wait for the current
  stream: a sync, as ``torch.cuda.set_sync_debug_mode`` reports it;
* copies, pinning and ``record_stream`` are :mod:`~gpufeed.simcuda.copies`'.

To PyTorch's C++ side a simulated tensor is a meta tensor: the C++ bindings put a device guard
around many methods, and a CUDA guard calls the CUDA runtime, which fails without a driver. So
``t.device``, ``t.is_cuda``, ``repr``, ``data_ptr``, ``tolist`` and ``numpy`` are answered here.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils import _pytree as pytree

from gpufeed.simcuda.memory import Block, contiguous_strides, handout, span_bytes

aten = torch.ops.aten
DEVICE = torch.device("cuda", 0)
ACTIVE: list = [None]  # the simulator in effect (one at a time)

#: operators whose result the host needs, so the host waits for the current stream (a sync)
HOST_NEEDS = {aten._local_scalar_dense, aten.equal, aten.is_nonzero, aten.nonzero, aten.masked_select,
              aten.unique_consecutive, aten._unique, aten._unique2, aten.unique_dim, aten.repeat_interleave}
#: operators that only allocate: no work but the poisoning of reused memory
EMPTY = {aten.empty, aten.empty_strided, aten.empty_like, aten.new_empty, aten.new_empty_strided}
#: operators that accept CPU index tensors beside a CUDA one
CPU_INDICES = {aten.index, aten.index_put_, aten.index_put}
#: operators with a handler of their own (copies, pinning, ``record_stream``, ``set_``): filled by
#: :mod:`~gpufeed.simcuda.copies`, which builds on this module, so that it need not import it back
SPECIAL: dict = {}


class Ref:
    """Where a simulated tensor lives: a block and the view of it. Work holds these, never the
    program's tensors, so that queued work does not keep memory alive that the program freed."""

    __slots__ = ("block", "dtype", "size", "stride", "offset")

    def __init__(self, block: Block, dtype, size, stride, offset: int = 0):
        self.block, self.dtype, self.size, self.stride, self.offset = block, dtype, tuple(size), tuple(stride), offset

    def get(self) -> torch.Tensor:
        return self.block.view(self.dtype, self.size, self.stride, self.offset)

    @property
    def nbytes(self) -> int:
        return span_bytes(self.size, self.stride, torch.empty((), dtype=self.dtype).element_size())


class SimTensor(torch.Tensor):
    """A tensor that says ``device="cuda:0"`` and lives in simulated device memory.

    Underneath it is a meta tensor (``torch.Tensor._make_subclass``, as PyTorch's fake tensors
    are) whose storage offset and strides place it in its block; ``_inner`` is a CPU tensor over
    the allocation's own storage, kept only so that the free is seen when the last view goes.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, shape_of: torch.Tensor, block: Block, inner: torch.Tensor):
        t = torch.Tensor._make_subclass(cls, shape_of)
        t._block, t._inner = block, inner
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        sim = ACTIVE[0]
        if sim is None:
            raise RuntimeError(f"{func}: a simulated CUDA tensor was used outside simulated_cuda(); keep "
                               "simulated tensors inside the `with` block that made them")
        for t in pytree.arg_tree_leaves(*args, **(kwargs or {})):
            if isinstance(t, SimTensor) and t._block.sim is not sim:
                sim.adopt(t._block)  # made under an earlier simulator (e.g. kept in a cache)
        handler = SPECIAL.get(func.overloadpacket, dispatch)
        return handler(sim, func, args, kwargs or {})

    @property
    def device(self) -> torch.device:
        return DEVICE

    @property
    def is_cuda(self) -> bool:
        return True

    @property
    def is_meta(self) -> bool:
        return False

    def get_device(self) -> int:
        return 0

    def ref(self) -> Ref:
        return Ref(self._block, self.dtype, self.shape, self.stride(), self.storage_offset())

    def data_ptr(self) -> int:  # the simulated address: equal for reused memory, as on a GPU
        return self._block.ptr + self.storage_offset() * self.element_size()

    def tolist(self):
        return self.cpu().tolist()  # a sync, as on a GPU

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
                        "host memory first. (simulated)")

    def __repr__(self, **kwargs) -> str:
        text = repr(self.cpu())  # printing waits for the GPU, as it does on a real one
        at = text.find(", dtype=") if ", dtype=" in text else len(text) - 1
        return f"{text[:at]}, device='cuda:0'{text[at:]}"


def wrap(sim, ref: Ref) -> SimTensor:
    """The program's tensor over ``ref``, a new allocation: its free is watched (``inner``), and its
    views share one meta storage, which ``set_`` and ``untyped_storage()`` can name."""
    inner = handout(ref.block, ref.dtype, ref.size, ref.stride, sim.freed)
    itemsize = torch.empty((), dtype=ref.dtype).element_size()
    shape_of = torch.empty(ref.block.nbytes // itemsize, dtype=ref.dtype, device="meta")
    sim.storages[shape_of.untyped_storage()._cdata] = (ref.block, weakref.ref(inner))
    return SimTensor(shape_of.as_strided(ref.size, ref.stride, ref.offset), ref.block, inner)


def is_cuda(device) -> bool:
    return device is not None and torch.device(device).type in ("cuda", "meta")  # meta: a SimTensor's C++ side


def meta(x):
    """A plain meta stand-in for ``x``, for PyTorch's meta kernels to work out shapes on."""
    if isinstance(x, SimTensor):
        with torch._C._DisableTorchDispatch():  # a plain meta view of the same meta storage
            return aten.alias.default(x)
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device("meta")
    return x


def cpu_kwargs(kwargs: dict) -> dict:
    """The keyword arguments for running an operator on the CPU memory that stands for the device."""
    out = dict(kwargs)
    if is_cuda(out.get("device")):
        out["device"] = torch.device("cpu")
    if out.get("pin_memory"):
        out["pin_memory"] = False
    return out


def written(func) -> set:
    """Names and positions of the arguments ``func`` writes (``Tensor(a!)`` in its schema)."""
    out = set()
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            out |= {i, a.name}
    return out


def dispatch(sim, func, args: tuple, kwargs: dict):
    """One operator on simulated tensors (see the module docstring)."""
    packet = func.overloadpacket
    for x in pytree.arg_tree_leaves(*args, **kwargs):
        if isinstance(x, torch.Tensor) and not isinstance(x, SimTensor) and x.dim() > 0 and packet not in CPU_INDICES:
            raise RuntimeError(f"{func}: expected all tensors to be on the same device, but found at least two "
                               f"devices, cuda:0 and {x.device}! (simulated)")
    if func.is_view:
        return _view(func, args, kwargs)
    if packet in HOST_NEEDS or (packet is aten.index and _bool_index(args)):
        return host_needs(sim, func, args, kwargs)
    try:
        shapes = func(*pytree.tree_map(meta, args), **pytree.tree_map(meta, kwargs))
    except (NotImplementedError, RuntimeError) as e:  # no meta kernel: run it now, after its stream's work
        sim.stats["eager"] += 1
        sim.drain(sim.current_stream(), f"{packet.__name__} has no meta kernel ({type(e).__name__})")
        return host_needs(sim, func, args, kwargs, reported=False)
    return queue(sim, func, args, kwargs, shapes)


def _view(func, args, kwargs):
    base = next(x for x in pytree.arg_tree_leaves(*args, **kwargs) if isinstance(x, SimTensor))
    out = func(*pytree.tree_map(meta, args), **pytree.tree_map(meta, kwargs))
    return pytree.tree_map_only(torch.Tensor, lambda m: SimTensor(m, base._block, base._inner), out)


def _bool_index(args) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ()))


def refs(args, kwargs):
    """The arguments with every simulated tensor replaced by its :class:`Ref`, and the blocks read."""
    reads = []

    def swap(t):
        reads.append(t._block)
        return t.ref()

    return pytree.tree_map_only(SimTensor, swap, args), pytree.tree_map_only(SimTensor, swap, kwargs), reads


def materialise(args, kwargs):
    get = lambda r: r.get()  # noqa: E731
    return pytree.tree_map_only(Ref, get, args), cpu_kwargs(pytree.tree_map_only(Ref, get, kwargs))


def queue(sim, func, args, kwargs, shapes):
    """Queues ``func`` on the current stream: outputs allocated now (``shapes``: the meta kernel's
    result), values computed when the step runs. In place and ``out=``: the written arguments."""
    stream = sim.current_stream()
    name = func.overloadpacket.__name__
    changed = written(func)
    if changed:
        targets = [a for i, a in enumerate(args) if i in changed] + [v for k, v in kwargs.items() if k in changed]
        if shapes is not None:  # out= may resize its output (e.g. arange's): so does the simulated one
            for t, m in zip(targets, [m for m in pytree.tree_leaves(shapes) if isinstance(m, torch.Tensor)]):
                if m.shape != t.shape or m.stride() != t.stride():
                    _resize(sim, t, m, stream, name)
        rargs, rkwargs, reads = refs(args, kwargs)

        def run():
            a, k = materialise(rargs, rkwargs)
            func(*a, **k)

        sim.issue(stream, "kernel", name, run, reads=reads, writes=[t._block for t in targets],
                  nbytes=sum(b.nbytes for b in reads))
        return targets[0] if len(func._schema.returns) == 1 else tuple(targets)
    rargs, rkwargs, reads = refs(args, kwargs)
    outs, reused = [], []
    for m in pytree.tree_leaves(shapes):
        if isinstance(m, torch.Tensor):
            ref, fresh = allocate(sim, m, stream, name)
            outs.append(ref)
            if not fresh:
                reused.append(ref)
    if func.overloadpacket in EMPTY:
        if reused:
            sim.issue(stream, "alloc", name, lambda: [r.block.poison(r.dtype) for r in reused],
                      writes=[r.block for r in reused])
    else:
        def run():
            for r in reused:
                r.block.poison(r.dtype)
            a, k = materialise(rargs, rkwargs)
            values = [v for v in pytree.tree_leaves(func(*a, **k)) if isinstance(v, torch.Tensor)]
            for r, v in zip(outs, values):
                r.get().copy_(v)

        sim.issue(stream, "kernel", name, run, reads=reads, writes=[r.block for r in outs],
                  nbytes=sum(r.nbytes for r in outs) + sum(b.nbytes for b in reads))
    made = iter([wrap(sim, r) for r in outs])
    return pytree.tree_map_only(torch.Tensor, lambda m: next(made), shapes)


def _resize(sim, t: SimTensor, like: torch.Tensor, stream, what: str) -> None:
    """``t`` reshaped as ``like``, in new memory if its block is too small (as ``resize_`` does)."""
    offset = like.storage_offset()
    end = offset * like.element_size() + span_bytes(like.shape, like.stride(), like.element_size())
    if end > t._block.nbytes:
        offset = 0
        ref, fresh = allocate(sim, like, stream, what)
        if not fresh:
            sim.issue(stream, "alloc", what, lambda: ref.block.poison(ref.dtype), writes=[ref.block])
        fresh_tensor = wrap(sim, ref)
        with torch._C._DisableTorchDispatch():
            aten.set_.source_Tensor(t, aten.alias.default(fresh_tensor))
        t._block, t._inner = ref.block, fresh_tensor._inner
    with torch._C._DisableTorchDispatch():
        aten.as_strided_(t, like.shape, like.stride(), offset)


def allocate(sim, like: torch.Tensor, stream, what: str) -> tuple[Ref, bool]:
    """Device memory shaped like ``like`` on ``stream``; ``True`` if it is new (already poisoned),
    ``False`` if it was reused (its first step on ``stream`` must poison it)."""
    size, stride = tuple(like.shape), like.stride()
    block, reused = sim.allocate(span_bytes(size, stride, like.element_size()), stream, like.dtype,
                                 f"{like.dtype} {list(size)} from {what}")
    return Ref(block, like.dtype, size, stride), not reused


def host_needs(sim, func, args, kwargs, reported: bool = True):
    """An operator whose result the host must see: it waits for the current stream, then computes."""
    stream = sim.current_stream()
    name = func.overloadpacket.__name__
    if reported:
        sim.report_sync(f"{name} (the host needs its result)")
    rargs, rkwargs, reads = refs(args, kwargs)
    sim.issue(stream, "kernel", name, None, reads=reads, nbytes=sum(b.nbytes for b in reads))
    sim.host_waits(name, [(stream, stream.issued)], reported=False)
    a, k = materialise(rargs, rkwargs)
    value = func(*a, **k)
    return pytree.tree_map_only(torch.Tensor, lambda v: _written_by(sim, v, stream, name), value)


def _written_by(sim, value: torch.Tensor, stream, name: str) -> SimTensor:
    """A result the host already computed, as device memory written by a step of ``stream``."""
    value = value.contiguous()
    like = torch.empty_strided(value.shape, contiguous_strides(value.shape), dtype=value.dtype, device="meta")
    ref, _ = allocate(sim, like, stream, name)
    sim.issue(stream, "kernel", name, lambda: ref.get().copy_(value), writes=[ref.block], nbytes=value.nbytes)
    return wrap(sim, ref)
