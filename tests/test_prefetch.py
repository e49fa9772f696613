import gc
import threading
import time
import traceback

import pytest
import torch
from cudacheck import consume_on_the_gpu, no_host_sync
from tensordict import TensorDict

from gpufeed.data.memmap import ImageData
from gpufeed.data.movers import equal, leaves
from gpufeed.data.prefetch import CudaPrefetcher, ThreadPrefetcher, prefetch, prepare
from gpufeed.data.producer import THREAD_PREFIX

CUDA = torch.cuda.is_available()
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def live_threads():
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


@pytest.fixture(autouse=True)
def no_threads_left():
    yield
    assert live_threads() == [], "a prefetch thread outlived its test"  # (no gc.collect: refcounts suffice)


def batches(n=5, kind="tuple"):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        images = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8, generator=g)
        labels = torch.arange(4) + 10 * i
        if kind == "tuple":
            out.append((images, labels))
        elif kind == "nested":
            out.append({"images": images, "targets": [{"boxes": torch.rand(k + 1, 4, generator=g), "labels": labels[:k + 1]}
                                                      for k in range(4)], "epoch": i})
        elif kind == "tensordict":
            out.append(TensorDict({"images": images, "labels": labels}, batch_size=[4]))
        else:
            out.append(ImageData(images=images, targets=labels, batch_size=[4]))
    return out


def failing(n_good):
    def gen():
        yield from batches(n_good)
        raise ValueError("boom in the loader")

    return gen()


def naive_prepare(images, dtype=torch.float32, mean=None, std=None):
    x = images.to(torch.float64) / 255
    if mean is not None:
        x = (x - torch.tensor(mean, dtype=torch.float64).view(-1, 1, 1)) / torch.tensor(std, dtype=torch.float64).view(-1, 1, 1)
    return x.to(dtype)


# --- the batch transform (normalise itself: tests/test_transforms.py) -----------------------------

@pytest.mark.parametrize("kind", ["tuple", "nested", "tensordict", "tensorclass"])
def test_prepare_converts_only_4d_uint8_images(kind):
    batch = batches(1, kind)[0]
    out = prepare(batch, torch.float16, MEAN, STD)
    images = out["images"] if kind in ("nested", "tensordict") else out.images if kind == "tensorclass" else out[0]
    source = batch["images"] if kind in ("nested", "tensordict") else batch.images if kind == "tensorclass" else batch[0]
    assert images.dtype == torch.float16
    assert torch.allclose(images.float(), naive_prepare(source, torch.float16, MEAN, STD).float(), atol=2e-2)
    assert equal(tree_without_images(out), tree_without_images(batch))  # labels, boxes untouched
    assert prepare(batch) is batch  # nothing asked: nothing done


def tree_without_images(batch):
    from gpufeed.data.movers import plain

    b = plain(batch)
    return {k: v for k, v in b.items() if k != "images"} if isinstance(b, dict) else b[1:]


# --- the thread prefetcher ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["tuple", "nested", "tensordict", "tensorclass"])
@pytest.mark.parametrize("depth", [1, 3])
def test_thread_prefetcher_yields_the_loaders_batches_in_order(kind, depth):
    data = batches(6, kind)
    p = ThreadPrefetcher(data, depth=depth)
    for _ in range(2):  # each iter() is a new pass
        got = list(p)
        assert len(got) == 6 and all(equal(a, b) for a, b in zip(got, data))
    assert len(p) == 6


def test_thread_prefetcher_runs_the_loader_on_its_thread():
    names = []

    def gen():
        for i in range(3):
            names.append(threading.current_thread().name)
            yield i

    assert list(ThreadPrefetcher(gen())) == [0, 1, 2]
    assert all(n.startswith(THREAD_PREFIX) for n in names)


def test_an_exception_surfaces_once_with_its_traceback_then_it_stops():
    it = iter(ThreadPrefetcher(failing(2), depth=1))
    got = [next(it), next(it)]
    assert all(equal(a, b) for a, b in zip(got, batches(2)))
    with pytest.raises(ValueError, match="boom in the loader") as info:
        next(it)
    assert "gen" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    with pytest.raises(StopIteration):
        next(it)
    assert live_threads() == []


def test_an_exception_in_the_transform_surfaces_too():
    def bad(batch):
        raise KeyError("transform failed")

    with pytest.raises(KeyError, match="transform failed"):
        list(ThreadPrefetcher(batches(2), transform=bad))


def test_an_error_in_iter_is_raised_at_once():
    class NoIter:
        def __iter__(self):
            raise OSError("cannot open the data")

    with pytest.raises(OSError, match="cannot open"):
        iter(ThreadPrefetcher(NoIter()))


def endless(closed):
    try:
        i = 0
        while True:
            yield torch.full((1000,), i)
            i += 1
    finally:
        closed.append(threading.current_thread().name)


