"""Lesson 10's sentences (gpufeed.course.lesson10.reading) on a grid: ties, losses, wins inside and
outside the spread, too few samples, the thresholds, missing sides; the shard findings on DALI's
own behaviour as measured; and a noisy run read whole."""

import itertools
import re

import pytest

from gpufeed.course.lesson10 import reading as p
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, LIKELY_START, NARROW, SAME, SLOWER, Verdict

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]
NOISY = [1.0, 0.55, 1.9, 0.7, 1.5, 0.8, 1.3]
DECIDED = re.compile(r"\d\.\d\dx (faster|slower|larger|smaller)")


def arm(seconds, base=QUIET, turn=0, items=256):
    """``seconds`` per epoch shaped like ``base`` rotated by ``turn`` (arms timed in turns do not move together)."""
    shaped = base[turn % len(base):] + base[:turn % len(base)]
    return Measurement(f"arm{turn}", [seconds * s for s in shaped], items=items)


def section7(jpeg=1.0, tuned=1.0, memmap=1.0, dali=1.0, dali_mm=1.0, base=QUIET, cuda=False, **kw):
    ms = [arm(x, base, t) if x is not None else None for t, x in enumerate((jpeg, tuned, memmap, dali, dali_mm))]
    return p.throughput(*ms, cores=2, cuda=cuda, **kw)


# --- section 7 ----------------------------------------------------------------------------------

def test_throughput_tie_gives_ties_and_no_cause():
    text = section7()
    assert "from the memmap: as fast as the folder (within" in text and "**as fast** as the untuned one" in text
    assert "**as fast** as the tuned DataLoader" in text and "as fast as the DataLoader on the memmap" in text
    assert LIKELY_START not in text
    assert "the tuned DataLoader keeps up with DALI" in text and "cannot tell" not in text


def test_throughput_wins_name_their_likely_causes():
    text = section7(jpeg=2.0, tuned=1.0, memmap=1.0, dali=0.5, dali_mm=0.25, smaller_memmap=True)
    assert "2.00x faster than the folder" in text and "decoding, which the memmap skips" in text
    assert "the memmap stores smaller images" in text
    assert "**2.00x faster** than the untuned one" in text and "its decoder without Pillow" in text
    assert "**2.00x faster** than the tuned DataLoader" in text and "4.00x faster than the untuned one" in text
    assert "4.00x faster than the DataLoader on the memmap" in text
    assert "what DALI saves is Python per sample" in text and text.count(LIKELY_START) == 3


@pytest.mark.parametrize("dali_mm, base, said", [
    (1.0, QUIET, "it gained nothing there"),                          # a tie on the memmap
    (1.5, QUIET, "it gained nothing there"),                          # a loss on the memmap
    (0.9, NOISY, "this run could not tell a gain there"),            # cannot tell on the memmap
    (0.5, QUIET, None),                                               # a gain there too: the cause stands
])
def test_throughput_reads_the_memmap_row_against_dalis_likely_cause(dali_mm, base, said):
    """DALI beat the tuned DataLoader on the folder; the memmap row, where DALI also runs no Python per
    sample and no worker processes, either bears the likely cause out or weighs against it."""
    ms = [arm(2.0), arm(1.0, turn=1), arm(1.0, turn=2), arm(0.5, turn=3), arm(dali_mm, base, turn=4)]
    text = p.throughput(*ms, cores=2, cuda=False)
    assert "what DALI saves is Python per sample" in text
    if said is None:
        assert "weighs against" not in text
    else:
        assert f"That weighs against the likely cause above: on the memmap too DALI runs no Python per sample and no " \
               f"worker processes, yet {said}; this page does not settle" in text
    assert "weighs against" not in p.throughput(*ms, cores=2, cuda=True), "on a GPU no CPU cause was given"


