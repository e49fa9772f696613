"""Lesson 11's sentences (gpufeed.course.lesson11.reading) on a grid of verdicts: ties, losses, wins
inside the spread, too few samples, thresholds, missing sides; and one noisy run read whole."""

import re

import pytest

from gpufeed.course.lesson11 import engines, ladder, reading
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, NOT_MEASURED, SAME, SLOWER, Verdict

QUIET = [1.0, 1.01, 0.99, 1.005, 0.995]  # seconds a sample, about 1% of spread
NOISY = [1.0, 1.6, 0.6, 1.3, 0.75]
WIN, LOSS = Verdict(1.5, 1.3, 1.7, 5, FASTER), Verdict(0.8, 0.7, 0.9, 5, SLOWER)
TIE, UNSURE = Verdict(1.01, 0.97, 1.04, 5, SAME), Verdict(1.1, 0.7, 1.6, 5, CANNOT_TELL)
FEW, NONE = Verdict(2.0, 1.5, 2.5, 2, CANNOT_TELL), Verdict(None, None, None, 0, NOT_MEASURED)
GRID = {"win": WIN, "loss": LOSS, "tie": TIE, "win inside the spread": UNSURE, "too few": FEW, "none": NONE}


def at(rate, base=QUIET, items=100, name="x"):
    """A measurement of ``items`` images a sample at about ``rate`` images/s."""
    return Measurement(name, [items / rate * x for x in base], items=items)


def test_rates_and_the_serial_bound_are_per_sample():
    assert reading.rates(Measurement("a", [0.5, 2.0], items=10)) == [20.0, 5.0]
    assert reading.serial_rates(at(100, [1.0] * 3), at(300, [1.0] * 5)) == pytest.approx([75.0] * 3)  # zip: 3
    assert reading.against(at(200), at(100)).kind == FASTER and reading.against(None, at(1)).kind == NOT_MEASURED
    assert reading.against(at(95), at(100), scale=0.95).kind == SAME  # against 95% of the other


@pytest.mark.parametrize("name, v", GRID.items())
def test_ran_words_every_kind_after_a_verb(name, v):
    text = v.ran("B", "trained")
    assert text.startswith("was " if v.kind in (CANNOT_TELL, NOT_MEASURED) else "trained ")
    assert v.words("B") in text


@pytest.mark.parametrize("course", GRID.values())
@pytest.mark.parametrize("prefetch", GRID.values())
def test_the_training_reading_on_a_grid(course, prefetch):
    text = reading.read_training(course, prefetch, LOSS, {"course": 120.0, "naive": 100.0})
    assert text.startswith("Same model, data and augmentation, 120 against 100 images/s: the course's loop ")
    assert course.words("the naive loop", bold=True) in text
    assert ("prefetching pays" in text) == (prefetch.kind == FASTER)  # the claim only where measured
    assert ("hid nothing" in text) == (prefetch.kind == SAME) and ("cost more than it hid" in text) == (prefetch.kind == SLOWER)
    assert "the prefetch rung ran 1.25x slower than the rung above" in text  # the loader-alone verdict read beside it
    assert text.count("This run cannot tell") == (CANNOT_TELL in (course.kind, prefetch.kind))  # the advice once


def check(eff, serial, overlaps=True):
    return reading.Check("p", eff, serial, 0.6, overlaps)


@pytest.mark.parametrize("serial", GRID.values())
@pytest.mark.parametrize("eff", GRID.values())
@pytest.mark.parametrize("overlaps", [True, False])
def test_the_efficiency_check_says_when_numbers_cannot_be_right(eff, serial, overlaps):
    text = reading.read_check(check(eff, serial, overlaps))
    impossible = eff.kind == FASTER or (not overlaps and serial.kind == FASTER and eff.kind != NOT_MEASURED)
    assert ("cannot be right" in text) == impossible
    if eff.kind == NOT_MEASURED:
        assert text == "p: not measured."
        return
    assert text.startswith(f"p: {eff.ratio:.2f} ({eff.low:.2f} to {eff.high:.2f})")
    if eff.kind == FASTER:
        return  # the efficiency alone breaks a bound: the serial one is not read
    assert ("0.60, its efficiency if nothing overlapped" in text) == (serial.kind != NOT_MEASURED)
    assert ("likely cause, not measured here" in text) == (serial.kind == SLOWER)
    if overlaps:
        assert ("part of its loading ran beside the model" in text) == (serial.kind == FASTER)
    else:
        assert ("as a loop that makes each batch and then trains on it must" in text) == (serial.kind == SAME)
    assert ("cannot tell" in text) == (CANNOT_TELL in (eff.kind, serial.kind))


