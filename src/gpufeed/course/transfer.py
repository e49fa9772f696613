"""Dtypes on the wire and the order of ``.to(device)`` and ``.half()``: bytes, variants, sweeps.

A batch of images leaves the loader as ``uint8`` (1 byte per channel value). Converting it to
``float16`` (2 bytes) or ``float32`` (4 bytes) *before* the copy multiplies the bytes that cross
the bus and adds a conversion on the CPU; converting *after* the copy sends the fewest bytes and
converts on the GPU, in one short bandwidth-bound kernel (which still shares the GPU with the
step). Taught in ``notebooks/03_dtypes.ipynb``; the
training-step benchmark is in :mod:`gpufeed.course.training`. :func:`h2d_sentence` and
:func:`h2d_table` read what pinning buys from a committed GPU reference (lessons 00 and 07).

Example:
    >>> batch_bytes(64, (640, 480), torch.uint8), batch_bytes(64, (640, 480), torch.float32)
    (58982400, 235929600)
    >>> x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    >>> outs = [v.fn(x, "cpu") for v in order_variants()]
    >>> all(torch.equal(outs[0], o) for o in outs), outs[0].dtype
    (True, torch.float16)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from gpufeed.measure.ceilings import h2d_at
from gpufeed.measure.harness import Measurement, interleave
from gpufeed.measure.results import Reference
from gpufeed.measure.units import MB, size_label
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, SLOWER, compare

#: The image sizes of the course (width, height), from the talks it grew from.
SIZES: tuple[tuple[int, int], ...] = ((384, 384), (640, 480), (1280, 960))
#: The batch sizes the lesson sweeps.
BATCHES: tuple[int, ...] = (8, 16, 32, 64)
#: The dtypes a batch may travel in.
DTYPES: tuple[torch.dtype, ...] = (torch.uint8, torch.float16, torch.float32)


def size_name(size: tuple[int, int]) -> str:
    """``(640, 480)`` to ``"640x480"`` (width first)."""
    return f"{size[0]}x{size[1]}"


def batch_bytes(batch: int, size: tuple[int, int], dtype: torch.dtype, channels: int = 3) -> int:
    """Bytes of one ``[batch, channels, height, width]`` batch in ``dtype``."""
    w, h = size
    itemsize = torch.empty((), dtype=dtype).element_size()
    return batch * channels * h * w * itemsize


def wire_table(sizes: Iterable[tuple[int, int]] = SIZES, batches: Iterable[int] = BATCHES,
               dtypes: Sequence[torch.dtype] = DTYPES) -> str:
    """A text table of MB per batch (10^6 bytes) for each image size, batch size and dtype.

    Example:
        >>> print(wire_table([(384, 384)], [8]))  # doctest: +NORMALIZE_WHITESPACE
        size     batch  uint8 MB  float16 MB  float32 MB
        384x384  8      3.54      7.08        14.2
    """
    names = [str(d).removeprefix("torch.") for d in dtypes]
    rows = [["size", "batch", *(f"{n} MB" for n in names)]]
    for size in sizes:
        for b in batches:
            rows.append([size_name(size), str(b), *(f"{batch_bytes(b, size, d) / 1e6:.3g}" for d in dtypes)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


@dataclass(frozen=True)
class Variant:
    """One way to get a ``uint8`` batch onto ``device`` as another dtype.

    Attributes:
        name: the code as a reader would write it, e.g. ``"x.to(dev).half()"``.
        fn: ``fn(x, device) -> tensor`` on ``device`` in the target dtype.
        pinned: the input must be in pinned (page-locked) memory (for ``non_blocking=True``).
        where: where the conversion runs: ``"host"`` or ``"device"``.
    """

    name: str
    fn: Callable[[torch.Tensor, object], torch.Tensor]
    pinned: bool = False
    where: str = "host"


def order_variants(dtype: torch.dtype = torch.float16) -> list[Variant]:
    """The transfer orders the lesson compares; the first (convert on the host) is the baseline.

    All of them give bit-identical results: every uint8 value is exact in float16 and float32.
    ``where`` for ``x.to(dev, dtype)`` follows ATen's CUDA copy kernel (``Copy.cu``) in recent
    releases: a blocking host-to-device copy converts on the CPU first, a non-blocking one copies
    the uint8 bytes and converts on the GPU. The timings are what tell.
    """
    short = {torch.float16: "half()", torch.float32: "float()", torch.bfloat16: "bfloat16()"}
    conv = short.get(dtype, f"to({dtype})")
    d = str(dtype).removeprefix("torch.")
    return [
        Variant(f"x.{conv}.to(dev)", lambda x, dev: x.to(dtype).to(dev), where="host"),
        Variant(f"x.to(dev).{conv}", lambda x, dev: x.to(dev).to(dtype), where="device"),
        Variant(f"x.to(dev, {d})", lambda x, dev: x.to(dev, dtype), where="host"),
        Variant(f"pinned x.to(dev, non_blocking=True).{conv}",
                lambda x, dev: x.to(dev, non_blocking=True).to(dtype), pinned=True, where="device"),
        Variant(f"pinned x.to(dev, {d}, non_blocking=True)",
                lambda x, dev: x.to(dev, dtype, non_blocking=True), pinned=True, where="device"),
    ]


def conversion_variants() -> list[Variant]:
    """What a CPU-only machine can measure: the host's cost to touch and to convert a batch.

    ``x.clone()`` is a plain uint8 copy (the cost of touching every byte once); the others are
    the conversions that ``x.half().to(dev)`` and ``x.float().to(dev)`` pay on the host.
    """
    return [
        Variant("x.clone() (uint8 copy)", lambda x, dev: x.clone()),
        Variant("x.half()", lambda x, dev: x.half()),
        Variant("x.float()", lambda x, dev: x.float()),
    ]


def random_batch(batch: int, size: tuple[int, int], pinned: bool = False, seed: int = 0) -> torch.Tensor:
    """A ``uint8 [batch, 3, H, W]`` batch of random pixels (what a loader hands over)."""
    w, h = size
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (batch, 3, h, w), dtype=torch.uint8, generator=g)
    return x.pin_memory() if pinned else x


def sweep(variants: Sequence[Variant], device, sizes: Iterable[tuple[int, int]] = SIZES,
          batches: Iterable[int] = BATCHES, repeats: int = 10, warmup: int = 2) -> list[Measurement]:
    """Times every variant for every (size, batch), the variants of one case **in turns** (a, b, c, a,
    b, c, ...: :func:`gpufeed.measure.harness.interleave`); one :class:`Measurement` each.

    In turns, so that a burst of other work slows every variant of a case a little rather than one
    a lot, and the verdict method can read any two of them as pairs
    (:func:`gpufeed.measure.verdict.compare` with ``paired=True``): sample ``i`` of each variant
    comes from round ``i``.

    Each measurement's ``params`` hold ``size`` (e.g. ``"640x480"``), ``batch``, ``variant``,
    ``device`` and ``where``; ``nbytes`` is the uint8 batch's size, so ``gb_per_s`` reads as image
    bytes moved. Pinned variants get their own pinned copy of the batch (only where CUDA exists:
    pinning needs the CUDA driver).

    Example:
        >>> ms = sweep(conversion_variants(), "cpu", sizes=[(16, 8)], batches=[2], repeats=3, warmup=0)
        >>> [m.name for m in ms], {len(m.samples) for m in ms}, ms[0].params["size"]
        (['x.clone() (uint8 copy)', 'x.half()', 'x.float()'], {3}, '16x8')
    """
    device = torch.device(device)
    out = []
    can_pin = torch.cuda.is_available()
    for size in sizes:
        for b in batches:
            x = random_batch(b, size)
            xp = x.pin_memory() if can_pin and any(v.pinned for v in variants) else x
            cases = {v.name: (lambda v=v, src=(xp if v.pinned else x): v.fn(src, device)) for v in variants}
            params = {v.name: {"size": size_name(size), "batch": b, "variant": v.name, "device": str(device),
                               "where": v.where} for v in variants}
            out += interleave(cases, repeats=repeats, warmup=warmup, items=b, params=params,
                              desc=f"{len(variants)} variants in turns, {size_name(size)} batch {b}")
            for m in out[-len(variants):]:
                m.nbytes = x.numel()
            del x, xp
    return out


def pixels(size: str) -> int:
    """The pixels of an image size written ``"WxH"``: ``pixels("640x480") == 307200``."""
    return math.prod(int(v) for v in size.split("x"))


def at_largest(ms: Sequence[Measurement], key: str | None = None) -> dict[str, Measurement]:
    """The measurements at the largest image size (in pixels) and, there, the largest batch.

    Keyed by name, or by ``params[key]`` when ``key`` is given; what a lesson's sentence reads.

    Example:
        >>> ms = [Measurement(n, [t], params={"size": s, "batch": b})
        ...       for n, t, s, b in [("a", 1, "8x8", 4), ("a", 2, "16x8", 4), ("b", 3, "16x8", 4), ("a", 9, "16x8", 2)]]
        >>> {k: m.median for k, m in at_largest(ms).items()}
        {'a': 2, 'b': 3}
    """
    size = max((m.params["size"] for m in ms), key=pixels)
    batch = max(m.params["batch"] for m in ms if m.params["size"] == size)
    return {(m.params[key] if key else m.name): m for m in ms
            if m.params["size"] == size and m.params["batch"] == batch}


def plot_by_size(ms: Sequence[Measurement], key: str, machine: dict | None = None, title: str = ""):
    """Milliseconds per image against the image's megapixels, one line per ``params[key]``.

    For measurements at one batch size over several image sizes (a trend, as :func:`read_trend`
    reads it). Returns ``(figure, axes)``.
    """
    import matplotlib.pyplot as plt

    from gpufeed.measure.plotting import COLORS, caption

    def megapixels(m: Measurement) -> float:
        return pixels(m.params["size"]) / 1e6

    fig, ax = plt.subplots(figsize=(6, 3.6))
    colors = iter(COLORS[k] for k in ("copy", "decode", "compute", "other", "collate", "read", "pin"))
    for value in dict.fromkeys(m.params[key] for m in ms):
        line = sorted((m for m in ms if m.params[key] == value), key=megapixels)
        ax.plot([megapixels(m) for m in line], [m.median / m.items * 1e3 for m in line], "o-",
                color=next(colors), label=str(value))
    ax.set_xscale("log")
    ax.set_xlabel("image size (megapixels)")
    ax.set_ylabel("time per image (ms)")
    ax.legend(fontsize=8, title=key, title_fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    caption(fig, machine if machine is not None else ms[0].machine)
    return fig, ax


def plot_sweep(ms: Sequence[Measurement], baseline: str, machine: dict | None = None, title: str = "",
               ylabel: str = "time per batch (ms)", scale: float = 1e3):
    """Time against batch size, one panel per image size, one line per measurement name.

    The legend gives each line's speed against ``baseline`` at the largest batch
    (``baseline time / its time``: above 1 is faster). ``scale`` turns seconds into the unit of
    ``ylabel`` (1e3 for ms, 1 for s). Returns ``(figure, axes)``.
    """
    import matplotlib.pyplot as plt

    from gpufeed.measure.plotting import COLORS, caption, ratio_label

    sizes = list(dict.fromkeys(m.params["size"] for m in ms))
    names = list(dict.fromkeys(m.name for m in ms))
    others = iter(COLORS[k] for k in ("copy", "decode", "compute", "other", "collate", "read", "pin"))
    palette = [COLORS["baseline"] if n == baseline else next(others) for n in names]  # grey = baseline
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.6), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        cell = [m for m in ms if m.params["size"] == size]
        top = max(m.params["batch"] for m in cell)
        base = next(m for m in cell if m.name == baseline and m.params["batch"] == top)
        for name, color in zip(names, palette):
            line = sorted((m for m in cell if m.name == name), key=lambda m: m.params["batch"])
            last = line[-1]
            ax.plot([m.params["batch"] for m in line], [m.median * scale for m in line], "o-", color=color,
                    label=ratio_label(name, base.median / last.median))
        ax.set_xscale("log", base=2)
        ticks = sorted({m.params["batch"] for m in cell})
        ax.set_xticks(ticks, [str(b) for b in ticks])
        ax.minorticks_off()
        ax.set_xlabel("batch size (images)")
        ax.set_ylabel(ylabel)
        ax.set_title(size)
        ax.legend(fontsize=7, title=f"vs baseline at batch {top}", title_fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    caption(fig, machine if machine is not None else ms[0].machine)
    return fig, axes[0]


# --- what pinning buys, read from a committed GPU reference (lessons 00 and 07) -----------------

def h2d_sentence(ref: Reference) -> str:
    """What pinning buys on ``ref``'s GPU, read from its largest copy of each source, each comparison
    decided by the verdict method (:func:`gpufeed.measure.verdict.compare`: the copies move the same
    bytes, so their times compare).

    Example:
        >>> def m(source, s):
        ...     return Measurement(f"H2D {source}", [s * f for f in (1, 1.01, 0.99, 1, 1.02)], nbytes=1 << 28,
        ...                        params={"nbytes": 1 << 28, "source": source})
        >>> ref = Reference([m("pageable", 0.0309), m("pinned", 0.0049), m("pin+copy", 0.0112)], {"gpu": "GPU X"}, "a file")
        >>> print(h2d_sentence(ref))  # doctest: +NORMALIZE_WHITESPACE
        On GPU X (a file), a 256 MB copy from memory pinned beforehand runs at **54.8 GB/s**, **6.31x
        faster** than the 8.7 GB/s from pageable memory (6.18x to 6.43x). Pinning each batch first and
        then copying runs at 24.0 GB/s, **2.76x faster** than pageable (2.70x to 2.81x): in a serial loop
        here, pinning paid for itself, and the pin, a copy in RAM of its own, left it **2.29x slower**
        than memory pinned beforehand (2.24x to 2.33x). As timed here (after a warm-up), each pin copies
        into a block that PyTorch's caching host allocator had already page-locked; pinning fresh memory
        every time, as the PyTorch tutorial on `pin_memory()` times it, also page-locks new pages, and may
        cost more than the faster copy saves.
    """
    at = h2d_at(ref.measurements, max(m.params["nbytes"] for m in ref.measurements))
    pageable, pinned = at["pageable"], at["pinned"]
    v = compare(pinned, pageable)
    text = (f"On {ref.hardware} ({ref.source}), a {size_label(pinned.params['nbytes'])} copy from memory pinned "
            f"beforehand runs at **{pinned.gb_per_s:.1f} GB/s**, "
            f"{v.words(f'the {pageable.gb_per_s:.1f} GB/s from pageable memory', bold=True)}."
            + (f" {v.advice}" if v.kind == CANNOT_TELL else ""))
    if "pin+copy" not in at:
        return text + " This reference predates the pin+copy series: run this cell on a GPU to see what the pin costs."
    both = at["pin+copy"]
    v2, v3 = compare(both, pageable), compare(both, pinned)
    text += f" Pinning each batch first and then copying runs at {both.gb_per_s:.1f} GB/s, {v2.words('pageable', bold=True)}"
    if v2.kind == FASTER:
        text += (": in a serial loop here, pinning paid for itself"
                 + (f", and the pin, a copy in RAM of its own, left it {v3.words('memory pinned beforehand', bold=True)}"
                    if v3.kind == SLOWER else "") + ".")
    elif v2.kind == CANNOT_TELL:
        text += f". {v2.advice}"
    else:
        text += (": in a serial loop, pinning cost what the faster copy saved; it pays when the pin runs off the "
                 "loop's thread and the copy overlaps compute (lessons 07-08).")
    return text + (" As timed here (after a warm-up), each pin copies into a block that PyTorch's caching host "
                   "allocator had already page-locked; pinning fresh memory every time, as the PyTorch tutorial on "
                   "`pin_memory()` times it, also page-locks new pages, and may cost more than the faster copy saves.")


def h2d_table(ours: Sequence[Reference], theirs: Sequence, nbytes: int = 16 * MB) -> str:
    """A Markdown table of host-to-device GB/s, one row per machine, each labelled with its hardware
    and its source: ours (the copy size nearest ``nbytes``; NVIDIA's post timed 16 MiB) and every
    pageable/pinned pair in ``theirs`` (:class:`gpufeed.measure.published.Figure`, ids
    ``h2d-<source>-<machine>``, numbers as published).

    Example:
        >>> from gpufeed.measure import published
        >>> print(h2d_table([], published.for_lesson("lesson00")).splitlines()[2])  # doctest: +ELLIPSIS
        | GeForce GTX 680 with an Intel Core i7-3930K (desktop) | published by NVIDIA Technical Blog, ...
    """
    rows = ["| machine | source | copy | pageable (GB/s) | pinned (GB/s) | pinned / pageable | pin, then copy (GB/s) |",
            "|---|---|---|---|---|---|---|"]
    for ref in ours:
        at = h2d_at(ref.measurements, nbytes)
        pageable, pinned = at["pageable"].gb_per_s, at["pinned"].gb_per_s
        both = f"{at['pin+copy'].gb_per_s:.2f}" if "pin+copy" in at else "not measured"
        rows.append(f"| {ref.hardware} | {ref.source} | {size_label(at['pinned'].params['nbytes'])} | {pageable:.2f} | "
                    f"{pinned:.2f} | {pinned / pageable:.2f}x | {both} |")
    pairs: dict[str, dict] = {}
    for f in theirs:
        if f.id.startswith("h2d-"):
            pairs.setdefault(f.hardware, {})[f.id.split("-")[1]] = f
    for hardware, pair in pairs.items():
        if {"pageable", "pinned"} <= pair.keys():
            paged, pin = pair["pageable"], pair["pinned"]
            rows.append(f"| {hardware} | published by {pin.publisher}, not measured here: [{pin.title}]({pin.url}) | "
                        f"16 MiB | {paged.number()} | {pin.number()} | {pin.figure / paged.figure:.2f}x | not published |")
    return "\n".join(rows)
