"""Lesson 09's sentences (gpufeed.course.lesson09.reading) on a grid: ties, losses, wins inside
and outside the spread, too few samples, the thresholds, missing sides; and a noisy run read whole."""

import itertools
import re

import pytest

from gpufeed.course.lesson09 import reading as p
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import CANNOT_TELL, LIKELY_START, NARROW, SAME, SLOWER

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]  # about 1% of spread, 7 samples
NOISY = [1.0, 0.55, 1.9, 0.7, 1.5, 0.8, 1.3]  # a 2-core machine under load
DECIDED = re.compile(r"\d\.\d\dx (faster|slower)")  # a ratio worded as a gain or a loss


def arm(seconds, base=QUIET, items=512, name="x", turn=0):
    """One arm: ``seconds`` per epoch, shaped like ``base`` rotated by ``turn`` (so that two arms timed
    in turns do not move together: their paired ratios spread as the samples do)."""
    shaped = base[turn % len(base):] + base[:turn % len(base)]
    return Measurement(name, [seconds * s for s in shaped], items=items)


def section1(workers=1.0, loop=1.0, batched=1.0, all_=None, base=QUIET, cuda=False, **kw):
    ms = [arm(workers, base, name="w"), arm(loop, base, name="l", turn=1), arm(batched, base, name="b", turn=2)]
    if all_ is not None:
        ms.append(arm(all_, base, name="all", turn=3))
    return p.section1(*ms, cores=2, cuda=cuda, threads=2, **kw)


# --- section 1 ----------------------------------------------------------------------------------

def test_section1_tie_says_neither_is_ahead_and_gives_no_cause():
    text = section1()
    assert "**as fast** as the workers (within" in text and "as fast as the loop" in text
    assert "The loop, on one thread, ran as fast as the 2 workers (within" in text  # read on a CPU too
    assert "neither way is ahead" in text and LIKELY_START not in text and "cannot tell" not in text


def test_section1_loss_is_a_loss_with_its_likely_cause():
    text = section1(workers=1.0, loop=1.0, batched=1.8)
    assert "**1.80x slower** than the workers" in text and "1.80x slower than the loop" in text
    assert "the batched version did not catch the 2 workers." in text
    assert "The batched version lost to the loop. One likely cause, not measured here: its dense" in text
    assert "a GPU does that arithmetic" in text
    assert text.count(LIKELY_START) == 1, "one cause, the one the loop's comparison points at"
    assert "per-sample work splits over the cores" not in text, "a cause its own loop on one thread contradicts"


def test_section1_on_a_cpu_reads_the_loop_against_the_workers_with_the_hand_over_cause_once():
    text = section1(workers=2.0, loop=1.0, batched=1.0)
    assert "The loop, on one thread, ran 2.00x faster than the 2 workers (" in text
    assert text.count("hands it over to this process") == 1 and text.count(LIKELY_START) == 1
    slower = section1(workers=1.0, loop=2.0, batched=2.0)
    assert "The loop, on one thread, ran 2.00x slower than the 2 workers (" in slower
    assert "hands it over" not in slower


def test_section1_win_reads_one_process_did_more():
    text = section1(workers=2.0, loop=1.5, batched=1.0)
    assert "**2.00x faster** than the workers" in text and "1.50x faster than the loop" in text
    assert "On this CPU one process did more than 2 workers." in text and "lost to the loop" not in text
    assert "The loop, on one thread, ran 1.33x faster than the 2 workers (" in text
    assert text.count("hands it over to this process") == 1, "the cause is said once, where the loop gives it"


def test_section1_the_all_threads_arm_decides_the_reading_on_a_cpu():
    text = section1(workers=1.0, loop=1.0, batched=1.6, all_=0.8)
    assert "On 2 threads the batched version made" in text and "2.00x faster than one thread" in text
    assert "1.25x faster than the workers" in text and "one process did more" in text
    assert "better fit" not in text  # the one-thread loss is not the reading of the CPU as a whole


def test_section1_a_win_inside_the_spread_cannot_tell_and_says_which():
    text = section1(workers=1.0, loop=1.0, batched=0.9, base=NOISY)
    assert "not told apart from the workers by this run" in text
    assert ("This run cannot tell the batched version from the workers, the batched version from the loop or the "
            "loop from the workers:") in text
    assert not DECIDED.search(text) and LIKELY_START not in text and "neither way is ahead" not in text


def test_section1_three_samples_cannot_tell_whatever_the_ratio():
    text = section1(workers=1.0, loop=1.0, batched=0.5, base=QUIET[:3])
    assert "(3 samples per arm)" in text and "an arm has too few samples" in text and not DECIDED.search(text)


