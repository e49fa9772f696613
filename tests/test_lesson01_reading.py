"""Lesson 01's sentences (gpufeed.course.lesson01.reading) on a grid of verdicts: a tie, a loss, a win
inside the spread, too few samples, the narrow threshold, a missing side; and a noisy run read whole."""

import pytest
from verdict_grid import CANT, FEW, LOSS, NONE, QUIET, TIE, WIDE, WIN, reads_as_cannot_tell

from gpufeed.course.lesson01 import reading
from gpufeed.measure import verdict
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import Verdict, compare


def per_batch(factor, base=QUIET, items=8):
    """Seconds per batch of 8 images, scaled."""
    return Measurement("loop", [0.01 * factor * x for x in base], items=items)




@pytest.mark.parametrize("samples, figure, kind", [
    ([100.0 * x for x in QUIET], 100.0, verdict.SAME),       # a tie
    ([100.0 * x for x in QUIET], 50.0, verdict.FASTER),      # well above the figure
    ([100.0 * x for x in QUIET], 200.0, verdict.SLOWER),     # well below
    ([100.0 * x for x in WIDE], 95.0, verdict.CANNOT_TELL),  # a win inside the spread
    ([100.0, 101.0, 99.0], 50.0, verdict.CANNOT_TELL),       # too few samples, however large the gap
    ([], 50.0, verdict.NOT_MEASURED),
    ([100.0] * 5, None, verdict.NOT_MEASURED),
])
def test_against_a_figure_on_a_grid(samples, figure, kind):
    v = reading.against(samples, figure)
    assert v.kind == kind
    if v.ratio is not None:
        assert v.low <= v.ratio <= v.high


def test_against_a_figure_at_the_narrow_threshold():
    just_inside = [100.0 * x for x in QUIET]
    assert reading.against(just_inside, 100.0 * (1 + verdict.NARROW / 2)).kind == verdict.SLOWER  # quiet: 5% is decided
    spread = [100.0, 106.0, 94.0, 103.0, 97.0, 105.0, 95.0]
    assert reading.against(spread, 100.0).kind == verdict.SAME                              # within 10% of 1
    assert reading.against([100.0 + 3 * (x - 100.0) for x in spread], 100.0).kind == verdict.CANNOT_TELL  # wider


@pytest.mark.parametrize("measured, words", [
    (per_batch(1.0), "as fast as predicted (within"),
    (per_batch(0.5), "faster than predicted ("),
    (per_batch(2.0), "slower than predicted ("),
    (per_batch(1.05, WIDE), "This run cannot tell the loop from the prediction"),
    (Measurement("loop", [0.01] * 3, items=8), "3 samples per arm"),
    (None, "it was not measured here"),
])
def test_prediction_reads_each_kind(measured, words):
    text = reading.prediction(800.0, measured, "the naive loop")  # 800 images/s: 10 ms per batch of 8
    assert text.startswith("The simulator predicted 800 images/s for the naive loop") and words in text


def test_prediction_says_the_measured_rate_as_the_measurement_does():
    m = per_batch(1.25)
    assert f"it measured {m.items_per_s:,.0f} (median of 7 samples)" in reading.prediction(800.0, m, "x")


@pytest.mark.parametrize("loop, decode, has, lacks", [
    (WIN, TIE, ["**1.50x faster** than the naive loop", "Loading in parallel pays"], ["likely cause", "Decoding"]),
    (WIN, LOSS, ["**1.50x faster**", "pays here", "Decoding an image on a thread was 2.00x slower",
                 "gained less than their number", "One likely cause, not measured here"], []),
    (LOSS, LOSS, ["**2.00x slower** than the naive loop", "Decoding an image on a thread was 2.00x slower",
                  "One likely cause, not measured here"], ["pays"]),
    (TIE, TIE, ["**as fast** as the naive loop", "Decoding an image on a thread was as fast",
                "One likely cause, not measured here"], ["gained less"]),
    (TIE, CANT, ["**as fast** as the naive loop", "One likely cause"], ["Decoding an image"]),
    (CANT, LOSS, ["This run cannot tell the loop with 2 loading threads from the naive loop (7 rounds of each, in turns)"], ["Decoding", "likely cause"]),
    (FEW, WIN, ["3 samples per arm"], ["x faster"]),
    (NONE, NONE, ["was not measured here"], ["faster", "slower"]),
])
def test_workers_gain_on_a_grid(loop, decode, has, lacks):
    text = reading.workers_gain(loop, decode, threads=2)
    assert all(h in text for h in has), text
    assert not any(w in text for w in lacks), text


