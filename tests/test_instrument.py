"""The instrumented naive loop: stage order, means, rates, and its prediction by the simulator."""

import pytest
import torch

from gpufeed.course.instrument import Recording, list_images, naive_loop, tiny_model, train_step
from gpufeed.course.simulator import Costs, Pipeline, simulate
from gpufeed.course.timeline import Interval
from gpufeed.data.jpeg import collate_images
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return synth_folder(tmp_path_factory.mktemp("l01") / "jpegs", n=6, size=(48, 32), classes=3, progress=False).path


def test_stages_run_in_order_and_never_overlap(folder):
    files, labels = list_images(folder)
    assert len(files) == 6 and sorted(set(labels)) == [0, 1, 2]
    rec = naive_loop(files, labels, batch_size=4, n_batches=3, device=torch.device("cpu"))
    stages = [i.stage for i in rec.intervals]
    assert stages == (["read", "decode"] * 4 + ["collate", "copy", "compute"]) * 3
    assert all(a.end <= b.start for a, b in zip(rec.intervals, rec.intervals[1:]))
    assert {i.resource for i in rec.intervals} == {"worker 1", "copy engine", "compute (CPU)"}
    assert [i.batch for i in rec.intervals if i.stage == "compute"] == [0, 1, 2]
    assert rec.step_end == [i.end for i in rec.intervals if i.stage == "compute"]


def test_means_rates_and_the_simulators_prediction(folder):
    files, labels = list_images(folder)
    rec = naive_loop(files, labels, batch_size=3, n_batches=4, device=torch.device("cpu"))
    means = rec.stage_means()
    assert set(means) == {"read", "decode", "collate", "copy", "compute"}
    m = rec.measurement("naive", size="48x32")
    assert len(m.samples) == 3 and m.items == 3 and m.params["size"] == "48x32"
    assert rec.images_per_s == pytest.approx(3 / (sum(m.samples) / 3))
    # a serial loop is the sum of its stages, plus the small gaps between them
    predicted = simulate(Pipeline(batch_size=3, costs=Costs.from_stage_means(means, 3)), n_batches=8)
    assert predicted.ms_per_batch == pytest.approx(sum(means.values()), rel=1e-6)
    assert predicted.ms_per_batch <= rec.ms_per_batch


def test_recording_arithmetic_without_running_anything():
    work = [Interval("w", "decode", 0, 4, 0), Interval("g", "compute", 4, 5, 0),
            Interval("w", "decode", 5, 7, 1), Interval("g", "compute", 7, 8, 1),
            Interval("w", "decode", 8, 11, 2), Interval("g", "compute", 11, 12, 2)]
    rec = Recording(work, batch_size=2, step_end=[5, 8, 12])
    assert rec.stage_means() == {"decode": 2.5, "compute": 1.0}
    assert rec.periods_ms() == [3, 4] and rec.ms_per_batch == 3.5
    assert Recording(work, 2, [5, 8, 12], skip=0).periods_ms() == [5, 3, 4]
    assert rec.per_batch() == [{"decode": 2, "compute": 1}, {"decode": 3, "compute": 1}]


def test_model_takes_uint8_and_learns_a_step():
    model = tiny_model(3)
    x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    assert model(x).shape == (4, 3)
    step = train_step(model, lr=0.1)
    y = torch.tensor([0, 1, 2, 0])
    first = step(x, y)
    assert isinstance(first, float) and step(x, y) < first + 1e-3


def test_bad_input(tmp_path, folder):
    with pytest.raises(FileNotFoundError, match="synth_folder"):
        list_images(tmp_path)
    files, labels = list_images(folder)
    with pytest.raises(ValueError, match="n_batches"):
        naive_loop(files, labels, 2, 1, torch.device("cpu"))


def test_worker_threads_load_a_batch_and_the_loop_collates(folder):
    files, labels = list_images(folder)
    rec = naive_loop(files, labels, batch_size=4, n_batches=3, device=torch.device("cpu"), workers=2)
    loaders = {i.resource for i in rec.intervals if i.stage in ("read", "decode")}
    assert loaders <= {"worker 1", "worker 2"} and loaders
    assert {i.resource for i in rec.intervals if i.stage == "collate"} == {"loop"}
    for b in range(3):  # every sample read and decoded once per batch, before that batch's collate
        mine = [i for i in rec.intervals if i.batch == b]
        assert sum(i.stage == "decode" for i in mine) == 4 and sum(i.stage == "read" for i in mine) == 4
        collate = next(i for i in mine if i.stage == "collate")
        assert all(i.end <= collate.start for i in mine if i.stage in ("read", "decode"))
    assert len(rec.loading_ms()) == 2 and all(ms > 0 for ms in rec.loading_ms())


def test_the_collate_is_a_choice_and_the_batches_agree(folder):
    files, labels = list_images(folder)
    seen = {}

    def keep(name, collate):
        def step(x, y):
            seen.setdefault(name, []).append(x.clone())
            return 0.0
        naive_loop(files, labels, batch_size=3, n_batches=2, device=torch.device("cpu"), step=step, collate=collate)

    keep("default", collate_images)
    keep("stack", torch.stack)
    assert all(torch.equal(a, b) for a, b in zip(seen["default"], seen["stack"]))
    assert seen["default"][0].is_contiguous(memory_format=torch.channels_last)  # no transposing copy


def test_loading_time_is_the_wall_clock_of_a_batchs_loading():
    work = [Interval("worker 1", "read", 0, 1, 1), Interval("worker 2", "read", 0.5, 1, 1),
            Interval("worker 1", "decode", 1, 4, 1), Interval("worker 2", "decode", 1, 3, 1),
            Interval("loop", "collate", 4, 5, 1), Interval("GPU", "compute", 5, 9, 1)]
    assert Recording(work, 2, [0.0, 9.0]).loading_ms() == [5.0]  # 0 to 5, not the 1 + 0.5 + 3 + 2 + 1 summed


def test_workers_must_be_at_least_one(folder):
    files, labels = list_images(folder)
    with pytest.raises(ValueError, match="workers"):
        naive_loop(files, labels, 2, 2, torch.device("cpu"), workers=0)
