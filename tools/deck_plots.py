"""Renders the workshop deck's plots (``slides/slides.md``) into ``assets/plots/*.png``.

Every plot comes from the package: the pipeline simulator and its Gantt charts (lessons 01, 07,
08, 11), computations that are exact (bytes on the wire, lesson 03; the profiler's schedule,
lesson 02; shards per rank, lesson 12), seeded and cheap ones (JPEG size and error against
quality, lesson 04; grouped shuffles, lesson 06; batch augmentation, lesson 09), and the committed
measurements in ``results/<machine>/*.json`` (``gpufeed.measure.harness.load``), captioned with the machine
they were measured on. Nothing here times anything, so the same checkout gives the same plots.
Numbers on the slides come from these plots, never typed by hand.

Usage (from the repository root; about 10 s):

    .venv/bin/python tools/deck_plots.py            # all plots
    .venv/bin/python tools/deck_plots.py --list     # the names it makes, one per line
    .venv/bin/python tools/deck_plots.py lesson01-timelines lesson03-wire   # only these
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from gpufeed.course.simulator import PRESETS, Costs, preset, simulate, slowest_stage  # noqa: E402
from gpufeed.course.timeline import gantt  # noqa: E402
from gpufeed.measure import plotting  # noqa: E402
from gpufeed.measure.harness import Measurement, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "assets" / "plots"
#: Committed measurements the deck draws: results/<machine>/<lesson>.json -> "<lesson>-<machine>".
MEASURED = ("lesson10",)
SIMULATED = "simulated with lesson 01's default costs, not measured"


def lesson01_timelines():
    """The first and the last of the five classic timelines: naive, and GPU prefetch (lesson 01 draws all five)."""
    runs = {name: simulate(preset(name), n_batches=24) for name in ("naive", "GPU prefetch")}
    heights = [len({i.resource for i in r.intervals}) + 1.4 for r in runs.values()]
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 0.36 * sum(heights)), sharex=True,
                             gridspec_kw={"height_ratios": heights})
    for ax, (name, r) in zip(axes, runs.items()):
        last = ax is axes[-1]
        gantt(r.intervals, ax=ax, until=3 * runs["naive"].ms_per_batch, legend=ax is axes[0],
              title=f"{name}: {r.images_per_s:,.0f} images/s", note=SIMULATED if last else "")
        if not last:
            ax.set_xlabel("")
    fig.tight_layout()
    return fig


def lesson01_rates():
    """Steady-state images/s of the five presets, with the ratio to the naive loop."""
    runs = {name: simulate(preset(name), n_batches=24) for name in PRESETS}
    ms = [Measurement(name, [r.ms_per_batch / 1000], items=r.pipeline.batch_size) for name, r in runs.items()]
    gpu = runs["GPU prefetch"].utilisation()["GPU"]
    stage, _ = slowest_stage(runs["GPU prefetch"].pipeline)
    fig, ax = plotting.bars(ms, baseline="naive", title=f"batches of 32 images of 224x224; with GPU prefetch the "
                            f"GPU is busy {gpu:.0%} of the time (slowest stage: {stage})")
    ax.title.set_fontsize(10)
    ax.set_xlabel(f"images/s, steady state ({SIMULATED})")
    return fig


def lesson02_schedule():
    """Which steps ``torch.profiler.schedule(skip_first=1, wait=1, warmup=1, active=3, repeat=2)`` records."""
    from matplotlib.patches import Patch
    from torch.profiler import ProfilerAction, schedule

    plan = schedule(skip_first=1, wait=1, warmup=1, active=3, repeat=2)
    kinds = {"skipped": "#dddddd", "wait": plotting.COLORS["baseline"], "warm-up (discarded)": plotting.COLORS["pin"],
             "recorded": plotting.COLORS["copy"], "recorded, then on_trace_ready": plotting.COLORS["compute"]}
    steps, saves = 13, 0
    kinds["done (repeat=2 reached)"] = "#f4f4f4"
    fig, ax = plt.subplots(figsize=(10, 1.9))
    for step in range(steps):
        action = plan(step)
        kind = ("skipped" if step < 1 else "done (repeat=2 reached)" if saves == 2 else
                "wait" if action == ProfilerAction.NONE else
                "warm-up (discarded)" if action == ProfilerAction.WARMUP else
                "recorded" if action == ProfilerAction.RECORD else "recorded, then on_trace_ready")
        saves += action == ProfilerAction.RECORD_AND_SAVE
        ax.broken_barh([(step, 0.92)], (0, 1), facecolors=kinds[kind])
        ax.text(step + 0.46, 0.5, str(step), ha="center", va="center", fontsize=10,
                color="white" if kind.startswith("recorded") else "black")
    ax.set_xlim(0, steps)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_xticks([])
    ax.grid(False)
    ax.spines[:].set_visible(False)
    ax.set_xlabel("step: the number of prof.step() calls before it")
    ax.set_title("schedule(skip_first=1, wait=1, warmup=1, active=3, repeat=2)", loc="left", fontsize=10)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in kinds.items()], loc="upper center",
              bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8)
    return fig


def lesson03_wire():
    """MB per batch of 64 images on the wire, as uint8, float16 and float32, at the course's sizes."""
    from gpufeed.course import transfer

    batch = transfer.BATCHES[-1]
    colors = (plotting.COLORS["copy"], plotting.COLORS["read"], plotting.COLORS["compute"])
    fig, ax = plt.subplots(figsize=(9, 3.4))
    width = 0.26
    for k, (dtype, color) in enumerate(zip(transfer.DTYPES, colors)):
        mb = [transfer.batch_bytes(batch, size, dtype) / 1e6 for size in transfer.SIZES]
        name = str(dtype).removeprefix("torch.")
        bars = ax.bar([i + (k - 1) * width for i in range(len(mb))], mb, width,
                      label=plotting.ratio_label(name, torch.empty((), dtype=dtype).element_size()), color=color)
        ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    ax.set_xticks(range(len(transfer.SIZES)), [transfer.size_name(s) for s in transfer.SIZES])
    ax.set_xlabel("image size (batch of 64, 3 channels)")
    ax.set_ylabel("MB per batch (10^6 bytes)")
    ax.legend(title="dtype (bytes vs uint8)")
    ax.set_title("bytes on the wire: convert after the copy, not before", loc="left", fontsize=10)
    return fig


