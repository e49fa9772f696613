"""The one normalise, the one crop + flip, DeviceAugment: each against the naive formula or slicing."""

import pytest
import torch
from cudacheck import no_host_sync

from gpufeed.data import cpu_crops as C
from gpufeed.data import transforms as T
from gpufeed.data.device_augment import DeviceAugment

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
MEAN, STD = T.IMAGENET_MEAN, T.IMAGENET_STD




def images(n=4, h=8, w=8, seed=0):
    return torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def naive_normalize(x, dtype=torch.float32, mean=None, std=None, max_value=255.0):
    y = x.to(torch.float64) / max_value
    if mean is not None:
        y = (y - torch.tensor(mean, dtype=torch.float64).view(-1, 1, 1)) / torch.tensor(std, dtype=torch.float64).view(-1, 1, 1)
    return y.to(dtype)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_normalize_matches_the_naive_formula(dtype, tol):
    x = images()
    for mean, std in ((None, None), (MEAN, STD)):
        got = T.normalize(x, dtype, mean, std)
        want = naive_normalize(x, dtype, mean, std)
        assert got.dtype == dtype and got.shape == x.shape
        assert torch.allclose(got.float(), want.float(), atol=tol * (10 if mean else 1), rtol=tol)


@pytest.mark.parametrize("mean, std", [(None, None), (MEAN, STD)])
def test_normalize_leaves_its_float_input_alone(mean, std):
    x = images().float()
    before = x.clone()
    out = T.normalize(x, torch.float32, mean, std)
    assert torch.equal(x, before) and out.data_ptr() != x.data_ptr()
    assert torch.allclose(out, naive_normalize(before, torch.float32, mean, std), atol=1e-5)
    unit = before / 255  # images already in [0, 1]
    assert torch.allclose(T.normalize(unit, mean=mean, std=std, max_value=1.0), out, atol=1e-5)


def test_normalize_caches_its_constants_per_device_and_dtype():
    T.normalize(images(), torch.float32, MEAN, STD)
    hits = T.affine.cache_info().hits
    T.normalize(images(), torch.float32, MEAN, STD)
    assert T.affine.cache_info().hits == hits + 1
    a = T.affine(MEAN, STD, torch.float16, torch.device("cpu"))
    assert a[0].dtype == torch.float16 and a[0].shape == (3, 1, 1)


def test_normalize_refuses_bad_arguments():
    x = images()
    with pytest.raises(ValueError, match="dtype must be a floating type"):
        T.normalize(x, torch.int32)
    with pytest.raises(ValueError, match="both mean and std"):
        T.normalize(x, mean=MEAN)
    with pytest.raises(ValueError, match="one value per channel"):
        T.normalize(x, mean=(0.5,), std=(0.5,))
    with pytest.raises(ValueError, match="std must be positive"):
        T.normalize(x, mean=MEAN, std=(0.2, 0.0, 0.2))


def crops_by_hand(x, corners, flips, crop):
    return torch.stack([x[i, :, t:t + crop, s:s + crop].flip(-1) if f else x[i, :, t:t + crop, s:s + crop]
                        for i, ((t, s), f) in enumerate(zip(corners.tolist(), flips.tolist()))])


@pytest.mark.parametrize("out_dtype", [torch.uint8, torch.float32])
def test_gather_and_copy_crops_agree_with_slicing(out_dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8, generator=g)
    corners, flips = T.draw_crops(6, (20, 24), 8, g)
    assert flips.any() and not flips.all()
    ref = crops_by_hand(x, corners, flips, 8)
    out = torch.empty(6, 3, 8, 8, dtype=out_dtype)
    assert torch.equal(T.copy_crops(x, corners, flips, 8, out=out), ref.to(out_dtype))
    assert torch.equal(T.gather_crops(x, corners, flips, 8), ref)
    assert torch.equal(T.crop_flip(x, corners, flips, 8), ref)
    assert (corners[:, 0] <= 12).all() and (corners[:, 1] <= 16).all()
    with pytest.raises(ValueError, match="crop must be in 1..20"):
        T.draw_crops(2, (20, 24), 21)