def test_break_while_the_producer_blocks_on_a_full_queue_leaves_no_thread():
    closed = []
    p = ThreadPrefetcher(endless(closed), depth=2)
    for i, _batch in enumerate(p):
        if i == 0:
            time.sleep(0.2)  # the producer fills the queue and blocks on put
            break
    del _batch
    assert live_threads() == []  # the loop's iterator was collected: its finaliser stopped the thread
    assert closed and closed[0].startswith(THREAD_PREFIX)  # the generator was closed on its own thread


def test_close_and_the_context_manager_stop_the_thread():
    closed = []
    with ThreadPrefetcher(endless(closed), depth=2) as p:
        it = iter(p)
        next(it)
        assert len(live_threads()) == 1
    assert live_threads() == [] and closed
    with pytest.raises(StopIteration):
        next(it)


def test_garbage_collection_stops_the_thread():
    it = iter(ThreadPrefetcher(endless([]), depth=1))
    next(it)
    del it
    gc.collect()
    assert live_threads() == []


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth"):
        ThreadPrefetcher([], depth=0)


def test_prefetch_on_the_cpu_moves_and_prepares_like_the_naive_loop():
    data = batches(4)
    got = list(prefetch(data, "cpu", dtype=torch.float32, mean=MEAN, std=STD))
    for (gi, gl), (i, lab) in zip(got, data):
        assert torch.allclose(gi, naive_prepare(i, torch.float32, MEAN, STD), atol=1e-5) and torch.equal(gl, lab)


@pytest.mark.skipif(CUDA, reason="checks the error raised where there is no CUDA")
def test_without_cuda_the_cuda_paths_say_so():
    with pytest.raises(RuntimeError, match="ThreadPrefetcher"):
        CudaPrefetcher(batches(1))
    with pytest.raises(RuntimeError, match="no GPU"):
        prefetch(batches(1), "cuda")


# --- the CUDA prefetcher (skipped without a GPU) ------------------------------------------------

@pytest.mark.parametrize("kind", ["tuple", "nested", "tensordict", "tensorclass"])
@pytest.mark.parametrize("depth", [1, 3])
def test_cuda_prefetcher_yields_the_loaders_batches_on_the_gpu(kind, depth, on_cuda):
    data = batches(6, kind)
    p = CudaPrefetcher(data, depth=depth)
    for _ in range(2):
        got = list(p)
        assert len(got) == 6
        for a, b in zip(got, data):
            assert all(t.is_cuda for t in leaves(a))
            assert equal(a, b)


def test_cuda_prefetcher_converts_on_the_gpu_like_the_cpu_path(on_cuda):
    data = batches(3)
    on_gpu = list(CudaPrefetcher(data, dtype=torch.float16, mean=MEAN, std=STD))
    on_cpu = list(prefetch(data, "cpu", dtype=torch.float16, mean=MEAN, std=STD))
    for (gi, gl), (ci, cl) in zip(on_gpu, on_cpu):
        assert gi.is_cuda and gi.dtype == torch.float16
        assert torch.allclose(gi.float().cpu(), ci.float(), atol=2e-3) and torch.equal(gl.cpu(), cl)


def test_cuda_prefetcher_values_survive_work_on_the_default_stream(on_cuda):
    # The consumer overwrites each batch right away; if record_stream or the wait were missing,
    # later copies could land in memory still in use, or be read before they arrive.
    data = [(torch.full((256, 1024), i, dtype=torch.uint8), torch.tensor([i])) for i in range(20)]
    for i, (x, y) in enumerate(CudaPrefetcher(data, depth=2)):
        assert int(x.float().mean()) == i and int(y) == i
        x.fill_(255)
        del x


def test_cuda_prefetcher_fed_while_a_long_kernel_holds_the_current_stream_gives_the_cpu_values(on_cuda):
    # Inputs already on the GPU, made on the current stream behind a long kernel: the side stream
    # must wait for them (wait_stream) and keep them alive (record_stream), or it reads garbage.
    data = batches(6)
    want = list(prefetch(data, "cpu", dtype=torch.float32, mean=MEAN, std=STD))
    base = [(x.cuda(), y.cuda()) for x, y in data]
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(1e8))  # the current stream is busy for a good while
        gpu = [(x.clone(), y.clone()) for x, y in base]  # queued behind it: the values exist only after it
        got = [(a.cpu(), b.cpu()) for a, b in CudaPrefetcher(gpu, dtype=torch.float32, mean=MEAN, std=STD, depth=2)]
        del gpu
        assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, want))


def test_cuda_prefetcher_in_steady_state_never_syncs_the_host(on_cuda):
    data = [(x.pin_memory(), y.pin_memory()) for x, y in batches(8)]
    p = CudaPrefetcher(data, dtype=torch.float32, mean=MEAN, std=STD, depth=2)
    list(p)  # warm-up: the cached constants, the side stream
    with no_host_sync():
        assert consume_on_the_gpu(p) == 8


def test_list_of_a_prefetched_loader_gives_distinct_batches():
    from gpufeed.data.loader import FastLoader

    x = torch.arange(10)
    got = list(ThreadPrefetcher(FastLoader(x, 2), depth=2))
    assert len({b.data_ptr() for b in got}) == len(got) == 5
    assert sorted(torch.cat(got).tolist()) == list(range(10))