@pytest.mark.parametrize("bound, words", [
    (0.6, "at 0.60, its efficiency if nothing overlapped (within 4%): this run sees none of its loading hide"),
    (0.98, "its loading is 2% of the loop, too little for this run to see whether it hid behind the model."),
    (1 / 1.04, "its loading is 4% of the loop, too little"),  # threshold: hidden whole, exactly inside the tie
    (0.95, "this run sees none of its loading hide"),  # 5.3% could hide: more than the tie's 4%
])
def test_a_loop_at_its_serial_rate_is_read_against_how_much_could_hide(bound, words):
    text = reading.read_check(reading.Check("course", UNSURE, TIE, bound))
    assert words in text and "none of its loading hid behind" not in text


def test_the_efficiency_check_reads_measurements():
    model = at(100, name="resident")
    naive = reading.check("naive", at(50), model, at(100), overlaps=False)  # serial: 1 / (1/100 + 1/100) = 50
    assert naive.bound == 0.5 and naive.efficiency.kind == SLOWER and naive.serial.kind == SAME
    assert "it ran at 0.50, its efficiency if nothing overlapped, as a loop" in reading.read_check(naive)
    fast = reading.check("naive", at(80), model, at(100), overlaps=False)  # above what a serial loop can do
    assert "cannot be right" in reading.read_check(fast)
    lone = reading.check("dali", at(90), model, None)
    assert lone.bound is None and reading.read_check(lone) == "dali: 0.90 (0.90 to 0.90): the model waited for data."
    text = reading.read_efficiency([naive, reading.check("x", at(90, NOISY), model)])
    assert text.startswith("- naive: ") and "\n- x: " in text and text.count("Where this run cannot tell") == 1


@pytest.mark.parametrize("v, words", [
    (WIN, "above the 0.95 target"), (TIE, "at the 0.95 target (within 4%)"), (LOSS, "below the 0.95 target"),
    (UNSURE, "cannot tell whether the course pipeline reaches the 0.95 target. This run cannot tell"),
    (FEW, "at least 5"), (NONE, "was not measured here"),
])
def test_the_target_is_read_from_a_verdict(v, words):
    assert words in reading.read_target(v, 0.95)


@pytest.mark.parametrize("name, v", GRID.items())
def test_all_cores_on_a_grid(name, v):
    text = reading.read_all_cores(v, 2, Verdict(0.7, 0.6, 0.8, 5, SLOWER))
    assert text.startswith("The model alone on all 2 cores ")
    assert ("what leaving the cores to the loader costs" in text) == (v.kind == FASTER)
    assert ("cost it nothing this run can see" in text) == (v.kind == SAME)
    assert ("would tell" in text) == (v.kind == CANNOT_TELL)  # what would tell, and the interval said once
    assert v.kind != CANNOT_TELL or text.count(v.interval()) <= 1


@pytest.mark.parametrize("v, words", [
    (WIN, "0.67 s saved per epoch, so the 4.00 s build is paid back after 6.0 epochs (4.9 to 8.7)."),
    (TIE, "ran as fast as it (within 4%): no saving this run can see"),
    (LOSS, "ran 1.25x slower than it (1.11x to 1.43x): the build never pays back"),
    (UNSURE, "this run cannot tell whether an epoch gets shorter (0.70x to 1.60x)"),
    (FEW, "this run cannot tell whether an epoch gets shorter (1.50x to 2.50x)"),
    (NONE, "not measured."),
])
def test_the_payback_on_a_grid(v, words):
    text = reading.read_payback("the naive loop", 4.0, 2.0, v)
    assert text.startswith("against the naive loop: ") and words in text


