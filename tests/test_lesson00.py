"""Lesson 00's sentences (gpufeed.course.lesson00.reading) on a grid of verdicts: a tie, a loss, a win
inside the spread, too few samples, thresholds, missing pieces; and the whole page fed the numbers of
a noisy run, where nothing may be answered both ways and "cannot tell" must read as such."""

import re

import pytest

from gpufeed.course.lesson00 import reading
from gpufeed.measure import published
from gpufeed.measure.harness import Measurement
from gpufeed.measure.results import Reference
from gpufeed.measure.units import MB
from gpufeed.measure.verdict import what_would_tell

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]  # about 1% of spread
NOISY = [1.0, 1.9, 0.5, 1.6, 0.7, 1.4, 0.6]  # a shared machine: the arms cannot be told apart
L3 = 260 * MB


def copy(nbytes, seconds, base=QUIET, threads=None):
    """A copy of ``nbytes`` taking ``seconds`` at the median (times per sample scaled from ``base``)."""
    params = {"nbytes": nbytes} | ({"threads": threads} if threads else {})
    return Measurement(f"memcpy {nbytes // MB} MB", [seconds * f for f in base], nbytes=nbytes, params=params)


RAM = copy(1040 * MB, 0.2)  # 5.45 GB/s


def said_kind(text):
    """Which verdict a sentence words: 'faster', 'slower', 'same', 'cannot tell'."""
    if "cannot tell" in text or "not told apart" in text:
        return "cannot tell"
    if re.search(r"\*\*[\d.]+x faster\*\*|\*\*[\d.]+x higher\*\*", text):
        return "faster"
    if re.search(r"\*\*[\d.]+x slower\*\*|\*\*[\d.]+x lower\*\*", text):
        return "slower"
    return "same" if "as fast" in text or "as high" in text else "?"


@pytest.mark.parametrize("rate_ratio, base, kind, says", [
    (2.0, QUIET, "faster", "a buffer that fits the caches is copied from them"),  # a win
    (1.0, QUIET, "same", "the caches gave it no edge"),  # a tie
    (0.5, QUIET, "slower", "One likely cause, not measured here"),  # a loss: no cache explains it
    (1.1, NOISY, "cannot tell", "This run cannot tell"),  # a win inside the spread
])
def test_cache_sentence_reads_its_verdict(rate_ratio, base, kind, says):
    small = copy(16 * MB, 0.2 * 16 / 1040 / rate_ratio, base=base)
    text = reading.cache_sentence(small, RAM, L3, "The copy")
    assert said_kind(text) == kind and says in text
    assert "(source and destination, 32 MiB together, fit in the 260 MiB L3)" in text


def test_cache_sentence_needs_five_samples_and_names_no_cache_where_none_is_known():
    few = Measurement("memcpy 16 MB", [0.001] * 4, nbytes=16 * MB)
    assert "4 samples per arm" in reading.cache_sentence(few, RAM, L3, "The copy")
    text = reading.cache_sentence(copy(16 * MB, 0.2 * 16 / 1040 / 2), RAM, None, "The copy")
    assert "L3" not in text and said_kind(text) == "faster" and "copied from them" not in text
    beyond = reading.cache_sentence(copy(512 * MB, 0.2 * 512 / 1040 / 2), RAM, L3, "The copy")
    assert "exceed the 260 MiB L3" in beyond and "copied from them" not in beyond


def test_cache_sentence_reads_an_earlier_answer_to_the_same_question():
    first = reading.cache_verdict(copy(MB, 0.2 / 1040 / 2), RAM)
    agrees = reading.cache_sentence(copy(16 * MB, 0.2 * 16 / 1040 / 2), RAM, L3, "The copy", (first, "the sweep"))
    assert "This agrees with the sweep" in agrees
    differs = reading.cache_sentence(copy(16 * MB, 0.2 * 16 / 1040 * 2), RAM, L3, "The copy", (first, "the sweep"))
    assert "This differs from the sweep" in differs


@pytest.mark.parametrize("l3, says", [
    (L3, "4x the 260 MiB L3 (so from RAM, not from the caches)"),
    (None, "this OS does not report its L3 size"),
    (600 * MB, "not yet RAM's rate"),  # the largest copy is under twice the L3: a threshold
])
def test_ram_sentence_says_whether_the_copy_is_ram(l3, says):
    text = reading.ram_sentence(RAM, l3)
    assert says in text and "**5.5 GB/s**" in text and "7 samples" in text