def test_cuda_prefetcher_raises_once_with_the_traceback(on_cuda):
    it = iter(CudaPrefetcher(failing(2)))
    assert len([next(it), next(it)]) == 2
    with pytest.raises(ValueError, match="boom") as info:
        next(it)
    assert "gen" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    with pytest.raises(StopIteration):
        next(it)


class StandIn:
    """torch.cuda's streams and events replaced by recorders (no GPU needed): ``calls`` lists
    ``(what, ..., thread name)`` in order. ``done_after``: how many polls (``query()``) an event
    answers "not done" before it says done; None: never (a GPU queue that does not drain)."""

    def __init__(self, monkeypatch, done_after: int | None = 1):
        import contextlib

        self.calls, self.done_after = [], done_after
        standin = self

        class Stream:
            def __init__(self, name="side"):
                self.name = name

            def wait_event(self, event):
                standin.log("wait", event.n, self.name)

        class Event:
            count = 0

            def __init__(self, **kwargs):
                self.polls = 0

            def record(self, stream):
                Event.count += 1
                self.n = Event.count
                standin.log("record", self.n, stream.name)

            def query(self):
                self.polls += 1
                done = standin.done_after is not None and self.polls > standin.done_after
                standin.log("poll", self.n, done)
                return done

            def synchronize(self):  # blocks as a GPU would, until done (a queue that never drains: 5 s)
                standin.log("host waits", self.n)
                deadline = time.monotonic() + 5
                while not self.query() and time.monotonic() < deadline:
                    time.sleep(0.01)

        @contextlib.contextmanager
        def stream(s):
            self.log("enter", s.name)
            yield
            self.log("exit", s.name)

        for name, value in {"is_available": lambda: True, "current_device": lambda: 0,
                            "Stream": lambda device: Stream(), "Event": Event, "stream": stream,
                            "current_stream": lambda device: Stream("current"),
                            "device": lambda device: contextlib.nullcontext()}.items():
            monkeypatch.setattr(torch.cuda, name, value)

    def log(self, *call):
        self.calls.append((*call, threading.current_thread().name))

    def prefetcher(self, loader, depth=1):
        p = CudaPrefetcher(loader, "cuda", dtype=torch.float32, depth=depth, pin_memory=False)
        p.device = torch.device("cpu")  # the copies themselves stay on the CPU here
        return p


def test_cuda_prefetcher_protocol_with_a_stand_in_for_torch_cuda(monkeypatch):
    """Runs without a GPU: torch.cuda's streams and events are replaced by recorders, so that the
    order of the protocol is checked. On the caller's thread at iter(): an event on its stream,
    and the side stream waits for it before the loader is first asked. On the prefetcher's thread,
    with the side stream current for its whole life: each batch asked for, copied and its event
    recorded, and from the (depth + 2)th on, first the release of the batch depth + 2 before
    polled until done (never a blocking synchronize). On the caller's thread at each hand-over:
    the current stream waits for the batch's event (after it was recorded) and the batch before
    is released."""
    standin = StandIn(monkeypatch, done_after=1)  # each release is polled twice: not yet, done
    calls = standin.calls

    def loader():
        for k, batch in enumerate(batches(5)):
            standin.log("ask", k)
            yield batch

    got = []
    for batch in standin.prefetcher(loader()):
        got.append(batch)
        time.sleep(0.05)  # the producer runs into the ring's bound
    main = threading.current_thread().name
    producer = [c[:-1] for c in calls if c[-1] != main]
    threads = {c[-1] for c in calls if c[-1] != main}
    assert len(threads) == 1 and threads.pop().startswith(THREAD_PREFIX)  # one producer thread, ours
    mine = [c[:-1] for c in calls if c[-1] == main]
    assert mine[:2] == [("record", 1, "current"), ("wait", 1, "side")]  # at iter(): after your work
    assert calls.index(("wait", 1, "side", main)) < min(i for i, c in enumerate(calls) if c[0] == "ask")
    done = [c[1] for c in producer if c[0] == "record"]
    assert [c[1] for c in mine if c[0] == "wait" and c[2] == "current"] == done  # each waited for, in order
    released = [c[1] for c in mine[2:] if c[0] == "record"]
    assert len(released) == 5 and all(c[2] == "current" for c in mine[2:] if c[0] == "record")  # 4 + close
    assert producer[0] == ("enter", "side") and producer[-1] == ("exit", "side")
    assert not [c for c in calls if c[0] == "host waits"], "no blocking wait: it polls"
    asks = [i for i, c in enumerate(producer) if c[0] == "ask"]
    polled = [c[1:] for c in producer if c[0] == "poll"]
    assert polled == [(released[0], False), (released[0], True), (released[1], False), (released[1], True)]
    for k in range(3, 5):  # batch k is made only after the release of batch k - 3 (depth + 2 = 3 slots)
        ready = producer.index(("poll", released[k - 3], True))
        assert asks[k] < ready < producer.index(("record", done[k], "side"))
    at = {c[:2]: i for i, c in enumerate(calls)}
    assert all(at["record", n] < at["wait", n] for n in done)  # each waited for after its record
    for got_batch, want in zip(got, batches(5)):
        assert got_batch[0].dtype == torch.float32 and torch.allclose(got_batch[0], want[0] / 255)
        assert torch.equal(got_batch[1], want[1])