def test_flip_by_mask_and_the_per_sample_crop_flip():
    x = images(2)
    assert torch.equal(T.flip(x, torch.tensor([True, False])), torch.stack([x[0].flip(-1), x[1]]))
    a, b = T.CropFlip(6, seed=4), T.CropFlip(6, seed=4)
    image = x[0].clone()
    assert all(torch.equal(a(image), b(image)) for _ in range(5)) and a(image).shape == (3, 6, 6)
    assert torch.equal(image, x[0])  # the source is untouched


def test_device_augment_matches_per_sample_reference_and_makes_new_memory():
    x = images(5, 12, 12)
    before = x.clone()
    aug = DeviceAugment(crop=8, seed=3)
    corners, flips = T.draw_crops(5, (12, 12), 8, torch.Generator().manual_seed(3))
    out = aug(x)
    ref = naive_normalize(crops_by_hand(x, corners, flips, 8), torch.float32, MEAN, STD)
    assert torch.allclose(out, ref, atol=1e-5) and torch.equal(x, before)
    kept = [aug(x) for _ in range(3)]
    assert len({k.data_ptr() for k in kept}) == 3  # no ring by default: each result is its own memory


def test_device_augment_reuses_buffers_only_when_asked():
    x = images(5, 12, 12)
    aug = DeviceAugment(crop=8, seed=3, buffers=2)
    a, b, c = aug(x), aug(x), aug(x)
    assert a.data_ptr() != b.data_ptr() and c.data_ptr() == a.data_ptr()  # a ring of 2: overwritten 2 later
    plain = DeviceAugment(crop=8, seed=3, mean=None, std=None, flip=False, dtype=torch.float16)
    got = plain(x)
    assert got.dtype == torch.float16 and got.min() >= 0 and got.max() <= 1
    with pytest.raises(ValueError, match="floating"):
        DeviceAugment(crop=8, dtype=torch.int16)


def test_device_augment_gives_the_same_values_on_the_gpu_and_without_syncing(on_cuda):
    x = images(16, 40, 40)
    cpu = DeviceAugment(crop=32, seed=7)(x)
    aug = DeviceAugment(crop=32, seed=7)
    xg = x.cuda()
    first = aug(xg)
    assert torch.allclose(first.cpu(), cpu, atol=1e-5)
    T.normalize(xg, torch.float16, MEAN, STD)  # warm-up: its constants are made (and copied) once
    with no_host_sync():
        for _ in range(3):
            aug(xg)
            T.normalize(xg, torch.float16, MEAN, STD)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("stats", [(T.IMAGENET_MEAN, T.IMAGENET_STD), (None, None)])
def test_crop_flip_normalize_is_the_crop_then_the_normalise_bit_for_bit(threads, stats):
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, 256, (9, 3, 10, 12), dtype=torch.uint8, generator=g)
    rows = [8, 0, 3, 3, 5]  # any order, repeats allowed
    corners, flips = T.draw_crops(len(rows), (10, 12), 7, g)
    mean, std = stats
    ref = T.crop_flip(src[rows], corners, flips, 7, out=torch.empty(5, 3, 7, 7))  # the naive way: gather, crop, then
    if mean is None:
        ref.mul_(1.0 / 255)
    else:
        scale, shift = T.affine(mean, std, torch.float32, torch.device("cpu"))
        ref.mul_(scale).add_(shift)  # ... normalise the whole batch
    out = C.crop_flip_normalize(src, rows, corners, flips, 7, torch.empty(5, 3, 7, 7), mean, std, threads=threads)
    assert torch.equal(out, ref)
    assert torch.allclose(out, T.normalize(T.crop_flip(src[rows], corners, flips, 7), torch.float32, mean, std), atol=1e-6)



@pytest.mark.parametrize("threads", [1, 3])
def test_crop_flip_normalize_into_uint8_is_the_crop_alone(threads):
    g = torch.Generator().manual_seed(4)
    src = torch.randint(0, 256, (30, 3, 10, 12), dtype=torch.uint8, generator=g)
    rows = torch.randint(0, 30, (19,), generator=g).tolist()  # more than two groups, a short last one
    corners, flips = T.draw_crops(len(rows), (10, 12), 7, g)
    out = torch.empty(19, 3, 7, 7, dtype=torch.uint8)
    assert C.crop_flip_normalize(src, rows, corners, flips, 7, out, None, None, threads=threads) is out
    assert torch.equal(out, T.crop_flip(src[rows], corners, flips, 7))
    with pytest.raises(ValueError, match="pass mean=None, std=None"):
        C.crop_flip_normalize(src, rows, corners, flips, 7, out)  # ImageNet's defaults cannot apply to bytes
    with pytest.raises(ValueError, match="out must be torch.uint8 .* or a float type"):
        C.crop_flip_normalize(src, rows, corners, flips, 7, out.int(), None, None)