def read(cold, seconds, base=QUIET, **params):
    return Measurement(f"read {'cold' if cold else 'warm'} 32 MB", [seconds * f for f in base], nbytes=32 * MB,
                       params={"cold": cold, "fadvise": True, **params})


@pytest.mark.parametrize("warm_s, base, kind", [(0.005, QUIET, "faster"), (0.025, QUIET, "same"),
                                                 (0.050, QUIET, "slower"), (0.024, NOISY, "cannot tell")])
def test_read_sentence_words_warm_against_cold(warm_s, base, kind):
    text = reading.read_sentence(read(True, 0.025, from_storage=1.0), read(False, warm_s, base), on_disk=True)
    assert said_kind(text) == kind and "reached the disk" in text


def test_read_sentence_says_when_the_cold_read_did_not_reach_the_disk():
    warm = read(False, 0.005)
    kept = reading.read_sentence(read(True, 0.006, from_storage=0.0), warm, on_disk=False)
    assert "fetched 0% of the file from storage" in kept and "does not show the disk" in kept
    unknown = reading.read_sentence(read(True, 0.006, from_storage=None), warm, on_disk=False)
    assert "may not show the disk" in unknown
    no_fadvise = read(True, 0.006, from_storage=None)
    no_fadvise.params["fadvise"] = False
    assert "no `posix_fadvise`" in reading.read_sentence(no_fadvise, warm, on_disk=False)
    few = reading.read_sentence(read(True, 0.025, QUIET[:3], from_storage=1.0), read(False, 0.005, QUIET[:3]), True)
    assert "3 samples per arm" in few and said_kind(few) == "cannot tell"


@pytest.mark.parametrize("many_s, base, kind, says", [
    (0.1, QUIET, "faster", "One likely cause, not measured here"),
    (0.2, QUIET, "same", "one thread already gets"),
    (0.3, QUIET, "slower", "One likely cause, not measured here"),
    (0.19, NOISY, "cannot tell", "This run cannot tell"),
])
def test_threads_sentence(many_s, base, kind, says):
    one, many = copy(1040 * MB, 0.2, threads=1), copy(1040 * MB, many_s, base, threads=2)
    text = reading.threads_sentence(one, many)
    assert said_kind(text) == kind and says in text and "on 2" in text


def test_cache_sentence_leaves_the_cause_to_a_measurement_where_asked():
    slow = copy(16 * MB, 0.2 * 16 / 1040 * 2)
    assert "likely cause" not in reading.cache_sentence(slow, RAM, L3, "The copy", cause=False)
    assert "which no cache explains." in reading.cache_sentence(slow, RAM, L3, "The copy", cause=False)


@pytest.mark.parametrize("many_s, base, kind, says", [
    (0.008, QUIET, "slower", "cost more than it saved. One likely cause, not measured here: each copy waits"),
    (0.0014, list(reversed(QUIET)), "same", "the threads are not what slowed it. One likely cause"),
    (0.0007, QUIET, "faster", "the threads are not what slowed it"),
    (0.0015, NOISY, "cannot tell", "This run cannot tell"),
])
def test_split_copy_sentence(many_s, base, kind, says):
    one, many = copy(16 * MB, 0.0014, threads=1), copy(16 * MB, many_s, base, threads=2)
    text = reading.split_copy_sentence(one, many)
    assert said_kind(text) == kind and says in text and "16 MiB copy, on one thread and on 2" in text


@pytest.mark.parametrize("many_s, base, says", [
    (0.008, QUIET, "cost more than it saved"), (0.0007, QUIET, "splitting it over threads paid."),
    (0.0014, list(reversed(QUIET)), "splitting it gained nothing."), (0.0015, NOISY, "This run cannot tell")])
def test_split_copy_sentence_names_no_slowness_where_the_copy_was_not_slow(many_s, base, says):
    text = reading.split_copy_sentence(copy(16 * MB, 0.0014, threads=1), copy(16 * MB, many_s, base, threads=2),
                                        slow=False)
    assert says in text and "not what slowed it" not in text and "other work" not in text


