"""Lesson 03's sentences (gpufeed.course.lesson03.reading) on a grid of verdicts: a tie, a loss, a win
inside the spread, too few samples, thresholds, missing cases; and the page fed the numbers of a
noisy run, where nothing may be answered both ways and "cannot tell" must read as such."""

import re

import pytest

from gpufeed.course.lesson03 import reading
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import compare

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]
SHIFTED = QUIET[3:] + QUIET[:3]  # another quiet arm whose noise does not follow the first's round by round
NOISY = [1.0, 1.9, 0.5, 1.6, 0.7, 1.4, 0.6]
NOISY2 = [0.6, 1.0, 1.7, 0.5, 1.5, 0.8, 1.8]


def m(name, seconds, base=QUIET, **params):
    return Measurement(name, [seconds * f for f in base], params=params)


def kind(text):
    """The verdict a sentence's first comparison words."""
    found = re.search(r"\*\*[\d.]+x (faster|slower|larger|smaller)\*\*|\*\*as (fast|large)\*\*|not told apart", text)
    return None if not found else {"faster": "faster", "larger": "faster", "slower": "slower", "smaller": "slower",
                                   "fast": "same", "large": "same"}.get(found.group(1) or found.group(2), "cannot tell")


def test_gains_are_per_round_and_need_arms_in_turns():
    assert reading.gains(m("s", 3.0), m("f", 1.0)) == pytest.approx([3.0] * 7)
    with pytest.raises(ValueError, match="not timed in turns"):
        reading.gains(m("s", 3.0), m("f", 1.0, QUIET[:5]))


@pytest.mark.parametrize("half_s, base, expect, says", [
    (0.081, QUIET, "slower", "time the host spends before"),  # the conversion costs more than a copy
    (0.011, SHIFTED, "same", "x.half() is **as fast** as the copy"),  # a tie
    (0.005, QUIET, "faster", "x.half() is **2.20x faster**"),  # a loss for the copy: no claim about the wire
    (0.012, NOISY, "cannot tell", "This run cannot tell"),  # inside the spread
])
def test_conversion_sentence(half_s, base, expect, says):
    text = reading.conversion_sentence(m("copy", 0.011), m("half", half_s, base), m("float", 0.075, QUIET), "a batch")
    assert kind(text) == expect and says in text
    assert ("time the host spends" in text) == (expect == "slower")
    assert text.count("This run cannot tell") <= 1  # advice once, however many comparisons cannot tell


@pytest.mark.parametrize("float_s, says", [
    (0.075, "the time goes into converting"),  # x.float() no slower though it writes twice the bytes
    (0.081 * 1.002, "the time goes into converting"),  # a tie
    (0.160, "and it writes 4 bytes per value instead of 2."),  # slower: no claim about where the time goes
])
def test_conversion_sentence_reads_float_against_half(float_s, says):
    text = reading.conversion_sentence(m("copy", 0.011), m("half", 0.081), m("float", float_s, SHIFTED), "a batch")
    assert says in text


def test_too_few_samples_cannot_tell():
    few = QUIET[:3]
    text = reading.conversion_sentence(m("c", 0.011, few), m("h", 0.081, few), m("f", 0.075, few), "a batch")
    assert "3 samples per arm" in text and text.count("This run cannot tell") == 1


@pytest.mark.parametrize("fast_s, base, expect", [(0.010, QUIET, "faster"), (0.030, SHIFTED, "same"),
                                                   (0.060, QUIET, "slower"), (0.029, NOISY, "cannot tell")])
def test_order_sentence(fast_s, base, expect):
    text = reading.order_sentence(m("slow", 0.030), m("fast", fast_s, base), "a batch of 64")
    assert kind(text) == expect and ("This run cannot tell" in text) == (expect == "cannot tell")


def sized(pairs, base_fast=QUIET):
    """``[(size, slow_s, fast_s)]`` as slow/fast measurements at batch 8 (and a smaller batch ignored)."""
    out = []
    for size, slow, fast in pairs:
        out += [m("slow", slow, size=size, batch=8), m("fast", fast, base_fast, size=size, batch=8),
                m("slow", 99.0, size=size, batch=4)]
    return out


@pytest.mark.parametrize("pairs, says", [
    ([("8x8", 2.0, 1.0), ("16x16", 3.0, 1.0)], "the bigger the image, the bigger the gain"),
    ([("8x8", 2.0, 1.0), ("16x16", 2.0, 1.0)], "faster at every size, by about as much"),  # a tie of gains
    ([("8x8", 3.0, 1.0), ("16x16", 2.0, 1.0)], "less so as the image grows"),
    ([("8x8", 1.0, 2.0), ("16x16", 1.0, 3.0)], "slower at every size"),
    ([("8x8", 1.0, 2.0), ("16x16", 3.0, 1.0)], "faster at some sizes and not at others"),
    ([("8x8", 2.0, 1.0)], "One size only"),
])
def test_trend_sentence(pairs, says):
    assert says in reading.trend_sentence(sized(pairs, SHIFTED), "slow", "fast")


def test_trend_sentence_cannot_tell_on_a_noisy_run_and_names_missing_cases():
    text = reading.trend_sentence(sized([("8x8", 1.0, 1.0), ("16x16", 1.0, 1.0)], NOISY), "slow", "fast")
    assert "This run cannot tell" in text and "bigger the gain" not in text
    assert "no trend to read" in reading.trend_sentence(sized([("8x8", 2.0, 1.0)]), "slow", "other")