def test_throughput_losses():
    text = section7(jpeg=1.0, tuned=1.5, memmap=1.5, dali=2.0)
    assert "1.50x slower than the folder" in text and "the memmap's transforms run on tensors" in text
    assert "**1.50x slower** than the untuned one" in text and "its decoder without Pillow" not in text
    assert "**1.33x slower** than the tuned DataLoader" in text and "keeps up with DALI" in text


def test_throughput_on_a_gpu_and_without_dali():
    gpu = section7(dali=0.25, cuda=True)
    assert "and its decoding and augmenting on the GPU" in gpu and "what DALI saves" not in gpu
    none = section7(dali=None, dali_mm=None)
    assert "DALI" not in none and set(p.throughput_verdicts(arm(1), arm(1, turn=1), arm(1, turn=2))) == {p.MEMMAP, p.TUNED}


def test_throughput_inside_the_spread_and_with_few_samples_cannot_tell():
    noisy = section7(jpeg=1.0, tuned=0.9, memmap=0.95, dali=0.85, dali_mm=0.9, base=NOISY)
    assert not DECIDED.search(noisy) and LIKELY_START not in noisy and "keeps up" not in noisy
    assert noisy.count("not told apart") == 5 and "This run cannot tell the memmap from the JPEG folder, " in noisy
    few = section7(jpeg=2.0, tuned=1.0, base=QUIET[:3])
    assert "(3 samples per arm)" in few and not DECIDED.search(few)


@pytest.mark.parametrize("tuned, kind", [(1.0, SAME), (1 / (1 + NARROW * 0.6), FASTER), (0.5, FASTER), (2.0, SLOWER)])
def test_throughput_follows_the_verdict_at_the_thresholds(tuned, kind):
    v = p.throughput_verdicts(arm(1.0), arm(tuned, turn=1), arm(1.0, turn=2))
    assert v[p.TUNED].kind == kind
    assert ("its decoder without Pillow" in section7(tuned=tuned)) == (kind == FASTER)


# --- exercise 2 ---------------------------------------------------------------------------------

def test_gains_are_per_round_ratios_of_times():
    assert p.gains(arm(2.0, QUIET[:3]), arm(1.0, QUIET[:3])) == [2.0, 2.0, 2.0]


def test_scaling_grid():
    text = p.scaling(arm(2.0), arm(2.0, turn=1), arm(2.0, turn=2), arm(1.0, turn=3), cores=2)
    assert "DataLoader: 128 images/s with 1 worker, 128 with 2: as fast as one worker (within" in text
    assert "DALI: 128 images/s with 1 thread, 256 with 2: 2.00x faster than one thread" in text and "(ideal: 2x faster)" in text
    assert "DALI's gain from 2 threads was 2.00x larger than the DataLoader gain from 2 workers" in text
    assert LIKELY_START in text and "section 7" not in text
    same = p.scaling(arm(2.0), arm(1.0, turn=1), arm(2.0, turn=2), arm(1.0, turn=3), cores=2)
    assert "as large as the DataLoader gain" in same and LIKELY_START not in same
    smaller = p.scaling(arm(4.0), arm(1.0, turn=1), arm(2.0, turn=2), arm(1.0, turn=3), cores=2)
    assert "2.00x smaller than the DataLoader gain" in smaller and "already overlaps its stages" in smaller
    noisy = p.scaling(arm(2.0, NOISY), arm(1.9, NOISY, 1), arm(2.0, NOISY, 2), arm(1.8, NOISY, 3), cores=2)
    assert not DECIDED.search(noisy) and "This run cannot tell the DataLoader on all cores from one worker" in noisy


