"""Lesson 04's decoders and sentences (gpufeed.course.lesson04.decoders and .reading): which library
each decoder loaded, the steps of a decode, decoding smaller; and every sentence on a grid of verdicts
(a tie, a loss, a win inside the spread, too few samples, missing pieces), then the page fed the
numbers of a noisy run, where nothing may be answered both ways and "cannot tell" reads as such."""

import re

import pytest
import torch

from gpufeed.course.lesson04 import decoders, reading
from gpufeed.course.lesson04.quality import QualityPoint
from gpufeed.measure.harness import Measurement
from gpufeed.measure.synth import SynthSpec, encode_jpeg, render

QUIET = [1.00, 1.01, 0.99, 1.005, 0.995, 1.002, 0.998]
SHIFTED = QUIET[3:] + QUIET[:3]
NOISY = [1.0, 1.9, 0.5, 1.6, 0.7, 1.4, 0.6]
NOISY2 = [0.6, 1.0, 1.7, 0.5, 1.5, 0.8, 1.8]
BOTH_TURBO = {"Pillow": "libjpeg-turbo 3.2.0", "torchvision": "libjpeg-turbo 3.1.3"}


@pytest.fixture(scope="module")
def jpegs():
    spec = SynthSpec(n=3, width=128, height=96)
    return [encode_jpeg(render(spec, i), 90) for i in range(3)]


def dec(decoder, seconds, base=QUIET, size="8x8"):
    return Measurement(f"{decoder} {size}", [seconds * f for f in base], items=16,
                       params={"decoder": decoder, "size": size})


def kinds(text):
    """Each verdict a text words, in order: faster, slower, same, cannot tell."""
    out = []
    for found in re.finditer(r"\*\*[\d.]+x (faster|slower)\*\*|\*\*as fast\*\*|not told apart", text):
        out.append(found.group(1) or ("same" if "as fast" in found.group(0) else "cannot tell"))
    return out


def test_libraries_name_libjpeg_turbo_for_both_here():
    libs = decoders.libraries()
    assert set(libs) == {"Pillow", "torchvision"}
    assert all(lib is None or lib.startswith("libjpeg") for lib in libs.values())


def test_library_of_reads_the_version_string(tmp_path):
    turbo, plain = tmp_path / "libjpeg.so.8", tmp_path / "libjpeg.so.62"
    turbo.write_bytes(b"\x00junk libjpeg-turbo version 3.1.3 (build 2026)\x00")
    plain.write_bytes(b"\x00Independent JPEG Group's JPEG software\x00")
    assert decoders.library_of(turbo) == "libjpeg-turbo 3.1.3"
    assert decoders.library_of(plain) == "libjpeg (not libjpeg-turbo)"


def test_decode_steps_and_draft_give_the_same_image_at_each_size(jpegs):
    full = decoders.pillow_asarray(jpegs[0])
    assert full.shape == (96, 128, 3) and torch.equal(torch.from_numpy(full.copy()).permute(2, 0, 1),
                                                      decoders.jpeg.decode_pil(jpegs[0]))
    for size in ((64, 48), (32, 24), (16, 12), (40, 30)):  # 1/2, 1/4, 1/8, and one a resize makes up
        a, b = decoders.decode_draft(jpegs[0], size), decoders.decode_then_resize(jpegs[0], size)
        assert a.shape == b.shape == (3, size[1], size[0]) and a.dtype == torch.uint8
    assert 0 < decoders.draft_difference(jpegs, (32, 24)) < 20  # close, not equal: each shrinks its own way


def test_decode_in_turns_keeps_threads_and_times_every_arm_each_round(jpegs):
    before = torch.get_num_threads()
    ms = decoders.decode_in_turns(jpegs, decoders.decoder_arms(jpegs), "128x96", repeats=2)
    assert torch.get_num_threads() == before
    assert {m.params["decoder"] for m in ms} >= {"pil", "torchvision", decoders.DECODE_ONLY, decoders.WITH_ASARRAY}
    assert {len(m.samples) for m in ms} == {2} and all(m.items == 3 and m.params["threads"] == 1 for m in ms)
    draft, full = decoders.decode_in_turns(jpegs, decoders.draft_arms(jpegs, (32, 24)), "x", repeats=2)
    assert (draft.params["decoder"], full.params["decoder"]) == ("draft", "full + resize")


