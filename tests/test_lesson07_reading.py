"""Lesson 07's sentences (gpufeed.course.lesson07.reading) on a grid of verdicts: a win, a loss, a tie,
a win inside the spread, too few samples, not measured; their thresholds; the numbers of a noisy
run, where no question may get a verdict and "cannot tell" must read as such; and the uneven steps
and the queue length of the prefetch_factor trial."""

import pytest
import torch
from torch.utils.data import TensorDataset
from verdicts import FEW, GRID, INSIDE, LOSS, MARKS, NOISY_A, NOISY_B, TIE, WIN, noisy

from gpufeed.course.lesson07 import knobs, reading
from gpufeed.measure.verdict import Verdict

UNDECIDED = ("inside the spread", "few samples", "not measured")


@pytest.mark.parametrize("name", list(GRID))
def test_threads(name):
    v = GRID[name]
    assert MARKS[v.kind] in reading.threads(v, default_threads=2, many_ms=2.0, one_ms=3.0)
    assert reading.threads(v, default_threads=1, many_ms=1, one_ms=1).startswith("torch already runs one thread")


@pytest.mark.parametrize("name", list(GRID))
def test_workers_give_causes_only_as_designed_or_likely(name):
    v = GRID[name]
    text = reading.workers(v, v, v, v, cores=2, most=3)
    assert text.count(MARKS[v.kind]) >= 3 or (v.kind == "not measured" and "not measured" in text)
    assert ("decoding is CPU work" in text) == (name == "win")
    assert ("the hand-over" in text) == (name == "loss")
    if name in ("win", "loss"):
        assert "not measured here" in text  # past the cores (win, loss) and the hand-over (loss): likely causes
    assert ("its hand-over cost no more" in text) == (name in ("win", "tie"))
    assert ("Where this run cannot tell" in text) == (name in ("inside the spread", "few samples"))


@pytest.mark.parametrize("name", list(GRID))
def test_pinned_prefetch_and_persistence(name):
    v = GRID[name]
    assert MARKS[v.kind] in reading.pinned("memmap", v, 2)
    pf = reading.prefetch(v, rate=700, bound=800, batches=64, num_workers=2, factors=(1, 4))
    assert MARKS[v.kind] in pf and "64 batches" in pf and "allow 800" in pf
    assert ("a queue of 8 batches" in pf) == (name == "win") and ("did not pay" in pf) == (name == "tie")
    if name in ("win", "tie"):
        assert "not measured here" in pf
    keep = reading.persistence(v, cores=2, method="fork", without_ms=90, with_ms=60)
    assert ("cost about 50% of an epoch" in keep) == (name == "win")
    twice = reading.persistence(WIN, cores=2, method="fork", without_ms=180, with_ms=60)
    assert "cost 2.0x an epoch" in twice  # the threshold: a start-up of more than an epoch reads as a multiple


@pytest.mark.parametrize("name", list(GRID))
def test_copies_pins_and_the_caveat(name):
    v = GRID[name]
    text = reading.copies(v, returns_us=12, pinned_ms=0.4, pageable_returns_ms=0.95, pageable_ms=1.0)
    assert MARKS[v.kind] in text and "3% of it" in text
    pins = reading.pins({"cached": v, "fresh": LOSS}, {"cached": 1.0, "fresh": 3.0}, {"cached": 0, "fresh": 10})
    assert "into a cached block" in pins and "10 new pinned blocks" in pins and MARKS[v.kind] in pins
    gap = reading.pin_by_difference(v, hardware="H100", source="ceilings", nbytes=256 << 20, both_ms=11, copy_ms=5)
    assert ("the pin alone, by difference" in gap) == (name == "loss")
    assert ("cannot say what the pin cost" in gap) == (name != "loss")


def test_the_pin_caveat_gives_the_tutorials_finding_without_repeating_the_sentence():
    from gpufeed.course.transfer import h2d_sentence

    pays = reading.pin_caveat(24.0)
    assert pays.startswith("That tutorial") and "slower than the plain pageable copy" in pays and reading.TUTORIAL in pays
    assert "as the PyTorch tutorial" in h2d_sentence.__doc__  # the sentence 'That tutorial' follows
    assert "caching host allocator" not in pays  # h2d_sentence says it; the caveat follows it
    assert "caching host allocator" in h2d_sentence.__doc__
    assert reading.pin_caveat(None) == ""  # a reference without the series