def test_keeps_up_reads_each_figure_on_its_own_side():
    loading = [1000.0 * x for x in QUIET]
    text = reading.keeps_up(loading, [(2000.0, "theirs, AMP"), (500.0, "theirs, TF32"), (1000.0, "theirs, same")])
    assert "delivered 1,000 images/s (median of 7 batches)" in text
    assert "keep a GPU training at 2,000 images/s (theirs, AMP) waiting: 2.0x slower" in text
    assert "keep up with a GPU training at 500 images/s (theirs, TF32): 2.0x faster" in text
    assert "about what a GPU training at 1,000 images/s (theirs, same) consumes: as fast as that GPU (within" in text
    noisy = reading.keeps_up([1000.0 * x for x in WIDE], [(1050.0, "theirs")])
    assert "Against a GPU training at 1,050 images/s (theirs), it was not told apart" in noisy
    assert reading.keeps_up([], [(1.0, "x")]) == "The loader was not measured here."
    assert "per arm" in reading.keeps_up([900.0, 1000.0], [(100.0, "x")])  # two batches: too few


@pytest.mark.parametrize("decode, slowest, has, lacks", [
    (WIN, "compute", ["1.50x faster than Pillow", "'workers' preset's predicted rate 1.20x faster than with Pillow",
                      "compute is the slowest stage"], ["cannot tell"]),
    (LOSS, "read+decode+collate", ["2.00x slower than Pillow", "loading is the slowest stage"], ["cannot tell"]),
    (TIE, "compute", ["as fast as Pillow (within 4%)", "no more than that"], ["cannot tell", "1.20x"]),
    (CANT, "compute", ["This run cannot tell torchvision's decoder from Pillow's",
                       "does not tell apart"], ["1.20x"]),
    (NONE, "compute", ["does not tell apart"], ["1.20x"]),
])
def test_decoders_on_a_grid(decode, slowest, has, lacks):
    text = reading.decoders(decode, {"workers": 1.2, "CPU prefetch": 1.0}, slowest)
    assert all(h in text for h in has), text
    assert not any(w in text for w in lacks), text


def test_a_noisy_run_reads_cannot_tell_and_never_both_ways():
    """Made-up numbers of a noisy 2-core run: every question this page words is answered "cannot
    tell", and no question gets a gain in one sentence and a loss in another."""
    naive, threads = per_batch(1.0, WIDE), per_batch(0.9, WIDE[::-1])
    loop = compare(threads, naive, paired=True)
    decode = compare([0.7 * x for x in WIDE], [0.6 * x for x in WIDE[::-1]], paired=True)
    dec = compare([0.5 * x for x in WIDE], [0.55 * x for x in WIDE[2:] + WIDE[:2]], paired=True)
    assert {v.kind for v in (loop, decode, dec)} == {verdict.CANNOT_TELL}
    page = {
        "workers": reading.workers_gain(loop, decode, threads=2),
        "naive prediction": reading.prediction(naive.items_per_s * 1.05, naive, "the naive loop"),
        "threads prediction": reading.prediction(threads.items_per_s * 0.95, threads, "the loop with 2 threads"),
        "keeps up": reading.keeps_up([900.0 * x for x in WIDE], [(950.0, "theirs")]),
        "decoders": reading.decoders(dec, {"workers": 1.1, "CPU prefetch": 1.0}, "compute"),
    }
    for question, text in page.items():
        assert reads_as_cannot_tell(text), (question, text)


def test_one_round_reads_in_the_singular():
    one = Verdict(1.2, None, None, 1, verdict.CANNOT_TELL, True)
    assert "(1 round of each, in turns)" in reading.workers_gain(one, one, threads=2)
    text = reading.prediction(800.0, Measurement("naive", [0.01], items=8), "the naive loop")
    assert "it measured 800 (one sample)" in text and "This run cannot tell the loop from the prediction" in text