def test_the_payback_threshold_is_the_verdicts():
    barely = reading.against(at(105), at(100))  # 5% faster on a quiet run: decided, so a payback is read
    assert barely.kind == FASTER and "paid back after" in reading.read_payback("x", 1.0, 1.0, barely)
    assert "paid back" not in reading.read_payback("x", 1.0, 1.0, reading.against(at(105, NOISY), at(100)))


@pytest.mark.parametrize("a, b, ends", [
    (WIN, LOSS, "It does better before."), (LOSS, TIE, "It does better after."), (TIE, WIN, "It does better after."),
    (LOSS, LOSS, "does not tell where"), (WIN, WIN, "does not tell where"), (UNSURE, WIN, "does not tell where"),
    (FEW, LOSS, "does not tell where"), (NONE, WIN, "does not tell where"),
])
def test_the_order_of_two_places_on_a_grid(a, b, ends):
    text = reading.read_order({"before": a, "after": b}, "prefetching")
    assert text.startswith("Prefetching: before, it ") and ends in text


def test_a_noisy_run_read_whole_gives_no_verdict_it_cannot_carry():
    """The page's wording helpers on a made-up noisy run (every arm's samples spread from 0.6x to 1.6x
    of one median, in another order): no question gets two answers, nothing is called faster,
    slower or the same, and each part says it cannot tell."""
    turn = iter(range(100))

    def noisy(name, rate, items=64):
        k = next(turn) % 4  # each arm's samples in another order: the rounds disagree
        return Measurement(name, [items / rate * x for x in NOISY[k:] + NOISY[:k]], items=items)

    loaders = [noisy(k, 1000.0) for k in ("naive", "workers", "uint8", "memmap", "batched", "prefetch", "course", "dali")]
    trained = {k: noisy(k, 100.0) for k in ("naive", "naive + prefetch", "tuned", "course", "dali", "resident")}
    timed = {m.name: m for m in loaders}
    steps = ladder.step_verdicts(loaders)
    course = reading.against(trained["course"], trained["naive"])
    prefetch = reading.against(trained["naive + prefetch"], trained["naive"])
    checks = [reading.check(k, trained[k], trained["resident"], timed.get(k), overlaps=k != "naive")
              for k in ("naive", "course", "dali")]
    page = [ladder.read(loaders, 2, None),
            reading.read_training(course, prefetch, steps["prefetch"], {k: m.items_per_s for k, m in trained.items()}),
            reading.read_efficiency(checks),
            reading.read_payback("the naive training loop", 1.0, 1.0, course),
            engines.read_model_side({"eager": reading.rates(noisy("eager", 100.0))}, reading.rates(noisy("loader", 100.0)),
                                    reading.rates(trained["resident"])),
            reading.read_watched(watched(noisy("n", 100.0).samples, 0.5), watched(noisy("c", 100.0).samples), course)]
    verdicts = [*steps.values(), course, prefetch, *(c.efficiency for c in checks), *(c.serial for c in checks)]
    assert all(v.kind == CANNOT_TELL for v in verdicts), "every question of this run is inside its noise"
    text = " ".join(page)
    for v in verdicts:  # a ratio that cannot be told is never worded as a gain or a loss
        assert f"{max(v.ratio, 1 / v.ratio):.2f}x faster" not in text and f"{max(v.ratio, 1 / v.ratio):.2f}x slower" not in text
    assert not re.search(r"\d\.\d+x (faster|slower)", text)
    assert "as fast as" not in text and "(within" not in text and "cannot be right" not in text  # no tie either
    assert all("cannot tell" in p for p in page) and "not told apart" in page[0] + page[1]
    # one question, one answer: prefetching alone is read by the ladder and by section 5 from one verdict, and
    # the course against naive by section 5 and the payback
    assert steps["prefetch"].agrees(ladder.step_verdicts(loaders)["prefetch"])
    assert steps["prefetch"].interval() in page[0] and steps["prefetch"].interval() in page[1]
    assert course.interval() in page[1] and course.interval() in page[3]
    assert "section 5 found it not told apart by this run" in page[5]  # section 10 reads section 5's answer


