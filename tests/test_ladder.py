"""Lesson 11's ladder: every rung yields the naive rung's images; the reading and the chart."""

import pickle
import time

import matplotlib.pyplot as plt
import pytest
import torch
from test_pipelines import SQUARE, grey_levels, match_epoch, normalised, reference

from gpufeed.course.lesson11 import ladder
from gpufeed.data import transforms as T
from gpufeed.data.memmap import load_memmap
from gpufeed.measure import dali as gdali
from gpufeed.measure import pipelines as P

# torchvision (or TorchCodec) decodes the uint8 rung; Pillow decodes the rest (the memmap too).
TOLERANCE = {"uint8": 2.0, "dali": 2.0}


@pytest.fixture(scope="module")
def square(tmp_path_factory):
    return P.prepare(SQUARE, tmp_path_factory.mktemp("square"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return P.prepare(P.TINY, tmp_path_factory.mktemp("tiny"))


def test_the_ladder_is_in_the_courses_order():
    assert [r.key for r in ladder.LADDER] == ["naive", "workers", "uint8", "memmap", "batched", "prefetch", "course"]
    assert set(ladder.RUNGS) == {*(r.key for r in ladder.LADDER), "dali"}


def test_every_rung_yields_each_decoded_image_once(square):
    rungs = ladder.rungs(square, SQUARE, "cpu", workers=0)
    assert list(rungs) == [r.key for r in ladder.LADDER]
    ref = reference(square)
    for key, epoch in rungs.items():
        for _ in range(2):  # a second epoch too: loaders and prefetchers start over
            match_epoch(epoch(), *ref, tolerance=TOLERANCE.get(key, 1e-3))
        assert ladder.epoch_pass(epoch) == SQUARE.n // SQUARE.batch * SQUARE.batch


def test_rungs_with_worker_processes_yield_the_same_images(square):
    rungs = ladder.rungs(square, SQUARE, "cpu", workers=1)
    ref = reference(square)
    for key in ("workers", "uint8", "memmap"):
        match_epoch(rungs[key](), *ref, tolerance=TOLERANCE.get(key, 1e-3))


def test_what_workers_receive_survives_pickling(square):
    ds = pickle.loads(pickle.dumps(ladder.memmap_samples(square, SQUARE)))  # the spawn start method's path
    image, target = ds[3]
    data = load_memmap(square.memmap)
    assert image.dtype == torch.uint8 and target == data.targets[3].item()
    assert torch.equal(image, data.images[3]) or torch.equal(image, data.images[3].flip(-1))


@pytest.mark.skipif(not gdali.available(), reason="DALI is not installed")
def test_the_dali_side_rung_yields_the_same_images(square):
    epoch = ladder.rungs(square, SQUARE, "cpu", workers=1, dali=True)["dali"]
    match_epoch(epoch(), *reference(square), tolerance=2.0)


def test_host_crops_follow_the_loaders_order_with_the_memmaps_values(square):
    crops = ladder.HostCrops(square, SQUARE, "cpu", seed=3)
    order = torch.cat(crops.loader.indices(0))
    batches = list(crops)
    assert len(batches) == len(crops) == SQUARE.n // SQUARE.batch
    data = load_memmap(square.memmap)
    images, targets = torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])
    assert images.dtype == torch.uint8 and torch.equal(targets, data.targets[order])
    flipped = [not torch.equal(image, data.images[i]) for image, i in zip(images, order.tolist())]
    for image, i, f in zip(images, order.tolist(), flipped):
        assert torch.equal(image, data.images[i].flip(-1) if f else data.images[i])
    assert any(flipped) and not all(flipped)  # the flip is random per image


def test_host_crops_cut_the_windows_their_generator_draws(tiny):
    crops = ladder.HostCrops(tiny, P.TINY, "cpu", seed=1)
    idx = crops.loader.indices(0)[0]
    images, targets = next(iter(crops))
    data = load_memmap(tiny.memmap)
    corners, flips = T.draw_crops(P.TINY.batch, (P.TINY.resize, P.TINY.resize), P.TINY.crop,
                                  torch.Generator().manual_seed(1))
    assert torch.equal(images, T.crop_flip(data.images[idx], corners, flips, P.TINY.crop))
    assert torch.equal(targets, data.targets[idx])


def test_the_prefetched_rung_keeps_the_order_and_normalises(square):
    plain, ahead = (ladder.HostCrops(square, SQUARE, "cpu", seed=2) for _ in range(2))
    want = list(plain)
    got = list(ladder.prefetched(ahead, "cpu"))
    assert len(got) == len(want)
    for (x, y), (raw, target) in zip(got, want):
        ref = normalised(raw)
        assert x.dtype == torch.float32 and torch.equal(y, target)
        assert grey_levels(x, ref) < 1e-3


def test_crop_flip_transform_is_reproducible_with_a_seed():
    image = torch.randint(0, 256, (3, 10, 12), dtype=torch.uint8)
    a, b = T.CropFlip(6, seed=4), T.CropFlip(6, seed=4)
    assert all(torch.equal(a(image), b(image)) for _ in range(5))
    assert a(image).shape == (3, 6, 6)


