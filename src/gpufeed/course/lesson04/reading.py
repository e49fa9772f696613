"""The sentences lesson 04 prints about JPEG quality, decoders and storage formats, each comparison
decided by the verdict method.

Every timed comparison here reads arms timed in turns (the qualities of
:func:`~gpufeed.course.lesson04.quality.quality_sweep`, the decoders of
:func:`~gpufeed.course.lesson04.decoders.decode_in_turns`, the loaders of
:func:`~gpufeed.course.lesson04.formats.loaders_in_turns`) as pairs, with
:func:`gpufeed.measure.verdict.compare`. File sizes and errors are not noisy, so their ratios are
read as they are. A cause is named only where the page measured it. Taught in
``notebooks/04_jpeg.ipynb``.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
    >>> m = lambda name, s: Measurement(f"{name} 8x8", [s * f for f in q], items=16, params={"decoder": name, "size": "8x8"})
    >>> print(decoder_lines([m("pil", 0.02), m("torchvision", 0.01)], cores=2))  # doctest: +NORMALIZE_WHITESPACE
    - 8x8: **torchvision** decodes 1,600 images/s per core, **2.00x faster** than pil (2.00x to 2.00x);
      2 cores: at most about 3,200 images/s.
    At this size, **torchvision** was the fastest (this mode measures one size; full mode, several).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufeed.course.lesson04.decoders import DECODE_ONLY, WITH_ASARRAY
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, SAME, SLOWER, Verdict, compare
from gpufeed.measure.wording import times

#: Words for file sizes, read with :func:`gpufeed.measure.wording.times` (sizes are not noisy).
SIZE_WORDS = {"more": "smaller", "less": "larger", "same": "the same size"}
TV_DECODE = "torchvision's decode"
NONE = Verdict(None, None, None, 0, "not measured")  # a comparison the page could not make
#: The arms of lesson 04's decoder comparison that are steps of a decode, not decoders.
STAGES = (DECODE_ONLY, WITH_ASARRAY)


def _with(words: str, extra: str) -> str:
    """Verdict words with ``extra`` added inside their closing parenthesis: ``"... (1.3x to 1.5x; 9 vs 12 ms)"``."""
    return f"{words[:-1]}; {extra})" if words.endswith(")") else f"{words} ({extra})"


def _advice(*verdicts: Verdict) -> str:
    """The advice of the first verdict that cannot tell, once, with a leading space; "" where all tell."""
    undecided = [v for v in verdicts if v.kind == CANNOT_TELL]
    return f" {min(undecided, key=lambda v: v.samples).advice}" if undecided else ""


def quality_sentence(hi, mid, top, top444) -> str:
    """Section 3's reading: quality ``hi`` (90) against ``mid`` (50) in bytes, error and decode time
    (the decodes timed in turns), and what the top of the scale costs with 4:2:0 and with 4:4:4.

    Args:
        hi, mid, top, top444: :class:`~gpufeed.course.lesson04.quality.QualityPoint` rows: q90, q50,
            q100 (4:2:0) and q100 (4:4:4), all of one image size.

    Example:
        >>> from gpufeed.course.lesson04.quality import QualityPoint
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> row = lambda qual, kb, db, ms, sub="4:2:0": QualityPoint("8x8", qual, kb * 1e3, 0, db, 0.9, ms, sub, [ms * f for f in q])
        >>> print(quality_sentence(row(90, 40, 37.2, 0.91), row(50, 16, 33.0, 0.65), row(100, 124, 41.0, 1.9),
        ...                        row(100, 228, 50.4, 3.5, "4:4:4")))  # doctest: +NORMALIZE_WHITESPACE
        8x8: quality 90 -> 50 makes files **2.5x smaller** (40 -> 16 KB), PSNR goes from 37.2 to 33.0 dB, SSIM
        from 0.900 to 0.900, and decoding at quality 50 is **1.40x faster** than decoding at quality 90 (1.40x
        to 1.40x; 0.91 -> 0.65 ms per image). One likely cause, not measured here: fewer non-zero coefficients
        to entropy-decode.
        <BLANKLINE>
        Quality 100 files are 3.1x larger than quality 90's, for +3.8 dB. With Pillow's default 4:2:0 it stops
        at 41.0 dB: the halved colour planes are lost whatever the quality. Keeping them (4:4:4) reaches 50.4
        dB at quality 100, with files 1.84x larger.
    """
    v = compare(mid.decode_samples, hi.decode_samples, paired=True)
    text = (f"{hi.size}: quality {hi.quality} -> {mid.quality} makes files "
            f"**{times(hi.bytes / mid.bytes, **SIZE_WORDS, digits=1)}** ({hi.bytes / 1e3:.0f} -> {mid.bytes / 1e3:.0f} KB), "
            f"PSNR goes from {hi.psnr:.1f} to {mid.psnr:.1f} dB, SSIM from {hi.ssim:.3f} to {mid.ssim:.3f}, and decoding "
            f"at quality {mid.quality} is "
            f"{_with(v.words(f'decoding at quality {hi.quality}', bold=True), f'{hi.decode_ms:.2f} -> {mid.decode_ms:.2f} ms per image')}")
    text += (". One likely cause, not measured here: fewer non-zero coefficients to entropy-decode." if v.kind == FASTER
             else "." + _advice(v))
    return text + (f"\n\nQuality 100 files are {times(hi.bytes / top.bytes, **SIZE_WORDS, digits=1)} than quality "
                   f"{hi.quality}'s, for {top.psnr - hi.psnr:+.1f} dB. With Pillow's default 4:2:0 it stops at {top.psnr:.1f} dB: "
                   "the halved colour planes are lost whatever the quality. Keeping them (4:4:4) reaches "
                   f"{top444.psnr:.1f} dB at quality 100, with files {times(top.bytes / top444.bytes, **SIZE_WORDS)}.")


def _decoders(ms: Sequence[Measurement]) -> list[Measurement]:
    return [m for m in ms if m.params["decoder"] not in STAGES]


def decoder_lines(ms: Sequence[Measurement], cores: int, sizes_measured_in_full: bool = False) -> str:
    """One line per image size: the fastest decoder per core, its verdict against each other decoder
    (timed in turns), and what the cores could decode at most; then which decoder to pick.

    Args:
        ms: :func:`~gpufeed.course.lesson04.decoders.decode_in_turns` measurements, several sizes;
            the arms that are steps of a decode (:data:`STAGES`) are left out here.
        cores: this machine's cores.
        sizes_measured_in_full: this run measured every size the course has (full mode).
    """
    lines, winners = [], {}
    for size in dict.fromkeys(m.params["size"] for m in ms):
        here = [m for m in _decoders(ms) if m.params["size"] == size]
        best = min(here, key=lambda m: m.median)
        verdicts = [(m, compare(best, m, paired=True)) for m in here if m is not best]
        winners[size] = best.params["decoder"] if all(v.kind == FASTER for _, v in verdicts) else None
        against = ", ".join(v.words(m.params["decoder"], bold=True) for m, v in verdicts)
        lines.append(f"- {size}: **{best.params['decoder']}** decodes {best.items_per_s:,.0f} images/s per core"
                     + (f", {against}" if against else "") + f"; {cores} cores: at most about "
                     f"{best.items_per_s * cores:,.0f} images/s." + _advice(*(v for _, v in verdicts)))
    named = set(winners.values())
    if None in named:
        lines.append("This run did not find one decoder faster than the others at every size.")
    elif len(named) > 1:
        lines.append("No decoder was the fastest at every size here: pick by the size your dataset has.")
    elif len(winners) > 1:
        lines.append(f"On this machine, use **{named.pop()}**: it was the fastest at every size.")
    else:
        lines.append(f"At this size, **{named.pop()}** was the fastest"
                     + ("." if sizes_measured_in_full else " (this mode measures one size; full mode, several)."))
    return "\n".join(lines)


def gap_sentence(ms: Sequence[Measurement], libs: dict[str, str | None], size: str) -> str:
    """Where the gap between the course's ``decode_pil`` and torchvision lies at ``size``: the two
    libraries (both libjpeg-turbo, where ``libs`` says so), Pillow's decode alone against
    torchvision's, then each copy out of Pillow, every step a verdict on arms timed in turns.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda d, s: Measurement(d, [s * f for f in q], items=16, params={"decoder": d, "size": "8x8"})
        >>> ms = [m("Pillow: decode only", 5.9), m("Pillow: decode + asarray", 9.5), m("pil", 12.7), m("torchvision", 8.3)]
        >>> print(gap_sentence(ms, {"Pillow": "libjpeg-turbo 3.2.0", "torchvision": "libjpeg-turbo 3.1.3"}, "8x8"))  # doctest: +NORMALIZE_WHITESPACE
        Pillow decodes with libjpeg-turbo 3.2.0 and torchvision with libjpeg-turbo 3.1.3: the same decoder. At
        8x8, the course's decode_pil is **1.53x slower** than torchvision (1.53x to 1.53x). Step by step:
        Pillow's decode alone against torchvision's decode: **1.41x faster** (1.41x to 1.41x); with the copy
        out of Pillow's buffer (np.asarray), against the decode alone: **1.61x slower** (1.61x to 1.61x); with
        convert("RGB")'s extra copy too (decode_pil), against that: **1.34x slower** (1.34x to 1.34x). So the
        gap is in the copies out of Pillow, not in the decoder.
    """
    by = {m.params["decoder"]: m for m in ms if m.params["size"] == size}
    pil, tv, alone, out = by["pil"], by["torchvision"], by[DECODE_ONLY], by[WITH_ASARRAY]
    turbo = all(lib and lib.startswith("libjpeg-turbo") for lib in libs.values())
    text = (f"Pillow decodes with {libs.get('Pillow') or 'a library it does not name'} and torchvision with "
            f"{libs.get('torchvision') or 'a library this page could not read'}"
            + (": the same decoder." if turbo else ": not the same decoder, so part of any gap may be the library."))
    total, lib = compare(pil, tv, paired=True), compare(alone, tv, paired=True)
    copy, conv = compare(out, alone, paired=True), compare(pil, out, paired=True)
    text += (f" At {size}, the course's decode_pil is {total.words('torchvision', bold=True)}. Step by step: Pillow's "
             f"decode alone against {TV_DECODE}: {lib.words(bold=True)}; with the copy out of Pillow's buffer "
             f"(np.asarray), against the decode alone: {copy.words(bold=True)}; with convert(\"RGB\")'s extra copy "
             f"too (decode_pil), against that: {conv.words(bold=True)}.")
    copies = SLOWER in (copy.kind, conv.kind)
    if total.kind == SLOWER and lib.kind in (SAME, FASTER) and copies:
        text += " So the gap is in the copies out of Pillow, not in the decoder."
    elif total.kind == SLOWER and lib.kind == SLOWER:
        text += ((" So the gap is in both: Pillow's decode itself, and the copies out of its buffer." if copies else
                  " Pillow's decode itself is slower here.")
                 + " One likely cause of the slower decode, not measured here: Pillow's decoder also unpacks each "
                 "decoded row into its own 4-bytes-per-pixel layout, a copy inside its decode; or the two builds of "
                 "the library differ.")
    return text + _advice(total, lib, copy, conv)


def draft_sentence(draft: Measurement, full: Measurement, scale: str, diff: float) -> str:
    """Decoding straight to a smaller size (``draft()``) against a full decode then a resize, in turns,
    and how far apart their images are.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda s: Measurement("", [s * f for f in q], items=16)
        >>> print(draft_sentence(m(0.07), m(0.25), "a quarter", 1.8))  # doctest: +NORMALIZE_WHITESPACE
        Decoding straight to a quarter of the size with draft() takes 4.4 ms per image, **3.57x faster** than
        a full decode then a resize (3.57x to 3.57x; 15.6 ms per image): libjpeg skips the detail the resize
        would throw away. The two images differ by 1.80 grey levels on average: each shrinks in its own way.
    """
    v = compare(draft, full, paired=True)
    words = _with(v.words("a full decode then a resize", bold=True), f"{full.median / full.items * 1e3:.1f} ms per image")
    return (f"Decoding straight to {scale} of the size with draft() takes {draft.median / draft.items * 1e3:.1f} ms per "
            f"image, {words}" + (": libjpeg skips the detail the resize would throw away." if v.kind == FASTER else ".")
            + f" The two images differ by {diff:.2f} grey levels on average: each shrinks in its own way."
            + _advice(v))


def loader_sentence(ms: Sequence[Measurement], workers: int) -> str:
    """Section 6's reading: the four formats through one DataLoader, timed in turns: the rates, raw
    uint8 against the faster JPEG, JPEG q75 against q95, PNG against JPEG q95.

    Args:
        ms: measurements named ``"png"``, ``"jpeg q95"``, ``"jpeg q75"``, ``"npy (raw uint8)"``
            (:func:`~gpufeed.course.lesson04.formats.loaders_in_turns`).

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda name, s: Measurement(name, [s * f for f in q], items=32)
        >>> print(loader_sentence([m("png", 0.3), m("jpeg q95", 0.06), m("jpeg q75", 0.05), m("npy (raw uint8)", 0.03)], 2))  # doctest: +NORMALIZE_WHITESPACE
        With 2 workers, every file in the page cache: png 107, jpeg q95 533, jpeg q75 640, npy (raw uint8)
        1,067 images/s. Raw uint8 against jpeg q75, the faster JPEG: **1.67x faster** (1.67x to 1.67x); jpeg
        q75 against q95: **1.20x faster** (1.20x to 1.20x); PNG against jpeg q95: **5.00x slower** (5.00x to
        5.00x). One likely cause, not measured here: the decode, which raw uint8 skips and which section 3
        timed falling with the quality; for PNG, PNG's own decode (zlib), slower than JPEG's.
    """
    by = {m.name: m for m in ms}
    rates = ", ".join(f"{m.name} {m.items_per_s:,.0f}" for m in ms)
    jpegs = [by[n] for n in ("jpeg q95", "jpeg q75") if n in by]
    text = f"With {workers} workers, every file in the page cache: {rates} images/s."
    verdicts, said = {}, []
    if "npy (raw uint8)" in by and jpegs:
        best = min(jpegs, key=lambda m: m.median)
        verdicts["npy"] = compare(by["npy (raw uint8)"], best, paired=True)
        said.append(f"raw uint8 against {best.name}, the faster JPEG: {verdicts['npy'].words(bold=True)}")
    if len(jpegs) == 2:
        verdicts["q75"] = compare(by["jpeg q75"], by["jpeg q95"], paired=True)
        said.append(f"jpeg q75 against q95: {verdicts['q75'].words(bold=True)}")
    if "png" in by and "jpeg q95" in by:
        verdicts["png"] = compare(by["png"], by["jpeg q95"], paired=True)
        said.append(f"PNG against jpeg q95: {verdicts['png'].words(bold=True)}")
    if said:
        text += " " + "; ".join(said)[0].upper() + "; ".join(said)[1:] + "."
    causes = []
    if FASTER in (verdicts.get("npy", NONE).kind, verdicts.get("q75", NONE).kind):
        causes.append("the decode, which raw uint8 skips and which section 3 timed falling with the quality")
    if verdicts.get("png", NONE).kind == SLOWER:
        causes.append("PNG's own decode (zlib), slower than JPEG's")
    if causes:
        text += f" One likely cause, not measured here: {'; for PNG, '.join(causes)}."
    return text + _advice(*verdicts.values())


def nvjpeg_lines(gpu: Sequence[Measurement], cpu: Sequence[Measurement], cores: int) -> str:
    """On a GPU (or our GPU reference): nvJPEG's faster arm at each size against the fastest CPU
    decoder on one core and on every core (the same images; each side timed in turns with its own
    arms, so the two sides compare as independent samples).

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda d, s: Measurement(d, [s * f for f in q], items=16, params={"decoder": d, "size": "8x8"})
        >>> print(nvjpeg_lines([m("nvjpeg batched", 0.002)], [m("torchvision", 0.02)], cores=4))  # doctest: +NORMALIZE_WHITESPACE
        - 8x8: nvjpeg batched decodes 8,000 images/s, **10.0x faster** than torchvision on one core (9.9x to
          10.1x) and **2.5x faster** than all 4 cores at best (2.5x to 2.5x); the images are then already on the GPU.
    """
    lines = []
    for size in dict.fromkeys(m.params["size"] for m in gpu):
        fast = min((g for g in gpu if g.params["size"] == size), key=lambda m: m.median)
        cpus = [c for c in _decoders(cpu) if c.params["size"] == size]
        if not cpus:
            lines.append(f"- {size}: {fast.params['decoder']} decodes {fast.items_per_s:,.0f} images/s; this run has "
                         "no CPU decoder at this size to compare with.")
            continue
        best = min(cpus, key=lambda m: m.median)
        one = compare(fast, best)
        rates_gpu = [fast.items / s for s in fast.samples]
        every = compare(rates_gpu, [best.items / s * cores for s in best.samples], higher=True)
        lines.append(f"- {size}: {fast.params['decoder']} decodes {fast.items_per_s:,.0f} images/s, "
                     f"{one.words(best.params['decoder'] + ' on one core', bold=True, digits=1)} and "
                     f"{every.words(f'all {cores} cores at best', bold=True, digits=1)}; the images are then already on "
                     "the GPU." + _advice(one, every))
    return "\n".join(lines)
