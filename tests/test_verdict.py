"""The one verdict method (gpufeed.measure.verdict) on a grid: ties, losses, wins inside and outside
the spread, too few samples, narrow and wide intervals, thresholds, missing sides, the wording."""

import math

import pytest

from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import (
    CANNOT_TELL,
    FASTER,
    MIN_SAMPLES,
    NARROW,
    NOT_MEASURED,
    SAME,
    SLOWER,
    Verdict,
    compare,
    in_turns,
)

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]  # about 1% of spread


def scaled(factor, base=QUIET, name="x"):
    return Measurement(name, [s * factor for s in base])


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("factor, kind", [
    (1.0, SAME),         # a tie: the same samples
    (0.5, FASTER),       # a clear win: half the time
    (2.0, SLOWER),       # a clear loss
    (0.9, FASTER),       # a 10% win on a quiet machine is decided
    (1.1, SLOWER),
])
def test_quiet_arms_are_decided(factor, kind, paired):
    v = compare(scaled(factor), scaled(1.0), paired=paired)
    assert v.kind == kind and v.decided
    assert v.low <= v.ratio <= v.high
    assert math.isclose(v.ratio, 1 / factor, rel_tol=1e-9)


def test_a_win_inside_the_spread_cannot_be_told(monkeypatch):
    monkeypatch.setenv("GPUFEED_MODE", "site")
    noisy = [1.0, 1.6, 0.7, 1.3, 0.8, 1.5, 0.9]
    v = compare(scaled(0.95, noisy), scaled(1.0, list(reversed(noisy))))
    assert v.kind == CANNOT_TELL and not v.decided
    assert v.low < 1 < v.high
    assert "cannot tell" in v.advice and "full mode" in v.advice and v.interval() in v.advice


@pytest.mark.parametrize("mode, tells", [("quick", "site or full mode"), ("site", "full mode (GPUFEED_MODE=full"),
                                         ("full", "more repeats")])
def test_what_would_tell_follows_the_mode_it_ran_in(monkeypatch, mode, tells):
    from gpufeed.measure.verdict import advice, what_would_tell

    monkeypatch.setenv("GPUFEED_MODE", mode)
    assert what_would_tell().startswith(tells) and what_would_tell().endswith("an idle machine would tell")
    cant = Verdict(1.1, 0.7, 1.6, 5, CANNOT_TELL)
    assert cant.advice.endswith(what_would_tell() + ".") and tells in advice([cant, cant])


def test_one_sample_is_one_sample_and_the_verb_follows_the_verdict():
    one = Verdict(1.0, 1.0, 1.0, 1, CANNOT_TELL)
    assert one.why() == "1 sample per arm" and "1 sample per arm," in one.advice_on("a from b")
    assert one.ran("B", "trained") == "was not told apart from B by this run (1 sample per arm)"
    assert Verdict(2.0, 1.8, 2.2, 5, FASTER).ran("B", "trained") == "trained 2.00x faster than B (1.80x to 2.20x)"
    assert Verdict(None, None, None, 0, NOT_MEASURED).why() == "not measured"


def test_advice_names_what_it_cannot_tell():
    from gpufeed.measure.verdict import advice

    cant, win = Verdict(1.0, 0.5, 2.0, 5, CANNOT_TELL), Verdict(2.0, 1.9, 2.1, 5, FASTER)
    assert advice({"a from b": cant, "c from d": win}).startswith("This run cannot tell a from b: the ratio's interval")
    assert advice({"a from b": cant, "c from d": cant}).startswith("This run cannot tell a from b or c from d:")
    assert advice({"c from d": win}) == advice([]) == ""


def test_too_few_samples_cannot_tell_however_large_the_gap():
    a, b = Measurement("a", [1.0] * (MIN_SAMPLES - 1)), Measurement("b", [50.0] * (MIN_SAMPLES - 1))
    v = compare(a, b)
    assert v.kind == CANNOT_TELL and v.samples == MIN_SAMPLES - 1
    assert f"{MIN_SAMPLES - 1} samples per arm" in v.words("b") and f"at least {MIN_SAMPLES}" in v.advice
    assert compare(Measurement("a", [1.0] * MIN_SAMPLES), Measurement("b", [50.0] * MIN_SAMPLES)).kind == FASTER


def test_the_same_only_when_the_interval_is_narrow():
    tie = compare(scaled(1.0), scaled(1.0, list(reversed(QUIET))))
    assert tie.kind == SAME and tie.within <= NARROW
    assert tie.words("B") == f"as fast as B (within {math.ceil(tie.within * 100 - 1e-9):.0f}%)"
    # Wide noise around a tie: not "the same" (a tie is a verdict too).
    wide = [1.0, 1.5, 0.6, 1.4, 0.7]
    assert compare(Measurement("a", wide), Measurement("b", wide[::-1])).kind == CANNOT_TELL


