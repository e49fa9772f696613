"""The library's CUDA paths, each against its CPU path, on a real GPU (marker ``cuda``) and under
the CUDA-ordering simulator with four schedules everywhere (marker ``simcuda``): the ``on_cuda``
fixture of ``tests/conftest.py``.

The consumers here work as a training loop does: they queue work on each batch and drop it
without waiting, and read the results at the end. Under the simulator that is what exposes a
missing ``wait_stream``/``wait_event`` (a read before the copy), a missing ``record_stream`` (the
memory handed out again while still being read) and a missing ``synchronize`` (a pinned buffer
refilled while its copy is pending): each raises a CudaRaceError where it happens, and gives a
wrong batch under some schedule. ``tests/test_simcuda_mutations.py`` deletes those calls from
``gpufeed.data`` one at a time and checks that this file then fails.
"""

import threading

import pytest
import torch
from tensordict import TensorDict

from gpufeed.data.device_augment import DeviceAugment
from gpufeed.data.image_loader import ImageLoader
from gpufeed.data.loader import FastLoader
from gpufeed.data.memmap import build_memmap
from gpufeed.data.movers import equal, leaves, to_device
from gpufeed.data.prefetch import CudaPrefetcher, prefetch
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cudapaths")
    src = synth_folder(tmp / "jpeg", n=14, size=(48, 40), classes=3, progress=False).path
    return build_memmap(src, tmp / "mm", size=(24, 20), progress=False).path


def deferred(batches) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per batch, the images summed per sample and the targets, queued on the device and read at
    the end; each batch is dropped as soon as its work is queued."""
    queued = []
    for images, targets in batches:
        queued.append((images.float().sum(dim=(1, 2, 3)), targets * 1))
        del images, targets
    return [(s.cpu(), t.cpu()) for s, t in queued]


def same(got, want) -> None:
    assert len(got) == len(want)
    for (gs, gt), (ws, wt) in zip(got, want):
        assert torch.equal(gt, wt) and torch.allclose(gs, ws, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_image_loader_batches_read_later_are_the_cpus(mm, dtype, on_cuda):
    for kwargs in ({}, {"drop_last": True, "depth": 1}, {"rank": 1, "world_size": 2, "seed": 4}):
        cpu = ImageLoader(mm, 4, crop=16, device="cpu", dtype=dtype, **kwargs)
        gpu = ImageLoader(mm, 4, crop=16, device="cuda", dtype=dtype, **kwargs)
        for _ in range(2):  # two epochs: a new order and new crops, the same on both
            same(deferred(gpu), deferred(cpu))


def test_image_loader_two_live_iterators_a_break_and_set_epoch(mm, on_cuda):
    cpu, gpu = ImageLoader(mm, 4, crop=16, device="cpu"), ImageLoader(mm, 4, crop=16, device="cuda")
    a_gpu, b_gpu, a_cpu, b_cpu = iter(gpu), iter(gpu), iter(cpu), iter(cpu)  # epochs 0 and 1, side by side
    same(deferred(zip_batches(a_gpu, b_gpu)), deferred(zip_batches(a_cpu, b_cpu)))
    for loader in (gpu, cpu):
        for i, _ in enumerate(loader):  # epoch 2, left after one batch
            if i == 1:
                break
        loader.set_epoch(7)
    same(deferred(gpu), deferred(cpu))  # epoch 7, whole


def zip_batches(a, b):
    """Both iterators' batches, alternating (their images summed into one batch so that both are read)."""
    for (xa, ya), (xb, yb) in zip(a, b):
        yield torch.cat([xa, xb]), torch.cat([ya, yb])


