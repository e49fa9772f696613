"""Simulated memory: the device's caching allocator, the pinned host allocator, and poison.

Every simulated allocation is a :class:`Block` of plain CPU memory (a NumPy buffer). A tensor
handed to the program is a view of a storage made for that allocation alone, so that the moment
the program drops its last reference (the host-side free, as CUDA's caching allocator sees it)
is the moment a ``weakref.finalize`` on that storage's buffer fires. The rules, as PyTorch states
them:

* **Device memory** (``c10/cuda/CUDACachingAllocator.cpp``; "CUDA semantics" in PyTorch's docs,
  *Memory management* and ``Tensor.record_stream``): a block freed by the host is handed to the
  next allocation *on the same stream* at once, since that stream's later work runs after its
  earlier work. A block used on another stream and marked with ``record_stream(s)`` is not reused
  until the work issued on ``s`` before the free is done (the allocator records an event at the
  free and queries it at later allocations). Without ``record_stream`` nothing protects it: the
  allocating stream's next kernel may write it while the other stream still reads it. Sizes are
  rounded up to 512 bytes; the simulator reuses a free block of at least the size asked for and
  less than twice it, and never splits or merges blocks.
* **Pinned host memory** (``aten/src/ATen/core/CachingHostAllocator.h``; ``Copy.cu`` calls its
  ``record_event`` after every ``non_blocking`` copy to or from a pinned block): a pinned block
  freed while such a copy is pending is not reused until the copy is done. A pinned buffer the
  program *keeps* and overwrites has no such protection: the copy reads it when it runs. Sizes are
  rounded up to a power of two, as the host allocator does.
* **Poison**: memory that no finished work has written reads as poison, so that a race shows as a
  wrong value rather than as old data that happens to look right: every byte ``0xFF`` for floating
  types (a NaN in float16, bfloat16, float32 and float64), ``0x01`` for bool, and the fixed
  pattern :data:`POISON_INT` (``0xA5``: 165 in a uint8) for other integers. A reused device block
  is poisoned by its new stream, in that stream's order, when it is handed out.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from gpufeed.simcuda.clocks import AccessLog, Clock

POISON_FLOAT = 0xFF  #: every byte of unwritten floating memory: NaN
POISON_BOOL = 0x01  #: every byte of unwritten bool memory: True (other values are not valid bools)
POISON_INT = 0xA5  #: every byte of unwritten integer memory: 165 as uint8, a large negative int64

DEVICE_ROUND = 512  # bytes: the caching allocator's smallest block


def poison_byte(dtype: torch.dtype) -> int:
    """The byte that unwritten memory of ``dtype`` is filled with.

    Example:
        >>> poison_byte(torch.float32), poison_byte(torch.uint8)
        (255, 165)
    """
    if dtype.is_floating_point or dtype.is_complex:
        return POISON_FLOAT
    return POISON_BOOL if dtype == torch.bool else POISON_INT


@dataclass(eq=False)
class Block:
    """One allocation's memory: ``nbytes`` bytes of CPU memory standing for device or pinned memory."""

    kind: str  # "device" or "pinned"
    nbytes: int
    stream: object = None  # device: the stream it was allocated on (and is reused on)
    label: str = ""
    log: AccessLog = field(default_factory=AccessLog)
    recorded: set = field(default_factory=set)  # device: streams given to record_stream
    marks: list = field(default_factory=list)  # (stream, step, clock) that must be done before reuse
    sim: object = None

    def __post_init__(self):
        self.base = np.empty(self.nbytes, dtype=np.uint8)
        self.flat = torch.from_numpy(self.base)  # the work's own view: it never keeps a tensor alive
        self.ptr = self.base.ctypes.data

    def poison(self, dtype: torch.dtype) -> None:
        self.base.fill(poison_byte(dtype))

    def view(self, dtype: torch.dtype, size, stride, offset: int = 0) -> torch.Tensor:
        """The block's bytes as a ``dtype`` tensor, through :attr:`flat` (does not count as a use)."""
        return _strided(self.flat, dtype, size, stride, offset)

    def ready(self) -> bool:
        """Whether every step it waits for has run (what the allocator's event query would say)."""
        return all(stream.done >= step for stream, step, _ in self.marks)


