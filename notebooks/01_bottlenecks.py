# %% [markdown]
# # 01 · Bottlenecks
#
# **What you will learn:** why a training loop runs at the rate of its slowest stage only when
# its stages overlap; the five classic timelines (naive, pinned memory, parallel workers, CPU
# prefetch, GPU prefetch), drawn by a small pipeline simulator you can steer with sliders; and a
# real, measured trace of a naive loop in the same chart, with the simulator's prediction of it.
#
# **Time:** about 20 minutes (2 in quick mode). **Prerequisites:** [00 · Setup](00_setup.ipynb).

# %%
import gpufeed

S = gpufeed.setup("01")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The idea
#
# Before a training step can use a batch, every image in it climbs the same stairs:
#
# ```
#  file --read--> bytes --decode--> image --collate--> batch --pin--> pinned batch --copy--> GPU --compute
#  |<------ a worker (CPU core), per sample ------->|  worker      pin thread        copy engine    GPU
# ```
#
# Each stage runs on a **resource**: worker processes (CPU cores), the DataLoader's pin-memory
# thread, the GPU's copy engine, the GPU's compute units. If the stages run one after the other,
# a batch costs the *sum* of the stages. If they overlap, like the stations of an assembly line,
# the loop runs at the rate of the *slowest resource* and everything else hides behind it. This
# lesson is that one sentence: find the slowest resource, then overlap the rest behind it.

# %% [markdown]
# ## 2. A pipeline simulator, by hand first
#
# `gpufeed.course.simulator` is a small discrete-event model of that path. Its inputs are the cost of each
# stage in milliseconds (`Costs`) and the loop's shape (`Pipeline`: batch size, workers, prefetch
# depth, pinning, GPU prefetch); it returns every stage's start and end. The default costs are
# illustrative, order-of-magnitude figures for 32 images of 224x224 (their docstring says where
# each comes from); section 5 measures the real ones on this machine.

# %%
import matplotlib.pyplot as plt

from gpufeed.course.simulator import Costs, Pipeline, simulate
from gpufeed.course.timeline import gantt

costs = Costs()
naive = Pipeline(batch_size=32, workers=1, prefetch=0, pin=False, gpu_prefetch=False, costs=costs)
result = simulate(naive, n_batches=12)
print(costs)
result.intervals[:3]

# %% [markdown]
# With one worker and nothing loaded ahead, nothing overlaps, so one batch costs the sum of its
# stages. Add them up by hand and compare with the simulator:

# %%
by_hand = naive.batch_size * (costs.read_ms + costs.decode_ms) + costs.collate_ms + costs.copy_pageable_ms + costs.compute_ms
print(f"by hand: {by_hand:.1f} ms per batch; simulated: {result.ms_per_batch:.1f} ms, "
      f"that is {result.images_per_s:.0f} images/s")
fig, ax = gantt(result.intervals, until=3 * result.ms_per_batch, title="naive: one core reads, then copies, then the GPU computes",
                note="simulated with the default costs, not measured")
plt.show()
gpu = result.utilisation()["GPU"]
print(f"The GPU computes {gpu:.0%} of the time and waits {1 - gpu:.0%}: decoding on one core is the long bar.")

# %% [markdown]
# ## 3. The five classic timelines
#
# Each preset adds one change to the one before it:
#
# | preset | what changes | what it buys | in PyTorch |
# |---|---|---|---|
# | naive | one core loads, then a copy from pageable memory, then compute | nothing overlaps | `DataLoader(num_workers=0)` |
# | pinned | the batch is pinned (page-locked) on the pin thread | a faster copy, from pinned memory | `pin_memory=True` |
# | workers | 4 workers decode the batch's images in parallel, when the loop asks for it | loading is 4x shorter | no DataLoader setting: its workers always load ahead; a thread pool in the loop (section 5 measures one) |
# | CPU prefetch | workers load 2 batches ahead of the loop | loading hides behind copy and compute | `num_workers=4, pin_memory=True` |
# | GPU prefetch | the next batch is copied on a side stream during this compute | the copy hides behind compute | the same, through lesson 08's `CudaPrefetcher` |
#
# A DataLoader worker builds whole batches, `prefetch_factor` (2) each, so 4 workers keep 8 in
# flight where the simulator shares each batch among its workers; once at least as many batches as
# workers are in flight, the two reach the same steady rate.

