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
from gpufeed.data.prefetch import (
    THREAD_PREFIX,
    CudaPrefetcher,
    ThreadPrefetcher,
    prefetch,
    prepare,
)

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


def test_cuda_prefetcher_protocol_with_a_stand_in_for_torch_cuda(monkeypatch):
    """Runs without a GPU: torch.cuda's streams and events are replaced by recorders, so that the
    order of the protocol is checked: on the prefetcher's thread, with the side stream current for
    its whole life, each batch is asked for, copied and its event recorded; on the caller's thread,
    the current stream waits for that event at hand-over, after it was recorded."""
    import contextlib

    calls = []

    def log(*call):
        calls.append((*call, threading.current_thread().name))

    class Stream:
        def __init__(self, name="side"):
            self.name = name

        def wait_event(self, event):
            log("wait", event.n)

    class Event:
        count = 0

        def record(self, stream):
            Event.count += 1
            self.n = Event.count
            log("record", self.n, stream.name)

    @contextlib.contextmanager
    def stream(s):
        log("enter", s.name)
        yield
        log("exit", s.name)

    def loader():
        for k, batch in enumerate(batches(4)):
            log("ask", k)
            yield batch

    for name, value in {"is_available": lambda: True, "current_device": lambda: 0, "Stream": lambda device: Stream(),
                        "Event": Event, "stream": stream, "current_stream": lambda device: Stream("current"),
                        "device": lambda device: contextlib.nullcontext()}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    p = CudaPrefetcher(loader(), "cuda", dtype=torch.float32, depth=2, pin_memory=False)
    p.device = torch.device("cpu")  # the copies themselves stay on the CPU here
    got = list(p)
    main = threading.current_thread().name
    producer = [c[:-1] for c in calls if c[-1] != main]
    threads = {c[-1] for c in calls if c[-1] != main}
    assert len(threads) == 1 and threads.pop().startswith(THREAD_PREFIX)  # one producer thread, ours
    assert producer == [("enter", "side"), *[c for k in range(4) for c in (("ask", k), ("record", k + 1, "side"))],
                        ("exit", "side")]  # one side stream current for the thread's whole life
    assert [c[:-1] for c in calls if c[-1] == main] == [("wait", n) for n in range(1, 5)]  # only the waits here
    at = {c[:2]: i for i, c in enumerate(calls)}
    assert all(at["record", n] < at["wait", n] for n in range(1, 5))  # each waited for after its record
    for got_batch, want in zip(got, batches(4)):
        assert got_batch[0].dtype == torch.float32 and torch.allclose(got_batch[0], want[0] / 255)
        assert torch.equal(got_batch[1], want[1])


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


@pytest.mark.simcuda
def test_cuda_prefetcher_overlaps_a_slow_loader_with_a_loop_that_syncs_every_step():
    """Issue 29: a training loop that waits for the GPU every step (``loss.item()``) used to pay
    the loader's time and the step's one after the other (the old prefetcher asked the loader in
    ``next()``, between two steps). The loader's ``next()`` takes LOAD_S and the step STEP_S of host
    waiting, then a sync: per step it must take about max(LOAD_S, STEP_S), not their sum. A
    structural check with wide margins (sleeps, not speed), under the simulator."""
    from gpufeed.simcuda import simulated_cuda

    load_s = step_s = 0.04
    n, warm = 24, 4

    def slow_loader():
        for k in range(n):
            time.sleep(load_s)  # the loader's own host time (reading, decoding, collating)
            yield torch.full((2, 3, 8, 8), k, dtype=torch.uint8), torch.tensor([k])

    with simulated_cuda(seed=0):
        ends, seen = [], []
        with CudaPrefetcher(slow_loader(), "cuda", dtype=torch.float32, depth=2) as p:
            for images, labels in p:
                time.sleep(step_s)  # the step: the host waits this long for the GPU, then reads the loss
                seen.append(((images.sum() * 255 / images.numel()).round() + 1000 * labels).item())  # a sync
                ends.append(time.perf_counter())
    assert seen == [1001.0 * k for k in range(n)]  # each batch's mean and label, in order
    per_step = (ends[-1] - ends[warm]) / (n - 1 - warm)
    ms = f"{per_step * 1e3:.1f} ms per step (load {load_s * 1e3:.0f} ms, step {step_s * 1e3:.0f} ms)"
    print(ms)  # pytest -s shows it
    assert per_step > 0.95 * max(load_s, step_s), ms  # a sleep cannot be shorter: the clock is right
    assert per_step < 0.8 * (load_s + step_s), f"{ms}: the loader's time is not overlapped with the step"
