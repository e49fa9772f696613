"""The benchmark's pipelines: each one yields the same images as the naive one, the fast paths agree."""

import itertools

import numpy as np
import pytest
import torch
from PIL import Image

from gpufeed.data.folder import scan
from gpufeed.data.memmap import load_memmap
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from gpufeed.measure import dali as gdali
from gpufeed.measure import pipelines as P

STD255 = torch.tensor(IMAGENET_STD).view(3, 1, 1) * 255
# Square JPEGs of exactly the crop size: no resize, no crop freedom, only the random flip, so
# every pipeline must reproduce the decoded files themselves.
SQUARE = P.Workload(n=8, jpeg_size=(32, 32), resize=32, crop=32, batch=4, classes=2)


@pytest.fixture(scope="module")
def square(tmp_path_factory):
    return P.prepare(SQUARE, tmp_path_factory.mktemp("square"))


def normalised(image):
    """The textbook reference: ``uint8 [3, H, W]`` (or float 0..255) to ``(x / 255 - mean) / std``."""
    x = image.float() / 255
    return (x - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(IMAGENET_STD).view(3, 1, 1)


def reference(data):
    """Every file decoded by Pillow and normalised, with its target: what the naive loop starts from."""
    samples, _ = scan(data.jpeg)
    images = []
    for path, _ in samples:
        with Image.open(path) as im:
            hwc = torch.from_numpy(np.array(im.convert("RGB")))  # [H, W, 3]
        images.append(normalised(hwc.permute(2, 0, 1)))
    return torch.stack(images), torch.tensor([t for _, t in samples])


def grey_levels(a, b):
    return ((a - b).abs() * STD255).amax().item()


def match_epoch(batches, ref_images, ref_targets, tolerance):
    """Each yielded image is one reference image (or its mirror image) with the same target, and
    the epoch uses every reference image exactly once."""
    used = []
    for images, targets in batches:
        assert images.dtype == torch.float32 and images.shape[1:] == (3, SQUARE.crop, SQUARE.crop)
        for image, target in zip(images, targets.tolist()):
            errors = [(min(grey_levels(image, r), grey_levels(image, r.flip(-1))), i)
                      for i, r in enumerate(ref_images) if ref_targets[i] == target]
            error, i = min(errors)
            assert error <= tolerance, f"no reference image within {tolerance} grey levels (best {error:.2f})"
            used.append(i)
    assert sorted(used) == list(range(len(ref_images)))


def test_naive_yields_each_decoded_image_once(square):
    match_epoch(P.naive(square, SQUARE, "cpu"), *reference(square), tolerance=1e-3)


def test_tuned_yields_the_same_images_as_naive(square):
    loader = P.tuned_loader(square, SQUARE, "cpu", workers=0)
    # torchvision/TorchCodec and Pillow both decode with libjpeg-turbo; versions may round a level apart
    match_epoch(P.tuned(loader, "cpu"), *reference(square), tolerance=2.0)


def test_course_yields_the_memmap_images_in_the_loaders_order(square):
    course = P.Course(square, SQUARE, "cpu", seed=5)
    data = load_memmap(square.memmap)
    order = torch.cat(course.loader.indices(0))
    batches = [(x.clone(), y) for x, y in course]  # the bench's Course reuses 2 output buffers: keep copies
    got_images = torch.cat([x for x, _ in batches])
    assert torch.equal(torch.cat([y for _, y in batches]), data.targets[order])
    for image, i in zip(got_images, order.tolist()):
        ref = normalised(data.images[i])
        assert min(grey_levels(image, ref), grey_levels(image, ref.flip(-1))) < 1e-3
    match_epoch(batches, *reference(square), tolerance=1e-3)  # and those are the decoded files


@pytest.mark.skipif(not gdali.available(), reason="DALI is not installed")
def test_dali_yields_the_same_images_as_naive(square, monkeypatch):
    from gpufeed.measure import suite

    source, idle = suite.dali_source(square, SQUARE, "cpu", threads=1), []
    waited = suite.wait_idle
    monkeypatch.setattr(suite, "wait_idle", lambda: idle.append(len(idle)) or waited())
    epoch = source()
    match_epoch(itertools.islice(epoch, SQUARE.n // SQUARE.batch), *reference(square), tolerance=2.0)
    assert idle == []  # the last batch handed over: the epoch has not ended yet
    assert next(epoch, None) is None and idle == [0]  # it ends once DALI's threads are idle, and only then
    match_epoch(source(), *reference(square), tolerance=2.0)  # the next epoch too (auto_reset)
    assert idle == [0, 1]


def test_only_dalis_passes_wait_for_its_threads(monkeypatch):
    from gpufeed.measure import suite

    order = []
    monkeypatch.setattr(suite, "wait_idle", lambda: order.append("idle"))
    run = lambda: order.append("pass") or 4  # noqa: E731  (a pass of 4 images)
    assert suite.ending_idle("dali", run)() == 4 and order == ["pass", "idle"]  # the pass, then the wait, in it
    order.clear()
    assert suite.ending_idle("tuned", run) is run and suite.ending_idle("course", run)() == 4 and order == ["pass"]


def test_waiting_for_idle_lasts_until_the_threads_of_this_process_stop(monkeypatch):
    import time

    from gpufeed.measure import suite

    clock = {"wall": 0.0, "cpu": 0.0, "busy": 5}  # a thread works ahead for 5 windows, a whole core each

    def sleep(s):
        clock["wall"] += s
        if clock["busy"]:
            clock["busy"] -= 1
            clock["cpu"] += s

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(time, "process_time", lambda: clock["cpu"])
    assert suite.wait_idle(window_s=0.01) == pytest.approx(0.06)  # 5 busy windows, then 1 idle one
    assert suite.wait_idle(window_s=0.01) == pytest.approx(0.01)  # idle already: one window
    clock["busy"] = 10**6
    assert suite.wait_idle(most_s=0.5, window_s=0.01) == pytest.approx(0.5)  # never idle: it gives up at most_s


def test_workload_checks_its_sizes():
    with pytest.raises(ValueError, match="crop <= resize"):
        P.Workload(n=8, jpeg_size=(32, 32), resize=16, crop=24, batch=4)
    with pytest.raises(ValueError, match="batch <= n"):
        P.Workload(n=2, jpeg_size=(32, 32), resize=16, crop=8, batch=4)
    assert P.workload(True, "cpu") is P.QUICK and P.workload(False, "cpu") is P.FULL_CPU


def test_prepare_reuses_what_it_made_and_names_the_folder_on_failure(tmp_path):
    first = P.prepare(P.TINY, tmp_path)
    again = P.prepare(P.TINY, tmp_path)
    assert (again.jpeg, again.memmap) == (first.jpeg, first.memmap) and again.memmap_s == 0.0
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(P.PipelineError, match=str(blocked)):
        P.prepare(P.TINY, blocked)


def test_resident_batches_are_ready_for_the_model():
    batches = P.resident(P.TINY, "cpu", batches=2)
    assert len(batches) == 2
    for images, targets in itertools.islice(batches, 2):
        assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32 and targets.max() < 2


def test_device_pipelines_never_sync_the_host_in_steady_state(square, on_cuda):
    from cudacheck import consume_on_the_gpu, no_host_sync

    course = P.Course(square, SQUARE, "cuda", seed=0)
    list(course)  # warm-up epoch
    it = iter(course)
    next(it)
    with no_host_sync():
        assert consume_on_the_gpu(it) == len(course) - 1
    batches = P.resident(SQUARE, "cuda", batches=3)
    with no_host_sync():
        assert consume_on_the_gpu(batches) == 3