@pytest.mark.parametrize("factor, kind", [(1.0, SAME), (1 + NARROW * 0.6, SLOWER), (1.35, SLOWER)])
def test_section1_follows_the_verdict_at_the_thresholds(factor, kind):
    v = p.section1_verdicts(arm(1.0), arm(1.0), arm(factor))
    assert v[p.BATCHED_WORKERS].kind == kind
    text = section1(batched=factor)
    assert ("lost to the loop" in text) == (kind == SLOWER)


def test_section1_on_a_gpu_reads_the_loop_against_the_workers_and_skips_the_cpu_reading():
    text = section1(workers=4.0, loop=2.0, batched=0.5, cuda=True)
    assert "On the GPU" not in text and "on the GPU" in text
    assert "Image by image, the GPU's loop ran 2.00x faster than the workers" in text
    assert "one process did more" not in text and "On 2 threads" not in text


def test_reference_headline_words_the_committed_reference_and_none_without_one():
    ms = [arm(0.8, name="per sample, 16 CPU workers", items=2048), arm(0.1, name="batched, GPU", items=2048)]
    doc = {"machine": {"gpu": "GPU X"}, "cores": 16, "n_images": 2048, "stored": [256, 256], "out_size": [224, 224]}
    text = p.reference_headline((ms, doc))
    assert "our reference (GPU X, 16 CPU cores" in text and "**8.00x faster** than the workers" in text
    assert p.reference_headline(None) == "" and p.reference_headline((ms[:1], doc)) == ""
    assert "answers the same question, its arms timed one after another rather than in turns (each interval " \
           "resamples them apart): the 16 CPU workers" in text, "an older reference says how it was timed"
    paired = p.reference_headline((ms, {**doc, "in_turns": True}))
    assert "answers the same question, its arms timed in turns: the 16" in paired and "rather than" not in paired
    assert p.reference_verdicts(ms + [arm(0.2, name="per-sample loop", items=2048, turn=1)], True)[
        p.BATCHED_WORKERS].paired


def test_a_noisy_reference_timed_apart_cannot_tell_where_turns_might():
    """Arms timed one after another are resampled apart: the interval is as wide as both spreads."""
    ms = [arm(1.0, NOISY, name="per sample, 16 CPU workers", items=2048),
          arm(0.8, NOISY, name="batched, GPU", items=2048, turn=3)]
    doc = {"machine": {"gpu": "GPU X"}, "cores": 16, "n_images": 2048, "stored": [256, 256], "out_size": [224, 224]}
    text = p.reference_headline((ms, doc))
    assert "not told apart from the workers by this run" in text and not DECIDED.search(text)


def test_the_committed_h100_reference_reads_8x_and_the_tails_share():
    from gpufeed.measure import results

    ref = results.reference("lesson09")
    if ref is None:
        pytest.skip("no committed lesson 09 reference")
    assert "8.01x faster" in p.reference_headline(ref)
    text = p.reference_reading(*ref)
    assert "4.99x faster than the eager one" in text and "26 GPU kernels and copies per call to 4" in text
    assert "at most 17% of a batch" in text and "at most about 1.16x faster (14% less time)" in text
    assert "not measured end to end" in text


# --- section 3 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("both, base, cuda, want, cause", [
    (1.0, QUIET, False, "**as fast** as the usual pipeline (within", None),             # tie
    (0.5, QUIET, True, "**2.00x faster** than the usual pipeline", "a quarter of the bytes"),  # win
    (1.5, QUIET, False, "**1.50x slower** than the usual pipeline", "competes with them"),     # loss, CPU
    (1.5, QUIET, True, "**1.50x slower**", "rerun on an idle machine"),                        # loss, GPU
    (0.9, NOISY, False, "not told apart from the usual pipeline", None),                # win inside the spread
    (0.5, QUIET[:3], False, "(3 samples per arm)", None),                                # too few samples
])
def test_late_convert_grid(both, base, cuda, want, cause):
    text = p.late_convert(arm(1.0, base), arm(both, base, turn=1), cuda=cuda)
    assert want in text
    assert (cause in text) if cause else (LIKELY_START not in text and "rerun" not in text)
    assert ("This run cannot tell the two pipelines apart" in text) == ("not told apart" in want or "samples" in want)


@pytest.mark.parametrize("before, after, words", [
    (0, 0, "none in either"), (7, 7, "as many"), (5, 0, "all gone"), (0, 3, "none before, 3 after"),
    (26, 4, "6.50x fewer"), (4, 8, "2.00x more"),
    (-1, 0, "none in either"), (-2, 3, "none before, 3 after"), (3, -1, "all gone"),  # noise below 0 reads as 0
])
def test_change_grid(before, after, words):
    assert p.change(before, after) == words


