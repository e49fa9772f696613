"""The simulator: streams, scheduler, allocators and clocks of one simulated device, and the
``with simulated_cuda(seed=...)`` block that puts it in place of ``torch.cuda``.

**The scheduler.** Work runs *as late as the program's synchronisation allows*: a step runs only
when the host has to wait for it (a sync, a blocking copy, ``.item()``), or when a step the host
waits for depends on it (through ``wait_event``), never merely because it was issued. That is
the seed-0 schedule. Other seeds are other legal orders: each stream gets a pace, "lazy" (as
late as allowed), "eager" (each step as soon as the steps it waits for have run) or "lags k
steps"; seed 1 makes every side stream eager and the default stream lazy (copies race ahead of
the compute that still reads old data), seed 2 the reverse, and seeds from 3 on draw paces at
random. Whatever the order, the clocks (:mod:`~gpufeed.simcuda.clocks`) find every pair
of unordered accesses, so a race is reported the same under every seed; the seed changes which
wrong values it produces. When the host polls ``query()``, the work it polls for moves one step.

**What the host waits for** is counted in :attr:`Simulator.syncs` (the ones
``torch.cuda.set_sync_debug_mode`` reports: copies without ``non_blocking``, ``.item()``,
``bool()``, ``.cpu()``, ``nonzero``, printing, ``stream.synchronize()``; under
``set_sync_debug_mode("error")`` they raise torch's own ``RuntimeError``) and in
:attr:`Simulator.waits` (all of them, ``event.synchronize()`` and ``torch.cuda.synchronize()`` too, and every
``query()`` poll, which no debug mode reports; :attr:`Simulator.waits_by_thread` says which thread
waited, since a wait on a helper thread costs the training loop nothing).

**The nominal timeline** (:mod:`~gpufeed.simcuda.nominal`) places each step on its stream at
made-up, fixed speeds: a drawing of what may overlap what, not of CUDA's speed.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import warnings
from collections import Counter, deque

import torch

from gpufeed.simcuda.clocks import Access, AccessLog, CudaRaceError, Race, issuer, joined
from gpufeed.simcuda.memory import Block, DeviceAllocator, HostAllocator
from gpufeed.simcuda.nominal import NominalSpeeds, Span, spans
from gpufeed.simcuda.streams import SimEvent, SimStream, Work, may_run, pace

SYNC_MESSAGE = "called a synchronizing CUDA operation"  # torch's words (c10/cuda/CUDAFunctions.cpp)


class Simulator:
    """One simulated CUDA device (``cuda:0``): see the module docstring. Made by :func:`simulated_cuda`."""

    def __init__(self, seed: int = 0, races: str = "raise", speeds: NominalSpeeds | None = None):
        if races not in ("raise", "record"):
            raise ValueError(f"simulated_cuda: races must be 'raise' or 'record', got {races!r}")
        self.seed, self.on_race, self.speeds = seed, races, speeds or NominalSpeeds()
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.tls = threading.local()
        self.streams: dict[int, SimStream] = {}
        self._ids = 0
        self.device_memory, self.host_memory = DeviceAllocator(), HostAllocator()
        self.freed_blocks: deque = deque()  # (block, marks) appended by finalizers, taken by allocations
        self.host_clock: dict = {"host": 0}
        self.host_time = 0.0
        self.debug_mode = 0
        self.syncs: list[str] = []  # what set_sync_debug_mode would report
        self.waits: list[str] = []  # every time the host waited
        self.waits_by_thread: dict[str, list[str]] = {}  # the same, by the name of the thread that waited
        self.races: list[Race] = []
        self.ran: list[Work] = []  # the steps in the order they ran
        self.pending: list = []  # copies to and from pinned memory the host has not yet learnt are done
        self.storages: dict = {}  # a simulated allocation's meta storage (_cdata) -> (block, weakref to inner)
        self.stats: Counter = Counter()
        self.Stream = type("Stream", (SimStream,), {"sim": self})  # what torch.cuda.Stream becomes
        self.Event = type("Event", (SimEvent,), {"sim": self})
        self.default = SimStream(sim=self, name="default stream")
        self.outside: dict = {}  # torch.cuda's own functions, which simulated_cuda replaced (see patch.active)

    # --- streams, devices, threads ------------------------------------------------------------
    def next_stream_id(self) -> int:
        self._ids += 1
        return self._ids - 1  # the default stream is 0, as in CUDA

    def policy_for(self, stream: SimStream) -> str:
        return pace(self.seed, self.rng, default=stream.stream_id == 0)

    def check_device(self, device) -> None:
        if device is None or isinstance(device, torch.Stream):
            return
        index = device if isinstance(device, int) else torch.device(device).index
        if (not isinstance(device, int) and torch.device(device).type != "cuda") or index not in (None, 0):
            raise ValueError(f"simulated CUDA has one device, cuda:0; got {device!r}")

    def current_stream(self, device=None) -> SimStream:
        self.check_device(device)
        return getattr(self.tls, "stream", None) or self.default

    def set_stream(self, stream: SimStream | None) -> None:
        self.tls.stream = stream

    def enter_stream(self, stream: SimStream) -> None:
        """Makes ``stream`` this thread's current stream until :meth:`leave_stream` (nestable)."""
        outer = getattr(self.tls, "outer", None)
        if outer is None:
            outer = self.tls.outer = []
        outer.append(self.current_stream())
        self.set_stream(stream)

    def leave_stream(self) -> None:
        self.set_stream(self.tls.outer.pop())

    def current_device(self) -> int:
        return 0

    def set_device(self, device) -> None:
        self.check_device(device)

    @contextlib.contextmanager
    def stream_context(self, stream: SimStream | None):
        if stream is None:
            yield None
            return
        with stream:
            yield stream

    @contextlib.contextmanager
    def device_context(self, device):
        self.check_device(device)
        yield

    # --- issuing and running work -------------------------------------------------------------
    def issue(self, stream: SimStream, kind: str, what: str, run=None, *, reads=(), writes=(), nbytes: int = 0,
              busy_ms: float = 0.0, deps: tuple = ()) -> Work:
        """Queues one step on ``stream``: the clocks check its reads and writes, the nominal timeline
        places it, and the stream's pace may run it (and any other step that may run) at once."""
        with self.lock:
            self._take_freed()
            stream.clock = joined(stream.clock, self.host_clock)
            stream.issued += 1
            stream.clock[stream] = stream.issued
            work = Work(stream, stream.issued, kind, what, run, deps, nbytes, dict(stream.clock), busy_ms=busy_ms)
            self.host_time += self.speeds.launch_us / 1000
            after = [s.ends[step - 1] for s, step in deps if step > 0]
            work.start = max([stream.last_end, self.host_time, *after])
            work.end = work.start + self.speeds.ms(work)
            stream.last_end = work.end
            stream.ends.append(work.end)
            stream.queue.append(work)  # queued even if it races: the program goes on (races="record")
            where, found = issuer(), []
            for block in reads:
                found.append((block, block.log.read(Access(stream, work.step, what, where), work.clock)))
            for block in writes:
                found.append((block, block.log.write(Access(stream, work.step, what, where), work.clock)))
            for block, race in found:
                self._check(block, race)
            self._progress()
            return work

    def wait_event(self, stream: SimStream, event: SimEvent) -> None:
        if event.stream is None:  # never recorded: waits for nothing
            return
        with self.lock:
            stream.clock = joined(stream.clock, event.clock)
            self.issue(stream, "wait", f"wait for step {event.step} of {event.stream.name}",
                       deps=((event.stream, event.step),))

    def record(self, event: SimEvent, stream: SimStream) -> None:
        with self.lock:
            event.stream, event.step, event.clock = stream, stream.issued, dict(stream.clock)
            event.time = stream.last_end

    def query(self, event: SimEvent) -> bool:
        """``event.query()``: whether its work is done. A poll is a host wait (:meth:`polled`)."""
        with self.lock:
            self.polled("Event.query()")
            if event.stream is None:
                return True
            return self._poll(event.stream, event.step, event.clock)

    def query_stream(self, stream: SimStream) -> bool:
        """``stream.query()``: whether all its work issued so far is done (a host wait too; it
        moves no work: what the stream holds shows as it is)."""
        with self.lock:
            self.polled(f"{stream.name}.query()")
            return self._poll(stream, stream.issued, stream.clock, move=False)

    def _poll(self, stream: SimStream, step: int, clock: dict, move: bool = True) -> bool:
        if move and stream.done < step:  # the GPU moves on while the host polls
            self._run_one_towards(stream, step)
        done = stream.done >= step
        if done:
            self._learn(clock)
        return done

    def polled(self, what: str) -> None:
        """The host polled the GPU (``query()``): counted with the host's waits, by thread, though
        ``torch.cuda.set_sync_debug_mode`` reports no poll. A loop that spins on ``query()``
        waits for the GPU as surely as one that calls ``synchronize()``; a single poll that says
        "done" at once is counted too, since the loop would have waited had it not been."""
        what = f"{what} (a poll)"
        self.waits.append(what)
        self.waits_by_thread.setdefault(threading.current_thread().name, []).append(what)

    def report_sync(self, what: str) -> None:
        """A sync that ``torch.cuda.set_sync_debug_mode`` reports: counted, and raised or warned as set."""
        self.syncs.append(f"{what} ({issuer()})")
        if self.debug_mode == 2:
            raise RuntimeError(SYNC_MESSAGE)
        if self.debug_mode == 1:
            warnings.warn(SYNC_MESSAGE, UserWarning, stacklevel=3)

    def host_waits(self, what: str, targets, *, reported: bool, clock: dict | None = None) -> None:
        """The host waits until each ``(stream, step)`` of ``targets`` has run."""
        if reported:
            self.report_sync(what)
        with self.lock:
            self.waits.append(what)
            self.waits_by_thread.setdefault(threading.current_thread().name, []).append(what)
            for stream, step in targets:
                self._run_until(stream, step)
                self._learn(clock if clock is not None else stream.clock)
                if step > 0:
                    self.host_time = max(self.host_time, stream.ends[step - 1])

    def drain(self, stream: SimStream, why: str) -> None:
        self.host_waits(why, [(stream, stream.issued)], reported=False)

    def synchronize(self, device=None) -> None:
        """``torch.cuda.synchronize()``: every stream's work, done (not reported by the debug mode)."""
        self.check_device(device)
        with self.lock:
            self.host_waits("torch.cuda.synchronize()", [(s, s.issued) for s in list(self.streams.values())],
                            reported=False)

    def sleep(self, cycles: int) -> None:
        """``torch.cuda._sleep(cycles)``: a step that only takes time (1 cycle = 1 nominal ns)."""
        self.issue(self.current_stream(), "busy", "sleep", busy_ms=int(cycles) / 1e6)

    def host_copy(self, nbytes: int) -> None:
        """The host copies ``nbytes`` itself (pinning, staging): real time if
        :attr:`NominalSpeeds.host_gb_s`."""
        if self.speeds.host_gb_s:
            time.sleep(nbytes / (self.speeds.host_gb_s * 1e9))

    def busy(self, ms: float, what: str = "compute") -> Work:
        """A step of ``ms`` nominal milliseconds on the current stream, standing for a kernel."""
        return self.issue(self.current_stream(), "busy", what, busy_ms=ms)

    def _run_until(self, stream: SimStream, step: int) -> None:
        while stream.done < step:
            head = stream.queue[0]
            for other, other_step in head.deps:
                self._run_until(other, other_step)
            self._execute(head)

    def _run_one_towards(self, stream: SimStream, step: int) -> None:
        head = stream.queue[0]
        for other, other_step in head.deps:
            if other.done < other_step:
                return self._run_one_towards(other, other_step)
        self._execute(head)

    def _execute(self, work: Work) -> None:
        stream = work.stream
        stream.queue.popleft()
        try:
            if work.run is not None:
                work.run()
        finally:  # a step that raised still ran: the stream's count stays true for the next wait
            stream.done += 1
            self.ran.append(work)

    def _progress(self) -> None:
        """Runs what the streams' paces let run now (nothing under seed 0)."""
        moved = True
        while moved:
            moved = False
            for stream in list(self.streams.values()):
                while stream.queue and may_run(stream) and all(o.done >= s for o, s in stream.queue[0].deps):
                    self._execute(stream.queue[0])
                    moved = True

    # --- memory ---------------------------------------------------------------------------------
    def allocate(self, nbytes: int, stream: SimStream, dtype: torch.dtype, label: str) -> tuple[Block, bool]:
        """A device block for ``nbytes`` on ``stream``: a freed one of that stream's if one fits
        and is ready (then ``True``: its new owner's first step must poison it), else a new one."""
        with self.lock:
            self._take_freed()
            block, clocks = self.device_memory.take(nbytes, stream)
            for clock in clocks:  # the allocator saw the recorded streams' work done
                self._learn(clock)
            if block is None:
                block = self.device_memory.make(nbytes, stream, label, self)
                block.poison(dtype)
                return block, False
            block.label = label
            return block, True

    def allocate_pinned(self, nbytes: int, dtype: torch.dtype) -> Block:
        with self.lock:
            self._take_freed()
            block, clocks = self.host_memory.take(nbytes)
            for clock in clocks:
                self._learn(clock)
            if block is None:
                block = self.host_memory.make(nbytes, f"pinned host memory ({nbytes:,} bytes)", self)
            self.host_touches(block, True, "allocation of pinned memory")
            block.poison(dtype)
            return block

    def host_memory_used(self, block: Block, stream: SimStream, step: int) -> None:
        """Step ``step`` of ``stream`` (a ``non_blocking`` copy) uses this pinned block: the host
        allocator records an event after it and keeps the block until it is done."""
        clock = joined(stream.clock, {stream: step})
        block.marks.append((stream, step, clock))

    def _learn(self, clock: dict) -> None:
        """The host now knows the work in ``clock`` is done: copies to pinned memory land, and
        copies from pinned memory are checked for host writes made before the host knew."""
        self.host_clock = joined(self.host_clock, clock)
        still = []
        for p in self.pending:
            if p.work is not None and p.work.step <= self.host_clock.get(p.work.stream, 0):
                self._check(p.block, p.settle())
            else:
                still.append(p)
        self.pending = still

    def host_touches(self, block: Block, write: bool, what: str) -> None:
        with self.lock:
            self.host_clock["host"] += 1
            access = Access("host", self.host_clock["host"], what, issuer())
            log = block.log
            self._check(block, log.write(access, self.host_clock) if write else log.read(access, self.host_clock))

    def freed(self, block: Block) -> None:
        """The program dropped its last tensor over ``block`` (a finalizer: any thread, any time).
        What ``record_stream`` asked for is noted now, at the free, as the caching allocator does."""
        if block.kind == "device":
            marks = [(s, s.issued, dict(s.clock)) for s in list(block.recorded) if s is not block.stream]
            self.freed_blocks.append((block, marks))
        else:
            self.freed_blocks.append((block, None))

    def adopt(self, block: Block) -> None:
        """A block of an earlier simulator (closed, so its values are final), now this one's."""
        with self.lock:
            block.sim, block.log, block.recorded, block.marks = self, AccessLog(), set(), []
            block.stream = self.default

    def _take_freed(self) -> None:
        while self.freed_blocks:
            block, marks = self.freed_blocks.popleft()
            if block.sim is not self:
                continue
            if block.kind == "device":
                self.device_memory.give_back(block, marks)
            else:
                self.host_memory.give_back(block)

    def _check(self, block: Block, race: Race | None) -> None:
        if race is None:
            return
        self.races.append(race)
        if self.on_race == "raise":
            raise CudaRaceError(race, block.label or f"{block.kind} memory")

    # --- what happened ---------------------------------------------------------------------------
    def timeline(self, streams=None) -> list[Span]:
        """The issued copies and kernels as :class:`Span` s on the nominal timeline, one row per
        stream (``streams``: those only): what may overlap what.

        Example:
            >>> from gpufeed.simcuda import simulated_cuda
            >>> with simulated_cuda() as sim:
            ...     side = torch.cuda.Stream()
            ...     with torch.cuda.stream(side):
            ...         step = sim.busy(2.0, "copy")  # stands for a 2 ms copy
            ...     _ = sim.busy(3.0)  # and a 3 ms kernel on the default stream, beside it
            >>> [(i.resource, i.stage, round(i.end - i.start, 3)) for i in sim.timeline()]
            [('side stream 1', 'copy', 2.0), ('default stream', 'compute', 3.0)]
        """
        rows = [s for s in self.streams.values() if streams is None or s in streams]
        return spans(w for s in rows for w in self.issued_work(s))

    def issued_work(self, stream: SimStream) -> list[Work]:
        """Every step issued on ``stream``, run or not, in order."""
        return [w for w in self.ran if w.stream is stream] + list(stream.queue)

    # --- the end ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Runs every step still queued (so that the values left behind are final), then stops."""
        with self.lock:
            for stream in list(self.streams.values()):
                self._run_until(stream, stream.issued)
                self._learn(stream.clock)


