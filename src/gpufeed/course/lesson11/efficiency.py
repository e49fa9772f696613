"""Loader efficiency, the memmap's one-off cost, and the committed benchmark results (lesson 11).

*Loader efficiency* is a pipeline's training throughput divided by the throughput of the same
training step on batches already on the device (``resident`` in :mod:`gpufeed.measure.pipelines`): 1.0
means the model never waits for data. On a GPU the loader's CPU work overlaps with the GPU's
compute, so a good pipeline gets close (the course aims at :data:`TARGET`); on a CPU-only machine
the loader and the model share the cores, so every loader costs the model some of them.

Taught in ``notebooks/11_together.ipynb``, which also reads ``python -m gpufeed bench``'s committed
``results/<machine>/results.json`` through :func:`committed_bench`.

Example:
    >>> rows = efficiency({"naive": 50.0, "course": 95.0, "resident": 100.0})
    >>> [(r["pipeline"], r["efficiency"], r["ratio_to_naive"]) for r in rows]
    [('naive', 0.5, 1.0), ('course', 0.95, 1.9)]
    >>> bounds(loader_rate=50.0, model_rate=100.0)  # nothing overlapping, everything overlapping
    (0.333, 0.5)
    >>> break_even(build_s=30.0, before_s=10.0, after_s=4.0)  # 6 s saved per epoch pays 30 s back in 5
    5.0
"""

from __future__ import annotations

import math
from pathlib import Path

from gpufeed.measure.findings import efficiency_bounds as bounds  # noqa: F401  (the two bounds; diagnose reads them too)

#: The loader efficiency the course pipeline should reach on a GPU: the bar is set for
#: ``gpufeed bench``'s full-size GPU workload (a ResNet-50 in bfloat16 autocast, 224x224 crops in
#: batches of 256; README, "The benchmark"); lesson 11 reads its lighter ResNet-18 run against it.
TARGET = 0.95


def efficiency(rates: dict[str, float], ceiling: str = "resident") -> list[dict]:
    """Records from training throughputs ``name -> images/s`` (``ceiling`` among them): each
    pipeline's ``efficiency`` (its rate over the ceiling's) and ``ratio_to_naive`` (if naive is there)."""
    if ceiling not in rates:
        raise ValueError(f"efficiency: the ceiling {ceiling!r} is missing from the rates {sorted(rates)}; "
                         "measure training on batches already on the device (gpufeed.measure.pipelines.resident)")
    base = rates.get("naive")
    return [{"pipeline": name, "images_per_s": rate, "efficiency": round(rate / rates[ceiling], 3),
             "ratio_to_naive": round(rate / base, 3) if base else None}
            for name, rate in rates.items() if name != ceiling]


def from_bench(doc: dict) -> dict[str, float]:
    """Training throughputs ``pipeline -> images/s`` from a ``gpufeed bench`` document (for :func:`efficiency`)."""
    return {r["pipeline"]: r["images_per_s"] for r in doc["records"] if r["mode"] == "train"}


def break_even(build_s: float, before_s: float, after_s: float) -> float:
    """Epochs after which a one-off cost of ``build_s`` seconds is paid back, when an epoch takes
    ``before_s`` seconds without it and ``after_s`` with it; ``inf`` when it saves nothing."""
    saved = before_s - after_s
    return build_s / saved if saved > 0 else math.inf


def committed_bench(gpu: bool | None = None) -> list[tuple[Path, dict]]:
    """The committed ``gpufeed bench`` files (``results/<machine>/results.json``, and other sizes in its
    subfolders, e.g. ``results/cpu-epyc/full/``): ``(path, document)`` pairs, only those measured
    with a GPU (``gpu=True``), without one (``False``), or all (None)."""
    from gpufeed.measure import suite as pipeline_bench
    from gpufeed.measure.results import reference_roots

    found = []
    for root in reference_roots():
        for path in sorted(root.glob(f"*/{pipeline_bench.FILE}")) + sorted(root.glob(f"*/*/{pipeline_bench.FILE}")):
            doc = pipeline_bench.load(path)
            has_gpu = bool((doc.get("machine") or {}).get("gpu")) and doc.get("device", "").startswith("cuda")
            if gpu is None or has_gpu == gpu:
                found.append((path, doc))
    return found


def target_status(found: list[tuple[Path, dict]] | None = None) -> str:
    """What a page may say of :data:`TARGET`: the course pipeline's efficiency in the newest committed
    GPU run of ``gpufeed bench`` (``found``, default :func:`committed_bench` with ``gpu=True``), or that
    no GPU run has measured it yet.

    Example:
        >>> print(target_status([]))
        The course aims at a loader efficiency of 0.95 on a GPU (`efficiency.TARGET`); no GPU run of `gpufeed bench` is committed yet, so that target is not yet measured on a GPU.
    """
    found = committed_bench(gpu=True) if found is None else found
    if not found:
        return (f"The course aims at a loader efficiency of {TARGET} on a GPU (`efficiency.TARGET`); no GPU run of "
                "`gpufeed bench` is committed yet, so that target is not yet measured on a GPU.")
    path, doc = found[0]
    by = {r["pipeline"]: r["efficiency"] for r in efficiency(from_bench(doc))}
    gpu = (doc.get("machine") or {}).get("gpu") or path.parent.name
    return (f"On {gpu}, `gpufeed bench` ({doc['workload'].get('model', 'resnet50')}, crops of {doc['workload']['crop']}, "
            f"batches of {doc['workload']['batch']}) measured the course pipeline's loader efficiency at "
            f"{by.get('course', float('nan')):.2f}, against the course's {TARGET} target.")


def plot(rows: list[dict], machine: dict | None, title: str = "", note: str = "", target: float = TARGET):
    """Loader efficiency per pipeline as horizontal bars, with the target and 1.0 drawn as lines;
    each pipeline labelled with its training speed-up over naive. Returns ``(figure, axes)``."""
    import matplotlib.pyplot as plt

    from gpufeed.measure import plotting

    fig, ax = plt.subplots(figsize=(7.0, 0.9 + 0.45 * len(rows)))
    colors = [plotting.COLORS["baseline"] if r["pipeline"] == "naive" else
              plotting.COLORS["collate"] if r["efficiency"] >= target else plotting.COLORS["copy"] for r in rows]
    ax.barh(range(len(rows)), [r["efficiency"] for r in rows], color=colors)
    for y, r in enumerate(rows):
        ax.annotate(f"{r['efficiency']:.2f} ({r['images_per_s']:,.0f} images/s)", (r["efficiency"], y),
                    xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    for x, style, text, side in ((target, "--", f"target {target:.2f}", "right"), (1.0, "-", "1.0: never waits", "left")):
        ax.axvline(x, color="k", ls=style, lw=0.9)
        ax.annotate(text, (x, 1), xycoords=("data", "axes fraction"), xytext=(-3 if side == "right" else 3, 2),
                    textcoords="offset points", ha=side, va="bottom", fontsize=8)  # above the bars, not over them
    labels = [r["pipeline"] if r["ratio_to_naive"] is None else plotting.ratio_label(r["pipeline"], r["ratio_to_naive"])
              for r in rows]
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.35)
    ax.set_xlabel("loader efficiency: training images/s / images/s with data already on the device")
    ax.set_title(title or "loader efficiency (in brackets: training speed-up over naive)", pad=16)
    plotting.caption(fig, machine, note)
    return fig, ax