# %%
from gpufeed.course.simulator import PRESETS, preset, slowest_stage

runs = {name: simulate(preset(name), n_batches=24) for name in PRESETS}
heights = [len({i.resource for i in r.intervals}) + 1.2 for r in runs.values()]
fig, axes = plt.subplots(len(runs), 1, figsize=(9, 0.4 * sum(heights)), sharex=True,
                         gridspec_kw={"height_ratios": heights})
for ax, (name, r) in zip(axes, runs.items()):
    last = ax is axes[-1]
    gantt(r.intervals, ax=ax, until=3 * runs["naive"].ms_per_batch, legend=ax is axes[0],
          title=f"{name}: {r.images_per_s:,.0f} images/s", note="simulated with the default costs" if last else "")
    if not last:
        ax.set_xlabel("")
fig.tight_layout()
plt.show()

# %% [markdown]
# The steady-state rates side by side, each with its ratio to the naive loop:

# %%
from gpufeed.measure import plotting
from gpufeed.measure.harness import Measurement

sim_ms = [Measurement(name, [r.ms_per_batch / 1000], items=r.pipeline.batch_size) for name, r in runs.items()]
fig, ax = plotting.bars(sim_ms, baseline="naive", title="simulated steady state, default costs")
ax.set_xlabel("images/s (simulated)")
plt.show()
from gpufeed.course.prose import say
from gpufeed.measure.wording import times

names = list(runs)
for before, after in zip(names, names[1:]):
    a, b = runs[before], runs[after]
    print(f"{after:>12}: {b.images_per_s:6,.0f} images/s, {times(b.images_per_s / a.images_per_s, than=before)}; "
          f"GPU busy {b.utilisation()['GPU']:.0%}")

# %%
pinned_gain = runs["pinned"].images_per_s / runs["naive"].images_per_s
copy_share = costs.copy_pageable_ms / runs["naive"].ms_per_batch
saved = costs.copy_pageable_ms - costs.copy_pinned_ms
stage, ms = slowest_stage(runs["GPU prefetch"].pipeline)
best = runs["GPU prefetch"]
say(f"Pinning alone makes the loop only **{times(pinned_gain)}**: the copy is {copy_share:.1%} of a serial batch "
    f"({costs.copy_pageable_ms} of {runs['naive'].ms_per_batch:.0f} ms), so making it {saved:.1f} ms faster "
    f"cannot change much, and the pin adds {costs.pin_ms} ms back. What pinning buys is a shorter copy that "
    "does not hold the thread issuing it (a pageable copy holds it until the driver has staged all of it); "
    "exercise 2 shows when that matters to GPU prefetch.\n\n"
    f"Workers and prefetch give the big steps. With GPU prefetch the slowest stage is {stage} "
    f"({ms:.1f} ms per batch) and the loop reaches {ms / best.ms_per_batch:.0%} of its "
    "rate: the GPU is the bottleneck, which is where you want it.")

# %% [markdown]
# ## 4. Explore: change the costs and the knobs
#
# The chart below is the GPU prefetch preset; the sliders under it redraw the chart and the
# predicted images/s (in JupyterLab or Colab; a notebook run without a browser shows only this
# first chart). Things to try: set `compute` to 5 ms (a small model, or a fast GPU): what is the
# bottleneck now, and how many workers does the GPU need? Set `copy pinned` to 40 ms (big
# float32 images): when does GPU prefetch start to matter?

# %%
from gpufeed.course.lesson01.explorer import explorer, show

print(show(preset("GPU prefetch")))
explorer(preset("GPU prefetch"))