def row(q, kb, ms, base=QUIET, sub="4:2:0", db=37.0):
    return QualityPoint("8x8", q, kb * 1e3, 0, db, 0.9, ms, sub, [ms * f for f in base])


@pytest.mark.parametrize("mid_ms, base, expect", [(0.65, QUIET, "faster"), (0.91, SHIFTED, "same"),
                                                  (1.30, QUIET, "slower"), (0.85, NOISY, "cannot tell")])
def test_quality_sentence_reads_the_decode_verdict(mid_ms, base, expect):
    text = reading.quality_sentence(row(90, 40, 0.91), row(50, 16, mid_ms, base), row(100, 124, 1.9),
                                     row(100, 228, 3.5, sub="4:4:4"))
    assert kinds(text)[0] == expect and "**2.5x smaller**" in text and "3.1x larger than quality 90's" in text
    assert ("One likely cause, not measured here" in text) == (expect == "faster")
    assert ("This run cannot tell" in text) == (expect == "cannot tell")


def test_quality_sentence_with_too_few_rounds():
    text = reading.quality_sentence(row(90, 40, 0.91, QUIET[:3]), row(50, 16, 0.65, QUIET[:3]), row(100, 124, 1.9),
                                     row(100, 228, 3.5, sub="4:4:4"))
    assert "3 samples per arm" in text and "likely cause" not in text


def test_decoder_lines_name_a_winner_only_where_it_is_decided():
    win = reading.decoder_lines([dec("pil", 0.02), dec("torchvision", 0.01), dec(decoders.DECODE_ONLY, 0.001)], 2)
    assert "**torchvision** decodes 1,600 images/s per core, **2.00x faster** than pil" in win
    assert decoders.DECODE_ONLY not in win  # a step of a decode is no decoder to pick
    assert "At this size, **torchvision** was the fastest (this mode measures one size" in win
    tie = reading.decoder_lines([dec("pil", 0.01, SHIFTED), dec("torchvision", 0.01)], 2)
    assert "**as fast** as pil" in tie or "**as fast** as torchvision" in tie
    assert "did not find one decoder faster" in tie
    two = reading.decoder_lines([dec("pil", 0.02), dec("torchvision", 0.01),
                                  dec("pil", 0.05, size="16x16"), dec("torchvision", 0.10, size="16x16")], 2)
    assert "No decoder was the fastest at every size" in two
    same = reading.decoder_lines([dec("pil", 0.02), dec("torchvision", 0.01),
                                   dec("pil", 0.05, size="16x16"), dec("torchvision", 0.02, size="16x16")], 2)
    assert "use **torchvision**: it was the fastest at every size" in same
    noisy = reading.decoder_lines([dec("pil", 0.02, NOISY), dec("torchvision", 0.019, NOISY2)], 2)
    assert "This run cannot tell" in noisy and "did not find" in noisy


def steps(alone, out, pil, tv=8.3, base=QUIET):
    return [dec(decoders.DECODE_ONLY, alone, base), dec(decoders.WITH_ASARRAY, out, SHIFTED),
            dec("pil", pil, base), dec("torchvision", tv, SHIFTED)]


@pytest.mark.parametrize("ms, says, not_says", [
    (steps(5.9, 9.5, 12.7), "the gap is in the copies out of Pillow, not in the decoder", "One likely cause"),
    (steps(12.0, 12.0, 12.0), "Pillow's decode itself is slower here. One likely cause of the slower decode, not "
     "measured here", "the gap is in"),
    (steps(9.4, 11.5, 12.2), "So the gap is in both: Pillow's decode itself, and the copies out of its buffer. One "
     "likely cause of the slower decode", "not in the decoder"),
    (steps(8.3, 8.3, 8.3), "**as fast**", "the gap is in"),  # no gap: nothing to place
    (steps(8.0, 8.3, 8.5, base=NOISY), "This run cannot tell", "the gap is in"),
])
def test_gap_sentence_places_the_gap_only_where_each_step_is_decided(ms, says, not_says):
    text = reading.gap_sentence(ms, BOTH_TURBO, "8x8")
    assert says in text and not_says not in text and "the same decoder" in text


def test_gap_sentence_says_when_the_libraries_differ():
    text = reading.gap_sentence(steps(5.9, 9.5, 12.7), {"Pillow": "libjpeg (not libjpeg-turbo)",
                                                         "torchvision": None}, "8x8")
    assert "not the same decoder" in text and "could not read" in text


