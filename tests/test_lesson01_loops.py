"""Lesson 01's two loops timed in turns (gpufeed.course.lesson01.loops): the arms alternate, share one
model, and their samples, means and verdict come from the right recordings."""

import statistics

import pytest
import torch

from gpufeed.course import instrument
from gpufeed.course.instrument import Recording, list_images
from gpufeed.course.lesson01 import loops
from gpufeed.course.timeline import Interval
from gpufeed.measure.synth import synth_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return synth_folder(tmp_path_factory.mktemp("l01loops") / "jpegs", n=4, size=(32, 32), classes=2, progress=False).path


def test_the_arms_alternate_and_share_one_step(folder, monkeypatch):
    files, labels = list_images(folder)
    calls, real = [], instrument.naive_loop

    def spy(*args, **kw):
        calls.append((kw["workers"], kw["step"]))
        return real(*args, **kw)

    monkeypatch.setattr(loops, "naive_loop", spy)
    t = loops.naive_and_workers(files, labels, batch_size=2, batches=2, rounds=3, workers=2, device=torch.device("cpu"))
    assert [w for w, _ in calls] == [1, 2] * 3  # naive, threads, naive, threads, ...
    assert len({id(s) for _, s in calls}) == 1  # one model for both arms
    naive, threads = t.measurements()
    assert len(naive.samples) == len(threads.samples) == 3 and naive.items == 2
    assert naive.name == "naive" and threads.name == "2 loading threads" and threads.params["threads"] == 2
    assert t.verdict().paired and t.verdict().samples == 3
    assert len(t.decode_ms("workers")) == 3 and len(t.loading_images_per_s()) == 3 * 2  # 2 timed batches a round


def fake(decode_ms, period_ms, batch=2):
    """A recording of one warm-up batch and one timed batch: 2 decodes of decode_ms, then compute."""
    work = [Interval("worker 1", "decode", 0, 1, 0), Interval("GPU", "compute", 1, 2, 0),
            Interval("worker 1", "decode", 2, 2 + decode_ms, 1), Interval("worker 1", "decode", 2 + decode_ms, 2 + 2 * decode_ms, 1),
            Interval("worker 1", "collate", 2 + 2 * decode_ms, 2 + 2 * decode_ms + 1, 1),
            Interval("GPU", "compute", 3 + 2 * decode_ms, 2 + period_ms, 1)]
    return Recording(work, batch, [2.0, 2.0 + period_ms])


def test_samples_means_and_rates_come_from_the_recordings():
    t = loops.InTurns([fake(3.0, 10.0), fake(5.0, 14.0)], [fake(3.0, 9.0), fake(3.0, 9.0)], batch_size=2, threads=2)
    naive, threads = t.measurements()
    assert naive.samples == pytest.approx([0.010, 0.014]) and threads.samples == pytest.approx([0.009, 0.009])
    assert t.stage_ms("naive")["decode"] == pytest.approx(8.0)  # the median of 6 and 10 ms per batch
    assert t.decode_ms("naive") == pytest.approx([3.0, 5.0])     # per image
    assert t.coverage("naive") == pytest.approx(statistics.median([(6 + 1 + 3) / 10, (10 + 1 + 3) / 14]))
    assert t.loading_images_per_s("naive") == pytest.approx([2 * 1000 / 7.0, 2 * 1000 / 11.0])
    with pytest.raises(ValueError, match="no arm"):
        t.recordings("threads")


def test_a_stall_of_one_batch_moves_no_median():
    stalls = [fake(3.0, 10.0), fake(3.0, 10.0), fake(3.0, 250.0)]  # the third batch waited for the scheduler
    t = loops.InTurns(stalls, stalls, batch_size=2, threads=2)
    assert t.stage_ms("naive")["compute"] == pytest.approx(3.0)  # 10 - 7 ms; the mean would read 82 ms
    assert t.coverage("naive") == pytest.approx(1.0)


def test_bad_arguments(folder):
    files, labels = list_images(folder)
    for bad in ({"workers": 1}, {"rounds": 0}, {"batches": 0}):
        kw = {"batch_size": 2, "batches": 1, "rounds": 1, "workers": 2, **bad}
        with pytest.raises(ValueError, match="naive_and_workers"):
            loops.naive_and_workers(files, labels, device=torch.device("cpu"), **kw)