def lesson04_quality():
    """Mean JPEG size and PSNR against Pillow's quality, on 640x480 images cut from the course's photos."""
    from gpufeed.course.lesson04 import quality
    from gpufeed.measure.synth import SynthSpec, render

    spec = SynthSpec(n=4, width=640, height=480, classes=4)
    qualities = [10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 100]
    # lesson 04's own sweep (Pillow's default 4:2:0); one decode pass, whose time the deck does not show
    sweep = quality.quality_sweep([render(spec, i) for i in range(spec.n)], qualities, repeats=1)
    kb, db = [p.bytes / 1e3 for p in sweep], [p.psnr for p in sweep]
    raw_kb = 3 * spec.width * spec.height / 1e3
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.plot(qualities, kb, "o-", color=plotting.COLORS["read"], label="file size")
    ax.set_xlabel("JPEG quality (Pillow, 4:2:0 chroma at every quality)")
    ax.set_ylabel("mean file size (KB)")
    ax.set_title(f"640x480: {kb[qualities.index(90)]:.0f} KB at quality 90, {kb[-1]:.0f} KB at 100, raw uint8 "
                 f"{raw_kb:.0f} KB", loc="left", fontsize=10)
    right = ax.twinx()
    right.plot(qualities, db, "s--", color=plotting.COLORS["copy"], label="PSNR")
    right.axhline(40, color="#999999", lw=0.8, ls=":")
    right.set_ylabel("PSNR vs original (dB)")
    right.grid(False)
    right.spines["right"].set_visible(True)
    lines = ax.get_lines()[:1] + right.get_lines()[:1]
    ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left")
    return fig


def lesson06_grouped():
    """Distinct classes per batch of 300: full vs grouped shuffles, data stored in class order or shuffled."""
    from gpufeed.course.lesson06.shuffles import plot_grouped

    labels = torch.arange(1000).repeat_interleave(300)  # 1000 classes x 300 samples, in class order
    return plot_grouped(labels, batch=300, groups=[256, 1024, 4096, 16384, 65536])