# %% [markdown]
# ## 5. Measured, not only simulated
#
# Now real loops over JPEGs generated from the course's photos: read the bytes, decode with
# Pillow, collate into a batch, copy to the device, one training step of a small CNN (ending with
# `loss.item()`). `gpufeed.course.instrument.naive_loop` wraps each stage in a timer and records the
# same intervals as the simulator, so a real loop is drawn in the same chart. Two loops, on one
# model, timed in turns (naive, threads, naive, threads, ...: a burst of other work then slows both):
# the naive loop, whose own thread loads (the row `worker 1`), and the "workers" preset for real, a
# pool of threads that read and decode a batch's images when the loop asks for it (Pillow lets go
# of Python's lock while it decodes). Each run's first batch pays for warm-up (lesson 02) and is
# left out. The collate is `gpufeed.data.jpeg.collate_images`: the decoders hand back views of
# interleaved pixels, which `torch.stack` would transpose one by one (lesson 02 measures it).

# %%
from gpufeed import config
from gpufeed.course.instrument import list_images
from gpufeed.course.lesson01 import reading
from gpufeed.course.lesson01.loops import naive_and_workers
from gpufeed.measure.synth import synth_folder
from gpufeed.measure.verdict import compare

B = config.pick(quick=8, full=32, site=32)
batches, rounds = config.pick(quick=2, full=8, site=4), config.pick(quick=1, full=20, site=20)  # per arm and round
threads = min(4, S.machine["cores"])  # the preset has 4 workers; no more than this machine's cores
n = B * (batches + 1)
folder = synth_folder(config.cache_dir() / f"lesson01-224x224-q90-n{n}", n=n, size=(224, 224), quality=90).path
files, labels = list_images(folder)
loops = naive_and_workers(files, labels, batch_size=B, batches=batches, rounds=rounds, workers=threads, device=S.device)
naive_ms, workers_ms = loops.measurements()  # seconds per batch, one sample per round
print(f"{naive_ms}\n{workers_ms}")

# %%
means = loops.stage_ms("naive")  # medians over the timed batches, as the loop's time per batch is
total = sum(means.values())
for stage, ms in means.items():
    print(f"{stage:>8}: {ms:8.2f} ms per batch ({ms / total:5.1%}), naive loop, median")
fig, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True, layout="constrained")  # room for the legend
for ax, rec, name in zip(axes, (loops.naive[-1], loops.workers[-1]), ("naive", f"{threads} loading threads")):
    gantt(rec.intervals, ax=ax, until=rec.step_end[min(3, batches)], legend=ax is axes[0],
          title=f"{name}, measured: batches of {B} 224x224 JPEGs")
plotting.caption(fig, S.machine)
plt.show()
say(reading.workers_gain(loops.verdict(), compare(loops.decode_ms("workers"), loops.decode_ms("naive"), paired=True),
                         threads))
if not S.cuda:
    say(f"No GPU here: the *copy engine* row times `.to(\"cpu\")` on a tensor already on the CPU, which "
        f"returns it unchanged ({means['copy']:.3f} ms per batch: the call's overhead, no bytes moved).")

# %% [markdown]
# Feed the naive loop's stage costs into the simulator (read and decode become per-sample costs) and
# compare its predictions with both loops. For a serial loop the model just adds the stages, so
# what it misses is the time *between* them: Python, the timer itself, anything unrecorded.

# %%
from gpufeed.course.simulator import Costs

measured_costs = Costs.from_stage_means(means, batch_size=B)
predicted = simulate(Pipeline(batch_size=B, costs=measured_costs), n_batches=20)
predicted_threads = simulate(preset("workers", costs=measured_costs, batch_size=B, workers=threads, pin=False))
ratio = predicted.images_per_s / naive_ms.items_per_s
say(f"The naive loop's recorded stages cover {loops.coverage('naive'):.1%} of a batch's time (median); the rest is "
    "the gaps between them. " + reading.prediction(predicted.images_per_s, naive_ms, "the naive loop") + "\n\n"
    + reading.prediction(predicted_threads.images_per_s, workers_ms, f"the loop with {threads} loading threads"))

# %% [markdown]
# With the measured costs, the simulator can answer *what if*: what would the other presets give
# on this machine? The loop copies from pageable memory and never pins, so the pin and the pinned
# copy are not measured here. Lesson 00 measured them on a GPU (pageable, pinned and pin+copy GB/s):
# when its results are saved on this machine, the cell scales the measured pageable copy by those
# rates. Otherwise the simulator keeps its defaults' ratios (a pin costs 1/3 of a pageable copy, a
# pinned copy 0.27): assumed, not measured, and with them pinning can never lose.