@pytest.mark.parametrize("name", list(GRID))
def test_movers_and_loading(name):
    v = GRID[name]
    text = reading.movers({"pytree": v, "TensorDict, consolidated": LOSS}, "hand-written recursive",
                          {"hand-written recursive": 50, "pytree": 40, "TensorDict, consolidated": 250}, cuda=False)
    assert MARKS[v.kind] in text and "nothing is copied" in text and "recommend" not in text
    assert "the copies count too" in reading.movers({"pytree": v}, "hand-written recursive",
                                                    {"hand-written recursive": 1, "pytree": 1}, cuda=True)
    load = reading.loading(v, mib=10, device="cpu", map_ms=12, move_ms=12, cuda=False, same=True)
    assert MARKS[v.kind] in load
    assert ("they agree" in load) == (name == "tie") and ("not measured here" in load) == (name in ("win", "loss"))
    assert ("the little Python each adds" in load) == (name in ("win", "loss"))  # a decided gap: not a copy
    assert ("they agree" not in load and "yet they differ" not in load) == (name in UNDECIDED)
    assert "one tensor at a time" in reading.loading(v, mib=1, device="cuda", map_ms=1, move_ms=1, cuda=True, same=False)


def test_main_threads_names_only_a_decided_row():
    both = {("memmap", 0): WIN, ("JPEG folder", 2): LOSS}
    assert "The row that moves is memmap at num_workers=0" in reading.main_threads(both, 2)
    bigger_loss = {("memmap", 0): WIN, ("JPEG folder", 2): Verdict(0.2, 0.15, 0.25, 5, "slower", True)}
    text = reading.main_threads(bigger_loss, 2)
    assert "JPEG folder at num_workers=2" in text and "take cores the workers need" in text and "not measured here" in text
    assert "neither help nor hurt" in reading.main_threads({("memmap", 0): TIE}, 2)
    undecided = reading.main_threads({("memmap", 0): INSIDE, ("JPEG folder", 2): FEW}, 2)
    assert "cannot tell any row apart" in undecided and "The row that moves" not in undecided
    assert "same configuration" in reading.main_threads({("memmap", 0): TIE}, 1)


@pytest.mark.parametrize("name", list(GRID))
def test_two_threads(name):
    v = GRID[name]
    text = reading.two_threads(v, cores=2, one_rate=600, two_rate=610)
    assert MARKS[v.kind] in text
    assert ("one thread either way" in text) == (name == "tie")
    if name in ("win", "loss"):
        assert "not measured here" in text


def test_a_noisy_run_gets_no_verdict_and_reads_cannot_tell():
    v = noisy(NOISY_A, NOISY_B)
    assert v.kind == "cannot tell"
    texts = [
        reading.threads(v, default_threads=2, many_ms=1, one_ms=1),
        reading.workers(v, v, v, v, cores=2, most=3),
        reading.pinned("memmap", v, 2),
        reading.prefetch(v, rate=1, bound=1, batches=64, num_workers=2, factors=(1, 4)),
        reading.persistence(v, cores=2, method="fork", without_ms=1, with_ms=1),
        reading.copies(v, returns_us=1, pinned_ms=1, pageable_returns_ms=1, pageable_ms=1),
        reading.pins({"cached": v, "fresh": v}, {"cached": 1, "fresh": 1}, {}),
        reading.movers({"pytree": v}, "hand-written recursive", {"hand-written recursive": 1, "pytree": 1}, cuda=False),
        reading.loading(v, mib=1, device="cpu", map_ms=1, move_ms=1, cuda=False, same=True),
        reading.main_threads({("memmap", 0): v, ("JPEG folder", 2): v}, 2),
        reading.two_threads(v, cores=2, one_rate=1, two_rate=1),
    ]
    for text in texts:
        assert "cannot tell" in text or "not told apart" in text, text
        assert " faster than" not in text and " slower than" not in text and "as fast as" not in text, text
        assert "not measured here" not in text and "The row that moves" not in text, text


def test_uneven_steps_average_the_mean_in_bursts():
    steps = knobs.uneven_steps(0.01, 64)
    assert len(steps) == 64 and abs(sum(steps) / 64 - 0.01) < 1e-12
    assert steps[:8] == [0.0025] * 8 and all(abs(s - 0.0175) < 1e-12 for s in steps[8:16])


def test_the_prefetch_trial_runs_each_factor_over_whole_passes_in_turns():
    data = TensorDataset(torch.arange(20.0), torch.arange(20))
    ms = knobs.prefetch_trial(data, (1, 2), num_workers=1, batch_size=2, batches=16, step_s=0.0, repeats=2)
    assert [m.name for m in ms] == ["prefetch_factor=1", "prefetch_factor=2"]
    assert all(len(m.samples) == 2 and m.items == 32 and m.params["batches"] == 16 for m in ms)
    with pytest.warns(UserWarning, match="fewer than 8 x workers x factor"):
        knobs.prefetch_trial(data, (1, 4), num_workers=1, batch_size=2, batches=4, step_s=0.0, repeats=1)