def test_scaling_reads_section_7():
    first = Verdict(2.0, 1.8, 2.2, 7, FASTER, True)
    agree = p.scaling(arm(2.0), arm(2.0, turn=1), arm(2.0, turn=2), arm(1.0, turn=3), cores=2, section7=first)
    assert "With 2 each, DALI ran 2.00x faster than the DataLoader" in agree and "This agrees with section 7" in agree
    assert "load" not in agree, "no cause this page did not measure"
    seen = p.scaling(arm(2.0), arm(2.0, turn=1), arm(2.0, turn=2), arm(1.0, turn=3), cores=2, section7=first,
                     earlier={"DataLoader": arm(2.0, turn=4), "DALI": arm(1.5, turn=5)})
    assert ("Section 7 timed the DataLoader and DALI with 2 workers or threads too: 128 and 171 images/s there, "
            "128 and 256 here. DALI's 256 lies outside") in seen and "only arms timed in turns are compared." in seen
    differ = p.scaling(arm(2.0), arm(1.0, turn=1), arm(2.0, turn=2), arm(2.0, turn=3), cores=2, section7=first)
    assert "This differs from section 7, which found it 2.00x faster" in differ
    open_ = p.scaling(arm(2.0), arm(2.0, turn=1), arm(2.0, turn=2), arm(1.0, turn=3), cores=2,
                      section7=Verdict(1.0, 0.5, 2.0, 7, CANNOT_TELL, True))
    assert "where either cannot tell, the two do not disagree" in open_


# --- exercise 3 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("whole, want", [
    (1.0, "The CPU's decode sets the pace"),
    (2.0, "also takes the CPU threads' time"),
    (0.5, "The decode-only pipeline is no ceiling here. One likely cause"),
])
def test_decode_ceiling_on_a_cpu_reads_section_7s_pipeline(whole, want):
    text = p.decode_ceiling(arm(1.0), arm(whole, turn=1), cores=2, cuda=False)
    assert "Without a GPU, section 7's pipeline already decodes on the CPU" in text and want in text
    assert "device='mixed'" in text


def test_decode_ceiling_on_a_gpu_compares_the_two_decoders_and_cannot_tell_when_noisy():
    text = p.decode_ceiling(arm(1.0), arm(0.25, turn=2), arm(1.0, turn=1), cores=2, cuda=True)
    assert "The pipeline that decodes on the CPU: 256 images/s, as fast as the decode alone" in text
    assert "with the mixed decoder: 1,024 images/s, **4.00x faster** than decoding on the CPU" in text
    noisy = p.decode_ceiling(arm(1.0, NOISY), arm(1.05, NOISY, 1), cores=2, cuda=False)
    assert "not told apart from the decode alone" in noisy and "sets the pace" not in noisy
    assert "This run cannot tell the whole pipeline from the decode alone" in noisy


# --- section 8: shards, on DALI's behaviour as measured ---------------------------------------------

#: What DALI 2.4 did with 63 files in 2 shards (31 and 32), batches of 31, as each batch's first and last
#: index and its length showed in section 8's run: per setting, per rank, per epoch, the batches' indices.
OWN = [set(range(31)), set(range(31, 63))]
R0, R1 = list(range(31)), list(range(31, 62))
MEASURED = {
    (False, "PARTIAL"): [[[R0, []]], [[R1, [62]]]],
    (False, "FILL"): [[[R0, R1]], [[R1, [62] + list(range(30))]]],
    (False, "DROP"): [[[R0], [R1]], [[R1], [[62] + list(range(30))]]],
    (True, "PARTIAL"): [[[R0, []]], [[R1, [62]]]],
    (True, "FILL"): [[[R0, [30] * 31]], [[R1, [62] * 31]]],
    (True, "DROP"): [[[R0], [[30] * 31]], [[R1], [[62] * 31]]],
}


def test_shard_findings_on_what_dali_did():
    f = {k: p.shard_findings(v, OWN, 63) for k, v in MEASURED.items()}
    assert f[(False, "PARTIAL")] == {"steps": [2, 2], "empty": True, "foreign": 0, "again": 0, "left_out": 0, "repeated": 0}
    assert f[(False, "FILL")]["foreign"] == 61 and f[(True, "FILL")]["again"] == 61
    assert f[(False, "DROP")] == {"steps": [1, 1], "empty": False, "foreign": 0, "again": 0, "left_out": 1, "repeated": 0}
    assert f[(True, "DROP")]["repeated"] == 2 and f[(True, "DROP")]["left_out"] == 1
    assert p.shard_findings([[[[0, 1], [2]]], [[[3]]]], [{0, 1, 2}, {3}], 4)["steps"] == [2, 1]


