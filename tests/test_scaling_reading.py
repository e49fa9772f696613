"""Lesson 12's sentences (gpufeed.course.lesson12.reading) on a grid: the cache a second process
finds warm, RSS against PSS, who paid for the reads, 1 against 2 processes and 1 against 2 threads
each: ties, losses, wins inside the spread, too few runs, a cache that was not dropped, no smaps;
and one noisy run read whole."""

import re

import pytest

from gpufeed.course.lesson12 import reading
from gpufeed.measure.harness import Measurement

QUIET = [1.0, 1.01, 0.99, 1.005, 0.995]
NOISY = [1.0, 1.6, 0.6, 1.3, 0.75]
MIB = 2**20


def touches(seconds, major, cached):
    return [{"seconds": s, "major": major, "minor": 50, "pages": 769, "resident_before": cached} for s in seconds]


@pytest.mark.parametrize("second, words", [
    ([0.001 * x for x in QUIET], "the second ran 5.00x faster than the first ("),            # a win
    ([0.005 * x for x in QUIET[::-1]], "the second ran as fast as the first (within"),       # a tie
    ([0.010 * x for x in QUIET], "the second ran 2.00x slower than the first ("),            # a loss
    ([0.0055 * x for x in NOISY[1:] + NOISY[:1]], "the second was not told apart from the first by this run ("),
])
def test_cold_and_warm_on_a_grid(second, words):
    rounds = {"dropped": True, "first": touches([0.005 * x for x in QUIET], 2, 0.0), "second": touches(second, 0, 1.0)}
    text = reading.read_cold_warm(rounds)
    assert text.startswith("In each of 5 rounds, after the file was dropped from the cache, the first process found 0%")
    assert "took 2 major faults, reads from the disk; the second found 100% cached, read by the first, and took 0." in text
    assert words in text and ("This run cannot tell" in text) == ("not told apart" in words)


def test_one_round_cannot_tell_and_a_cache_not_dropped_shows_nothing():
    one = {"dropped": True, "first": touches([0.005], 2, 0.0), "second": touches([0.001], 0, 1.0)}
    text = reading.read_cold_warm(one)
    assert text.startswith("In one round,") and "(1 sample per arm)" in text and "at least 5" in text
    for kept in ({**one, "dropped": False}, {**one, "first": touches([0.005], 0, 1.0)},
                 {**one, "first": touches([0.005], 0, None)}):
        assert "cannot show who pays for the reads" in reading.read_cold_warm(kept)


