"""Simulated streams, events and the work queued on them.

A :class:`SimStream` is what ``torch.cuda.Stream(...)`` returns inside
:func:`~gpufeed.simcuda.simulated_cuda`: a queue of :class:`Work` that runs in order, but
only when the simulator's scheduler runs it (see :class:`~gpufeed.simcuda.device.Simulator`),
never merely because the host issued it. It is a ``torch.Stream`` (device ``cuda:0``), so that
``tensor.record_stream(s)`` accepts it. A :class:`SimEvent` marks a point in a stream's queue.

The rules, each as CUDA and PyTorch state them:

* Work on one stream runs in the order it was issued; work on two streams is unordered unless one
  waits for an event of the other ("Operations in different streams may be executed out of order
  with respect to one another or concurrently", CUDA C++ Programming Guide, section *Streams*).
* PyTorch's streams do not synchronise with the default stream: its pool creates them with
  ``cudaStreamNonBlocking`` (``c10/cuda/CUDAStream.cpp``), so nothing orders a side stream with the
  default stream but ``wait_stream``/``wait_event``.
* ``s.wait_event(e)`` makes *later* work on ``s`` wait, on the device, for the work issued on
  ``e``'s stream before ``e.record()``; the host does not wait (``cudaStreamWaitEvent``).
  ``s.wait_stream(t)`` is ``s.wait_event(t.record_event())`` (``torch/cuda/streams.py``).
  Waiting for an event that was never recorded waits for nothing (``cudaStreamWaitEvent``).
* ``e.query()`` says whether that work is done, without blocking (the simulator still counts each
  poll among the host's waits: a loop that spins on it waits for the GPU); ``e.synchronize()``,
  ``s.synchronize()`` and ``torch.cuda.synchronize()`` make the host wait. Of these, PyTorch's
  ``torch.cuda.set_sync_debug_mode`` reports ``s.synchronize()`` (``c10::cuda::stream_synchronize``)
  but not ``e.synchronize()`` or ``torch.cuda.synchronize()`` (``c10/cuda/CUDAFunctions.h``,
  ``c10/cuda/CUDAEvent.h``); the simulator counts all three and reports as torch does.
* The current stream is per host thread and starts as the device's default stream, which all
  threads share (``torch.cuda.current_stream``; ``c10::cuda::getCurrentCUDAStream`` is thread-local).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from gpufeed.simcuda.clocks import Clock

CUDA_TYPE = 1  # the device type of CUDA in torch.Stream's (stream_id, device_index, device_type)


@dataclass(eq=False)
class Work:
    """One piece of work on a stream: a kernel, a copy, a wait for another stream, a marker.

    ``run`` does it on the CPU (None: nothing to do, e.g. a wait); ``deps`` are the
    ``(stream, step)`` it may not start before; ``start``/``end`` place it on the nominal timeline
    (milliseconds of a made-up, fixed-speed device: a drawing aid, not CUDA's speed).
    """

    stream: SimStream
    step: int
    kind: str  # "copy", "kernel", "alloc", "wait", "busy"
    what: str
    run: Callable[[], None] | None = None
    deps: tuple = ()
    nbytes: int = 0  # the bytes a copy moves or a kernel reads and writes
    clock: Clock = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    busy_ms: float = 0.0  # a "busy" step's nominal length (sim.busy, torch.cuda._sleep)


class SimStream(torch.Stream):
    """A simulated CUDA stream (see the module docstring for its rules).

    Made by ``torch.cuda.Stream(device=None, priority=0)`` inside ``simulated_cuda``; the
    simulator makes the default stream itself. ``name`` is what messages and timelines call it.
    """

    sim = None  # set on the per-simulator subclass that torch.cuda.Stream is replaced with

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        sim = kwargs.get("sim") or cls.sim
        sim.check_device(device)
        return super().__new__(cls, stream_id=sim.next_stream_id(), device_index=0, device_type=CUDA_TYPE)

    def __init__(self, device=None, priority: int = 0, *, sim=None, name: str | None = None):
        self.sim = sim or type(self).sim
        self.priority = priority
        self.name = name or f"side stream {self.stream_id}"
        self.queue: deque[Work] = deque()  # issued, not yet run
        self.issued = 0  # steps issued so far (the step of the last one)
        self.done = 0  # steps run so far
        self.clock: Clock = {}  # what the next step will have happened after
        self.last_end = 0.0  # nominal time at which the last issued step ends
        self.ends: list[float] = []  # nominal end of each issued step
        self.policy = self.sim.policy_for(self)
        self.sim.streams[self.stream_id] = self

    # -- what torch.cuda.Stream offers ---------------------------------------------------------
    def wait_event(self, event: SimEvent) -> None:
        self.sim.wait_event(self, event)

    def wait_stream(self, stream: SimStream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: SimEvent | None = None) -> SimEvent:
        event = event if event is not None else self.sim.Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return self.sim.query_stream(self)

    def synchronize(self) -> None:
        self.sim.host_waits(f"{self.name}.synchronize()", [(self, self.issued)], reported=True)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def __enter__(self):  # ``with stream:``, as ``with torch.cuda.stream(stream):``
        self.sim.enter_stream(self)
        return self

    def __exit__(self, *exc) -> None:
        self.sim.leave_stream()

    def __eq__(self, other) -> bool:  # another simulator's stream of the same id is another stream
        return self is other or (type(other) is torch.Stream and other.stream_id == self.stream_id
                                 and other.device_type == self.device_type)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_type))

    def __repr__(self) -> str:
        return f"<simulated {self.name} on cuda:0: {self.issued - self.done} of {self.issued} steps not run>"


class SimEvent:
    """A simulated ``torch.cuda.Event``: a point in one stream's queue.

    ``record(stream)`` marks the work issued on ``stream`` so far; ``wait(stream)`` makes
    ``stream`` wait for it; ``query()`` says whether it is done; ``synchronize()`` makes the host
    wait for it; ``elapsed_time(end)`` gives nominal milliseconds (the drawing aid, not CUDA's
    speed).
    """

    sim = None  # set on the per-simulator subclass that torch.cuda.Event is replaced with

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.stream: SimStream | None = None
        self.step = 0
        self.clock: Clock = {}
        self.time = 0.0

    def record(self, stream: SimStream | None = None) -> None:
        self.sim.record(self, stream if stream is not None else self.sim.current_stream())

    def wait(self, stream: SimStream | None = None) -> None:
        (stream if stream is not None else self.sim.current_stream()).wait_event(self)

    def query(self) -> bool:
        return self.sim.query(self)

    def synchronize(self) -> None:
        if self.stream is not None:
            self.sim.host_waits("Event.synchronize()", [(self.stream, self.step)], reported=False,
                                clock=self.clock)

    def elapsed_time(self, end: SimEvent) -> float:
        return end.time - self.time

    def __repr__(self) -> str:
        where = f"step {self.step} of {self.stream.name}" if self.stream is not None else "not recorded"
        return f"<simulated CUDA event at {where}>"


#: A stream's pace: when the scheduler runs its queued work (see :mod:`gpufeed.simcuda.device`).
PACES = ("lazy", "eager", "lag 1", "lag 2", "lag 3")


def pace(seed: int, rng, *, default: bool) -> str:
    """The pace of a new stream under ``seed``: all lazy under seed 0; under seed 1 the default
    stream lazy and side streams eager, seed 2 the reverse; from seed 3 on, drawn from ``rng``.

    Example:
        >>> import random
        >>> pace(0, random.Random(0), default=False), pace(1, random.Random(0), default=False)
        ('lazy', 'eager')
    """
    if seed == 0:
        return "lazy"
    if seed in (1, 2):
        return "lazy" if default == (seed == 1) else "eager"
    return rng.choice(PACES)


def may_run(stream: SimStream) -> bool:
    """Whether ``stream``'s pace lets its next step run before the host waits for it: always if
    eager, while more than k steps are queued if it lags k, never if lazy."""
    if stream.policy == "eager":
        return True
    if stream.policy.startswith("lag"):
        return len(stream.queue) > int(stream.policy.split()[1])
    return False