def _strided(flat: torch.Tensor, dtype: torch.dtype, size, stride, offset: int) -> torch.Tensor:
    return flat.view(dtype).as_strided(tuple(size), tuple(stride), offset)


def handout(block: Block, dtype: torch.dtype, size, stride, on_free) -> torch.Tensor:
    """A tensor over ``block`` whose storage is its own: when the program has dropped every tensor
    that shares it, ``on_free(block)`` runs (at once, in the thread that dropped the last one)."""
    buffer = block.base[:]  # a new NumPy object for this allocation alone
    weakref.finalize(buffer, on_free, block)
    return _strided(torch.from_numpy(buffer), dtype, size, stride, 0)


def contiguous_strides(size) -> tuple[int, ...]:
    """Row-major strides of ``size``.

    Example:
        >>> contiguous_strides((2, 3, 4))
        (12, 4, 1)
    """
    strides, step = [], 1
    for n in reversed(tuple(size)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def span_bytes(size, stride, itemsize: int) -> int:
    """Bytes from the first element of a strided view to the end of its last one."""
    if any(int(n) == 0 for n in size):
        return 0
    return (sum((int(n) - 1) * int(s) for n, s in zip(size, stride)) + 1) * itemsize


class DeviceAllocator:
    """The simulated caching allocator: a pool of free blocks per stream (see the module docstring)."""

    def __init__(self):
        self.free: dict[object, list[Block]] = {}
        self.in_use = 0  # bytes handed out and not freed
        self.reserved = 0  # bytes of every block ever made
        self.peak = 0

    def take(self, nbytes: int, stream) -> tuple[Block | None, list[Clock]]:
        """A free block of ``stream``'s that fits and is ready, with the clocks of what it waited
        for (the caller joins them: the allocator's query saw that work done); else ``(None, [])``."""
        need = -(-max(nbytes, 1) // DEVICE_ROUND) * DEVICE_ROUND
        pool = self.free.get(stream, [])
        fits = [b for b in pool if need <= b.nbytes < 2 * need and b.ready()]
        if not fits:
            return None, []
        block = min(fits, key=lambda b: b.nbytes)
        pool.remove(block)
        clocks = [clock for _, _, clock in block.marks]
        block.marks, block.recorded = [], set()
        self._use(block.nbytes)
        return block, clocks

    def make(self, nbytes: int, stream, label: str, sim) -> Block:
        need = -(-max(nbytes, 1) // DEVICE_ROUND) * DEVICE_ROUND
        self.reserved += need
        self._use(need)
        return Block("device", need, stream=stream, label=label, sim=sim)

    def _use(self, nbytes: int) -> None:
        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)

    def give_back(self, block: Block, marks: list) -> None:
        """The host freed ``block``: it goes to its stream's pool, to be reused once ``marks`` are done."""
        self.in_use -= block.nbytes
        block.marks = marks
        self.free.setdefault(block.stream, []).append(block)


class HostAllocator:
    """The simulated caching host allocator for pinned memory (see the module docstring)."""

    def __init__(self):
        self.free: list[Block] = []
        self.by_ptr: dict[int, Block] = {}  # every pinned block, by the address of its first byte

    def take(self, nbytes: int) -> tuple[Block | None, list[Clock]]:
        size = 1 << max(nbytes - 1, 0).bit_length()  # the next power of two
        for block in self.free:
            if block.nbytes == size and block.ready():
                self.free.remove(block)
                clocks = [clock for _, _, clock in block.marks]
                block.marks = []
                return block, clocks
        return None, []

    def make(self, nbytes: int, label: str, sim) -> Block:
        size = 1 << max(nbytes - 1, 0).bit_length()
        block = Block("pinned", size, label=label, sim=sim)
        self.by_ptr[block.ptr] = block
        return block

    def block_of(self, t: torch.Tensor) -> Block | None:
        """The pinned block a CPU tensor's storage starts at, or None (pageable memory)."""
        if not self.by_ptr or t.device.type != "cpu":
            return None
        return self.by_ptr.get(t.untyped_storage().data_ptr())

    def give_back(self, block: Block) -> None:
        self.free.append(block)
