"""What a training recipe expects of gpufeed.data.ImageLoader: RandomResizedCrop, channels-last
output, the grouped (quasi-random) order, resuming mid-epoch. Each against a naive reference on the
same images: the same order, the same boxes, torchvision's ops one image at a time."""

import subprocess
import sys
import textwrap

import pytest
import torch
from torchvision.transforms.v2 import functional as F

from gpufeed.data.augment import crop_boxes
from gpufeed.data.image_loader import ImageLoader
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.data.orders import grouped_permutation, seeded_generator
from gpufeed.data.resized import ResizedCropAugment
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from gpufeed.measure.synth import synth_folder

CL = torch.channels_last


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("recipe")
    src = synth_folder(tmp / "jpeg", n=14, size=(48, 40), classes=3, progress=False).path
    return build_memmap(src, tmp / "mm", size=(24, 20), progress=False).path  # 20 high, 24 wide


def naive_rrc(
    path,
    batch_size,
    size,
    *,
    scale=(0.08, 1.0),
    ratio=(3 / 4, 4 / 3),
    seed=0,
    epoch=0,
    rank=0,
    world_size=1,
    flip=True,
    shuffle=True,
    group_size=None,
    uint8=False,
):
    """By hand: the epoch's order and shard (padded with the order's start to ``ceil(n /
    world_size)`` per rank, as ``DistributedSampler`` pads), then per image torchvision's resized_crop on the box
    drawn by RandomResizedCrop's rule (one generator, in batch order), a flip, then
    (x / 255 - mean) / std."""
    data = load_memmap(path)
    n, _, h, w = data.images.shape
    if not shuffle:
        order = torch.arange(n)
    elif group_size:
        order = grouped_permutation(n, group_size, seed, epoch)
    else:
        order = torch.randperm(n, generator=seeded_generator(seed, epoch))
    per = -(-n // world_size)
    order = torch.cat([order, order[: per * world_size - n]])[rank * per : (rank + 1) * per]
    g = seeded_generator(seed, epoch, rank, 1)
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(3, 1, 1)
    out = []
    for idx in order.split(batch_size):
        boxes = crop_boxes(len(idx), h, w, scale, ratio, g)
        flips = torch.rand(len(idx), generator=g) < (0.5 if flip else 0.0)
        images = []
        for i, (t, s, bh, bw), f in zip(idx.tolist(), boxes.tolist(), flips.tolist()):
            x = F.resized_crop(data.images[i].float(), t, s, bh, bw, [size, size], antialias=True)
            x = F.horizontal_flip(x) if f else x
            if uint8:
                images.append(x.round().clamp(0, 255).to(torch.uint8))
            else:
                images.append((((x.double() / 255) - mean) / std).float())
        out.append((torch.stack(images), data.targets[idx]))
    return out


def same(got, want, atol=1e-5):
    assert len(got) == len(want)
    for (x, y), (rx, ry) in zip(got, want):
        assert torch.equal(y.cpu(), ry)
        if rx.dtype == torch.uint8:
            assert torch.equal(x.cpu(), rx)
        else:
            assert torch.allclose(x.cpu().float(), rx, atol=atol)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"seed": 3, "scale": (0.5, 1.0), "ratio": (0.5, 2.0)},
        {"flip": False, "shuffle": False},
        {"rank": 2, "world_size": 3},  # padded: 5 images, the last the order's first
        {"group_size": 4},
    ],
)
@pytest.mark.parametrize("size", [16, 32])  # 32: larger than the stored 20x24
def test_random_resized_crop_is_torchvision_resized_crop_on_the_same_boxes(mm, kwargs, size):
    kwargs = {"scale": (0.08, 1.0), **kwargs}
    got = list(ImageLoader(mm, 4, crop=size, device="cpu", **kwargs))
    same(got, naive_rrc(mm, 4, size, **kwargs))


def test_the_padded_shard_is_not_the_unpadded_one(mm):
    """14 images on 3 ranks: rank 2's shard padded is positions 10-14 of the order, 14 wrapping to
    the order's first image (``DistributedSampler``'s 5 per rank); unpadded it would be 10-13."""
    order = torch.randperm(14, generator=seeded_generator(0, 0))
    got = torch.cat(ImageLoader(mm, 4, crop=16, device="cpu", rank=2, world_size=3).indices(0))
    assert got.tolist() == order[10:14].tolist() + order[:1].tolist()
    want = torch.cat([y for _, y in naive_rrc(mm, 4, 16, rank=2, world_size=3)])
    assert want.tolist() == load_memmap(mm).targets[got].tolist() and len(want) == 5


def test_random_resized_crop_in_uint8_is_the_float_result_rounded(mm):
    got = list(ImageLoader(mm, 4, crop=16, scale=(0.2, 1.0), dtype=torch.uint8, device="cpu"))
    same(got, naive_rrc(mm, 4, 16, scale=(0.2, 1.0), uint8=True))