def lesson07_workers():
    """Simulated images/s against the number of workers, with the compute bound (lesson 01's model)."""
    costs = Costs()
    workers = list(range(1, 9))
    bound = 32 * 1000.0 / costs.compute_ms
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for name, label, color in (("CPU prefetch", "workers load 2 batches ahead, pinned", plotting.COLORS["decode"]),
                               ("GPU prefetch", "... and the copy on a side stream (lesson 08)", plotting.COLORS["copy"])):
        rates = [simulate(preset(name, workers=w), n_batches=24).images_per_s for w in workers]
        ax.plot(workers, rates, "o-", color=color, label=label)
    ax.axhline(bound, color=plotting.COLORS["compute"], ls="--", label="compute bound (GPU step only)")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("images/s (simulated)")
    ax.set_ylim(0, bound * 1.15)
    ax.legend(loc="lower right")
    ax.set_title("more workers help until another stage is the slowest", loc="left", fontsize=10)
    ax.annotate(SIMULATED, xy=(0, 0), xycoords=("axes fraction", ax.xaxis.label), xytext=(0, -6),
                textcoords="offset points", va="top", fontsize=8, color="#555555")
    return fig


def lesson08_overlap():
    """Copy engine and GPU rows without and with a GPU prefetch, a copy about as long as the step."""
    costs = Costs(compute_ms=8.0, copy_pinned_ms=6.0, decode_ms=0.5)  # as in lesson 08, section 1
    runs = {name: simulate(preset(name, costs=costs), n_batches=16) for name in ("CPU prefetch", "GPU prefetch")}
    fig, axes = plt.subplots(2, 1, figsize=(10, 3.0), sharex=True)
    for ax, (name, r) in zip(axes, runs.items()):
        shown = [i for i in r.intervals if i.resource in ("copy engine", "GPU")]
        gantt(shown, rows=["copy engine", "GPU"], ax=ax, until=80, legend=ax is axes[0],
              title=f"{name}: {r.images_per_s:,.0f} images/s, GPU busy {r.utilisation()['GPU']:.0%}",
              note="simulated: copy 6 ms, step 8 ms" if ax is axes[1] else "")
    axes[0].set_xlabel("")
    fig.tight_layout()
    return fig


def lesson09_trap():
    """The same 8 images: as stored, with one random draw for the batch, and with a draw per sample.

    A torchvision transform called on a batch draws its parameters once for all of it; the middle
    row repeats one sample's draw across the batch, which is that behaviour, without importing
    ``torchvision.transforms.v2`` (seconds on a busy machine). Lesson 09 shows it with v2 itself.
    """
    import dataclasses

    from gpufeed.course.lesson04.quality import to_tensor
    from gpufeed.data.augment import augment, draw_params
    from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD
    from gpufeed.measure.synth import SynthSpec, render

    spec = SynthSpec(n=8, width=224, height=168, classes=8, seed=3)
    x = torch.stack([to_tensor(render(spec, i)) for i in range(spec.n)])  # uint8 [8, 3, 168, 224]
    kw = {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4}
    per_sample = draw_params(len(x), tuple(x.shape[-2:]), (112, 112), **kw, generator=torch.Generator().manual_seed(1))
    one = draw_params(1, tuple(x.shape[-2:]), (112, 112), **kw, generator=torch.Generator().manual_seed(4))
    shared = dataclasses.replace(one, **{f.name: getattr(one, f.name).expand(len(x), *getattr(one, f.name).shape[1:])
                                         for f in dataclasses.fields(one) if isinstance(getattr(one, f.name), torch.Tensor)})
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)

    def shown(images: torch.Tensor) -> torch.Tensor:  # normalised float [N, 3, h, w] -> [N, h, w, 3] in [0, 1]
        return (images * std + mean).clamp(0, 1).permute(0, 2, 3, 1)

    rows = {"stored": x.permute(0, 2, 3, 1), "one draw\nfor the batch\n(v2 on a batch)": shown(augment(x, shared)),
            "a draw per\nsample\n(gpufeed.data.augment)": shown(augment(x, per_sample))}
    fig, axes = plt.subplots(3, 8, figsize=(10, 4.0))
    for r, (label, images) in enumerate(rows.items()):
        for c in range(8):
            axes[r, c].imshow(images[c])
            axes[r, c].set_xticks([]), axes[r, c].set_yticks([]), axes[r, c].grid(False)
            axes[r, c].spines[:].set_visible(False)
        axes[r, 0].set_ylabel(label, fontsize=9, rotation=0, ha="right", va="center")
    fig.suptitle("a random transform called on a batch: every image gets the same crop, flip and colour", fontsize=10)
    fig.tight_layout()
    return fig