@pytest.mark.parametrize("on_s, base, use, says", [
    (0.1, QUIET, True, "**2.00x faster**"),
    (0.2, SHIFTED, False, "gained nothing"),
    (0.3, QUIET, False, "was slower"),
    (0.19, NOISY, False, "could not tell"),
])
def test_amp_sentence_uses_mixed_precision_only_where_this_run_found_it_faster(on_s, base, use, says):
    text, used = reading.amp_sentence(m("off", 0.2), m("on", on_s, base), "float16", "batch 8")
    assert used is use and says in text
    assert ("The loops below run in float32" in text) is not use


def cell(wire, pinned, seconds, base=QUIET):
    return Measurement(f"{wire}", [seconds * f for f in base], params={"wire": wire, "pinned": pinned, "steps": 2})


def test_grid_sentences_read_each_effect_either_way():
    text = reading.grid_sentences([cell("uint8", True, 0.020), cell("float16", True, 0.024),
                                    cell("uint8", False, 0.022), cell("float16", False, 0.040)])
    assert text.startswith("From pinned memory, uint8 on the wire makes a step **1.20x faster** than float16")
    assert "10.0 vs 12.0 ms" in text and "uint8's is **2.00x faster** than float16's" in text
    loss = reading.grid_sentences([cell("uint8", True, 0.020), cell("float16", True, 0.018),
                                    cell("uint8", False, 0.060), cell("float16", False, 0.040)])
    assert "**1.11x slower**" in loss and "**3.00x slower** than pageable" not in loss and "**1.50x slower**" in loss
    assert not re.search(r"0\.\d+x", loss)  # never "0.90x faster"


def test_grid_sentences_on_pageable_cells_only_and_on_a_tie():
    text = reading.grid_sentences([cell("uint8", False, 0.022), cell("float16", False, 0.020)])
    assert text.startswith("From pageable memory") and "Pinning" not in text
    tie = reading.grid_sentences([cell(w, p, 0.02, QUIET if w == "uint8" else SHIFTED)
                                   for w in ("uint8", "float16") for p in (True, False)])
    assert "**as fast**" in tie and "x faster" not in tie


def test_bfloat16_sentence_reads_section_4():
    earlier = compare(m("h", 0.081), m("c", 0.011), paired=True)
    agrees = reading.bfloat16_sentence(m("c", 0.011), m("h", 0.080, SHIFTED), m("b", 0.030), earlier, "1280x960")
    assert "x.bfloat16() is **2.67x faster**" in agrees and "This agrees with section 4" in agrees
    differs = reading.bfloat16_sentence(m("c", 0.011), m("h", 0.005, SHIFTED), m("b", 0.030), earlier, "1280x960")
    assert "This differs from section 4" in differs


def test_order_gain_sentence_compares_the_two_gains():
    same = reading.order_gain_sentence({"float16": (m("s", 0.03), m("f", 0.01, SHIFTED)),
                                         "bfloat16": (m("s", 0.03), m("f", 0.01, SHIFTED))}, "batch 8")
    assert "bfloat16's gain is **as large** as float16's" in same
    larger = reading.order_gain_sentence({"float16": (m("s", 0.03), m("f", 0.01)),
                                           "bfloat16": (m("s", 0.06), m("f", 0.01))}, "batch 8")
    assert "bfloat16's gain is **2.00x larger**" in larger
    one = reading.order_gain_sentence({"float16": (m("s", 0.03), m("f", 0.01))}, "batch 8")
    assert "gain is" not in one


def test_float_by_size_reads_section_4_per_size():
    ms = [m("x.half()", 2.0, size="8x8", batch=8), m("x.float()", 1.0, size="8x8", batch=8),
          m("x.half()", 2.0, size="16x16", batch=8), m("x.float()", 4.0, size="16x16", batch=8)]
    text = reading.float_by_size(ms)
    assert "8x8 **2.00x faster**" in text and "16x16 **2.00x slower**" in text


def test_a_noisy_run_answers_no_question_both_ways_and_says_it_cannot_tell():
    """The CPU page on made-up numbers of a noisy run (wide intervals): section 4, exercise 2, exercise 3."""
    copy, half, flt = m("x.clone() (uint8 copy)", 0.02, NOISY), m("x.half()", 0.022, NOISY2), m("x.float()", 0.021, NOISY[::-1])
    for mm, size in ((copy, "8x8"), (half, "8x8"), (flt, "8x8")):
        mm.params.update(size=size, batch=8)
    section4 = reading.conversion_sentence(copy, half, flt, "a batch")
    earlier = compare(half, copy, paired=True)
    ex2 = reading.bfloat16_sentence(m("c", 0.02, NOISY2), m("h", 0.021, NOISY), m("b", 0.02, NOISY[::-1]), earlier, "x")
    ex3 = reading.float_by_size([half, flt])
    for text in (section4, ex2, ex3):
        assert "not told apart" in text and not re.search(r"\*\*[\d.]+x (faster|slower)\*\*", text)
    assert all(t.count("This run cannot tell") == 1 for t in (section4, ex2, ex3))
    assert "differs from section 4" not in ex2  # a run that cannot tell contradicts nothing