def test_cuda_prefetcher_inputs_already_on_the_gpu_are_waited_for_and_kept_alive(on_cuda):
    """A loader that makes each batch on the consumer's stream (work on the GPU) and drops it at
    once. As a loader of GPU tensors must (``FastLoader(device="cuda")`` does), it makes the stream
    current where it is asked (the prefetcher's side stream) wait for that work; the side stream
    reads those inputs (their conversion to float), so the prefetcher must mark them as used by
    the side stream (``record_stream``): else their memory goes back to the consumer's stream when
    the producer drops them, and the loader's next batch, allocated there, is written over them
    while their conversion may still be pending. (Inputs made before ``iter()`` on the consumer's
    stream are ordered by the prefetcher itself, once a pass: ``tests/test_prefetch.py``.)

    The hazard exists only while the producer thread runs ahead of the consumer: once the
    consumer has taken batch k (its stream then waits for batch k's event), later work on its
    stream is ordered after that conversion. So the consumer starts only when the loader has made
    batch ``depth`` (the most the thread makes before the queue of ``depth`` is full): batch 0's
    inputs were freed as soon as their conversion was issued, and batch 1, the next allocations
    on that stream, went into their memory. A signal, not a sleep: the thread's speed (a first
    import on it may take seconds) decides nothing. Under the simulator the deletion raises a
    CudaRaceError under every schedule; on a GPU, some batch could come out wrong."""
    depth = 2
    want = [(torch.full((2, 3, 4, 4), k, dtype=torch.uint8), torch.tensor([k, k])) for k in range(6)]
    consumer = torch.cuda.current_stream()
    ahead = threading.Event()  # set once the loader has made batch `depth`

    def on_the_gpu(k):  # on the consumer's stream (the prefetcher asks with its side stream current)
        x, y = want[k]
        asked_on = torch.cuda.current_stream()
        with torch.cuda.stream(consumer):
            batch = x.pin_memory().to("cuda", non_blocking=True) + 0, y.to("cuda", non_blocking=True) + 0
        asked_on.wait_stream(consumer)  # the loader's duty: ready on the stream it was asked on
        if k == depth:
            ahead.set()
        return batch

    def made_on_the_gpu():
        try:
            for k in range(len(want)):
                yield on_the_gpu(k)  # the loader keeps no reference to what it handed over
        finally:
            ahead.set()  # also when making a batch raised (a race): the consumer sees the error

    it = iter(CudaPrefetcher(made_on_the_gpu(), "cuda", dtype=torch.float32, depth=depth))
    assert ahead.wait(timeout=120), "the prefetcher's thread never made batch `depth`"
    same(deferred(it), [(x.float().sum(dim=(1, 2, 3)) / 255, y) for x, y in want])


class GatherOnTheGpu:
    """A loader whose own kernels read GPU memory: batch ``k`` is a copy of ``data[k]``, made on
    the stream current where it is asked (the prefetcher's side stream, on its thread)."""

    def __init__(self, data: torch.Tensor):
        self.data = data  # uint8 [n, B, 3, H, W] on the GPU

    def __iter__(self):
        for k in range(self.data.shape[0]):
            yield self.data[k].clone(), torch.tensor([k])


def test_cuda_prefetcher_loader_kernels_read_what_your_loop_wrote_before_iter(on_cuda):
    """Issue 47: the side stream's once-a-pass wait for your loop's work must be issued before the
    loader is first asked, since the loader's own kernels run on the side stream. Here the loop
    rewrites the loader's GPU data before each pass (behind a long kernel, so on a GPU the write
    lands late), and the loader gathers from it. One prefetcher, two passes: the event is recorded
    at each iter(), not once when the prefetcher is made. Read later, as a training loop does."""
    base = torch.randint(0, 200, (5, 2, 3, 4, 4), dtype=torch.uint8)
    data = base.to("cuda")
    torch.cuda.synchronize()
    p = CudaPrefetcher(GatherOnTheGpu(data), "cuda", dtype=torch.float32, depth=1)
    for epoch in (1, 2):
        torch.cuda._sleep(int(5e7))  # your stream is busy for a while (a GPU: tens of ms)
        data.add_(1)  # your loop's last write before iter(), queued behind it
        want = [((base[k] + epoch).float().sum(dim=(1, 2, 3)) / 255, torch.tensor([k])) for k in range(5)]
        same(deferred(p), want)


@pytest.mark.parametrize("depth", [1, 3])
def test_cuda_prefetcher_batches_read_later_are_the_loaders(depth, on_cuda):
    want = [(torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8), torch.arange(4) + k) for k in range(7)]
    got = deferred(CudaPrefetcher(want, "cuda", dtype=torch.float32, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                                  depth=depth))
    cpu = deferred(prefetch(want, "cpu", dtype=torch.float32, mean=IMAGENET_MEAN, std=IMAGENET_STD))
    same(got, cpu)


@pytest.mark.parametrize("reuse", [0, 1, 3])
def test_fast_loader_on_cuda_with_a_pinned_ring_read_later(reuse, on_cuda):
    x, y = torch.randint(0, 256, (30, 3, 8, 8), dtype=torch.uint8), torch.arange(30)
    gpu = FastLoader((x, y), batch_size=4, seed=1, device="cuda", reuse_buffers=reuse)
    cpu = FastLoader((x, y), batch_size=4, seed=1)
    for _ in range(2):
        same(deferred(gpu), deferred(cpu))


def test_device_augment_on_the_gpu_is_the_cpus(on_cuda):
    x = torch.randint(0, 256, (6, 3, 12, 10), dtype=torch.uint8)
    for dtype in (torch.float32, torch.uint8):
        gpu = DeviceAugment(8, seed=3, dtype=dtype)(x.cuda())
        cpu = DeviceAugment(8, seed=3, dtype=dtype)(x)
        assert gpu.is_cuda and torch.allclose(gpu.cpu().float(), cpu.float(), atol=1e-5)