# %%
from gpufeed.measure import harness, results

own00 = results.machine_dir() / "lesson00.json"  # lesson 00's results on this machine, if it ran here
h2d = [m for m in harness.load(own00)[0] if m.name.startswith("H2D")] if own00.is_file() else []
largest = {}  # source -> the measurement at the largest size
for m in h2d:
    src = m.params.get("source")
    if src and (src not in largest or m.params["nbytes"] > largest[src].params["nbytes"]):
        largest[src] = m
if {"pageable", "pinned", "pin+copy"} <= set(largest):
    gbps = {src: m.gb_per_s for src, m in largest.items()}
    copy_ms = means["copy"]  # ms per batch from pageable memory, measured above
    pinned_copy_ms = copy_ms * gbps["pageable"] / gbps["pinned"]  # same bytes at the pinned rate
    pin_ms = max(copy_ms * gbps["pageable"] / gbps["pin+copy"] - pinned_copy_ms, 0.0)  # pin+copy minus the copy
    measured_costs = Costs.from_stage_means({**means, "pin": pin_ms, "copy_pinned": pinned_copy_ms}, batch_size=B)
    print(f"pin and pinned copy from lesson 00's GB/s on this GPU (pageable {gbps['pageable']:.1f}, "
          f"pinned {gbps['pinned']:.1f}, pin+copy {gbps['pin+copy']:.1f}): pin {pin_ms:.2f} ms, "
          f"pinned copy {pinned_copy_ms:.2f} ms per batch")
else:
    print("pin and pinned copy: the simulator's assumed ratios (no lesson 00 GPU measurement on this machine), "
          "so the 'pinned' preset cannot come out slower here.")
what_if = {name: simulate(preset(name, costs=measured_costs, batch_size=B)).images_per_s for name in PRESETS}
for name, rate in what_if.items():
    vs = "the baseline" if name == "naive" else times(rate / what_if["naive"], than="naive")
    print(f"{name:>12}: {rate:8,.0f} images/s predicted ({vs})")
if not S.cuda:
    say(f"Careful: the two prefetch rows overlap loading with the model's step, which here run on the same "
        f"{S.machine['cores']} cores, while the simulator gives the step a resource of its own: upper bounds here.")

# %% [markdown]
# ## 6. Saved, and the reference from a GPU
#
# The measurement goes to this machine's results folder. On a machine with CUDA this cell also
# writes the reference that learners without a GPU see below.

# %%
from gpufeed.measure import results

naive_predicted = Measurement("naive loop, simulated", [predicted.ms_per_batch / 1000], items=B)
saved = results.save_lesson("lesson01", [naive_ms, workers_ms, naive_predicted], stage_ms=means,
                            predicted_over_measured=ratio, what_if_images_per_s=what_if)

# %%
ref = None if S.cuda else results.reference("lesson01")
if S.cuda:
    print(f"Measured above on {S.machine['gpu']}: this run is the GPU reference.")
elif ref is None:
    theirs = results.no_reference("lesson01")  # what a GPU consumes, as others published it
    say(reading.keeps_up(loops.loading_images_per_s("naive"), [(f.figure, f.label()) for f in theirs])
        + " Our JPEGs are already 224x224, while ImageNet's recipe decodes larger photos and crops them: "
        "a real loader on this core would likely be slower still (not measured here).")
else:
    ref_ms, doc = ref
    gpu_means = doc["stage_ms"]
    print(f"On {doc['machine']['gpu']}, the naive loop ran at {ref_ms[0].items * 1000 / sum(gpu_means.values()):,.0f} images/s "
          f"(predicted / measured = {doc['predicted_over_measured']:.2f}); per batch of {ref_ms[0].items:.0f}:")
    for stage, ms in gpu_means.items():
        print(f"{stage:>8}: {ms:8.2f} ms ({ms / sum(gpu_means.values()):5.1%})")

