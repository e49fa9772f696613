"""Copies between the host and the simulated device, pinned memory, and ``record_stream``.

As ``aten/src/ATen/native/cuda/Copy.cu`` does them:

* **Host to device** with ``non_blocking=True`` from pinned memory: a copy step on the current
  stream that reads the host buffer *when it runs*; the host allocator records it on the buffer.
  From pageable memory the host waits while the bytes are staged (they are read at once); without
  ``non_blocking`` the host also waits for the copy (``memcpy_and_sync``: a reported sync). A
  dtype change converts on the GPU when ``non_blocking``, on the CPU otherwise.
* **Device to host** without ``non_blocking``: the host waits (a reported sync). With it, into
  pinned memory (``.to("cpu", non_blocking=True)`` makes fresh pinned memory:
  ``TensorConversions.cpp``), the bytes reach the host buffer only once the host has *learnt*
  that the copy is done (an event, a sync, a query that says done): the latest moment CUDA allows.
  Until then the buffer holds poison, so a read before the sync sees it under every schedule.
  Into pageable memory the host waits (CUDA: such a copy is synchronous), unreported.
* **The host writing a pinned buffer** that a pending copy reads: the simulator does not see host
  writes, but it keeps the bytes the copy was issued with and compares them with the buffer when
  the copy runs and again when the host learns that it is done; any difference is the race
  ("write after read" by the host).
* ``is_pinned()``, ``pin_memory()``, ``torch.empty(..., pin_memory=True)``: the pinned allocator's
  (:class:`~gpufeed.simcuda.memory.HostAllocator`). ``record_stream(s)`` notes ``s`` on the
  block, for the device allocator at the free.
"""

from __future__ import annotations

import torch

from gpufeed.simcuda.clocks import Access, Race
from gpufeed.simcuda.memory import contiguous_strides, handout, span_bytes
from gpufeed.simcuda.tensor import (
    SPECIAL,
    Ref,
    SimTensor,
    allocate,
    aten,
    is_cuda,
    meta,
    queue,
    wrap,
)


def pinned(sim, dtype: torch.dtype, size, stride=None) -> torch.Tensor:
    """A plain CPU tensor in simulated pinned memory (poisoned: nothing has written it)."""
    stride = contiguous_strides(size) if stride is None else tuple(stride)
    nbytes = span_bytes(size, stride, torch.empty((), dtype=dtype).element_size())
    return handout(sim.allocate_pinned(nbytes, dtype), dtype, size, stride, sim.freed)


def is_pinned(sim, t: torch.Tensor, device=None) -> bool:
    return sim.host_memory.block_of(t) is not None


def pin_memory(sim, t: torch.Tensor, device=None) -> torch.Tensor:
    out = pinned(sim, t.dtype, t.shape)
    sim.host_copy(t.nbytes)
    out.copy_(t)
    return out


def device_empty(sim, size, stride=None, *, dtype=None, device=None, what="empty", **ignored) -> SimTensor:
    """``torch.empty``/``empty_strided`` with ``device="cuda"`` (the CUDA kernels they reach)."""
    dtype = dtype or torch.get_default_dtype()
    stride = contiguous_strides(size) if stride is None else stride
    like = torch.empty_strided(size, stride, dtype=dtype, device="meta")
    stream = sim.current_stream()
    ref, fresh = allocate(sim, like, stream, what)
    if not fresh:
        sim.issue(stream, "alloc", what, lambda: ref.block.poison(dtype), writes=[ref.block])
    return wrap(sim, ref)


def _record_stream(sim, func, args, kwargs):
    t, stream = args
    t._block.recorded.add(sim.streams[stream.stream_id])


def _set_(sim, func, args, kwargs):
    """``t.set_(storage or tensor, ...)``: ``t`` becomes a view of that allocation (tensordict moves
    a consolidated tensordict so: one copy of a flat buffer, then every leaf ``set_`` into it)."""
    t, source = args[0], (args[1] if len(args) > 1 else kwargs.get("source"))
    if source is None:
        raise NotImplementedError("simulated CUDA: set_() without a source")
    storage = source.untyped_storage() if isinstance(source, torch.Tensor) else source
    found = sim.storages.get(storage._cdata)
    inner = found[1]() if found is not None else None
    if inner is None:
        raise RuntimeError("set_: a simulated CUDA tensor can only be set to simulated CUDA memory (simulated)")
    with torch._C._DisableTorchDispatch():
        func(t, *(meta(a) for a in args[1:]), **kwargs)
    t._block, t._inner = found[0], inner
    return t


def _is_pinned(sim, func, args, kwargs):
    return False  # device memory


def _pin_memory(sim, func, args, kwargs):
    raise RuntimeError("cannot pin 'torch.cuda' memory: only dense CPU tensors can be pinned (simulated)")


def _to_copy(sim, func, args, kwargs):
    (x,) = args
    device = kwargs.get("device")
    shapes = func(meta(x), **{**kwargs, "device": torch.device("meta"), "pin_memory": None})
    if device is None or is_cuda(device):  # another dtype or layout on the device
        return queue(sim, func, args, {**kwargs, "device": torch.device("cpu")}, shapes)
    non_blocking = kwargs.get("non_blocking", False)
    if non_blocking:  # into fresh pinned memory (TensorConversions.cpp: pin_out)
        out = pinned(sim, shapes.dtype, shapes.shape, shapes.stride())
    else:
        out = torch.empty_strided(shapes.shape, shapes.stride(), dtype=shapes.dtype)
    to_host(sim, out, x, non_blocking)
    return out