def test_movers_send_nested_batches_without_blocking(on_cuda):
    batch = {"images": torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8),
             "meta": [torch.arange(3), (torch.ones(2),)],
             "td": TensorDict({"a": torch.zeros(2, 5)}, batch_size=[2])}
    moved = to_device({k: (v.pin_memory() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()},
                      "cuda", non_blocking=True)
    assert all(t.is_cuda for t in leaves(moved))
    torch.cuda.synchronize()
    assert equal(moved, batch)


@pytest.mark.parametrize("reuse", [1, 3])
def test_fast_loader_pinned_ring_waits_for_the_consumers_copies(reuse, on_cuda):
    """Issue 26, defect 7: with ``pin_memory=True`` and ``reuse_buffers=k`` the consumer copies each
    batch with ``non_blocking=True``; slot j must not be refilled while that copy may be queued. An
    event recorded on the consumer's stream when it asks for the next batch guards it."""
    x, y = torch.randint(0, 256, (30, 3, 8, 8), dtype=torch.uint8), torch.arange(30)
    pinned = FastLoader((x, y), batch_size=4, seed=1, pin_memory=True, reuse_buffers=reuse)
    cpu = FastLoader((x, y), batch_size=4, seed=1)
    for _ in range(2):
        got = deferred((xb.to("cuda", non_blocking=True), yb.to("cuda", non_blocking=True)) for xb, yb in pinned)
        same(got, deferred(cpu))


def test_fast_loader_pinned_ring_under_a_cuda_prefetcher_is_guarded_on_its_side_stream(on_cuda):
    """The prefetcher copies on its side stream: it asks for the next batch with that stream current."""
    x, y = torch.randint(0, 256, (30, 3, 8, 8), dtype=torch.uint8), torch.arange(30)
    pinned = FastLoader((x, y), batch_size=4, seed=1, pin_memory=True, reuse_buffers=1)
    cpu = FastLoader((x, y), batch_size=4, seed=1)
    for depth in (1, 2):
        same(deferred(CudaPrefetcher(pinned, "cuda", depth=depth)), deferred(cpu))


def test_fast_loader_on_cuda_copies_on_its_own_side_stream(on_cuda):
    """Issue 26, defect 10: the copies used to go on the consumer's current stream, queued behind
    its compute; on a side stream of the loader's they overlap it, ordered by wait_stream and kept
    alive with record_stream (the read-later tests above fail without either)."""
    x, y = torch.randint(0, 256, (30, 3, 8, 8), dtype=torch.uint8), torch.arange(30)
    for reuse in (0, 2):
        loader = FastLoader((x, y), batch_size=4, seed=1, device="cuda", reuse_buffers=reuse)
        cpu = FastLoader((x, y), batch_size=4, seed=1)
        for _ in range(2):
            same(deferred(loader), deferred(cpu))
        if on_cuda is not None:
            current = torch.cuda.current_stream()
            copies = {w.stream.name for s in on_cuda.streams.values() for w in on_cuda.issued_work(s)
                      if w.kind == "copy" and w.what.startswith("copy to cuda")}
            assert copies and current.name not in copies, copies


def test_a_loader_keeps_one_side_stream_per_device(on_cuda):
    """FastLoader and ImageLoader share one helper: a device's stream is made once, whichever way
    the device is named, so every epoch's blocks come back to one stream's pool."""
    from gpufeed.data.streams import SideStreams

    streams = SideStreams()
    first = streams.on()
    assert first is streams.on(torch.device("cuda")) is streams.on(torch.device("cuda", 0))
    assert first is not SideStreams().on() and first is not torch.cuda.current_stream()


def test_cuda_prefetcher_batches_kept_together_never_share_memory(on_cuda):
    """A loader that reuses one pinned buffer for every batch: each batch the prefetcher yields is
    new device memory, so a list of them holds every batch (as ``list(loader)`` must)."""
    x, y = torch.randint(0, 256, (30, 3, 8, 8), dtype=torch.uint8), torch.arange(30)
    for depth in (1, 3):
        ring = FastLoader((x, y), batch_size=4, seed=1, pin_memory=True, reuse_buffers=1)
        got = list(CudaPrefetcher(ring, "cuda", depth=depth))
        assert len({xb.data_ptr() for xb, _ in got}) == len(got) == 8
        same([(xb.float().sum(dim=(1, 2, 3)).cpu(), yb.cpu()) for xb, yb in got],
             deferred(FastLoader((x, y), batch_size=4, seed=1)))