CPU_COUNTS = {"eager": {"aten calls": 102}, "torch.compile": {"aten calls": 0}}
WAITS = "host waits"


def tail(eager=1.0, compiled=0.2, base=QUIET, counts=CPU_COUNTS, cuda=False, per_batch_s=4.0, plain=None):
    ms = [arm(eager, base, items=64), arm(compiled, base, items=64, turn=1) if compiled is not None else None]
    return p.tail_reading(*ms, counts, per_batch_s=per_batch_s, cuda=cuda, waits=WAITS,
                          plain=arm(plain, base, items=64, turn=2) if plain else None, note="skipped: quick mode")


def test_tail_reading_grid():
    win = tail()
    assert "**5.00x faster** than the eager one" in win and "aten calls: 102 -> 0 (all gone)" in win
    assert "One likely cause, not measured here: fewer passes over the batch" in win
    assert "at most 25% of a batch" in win and "not measured end to end" in win
    tie = tail(compiled=1.0)
    assert "**as fast** as the eager one (within" in tie and "Not faster here, despite the fewer" in tie and LIKELY_START not in tie
    loss = tail(compiled=1.5, counts={"eager": {"aten calls": 3}, "torch.compile": {"aten calls": 3}})
    assert "1.50x slower" in loss and "Not faster here." in loss and "share" not in loss
    noisy = tail(compiled=0.9, base=NOISY)
    assert "not told apart from the eager one" in noisy and "This run cannot tell the two tails apart" in noisy
    assert LIKELY_START not in noisy and "batch would run" not in noisy
    few = tail(compiled=0.2, base=QUIET[:3])
    assert "(3 samples per arm)" in few and not DECIDED.search(few)
    assert "torch.compile not measured (skipped: quick mode)" in tail(compiled=None)


def test_tail_reading_on_a_gpu_names_the_host_waits_it_counted():
    none = {"eager": {"kernels": 26, WAITS: 0}, "torch.compile": {"kernels": 4, WAITS: 0}}
    assert "neither tail makes the host wait" in tail(counts=none, cuda=True)
    stayed = {"eager": {"kernels": 26, WAITS: 1}, "torch.compile": {"kernels": 4, WAITS: 1}}
    assert "the 1 host wait(s) per call stayed" in tail(counts=stayed, cuda=True)
    gone = {"eager": {"kernels": 26, WAITS: 2}, "torch.compile": {"kernels": 4, WAITS: 0}}
    assert "fewer kernels, and fewer host waits" in tail(counts=gone, cuda=True)


def test_share_of_batch_thresholds_and_missing_times():
    e, c = arm(0.001, items=64), arm(0.0002, items=64)
    assert p.share_of_batch(e, c, None) == "" and p.share_of_batch(e, c, 0.0) == ""
    assert "does not give the tail's share" in p.share_of_batch(e, c, 0.001)  # the tail as long as a batch
    assert "does not give the tail's share" in p.share_of_batch(e, c, 0.002, plain=arm(0.003, items=64))
    with_plain = p.share_of_batch(e, c, 0.004, plain=arm(0.0005, items=64))  # 4 - 0.5 + 1 = 4.5 ms
    assert "it would take 4.50 ms, 22% of it the tail" in with_plain and "(18% less time)" in with_plain
    assert "at most" in p.share_of_batch(e, c, 0.004) and "at most" not in with_plain


# --- exercise 2 ---------------------------------------------------------------------------------

def pairs(workers=1.0, loop=1.0, batched=1.0, base=QUIET):
    return {name: (arm(1.0, base, name=f"{name}, 64", turn=i), arm(f, base, name=f"{name}, 256", turn=i + 1))
            for i, (name, f) in enumerate((("workers", workers), ("loop", loop), ("batched", batched)))}


def reading(**kw):
    return p.batch_size_reading(pairs(**kw), small=64, big=256, batches=2, cores=2, all_images=False)


def test_batch_size_reading_grid():
    tie = reading()
    assert tie.count("as fast as batch 64") == 3 and "No version ran faster or slower" in tie
    moved = reading(workers=1.3, loop=1.0, batched=0.5)
    assert "batched: 512 images/s at batch 64, 1,024 at 256: 2.00x faster than batch 64" in moved
    assert "Batched ran 2.00x faster" in moved and "spread over more images" in moved
    assert "Workers ran 1.30x slower" in moved and "fewer batches to share among the workers" in moved
    assert "Loop ran" not in moved and "an epoch holds 2 batches for 2 workers" in moved
    noisy = reading(workers=1.1, loop=0.9, batched=0.8, base=NOISY)
    assert noisy.count("not told apart from batch 64") == 3 and "No version ran faster or slower" in noisy
    assert "This run cannot tell workers at the two sizes, loop at the two sizes or batched" in noisy
    assert "(every image this mode has)" in p.batch_size_reading(
        pairs(), small=64, big=128, batches=1, cores=2, all_images=True)
    assert "1 batch for 2 workers" in p.batch_size_reading(pairs(), small=64, big=128, batches=1, cores=2,
                                                          all_images=True)