def lesson11_efficiency():
    """Loader efficiency of the five presets: images/s with the loader / images/s of compute alone."""
    costs = Costs()
    runs = {name: simulate(preset(name), n_batches=24) for name in PRESETS}
    compute_only = 32 * 1000.0 / costs.compute_ms  # data already on the GPU: the step alone
    ms = [Measurement(name, [r.ms_per_batch / 1000], items=32) for name, r in runs.items()]
    ms.append(Measurement("data already on the GPU", [costs.compute_ms / 1000], items=32))
    fig, ax = plotting.bars(ms, baseline="naive", title="the ladder: each technique's gain")
    for k, m in enumerate(ms):
        ax.text(m.items_per_s, k, f"  efficiency {m.items_per_s / compute_only:.0%}", va="center", fontsize=8)
    ax.set_xlim(0, compute_only * 1.35)
    ax.set_xlabel(f"images/s ({SIMULATED})")
    return fig


def lesson12_shards():
    """Which rank gets which sample: FastLoader(rank, world_size) over 24 samples, two epochs (lesson 12's plot)."""
    from gpufeed.course.lesson12.shards import plot_shards

    n, world, batch = 24, 3, 4
    fig, (ax,) = plot_shards(n, world, 2, kinds=("fast",), batch_size=batch, figsize=(10, 2.2), titles={"fast": ""})
    ax.set_title(f"FastLoader(data, {batch}, rank=r, world_size={world}, seed=0): disjoint, new each epoch",
                 loc="left", fontsize=10)
    return fig


def measured(path: Path) -> Callable:
    """A bar chart of a committed results file, captioned with the machine it was measured on."""

    def draw():
        ms, doc = load(path)
        note = f", {doc['dali']}" if doc.get("dali") else ""
        fig, ax = plotting.bars(ms, machine=doc.get("machine"), title=f"{path.parent.name}/{path.name}{note}")
        return fig

    draw.__doc__ = f"Committed measurements: {path.relative_to(ROOT)}."
    return draw


def registry(root: Path = ROOT) -> dict[str, Callable]:
    """Plot name (the PNG's stem) -> function that draws it. Measured plots follow ``results/``."""
    plots: dict[str, Callable] = {f.__name__.replace("_", "-"): f for f in (
        lesson01_timelines, lesson01_rates, lesson02_schedule, lesson03_wire, lesson04_quality,
        lesson06_grouped, lesson07_workers, lesson08_overlap, lesson09_trap, lesson11_efficiency,
        lesson12_shards)}
    for lesson in MEASURED:
        for path in sorted((root / "results").glob(f"*/{lesson}.json")):
            plots[f"{lesson}-{path.parent.name}"] = measured(path)
    return plots


def render(names: list[str] | None = None, out: Path = OUT) -> list[Path]:
    """Draws the named plots (default: all) into ``out`` as PNG; returns the paths written."""
    plots = registry()
    unknown = sorted(set(names or []) - set(plots))
    if unknown:
        raise SystemExit(f"deck_plots: no plot named {', '.join(unknown)}; --list shows the names")
    plotting.use_style()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(plots):
        fig = plots[name]()
        path = out / f"{name}.png"
        # No "Software" entry: the PNG's bytes then do not change with matplotlib's version string.
        fig.savefig(path, dpi=150, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="plots to draw (default: all)")
    parser.add_argument("--list", action="store_true", help="print the plot names and exit")
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the PNGs (default: {OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(registry()))
        return 0
    start = time.perf_counter()
    for path in render(args.names, args.out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    print(f"done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
