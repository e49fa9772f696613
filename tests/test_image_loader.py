"""The front door, gpufeed.data.ImageLoader: against a naive reference, its options, its errors."""

import pytest
import torch
from cudacheck import consume_on_the_gpu, no_host_sync

import gpufeed.data
from gpufeed.data.buffers import _HAS_USE_COUNT  # torch's storage use count
from gpufeed.data.image_loader import ImageLoader
from gpufeed.data.memmap import MemmapError, build_memmap, load_memmap
from gpufeed.data.orders import seeded_generator
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize
from gpufeed.measure.synth import synth_folder

CUDA = torch.cuda.is_available()




@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    src = synth_folder(tmp / "jpeg", n=14, size=(48, 40), classes=3, progress=False).path
    return build_memmap(src, tmp / "mm", size=(24, 20), progress=False).path  # (width, height): 20 high, 24 wide


def naive(path, batch_size, crop, *, seed=0, epoch=0, rank=0, world_size=1, drop_last=False, flip=True, shuffle=True,
          mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """By hand: the epoch's order, then per image a slice, a flip and (x / 255 - mean) / std."""
    data = load_memmap(path)
    n, _, h, w = data.images.shape
    order = torch.randperm(n, generator=seeded_generator(seed, epoch)) if shuffle else torch.arange(n)
    if drop_last:  # disjoint parts, sizes differing by at most one
        base, extra = divmod(n, world_size)
        lo = rank * base + min(rank, extra)
        order = order[lo:lo + base + (rank < extra)]
    else:  # padded with the order's start to ceil(n / world_size) a rank, as DistributedSampler pads
        per = -(-n // world_size)
        order = torch.cat([order, order[:per * world_size - n]])[rank * per:(rank + 1) * per]
    cut = (n // world_size) // batch_size * batch_size if drop_last else len(order)
    g = seeded_generator(seed, epoch, rank, 1)
    out = []
    for idx in order[:cut].split(batch_size):
        b = len(idx)
        tops = torch.randint(0, h - crop + 1, (b,), generator=g)
        lefts = torch.randint(0, w - crop + 1, (b,), generator=g)
        flips = torch.rand(b, generator=g) < (0.5 if flip else 0.0)
        images = []
        for i, t, s, f in zip(idx.tolist(), tops.tolist(), lefts.tolist(), flips.tolist()):
            x = data.images[i, :, t:t + crop, s:s + crop].double() / 255
            x = x.flip(-1) if f else x
            if mean is not None:
                x = (x - torch.tensor(mean, dtype=torch.float64).view(3, 1, 1)) / torch.tensor(std, dtype=torch.float64).view(3, 1, 1)
            images.append(x.float())
        out.append((torch.stack(images), data.targets[idx]))
    return out


def same(got, want, atol=1e-5):
    assert len(got) == len(want)
    for (x, y), (rx, ry) in zip(got, want):
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert torch.equal(y.cpu(), ry) and torch.allclose(x.cpu(), rx, atol=atol)


def test_the_front_door_is_exported_lazily():
    assert gpufeed.data.ImageLoader is ImageLoader


@pytest.mark.parametrize("kwargs", [{}, {"drop_last": True, "seed": 3}, {"flip": False, "shuffle": False},
                                    {"mean": None, "std": None}, {"rank": 1, "world_size": 3, "drop_last": True}])
def test_batches_are_the_naive_slice_flip_normalise(mm, kwargs):
    loader = ImageLoader(mm, 4, crop=16, **kwargs)
    for epoch in range(2):  # each iter() is the next epoch, reshuffled
        same(list(loader), naive(mm, 4, 16, epoch=epoch, **kwargs))


@pytest.mark.parametrize("threads", [1, 2])
def test_uint8_out_is_the_crops_as_stored_and_normalises_to_the_float_batches(mm, threads):
    raw = list(ImageLoader(mm, 4, crop=16, dtype=torch.uint8, threads=threads))  # ImageNet's defaults unused
    assert all(x.dtype == torch.uint8 for x, _ in raw)
    want = naive(mm, 4, 16, mean=None, std=None)  # the naive slices and flips, / 255
    for (x, y), (wx, wy) in zip(raw, want, strict=True):
        assert torch.equal(y, wy) and torch.equal(x, (wx.double() * 255).round().to(torch.uint8))
    floats = list(ImageLoader(mm, 4, crop=16, threads=threads))
    for (x, _), (f, _) in zip(raw, floats, strict=True):  # normalise on the far side: the float path's values
        assert torch.allclose(normalize(x, torch.float32, IMAGENET_MEAN, IMAGENET_STD), f, atol=1e-6)
    assert ImageLoader(mm, 4, dtype=torch.uint8, mean=None, std=None).mean is None


def test_an_error_in_a_crop_task_reaches_the_loop_and_stops_the_epoch(mm, monkeypatch):
    import gpufeed.data.device_augment as il  # DeviceAugment.tasks makes the tasks there

    real, calls = il.crop_tasks, []

    def failing(*args, **kwargs):
        calls.append(1)
        tasks = real(*args, **kwargs)
        if len(calls) == 2:
            tasks[0] = lambda: 1 / 0  # the second batch's first group fails, on a pool thread
        return tasks

    monkeypatch.setattr(il, "crop_tasks", failing)
    loader = ImageLoader(mm, 4, crop=16, depth=1, reuse_buffers=1)
    it = iter(loader)
    next(it)
    with pytest.raises(ZeroDivisionError):
        next(it)
    monkeypatch.setattr(il, "crop_tasks", real)
    loader.set_epoch(0)
    same([(x.clone(), y) for x, y in loader], naive(mm, 4, 16))  # the ring came back: the next epoch is right


def test_epochs_reshuffle_and_set_epoch_repeats_one(mm):
    loader = ImageLoader(mm, 5, crop=16, seed=1)
    first, second = list(loader), list(loader)
    assert not torch.equal(torch.cat([y for _, y in first]), torch.cat([y for _, y in second]))
    loader.set_epoch(0)
    same(list(loader), [(x.cpu(), y.cpu()) for x, y in first], atol=0)
    assert [len(i) for i in loader.indices(0)] == [5, 5, 4] and len(loader) == 3


def test_yielded_batches_stay_valid_and_never_alias(mm):
    loader = ImageLoader(mm, 4, crop=16, depth=1)
    got = list(loader)
    same(got, naive(mm, 4, 16))
    assert len({x.data_ptr() for x, _ in got}) == len(got) == len({y.data_ptr() for _, y in got})


def test_two_live_iterators_do_not_disturb_each_other(mm):
    loader = ImageLoader(mm, 4, crop=16)
    loader.set_epoch(0)
    a = iter(loader)
    loader.set_epoch(0)
    b = iter(loader)
    got_a, got_b = [], []
    for xa, xb in zip(a, b):
        got_a.append(xa)
        got_b.append(xb)
    same(got_a, naive(mm, 4, 16))
    same(got_b, naive(mm, 4, 16))


def test_by_default_a_dropped_batch_s_memory_is_reused_and_a_kept_one_never_written(mm):
    loader = ImageLoader(mm, 4, crop=16, depth=1)
    want = naive(mm, 4, 16)
    ptrs = []
    for (x, y), (wx, wy) in zip(loader, want):  # each batch dropped before the next is used
        same([(x, y)], [(wx, wy)])
        ptrs.append(x.data_ptr())
    assert len(set(ptrs)) < len(ptrs) if _HAS_USE_COUNT else len(set(ptrs)) == len(ptrs)
    kept = []  # now keep a view of every batch, and a numpy array of one: none is written again
    for _epoch in range(2):
        loader.set_epoch(0)
        for j, (x, _y) in enumerate(loader):
            kept.append((x[1:], x.clone()[1:]) if j % 2 else (x.numpy(), x.clone().numpy()))
    for view, copy in kept:
        assert (view == copy).all()
    assert len(loader._free.buffers) <= loader.depth + 3  # the pool stays small; kept batches are not pooled


def test_free_buffers_never_hand_out_a_held_buffer_across_threads():
    import threading

    from gpufeed.data.buffers import FreeBuffers

    pool, held, lock = FreeBuffers((2, 8), torch.float32, keep=4), [], threading.Lock()

    def grab():
        for _ in range(200):
            b = pool.take(2)
            with lock:
                held.append(b)

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({b.data_ptr() for b in held}) == len(held)  # all held at once: all distinct


def test_reuse_buffers_is_an_opt_in_ring(mm):
    k = 2
    loader = ImageLoader(mm, 2, crop=16, drop_last=True, reuse_buffers=k, depth=1)
    got = []  # (the batch as yielded, a copy of it then)
    for x, _ in loader:
        got.append((x, x.clone()))
        if len(got) > k - 1:  # batch j is still intact while batch j + k - 1 is in use, as documented
            old, copy = got[-k]
            assert torch.equal(old, copy)
    ptrs = [x.data_ptr() for x, _ in got]
    assert len(set(ptrs)) < len(ptrs), "reuse_buffers reuses memory"
    same([(x.clone(), y) for x, y in ImageLoader(mm, 4, crop=16, drop_last=True, reuse_buffers=2)],
         naive(mm, 4, 16, drop_last=True))


def test_break_leaves_no_thread(mm):
    import threading

    from gpufeed.data.producer import THREAD_PREFIX

    for _x, _y in ImageLoader(mm, 2, crop=16):
        break
    del _x, _y
    import gc

    gc.collect()
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 15, "drop_last": True}, "batch_size=15 is larger than the 14 images"),
    ({"batch_size": 8, "drop_last": True, "world_size": 2, "rank": 1}, "larger than the 7 images of this shard"),
    ({"crop": 21}, r"crop=21 does not fit the stored 20x24 \(height x width\) images"),
    ({"rank": 2, "world_size": 2}, "need 0 <= rank < world_size"),
    ({"batch_size": 0}, "batch_size must be a whole number"),
    ({"dtype": torch.int32}, r"dtype must be torch.uint8 \(the crops alone\) or a floating type"),
    ({"dtype": torch.uint8, "mean": (0.5,) * 3, "std": (0.2,) * 3}, "not normalised, so mean=.* would go unused"),
    ({"depth": 0}, "depth must be a whole number"),
    ({"group_size": 0}, "group_size must be None or a whole number"),
    ({"reuse_buffers": -1}, "reuse_buffers must be a whole number"),
    ({"threads": 0}, "threads must be None or a whole number"),
    ({"memory_format": torch.preserve_format}, "memory_format must be"),
])
def test_bad_arguments_get_one_clear_line(mm, kwargs, message):
    kwargs = {"batch_size": 4, **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        ImageLoader(mm, **kwargs)
    # the loader the learner built is named, never one of its parts (FastLoader)
    assert "\n" not in str(info.value) and str(info.value).startswith("ImageLoader: ")


def test_settings_are_checked_once_and_read_by_name(mm):
    loader = ImageLoader(mm, 4, crop=16, seed=3, group_size=2)
    assert loader.settings.crop == loader.crop == 16 and loader.seed == 3 and loader.group_size == 2
    # the batching settings the loader's FastLoader follows are the same, checked in one place
    assert loader.loader.settings.batching() == {**loader.settings.batching(), "reuse_buffers": 0}
    with pytest.raises(AttributeError, match="no attribute 'cropp'"):
        loader.cropp  # noqa: B018


def test_the_readme_names_every_setting():
    """The README's "Use it in your own training" lists the options: none may be missing there."""
    import dataclasses
    from pathlib import Path

    from gpufeed.data.settings import ImageSettings

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Use it in your own training"):]
    section = section[:section.index("\n## ", 5)]
    missing = [f.name for f in dataclasses.fields(ImageSettings) if f.name != "owner" and f"`{f.name}" not in section]
    assert not missing, f"the README's ImageLoader section does not name {missing}"


def test_each_iterator_owns_its_pass_and_its_position(mm):
    """Two live iterators: each keeps its own epoch and count; the loader's state_dict follows the
    latest, and each iterator can say where it stands."""
    loader = ImageLoader(mm, 4, crop=16, device="cpu")
    a = iter(loader)  # epoch 0
    next(a)
    b = iter(loader)  # epoch 1
    for _ in range(2):
        next(b)
    next(a)
    assert (a.state_dict()["epoch"], a.state_dict()["batch"]) == (0, 2)
    assert (b.state_dict()["epoch"], b.state_dict()["batch"]) == (1, 2)
    assert loader.state_dict() == b.state_dict()
    a.close()
    with pytest.raises(StopIteration):
        next(a)  # a closed pass is over
    assert next(b)[0].shape == (4, 3, 16, 16)  # the other one goes on


def test_a_dropped_iterator_is_not_kept_alive_by_its_loader(mm):
    import gc
    import weakref

    loader = ImageLoader(mm, 4, crop=16)
    it = iter(loader)
    next(it)
    gone = weakref.ref(it)
    del it
    gc.collect()
    assert gone() is None and loader.state_dict()["batch"] == 1  # its position outlives it


def test_a_folder_that_is_not_a_memmap_dataset(tmp_path):
    with pytest.raises(MemmapError, match="not a complete gpufeed memmap dataset|does not exist") as info:
        ImageLoader(tmp_path, 4)
    assert "\n" not in str(info.value)


@pytest.mark.skipif(CUDA, reason="checks the error raised where there is no CUDA")
def test_cuda_without_a_gpu_says_so(mm):
    with pytest.raises(ValueError, match="torch sees no CUDA GPU; pass device='cpu'"):
        ImageLoader(mm, 4, device="cuda")


def test_gpu_and_cpu_give_the_same_batches_for_the_same_seed(mm, on_cuda):
    for kwargs in ({}, {"drop_last": True, "seed": 5, "depth": 3}, {"dtype": torch.float16}, {"dtype": torch.uint8}):
        gpu = list(ImageLoader(mm, 4, crop=16, device="cuda", **kwargs))
        cpu = list(ImageLoader(mm, 4, crop=16, device="cpu", **kwargs))
        assert all(x.is_cuda and y.is_cuda for x, y in gpu)
        for (gx, gy), (cx, cy) in zip(gpu, cpu, strict=True):
            assert torch.equal(gy.cpu(), cy) and torch.allclose(gx.cpu().float(), cx.float(), atol=1e-2)
    same(list(ImageLoader(mm, 4, crop=16, device="cuda")), naive(mm, 4, 16))


def test_gpu_batches_survive_a_busy_current_stream(mm, on_cuda):
    want = naive(mm, 4, 16)
    got = []
    for x, y in ImageLoader(mm, 4, crop=16, device="cuda", depth=2):
        torch.cuda._sleep(int(1e8))  # the compute stream is busy while the next batches are made
        got.append((x.clone(), y.clone()))
        x.fill_(0)  # the consumer scribbles on its batch: later batches must not be affected
    same(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_front_door_in_steady_state_never_syncs_the_host(mm, dtype, on_cuda):
    loader = ImageLoader(mm, 2, crop=16, device="cuda", depth=2, dtype=dtype)
    list(loader)  # warm-up: cached constants, pinned blocks, the side stream
    it = iter(loader)
    next(it)  # the first batch of an epoch: the producer thread starts, allocations
    with no_host_sync():
        assert consume_on_the_gpu(it) == len(loader) - 1


def test_the_readme_example_runs(tmp_path, monkeypatch):
    """README.md's "Use it in your own training" block, run as written on a tiny generated folder
    (only the folder names and the sizes are swapped for small ones)."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Use it in your own training", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 10 <= len(code.strip().splitlines()) <= 17
    synth_folder(tmp_path / "my_images", n=6, size=(48, 40), classes=2, progress=False)
    for old, new in {"size=(256, 256)": "size=(40, 40)", "batch_size=64": "batch_size=3", "crop=224": "crop=32",
                     "range(2)": "range(1)"}.items():
        assert old in code, f"the README example no longer has {old!r}: update this test"
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["loss"].isfinite() and scope["images"].shape == (3, 3, 32, 32)


def reserved(sim) -> int:
    """Device bytes the caching allocator holds (the simulator's, or the real GPU's)."""
    return sim.device_memory.reserved if sim is not None else torch.cuda.memory_reserved()


def test_device_memory_stops_growing_after_the_first_epochs(mm, on_cuda):
    """Issue 26, defect 1: a new side stream per epoch strands each epoch's blocks in that stream's
    pool (the caching allocator reuses a block only on the stream that allocated it). One stream,
    owned by the loader: the memory held after epoch 2 is all epoch 7 needs, give or take the
    batches in flight (the prefetcher's thread decides when a block is freed against when the next
    is allocated, so one epoch may find fewer ready; a stream per epoch would add an epoch's worth
    of blocks every epoch)."""
    depth = 2
    loader = ImageLoader(mm, 4, crop=16, device="cuda", depth=depth)
    for epoch in range(7):
        deferred_sum = [x.float().sum() for x, _ in loader]
        torch.cuda.synchronize()
        del deferred_sum
        if epoch == 1:
            after_two = reserved(on_cuda)
    x, y = next(iter(loader))
    in_flight = (depth + 2) * (x.nbytes + y.nbytes)  # CudaPrefetcher: its queue, the one made, the one used
    assert after_two <= reserved(on_cuda) < after_two + in_flight
    if on_cuda is not None:  # the simulator counts streams: the default one and the loader's own
        assert len(on_cuda.streams) == 2


def test_every_rank_yields_as_many_batches_padded_as_distributed_sampler_pads(mm):
    """Issue 26, defect 3: 14 images on 3 ranks in batches of 4 used to give 2, 1 and 1 batches (DDP
    hangs in the last all-reduce); padded to 5 a rank, every rank yields 2."""
    loaders = [ImageLoader(mm, 4, crop=16, rank=r, world_size=3) for r in range(3)]
    got = [list(loader) for loader in loaders]
    assert [len(loader) for loader in loaders] == [len(g) for g in got] == [2, 2, 2]
    for r, g in enumerate(got):
        same(g, naive(mm, 4, 16, rank=r, world_size=3))
    assert sorted({i for g in got for _, y in g for i in y.tolist()}) == sorted(set(load_memmap(mm).targets.tolist()))


def test_free_buffers_never_reuse_shared_memory_or_a_held_storage():
    """Issue 26, defect 5: a batch pickled in a DataLoader worker moves to shared memory, the worker
    drops it, another process still reads it; and a held ``untyped_storage()`` holds the memory."""
    from gpufeed.data.buffers import FreeBuffers

    pool = FreeBuffers((4, 8), torch.float32, keep=4)
    shared = pool.take(4)
    shared.share_memory_()  # what pickling it to another process does
    ptr = shared.data_ptr()
    del shared
    storage = pool.take(4).untyped_storage()  # the tensor dropped, its storage held
    assert pool.take(4).data_ptr() != ptr
    assert pool.take(4).data_ptr() not in (ptr, storage.data_ptr())


def test_a_cpu_loader_in_dataloader_workers_gives_every_batch_intact(mm):
    """Issue 26, defect 5, end to end: ImageLoader in a DataLoader worker process; each batch goes
    to the main process through shared memory; none may be overwritten by a later one."""
    from torch.utils.data import DataLoader, IterableDataset

    class Batches(IterableDataset):
        def __iter__(self):
            for _ in range(4):
                yield from ImageLoader(mm, 2, crop=16, depth=1, threads=1)

    got = [x for x, _ in DataLoader(Batches(), batch_size=None, num_workers=1)]
    want = [x for _ in range(4) for x, _ in ImageLoader(mm, 2, crop=16, depth=1, threads=1)]
    assert len(got) == len(want) == 28
    bad = sum(not torch.equal(g, w) for g, w in zip(got, want))
    assert bad == 0, f"{bad} of {len(got)} batches were overwritten after they were sent"


def test_without_torchs_private_use_count_every_batch_is_fresh_memory(mm, monkeypatch):
    """Issue 26, defect 11: ``torch._C._storage_Use_Count`` is private; where it is absent nothing
    is reused (correct, at the cost of fresh memory's page faults), and the batches are the same."""
    import gpufeed.data.buffers as buffers

    monkeypatch.setattr(buffers, "_HAS_USE_COUNT", False)
    loader = ImageLoader(mm, 4, crop=16, depth=1)
    ptrs = []
    for x, _ in loader:
        ptrs.append(x.data_ptr())
        del x
    assert len(ptrs) == len(loader) and loader._free.buffers == []
    same(list(ImageLoader(mm, 4, crop=16)), naive(mm, 4, 16))


@pytest.mark.parametrize("depth", [1, 2])
def test_reuse_buffers_keeps_its_promise_across_the_epoch_boundary(mm, depth):
    """Issue 26, defect 6: the ring's slot restarted at 0 each epoch, so the first batches of an
    epoch overwrote the last ones of the epoch before while they were still promised."""
    k = 2
    loader = ImageLoader(mm, 2, crop=16, drop_last=True, reuse_buffers=k, depth=depth)
    held = []  # every batch as yielded and a copy, across three epochs (7 batches each)
    for _epoch in range(3):
        for x, _ in loader:
            held.append((x, x.clone()))
            for old, copy in held[-k:]:  # batch j is intact while batch j + k - 1 is in use
                assert torch.equal(old, copy)


def test_cuda_is_the_current_device_at_iter_not_at_construction(mm, on_cuda, monkeypatch):
    """Issue 26, defect 11: a loader made before ``torch.cuda.set_device(local_rank)`` used to keep
    the device current at construction (every rank on GPU 0); ``"cuda"`` is now resolved by
    ``iter()``. The simulator has one device, so the prefetcher and the stream are stand-ins here."""
    import gpufeed.data.image_loader as il

    loader = ImageLoader(mm, 4, crop=16, device="cuda")
    seen = []

    class Recorder:
        def __init__(self, host, device, **kwargs):
            seen.append(device)

        def __iter__(self):
            return iter([])

    monkeypatch.setattr(il, "CudaPrefetcher", Recorder)
    monkeypatch.setattr(il.SideStreams, "on", lambda self, device=None: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # set_device(1) after the loader was made
    list(loader)
    assert seen == [torch.device("cuda", 1)]
    assert list(ImageLoader(mm, 4, crop=16, device="cuda:0")) == [] and seen[-1] == torch.device("cuda", 0)