def blocked(state: str, monkeypatch):
    """A prefetcher pass whose producer is in ``state``, and a way to let it go: (iterator, go)."""
    gate = threading.Event()
    standin = StandIn(monkeypatch, done_after=None)  # releases never done: a GPU queue that does not drain

    def loader():
        for k, batch in enumerate(batches(12)):
            if state == "in the loader" and k == 1:
                gate.wait(10)  # the loader takes long over batch 1
            yield batch

    def transform(batch):
        if state == "in the transform" and calls["n"] == 1:
            gate.wait(10)
        calls["n"] += 1
        return batch

    calls = {"n": 0}
    p = standin.prefetcher(loader(), depth=1)
    p.transform = transform
    it = iter(p)
    if state != "not started":
        next(it)
    if state == "waiting for a slot":
        next(it), next(it)  # the ring's 3 slots taken: the next batch waits for a release
    deadline = time.monotonic() + 10
    while state == "waiting for a slot" and not any(c[0] == "poll" for c in standin.calls):
        assert time.monotonic() < deadline, "the producer never polled a release"
        time.sleep(0.01)
    time.sleep(0.1)  # the producer is where the state says (a full queue: blocked on put)
    return it, gate


@pytest.mark.parametrize("state", ["not started", "blocked on a full queue", "waiting for a slot",
                                   "in the loader", "in the transform"])
def test_close_returns_within_the_grace_whatever_the_producer_is_doing(state, monkeypatch):
    """Issue 47: close() used to wait up to 5 s for a producer blocked in released.synchronize()
    behind a deep GPU queue. Here no release ever completes (the stand-in's events are never
    done), the loader or the transform may be stuck for seconds: close() returns within GRACE_S
    (a loaded machine may add a little to the join's wake-up), and the thread ends by itself."""
    from gpufeed.data.producer import GRACE_S

    it, gate = blocked(state, monkeypatch)
    t0 = time.perf_counter()
    it.close()
    took = time.perf_counter() - t0
    gate.set()  # whatever was stuck returns; the thread sees the stop and makes nothing more
    deadline = time.monotonic() + 10
    while live_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    print(f"{state}: close() took {took * 1e3:.0f} ms")
    assert took < GRACE_S + 0.5, f"close() took {took:.2f} s with the producer {state}"
    assert live_threads() == []


# --- issue 29: the host work happens on the prefetcher's thread, so it overlaps a syncing loop ---

def test_cuda_prefetcher_does_its_host_work_on_its_thread_with_the_side_stream_current(on_cuda, monkeypatch):
    import gpufeed.data.prefetch as prefetch_module

    seen = {"ask": [], "pin": [], "transform": []}

    def note(what):
        seen[what].append((threading.current_thread().name, torch.cuda.current_stream()))

    def loader():
        for batch in batches(4):
            note("ask")
            yield batch

    def pin(batch):
        note("pin")
        return prefetch_module.pin.__wrapped__(batch)

    pin.__wrapped__ = prefetch_module.pin
    monkeypatch.setattr(prefetch_module, "pin", pin)

    def transform(batch):
        note("transform")
        return batch

    caller = torch.cuda.current_stream()
    p = CudaPrefetcher(loader(), "cuda", dtype=torch.float32, transform=transform)  # unpinned: pinned on the thread
    got = [(x.cpu(), y.cpu()) for x, y in p]
    assert len(got) == 4 and all(torch.allclose(x, wx.float() / 255) and torch.equal(y, wy)
                                 for (x, y), (wx, wy) in zip(got, batches(4)))
    for what, calls in seen.items():
        assert len(calls) == 4, what
        assert all(name.startswith(THREAD_PREFIX) and stream == p.stream for name, stream in calls), (what, calls)
    assert torch.cuda.current_stream() == caller != p.stream  # the caller's thread kept its own stream
    if on_cuda is not None:  # every copy to the device was issued on the side stream
        copies = {w.stream.name for s in on_cuda.streams.values() for w in on_cuda.issued_work(s) if w.kind == "copy"
                  and w.what.startswith("copy to cuda")}
        assert copies == {p.stream.name}


