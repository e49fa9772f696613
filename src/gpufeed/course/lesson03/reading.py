"""The sentences lesson 03 prints about dtypes and transfer order, each decided by the verdict method.

The arms of every comparison here were timed in turns (:func:`gpufeed.course.transfer.sweep`,
:func:`gpufeed.course.training.train_in_turns`), so sample ``i`` of each comes from round ``i`` and
they are compared as pairs (:func:`gpufeed.measure.verdict.compare` with ``paired=True``). A trend
over image sizes ("the bigger the image, the bigger the gain") is itself a comparison: of the gains
at the largest and the smallest size, each gain a ratio per round. Taught in
``notebooks/03_dtypes.ipynb``.

Example:
    >>> from gpufeed.measure.harness import Measurement
    >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
    >>> slow = Measurement("x.half().to(dev)", [0.030 * f for f in q], params={"size": "640x480", "batch": 8})
    >>> fast = Measurement("x.to(dev).half()", [0.010 * f for f in q], params={"size": "640x480", "batch": 8})
    >>> gains(slow, fast)[:2]
    [3.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufeed.course.transfer import pixels
from gpufeed.measure.harness import Measurement
from gpufeed.measure.verdict import CANNOT_TELL, FASTER, SAME, SLOWER, Verdict, compare

#: What a machine without CUDA is told about section 5's training loop.
NO_GPU_LOOP = ("No CUDA here, so the training loop is not timed: on a CPU no byte crosses a bus and nothing is "
               "pinned, so its dtype's effect is one conversion on the host, which section 4 measures on its own.")


F16S = "float16's"


def gains(slow: Measurement, fast: Measurement) -> list[float]:
    """How many times faster ``fast`` ran than ``slow`` in each round (arms timed in turns)."""
    if len(slow.samples) != len(fast.samples):
        raise ValueError(f"gains: {slow.name!r} and {fast.name!r} were not timed in turns "
                         f"({len(slow.samples)} and {len(fast.samples)} samples)")
    return [s / f for s, f in zip(slow.samples, fast.samples)]


def _advice(*verdicts: Verdict) -> str:
    """What a reader should do where any of ``verdicts`` cannot tell, said once (the one with the
    fewest samples speaks: its advice is the more pressing), with a leading space; "" where all tell."""
    undecided = [v for v in verdicts if v.kind == CANNOT_TELL]
    return f" {min(undecided, key=lambda v: v.samples).advice}" if undecided else ""


def _ms(m: Measurement, per: int = 1) -> str:
    return f"{m.median / per * 1e3:.1f} ms"


def conversion_sentence(copy: Measurement, half: Measurement, flt: Measurement, where: str) -> str:
    """What a CPU can measure of ``x.half().to(dev)``: the host's conversion against a plain uint8
    copy of the batch, and ``x.float()`` against ``x.half()``, all timed in turns.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda name, s: Measurement(name, [s * f for f in q])
        >>> print(conversion_sentence(m("copy", 0.011), m("half", 0.081), m("float", 0.075), "a batch of 8"))  # doctest: +NORMALIZE_WHITESPACE
        On this CPU, x.half() on a batch of 8 takes 81.0 ms and a plain uint8 copy of it 11.0 ms: x.half() is
        **7.36x slower** than the copy (7.36x to 7.36x): time the host spends before x.half().to(dev) can
        start a copy that is then twice as large. x.float() takes 75.0 ms, **1.08x faster** than x.half()
        (1.08x to 1.08x), though it writes 4 bytes per value instead of 2: the time goes into converting, not
        into writing the bytes.
    """
    v = compare(half, copy, paired=True)
    text = (f"On this CPU, x.half() on {where} takes {_ms(half)} and a plain uint8 copy of it {_ms(copy)}: x.half() "
            f"is {v.words('the copy', bold=True)}")
    text += (": time the host spends before x.half().to(dev) can start a copy that is then twice as large."
             if v.kind == SLOWER else ".")
    w = compare(flt, half, paired=True)
    text += f" x.float() takes {_ms(flt)}, {w.words('x.half()', bold=True)}"
    if w.kind in (FASTER, SAME):
        text += (", though it writes 4 bytes per value instead of 2: the time goes into converting, not into "
                 "writing the bytes.")
    else:
        text += ", and it writes 4 bytes per value instead of 2."
    return text + _advice(v, w)


def order_sentence(slow: Measurement, fast: Measurement, where: str) -> str:
    """On a GPU: ``x.to(dev).half()`` (``fast``) against ``x.half().to(dev)`` (``slow``), in turns.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> slow, fast = Measurement("s", [0.030 * f for f in q]), Measurement("f", [0.010 * f for f in q])
        >>> order_sentence(slow, fast, "a batch of 64 at 1280x960")
        'For a batch of 64 at 1280x960, x.to(dev).half() takes 10.0 ms, x.half().to(dev) 30.0 ms: sending uint8 and converting on the GPU is **3.00x faster** than converting on the host (3.00x to 3.00x).'
    """
    v = compare(fast, slow, paired=True)
    return (f"For {where}, x.to(dev).half() takes {_ms(fast)}, x.half().to(dev) {_ms(slow)}: sending uint8 and "
            f"converting on the GPU is {v.words('converting on the host', bold=True)}." + _advice(v))


def _by_size(ms: Sequence[Measurement], slow: str, fast: str, key: str | None) -> dict[str, tuple]:
    """``size -> (slow, fast)`` at the largest batch of each size, smallest size first."""
    out = {}
    for size in sorted({m.params["size"] for m in ms}, key=pixels):
        at = [m for m in ms if m.params["size"] == size]
        batch = max(m.params["batch"] for m in at)
        pair = {(m.params[key] if key else m.name): m for m in at if m.params["batch"] == batch}
        if slow in pair and fast in pair:
            out[size] = (pair[slow], pair[fast])
    return out


def trend_sentence(ms: Sequence[Measurement], slow: str, fast: str, key: str | None = None,
                   what: str = "the faster side") -> str:
    """"The bigger the image, the bigger the gain", read: ``fast`` against ``slow`` at the largest batch
    of each image size (each pair timed in turns), then the gain at the largest size against the gain
    at the smallest (a comparison of the per-round gains, by the same verdict method).

    Args:
        ms: measurements with ``params["size"]`` and ``params["batch"]``.
        slow, fast: names, or values of ``params[key]`` where ``key`` is given.
        what: how to name ``fast`` in the sentence.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> def m(name, size, s):
        ...     return Measurement(name, [s * f for f in q], params={"size": size, "batch": 8})
        >>> ms = [m("a", "8x8", 2.0), m("b", "8x8", 1.0), m("a", "16x16", 3.0), m("b", "16x16", 1.0)]
        >>> print(trend_sentence(ms, "a", "b", what="b"))  # doctest: +NORMALIZE_WHITESPACE
        By image size, b against a at the largest batch: 8x8 **2.00x faster** (2.00x to 2.00x); 16x16 **3.00x
        faster** (3.00x to 3.00x). The gain at 16x16 is **1.50x larger** than at 8x8 (1.50x to 1.50x): the
        bigger the image, the bigger the gain.
    """
    pairs = _by_size(ms, slow, fast, key)
    if not pairs:
        return f"No size has both {slow} and {fast}: no trend to read."
    verdicts = {size: compare(f, s, paired=True) for size, (s, f) in pairs.items()}
    listed = "; ".join(f"{size} {v.words(bold=True)}" for size, v in verdicts.items())
    text = f"By image size, {what} against {slow} at the largest batch: {listed}."
    if len(pairs) < 2:
        return text + " One size only, so no trend to read."
    small, big = next(iter(pairs)), list(pairs)[-1]
    tv = compare(gains(*pairs[big]), gains(*pairs[small]), higher=True)
    text += f" The gain at {big} is {tv.words(f'at {small}', more='larger', less='smaller', same='as large', bold=True)}"
    kinds = {v.kind for v in verdicts.values()}
    if tv.kind == CANNOT_TELL:
        return text + "." + _advice(tv, *verdicts.values())
    if kinds == {FASTER}:
        return text + {FASTER: ": the bigger the image, the bigger the gain.",
                       SAME: ": faster at every size, by about as much.",
                       SLOWER: ": faster at every size, less so as the image grows."}[tv.kind]
    if kinds == {SLOWER}:
        return text + ": slower at every size."
    undecided = [size for size, v in verdicts.items() if not v.decided]
    return text + (f"; at {', '.join(undecided)} this run cannot tell the two apart." + _advice(*verdicts.values())
                   if undecided else ": faster at some sizes and not at others.")


def amp_sentence(off: Measurement, on: Measurement, kind: str, case: str) -> tuple[str, bool]:
    """Mixed precision (``on``) against float32 (``off``), timed in turns after a warm-up, and whether
    the loops that follow should use it: only where this run found it faster.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> text, use = amp_sentence(Measurement("off", [0.2 * f for f in q]), Measurement("on", [0.1 * f for f in q]),
        ...                          "float16 + GradScaler", "batch 64 at 224x224")
        >>> use, text.split(":")[1]
        (True, ' **2.00x faster** than float32 (2.00x to 2.00x), batch 64 at 224x224.')
    """
    v = compare(on, off, paired=True)
    text = (f"{kind} autocast, {_ms(on)} per epoch against {_ms(off)} in float32: "
            f"{v.words('float32', bold=True)}, {case}.")
    if v.kind == FASTER:
        return text, True
    why = {SAME: "mixed precision gained nothing here", SLOWER: "mixed precision was slower here",
           CANNOT_TELL: "this run could not tell whether mixed precision helps"}[v.kind]
    return text + f" The loops below run in float32: {why}." + _advice(v), False


def grid_sentences(ms: Sequence[Measurement]) -> str:
    """Section 5's grid read cell against cell, each effect with the other held fixed: the dtype
    (uint8 or float16 on the wire) from pinned and from pageable memory, the pinning for each
    dtype, and the usual pair of loops (pinned uint8 against pageable float16). The four cells were
    timed in turns (:func:`gpufeed.course.training.train_in_turns`).

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> cell = lambda w, p, s: Measurement("", [s * f for f in q], params={"wire": w, "pinned": p, "steps": 1})
        >>> print(grid_sentences([cell("uint8", True, 0.010), cell("float16", True, 0.012),
        ...                       cell("uint8", False, 0.011), cell("float16", False, 0.020)]))  # doctest: +NORMALIZE_WHITESPACE
        From pinned memory, uint8 on the wire makes a step **1.20x faster** than float16 converted on the host
        (1.20x to 1.20x; 10.0 vs 12.0 ms); from pageable memory, **1.82x faster** (1.82x to 1.82x; 11.0 vs
        20.0 ms): the dtype alone.
        Pinning (copied non_blocking) makes the uint8 step **1.10x faster** than pageable (1.10x to 1.10x) and
        the float16 step **1.67x faster** (1.67x to 1.67x): the pinning alone.
        The usual pair of loops, pinned uint8 and pageable float16 (converted into a prepared buffer, without
        the fresh tensor that `x.half()` allocates), differ: uint8's is **2.00x faster** than float16's (2.00x
        to 2.00x).
    """
    cell = {(m.params["wire"], m.params["pinned"]): m for m in ms}
    step = {k: m.median / m.params["steps"] * 1e3 for k, m in cell.items()}  # ms per step
    kinds = [p for p in (True, False) if ("uint8", p) in cell and ("float16", p) in cell]
    undecided: list[Verdict] = []
    said = []
    for i, p in enumerate(kinds):
        v = compare(cell["uint8", p], cell["float16", p], paired=True)
        undecided += [v] if not v.decided else []
        words = v.words("float16 converted on the host" if i == 0 else "", bold=True)
        words = words.replace(")", f"; {step['uint8', p]:.1f} vs {step['float16', p]:.1f} ms)", 1)
        said.append(f"from {'pinned' if p else 'pageable'} memory, {'uint8 on the wire makes a step ' if i == 0 else ''}"
                    + words)
    lines = ["; ".join(said)[0].upper() + "; ".join(said)[1:] + ": the dtype alone."]
    if len(kinds) == 2:
        pin = {w: compare(cell[w, True], cell[w, False], paired=True) for w in ("uint8", "float16")}
        undecided += [v for v in pin.values() if not v.decided]
        lines.append(f"Pinning (copied non_blocking) makes the uint8 step {pin['uint8'].words('pageable', bold=True)} "
                     f"and the float16 step {pin['float16'].words(bold=True)}: the pinning alone.")
        usual = compare(cell["uint8", True], cell["float16", False], paired=True)
        undecided += [usual] if not usual.decided else []
        lines.append("The usual pair of loops, pinned uint8 and pageable float16 (converted into a prepared buffer, "
                     "without the fresh tensor that `x.half()` allocates), differ: uint8's is "
                     f"{usual.words(F16S, bold=True)}.")
    return "\n".join(lines) + _advice(*undecided)


def bfloat16_sentence(copy: Measurement, half: Measurement, bf16: Measurement, earlier: Verdict, where: str) -> str:
    """Exercise 2 on a CPU: ``x.bfloat16()`` against ``x.half()``, the three arms timed in turns, and
    x.half() against the plain copy read against section 4's answer to that question (``earlier``).

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda s: Measurement("", [s * f for f in q])
        >>> first = compare(m(0.081), m(0.011), paired=True)
        >>> print(bfloat16_sentence(m(0.011), m(0.080), m(0.030), first, "1280x960, batch 8"))  # doctest: +NORMALIZE_WHITESPACE
        No GPU here, so no wire: on the host, x.bfloat16() takes 30.0 ms and x.half() 80.0 ms (1280x960, batch
        8): x.bfloat16() is **2.67x faster** than x.half() (2.67x to 2.67x). With a GPU both send 2 bytes per
        value, so the order saves the same bytes. Section 4's question again, x.half() against the plain uint8
        copy: here it is **7.27x slower** than the copy (7.27x to 7.27x). This agrees with section 4 (7.36x
        slower there, 7.27x slower here).
    """
    v = compare(bf16, half, paired=True)
    again = compare(half, copy, paired=True)
    return (f"No GPU here, so no wire: on the host, x.bfloat16() takes {_ms(bf16)} and x.half() {_ms(half)} ({where}): "
            f"x.bfloat16() is {v.words('x.half()', bold=True)}. With a GPU both send 2 bytes per value, so the order "
            f"saves the same bytes. Section 4's question again, x.half() against the plain uint8 copy: here it is "
            f"{again.words('the copy', bold=True)}. {again.reads(earlier, 'section 4')}" + _advice(v, again))


def order_gain_sentence(by_dtype: dict[str, tuple[Measurement, Measurement]], where: str) -> str:
    """Exercise 2 on a GPU: for each dtype, the order's gain (``(slow, fast)`` timed in turns, all
    dtypes in one run), then bfloat16's gain against float16's, round by round.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> m = lambda s: Measurement("", [s * f for f in q])
        >>> print(order_gain_sentence({"float16": (m(0.03), m(0.01)), "bfloat16": (m(0.03), m(0.01))}, "batch 8"))  # doctest: +NORMALIZE_WHITESPACE
        Sending uint8 and converting on the GPU (batch 8): float16 **3.00x faster** than converting on the
        host (3.00x to 3.00x); bfloat16 **3.00x faster** (3.00x to 3.00x). bfloat16's gain is **as large** as
        float16's (within 0%).
    """
    verdicts = {d: compare(fast, slow, paired=True) for d, (slow, fast) in by_dtype.items()}
    listed = "; ".join(f"{d} {v.words('converting on the host' if i == 0 else '', bold=True)}"
                       for i, (d, v) in enumerate(verdicts.items()))
    text = f"Sending uint8 and converting on the GPU ({where}): {listed}."
    if {"float16", "bfloat16"} <= by_dtype.keys():
        g = compare(gains(*by_dtype["bfloat16"]), gains(*by_dtype["float16"]), paired=True, higher=True)
        text += f" bfloat16's gain is {g.words(F16S, more='larger', less='smaller', same='as large', bold=True)}."
        verdicts["gain"] = g
    return text + _advice(*verdicts.values())


def float_by_size(ms: Sequence[Measurement]) -> str:
    """Exercise 3 on a CPU: ``x.float()`` against ``x.half()`` at the largest batch of each size, from
    section 4's sweep (timed in turns there): the host's share of sending float32 instead of float16.

    Example:
        >>> q = [1.00, 1.01, 0.99, 1.005, 0.995]
        >>> def m(name, size, s):
        ...     return Measurement(name, [s * f for f in q], params={"size": size, "batch": 8})
        >>> ms = [m("x.half()", "8x8", 2.0), m("x.float()", "8x8", 2.0)]
        >>> float_by_size(ms)
        'On the host, x.float() against x.half() at the largest batch: 8x8 **as fast** (within 0%). No bytes cross a bus here: on a GPU, float32 would also send twice the bytes of float16.'
    """
    verdicts = {size: compare(f, s, paired=True) for size, (s, f) in _by_size(ms, "x.half()", "x.float()", None).items()}
    listed = "; ".join(f"{size} {v.words(bold=True)}" for size, v in verdicts.items())
    return (f"On the host, x.float() against x.half() at the largest batch: {listed}. No bytes cross a bus here: "
            "on a GPU, float32 would also send twice the bytes of float16." + _advice(*verdicts.values()))