# %% [markdown]
# ## Key takeaways
#
# * A loop whose stages run one after another costs the sum of its stages; a loop whose stages
#   overlap runs at the rate of its slowest resource. Overlap is the whole game.
# * Parallel workers shorten the loading (where the cores are free: section 5 measured it),
#   prefetching hides it behind compute, and GPU prefetch hides the copy. Pinning alone barely helps
#   a serial loop; it makes the copy shorter and frees the thread that issues it.
# * Measure the stages, then reason with a model: the simulator, fed this machine's costs, says
#   which change can pay off before you write it. Lesson 02 gives the instruments.
#
# ## Exercises
#
# 1. With a GPU that computes a batch in 5 ms (`compute_ms=5.0`), how many workers does the GPU
#    prefetch preset need before compute is the slowest stage again? Work it out from the costs,
#    then check with the cell below.
# 2. In the explorer, turn GPU prefetch on but pinning off. Does the copy still hide behind
#    compute? (Hint: a copy from pageable memory holds the thread that issues it: which thread is
#    that in the simulator, and in a prefetcher that copies on the loop's own thread?)
# 3. Time `gpufeed.data.jpeg.decode_torchvision` against Pillow's decoder on one batch of section 5's
#    files, in turns, and feed its cost to the simulator. How much does the predicted rate of the
#    "workers" preset change? And of "CPU prefetch"?
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 1: fill in your answer (a number of workers).
my_answer = None
answer = next(w for w in range(1, 257) if slowest_stage(preset("GPU prefetch", compute_ms=5.0, workers=w))[0] == "compute")
if my_answer is not None:
    loading = naive.batch_size * (costs.read_ms + costs.decode_ms) + costs.collate_ms
    print("right!" if my_answer == answer else f"not quite: loading costs {loading:.0f} ms per batch; divide it among workers")


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: how many workers a 5 ms GPU needs
# Why: in a fully overlapped pipeline compute is the slowest stage when no other resource spends
# more time per batch than the GPU's 5 ms. The workers share the loading: B x (read + decode) per sample, plus one collate, divided by W. Pin
# (2 ms) and pinned copy (1.6 ms) are already under 5 ms, so the only question is the smallest W
# with loading / W <= 5 ms, that is W = ceil(loading / 5). Then let the simulator confirm it: one
# worker fewer and compute is no longer the slowest stage.
import math

fast_gpu = preset("GPU prefetch", compute_ms=5.0)
loading = fast_gpu.batch_size * (costs.read_ms + costs.decode_ms) + costs.collate_ms
my_answer = math.ceil(loading / fast_gpu.costs.compute_ms)
print("self-check:", "right!" if my_answer == answer else "not quite")
for w in (my_answer - 1, my_answer):
    r = simulate(fast_gpu.but(workers=w), n_batches=24)
    print(f"{w} workers: slowest stage {slowest_stage(r.pipeline)[0]}, {r.images_per_s:,.0f} images/s, "
          f"GPU busy {r.utilisation()['GPU']:.0%}")
say(f"Loading costs {loading:.0f} ms per batch, so it takes **{my_answer} workers** to bring it under "
    f"{fast_gpu.costs.compute_ms:.0f} ms: a fast GPU needs many cores (or less work per image, lessons 04-06).")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: GPU prefetch without pinned memory
# Why: a copy from pageable memory holds the thread that issues it (the driver copies it through a
# pinned staging buffer of its own, and returns once the last of it is staged). In the simulator's GPU
# prefetch that thread is the prefetch thread, not the loop: it is held, the loop is not, so as long
# as the slower copy stays shorter than a step, it still hides behind compute. A prefetcher that
# issues the copy on the loop's own thread (the classic apex one, lesson 08) would be held instead:
# the step's launch waits for each copy, and copy and compute are serial again. Below, the
# simulator's run, then the same costs with a pageable copy longer than a step.
import dataclasses

with_pin = simulate(preset("GPU prefetch"), n_batches=24)
without = simulate(preset("GPU prefetch", pin=False), n_batches=24)
fig, ax = gantt(without.intervals, until=3 * with_pin.ms_per_batch, note="simulated with the default costs",
                title="GPU prefetch, pinning off: the prefetch thread issues each pageable copy")