def test_rows_give_each_step_and_the_total_and_put_dali_beside_the_course():
    got = ladder.rows({"naive": 100.0, "workers": 50.0, "batched": 1000.0, "course": 2000.0, "dali": 500.0})
    assert [r["key"] for r in got] == ["naive", "workers", "batched", "course", "dali"]
    assert [r["step"] for r in got] == [1.0, 0.5, 20.0, 2.0, 0.25]
    assert [r["total"] for r in got] == [1.0, 0.5, 10.0, 20.0, 5.0]
    with pytest.raises(ValueError, match="naive"):
        ladder.rows({"course": 1.0})


def test_the_reading_states_losses_plainly_with_their_reason():
    text = ladder.read(ladder.rows({"naive": 100.0, "workers": 80.0, "uint8": 82.0, "course": 1000.0,
                                    "dali": 250.0}), cores=2)
    assert "got 10.00x faster" in text and "'+ batched augmentation' (lesson 09)" in text
    assert "'+ workers' made it 1.25x slower here: 2 worker processes share the 2 cores" in text
    assert "'+ uint8 on the wire' changed little here (1.02x faster, within the runs' spread of 5%)" in text
    assert ("DALI, as a side rung: 250 images/s, 2.50x faster than naive and 4.00x slower than the course "
            "pipeline: DALI decodes") in text


def test_the_reading_never_calls_a_loss_the_biggest_step():
    text = ladder.read(ladder.rows({"naive": 100.0, "workers": 80.0, "uint8": 50.0}), cores=2)
    assert "got 2.00x slower" in text and "biggest step" not in text
    assert "No rung gained here: the least loss was '+ workers' (lesson 07), 1.25x slower." in text


def test_each_step_is_read_against_the_spread_of_the_two_rungs_it_compares():
    def reading(workers: float, spread=None, dali: float | None = None) -> str:
        rates = {"naive": 100.0, "workers": workers, "course": 1000.0} | ({"dali": dali} if dali else {})
        return ladder.read(ladder.rows(rates), cores=2, spread=spread)

    noisy = {"naive": 0.25, "workers": 0.1, "course": 0.02}  # 0.25: exact in binary, so the edge is testable
    assert "'+ workers' changed little here (as fast, within the runs' spread of 5%)" in reading(100.0)  # a tie
    assert "'+ workers' changed little here (1.20x faster, within the runs' spread of 25%)" in reading(120.0, noisy)
    assert "'+ workers' changed little here (1.25x faster, within" in reading(125.0, noisy)  # at the edge: inside
    assert "'+ workers'" not in reading(130.0, noisy)  # a win past the spread needs no excuse
    assert "'+ workers' changed little here (1.20x slower, within the runs' spread of 25%)" in reading(100 / 1.2, noisy)
    assert "'+ workers' made it 1.30x slower here" in reading(100 / 1.3, noisy)  # a loss past the spread
    assert "'+ workers' made it 1.30x slower here" in reading(100 / 1.3, {"naive": 0.01})  # flat decides
    assert "as fast as the course pipeline." in reading(80.0, {"course": 0.25}, dali=900.0)  # DALI inside the band
    assert "2.00x slower than the course pipeline: DALI decodes" in reading(80.0, {"course": 0.25}, dali=500.0)
    assert "got 10.00x faster" in reading(80.0, noisy) and "rate stayed within the runs' spread (20%)" in ladder.read(
        ladder.rows({"naive": 100.0, "course": 110.0}), cores=2, spread={"course": 0.2})


def test_the_chart_labels_every_rung_with_its_ratio_to_naive():
    rows = ladder.rows({"naive": 100.0, "workers": 80.0, "course": 1000.0, "dali": 300.0})
    fig, ax = ladder.plot(rows, {"cpu": "Demo CPU", "cores": 2})
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["naive [01] (1.00x)", "+ workers [07] (0.80x)", "+ batched augmentation [09] (10.00x)",
                      "DALI (side rung) [10] (3.00x)"]
    notes = [t.get_text() for t in ax.texts]
    assert "80/s, -20% on the rung above" in notes and "300/s, -70% on the course" in notes
    assert ax.get_xscale() == "log"
    plt.close(fig)


def test_a_slow_loader_without_workers_is_cut_to_the_batches_that_fit_its_time():
    made = []

    def epoch():  # a loader without workers: nothing runs unless asked for the next batch
        for i in range(50):
            made.append(i)
            time.sleep(0.004)
            yield torch.zeros(2, 3), torch.zeros(2)

    k = ladder.batches_within(epoch, seconds=0.04, total=50)
    assert 1 <= k <= 10  # 0.04 s at >= 4 ms a batch, start-up counted: never more than fit
    assert ladder.batches_within(epoch, seconds=60.0, total=50) == 50  # never more than a pass has
    made.clear()
    assert ladder.epoch_pass(ladder.first_batches(epoch, 3)) == 6  # 3 batches of 2 images
    assert made == [0, 1, 2]  # and not one batch more was made
