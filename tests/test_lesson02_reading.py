"""Lesson 02's sentences (gpufeed.course.lesson02.reading) on a grid of verdicts: a tie, a loss, a win
inside the spread, too few samples, the narrow threshold, a missing side; a noisy run read whole; and
the first step timed on new image sizes (gpufeed.course.lesson02.firstcall)."""

import pytest
from verdict_grid import CANT, FEW, LOSS, NONE, QUIET, TIE, WIDE, WIN, reads_as_cannot_tell

from gpufeed.course.lesson02 import firstcall, reading
from gpufeed.measure.verdict import (
    CANNOT_TELL,
    FASTER,
    NARROW,
    SAME,
    SLOWER,
    Verdict,
    compare,
)


def grid(fn, cases):
    for v, has, lacks in cases:
        text = fn(v)
        assert all(h in text for h in has), text
        assert not any(w in text for w in lacks), text


def test_lazy_reading_on_a_grid():
    grid(lambda v: reading.lazy_reading(v, 8, 150e-9, 5e-3), [
        (Verdict(1 / 30000, 1 / 33000, 1 / 27000, 5, SLOWER, True), ["150 ns", "5.0 ms", "**30000x longer**",
                                                                      "measured nothing"], ["cannot"]),
        (TIE, ["as long", "did not see the work"], ["measured nothing"]),
        (WIN, ["shorter", "did not see the work"], ["measured nothing"]),
        (CANT, ["This run cannot tell the real decode from the lazy time"], ["measured nothing"]),
        (FEW, ["3 samples per arm"], ["measured nothing"]),
        (NONE, ["This run cannot tell"] if NONE.advice else ["The two were not compared"], ["measured nothing"]),
    ])


def test_first_reading_on_a_grid():
    cause = "starting two worker processes"
    grid(lambda v: reading.first_reading(v, "the first batch", "each batch after it", cause), [
        (LOSS, ["The first batch took **2.00x longer** than each batch after it",
                "One likely cause, not measured here: starting two worker processes."], ["paid nothing"]),
        (TIE, ["**as long** as each batch after it", "paid nothing that shows"], ["likely cause"]),
        (WIN, ["**1.50x shorter**", "paid nothing that shows"], ["likely cause"]),
        (CANT, ["This run cannot tell the first batch from each batch after it"], ["likely"]),
        (FEW, ["3 samples per arm"], ["likely"]),
        (NONE, ["The first batch was not measured here."], ["likely"]),
    ])
    assert "likely" not in reading.first_reading(LOSS, "the first batch", "the rest")  # no cause given, none said
    assert reading.first_reading(LOSS, "a new DataLoader's first batch", "the rest").startswith("A new DataLoader's")


def test_sync_reading_on_a_grid():
    grid(lambda v: reading.sync_reading(v, "H100"), [
        (Verdict(50.0, 45.0, 55.0, 7, FASTER, True), ["On H100", "**50.00x shorter** than the one with a sync",
                                                      "timed the queueing"], ["cannot"]),
        (TIE, ["**as long**", "one likely cause, not measured here"], ["queueing"]),
        (LOSS, ["longer", "run the cell again"], ["queueing"]),
        (CANT, ["This run cannot tell the timer without a sync from the one with it"], ["queueing"]),
        (FEW, ["3 samples per arm"], ["queueing"]),
        (NONE, ["were not measured"], ["queueing"]),
    ])


def test_tools_agree_on_a_grid():
    grid(lambda v: reading.tools_agree(v, 7), [
        (TIE, ["Timed in turns, 7 rounds each, the harness read **the same** as Timer (within 4%)",
               "the same answer"], ["disagree"]),
        (WIN, ["**1.50x shorter** than Timer", "disagree beyond this run's noise", "not measured here"], ["same answer"]),
        (LOSS, ["**2.00x longer** than Timer", "disagree"], ["same answer"]),
        (CANT, ["This run cannot tell the harness from Timer, timed in turns (7 rounds each)"], ["disagree"]),
        (FEW, ["3 samples per arm"], ["disagree", "same answer"]),
        (NONE, ["not compared here"], ["same answer"]),
    ])


def test_collate_reading_on_a_grid():
    grid(lambda v: reading.collate_reading(v, 8, 1.2), [
        (LOSS, ["Stacking 8 decoded images (1.2 MB), torch.stack took **2.00x longer** than collate_images",
                "the strides above"], ["nothing that shows"]),
        (TIE, ["**as long**", "cost nothing that shows"], ["strides"]),
        (WIN, ["**1.50x shorter**", "cost nothing that shows"], ["strides"]),
        (CANT, ["This run cannot tell torch.stack from collate_images on 8 images"], ["strides"]),
        (FEW, ["3 samples per arm"], ["strides"]),
        (NONE, ["not compared here"], ["strides"]),
    ])