def test_shard_reading_recommends_from_the_findings():
    text = p.shard_reading({k: p.shard_findings(v, OWN, 63) for k, v in MEASURED.items()})
    assert "- `pad_last_batch=False`, `PARTIAL`: an empty batch on a rank" in text
    assert "- `pad_last_batch=True`, `DROP`: the next epoch holds 2 batches of one sample over and over" in text
    assert ("For training, `pad_last_batch=False` with `DROP`: in these runs it alone gave every rank the same "
            "steps with full batches, no sample of another shard and none twice, at the cost of 1 file left out "
            "of this epoch.") in text
    assert "For evaluation, where every file must count once, `pad_last_batch=False` with `PARTIAL`" in text
    assert "skip an empty batch in the loop" in text


def test_shard_reading_when_nothing_is_clean_and_when_everything_is():
    bad = {(False, "FILL"): p.shard_findings(MEASURED[(False, "FILL")], OWN, 63)}
    assert "None of these settings" in p.shard_reading(bad) and "For evaluation" not in p.shard_reading(bad)
    even = {(False, "PARTIAL"): p.shard_findings([[[[0, 1]]], [[[2, 3]]]], [{0, 1}, {2, 3}], 4)}
    text = p.shard_reading(even)
    assert "same steps on both ranks, every file read once" in text and "it alone gave" in text
    assert "left out" not in text and "skip an empty batch" not in text


# --- section 9 ----------------------------------------------------------------------------------

def test_published_reading_says_what_is_theirs_and_what_is_ours():
    from gpufeed.measure.published import for_lesson

    text = p.published_reading(for_lesson("lesson10"))
    assert text.startswith("Theirs (deekay42") and "Ours: the unit" in text and "prints no unit" in text
    assert "7,834 images/s on the GPU, 393 on one CPU thread (19.9x)" in text and "not DALI itself" in text
    assert p.published_reading([]) == "" and p.published_reading(for_lesson("lesson10")[:1]) == ""


# --- a noisy run, read whole ----------------------------------------------------------------------

def test_a_noisy_run_reads_cannot_tell_and_answers_no_question_both_ways():
    """Every timed arm of lesson 10 with a loaded machine's spread and small true differences: no
    sentence decides, each says it cannot tell, and the question asked in section 7 and again in
    exercise 2 (DALI against the untuned DataLoader on all cores) does not get two answers."""
    jpeg, tuned, memmap, dali, dali_mm = (arm(x, NOISY, t) for t, x in enumerate((1.0, 0.95, 0.9, 0.92, 0.97)))
    sec7 = p.throughput_verdicts(jpeg, tuned, memmap, dali, dali_mm)
    dl1, dln, dali1, dalin = (arm(x, NOISY, t + 5) for t, x in enumerate((1.9, 1.0, 1.8, 0.95)))
    texts = [p.throughput(jpeg, tuned, memmap, dali, dali_mm, cores=2, cuda=False),
             p.scaling(dl1, dln, dali1, dalin, cores=2, section7=sec7[p.DALI_UNTUNED]),
             p.decode_ceiling(arm(1.0, NOISY, 2), arm(1.05, NOISY, 4), cores=2, cuda=False)]
    for text in texts:
        assert not DECIDED.search(text.replace("ideal: 2x faster", "")), text
        assert "not told apart" in text and "cannot tell" in text and LIKELY_START not in text
        assert "ran not told apart" not in text, "a verb before words that are no gain"
    ex2 = p.scaling_verdicts(dl1, dln, dali1, dalin)
    assert all(v.kind == CANNOT_TELL for v in itertools.chain(sec7.values(), ex2.values()))
    assert ex2[p.AT_ALL].agrees(sec7[p.DALI_UNTUNED])  # the one question asked twice