def test_resized_crop_augment_on_a_batch_matches_its_cpu_tasks():
    """The device way (two batched matmuls) against the CPU's (one interpolate per sample)."""
    x = torch.randint(0, 256, (9, 3, 30, 22), dtype=torch.uint8)
    batched = ResizedCropAugment(12, generator=torch.Generator().manual_seed(1))(x)
    aug = ResizedCropAugment(12, generator=torch.Generator().manual_seed(1))
    out = torch.empty(9, 3, 12, 12)
    for task in aug.tasks(x, range(9), aug.params(x), out):
        task()
    assert (batched - out).abs().max() < 1e-3


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"scale": (0.5, 0.1)}, "scale=.* needs 0 < low <= high <= 1"),
        ({"scale": 0.5}, "scale must be a pair"),
        ({"scale": (0.1, 1), "ratio": (0, 1)}, "ratio=.* needs 0 < low"),
        ({"memory_format": torch.preserve_format}, "memory_format must be"),
    ],
)
def test_bad_recipe_arguments_get_one_clear_line(mm, bad, message):
    with pytest.raises(ValueError, match=message):
        ImageLoader(mm, 4, crop=16, **bad)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"scale": (0.08, 1.0)},
        {"dtype": torch.uint8},
        {"reuse_buffers": 2},
        {"dtype": torch.uint8, "scale": (0.3, 1.0)},
    ],
)
def test_channels_last_is_the_same_batches_laid_out_nhwc(mm, kwargs):
    want = list(ImageLoader(mm, 4, crop=16, device="cpu", **kwargs))
    got = list(ImageLoader(mm, 4, crop=16, device="cpu", memory_format=CL, **kwargs))
    assert all(x.is_contiguous(memory_format=CL) for x, _ in got)
    assert not any(x.is_contiguous(memory_format=CL) for x, _ in want)
    for (x, y), (rx, ry) in zip(got, want, strict=True):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_grouped_order_reads_few_blocks_per_batch(mm):
    loader = ImageLoader(mm, 4, crop=16, group_size=4, device="cpu")
    idx = loader.indices(0)
    assert sorted(torch.cat(idx).tolist()) == list(range(14))
    assert all(
        len({i // 4 for i in b.tolist()}) <= 2 for b in idx
    )  # a batch of 4 spans at most 2 blocks


# -- resuming mid-epoch ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs", [{}, {"scale": (0.08, 1.0), "group_size": 4}, {"rank": 1, "world_size": 2}]
)
@pytest.mark.parametrize("stop", [0, 1, 3, 4])  # 4: the whole epoch (14 images in batches of 4)
def test_state_dict_resumes_at_the_next_batch_with_the_same_crops(mm, kwargs, stop):
    whole = ImageLoader(mm, 4, crop=16, device="cpu", **kwargs)
    want = [list(whole), list(whole)]  # epochs 0 and 1
    first = ImageLoader(mm, 4, crop=16, device="cpu", **kwargs)
    stop = min(stop, len(first))  # a shard of 7 has 2 batches
    it = iter(first)
    for _ in range(stop):
        next(it)
    state = first.state_dict()
    second = ImageLoader(mm, 4, crop=16, device="cpu", **kwargs)
    second.load_state_dict(state)
    rest = list(second)
    if stop >= len(want[0]):  # a finished epoch resumes at the next one's first batch
        assert state["epoch"] == 1 and state["batch"] == 0
        same(rest, want[1])
    else:
        same(rest, want[0][stop:])
        same(list(second), want[1])  # and the epoch after goes on as usual


def test_a_state_survives_json(mm):
    import json

    loader = ImageLoader(mm, 4, crop=16, scale=(0.08, 1.0))
    it = iter(loader)
    next(it)
    again = ImageLoader(mm, 4, crop=16, scale=(0.08, 1.0))
    again.load_state_dict(json.loads(json.dumps(loader.state_dict())))
    same(list(again), [next(it) for _ in range(len(loader) - 1)])


def test_a_state_from_other_settings_is_refused(mm):
    state = ImageLoader(mm, 4, crop=16, seed=1).state_dict()
    with pytest.raises(
        ValueError, match="saved by a loader with other settings .*'seed': \\(1, 0\\)"
    ):
        ImageLoader(mm, 4, crop=16).load_state_dict(state)


RUN = textwrap.dedent("""
    import sys, torch
    from gpufeed.data.image_loader import ImageLoader
    mm, mode, stop, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    loader = ImageLoader(mm, 3, crop=16, scale=(0.08, 1.0), threads=2, depth=2)
    batches = []
    if mode == "stop":  # a run killed after `stop` batches of epoch 1, its checkpoint saved
        loader.set_epoch(1)
        it = iter(loader)
        batches = [next(it) for _ in range(stop)]
        torch.save({"loader": loader.state_dict(), "batches": batches}, out)
        sys.exit(0)  # the queued batches are abandoned with the process
    loader.load_state_dict(torch.load(out, weights_only=True)["loader"])
    torch.save({"batches": list(loader)}, out + ".rest")
""")


def test_resume_in_a_new_process_gives_the_rest_of_the_epoch(mm, tmp_path):
    ckpt = str(tmp_path / "ckpt.pt")
    for mode in ("stop", "resume"):
        subprocess.run(
            [sys.executable, "-c", RUN, str(mm), mode, "2", ckpt], check=True, timeout=300
        )
    got = torch.load(ckpt, weights_only=True)["batches"] + torch.load(ckpt + ".rest", weights_only=True)["batches"]
    loader = ImageLoader(mm, 3, crop=16, scale=(0.08, 1.0))
    loader.set_epoch(1)
    same(got, list(loader))


# -- the device path, on a GPU or under the CUDA-ordering simulator --------------------


def test_gpu_random_resized_crop_and_channels_last_match_the_cpu(mm, on_cuda):
    for kwargs in (
        {"scale": (0.08, 1.0)},
        {"scale": (0.3, 1.0), "dtype": torch.uint8},
        {"memory_format": CL},
        {"scale": (0.08, 1.0), "memory_format": CL, "dtype": torch.float16},
    ):
        gpu = list(ImageLoader(mm, 4, crop=16, device="cuda", **kwargs))
        cpu = list(ImageLoader(mm, 4, crop=16, device="cpu", **kwargs))
        for (gx, gy), (cx, cy) in zip(gpu, cpu, strict=True):
            assert gx.is_cuda and torch.equal(gy.cpu(), cy)
            assert gx.is_contiguous(
                memory_format=kwargs.get("memory_format", torch.contiguous_format)
            )
            assert (gx.cpu().float() - cx.float()).abs().max() <= (
                1 if gx.dtype == torch.uint8 else 1e-2
            )


def test_gpu_resumes_mid_epoch(mm, on_cuda):
    whole = list(ImageLoader(mm, 4, crop=16, scale=(0.08, 1.0), device="cuda"))
    first = ImageLoader(mm, 4, crop=16, scale=(0.08, 1.0), device="cuda")
    it = iter(first)
    next(it), next(it)
    second = ImageLoader(mm, 4, crop=16, scale=(0.08, 1.0), device="cuda")
    second.load_state_dict(first.state_dict())
    for (gx, gy), (wx, wy) in zip(list(second), whole[2:], strict=True):
        assert torch.equal(gy.cpu(), wy.cpu()) and torch.equal(gx.cpu(), wx.cpu())


# -- the build's order, for the grouped shuffle ----------------------------------------


def test_build_in_a_seeded_order_stores_the_same_rows_shuffled(tmp_path):
    src = synth_folder(tmp_path / "jpeg", n=12, size=(40, 32), classes=3, progress=False).path
    plain = load_memmap(build_memmap(src, tmp_path / "plain", size=(16, 16), progress=False).path)
    r = build_memmap(src, tmp_path / "mixed", size=(16, 16), progress=False, order_seed=7)
    mixed = load_memmap(r.path)
    order = torch.randperm(
        12, generator=torch.Generator().manual_seed(7)
    )  # row i <- folder image order[i]
    assert torch.equal(mixed.images, plain.images[order]) and torch.equal(
        mixed.targets, plain.targets[order]
    )
    assert not torch.equal(mixed.targets, plain.targets)
    again = build_memmap(
        src, tmp_path / "mixed", size=(16, 16), progress=False, order_seed=7, reuse=True
    )
    assert again.reused
    with pytest.raises(
        Exception, match="already holds a memmap dataset"
    ):  # another order is another dataset
        build_memmap(
            src, tmp_path / "mixed", size=(16, 16), progress=False, order_seed=8, reuse=True
        )


# -- the iterator's lifecycle, as image_loader's module docstring states it -------------------------


def test_close_mid_epoch_gives_the_ring_back_and_ends_the_iterator(mm):
    loader = ImageLoader(mm, 4, crop=16, reuse_buffers=1, device="cpu")
    list(loader)  # one epoch makes the ring
    it = iter(loader)
    next(it)
    assert loader._cpu_rings == []  # the live iterator owns it
    it.close()
    assert len(loader._cpu_rings) == 1  # given back: no task writes into it any more
    with pytest.raises(StopIteration):
        next(it)


def test_an_error_in_the_loader_is_raised_once_then_the_epoch_is_over(mm, monkeypatch):
    import gpufeed.data.resized as resized

    real = resized.ResizedCropAugment.tasks

    def failing(self, *args):
        tasks = real(self, *args)
        tasks[0] = lambda: 1 / 0  # a pool thread fails on the first group of each batch
        return tasks

    monkeypatch.setattr(resized.ResizedCropAugment, "tasks", failing)
    it = iter(ImageLoader(mm, 4, crop=16, scale=(0.5, 1.0), device="cpu"))
    with pytest.raises(ZeroDivisionError):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_closing_a_gpu_iterator_stops_its_producer_thread(mm, on_cuda):
    import threading

    from gpufeed.data.producer import THREAD_PREFIX

    it = iter(ImageLoader(mm, 2, crop=16, scale=(0.5, 1.0), device="cuda"))
    next(it)
    it.close()
    alive = [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]
    assert not alive
