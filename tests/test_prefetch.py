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
    Lookahead,
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


# --- the lookahead core of the CUDA prefetcher (no GPU needed) ---------------------------------

@pytest.mark.parametrize("depth", [1, 2, 10])
def test_lookahead_keeps_order_and_starts_ahead(depth):
    started = []
    it = Lookahead(iter(range(6)), depth, start=lambda x: started.append(x) or x, finish=lambda x: x)
    assert started == list(range(min(depth, 6)))  # started before the first next()
    assert next(it) == 0 and started == list(range(min(depth + 1, 6)))
    assert list(it) == [1, 2, 3, 4, 5]


def test_lookahead_raises_once_after_the_items_before_the_error():
    it = Lookahead(failing(3), 2, start=lambda b: b, finish=lambda b: b)
    got = [next(it) for _ in range(3)]
    assert all(equal(a, b) for a, b in zip(got, batches(3)))
    with pytest.raises(ValueError, match="boom") as info:
        next(it)
    assert "gen" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]  # the loader's frame
    with pytest.raises(StopIteration):
        next(it)


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
    order of the protocol is checked: each batch's copy is issued on the side stream and its event
    recorded there, before the current stream is made to wait for that event at hand-over."""
    import contextlib

    calls = []

    class Stream:
        def __init__(self, name="side"):
            self.name = name

        def wait_event(self, event):
            calls.append(("wait", event.n))

    class Event:
        count = 0

        def record(self, stream):
            Event.count += 1
            self.n = Event.count
            calls.append(("record", self.n, stream.name))

    @contextlib.contextmanager
    def stream(s):
        calls.append(("enter", s.name))
        yield
        calls.append(("exit", s.name))

    for name, value in {"is_available": lambda: True, "current_device": lambda: 0, "Stream": lambda device: Stream(),
                        "Event": Event, "stream": stream, "current_stream": lambda device: Stream("current"),
                        "device": lambda device: contextlib.nullcontext()}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    p = CudaPrefetcher(batches(4), "cuda", dtype=torch.float32, depth=2, pin_memory=False)
    p.device = torch.device("cpu")  # the copies themselves stay on the CPU here
    ask = [("enter", "side"), ("exit", "side")]  # each batch is asked for with the side stream current
    started = [*ask, ("enter", "side"), ("record", 1, "side"), ("exit", "side"),
               *ask, ("enter", "side"), ("record", 2, "side"), ("exit", "side")]
    it = iter(p)
    assert calls == started  # two batches in flight before the first is asked for
    first = next(it)
    assert calls == [*started, ("wait", 1), *ask, ("enter", "side"), ("record", 3, "side"), ("exit", "side")]
    rest = list(it)  # batch k is waited for only when it is handed over, after its copy was issued
    assert [c[1] for c in calls if c[0] == "wait"] == [1, 2, 3, 4]
    assert all(calls.index(("record", n, "side")) < calls.index(("wait", n)) for n in range(1, 5))
    for got, want in zip([first, *rest], batches(4)):
        assert got[0].dtype == torch.float32 and torch.allclose(got[0], want[0] / 255) and torch.equal(got[1], want[1])
