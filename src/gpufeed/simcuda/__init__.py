"""CUDA without a GPU: a simulator of CUDA's *ordering* rules (not its speed), on the CPU.

``with simulated_cuda(seed=0) as sim:`` puts a simulated device in place of ``torch.cuda`` for
the block: ``torch.cuda.is_available()`` says True, ``torch.empty(..., device="cuda")`` gives a
tensor that reports ``device="cuda:0"``, and the library's CUDA paths run unmodified (it knows
nothing of the simulator). Every kernel and copy is queued on its stream and run only when the
program's synchronisation forces it; memory that no finished step has written reads as poison
(NaN for floats); and a happens-before check reports every pair of accesses that nothing orders
(:class:`CudaRaceError`, raised where the second one is issued). Lesson 08 uses it to show the
prefetcher's hazards live; ``tests/test_simcuda_*.py`` (pytest marker ``simcuda``) run the
library under it in every ``make test``; on a GPU the same library tests run on real CUDA.

The rules it models, and where CUDA or PyTorch state them:

* Streams are queues run in order; two streams are unordered except through events
  (CUDA C++ Programming Guide, *Asynchronous Concurrent Execution: Streams*); PyTorch's side
  streams are created ``cudaStreamNonBlocking``, so not even the default stream orders them
  (``c10/cuda/CUDAStream.cpp``). ``wait_stream``/``wait_event`` order later work on the device
  without making the host wait; ``record``, ``query``, ``synchronize`` (PyTorch's "CUDA
  semantics" notes, *Asynchronous execution* and *CUDA streams*; ``torch/cuda/streams.py``).
  The current stream is per host thread (``torch.cuda.current_stream``). See
  :mod:`~gpufeed.simcuda.streams` and :mod:`~gpufeed.simcuda.device`.
* Copies (``aten/src/ATen/native/cuda/Copy.cu``): host-to-device from pinned memory with
  ``non_blocking=True`` is asynchronous and reads the host buffer when it runs; from pageable
  memory the host waits while the bytes are staged (CUDA Runtime API, *API synchronization
  behavior*: "for transfers from pageable host memory to device memory, ... the function will
  return once the pageable buffer has been copied to the staging memory"); without
  ``non_blocking`` the host waits for the copy (``memcpy_and_sync``). Device-to-host
  ``non_blocking`` goes into pinned memory and is valid only after an event or a sync (PyTorch
  tutorial *A guide on good usage of non_blocking and pin_memory()*). See
  :mod:`~gpufeed.simcuda.copies`.
* The caching allocator reuses a freed block at once on its own stream, and after another
  stream's recorded use only once that use is done (``Tensor.record_stream`` docs;
  ``c10/cuda/CUDACachingAllocator.cpp``); the caching host allocator keeps a freed pinned block
  until the copies that used it are done, but a pinned buffer the program keeps and overwrites is
  unprotected (``aten/src/ATen/core/CachingHostAllocator.h``). See
  :mod:`~gpufeed.simcuda.memory`.
* Host waits: ``.item()``, ``bool()``, ``.cpu()``, ``.tolist()``, ``nonzero``, printing,
  blocking copies and ``stream.synchronize()`` are the syncs ``torch.cuda.set_sync_debug_mode``
  reports (``c10/cuda/CUDAFunctions.h``: ``memcpy_and_sync``, ``stream_synchronize``); counted in
  ``sim.syncs``, and raised under ``set_sync_debug_mode("error")`` with torch's own message;
  those and ``event.synchronize()``, ``torch.cuda.synchronize()`` and every ``query()`` poll
  (which no debug mode reports) in ``sim.waits``, by thread in ``sim.waits_by_thread``.
* Races are found as PyTorch's CUDA Stream Sanitizer finds them on a GPU
  (``torch/cuda/_sanitizer.py``): vector clocks over the host and the streams
  (:mod:`~gpufeed.simcuda.clocks`).

What it leaves out: timing (the timeline is nominal, a drawing aid: :mod:`~gpufeed.simcuda.nominal`), the number of copy engines
and any other limit on concurrency, several devices and peer copies, CUDA graphs, IPC and CUDA in
other processes (DataLoader workers with CUDA, ``torch.multiprocessing`` sharing), autograd's
backward on simulated tensors, per-thread default streams, stream priorities, events'
interprocess and blocking flags, the splitting and merging of allocator blocks, out-of-memory,
device-side RNG streams (random ops on the device draw from the CPU generator when they run),
kernels' own numerics (results are the CPU's), asynchronous error reporting, and any operator
without a meta kernel (it runs at once, after its stream's earlier work: counted in
``sim.stats["eager"]``, never a race missed but a schedule less hostile).
"""

from gpufeed.simcuda.clocks import CudaRaceError
from gpufeed.simcuda.device import Simulator
from gpufeed.simcuda.nominal import NominalSpeeds, Span
from gpufeed.simcuda.patch import active, simulated_cuda
from gpufeed.simcuda.tensor import SimTensor

__all__ = ["CudaRaceError", "NominalSpeeds", "SimTensor", "Simulator", "Span", "active", "simulated_cuda"]