def test_rss_counts_the_file_once_per_process_and_pss_once():
    readers = [{"rss": 3 * MIB, "pss": 3 * MIB // 8} for _ in range(8)]
    text = reading.read_memory(readers, 3 * MIB)
    assert text.startswith("8 processes each mapped the 3.0 MiB file")
    assert "RSS counts 3.0 MiB for it, 24.0 MiB added up: 8.0 times the 3.0 MiB their PSS adds up to" in text
    assert "not measured" in reading.read_memory([{"rss": None, "pss": None}], MIB) and "not measured" in reading.read_memory([], MIB)
    assert "nothing to add up" in reading.read_memory([{"rss": 0, "pss": 0}], MIB)


def run_doc(first=(2, 1), later=(0, 0), cached=(0.0, 0.0), indices=True):
    def rank(r):
        e0 = list(range(r * 4, r * 4 + 4))
        e1 = [0, 5, 6, 7] if r == 0 else [1, 2, 3, 4]
        epochs = [{"major": first[r], "indices": e0 if indices else None},
                  {"major": later[r], "indices": e1 if indices else None}, {"major": 0, "indices": None}]
        return {"rank": r, "resident": [cached[r], 1.0], "phases": {"load": {"epochs": epochs}}}
    return {"ranks": [rank(1), rank(0)]}  # in any order


def test_the_page_faults_of_a_run_are_read_rank_by_rank():
    text = reading.read_faults(run_doc(), dropped=True)
    assert "found 0% of the file cached" in text and "rank 0 took 2 and rank 1 took 1 major faults" in text
    assert "one likely cause, not measured here" in text
    assert "In the 2 epochs after it, none took a major fault: in the second epoch rank 0 read 3 samples and rank 1 " \
           "read 3 samples that only another rank had read before" in text
    assert "none took a major fault: what a rank read" in reading.read_faults(run_doc(indices=False), dropped=True)
    again = reading.read_faults(run_doc(later=(3, 5)), dropped=True)
    assert "they still took 3 to 5 major faults each" in again and "one likely cause, not measured here" in again
    for not_dropped in (reading.read_faults(run_doc(), dropped=False), reading.read_faults(run_doc(cached=(1.0, 0.0)), True)):
        assert "cannot show who pays for the reads" in not_dropped


def arm(load, train, base=QUIET, rounds=5):
    """One arm of forked.in_turns: images/s of the ranks together, 100 images a run."""
    return {f"{p}, all": Measurement(p, [100 / r * x for x in base[:rounds]], items=100) for p, r in (("load", load), ("train", train))}


@pytest.mark.parametrize("two, words", [
    (arm(150, 150), "load 150 against 100 images/s for one, 1.50x faster (1.50x to 1.50x), short of the ideal 2x"),
    (arm(200, 200, QUIET[::-1]), "load 200 against 100 images/s for one, 2.00x faster ("),   # the ideal 2x, told as such
    (arm(100, 100, QUIET[::-1]), "load 100 against 100 images/s for one, as fast (within"),   # a tie
    (arm(50, 50), "load 50 against 100 images/s for one, 2.00x slower ("),                   # a loss
    (arm(110, 110, NOISY), "load 110 against 100 images/s for one, not told apart by this run ("),  # inside the spread
    (arm(250, 250), "more than the ideal 2x, which **cannot be right**"),
])
def test_scaling_on_a_grid(two, words):
    text = reading.read_scaling(two, arm(100, 100), short_because="Likely causes: the cores.")
    assert text.startswith("Two processes, each epoch as long as its slower rank, in images/s for the ranks together "
                           "(5 runs of each, in turns): they load ")
    assert words in text
    assert ("Likely causes" in text) == any(w in words for w in ("short of", "as fast", "slower"))
    assert ("This run cannot tell" in text) == ("not told apart" in words)
    if "2.00x faster" in words:
        assert "the ideal 2x (within" in text


def test_scaling_with_one_run_of_each_cannot_tell():
    text = reading.read_scaling(arm(150, 150, rounds=1), arm(100, 100, rounds=1))
    assert "(1 run of each, in turns)" in text and "(1 sample per arm)" in text and "ideal" not in text


@pytest.mark.parametrize("two, words, cause", [
    (arm(25, 40), "load ran 4.00x slower than the same two with one thread each (", True),
    (arm(100, 100, QUIET[::-1]), "load ran as fast as the same two with one thread each (within", False),
    (arm(200, 100), "load ran 2.00x faster than the same two with one thread each (", False),
    (arm(110, 100, NOISY), "load was not told apart from the same two with one thread each by this run (", False),
])
def test_threads_on_a_grid(two, words, cause):
    text = reading.read_threads(two, arm(100, 100), cores=2)
    assert text.startswith("With two threads in each of two processes, four threads for 2 cores: ") and words in text
    assert ("One likely cause, not measured here" in text) == cause
    assert ("This run cannot tell loading with two threads each from one" in text) == ("not told apart" in words)


def test_what_would_tell_names_every_phase_that_cannot_tell_once():
    text = reading.read_scaling(arm(110, 110, NOISY), arm(100, 100), short_because="Likely causes: the cores.")
    assert text.count("This run cannot tell") == 1
    assert "This run cannot tell two processes' loading from one's or two processes' training from one's:" in text
    told = reading.read_scaling({**arm(150, 150), "train, all": arm(110, 110, NOISY)["train, all"]}, arm(100, 100))
    assert "This run cannot tell two processes' training from one's: the ratio's interval" in told


def test_a_noisy_run_read_whole_gives_no_verdict_it_cannot_carry():
    """The page's scaling sentences on a made-up noisy run: every arm's runs spread from 0.6x to 1.6x
    of one median, each in another order: nothing is called faster, slower or the same, no cause is
    given for a shortfall nobody measured, and each says it cannot tell."""
    turn = iter(range(10))

    def noisy(rate):
        k = next(turn) % 4
        return arm(rate, rate, NOISY[k:] + NOISY[:k])

    page = [reading.read_scaling(noisy(100), noisy(100), short_because="Likely causes: the cores."),
            reading.read_threads(noisy(100), noisy(100), cores=2),
            reading.read_cold_warm({"dropped": True, "first": touches([0.005 * x for x in NOISY], 2, 0.0),
                                    "second": touches([0.005 * x for x in NOISY[2:] + NOISY[:2]], 0, 1.0)})]
    text = " ".join(page)
    assert not re.search(r"\d\.\d+x (faster|slower)", text) and "(within" not in text and "cannot be right" not in text
    assert "Likely causes" not in text and "likely cause" not in text
    assert all("not told apart" in p for p in page) and "cannot tell" in page[0] + page[2]