def _copy_(sim, func, args, kwargs):
    dst, src = args[0], args[1]
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if isinstance(dst, SimTensor) and isinstance(src, SimTensor):
        return queue(sim, func, (dst, src), {}, None)
    if isinstance(dst, SimTensor):
        to_device(sim, dst, src, non_blocking)
    else:
        to_host(sim, dst, src, non_blocking)
    return dst


def to_device(sim, dst: SimTensor, src: torch.Tensor, non_blocking: bool) -> None:
    """``dst.copy_(src)`` from the host (module docstring)."""
    stream = sim.current_stream()
    block = sim.host_memory.block_of(src)
    if not non_blocking:
        sim.report_sync("copy to cuda without non_blocking (cudaMemcpy + stream sync)")
    if non_blocking and block is not None and src.is_contiguous():
        source = Ref(block, src.dtype, src.shape, src.stride(), (src.data_ptr() - block.ptr) // src.element_size())
        what = f"copy to cuda ({src.nbytes / 1e6:.2f} MB from pinned memory, non_blocking)"
    else:  # staged now: the host waits while the bytes are copied out of pageable memory
        source = (src if non_blocking else src.to(dst.dtype)).contiguous().clone()  # blocking: converts on the CPU
        sim.host_copy(src.nbytes)
        what = f"copy to cuda ({src.nbytes / 1e6:.2f} MB, staged)"
    target = dst
    if dst.dtype != source.dtype or not dst.is_contiguous():  # a contiguous buffer of the source's dtype first
        target = device_empty(sim, tuple(dst.shape), dtype=source.dtype, what="copy to cuda")
    _copy_in(sim, stream, target.ref(), source, what)
    if target is not dst:
        queue(sim, aten.copy_.default, (dst, target), {}, None)  # the conversion, on the GPU
    if not non_blocking:
        sim.host_waits("copy to cuda", [(stream, stream.issued)], reported=False)


def _copy_in(sim, stream, target: Ref, source, what: str) -> None:
    if not isinstance(source, Ref):
        sim.issue(stream, "copy", what, lambda: target.get().copy_(source), writes=[target.block],
                  nbytes=target.nbytes)
        return
    check = PinnedRead(source, source.get().clone())  # the bytes the host had when it issued the copy

    def run():
        now = source.get()
        check.changed = not torch.equal(now, check.sent)
        target.get().copy_(now)

    with sim.lock:  # the mark names the copy's step: no other thread's step may come between
        sim.host_memory_used(source.block, stream, stream.issued + 1)
        check.work = sim.issue(stream, "copy", what, run, writes=[target.block], nbytes=target.nbytes)
    sim.pending.append(check)


class PinnedRead:
    """A copy that reads a pinned buffer, checked against host writes when the host learns it is done."""

    def __init__(self, source: Ref, sent: torch.Tensor):
        self.source, self.sent, self.work, self.changed = source, sent, None, False
        self.block = source.block

    def settle(self):
        """The race, if the host changed the buffer between issuing the copy and learning it done."""
        if self.changed or not torch.equal(self.source.get(), self.sent):
            copy = Access(self.work.stream, self.work.step, self.work.what)
            return Race("write after read", copy, Access("host", 0, "a write to that pinned buffer"))
        return None


class PinnedWrite:
    """A ``non_blocking`` copy into pinned memory: its bytes land when the host learns it is done."""

    def __init__(self, target: Ref):
        self.target, self.work, self.bytes = target, None, None
        self.block = target.block

    def settle(self):
        if self.bytes is not None:
            self.target.get().copy_(self.bytes)
        return None


def to_host(sim, dst: torch.Tensor, src: SimTensor, non_blocking: bool) -> None:
    """``dst.copy_(src)`` to the host (module docstring)."""
    stream = sim.current_stream()
    block = sim.host_memory.block_of(dst)
    if not non_blocking:
        sim.report_sync("copy to the host without non_blocking (cudaMemcpy + stream sync)")
    if non_blocking and block is not None and dst.is_contiguous():
        if src.dtype != dst.dtype or not src.is_contiguous():  # converted on the GPU first
            src = queue(sim, aten._to_copy.default, (src,), {"dtype": dst.dtype, "device": torch.device("cpu")},
                        torch.empty(tuple(src.shape), dtype=dst.dtype, device="meta"))
        source = src.ref()
        target = Ref(block, dst.dtype, dst.shape, dst.stride(), (dst.data_ptr() - block.ptr) // dst.element_size())

        landing = PinnedWrite(target)

        def run():
            landing.bytes = source.get().clone()  # read now; lands in the host buffer when the host learns

        with sim.lock:  # as in _copy_in: the mark and the step it names, together
            sim.host_memory_used(block, stream, stream.issued + 1)
            landing.work = sim.issue(stream, "copy", f"copy to the host ({dst.nbytes / 1e6:.2f} MB into pinned "
                                     "memory, non_blocking)", run, reads=[src._block], nbytes=dst.nbytes)
        sim.pending.append(landing)
        return
    source = src.ref()
    sim.issue(stream, "copy", f"copy to the host ({dst.nbytes / 1e6:.2f} MB)", None, reads=[src._block],
              nbytes=dst.nbytes)
    sim.host_waits("copy to the host", [(stream, stream.issued)], reported=False)
    dst.copy_(source.get())


# SimTensor's dispatch sends these operators here (tensor.SPECIAL is filled once, by this import:
# patch imports this module before any simulated tensor exists).
SPECIAL.update({aten.is_pinned: _is_pinned, aten._pin_memory: _pin_memory, aten.record_stream: _record_stream,
                aten._to_copy: _to_copy, aten.copy_: _copy_, aten.set_: _set_})