def test_iter_reading_on_a_grid():
    ms = {"iter0": 0.1, "next0": 0.7, "iter2": 60.0, "next2": 20.0}
    text = reading.iter_reading(LOSS, LOSS, LOSS, ms)
    assert "with workers **2.00x longer** than with 0" in text
    assert "the work is in next(): 0.70 ms, 2.00x longer than iter() (1.82x to 2.22x); timing only iter()" in text
    assert "most of the start-up landed in iter(), which starts the worker processes: 60.0 ms, 2.00x longer" in text
    text = reading.iter_reading(LOSS, TIE, WIN, ms)
    assert "first next() took as long as iter()" in text and "the first next() took longer: 20.0 ms" in text
    assert "split between them" in reading.iter_reading(LOSS, LOSS, TIE, ms)
    noisy = reading.iter_reading(CANT, FEW, NONE, ms)
    assert noisy.count("This run cannot tell") == 1 and "or the first next() from iter() with 0 workers" in noisy
    assert "With 2 workers, iter() and the first next() were not compared." in noisy
    cant = reading.iter_reading(CANT, CANT, CANT, ms)  # the advice said once, naming all three
    assert cant.count("This run cannot tell") == 1 and "iter() from the first next() with 2 workers: each interval" in cant


def test_aa_reading_on_a_grid():
    grid(reading.aa_reading, [
        (TIE, ["The A/A test reads the same as itself (within 4%)", "invents no difference"], ["Run the cell"]),
        (CANT, ["Even one function against itself was not told apart from itself by this run (0.70x to 1.60x)", "would tell"], ["invents"]),
        (FEW, ["The A/A test: This run cannot tell collate_images from itself: 3 samples per arm"], ["invents"]),
        (WIN, ["a difference where there is none (1.50x faster than itself", "one time in ten",
               "one likely cause, not measured here: the arms' places", "no larger than this one"], ["invents"]),
        (LOSS, ["a difference where there is none (2.00x slower than itself"], ["invents"]),
        (NONE, ["was not run"], ["invents"]),
    ])


def test_verdict_table_lines_up_every_kind():
    table = reading.verdict_table({"win": WIN, "loss": LOSS, "tie": TIE, "wide": CANT, "few": FEW, "none": NONE})
    lines = table.splitlines()
    assert lines[0].split() == ["A", "against", "B", "samples", "ratio", "interval", "verdict"]
    col = lines[0].index("verdict")  # every column padded to one width: the verdicts line up under it
    assert [line[col:] for line in lines[1:]] == ["faster", "slower", "the same", "cannot tell",
                                                  "cannot tell (fewer than 5)", "not measured"]
    assert lines[6].split()[1:4] == ["0", "-", "-"]


def test_the_narrow_threshold_decides_between_the_same_and_cannot_tell():
    inside = [1.0 + (x - 1.0) * 5 for x in QUIET]     # about 5% of spread: within the narrow band
    wider = [1.0 + (x - 1.0) * 40 for x in QUIET]     # about 40%
    tie, cant = compare(inside, inside[::-1], paired=True), compare(wider, wider[::-1], paired=True)
    assert tie.kind == SAME and tie.within <= NARROW and cant.kind == CANNOT_TELL
    assert "the same answer" in reading.tools_agree(tie, 7) and "cannot tell" in reading.tools_agree(cant, 7)


def test_a_noisy_run_reads_cannot_tell_and_never_both_ways():
    """Made-up numbers of a noisy 2-core run, every arm inside the other's spread: each question the
    page words is answered "cannot tell", and none gets a gain in one sentence and a loss in another."""
    def noisy(scale, shift=0):
        return [scale * x for x in WIDE[shift:] + WIDE[:shift]]
    page = {
        "lazy": reading.lazy_reading(compare(noisy(1.0), noisy(1.1, 3), paired=True), 8, 1e-3, 1e-3),
        "first batch": reading.first_reading(compare(noisy(1.1), noisy(1.0, 2), paired=True), "the first batch", "the rest"),
        "first step": reading.first_reading(compare(noisy(1.0)[:1], noisy(1.0)[:1], paired=True), "the first step", "the rest"),
        "sync": reading.sync_reading(compare(noisy(1.0), noisy(0.95, 1), paired=True), "H100"),
        "tools": reading.tools_agree(compare(noisy(1.05), noisy(1.0, 4), paired=True), 7),
        "collate": reading.collate_reading(compare(noisy(1.1), noisy(1.0, 5), paired=True), 8, 1.2),
        "iter": reading.iter_reading(*(compare(noisy(1.0), noisy(1.05, k), paired=True) for k in (1, 2, 3)),
                                     {"iter0": 1.0, "next0": 1.0, "iter2": 1.0, "next2": 1.0}),
    }
    for question, text in page.items():
        assert reads_as_cannot_tell(text), (question, text)
    table = reading.verdict_table({"a": compare(noisy(1.0), noisy(1.1, 3), paired=True)})
    assert table.splitlines()[1].endswith("cannot tell")


def test_first_steps_time_a_new_model_on_each_new_size():
    import torch

    first, steady = firstcall.first_steps([20, 24, 28], batch_size=2, steps=2, device=torch.device("cpu"))
    assert len(first.samples) == len(steady.samples) == 3 and first.items == 2
    assert first.params == {"batch_size": 2, "sizes": [20, 24, 28]}
    assert all(s > 0 for s in first.samples + steady.samples)
    for bad in ([], [20, 20]):
        with pytest.raises(ValueError, match="distinct sizes"):
            firstcall.first_steps(bad, batch_size=2, steps=1, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="steps >= 1"):
        firstcall.first_steps([20], batch_size=2, steps=0, device=torch.device("cpu"))