def test_the_narrow_threshold_decides_between_the_same_and_cannot_tell():
    a = Measurement("a", [1.00, 1.06, 0.94, 1.03, 0.97, 1.05, 0.95])
    b = Measurement("b", [1.00, 0.95, 1.05, 0.97, 1.03, 0.94, 1.06])
    assert compare(a, b, narrow=0.5).kind == SAME
    assert compare(a, b, narrow=0.01).kind == CANNOT_TELL


def test_rates_where_more_is_better():
    images_per_s = [100.0, 101.0, 99.0, 100.5, 99.5]
    v = compare([2 * x for x in images_per_s], images_per_s, higher=True)
    assert v.kind == FASTER and math.isclose(v.ratio, 2.0)
    assert compare(images_per_s, [2 * x for x in images_per_s], higher=True).kind == SLOWER


@pytest.mark.parametrize("a, b", [(None, scaled(1.0)), (scaled(1.0), None), ([], [1.0]), (None, None)])
def test_a_missing_side_is_not_measured(a, b):
    v = compare(a, b)
    assert v.kind == NOT_MEASURED and v.ratio is None and not v.decided
    assert v.words("B") == "not measured against B" and v.advice == "" and v.interval() == "no interval"


def test_bad_samples_are_refused_with_one_line():
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, 0.0, 1.0, 1.0, 1.0], QUIET)
    with pytest.raises(ValueError, match="as many samples"):
        compare(QUIET, QUIET[:5], paired=True)


def test_the_same_samples_always_give_the_same_words():
    noisy_a, noisy_b = [1.0, 1.3, 0.8, 1.1, 0.9], [1.2, 0.9, 1.4, 1.0, 1.1]
    assert compare(noisy_a, noisy_b).words("B") == compare(noisy_a, noisy_b).words("B")


@pytest.mark.parametrize("v, words", [
    (Verdict(2.0, 1.8, 2.2, 5, FASTER), "2.00x faster than B (1.80x to 2.20x)"),
    (Verdict(0.5, 0.4, 0.6, 5, SLOWER), "2.00x slower than B (1.67x to 2.50x)"),
    (Verdict(1.01, 0.97, 1.04, 5, SAME), "as fast as B (within 4%)"),
    (Verdict(1.1, 0.7, 1.6, 5, CANNOT_TELL), "not told apart from B by this run (0.70x to 1.60x)"),
    (Verdict(None, None, None, 0, NOT_MEASURED), "not measured against B"),
])
def test_words_read_each_kind(v, words):
    assert v.words("B") == words


def test_words_take_other_nouns_and_bold():
    assert Verdict(4.0, 3.9, 4.1, 5, FASTER).words("JPEG", more="smaller", less="larger", bold=True, digits=1) == \
        "**4.0x smaller** than JPEG (3.9x to 4.1x)"
    assert Verdict(1.0, 0.99, 1.02, 5, SAME).words(same="as large", bold=True) == "**as large** (within 2%)"


def test_agreement_between_two_measurements_of_one_question():
    win, loss = Verdict(1.5, 1.3, 1.7, 5, FASTER), Verdict(0.7, 0.6, 0.8, 5, SLOWER)
    tie, cant = Verdict(1.0, 0.97, 1.03, 5, SAME), Verdict(1.2, 0.7, 1.9, 5, CANNOT_TELL)
    assert not win.agrees(loss) and not loss.agrees(win)
    assert not tie.agrees(win) and not win.agrees(tie)
    assert cant.agrees(win) and cant.agrees(loss) and win.agrees(Verdict(1.2, 1.1, 1.3, 5, FASTER))
    assert tie.agrees(Verdict(1.05, 1.02, 1.08, 5, FASTER))  # a small win inside the tie's band
    assert "differs from section 2" in loss.reads(win, "section 2")
    assert loss.reads(win, "section 2").count("x") >= 2  # both ratios named
    assert "cannot tell" not in cant.reads(win, "section 2") or "do not disagree" in cant.reads(win, "section 2")


def test_in_turns_takes_the_arms_in_turns_and_pairs_them():
    order = []
    t = in_turns(lambda: order.append("a"), lambda: order.append("b"), names=("a", "b"), repeats=5, warmup=1)
    assert order == ["a", "b"] + ["a", "b"] * 5  # one warm-up each, then rounds
    assert t.verdict.paired and len(t.a.samples) == len(t.b.samples) == 5
    assert t.words().endswith(")") and " b " in f" {t.words()} "
    with pytest.raises(ValueError, match="two names"):
        in_turns(lambda: None, lambda: None, names=("x", "x"))