def test_cuda_prefetcher_memory_in_flight_is_depth_plus_two_batches_and_close_frees_it(on_cuda):
    def in_use() -> tuple[int, int]:
        """Device bytes allocated; and pinned blocks held (under the simulator). No gc.collect:
        reference counts free the batches, as they do in a training loop."""
        torch.cuda.synchronize()
        if on_cuda is None:
            return torch.cuda.memory_allocated(), 0
        on_cuda._take_freed()  # the frees the simulator's finalizers noted
        return torch.cuda.memory_allocated(), len(on_cuda.host_memory.by_ptr) - len(on_cuda.host_memory.free)

    data, depth = batches(12), 3  # unpinned: the thread pins each batch
    list(CudaPrefetcher(data, dtype=torch.float32, depth=depth))  # warm-up: the cached constants
    base = in_use()
    per_batch = sum(-(-t.nbytes // 512) * 512 for t in leaves(prepare(data[0], torch.float32)))
    for ending in ("close", "break"):
        p = CudaPrefetcher(data, dtype=torch.float32, depth=depth)
        it = iter(p)
        batch = next(it)
        deadline = time.monotonic() + 10
        while in_use()[0] - base[0] < (depth + 2) * per_batch and time.monotonic() < deadline:
            time.sleep(0.05)  # the thread fills the queue, makes one more and blocks on put
        time.sleep(0.2)
        assert in_use()[0] - base[0] == (depth + 2) * per_batch  # queue + the one made + the one in use
        del batch
        if ending == "close":
            p.close()
        else:
            del it
        assert live_threads() == []
        assert in_use() == base, ending  # no batch, pinned copy or thread left behind


def share_during(work: list[tuple[float, float]], steps: list[tuple[float, float]]) -> float:
    """The share of the ``work`` intervals' time that falls inside ``steps`` intervals ((start,
    end) in seconds, neither list overlapping itself): 1.0 is all of it hidden behind the steps."""
    inside = sum(max(0.0, min(w[1], t[1]) - max(w[0], t[0])) for w in work for t in steps)
    return inside / sum(end - start for start, end in work)


@pytest.mark.simcuda
def test_cuda_prefetcher_overlaps_a_slow_loader_with_a_loop_that_syncs_every_step():
    """Issue 29: a training loop that waits for the GPU every step (``loss.item()``) used to pay
    the loader's time and the step's one after the other (the old prefetcher asked the loader in
    ``next()``, between two steps). The loader's ``next()`` takes LOAD_S and the step STEP_S of host
    waiting, then a sync: the loads must run while the steps wait, so a step costs about
    max(LOAD_S, STEP_S), not their sum. Checked on the intervals themselves (sleeps, not speed), so
    a loaded machine cannot fail it; a wall-clock bound did (CI, 2026-11-27: 177 ms a step)."""
    from gpufeed.simcuda import simulated_cuda

    load_s = step_s = 0.1  # long beside the simulator's own host time a step (tens of ms, loaded)
    n, warm = 16, 3
    loads, steps = [], []  # (start, end) of each load's and each step's host wait, perf_counter s

    def slow_loader():
        for k in range(n):
            start = time.perf_counter()
            time.sleep(load_s)  # the loader's own host time (reading, decoding, collating)
            loads.append((start, time.perf_counter()))
            yield torch.full((2, 3, 8, 8), k, dtype=torch.uint8), torch.tensor([k])

    with simulated_cuda(seed=0):
        seen = []
        with CudaPrefetcher(slow_loader(), "cuda", dtype=torch.float32, depth=2) as p:
            for images, labels in p:
                start = time.perf_counter()
                time.sleep(step_s)  # the step: the host waits this long for the GPU, then reads the loss
                steps.append((start, time.perf_counter()))
                seen.append(((images.sum() * 255 / images.numel()).round() + 1000 * labels).item())  # a sync
    assert seen == [1001.0 * k for k in range(n)]  # each batch's mean and label, in order
    # Structural, not a speed: the loads that remain once the queue is full (one per step) happen
    # while a step waits, so their time is hidden. A loader asked between steps overlaps none of
    # it; a loaded machine delays both sides but cannot move a load out of the step it runs in.
    share = share_during(loads[warm:], steps)
    print(f"{share:.0%} of the loader's time after warm-up ran during a step")  # pytest -s shows it
    assert share > 0.6, f"only {share:.0%} of the loader's time overlapped a step"


# --- issue 35: memory bounded whatever the loop does, host waits, overlap with costly copies -------

SEEDS = (0, 1, 2, 3)  # the simulator's schedules (tests/conftest.py)


def rounded(batch) -> int:
    """Device bytes of a batch as the (simulated) caching allocator rounds them: 512 a block."""
    return sum(-(-t.nbytes // 512) * 512 for t in leaves(batch))


def never_syncing_loop(sim, p):
    """A training loop that never waits for the GPU: a step and a read of each batch, queued."""
    n = 0
    for images, labels in p:
        sim.busy(1.0, "model step")
        loss = images.mean() * labels.float().mean()  # queued behind the step, never read
        n += 1
    del loss
    return n


@pytest.mark.simcuda
@pytest.mark.parametrize("seed", SEEDS)
def test_device_memory_stays_bounded_in_a_loop_that_never_syncs(seed):
    """The host runs as far ahead of the GPU as the simulator allows (seed 0: GPU work runs only
    when a sync forces it). 40 batches through depth 1: at most depth + 3 converted batches (the
    ring's depth + 2, and the one given up that the loop has not yet let go of). The same loop
    copying on its own stream holds two (the one in use, and the next made before the loop lets go
    of it) and the same working memory (the uint8 copy, the float tensor ``normalize`` makes
    before its multiply-add, the step's scalars): the prefetcher may reserve at most depth + 1
    batches more (and the labels' small blocks). Before the ring: 41.3 batches against 3.3."""
    from gpufeed.simcuda import simulated_cuda

    data, depth = [(torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8), torch.arange(8)) for _ in range(40)], 1
    per_batch = rounded(prepare(data[0], torch.float32))
    reserved = {}
    for way in ("own stream", "CudaPrefetcher"):
        with simulated_cuda(seed) as sim:
            if way == "own stream":
                feed = (prepare(tuple(t.to("cuda", non_blocking=True) for t in b), torch.float32) for b in data)
                assert never_syncing_loop(sim, feed) == 40
            else:
                with CudaPrefetcher(data, "cuda", dtype=torch.float32, depth=depth) as p:
                    assert never_syncing_loop(sim, p) == 40
            reserved[way] = torch.cuda.memory_reserved() / per_batch
    text = ", ".join(f"{way}: {r:.1f}" for way, r in reserved.items()) + " batches of device memory reserved"
    assert reserved["CudaPrefetcher"] <= reserved["own stream"] + depth + 1.1, text


@pytest.mark.simcuda
@pytest.mark.parametrize("seed", SEEDS)
def test_the_loop_never_waits_on_the_host_the_producer_thread_does(seed):
    """A consumer that waited for a batch's event on the host (``event.synchronize()``) would pass
    a sync-debug check on a GPU (it does not report event syncs): here every host wait is counted
    by thread. The loop's thread never waits; the producer's waits for the ring's releases."""
    from gpufeed.simcuda import simulated_cuda

    with simulated_cuda(seed) as sim:
        data = [(torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8).pin_memory(), torch.arange(4)) for _ in range(12)]
        with CudaPrefetcher(data, "cuda", dtype=torch.float32, depth=1) as p:
            assert never_syncing_loop(sim, p) == 12
        waits = dict(sim.waits_by_thread)
    assert waits.get(threading.current_thread().name, []) == [], "the training loop's thread waited for the GPU"
    producer = [w for name, ws in waits.items() if name.startswith(THREAD_PREFIX) for w in ws]
    assert len(producer) >= 12 - 3, "the producer did not wait for the slots it reused"


@pytest.mark.simcuda
def test_the_copys_host_work_runs_on_the_thread_beside_a_syncing_step():
    """The batches are not pinned, and pinning them takes COPY_S of the host's real time (the
    simulator's ``host_gb_s``): done on the producer thread it overlaps the step, which waits
    STEP_S and syncs; moved into ``next()`` (between two steps) it would add to every step."""
    from gpufeed.simcuda import NominalSpeeds, simulated_cuda

    copy_s = step_s = 0.15  # long beside the simulator's own host time a step (tens of ms, loaded)
    n, warm, shape = 12, 3, (2, 3, 64, 64)
    nbytes = torch.empty(shape, dtype=torch.uint8).nbytes
    data = [(torch.full(shape, k, dtype=torch.uint8), torch.tensor([k])) for k in range(n)]
    copies, steps = [], []  # (start, end) of each image batch's pinning and each step's wait, s
    with simulated_cuda(seed=0, speeds=NominalSpeeds(host_gb_s=nbytes / copy_s / 1e9)) as sim:
        host_copy = sim.host_copy

        def timed_host_copy(size: int) -> None:
            begin = time.perf_counter()
            host_copy(size)
            if size == nbytes:  # the images, not the labels
                copies.append((begin, time.perf_counter()))

        sim.host_copy = timed_host_copy
        seen = []
        with CudaPrefetcher(data, "cuda", dtype=torch.float32, depth=2) as p:
            for images, labels in p:
                begin = time.perf_counter()
                time.sleep(step_s)  # the step: the host waits this long for the GPU, then reads the loss
                steps.append((begin, time.perf_counter()))
                seen.append(((images.sum() * 255 / images.numel()).round() + 1000 * labels).item())  # a sync
    assert seen == [1001.0 * k for k in range(n)]
    assert len(copies) == n, "each image batch pinned once"
    # Structural, as in the test above: the pinning left once the queue is full runs during steps.
    share = share_during(copies[warm:], steps)
    assert share > 0.6, f"only {share:.0%} of the pinning overlapped a step: it is not on the thread"


def test_cuda_batches_never_alias_while_held(on_cuda):
    """A loop that keeps every batch (``list``) and then reads them: distinct memory, right values,
    though the ring has only depth + 2 slots."""
    data = [(torch.full((1, 1, 64, 64), k, dtype=torch.uint8), torch.tensor([k])) for k in range(8)]
    held = list(CudaPrefetcher(data, dtype=torch.float32, depth=1))  # [1, 1, 64, 64] float32
    assert len({x.data_ptr() for x, _ in held}) == 8
    for x, _ in held:
        x.mul_(255)  # the consumer's work on each batch (back to 0..255), queued after all were made
    assert [round(x.mean().item()) for x, _ in held] == list(range(8))


# --- issue 35: edges ----------------------------------------------------------------------------

def test_a_stopiteration_from_the_transform_is_an_error_not_the_end_of_the_epoch():
    def bad(x):
        if x == 2:
            raise StopIteration
        return x

    with pytest.raises(RuntimeError, match="StopIteration on batch 2") as info:
        list(ThreadPrefetcher(range(5), transform=bad))
    assert isinstance(info.value.__cause__, StopIteration)


def test_a_stopiteration_from_a_cuda_transform_is_an_error_too(on_cuda):
    def bad(batch):
        raise StopIteration

    with pytest.raises(RuntimeError, match="StopIteration"):
        list(CudaPrefetcher(batches(3), dtype=torch.float32, transform=bad))


@pytest.mark.parametrize("depth", [0, -1, 1.5, True])
def test_prefetch_refuses_a_depth_below_one(depth):
    with pytest.raises(ValueError, match="depth must be a whole number >= 1"):
        prefetch(batches(2), "cpu", depth=depth)


def test_cuda_prefetch_refuses_depth_zero(on_cuda):
    with pytest.raises(ValueError, match="depth must be a whole number >= 1"):
        prefetch(batches(2), "cuda", depth=0)


def test_close_does_not_wait_for_one_more_batch_from_the_loader():
    made = []

    def slow():
        yield 0
        time.sleep(1.5)  # the loader is busy with the next batch when the loop stops
        yield 1

    it = iter(ThreadPrefetcher(slow(), depth=1, transform=lambda b: made.append(b) or b))
    assert next(it) == 0
    time.sleep(0.1)  # the producer is inside the loader's next()
    t0 = time.perf_counter()
    it.close()
    took = time.perf_counter() - t0
    assert took < 0.75, f"close() waited {took:.2f} s for the loader"
    deadline = time.monotonic() + 5
    while live_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_threads() == [] and made == [0], "nothing is made after the stop"
    assert it._queue.empty(), "no late put left behind"


class ClosingFails:
    """An iterator whose close() raises (a loader that cannot release its files)."""

    def __init__(self, n):
        self.left = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.left == 0:
            raise StopIteration
        self.left -= 1
        return self.left

    def close(self):
        raise OSError("cannot release the data files")


def test_an_error_from_the_loaders_close_surfaces_at_the_end_of_the_data():
    it = iter(ThreadPrefetcher(ClosingFails(3)))
    assert [next(it), next(it), next(it)] == [2, 1, 0]
    with pytest.raises(OSError, match="cannot release"):
        next(it)


def test_an_error_from_the_loaders_close_surfaces_from_close_or_as_a_warning_after_a_break():
    p = ThreadPrefetcher(ClosingFails(100), depth=1)
    it = iter(p)
    next(it)
    with pytest.raises(OSError, match="cannot release"):
        p.close()
    assert live_threads() == []
    with pytest.warns(RuntimeWarning, match="cannot release"):
        for _ in p:
            break  # the loop's iterator is collected here: its finaliser cannot raise, it warns
        del _
        gc.collect()
    assert live_threads() == []


@pytest.mark.simcuda
def test_inputs_already_on_the_gpu_wait_once_a_pass_not_for_every_step():
    """Inputs on the GPU made before iter(): the side stream waits for an event recorded then,
    once a pass; waiting for the consumer's stream at every batch would put every copy behind
    the step before it (no overlap at all)."""
    from gpufeed.simcuda import simulated_cuda

    with simulated_cuda(seed=0) as sim:
        gpu = [(torch.full((2, 3, 8, 8), k, dtype=torch.uint8, device="cuda"), torch.tensor([k], device="cuda"))
               for k in range(6)]
        p = CudaPrefetcher(gpu, "cuda", dtype=torch.float32, depth=1)
        got = []
        for images, labels in p:
            sim.busy(1.0, "model step")
            got.append(images.mean() * 255 + 1000 * labels)
        waits = [w for w in sim.issued_work(p.stream) if w.kind == "wait"]
        values = torch.cat(got).tolist()
    assert values == [1001.0 * k for k in range(6)]
    assert len(waits) == 1, [w.what for w in waits]


# --- issue 47: the prefetcher's GPU-only edges ----------------------------------------------------

def pinned_batches(n, shape=(2, 3, 8, 8)):
    """``n`` pinned batches, batch ``k`` all ``k`` (its images) and ``[k]`` (its label)."""
    return [(torch.full(shape, k, dtype=torch.uint8).pin_memory(), torch.tensor([k])) for k in range(n)]


@pytest.mark.simcuda
@pytest.mark.parametrize("seed", SEEDS)
def test_a_batch_used_on_another_stream_is_a_race_unless_ordered_and_marked(seed):
    """The stream contract: a batch is ready on the stream current at ``next()``. A loop that
    computes in ``with torch.cuda.stream(s):`` reads it before its copy (the simulator raises
    where); ``s.wait_stream(current)`` and ``record_stream(s)``, as the docstring says, order it,
    and ``current.wait_stream(s)`` before the next ``next()`` keeps the ring's back-pressure."""
    from gpufeed.simcuda import CudaRaceError, simulated_cuda

    with simulated_cuda(seed), pytest.raises(CudaRaceError, match="read after write"):
        s = torch.cuda.Stream()
        for images, _ in CudaPrefetcher(pinned_batches(4), "cuda", dtype=torch.float32):
            with torch.cuda.stream(s):
                images.sum()  # on s: nothing orders it after the batch's copy
    with simulated_cuda(seed) as sim:
        s, got = torch.cuda.Stream(), []
        for images, labels in CudaPrefetcher(pinned_batches(6), "cuda", dtype=torch.float32):
            current = torch.cuda.current_stream()
            s.wait_stream(current)
            for t in (images, labels):
                t.record_stream(s)
            with torch.cuda.stream(s):
                sim.busy(1.0, "model step")
                got.append(images.mean() * 255 + 1000 * labels)
            current.wait_stream(s)  # the release recorded at the next next() follows s's work
            del images, labels
        assert torch.cat(got).tolist() == [1001.0 * k for k in range(6)] and sim.races == []


@pytest.mark.simcuda
@pytest.mark.parametrize("depth", [1, 2])
def test_the_thread_makes_batch_k_once_your_stream_is_done_with_batch_k_minus_depth_minus_2(depth):
    """The ring has exactly depth + 2 slots. Under schedule 0 the GPU runs only when the host
    makes it: in a loop that never syncs only the producer's polls of the releases move it. So
    when batch k is made (its transform runs), the work the loop queued on batch k - depth - 2 is
    done, and no more is needed: a ring one slot larger would make batch k sooner, before that
    work ran (and the memory bound would grow by a batch)."""
    from gpufeed.simcuda import simulated_cuda

    slots, n = depth + 2, 10
    with simulated_cuda(seed=0) as sim:
        made_at = []  # the default stream's steps run when each batch was made

        def transform(batch):
            made_at.append(sim.default.done)
            return batch

        queued = []  # the default stream's steps issued once the loop queued its work on batch j
        for images, labels in CudaPrefetcher(pinned_batches(n), "cuda", dtype=torch.float32, depth=depth,
                                             transform=transform):
            sim.busy(1.0, "model step")
            loss = images.mean() * labels.float().mean()  # queued behind the step, never read
            queued.append(sim.default.issued)
        del loss
    assert len(made_at) == n
    for k in range(slots, n):
        assert made_at[k] >= queued[k - slots], f"batch {k} made before the loop's work on batch {k - slots} ran"
    assert any(made_at[k] < queued[k - slots + 1] for k in range(slots, n)), \
        "the thread waited for more than depth + 2 slots need"


@pytest.mark.simcuda
@pytest.mark.parametrize("seed", SEEDS)
def test_device_memory_stays_bounded_across_many_short_passes_of_a_loop_that_never_syncs(seed):
    """One prefetcher, 20 passes of 2 batches each, a loop that never syncs. Each pass alone
    holds fewer batches than the ring has slots, so within a pass the thread never waits; what
    bounds memory across passes is that a pass's first batch waits for the last pass's release
    (the close of the pass before). Without it every pass adds its batches: 40 in all."""
    from gpufeed.simcuda import simulated_cuda

    data, depth = [(torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8), torch.arange(8)) for _ in range(2)], 1
    per_batch = rounded(prepare(data[0], torch.float32))
    with simulated_cuda(seed) as sim:
        p = CudaPrefetcher(data, "cuda", dtype=torch.float32, depth=depth)
        assert sum(never_syncing_loop(sim, p) for _ in range(20)) == 40
        reserved = torch.cuda.memory_reserved() / per_batch
    assert reserved <= depth + 4.1, f"{reserved:.1f} batches of device memory reserved over 20 passes"


def test_close_returns_within_the_grace_behind_a_deep_gpu_queue(on_cuda):
    """On a GPU: your stream holds a long kernel and the loop never syncs, so the ring's slots are
    not released for a while and the thread waits for one; close() returns within the grace (the
    thread polls the release with the stop flag). Under the simulator the wait is nominal."""
    from gpufeed.data.producer import GRACE_S

    p = CudaPrefetcher(pinned_batches(8), "cuda", dtype=torch.float32, depth=1)
    it = iter(p)
    for _ in range(3):  # the ring's 3 slots: the next batch waits for the first one's release
        images, _labels = next(it)
        torch.cuda._sleep(int(2e9))  # about 1.5 s of GPU time each on an H100, queued, never waited for
        del images, _labels
    time.sleep(0.1)
    t0 = time.perf_counter()
    it.close()
    took = time.perf_counter() - t0
    assert took < GRACE_S + 0.5, f"close() took {took:.2f} s behind the GPU's queue"
    torch.cuda.synchronize()
    deadline = time.monotonic() + 10
    while live_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert live_threads() == []
