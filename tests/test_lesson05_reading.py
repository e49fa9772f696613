"""Lesson 05's sentences (gpufeed.course.lesson05.reading) on a grid of verdicts: a win, a loss, a tie,
a win inside the spread, too few samples, not measured; the cache thresholds; and the numbers of a
noisy run, where no question may get a verdict and "cannot tell" must read as such."""

import re

import pytest
from verdicts import FEW, GRID, INSIDE, LOSS, MARKS, NOISY_A, NOISY_B, NONE, TIE, WIN, noisy

from gpufeed.course.lesson05 import reading

L3 = 260 << 20
FAULTS = {"cold": {"major": 1, "minor": 420}, "warm": {"major": 0, "minor": 420}, "again": {"major": 0, "minor": 0}}


def no_cause_unless(text, measured):
    """A sentence names a cause only as measured, or as "one likely cause, not measured here"."""
    return measured or "because" not in text


@pytest.mark.parametrize("nbytes, words", [
    (L3 // 2, "fit in this CPU's last-level cache"),
    (L3, "fit in this CPU's last-level cache"),  # the threshold: at the cache's size, still the cache's
    (L3 + 1, "partly the cache's, partly RAM's"),
    (reading.RAM_TIMES * L3 - 1, "partly the cache's"),
    (reading.RAM_TIMES * L3, "RAM's"),
])
def test_cache_fit_reads_the_size_against_the_cache(nbytes, words):
    assert words in reading.cache_fit(nbytes, L3)
    assert "not RAM's" not in reading.cache_fit(reading.RAM_TIMES * L3, L3)


def test_cache_fit_without_a_known_cache_claims_nothing():
    text = reading.cache_fit(1 << 30, None)
    assert "RAM's" not in text and "does not report" in text


@pytest.mark.parametrize("name", list(GRID))
def test_headline_words_each_verdict(name):
    v = GRID[name]
    text = reading.headline(v, memmap=60_000, folder=1_500, cores=2)
    assert MARKS[v.kind] in text and "60,000 images/s" in text and "1,500 images/s with 2 workers" in text
    assert ("decodes every JPEG" in text) == (name == "win")  # the reason only where the memmap won
    assert ("cannot tell" in text) == (name in ("inside the spread", "few samples"))


@pytest.mark.parametrize("name", list(GRID))
def test_pages_words_each_verdict(name):
    v = GRID[name]
    text = reading.pages(v, FAULTS, 8192, dropped=True)
    assert MARKS[v.kind] in text and "19.5 pages per fault" in text and "only 1 waited for the disk" in text
    assert ("does not show a slow disk" in text) == (name in ("win", "tie"))
    assert ("cannot tell" in text) == (name in ("inside the spread", "few samples"))


def test_pages_without_dropping_says_cold_is_not_the_disk():
    text = reading.pages(LOSS, FAULTS, 8192, dropped=False)
    assert "not the disk" in text and "waited for the disk" not in text
    one_each = {**FAULTS, "warm": {"major": 0, "minor": 8192}}
    assert "did not help" in reading.pages(LOSS, one_each, 8192, dropped=True)
    folios = {**FAULTS, "warm": {"major": 0, "minor": 100}}
    assert "large folios" in reading.pages(LOSS, folios, 8192, dropped=True)  # 82 pages a fault: above 16


@pytest.mark.parametrize("name", list(GRID))
def test_cold_words_the_disk_only_where_measured(name):
    v = GRID[name]
    text = reading.cold(WIN, v, WIN, epoch_bytes=19_000_000, jpeg_bytes=1_900_000, can_drop=True)
    assert ("10.0x as many bytes" in text) == (name == "loss")  # the disk's cost only where cold was slower
    assert ("does not show a slow disk" in text) == (name in ("win", "tie"))
    assert ("cannot tell its cold epoch" in text) == (name in ("inside the spread", "few samples", "not measured"))
    assert "not the disk" in reading.cold(WIN, LOSS, WIN, epoch_bytes=1, jpeg_bytes=1, can_drop=False)


@pytest.mark.parametrize("name", list(GRID))
def test_cold_words_the_folder_and_the_sorting(name):
    v = GRID[name]
    text = reading.cold(v, LOSS, v, epoch_bytes=19_000_000, jpeg_bytes=1_900_000, can_drop=True)
    assert text.count(MARKS[v.kind]) >= 2 or (v.kind == "the same" and text.count("as fast") >= 2)
    assert ("Where this run cannot tell" in text) == (name in ("inside the spread", "few samples"))


@pytest.mark.parametrize("name", list(GRID))
def test_cold_reads_sorting_against_its_promise(name):
    """Sorting promises a forward read: a gain says what may have paid (as likely); a tie or a loss
    says sorting did not help here; a run that cannot tell says neither."""
    v = GRID[name]
    text = reading.cold(WIN, LOSS, v, epoch_bytes=19_000_000, jpeg_bytes=1_900_000, can_drop=True)
    assert ("reading forward through the file paid" in text) == (name == "win")
    assert ("sorting did not speed the cold read up here" in text) == (name in ("loss", "tie"))
    assert ("147 KiB" in text) == (name in ("loss", "tie"))  # one 224x224 image, the size the reason rests on
    if name in ("win", "loss", "tie"):
        assert "not measured here" in text


@pytest.mark.parametrize("name", list(GRID))
def test_ceiling_words_each_verdict(name):
    v = GRID[name]
    text = reading.ceiling(v, epoch_bytes=19_000_000, l3=L3)
    if name == "not measured":
        assert "not both measured" in text
        return
    assert f"{v.ratio:.0%}" in text and MARKS[v.kind] in text and "the cache's, not RAM's" in text
    assert "Less than half" not in text  # the loss is 0.5: at the threshold, not below it
    assert ("does not show why" in text) == (name == "win")  # a fetch faster than its bound
    assert ("**" in text) == v.decided  # the share in bold only where the run carries it
    assert ("so the bound stands" in text) == (name == "inside the spread")  # a median above 1, inside the noise
    below = reading.ceiling(reading.Verdict(0.4, 0.35, 0.45, 5, "slower", True), epoch_bytes=1, l3=L3)
    assert "Less than half" in below and "not measured here" in below


def test_ceiling_at_several_times_the_cache_reads_ram():
    assert "RAM's" in reading.ceiling(LOSS, epoch_bytes=4 * L3, l3=L3)
    assert "not RAM's" not in reading.ceiling(LOSS, epoch_bytes=4 * L3, l3=L3)


@pytest.mark.parametrize("name", list(GRID))
def test_copies_give_the_fault_count_as_the_measured_cause(name):
    v = GRID[name]
    text = reading.copies(v, fresh_faults=8192, reused_faults=0, other_fresh="np.array(t)", other_faults=8192,
                          nbytes=32 << 20, l3=L3)
    assert MARKS[v.kind] in text and "8,192 page faults a call" in text
    assert ("still in the cache" in text) == (name == "win")  # the cache: a likely cause, named as such
    if "still in the cache" in text:
        assert "not measured here" in text
    assert ("does not show why" in text) == (name == "loss")
    huge = reading.copies(WIN, fresh_faults=8192, reused_faults=0, other_fresh="np.array(t)", other_faults=528,
                          nbytes=32 << 20, l3=L3)
    assert "larger pages" in huge and "not measured here" in huge


@pytest.mark.parametrize("name", list(GRID))
def test_copies_read_huge_pages_as_measured(name):
    """NumPy's huge pages, with the advice on and off in turns: what the fewer faults cost is read from
    that verdict, and the copy into existing memory against NumPy's from the other."""
    v = GRID[name]
    text = reading.copies(WIN, fresh_faults=8193, reused_faults=0, other_fresh="np.array(t)", other_faults=17,
                          nbytes=32 << 20, l3=None, other_vs_reused=WIN, small_faults=8193, huge_vs_small=v)
    assert "with that advice off it took 8,193" in text and "larger pages" not in text  # measured, not likely
    assert ("fewer faults, less time" in text) == (name == "win")
    assert ("cost nothing measurable" in text) == (name == "tie")
    assert ("fewer faults do not explain" in text) == (name == "loss")
    assert "clears every new page" in text and "not measured here" in text  # WIN against NumPy's fresh memory
    same_faults = reading.copies(WIN, fresh_faults=8193, reused_faults=0, other_fresh="np.array(t)", other_faults=17,
                                 nbytes=32 << 20, l3=None, other_vs_reused=v, small_faults=20, huge_vs_small=WIN)
    assert "not what kept its faults down" in same_faults and "less time" not in same_faults
    assert ("clears every new page" in same_faults) == (name == "win")
    tail = same_faults.partition("The copy into the existing tensor")[2]
    assert (MARKS[v.kind] in tail) if name != "not measured" else not tail


def test_copies_without_a_fault_difference_claim_no_faults():
    text = reading.copies(WIN, fresh_faults=10, reused_faults=10, other_fresh="x", other_faults=10, nbytes=1 << 30, l3=L3)
    assert "do not tell them apart" in text and "a fault on each first touch" not in text
    assert "still in the cache" not in text  # 1 GiB: more than the cache


def test_published_formats_show_theirs_without_a_verdict():
    rates = {"ffcv-load-ram-raw-256": 172801, "ffcv-load-ram-jpeg-512": 31278, "ffcv-load-ebs-raw-512": 1956,
             "ffcv-load-ebs-jpeg-512": 16631}
    text = reading.published_formats(rates)
    assert "does not isolate the format" in text and "the order reverses" in text and "theirs" in text
    assert "faster" not in text and not re.search(r"\dx ", text)  # one figure each: no ratio, no verdict
    flipped = reading.published_formats({**rates, "ffcv-load-ebs-raw-512": 20000})
    assert "reverses" not in flipped and "20,000" in flipped
    assert reading.published_formats({k: v for k, v in rates.items() if "ebs" not in k}) == ""


@pytest.mark.parametrize("save, tobytes, order", [
    (LOSS, WIN, "holds here"), (WIN, WIN, "does not hold"), (TIE, WIN, "does not hold"), (LOSS, TIE, "does not hold"),
    (INSIDE, WIN, "cannot tell whether"), (LOSS, FEW, "cannot tell whether"), (NONE, NONE, "cannot tell whether"),
])
def test_writes_decide_the_notes_order_only_from_decided_verdicts(save, tobytes, order):
    text = reading.writes(save, tobytes, tobytes_ms=21, fsync_ms={"a": 18, "b": 20, "c": 22}, fs="ext4", on_disk=True,
                          nbytes=32 << 20)
    assert order in text and "20 ms after `b`" in text and "that is the disk" in text
    assert "not a disk's own rate" in reading.writes(LOSS, WIN, tobytes_ms=1, fsync_ms={"a": 1}, fs="tmpfs",
                                                     on_disk=False, nbytes=1 << 20)


@pytest.mark.parametrize("v, words", [
    (WIN, "Less than the 4x"),  # 2.0x, interval up to 2.2x
    (GRID["loss"], "Less than the 4x"),
    (reading.Verdict(5.0, 4.5, 5.5, 5, "faster", True), "More than the 4x"),
    (reading.Verdict(4.0, 3.5, 4.5, 5, "faster", True), "cannot tell it from the 4x"),  # the threshold inside
    (INSIDE, "cannot tell"), (FEW, "cannot tell"),
])
def test_smaller_images_read_the_ratio_against_the_bytes(v, words):
    text = reading.smaller_images(v, small_gb_s=5.0, big_gb_s=9.0)
    assert words in text
    if "4x the bytes alone" in text and ("Less" in text or "More" in text):
        assert "not measured here" in text


@pytest.mark.parametrize("name", list(GRID))
def test_larger_batch_names_the_cache_only_as_likely(name):
    v = GRID[name]
    text = reading.larger_batch(WIN, v, batch=64, big=256, n_images=5000, cores=2, l3=16 << 20)
    assert ("outgrow the cache" in text) == (name == "loss")
    if "outgrow" in text:
        assert "not measured here" in text
    fits = reading.larger_batch(WIN, LOSS, batch=64, big=256, n_images=5000, cores=2, l3=L3)
    assert "does not explain its loss" in fits
    few = reading.larger_batch(v, v, batch=64, big=256, n_images=128, cores=2, l3=L3)
    assert "1 batch an epoch" in few


def test_a_noisy_run_gets_no_verdict_and_reads_cannot_tell():
    """The lesson's helpers fed one noisy run: every comparison cannot tell, says so, and none
    gives a cause or a direction."""
    v = noisy(NOISY_A, NOISY_B)
    assert v.kind == "cannot tell"
    texts = [
        reading.headline(v, memmap=1_000, folder=1_000, cores=2),
        reading.pages(v, FAULTS, 8192, True),
        reading.cold(v, v, v, epoch_bytes=19_000_000, jpeg_bytes=1_900_000, can_drop=True),
        reading.ceiling(v, epoch_bytes=19_000_000, l3=L3),
        reading.copies(v, fresh_faults=8192, reused_faults=0, other_fresh="x", other_faults=8192, nbytes=1 << 20, l3=L3),
        reading.copies(v, fresh_faults=8192, reused_faults=0, other_fresh="x", other_faults=17, nbytes=1 << 20, l3=L3,
                       other_vs_reused=v, small_faults=8192, huge_vs_small=v),
        reading.writes(v, v, tobytes_ms=1, fsync_ms={"a": 1}, fs="ext4", on_disk=True, nbytes=1 << 20),
        reading.smaller_images(v, small_gb_s=1, big_gb_s=1),
        reading.larger_batch(v, v, batch=64, big=256, n_images=5000, cores=2, l3=L3),
    ]
    for text in texts:
        assert "cannot tell" in text or "not told apart" in text, text
        assert " faster than" not in text and " slower than" not in text, text
        assert "Less than" not in text and "More than" not in text, text
        assert "decodes every JPEG" not in text and "does not show a slow disk" not in text, text
        assert "less time" not in text and "did not speed" not in text and "paid" not in text, text
        assert "**" not in text.split("images/s")[-1], text  # no verdict in bold (a rate may be)