def watched(loop_s, wait=0.0, findings=()):
    """A report of gpufeed.measure.watch's what_ifs: 32 images a batch, ``loop_s`` seconds per batch."""
    from gpufeed.measure.report import Report

    period = sum(loop_s) / len(loop_s) if loop_s else 1.0
    return Report(items=32, batches=len(loop_s), device="cpu", period_s=period, host_wait_s=wait * period,
                  loop_s=list(loop_s), findings=list(findings))


@pytest.mark.parametrize("course, words", [
    ([0.5 * x for x in QUIET], "the course's loop ran 2.00x faster than the naive one ("),            # a win
    (QUIET[::-1], "the course's loop ran as fast as the naive one (within"),                           # a tie
    ([2.0 * x for x in QUIET], "the course's loop ran 2.00x slower than the naive one ("),             # a loss
    ([0.9 * x for x in NOISY], "the course's loop was not told apart from the naive one by this run ("),  # inside the spread
    ([0.5, 0.5], "the course's loop was not told apart from the naive one by this run (2 samples per arm)"),  # too few
    ([], "the course's loop was not measured against the naive one"),                                  # none
])
@pytest.mark.parametrize("first", GRID.values())
def test_the_watched_loops_on_a_grid(course, words, first):
    text = reading.read_watched(watched(QUIET, wait=0.6), watched(course), first)
    assert text.startswith("The naive loop waited for data 60% of its period (data bound), the course's 0% "
                           "(compute bound). Watched as they ran, one after the other (not in turns), ")
    assert words in text
    v = reading.compare(course or None, QUIET)
    if first.kind == NOT_MEASURED or v.kind == NOT_MEASURED:
        assert "section 5" not in text
    elif v.decided and first.decided:  # both tell: agree, or say how they differ
        assert ("This agrees with section 5" in text) == v.agrees(first)
        assert ("This differs from section 5" in text) == (not v.agrees(first))
    else:
        assert "where either cannot tell, the two do not disagree" in text
    assert text.endswith("What the report tells the naive loop:\n\n- Nothing to change that was measured.")


def test_the_watched_loops_agree_at_the_threshold_of_a_tie():
    edge = [1.0, 1.06, 0.94, 1.03, 0.97]  # an interval within 10% of 1: the same
    text = reading.read_watched(watched(QUIET), watched(edge), TIE)
    assert "ran as fast as the naive one (within" in text and "This agrees with section 5" in text
    assert "This differs from section 5, which found it 1.50x faster" in reading.read_watched(watched(QUIET), watched(edge), WIN)


def test_a_committed_bench_is_read_row_by_row_against_its_resident_run():
    def doc(**samples):
        return {"records": [{"pipeline": p, "mode": m} for p in samples for m in ("loader", "train")],
                "measurements": [{"name": f"{p} train", "samples": s, "items": 8} for p, s in samples.items()]}

    text = reading.read_bench_training(doc(naive=[2 * x for x in QUIET], course=[0.8 * x for x in QUIET],
                                           tuned=NOISY, resident=QUIET))
    assert text.startswith("Its training rows, read as section 6 reads this page's (each against `resident` in turns")
    assert "- naive: 0.50 (0.50 to 0.50): the model waited for data." in text
    assert "- course: 1.25 (" in text and "**cannot be right**" in text  # faster than on batches already there
    assert "- tuned: " in text and "that run cannot tell whether the model waited" in text and "- resident" not in text
    assert text.endswith("Where that run cannot tell, more passes (`gpufeed bench --repeats`) or an idle machine would tell.")
    assert "this run" not in text  # a committed run, not this page's
    assert "no run on batches already on the device" in reading.read_bench_training(doc(naive=QUIET))


def test_advice_is_said_once_and_names_the_samples_a_verdict_needs():
    from gpufeed.measure.verdict import advice, what_would_tell

    assert advice([WIN, TIE, LOSS, NONE]) == ""
    assert advice([WIN, UNSURE]) == advice([UNSURE, UNSURE]) == f"Where this run cannot tell, {what_would_tell()}."
    assert "at least 5" in advice([UNSURE, FEW]) and "2 samples per arm" in advice([UNSURE, FEW])
    assert UNSURE.why() == "0.70x to 1.60x" and FEW.why() == "2 samples per arm"