@pytest.mark.parametrize("decode_s, base, kind, lower", [
    (0.02, QUIET, "faster", "**decoding**"),  # copying's ceiling is higher: decoding is the lower one
    (0.005, QUIET, "slower", "**copying**"),
    (16 / (5.45e9 / 921600 / 2), QUIET, "same", "neither is the lower one"),  # a tie at the threshold
    (16 / (5.45e9 / 921600 / 2) * 1.1, NOISY, "cannot tell", "This run cannot tell"),
])
def test_lower_ceiling(decode_s, base, kind, lower):
    dec = Measurement("torchvision 640x480", [decode_s * f for f in base], items=16)
    text, ratio = reading.lower_ceiling(RAM, dec, 2, (640, 480))
    assert said_kind(text) == kind and lower in text and ratio > 0


def h2d(source, seconds, nbytes=256 * MB, base=QUIET):
    return Measurement(f"H2D {source}", [seconds * f for f in base], nbytes=nbytes,
                       params={"nbytes": nbytes, "source": source})


def test_pinning_then_and_now_names_sizes_and_publishers():
    theirs = published.for_lesson("lesson00")
    ref = Reference([h2d("pageable", 0.0309), h2d("pinned", 0.0049)], {"gpu": "GPU X"}, "a file, full mode")
    text = reading.pinning_then_and_now(ref, theirs)
    assert "**1.15x** on NVIDIA's GeForce GTX 680" in text and "**2.50x** on its NVS 4200M" in text
    assert "a 256 MiB copy" in text and "The copy sizes differ" in text and "not measured here" in text
    assert "One likely cause, not measured here" in text  # pinned grew 8.9x, pageable 1.6x
    same_size = Reference([h2d("pageable", 0.016 / 5.37 * 1.05, 16 * MB), h2d("pinned", 0.016 / 6.19 * 1.05, 16 * MB)],
                          {"gpu": "GPU Y"}, "here")
    text = reading.pinning_then_and_now(same_size, theirs)
    assert "sizes differ" not in text and "likely cause" not in text  # both paths grew alike: no cause to name
    assert "no published pair" in reading.pinning_then_and_now(ref, [])


def test_rates_table_and_rungs():
    table = reading.rates_table([RAM, read(True, 0.025)]).splitlines()
    assert table[0].startswith("| measurement | GB/s") and "| memcpy 1040 MB | 5.45 |" in table[2] and len(table) == 4
    efs = [f for f in published.load() if f.id == "efs-per-client-read-write"]
    assert "about 1.9x slower than the disk here" in reading.rung_lines(efs, read(True, 1.0 * 32 * MB / 1e9))


def test_a_noisy_run_answers_no_question_both_ways_and_says_it_cannot_tell():
    """The whole page on made-up numbers of a noisy run: wide intervals everywhere."""
    ram = copy(1040 * MB, 0.2, NOISY)
    fast_small = copy(MB, 0.2 / 1040 * 1.2, list(reversed(NOISY)))
    first = copy(16 * MB, 0.2 * 16 / 1040 * 0.9, NOISY[1:] + NOISY[:1])
    earlier = (reading.cache_verdict(fast_small, ram), "the sweep")
    cache = [reading.cache_sentence(fast_small, ram, L3, "The sweep's copy"),
             reading.cache_sentence(first, ram, L3, "The first copy", earlier)]
    kinds = {said_kind(t) for t in cache}
    assert not {"faster", "slower"} <= kinds or "differs from" in cache[1]
    pages = [*cache,
             reading.read_sentence(read(True, 0.025, NOISY, from_storage=1.0), read(False, 0.022, NOISY[::-1]), True),
             reading.threads_sentence(copy(1040 * MB, 0.2, NOISY, 1), copy(1040 * MB, 0.18, NOISY[::-1], 2)),
             reading.split_copy_sentence(copy(16 * MB, 0.0014, NOISY, 1), copy(16 * MB, 0.0015, NOISY[::-1], 2)),
             reading.lower_ceiling(ram, Measurement("torchvision 640x480", [0.6 * f for f in NOISY[::-1]], items=16),
                                    2, (640, 480))[0]]
    for text in pages:
        if said_kind(text) == "cannot tell":
            assert "This run cannot tell" in text and what_would_tell() in text
            assert not re.search(r"\*\*[\d.]+x (faster|slower|higher|lower)\*\*", text)
    assert sum(said_kind(t) == "cannot tell" for t in pages) >= 4