def test_crop_tasks_give_the_same_batch_in_any_order_on_any_thread():
    g = torch.Generator().manual_seed(5)
    src = torch.randint(0, 256, (40, 3, 9, 9), dtype=torch.uint8, generator=g)
    rows = list(range(39, 2, -1))
    corners, flips = T.draw_crops(len(rows), (9, 9), 6, g)
    ref = C.crop_flip_normalize(src, rows, corners, flips, 6, torch.empty(len(rows), 3, 6, 6))
    out = torch.full_like(ref, float("nan"))
    tasks = C.crop_tasks(src, rows, corners, flips, 6, out)
    assert len(tasks) == -(-len(rows) // C.GROUP)
    for f in [C.crop_pool(2).submit(t) for t in reversed(tasks)]:
        f.result()
    assert torch.equal(out, ref)
    raw = torch.zeros(len(rows), 3, 6, 6, dtype=torch.uint8)  # the crops alone: larger tasks
    tasks = C.crop_tasks(src, rows, corners, flips, 6, raw, None, None)
    assert len(tasks) == -(-len(rows) // C.RAW_GROUP)
    for f in [C.crop_pool(2).submit(t) for t in reversed(tasks)]:
        f.result()
    assert torch.equal(raw, T.crop_flip(src[rows], corners, flips, 6))


def test_a_forked_child_gets_its_own_crop_pool():
    import multiprocessing as mp

    src = torch.randint(0, 256, (20, 3, 8, 8), dtype=torch.uint8)
    corners, flips = T.draw_crops(20, (8, 8), 5)
    C.crop_flip_normalize(src, range(20), corners, flips, 5, torch.empty(20, 3, 5, 5), threads=2)  # the parent's pool
    with mp.get_context("fork").Pool(1) as pool:  # the child has no thread of it: it must make its own
        got = pool.apply_async(_crop_in_child, (src, corners, flips)).get(timeout=60)
    assert torch.equal(got, C.crop_flip_normalize(src, range(20), corners, flips, 5, torch.empty(20, 3, 5, 5)))


def _crop_in_child(src, corners, flips):
    return C.crop_flip_normalize(src, range(20), corners, flips, 5, torch.empty(20, 3, 5, 5), threads=2)


def test_output_stats_fit_the_dtype():
    assert T.output_stats("x", torch.uint8, list(T.IMAGENET_MEAN), list(T.IMAGENET_STD)) == (None, None)
    with pytest.raises(ValueError, match="x: dtype=torch.uint8 .* mean=.* would go unused"):
        T.output_stats("x", torch.uint8, (0.5,), (0.5,))
    with pytest.raises(ValueError, match="give both mean and std"):
        T.output_stats("x", torch.float32, (0.5,), None)
    with pytest.raises(ValueError, match="torch.uint8 .* or a floating type"):
        T.output_stats("x", torch.int32, None, None)


def test_device_augment_into_uint8_crops_and_flips_only():
    x = images()
    aug = DeviceAugment(crop=5, seed=1, dtype=torch.uint8)
    corners, flips = DeviceAugment(crop=5, seed=1).params(x)
    assert torch.equal(aug(x), T.crop_flip(x, corners, flips, 5))  # the GPU's: test_image_loader's cuda test


def test_crop_pool_threads_run_their_ops_on_one_thread_each_and_leave_the_rest_alone():
    """Issue 26, defect 9: each pool thread's ops are above torch's grain size, so each opened an
    OpenMP team of get_num_threads(): pool x cores threads. In the pool, one intra-op thread each;
    the caller's count and a thread started later keep theirs."""
    import threading

    from gpufeed.data.cpu_crops import crop_pool

    before = torch.get_num_threads()
    pool = crop_pool(3)
    assert list(pool.map(lambda _: torch.get_num_threads(), range(12))) == [1] * 12
    assert torch.get_num_threads() == before
    later = []
    t = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert later == [before]
