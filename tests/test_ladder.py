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
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import what_would_tell

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


QUIET = [1.0, 1.01, 0.99, 1.005, 0.995]  # seconds per pass, about 1% of spread: every step decided
NOISY = [1.0, 1.6, 0.6, 1.3, 0.75]  # wide: a step inside it cannot be told


def ladder_of(rates: dict, spread: dict | None = None) -> list[Measurement]:
    """Rungs timed in turns at ``rates`` images/s (100 images a pass), each with QUIET or ``spread``'s samples."""
    return [Measurement(k, [100 / r * x for x in (spread or {}).get(k, QUIET)], items=100) for k, r in rates.items()]


def test_each_step_is_a_verdict_on_the_rung_above():
    ms = ladder_of({"naive": 100.0, "workers": 50.0, "uint8": 400.0, "course": 1200.0, "dali": 300.0})
    v = ladder.step_verdicts(ms)
    assert set(v) == {"workers", "uint8", "course", "total", "dali", "dali/naive", "dali/uint8"}
    assert (v["workers"].kind, v["uint8"].kind, v["course"].kind, v["dali"].kind) == ("slower", "faster", "faster", "slower")
    assert v["total"].ratio == pytest.approx(12.0) and v["dali/naive"].ratio == pytest.approx(3.0)
    assert v["dali/uint8"].ratio == pytest.approx(0.75)  # against the DataLoader that also decodes every JPEG
    assert ladder.step_verdicts(ladder_of({"naive": 1.0, "dali": 2.0}))["dali/uint8"].kind == "not measured"
    with pytest.raises(ValueError, match="naive"):
        ladder.step_verdicts(ladder_of({"course": 1.0}))


def test_the_reading_states_losses_plainly_with_their_likely_cause():
    text = ladder.read(ladder_of({"naive": 100.0, "workers": 80.0, "uint8": 80.0, "course": 1000.0, "dali": 250.0}),
                       cores=2, busy={"naive": 1.0, "workers": 1.9, "uint8": 1.8, "course": 1.1, "dali": 1.7})
    assert "the loader's rate got 10.00x faster (" in text and "'+ batched augmentation' (lesson 09)" in text
    assert ("'+ workers' (1.9 cores busy, against 1.0 for the rung above) ran 1.25x slower than the rung above ("
            in text)
    assert "one likely cause, not measured here: 2 worker processes share the 2 cores" in text
    assert "'+ uint8 on the wire' (1.8 cores busy, against 1.9 for the rung above) ran as fast as the rung above (within" in text
    assert ("DALI, as a side rung, made 250 images/s (1.7 cores busy, against 1.1 for the course pipeline): it ran "
            "2.50x faster than naive (") in text and "and ran 4.00x slower than the course pipeline (" in text
    assert ("ran 3.12x faster than '+ uint8 on the wire', the tuned DataLoader that also decodes every JPEG in every "
            "epoch on these cores (3.12x to 3.12x), and" in text)
    assert "One likely cause of the last, not measured here: DALI decodes every JPEG" in text
    assert "cannot tell" not in text  # every step decided


def test_the_reading_never_calls_a_loss_the_biggest_step():
    text = ladder.read(ladder_of({"naive": 100.0, "workers": 80.0, "uint8": 50.0}), cores=2)
    assert "got 2.00x slower" in text and "biggest step" not in text
    assert "No rung was told faster than the rung above it." in text


@pytest.mark.parametrize("workers, spread, words", [
    (100.0, None, "'+ workers' ran as fast as the rung above (within"),                       # a tie
    (50.0, None, "'+ workers' ran 2.00x slower than the rung above ("),                       # a loss
    (200.0, None, "The biggest step this run tells was '+ workers' (lesson 07): 2.00x faster ("),  # a win
    (110.0, {"workers": NOISY}, "This run cannot tell '+ workers' ("),                          # a win inside the spread
])
def test_each_step_reads_its_verdict_on_a_grid(workers, spread, words):
    text = ladder.read(ladder_of({"naive": 100.0, "workers": workers, "course": 1.5 * workers}, spread), cores=2)
    assert words in text
    assert (what_would_tell() in text) == ("cannot tell" in words)  # what would tell, said once where a step cannot


def test_too_few_passes_cannot_tell_any_step():
    ms = [Measurement(m.name, m.samples[:3], items=m.items) for m in ladder_of({"naive": 100.0, "workers": 400.0})]
    text = ladder.read(ms, cores=2)
    assert "the loader's rate was not told apart by this run (3 samples per arm)" in text
    assert "This run cannot tell '+ workers'" in text and "at least 5" in text and "biggest" not in text


def test_the_tie_threshold_of_a_step():
    edge = [1.0, 1.06, 0.94, 1.03, 0.97]
    wide = [1.0, 1.2, 0.8, 1.15, 0.85]
    tie = ladder.read(ladder_of({"naive": 100.0, "workers": 100.0}, {"workers": edge}), cores=2)
    assert "'+ workers' ran as fast as the rung above (within" in tie
    assert "This run cannot tell '+ workers'" in ladder.read(ladder_of({"naive": 100.0, "workers": 100.0},
                                                                       {"workers": wide}), cores=2)


def test_dali_faster_than_the_course_gets_no_cause_the_page_did_not_measure():
    text = ladder.read(ladder_of({"naive": 100.0, "course": 1000.0, "dali": 2000.0}), cores=2)
    assert "ran 20.00x faster than naive (20.00x to 20.00x), and ran 2.00x faster than the course pipeline (" in text
    assert "uint8" not in text  # no tuned DataLoader rung measured: nothing said of it
    assert "what makes it faster here is not measured on this page" in text and "likely cause" not in text


def test_busy_counts_the_cores_of_each_rung():
    busy = ladder.Busy()

    def epoch():
        start = time.process_time()
        while time.process_time() - start < 0.05:  # one thread spins: about one core
            pass
        yield torch.zeros(2), torch.zeros(2)

    assert busy.run("spin", epoch) == 2
    assert busy.cpu_s["spin"] >= 0.045 and busy.wall_s["spin"] >= busy.cpu_s["spin"] / 1.5  # CPU time, not wall time
    assert busy.cores()["spin"] == round(busy.cpu_s["spin"] / busy.wall_s["spin"], 2)


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
