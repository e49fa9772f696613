"""Happens-before between the host and the streams: vector clocks and a per-block access log.

Every actor (the host, each stream) counts its own steps. A :data:`Clock` maps an actor to the
last step of it that is known to have *happened before* the current point: a stream learns of
another stream's steps through ``wait_event``/``wait_stream`` (CUDA orders the waiting stream
after the event), of the host's through being handed work (the host issued it), and the host
learns of a stream's through a synchronisation (``synchronize``, ``.item()``, an event query that
says done). Two accesses to the same memory, one of them a write, by actors where neither
happened before the other, are a race: CUDA does not order them, so the GPU may run them either
way round. This is the check that PyTorch's CUDA Stream Sanitizer makes on a real GPU
(``torch/cuda/_sanitizer.py``, "CSAN": ``TORCH_CUDA_SANITIZER=1``), made here on simulated work
so that it does not depend on which order the simulator happened to run things in. A race found
raises :class:`CudaRaceError`, which says it in words (:func:`explain`); :func:`issuer` names the
line of the program that issued an access.

Example:
    >>> log = AccessLog()
    >>> side, main = "side", "main"
    >>> log.write(Access(side, 1, "copy of batch 0"), {side: 1}) is None
    True
    >>> race = log.read(Access(main, 1, "model step"), {main: 1})  # main never waited for side
    >>> race.earlier.what, race.kind
    ('copy of batch 0', 'read after write')
    >>> log.read(Access(main, 2, "model step"), {main: 2, side: 1}) is None  # after wait_event
    True
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

#: actor -> the last of its steps known to have happened before (a vector clock)
Clock = dict


def joined(a: Clock, b: Clock) -> Clock:
    """The clock that knows everything ``a`` and ``b`` know.

    Example:
        >>> joined({"host": 3, "s": 1}, {"s": 4, "t": 2}) == {"host": 3, "s": 4, "t": 2}
        True
    """
    out = dict(a)
    for actor, step in b.items():
        if step > out.get(actor, 0):
            out[actor] = step
    return out


@dataclass(frozen=True)
class Access:
    """One step of one actor touching a block: ``what`` it was and ``where`` in the code it was issued."""

    actor: object  # the host's name, or a stream
    step: int
    what: str
    where: str = ""

    def before(self, clock: Clock) -> bool:
        """Whether this access happened before the point whose clock is ``clock``."""
        return clock.get(self.actor, 0) >= self.step

    def describe(self) -> str:
        return f"{self.what} on {called(self.actor)}" + (f" ({self.where})" if self.where else "")


def called(actor) -> str:
    """An actor in a sentence: "the host", "the default stream", "side stream 2"."""
    name = getattr(actor, "name", actor)
    return name if name.startswith("side") else f"the {name}"


@dataclass(frozen=True)
class Race:
    """Two unordered accesses to one block; ``earlier`` was issued first (on the host's clock)."""

    kind: str  # "read after write", "write after read" or "write after write"
    earlier: Access
    later: Access


@dataclass
class AccessLog:
    """The accesses to one block that a later access must be ordered after: the last write, and
    the reads since it (one per actor: a later read of the same actor is ordered after an earlier one)."""

    last_write: Access | None = None
    reads: dict = field(default_factory=dict)

    def read(self, access: Access, clock: Clock) -> Race | None:
        race = None
        if self.last_write is not None and not self.last_write.before(clock):
            race = Race("read after write", self.last_write, access)
        self.reads[access.actor] = access
        return race

    def write(self, access: Access, clock: Clock) -> Race | None:
        race = None
        if self.last_write is not None and not self.last_write.before(clock):
            race = Race("write after write", self.last_write, access)
        for read in self.reads.values():
            if race is None and not read.before(clock):
                race = Race("write after read", read, access)
        self.last_write, self.reads = access, {}
        return race


class CudaRaceError(RuntimeError):
    """Two accesses to the same memory that nothing orders, one of them a write (see :func:`explain`)."""

    def __init__(self, race: Race, memory: str):
        super().__init__(explain(race, memory))
        self.race = race


def explain(race: Race, memory: str) -> str:
    """A race in words: what touched the memory, where, and the call that would order them."""
    first, then = race.earlier, race.later
    host_first, host_then = first.actor == "host", then.actor == "host"
    if host_then and race.kind == "write after read":
        fix = ("the host overwrote a pinned buffer whose non_blocking copy may not have run yet: wait for an "
               "event recorded after the copy (event.synchronize()) before reusing the buffer")
    elif host_then:
        fix = ("the host read memory that a non_blocking copy writes later: call event.synchronize() (or "
               "torch.cuda.synchronize()) before reading it")
    elif host_first:
        fix = "a copy from a pinned buffer the host changed afterwards without waiting for it"
    elif race.kind == "write after read":
        fix = (f"the memory was freed by the host and handed out again while {called(first.actor)} could still "
               "read it: call tensor.record_stream(stream) when another stream starts using a tensor, or make the "
               "streams wait for each other")
    else:
        fix = (f"make {called(then.actor)} wait for {called(first.actor)} first (wait_stream, or wait_event on an "
               "event recorded after that work)")
    return (f"unsynchronised access to {memory} ({race.kind}): {then.describe()} may run before or while "
            f"{first.describe()}, because nothing orders them; {fix}. (simulated CUDA)")


def issuer() -> str:
    """The first frame outside torch, the simulator and the standard library: who issued this."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(part in name for part in ("/torch/", "simcuda", "/lib/python3", "<frozen")):
            return f"{name.rsplit('/', 1)[-1]}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return ""
