"""The instrumented naive loop: stage order, means, rates, and its prediction by the simulator."""

import pytest
import torch

from gpufeed.course.instrument import Recording, list_images, naive_loop, tiny_model, train_step
from gpufeed.course.simulator import Costs, Pipeline, simulate
from gpufeed.course.timeline import Interval
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