def test_across_cells_sets_each_rate_against_the_first_cells_own_range():
    earlier = {"workers": arm(1.0, NOISY, name="w"), "loop": arm(1.0, QUIET, name="l")}  # 512 images an epoch
    inside = p.across_cells(earlier, {"workers": arm(1.4, QUIET), "loop": arm(1.0, QUIET)})
    assert inside.startswith("Section 1 timed the workers and the loop at this batch size too: 512 and 512 images/s "
                             "there, 366 and 512 here, each inside the range its own epochs spanned there (")
    assert "only arms timed in turns" in inside
    outside = p.across_cells(earlier, {"workers": arm(1.4, QUIET), "loop": arm(1.4, QUIET)})
    assert "The loop's 366 lies outside the 507 to 517 its epochs spanned in section 1" in outside
    assert "does not say which made the difference" in outside
    both = p.across_cells(earlier, {"workers": arm(9.0, QUIET), "loop": arm(1.4, QUIET)})
    assert "The workers' 57 lies outside the 269 to 931" in both and "; the loop's 366" in both
    assert "load" not in inside + outside, "no cause this page did not measure"
    assert p.across_cells({}, {"workers": arm(1.0)}) == "" and p.across_cells(earlier, {"batched": arm(1.0)}) == ""
    assert p.across_cells({"workers": None}, {"workers": arm(1.0)}) == ""
    text = p.batch_size_reading(pairs(), small=64, big=256, batches=2, cores=2, all_images=False,
                                earlier={"workers": arm(1.0, name="w")})
    assert text.endswith("so only arms timed in turns are compared.") and "Section 1 timed the workers at" in text
    assert "Section 1" not in reading(), "without section 1's measurements, no word on them"


def test_a_noisy_run_reads_cannot_tell_everywhere_and_answers_no_question_both_ways():
    """Every arm of lesson 09 with the spread of a loaded 2-core machine and small true differences:
    no sentence decides, every one says it cannot tell, and no two verdicts on one question disagree."""
    ws, ls, bs, alls = (arm(f, NOISY, name=n, turn=t) for f, n, t in zip((1.0, 1.05, 0.95, 0.9), "wlba", (0, 1, 2, 3)))
    big = {"workers": (ws, arm(1.05, NOISY, turn=4)), "loop": (ls, arm(1.0, NOISY, turn=5)),
           "batched": (bs, arm(0.9, NOISY, turn=6))}
    texts = [p.section1(ws, ls, bs, alls, cores=2, cuda=False, threads=2),
             p.late_convert(arm(1.0, NOISY), arm(0.95, NOISY, turn=3), cuda=False),
             tail(compiled=0.9, base=NOISY),
             p.batch_size_reading(big, small=64, big=256, batches=2, cores=2, all_images=False)]
    texts += [p.section1(ws, ls, bs, cores=2, cuda=True), p.reference_reading(
        [arm(f, NOISY, name=n, items=2048, turn=t) for t, (n, f) in enumerate((
            ("per sample, 16 CPU workers", 1.0), ("per-sample loop, GPU", 0.95), ("batched, GPU", 0.9),
            ("uint8 from 16 CPU workers", 1.05), ("tail, eager", 1.0), ("tail, torch.compile", 0.9)))],
        {"machine": {"gpu": "GPU X"}, "cores": 16, "n_images": 2048, "batch_size": 64, "stored": [256, 256],
         "out_size": [224, 224], "in_turns": True})]
    for text in texts:
        assert not DECIDED.search(text), text
        assert "not told apart" in text and "cannot tell" in text and LIKELY_START not in text
        assert "ran not told apart" not in text, "a verb before words that are no gain"
    verdicts = {**p.section1_verdicts(ws, ls, bs, alls), **p.batch_size_verdicts(big)}
    assert all(v.kind == CANNOT_TELL for v in verdicts.values())
    # The same question asked twice (section 1's batched version against the workers, read again as the
    # best in-process version when it is the only one) never gets two answers that disagree.
    again = p.section1_verdicts(ws, ls, bs)
    for a, b in itertools.product(verdicts.values(), again.values()):
        assert a.agrees(b)