@pytest.mark.parametrize("draft_s, base, expect", [(0.07, QUIET, "faster"), (0.25, SHIFTED, "same"),
                                                   (0.5, QUIET, "slower"), (0.24, NOISY, "cannot tell")])
def test_draft_sentence(draft_s, base, expect):
    text = reading.draft_sentence(dec("draft", draft_s, base), dec("full", 0.25), "a quarter", 1.8)
    assert kinds(text)[0] == expect and ("libjpeg skips" in text) == (expect == "faster") and "1.80 grey levels" in text


def formats(png=0.3, q95=0.06, q75=0.05, npy=0.03, bases=(SHIFTED, SHIFTED, QUIET, QUIET)):
    return [Measurement(n, [s * f for f in b], items=32) for (n, s), b in
            zip((("png", png), ("jpeg q95", q95), ("jpeg q75", q75), ("npy (raw uint8)", npy)), bases)]


NOISY_BASES = (NOISY, NOISY2, NOISY[::-1], NOISY2[::-1])


def test_loader_sentence_reads_each_pair_of_formats():
    text = reading.loader_sentence(formats(), 2)
    assert kinds(text) == ["faster", "faster", "slower"] and "One likely cause, not measured here" in text
    assert "png 107, jpeg q95 533, jpeg q75 640, npy (raw uint8) 1,067 images/s" in text
    tie = reading.loader_sentence(formats(png=0.06, q95=0.06, q75=0.06, npy=0.06), 2)
    assert kinds(tie) == ["same"] * 3 and "likely cause" not in tie
    noisy = reading.loader_sentence(formats(q75=0.058, npy=0.057, bases=NOISY_BASES), 2)
    assert kinds(noisy)[:2] == ["cannot tell"] * 2 and noisy.count("This run cannot tell") == 1
    png_only = reading.loader_sentence(formats(png=0.3, q95=0.06, q75=0.06, npy=0.06, bases=(QUIET,) * 4), 2)
    assert "not measured here: PNG's own decode" in png_only and "raw uint8 skips" not in png_only
    assert "Raw uint8" not in reading.loader_sentence(formats()[:3], 2)  # a format missing: its pair is left out


def test_nvjpeg_lines():
    gpu = [dec("nvjpeg one by one", 0.004), dec("nvjpeg batched", 0.002)]
    text = reading.nvjpeg_lines(gpu, [dec("torchvision", 0.02), dec(decoders.DECODE_ONLY, 0.001)], cores=4)
    assert "nvjpeg batched decodes 8,000 images/s, **10.0x faster** than torchvision on one core" in text
    assert "**2.5x faster** than all 4 cores at best" in text
    assert "no CPU decoder at this size" in reading.nvjpeg_lines(gpu, [], cores=4)
    slow = reading.nvjpeg_lines([dec("nvjpeg batched", 0.03)], [dec("torchvision", 0.02)], cores=4)
    assert "**1.5x slower** than torchvision on one core" in slow and "**6.0x slower** than all 4 cores" in slow


def test_a_noisy_run_answers_no_question_both_ways_and_says_it_cannot_tell():
    """Lesson 04's page on made-up numbers of a noisy run (wide intervals everywhere)."""
    quality_text = reading.quality_sentence(row(90, 40, 0.9, NOISY), row(50, 16, 0.88, NOISY2), row(100, 124, 1.9),
                                             row(100, 228, 3.5, sub="4:4:4"))
    decode = [dec(decoders.DECODE_ONLY, 8.0, NOISY), dec(decoders.WITH_ASARRAY, 8.2, NOISY2),
              dec("pil", 8.4, NOISY[::-1]), dec("torchvision", 8.3, NOISY2[::-1])]
    pages = [quality_text, reading.decoder_lines(decode, 2), reading.gap_sentence(decode, BOTH_TURBO, "8x8"),
             reading.draft_sentence(dec("draft", 0.24, NOISY), dec("full", 0.25, NOISY2), "a quarter", 1.8),
             reading.loader_sentence(formats(png=0.061, q95=0.06, q75=0.059, npy=0.058, bases=NOISY_BASES), 2)]
    for text in pages:
        assert "cannot tell" in kinds(text) and text.count("This run cannot tell") == 1
        assert "the gap is in" not in text and "likely cause" not in text  # no cause for what was not told apart
    # decoder_lines and gap_sentence answer "torchvision against pil" twice: never both ways
    both = " ".join(pages[1:3])
    assert not ("than pil" in both and "slower** than torchvision" in both)