plt.show()
slow_copy = costs.compute_ms * 1.5  # ms: a pageable copy longer than a step
long_pin, long_without = (simulate(preset("GPU prefetch", pin=pin, costs=dataclasses.replace(
    costs, copy_pageable_ms=slow_copy, copy_pinned_ms=slow_copy * costs.copy_pinned_ms / costs.copy_pageable_ms)),
    n_batches=24) for pin in (True, False))
extra = without.ms_per_batch - with_pin.ms_per_batch
say(f"Pinned: {with_pin.ms_per_batch:.1f} ms per batch, GPU busy {with_pin.utilisation()['GPU']:.0%}. "
    f"Pageable: **{without.ms_per_batch:.1f} ms**, GPU busy {without.utilisation()['GPU']:.0%}: "
    + (f"the copy still hides. The pageable copy ({costs.copy_pageable_ms} ms) holds the prefetch thread, not the "
       f"loop, and it is shorter than a step ({costs.compute_ms} ms). " if abs(extra) < 0.01 * with_pin.ms_per_batch else
       f"each batch pays {extra:.1f} ms more: the slowest stage is now {slowest_stage(without.pipeline)[0]}. ")
    + f"With a pageable copy of {slow_copy:.0f} ms, longer than a step, pinned gives {long_pin.ms_per_batch:.1f} ms "
    f"per batch and pageable {long_without.ms_per_batch:.1f} ms: what pinning buys a prefetch thread is the shorter "
    "copy. On the loop's own thread, the pageable copy would hold the step's launch as well (lesson 08 measures it).")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: the "workers" prediction with another decoder
# Why: the simulator only knows costs, so swapping the decoder changes one number: decode ms per
# sample. Time both decoders on the same bytes in turns (a burst of other work then slows both), and
# scale section 5's decode cost by the ratio of their medians; the other stages stay section 5's.
# The "workers" preset does not prefetch: the loop waits for each batch's loading (shared by 4
# workers), then copies and computes, so every millisecond of decoding saved shows. "CPU prefetch"
# overlaps loading with compute: there only the slowest stage counts, so a faster decoder helps
# only while loading is that stage. Both presets, both decoders:
from gpufeed.data import jpeg
from gpufeed.measure.verdict import in_turns

blobs = [f.read_bytes() for f in files[:B]]
dec = in_turns(lambda: [jpeg.decode_torchvision(b) for b in blobs], lambda: [jpeg.decode_pil(b) for b in blobs],
               names=("torchvision", "Pillow"), repeats=config.pick(quick=3, full=10, site=8))
costs_tv = dataclasses.replace(measured_costs, decode_ms=measured_costs.decode_ms * dec.a.median / dec.b.median)
rates = {}
for name in ("workers", "CPU prefetch"):
    for decoder, c in (("Pillow", measured_costs), ("torchvision", costs_tv)):
        p = preset(name, costs=c, batch_size=B)
        rates[name, decoder] = simulate(p).images_per_s
        print(f"{name:>12}, {decoder:>11} ({c.decode_ms:5.2f} ms per image): {rates[name, decoder]:7,.0f} "
              f"images/s predicted; slowest stage {slowest_stage(p)[0]}")
say(reading.decoders(dec.verdict, {name: rates[name, "torchvision"] / rates[name, "Pillow"]
                                   for name in ("workers", "CPU prefetch")}, slowest_stage(p)[0]))

# %% [markdown]
# ## Further reading
#
# * [Performance Tuning Guide](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html) (Szymon Migacz, PyTorch tutorials): the checklist behind the five timelines: workers, pinned memory, overlap, fewer syncs.
# * [FFCV: Accelerating Training by Removing Data Bottlenecks](https://arxiv.org/abs/2306.12517) (Leclerc, Ilyas, Engstrom, Park, Salman, Madry; CVPR 2023): a whole paper on the lesson's thesis: the slowest stage sets the rate, and it is often the data.
# * [`torch.utils.data`](https://docs.pytorch.org/docs/stable/data.html) (PyTorch docs): what `num_workers`, `pin_memory` and `prefetch_factor` do, which the simulator's presets stand for.
# * [ResNet50 v1.5 For PyTorch](https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Classification/ConvNets/resnet50v1.5/README.md) (NVIDIA DeepLearningExamples): how many images/s a GPU trains ResNet-50 at: the rate a loader has to keep up with.
