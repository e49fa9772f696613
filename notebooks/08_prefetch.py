# %% [markdown]
# # 08 · GPU prefetching
#
# **What you will learn:** what CUDA streams are and how a copy on a side stream overlaps compute;
# how a GPU prefetcher works (`wait_stream`, `record_stream`, pinned memory) and converts images on
# the GPU; what goes wrong without each of its lines, shown on a simulator of CUDA's ordering rules;
# why a prefetcher's host work belongs on a thread of its own; a thread prefetcher for machines
# without CUDA; and how to time a prefetcher fairly and read a profiler trace for the reason.
#
# **Time:** about 25 minutes (1 minute in quick mode). **Prerequisites:** [07 · DataLoader knobs
# and moving structures](07_dataloader.ipynb), [02 · Profiling and benchmarking](02_profiling.ipynb).

# %%
import gpufeed

S = gpufeed.setup("08")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. CUDA streams in a few sentences
#
# A **stream** is a queue of GPU work that runs in order. Work on *different* streams may run at
# the same time: a GPU has copy engines apart from its compute units, so a host-to-device copy on
# one stream can proceed while kernels run on another. Everything you launch goes to the
# *current* stream (the default one unless you say otherwise). Three tools keep two streams honest:
#
# * `torch.cuda.stream(s)`: a context in which launches go to stream `s`;
# * `current.wait_stream(s)` (or `wait_event(e)`): later work on `current` waits, *on the GPU*, for
#   what was queued on `s`: the CPU does not block;
# * `tensor.record_stream(current)`: memory allocated on `s` and used on `current` must not be
#   handed out again by PyTorch's caching allocator until `current` is done with it.
#
# A copy overlaps compute only from **pinned** memory (lesson 07). Lesson 01's simulator draws the
# idea: without a GPU prefetch the copy of batch `i + 1` waits for step `i`; with it, the copy runs
# during the step.

# %%
import textwrap

import matplotlib.pyplot as plt

from gpufeed.course.simulator import Costs, preset, simulate
from gpufeed.course.timeline import gantt

costs = Costs(compute_ms=8.0, copy_pinned_ms=6.0, decode_ms=0.5)  # a copy about as long as the step
runs = {name: simulate(preset(name, costs=costs), n_batches=16) for name in ("CPU prefetch", "GPU prefetch")}
fig, axes = plt.subplots(2, 1, figsize=(9, 3.2), sharex=True)
for ax, (name, r) in zip(axes, runs.items()):
    shown = [i for i in r.intervals if i.resource in ("copy engine", "GPU")]
    gantt(shown, rows=["copy engine", "GPU"], ax=ax, until=80, legend=ax is axes[0],
          title=f"{name}: {r.images_per_s:,.0f} images/s", note="simulated" if ax is axes[1] else "")
axes[0].set_xlabel("")
fig.tight_layout()
plt.show()
gain = runs["GPU prefetch"].images_per_s / runs["CPU prefetch"].images_per_s
print(f"Simulated: overlapping the copy with the step gives {gain:.2f}x; the GPU is busy "
      f"{runs['GPU prefetch'].utilisation()['GPU']:.0%} of the time instead of {runs['CPU prefetch'].utilisation()['GPU']:.0%}.")

# %% [markdown]
# The same in CUDA's own terms. The course has a **simulator of CUDA's ordering rules**
# (`gpufeed.simcuda`): inside `with simulated_cuda():` tensors on `"cuda"` live in CPU
# memory, every kernel and copy is queued on its stream and runs only when the program's
# synchronisation forces it, and memory nothing has written yet reads as poison (NaN). It keeps
# CUDA's *rules*, not its *speed*: it draws each step on a made-up clock (copies at 25 GB/s, a
# model step of 1 ms). Below, four batches of 24 MB go through the library's `CudaPrefetcher`
# (section 2), then are copied on the default stream before each step.

# %%
from gpufeed.course.lesson08 import hazards

fig, axes = plt.subplots(2, 1, figsize=(9, 3.2), sharex=True)
per_batch = {}
for ax, prefetched in zip(axes, (False, True)):
    name = "CudaPrefetcher (side stream)" if prefetched else "copy on the default stream"
    intervals, per_batch[name] = hazards.overlap(n=4, batch_mb=24, step_ms=1.0, prefetch=prefetched)
    gantt(intervals, ax=ax, legend=ax is axes[0], title=f"{name}: {per_batch[name]:.2f} simulated ms per batch",
          note=hazards.SIMULATED if ax is axes[1] else "")
axes[0].set_xlabel("")
fig.tight_layout()
plt.show()
(plain_name, plain_ms), (side_name, side_ms) = per_batch.items()
print(f"On the simulator's made-up clock ({hazards.SIMULATED}): with the copies on a side stream a batch takes {side_ms:.2f} simulated ms "
      f"instead of {plain_ms:.2f} ({plain_ms / side_ms:.2f}x): each copy runs under the step before it.")

# %% [markdown]
# ## 2. A GPU prefetcher, by hand
#
# The classic one (from NVIDIA's apex ImageNet example) keeps one batch ahead: it issues the copy of
# the next batch on a side stream, then hands over the current one. Before the consumer uses a
# batch, the current stream waits for its copy; `record_stream` protects its memory. The course
# keeps it as `gpufeed.course.lesson08.hazards.hand_prefetch` (two of its lines can be switched off, for
# section 3); here is its code.

# %%
import torch


import inspect

from gpufeed.course.lesson08.hazards import hand_prefetch

print(inspect.getsource(hand_prefetch))  # the whole prefetcher: about 15 lines of code

# %% [markdown]
# `hand_prefetch` does its host work in your loop, between two steps: after handing over a batch
# it asks the loader for the next one and issues its copy before your next step is launched. Most
# training loops read the loss every step (`loss.item()`, to log it), so the host waits for the GPU
# at the end of each step, and whatever it does before launching the next step is time the GPU
# sits idle. Section 5 measures what that costs.
#
# `gpufeed.data.prefetch.CudaPrefetcher(loader, device, dtype=None, mean=None, std=None, depth=1)` is
# the same idea, made general and moved off your thread: a **producer thread** with its own side
# stream asks the loader for each batch, pins it, issues the copy and the conversion, records an
# event after them and queues the batch; your loop only takes the next batch, makes its stream
# wait for that event (the GPU waits, not the host) and marks its tensors with `record_stream`.
# So use a batch on the stream current at `next()` (the deep dive below shows another stream). It
# takes batches of any structure (`gpufeed.data.movers`), raises a loader's exception in your
# loop, and keeps at most `depth + 2` converted batches in flight (`depth + 3` for a moment),
# besides those you keep: its thread makes batch `k` only once your stream is done with batch
# `k - depth - 2`, in fresh memory (FFCV reuses fixed slots). It converts on the side stream:
# `uint8` travels (4x fewer bytes than float32, lesson 03) and float is made on the GPU, by
# kernels that share it with your step's. The conversion is `gpufeed.data.transforms.normalize`,
# checked here against the textbook formula:

# %%
from gpufeed.data.prefetch import prepare
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize

MEAN, STD = IMAGENET_MEAN, IMAGENET_STD  # (0.485, 0.456, 0.406), (0.229, 0.224, 0.225): on the [0, 1] scale
images = torch.randint(0, 256, (8, 3, 64, 64), dtype=torch.uint8)
textbook = (images.double() / 255 - torch.tensor(MEAN).double().view(-1, 1, 1)) / torch.tensor(STD).double().view(-1, 1, 1)
for dtype in (torch.float32, torch.float16):
    err = (normalize(images, dtype, MEAN, STD).double() - textbook).abs().max().item()
    print(f"{str(dtype):>14}: largest difference from the formula {err:.1e}")
batch = prepare((images, torch.arange(8)), torch.float16, MEAN, STD)  # only 4-d uint8 tensors change
print([(tuple(t.shape), t.dtype) for t in batch])

# %% [markdown]
# Both prefetchers must give exactly what a plain loop gives. On a GPU this runs on it; without
# one, on the simulator, where a batch read before its copy ran would be NaN, and any pair of
# accesses that nothing orders raises `CudaRaceError`.

# %%
import contextlib

from gpufeed.simcuda import simulated_cuda
from gpufeed.data.prefetch import CudaPrefetcher

with contextlib.nullcontext() if S.cuda else simulated_cuda(seed=0) as sim:
    device = S.device if S.cuda else torch.device("cuda", 0)  # the simulated GPU
    data = [(torch.randint(0, 256, (16, 3, 64, 64), dtype=torch.uint8).pin_memory(), torch.arange(16) + i)
            for i in range(6)]
    plain = [(prepare(x.to(device), torch.float32, MEAN, STD), y.to(device)) for x, y in data]
    by_hand = [(prepare(x, torch.float32, MEAN, STD), y) for x, y in hand_prefetch(data, device)]
    ours = list(CudaPrefetcher(data, device, dtype=torch.float32, mean=MEAN, std=STD, depth=2))
    for got in (by_hand, ours):
        assert all(torch.allclose(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, plain))
where = f"on {torch.cuda.get_device_name()}" if S.cuda else "on the CUDA-ordering simulator (no GPU here)"
print(f"{where}: the hand-written and gpufeed prefetchers give the plain loop's batches, in order")

# %% [markdown]
# ### Deeper (optional): another stream, CUDA graphs, stopping

# %% [markdown] tags=["deeper"]
# A batch is ready on, and its memory kept for, the stream current when `next()` takes it. A loop
# that calls `next()` outside a `with torch.cuda.stream(s):` block and computes inside it must
# order the batch itself: `s.wait_stream(torch.cuda.current_stream())`, then `t.record_stream(s)`
# for each tensor, and `torch.cuda.current_stream().wait_stream(s)` before the next `next()`, so
# that the release the thread waits for follows `s`'s work (the memory bound). The prefetcher
# cannot see which stream you use; the simulator can: below, the same loop without and with
# those lines. **CUDA graphs**: while you capture one, the thread goes on allocating, pinning and
# polling events, which the default `capture_error_mode="global"` forbids from any thread:
# capture with `capture_error_mode="thread_local"`, or before `iter()`. **Stopping**: `break`,
# `close()` or leaving a `with` block returns within 0.25 s whatever the thread is doing: waiting
# for a free slot, it polls the release event and a stop flag rather than block behind a deep GPU
# queue.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from gpufeed.simcuda import CudaRaceError

for ordered in (False, True):
    try:
        with simulated_cuda(seed=0):
            s = torch.cuda.Stream()
            for x, y in CudaPrefetcher(data, "cuda", dtype=torch.float32):
                if ordered:
                    s.wait_stream(torch.cuda.current_stream())
                    for t in (x, y):
                        t.record_stream(s)
                with torch.cuda.stream(s):
                    loss = x.mean() + y.float().mean()  # the step, on s
                if ordered:
                    torch.cuda.current_stream().wait_stream(s)
        print(f"{'with' if ordered else 'without'} the three lines: no race reported")
    except CudaRaceError as e:  # the step's read, and the conversion's write it is not ordered after
        later, earlier = e.race.later, e.race.earlier
        print(f"{'with' if ordered else 'without'} the three lines: CudaRaceError ({e.race.kind}): the step's "
              f"{later.what} on {later.actor.name} may run before the conversion's {earlier.what} on {earlier.actor.name}")

# %% [markdown]
# ## 3. What each line prevents: three hazards, simulated
#
# Each line of `hand_prefetch` is there because CUDA's rules leave something unordered without
# it, and a short test on a real GPU usually runs in the lucky order anyway. The simulator
# reports the race whatever order it runs the queued work in (four orders below), and in some
# orders the race also gives a wrong batch. Batch `k` is filled with the number `k`, so what a batch
# holds says which batch it really was. The consumer does what a training loop does: it queues a
# step reading each batch, drops the batch, and looks at the results only at the end.
#
# * **no wait**: delete `current.wait_stream(stream)`. The step may read a batch before its copy
#   has run.
# * **no `record_stream`**: delete `t.record_stream(current)`. When the consumer drops a batch, the
#   caching allocator hands its memory to the side stream's next copy at once, since nothing told
#   it that the default stream still reads it.
# * **pinned buffer reused**: a loader that gathers each batch into one pinned buffer it keeps and
#   copies it with `non_blocking=True`, without waiting for the last copy out of it before
#   refilling it (`gpufeed.data.streams.BufferRing` waits on an event for exactly this).

# %%
from IPython.display import Markdown, display

SCHEDULES = {0: "as late as allowed", 1: "side stream ahead", 2: "default stream ahead", 3: "random paces"}
plays = {h: [hazards.play(h, seed) for seed in SCHEDULES] for h in ("correct", *hazards.HAZARDS)}


def shown(held):
    return " ".join("NaN" if v != v else f"{v:g}" for v in held)


def span(counts):
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"


rows = [f"| {h} | " + " | ".join(shown(p.held) for p in ps) + f" | {span([p.races for p in ps])} |"
        for h, ps in plays.items()]
header = "| batches 0-5 held, run: | " + " | ".join(SCHEDULES.values()) + " | races reported |"
display(Markdown("\n".join([header, "|---" * (len(SCHEDULES) + 2) + "|", *rows, "", f"*{hazards.SIMULATED}.*"])))

# %%
right = plays["correct"][0].held


def first_wrong(hazard):
    """The first order in which the hazard gave a wrong batch, and what that batch held."""
    for p in plays[hazard]:
        for k, (got, want) in enumerate(zip(p.held, right)):
            if got != want:
                return p.seed, k, got
    return None


lines = []
for hazard in hazards.HAZARDS:
    found, races = first_wrong(hazard), [p.races for p in plays[hazard]]
    told = f"reported the race in every order ({span(races)} times in the run)"
    if found is None:
        lines.append(f"* **{hazard}**: every batch came out right in these orders, but the simulator {told}.")
    else:
        seed, k, got = found
        held = "NaN (its copy had not run)" if got != got else f"the numbers of batch {got:g}"
        lines.append(f"* **{hazard}**: run {SCHEDULES[seed]}, batch {k} held {held}; "
                     f"the simulator {told}.")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ### Deeper (optional): the simulator's race report
#
# Why the count of races differs between orders, and what the simulator says when it finds one.

# %% [markdown] tags=["deeper"]
# Some orders add a real synchronisation: when the caching allocator has seen a copy finish before
# the program issues its next read, that read is ordered after the copy, on a real GPU too. By
# default the simulator raises the race where it happens, naming the two accesses and what it
# thinks is missing:

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
try:
    with simulated_cuda(seed=0):
        for x in hazards.hand_prefetch(hazards.numbered_batches(3), "cuda", record_stream=False):
            step = x.mean()  # queued on the default stream; then x is dropped
except CudaRaceError as e:
    print(textwrap.fill(str(e), 110))

# %% [markdown]
# ## 4. Without CUDA: a thread prefetcher
#
# A background thread can make the next batch while the loop uses this one, *if* the two do not
# both need Python's GIL all the time: one of them releasing it while it works is enough (Pillow
# does while decoding JPEGs, torch inside its operators).
# `gpufeed.data.prefetch.ThreadPrefetcher(loader, depth=2)` pulls batches on a thread (named
# `gpufeed-prefetch-N`) into a queue of `depth`. We feed a small CNN's training step from a
# DataLoader that decodes in the main process (`num_workers=0`), with and without it. Torch runs
# one thread here so that the step takes one core and the decoding thread can have another.

# %%
import time

from torch.utils.data import DataLoader

from gpufeed import config
from gpufeed.data.folder import ImageFolderDataset
from gpufeed.course.instrument import tiny_model, train_step
from gpufeed.course.lesson08 import feeds, overlap
from gpufeed.measure.synth import synth_folder

torch.set_num_threads(1)
B, n_images = config.pick(quick=16, full=32), config.pick(quick=64, full=512, site=128)
folder = synth_folder(config.cache_dir() / "lesson08" / f"jpeg-224-{n_images}", n=n_images, size=(224, 224),
                      progress=False).path
dataset = ImageFolderDataset(folder, size=(224, 224))
loader = DataLoader(dataset, batch_size=B, shuffle=True, drop_last=True)
step = train_step(tiny_model(len(dataset.classes)).to(S.device))  # takes uint8 images, converts them itself
batches = list(loader)  # one epoch in memory, to time the two stages apart
t0 = time.perf_counter()
list(loader)
decode_ms = (time.perf_counter() - t0) / len(batches) * 1e3
t0 = time.perf_counter()
for x, y in batches:
    step(x.to(S.device), y.to(S.device))
compute_ms = (time.perf_counter() - t0) / len(batches) * 1e3
best = overlap.bound(decode_ms, compute_ms, n=len(batches))  # the epoch's first decode: nothing hides it
print(f"per batch of {B}: decoding {decode_ms:.1f} ms, training step {compute_ms:.1f} ms; if they overlap "
      f"perfectly, a batch takes the longer of the two after the first: at best {best:.2f}x faster over "
      f"an epoch of {len(batches)} batches")

# %% [markdown]
# Now the two loops, each recording when every batch was loaded (and on which thread) and when
# each step ran, so that we can draw them as timelines.

# %%
import threading

from gpufeed.data.prefetch import ThreadPrefetcher
from gpufeed.course.timeline import Interval


def recorded(loader, log, origin):
    """The loader's batches, logging each load as an Interval on the thread that ran it."""
    batches = iter(loader)
    while True:
        start = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            return
        where = "main" if threading.current_thread() is threading.main_thread() else "prefetch thread"
        log.append(Interval(where, "decode", (start - origin) * 1e3, (time.perf_counter() - origin) * 1e3))
        yield batch


def run(prefetched, step_fn):
    """One epoch; returns its log and its seconds."""
    log, origin = [], time.perf_counter()
    source = recorded(loader, log, origin)
    for x, y in (ThreadPrefetcher(source, depth=2) if prefetched else source):
        start = time.perf_counter()
        step_fn(x.to(S.device), y.to(S.device))
        log.append(Interval("main", "compute", (start - origin) * 1e3, (time.perf_counter() - origin) * 1e3))
    return log, time.perf_counter() - origin


def waiting_step(x, y):  # stands for a step on a GPU: the CPU waits, and leaves its cores free
    time.sleep(compute_ms / 1e3)

# %% [markdown]
# We run four loops: the real training step on `S.device` (the CPU on a machine without a GPU),
# with and without the prefetcher; then a step that only *waits* as long (what a CPU does while a
# GPU computes), with and without. Each sample is one epoch, the four loops timed in turns (ABCD,
# ABCD, ...: a burst of other work slows all four), by the harness of lesson 02; each comparison
# is read by the course's verdict method (lesson 02, section 8).

# %%
from gpufeed.measure import plotting
from gpufeed.measure.harness import interleave

cases = {"plain loop": (False, step), "ThreadPrefetcher": (True, step),
         "plain loop, waiting step": (False, waiting_step), "ThreadPrefetcher, waiting step": (True, waiting_step)}
history = {name: [] for name in cases}  # each call's log: the first is the warm-up


def one_epoch(name):
    prefetched, step_fn = cases[name]
    return lambda: history[name].append(run(prefetched, step_fn)[0])


thread_ms = interleave({name: one_epoch(name) for name in cases}, repeats=config.pick(quick=3, full=5, site=21),
                       warmup=1, items=len(batches) * B, desc="four loops, in turns")
logs = {name: runs[-1] for name, runs in history.items()}  # the last epoch of each, to draw
shown = ["plain loop", "ThreadPrefetcher", "ThreadPrefetcher, waiting step"]
fig, axes = plt.subplots(3, 1, figsize=(9, 3.8), sharex=True)
for ax, name in zip(axes, shown):
    gantt(logs[name], ax=ax, until=5 * (decode_ms + compute_ms), legend=ax is axes[0], title=name,
          machine=S.machine if ax is axes[-1] else None)
    ax.set_xlabel("time (ms)" if ax is axes[-1] else "")
fig.tight_layout()
plt.show()

# %%
import statistics

from gpufeed.course.lesson08 import reading
from gpufeed.course.prose import say
from gpufeed.measure.verdict import compare

ms = {m.name: m for m in thread_ms}  # seconds an epoch, one sample a round of the turns
rate = {name: m.items_per_s for name, m in ms.items()}
speedup = rate["ThreadPrefetcher"] / rate["plain loop"]
waiting_speedup = rate["ThreadPrefetcher, waiting step"] / rate["plain loop, waiting step"]
real = reading.arms(ms["ThreadPrefetcher"].samples, ms["plain loop"].samples)
waiting = reading.arms(ms["ThreadPrefetcher, waiting step"].samples, ms["plain loop, waiting step"].samples)
gains = {name: [a / b for a, b in zip(ms[f"plain loop{name}"].samples, ms[f"ThreadPrefetcher{name}"].samples)]
         for name in ("", ", waiting step")}  # round by round
more = compare(gains[", waiting step"], gains[""], paired=True, higher=True)
durations = {name: {stage: [i.duration for log in history[name][1:] for i in log if i.stage == stage]
                    for stage in ("decode", "compute")} for name in cases}  # ms, over the timed epochs
decode = compare(durations["ThreadPrefetcher"]["decode"], durations["plain loop"]["decode"])
costs = {name: [statistics.mean(d) for d in durations[name].values()] for name in cases}  # decode, step
waiting_bound = overlap.bound(*costs["plain loop, waiting step"], n=len(batches),  # the costs the runs had
                              beside=costs["ThreadPrefetcher, waiting step"])
ref = None if S.cuda else reading.reference("lesson08")  # our committed GPU run, if any
say(reading.thread_reading(real, waiting, best, decode, more, device_type=S.device.type,
                           cores=S.machine.get("cores"), waiting_bound=waiting_bound,
                           ref=ref[1] if ref else None, rates=(rate["ThreadPrefetcher"], rate["plain loop"])))

# %% [markdown]
# The `prefetch thread` row is the background thread: its decoding runs under the main thread's
# steps. A waiting step stands for a GPU step whose host side only waits; a real GPU step's host
# side also launches kernels and runs autograd and the optimiser, holding the GIL between native
# calls. Two likely causes of a gain well below the bound, which this page does not tell apart:
# the stages did not get a core each, or both held the GIL.

# %% [markdown]
# ### Deeper (optional): errors and shutdown
#
# What `ThreadPrefetcher` does with a loader's exception and with a `break`.

# %% [markdown] tags=["deeper"]
# An exception in the wrapped loader is raised in *your* loop, once, with
# the loader's own traceback, after the batches made before it. A `break` (or `close()`, or leaving
# a `with` block, or the iterator being garbage-collected) stops the thread, even one blocked on a
# full queue: it puts with a timeout and watches a stop event.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
import traceback


def flaky_loader():
    yield "batch 1"
    yield "batch 2"
    raise OSError("the disk went away at batch 3")


try:
    for b in ThreadPrefetcher(flaky_loader()):
        print("got", b)
except OSError as e:
    frames = [f.name for f in traceback.extract_tb(e.__traceback__)]
    print(f"raised here, once: {e!r}; its traceback runs through {frames[-1]}()")


def endless():
    while True:
        yield torch.zeros(1000)


for i, _ in enumerate(ThreadPrefetcher(endless(), depth=2)):
    if i == 3:
        break
alive = [t.name for t in threading.enumerate() if t.name.startswith("gpufeed-prefetch")]
print(f"after a break: prefetch threads alive: {alive}")

# %% [markdown]
# ## 5. Proof of overlap: a fair timing, then a trace
#
# Does `CudaPrefetcher` make a training loop faster, and is it the thread or the side stream that
# pays? The first GPU run of this lesson (an H100, November 2026, with an older prefetcher that did
# its host work in your loop) found the loop 1.16x slower with it, in one profiled run each way:
# too few runs for a verdict. A machine without CUDA shows that run below until a newer one is
# committed. The experiment (`gpufeed.course.lesson08.overlap`) is built to favour no one:
#
# * **Three arms**: the plain `pin_memory` + `non_blocking` copy on the default stream, just before
#   each step; `hand_prefetch` of section 2 (a side stream, its host work in your loop); and
#   `CudaPrefetcher` (a side stream, its host work on its thread). Each arm is built once and
#   reused, with its one side stream.
# * **The loader** gathers each batch's rows from `uint8` images in memory and pins them, as
#   `FastLoader` does: host work a thread can move, and a copy a side stream can hide. So the
#   prefetcher's gain over `hand_prefetch` is the host work its thread moved.
# * **The model** is made just wide enough for its step to take about as long as the gathering and
#   the copy: next to a much longer step there is little to hide.
# * **Two kinds of step**: one that reads its loss every step (`loss.item()`), so the host waits
#   for the GPU each step; and one that never waits. Each has its own bound, section 4's bound
#   function with that step timed alone (the first batch falls in the untimed warm-up).
# * **The timing**: the arms in turns (ABCABC), the GPU synchronised before the clock starts and
#   stops; five runs of each in full mode (a verdict needs five), two in quick mode, which only
#   shows that the section runs. The cell says first what the timing will cost.
# * **A profiler trace** of each, the first steps left out, for the picture and the reason; and
#   the memory peaks (`torch.cuda.memory_stats()`).

# %%
from gpufeed.measure import results

trace_dir = config.cache_dir() / "lesson08" / "traces"
if S.cuda:
    h, w = config.pick(quick=(384, 384), full=(960, 1280))
    n = 4 * B  # four batches' worth of images in memory, gathered in a new order each epoch
    feed = feeds.feeding_loader(torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8),
                                  torch.randint(0, 10, (n,)), B, S.device)
    plan = overlap.plan(feed, S.device, feeds.model_steps(S.device), dtype=torch.float32,
                        mean=MEAN, std=STD, items=B)
    sizes = overlap.settings()  # this mode's runs, steps and traces
    say(f"Batches of {B} images at {w}x{h}. " + plan.describe() + f" Timing the arms should take about "
        f"{plan.cost(**sizes):.0f} s in this mode ({plan.cost(**overlap.settings('full')):.0f} s in full mode).")
else:
    print("No CUDA here: this experiment needs a GPU; below, our committed reference from one.")

# %%
found, measured = None, []
if S.cuda:
    found, measured = overlap.measure(plan, trace_dir=trace_dir, items=B, **sizes)
    say(reading.read(found))
elif ref is None:
    results.no_reference("lesson08")
else:
    say(reading.read_reference(ref[1]))

# %% [markdown]
# The first steps of the traces with the step that syncs every step: a row per GPU stream shows
# the copies and kernels. A `host` row, where the trace has one, is your loop's thread in every
# arm: its bars are the steps (launching them, then waiting in `loss.item()`), its gaps the time
# between two steps, when your loop fetches the next batch. The title's figure is the share of the time the GPU ran no
# kernel (a copy alone counts there).

# %%
from gpufeed.course.lesson08.traced import SHOWN_STEPS  # steps of each trace drawn

doc = {"overlap": found, "machine": S.machine} if S.cuda else (ref[1] if ref else {})
pictures, summaries = reading.chart_data(doc)
if pictures:
    fig, axes = plt.subplots(len(pictures), 1, figsize=(9, 4), sharex=True)
    until = max(s["window_ms"] / s["steps"] for s in summaries.values()) * SHOWN_STEPS
    for ax, (name, rows) in zip(axes, pictures.items()):
        s = summaries[name]
        intervals = [Interval(**r) for r in rows]
        shown_rows = sorted({i.resource for i in intervals}, key=lambda r: (r != "host", r))
        gantt(intervals, rows=shown_rows, ax=ax, until=until, legend=ax is axes[0], title=f"{name}: no kernel {s['gpu_idle_fraction']:.0%} of "
              f"{s['steps']} steps, one every {s['window_ms'] / s['steps']:.2f} ms",
              machine=doc["machine"] if ax is axes[-1] else None)
    fig.tight_layout()
    plt.show()

# %%
saved = results.save_lesson("lesson08", [*thread_ms, *measured], batch_size=B, decode_ms=decode_ms,
                            compute_ms=compute_ms, thread_speedup=speedup, waiting_speedup=waiting_speedup,
                            **({"overlap": found, "prefetcher": overlap.PREFETCHER} if S.cuda else {}))

# %% [markdown]
# ## Key takeaways
#
# * Streams are queues; work on two streams may overlap. Copy on a side stream from pinned memory,
#   make the compute stream wait for it (`wait_stream`/`wait_event`), and `record_stream` the
#   tensors you hand over so the caching allocator does not reuse their memory too early.
# * Each of those lines guards against a race that a short run on a real GPU usually hides. A
#   simulator of CUDA's ordering rules (`gpufeed.simcuda`) reports it whatever the order,
#   and your own CUDA code can run under it in a test on any machine.
# * Send `uint8` and convert and normalise on the GPU: 4x fewer bytes on the wire. The conversion
#   is not free there: its kernels share the GPU with your step's.
# * A loop that reads its loss every step (`loss.item()`) waits for the GPU each step, so whatever
#   the host does between two steps is time the GPU sits idle: it is on the critical path. A
#   prefetcher's host work (asking the loader, pinning, issuing the copies) belongs on a thread of
#   its own, as `CudaPrefetcher` and FFCV's loader do it. Use each batch on the stream current at
#   `next()`, or order it yourself (`wait_stream` + `record_stream`).
# * Without CUDA, a thread prefetcher overlaps loading with the step when either releases the GIL;
#   make it stop on `break`, raise the loader's errors in the loop, and never block for good. A
#   waiting step shows the mechanism; a real step's host side may not leave it the GIL.
# * Test a prefetcher before you believe it: fed by a loader that does its host work per batch, a
#   step about as long as what it hides, the bound first, the variants in turns, with a step that
#   syncs and one that does not, each comparison read by the verdict method; then read the trace
#   (the host's time between steps) for the reason. Section 5 reads what was measured, whichever
#   way it went, or says that the run cannot tell.
#
# ## Exercises
#
# 1. Run section 4 with `depth=1` and `depth=8`. Does the depth change the rate? When would it?
# 2. Call `hand_prefetch` with `record_stream=False` (its `record_stream` line off). Why might the values still look right
#    in a short test, and what could go wrong in a long run?
# 3. In section 4, what speed-up do you expect if the step took twice as long as decoding? Work it
#    out from the formula, then check with the cell below.
#
# A worked solution to each exercise follows the self-check, folded: try first, then unfold it.

# %%
# Self-check for exercise 3: your answer, the speed-up as a number (e.g. 1.25).
my_speedup = None
expected = (1 + 2) / 2  # (decode + step) / max(decode, step) with step = 2 x decode
if my_speedup is not None:
    print("right!" if abs(my_speedup - expected) < 0.05 else f"not quite: (d + 2d) / max(d, 2d) = {expected}")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 1: the prefetcher's depth.
# Why: once a prefetched loop runs, it goes at the pace of its slower stage, max(decode, step). A
# deeper queue cannot make the producer faster; it only lets it work further ahead. When every
# batch costs the same, one batch ahead is all the step can use: depth 1 and 8 should tie. Depth
# pays when costs vary (a large image, a cold file, a pause): a slow batch stalls the step unless
# the queue holds enough batches made ahead to cover it, and the queue fills only if the producer
# is faster than the step on average. So time both with a waiting step (section 4): section
# 4's loader, then a source whose every eighth batch takes 25 ms and the others 1 ms (4 ms on
# average) against a 5 ms step. Sleeps, so that the costs are exact even on a busy machine.


from gpufeed.measure.verdict import in_turns


def epoch(source, step_s, depth):
    """One epoch of ``source()`` through a ThreadPrefetcher of ``depth``, a waiting step each batch."""
    return lambda: [time.sleep(step_s) for _ in ThreadPrefetcher(source(), depth=depth)]


def uneven(n=48, fast_s=0.001, slow_s=0.025):
    for i in range(n):
        time.sleep(slow_s if i % 8 == 7 else fast_s)
        yield i


turns = config.pick(quick=3, full=5, site=15)  # epochs of each depth, in turns (a verdict needs 5)
even = in_turns(epoch(lambda: loader, compute_ms / 1e3, 8), epoch(lambda: loader, compute_ms / 1e3, 1),
                names=("depth 8", "depth 1"), repeats=turns, desc="section 4's loader, depth 8 and 1")
bursty = in_turns(epoch(uneven, 0.005, 8), epoch(uneven, 0.005, 1), names=("depth 8", "depth 1"),
                  repeats=turns, desc="uneven batches, depth 8 and 1")
v = bursty.verdict
print(f"Section 4's loader, waiting step (an epoch: {even.b.median:.2f} s with depth 1, {even.a.median:.2f} s "
      f"with depth 8): depth 8 {even.verdict.ran('depth 1')}.")
print(f"Uneven batches (an epoch: {bursty.b.median * 1e3:.0f} ms with depth 1, {bursty.a.median * 1e3:.0f} ms "
      f"with depth 8; the step alone needs {48 * 5} ms): depth 8 {v.ran('depth 1')}. " + (
          "With depth 1 the 25 ms batch finds at most two batches made ahead (one queued, one waiting to be: 10 ms "
          "of steps) and the step waits for the rest; with depth 8 the queue filled during the fast batches and "
          "covered it." if v.kind == "faster" else v.advice if not v.decided else
          "Not what the reasoning predicts; one likely cause, not measured here: on a busy machine a sleeping "
          "thread wakes late, which blurs the costs."))


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 2: `hand_prefetch` without `record_stream`.
# Why it matters: the batch is allocated on the side stream, so the caching allocator files its
# memory under that stream. When your loop drops the batch, the allocator gives the memory to the
# side stream's next copy at once: it does not know the default stream still has queued work that
# reads it. `record_stream(current)` tells it to wait for that work first.
# Why a short test passes: a test checks each batch as it comes (`.item()`, `.cpu()`, an assert),
# and each check makes the CPU wait for the default stream. By the time the batch is dropped its
# readers have run, so reusing the memory is harmless. A training loop never waits: it queues a
# step and moves on, and the longer the GPU's queue, the more likely the next copy lands in memory
# a queued step has not read yet. The result is no error, only steps trained on the wrong batch.
# On the simulator both consumers of `hand_prefetch(..., record_stream=False)` run
# in every order, with the races recorded rather than raised.
tested, tested_races = [], 0
for seed in SCHEDULES:
    with simulated_cuda(seed, races="record") as sim:
        src = hazards.hand_prefetch(hazards.numbered_batches(), "cuda", record_stream=False)
        tested.append([x.mean().item() for x in src])  # a test: one sync per batch
        tested_races += len(sim.races)
training = [hazards.play("no record_stream", seed) for seed in SCHEDULES]
wrong = [p for p in training if p.held != right]
print(f"A test that checks each batch: {sum(t == right for t in tested)} of {len(SCHEDULES)} orders right, "
      f"{tested_races} races reported.")
print(f"A training loop that never waits: wrong batches in {len(wrong)} of {len(SCHEDULES)} orders "
      + (f"(run {SCHEDULES[wrong[0].seed]}: held {' '.join(f'{v:g}' for v in wrong[0].held)}), " if wrong else "")
      + f"and the simulator reported races in {sum(p.races > 0 for p in training)} of {len(SCHEDULES)}: it finds the "
      "bug even in the lucky orders, where a real GPU gives no sign.")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 3: the speed-up when the step takes twice as long as decoding.
# Why: without overlap a batch costs decode + step = d + 2d = 3d. With a prefetcher the two run at
# once, so a batch costs the longer of the two, max(d, 2d) = 2d, and the shorter one is hidden. The
# speed-up is 3d / 2d = 1.5, whatever d is. An epoch of n batches also starts with a decode that
# nothing hides: n x 3d against d + n x 2d, at most 3n / (2n + 1). To check it, time section 4's
# `run` with a waiting step of twice the decode time measured just before (it changes as the
# machine's load does), in turns with and without the prefetcher, and read the verdict. If its
# whole interval beats the bound, the bound's costs were not the runs' costs: recompute it from
# what the runs' logs recorded.
my_speedup = (1 + 2) / max(1, 2)
assert abs(my_speedup - expected) < 0.05, "the self-check above would say 'not quite'"
t0 = time.perf_counter()
list(loader)
d = (time.perf_counter() - t0) / len(batches)  # seconds to decode a batch, now
ran = {}  # each arm's last epoch's log
timed3 = in_turns(*(lambda way=way: ran.__setitem__(way, run(way, lambda x, y: time.sleep(2 * d))[0])
                    for way in (True, False)), names=("with the prefetcher", "without"), repeats=turns)
v, n = timed3.verdict, len(batches)
limit = overlap.bound(1, 2, n=n)  # 3n / (2n + 1)
text = (f"Predicted {my_speedup:.2f}x for long epochs, at most 3n / (2n + 1) = {limit:.2f}x for epochs of "
        f"n = {n} batches. Measured with a decode of {d * 1e3:.0f} ms and a {2 * d * 1e3:.0f} ms waiting step, "
        f"{len(timed3.a.samples)} epochs each way in turns: the prefetched loop "
        f"{v.ran('the plain loop', bold=True)}.")
if v.kind == "faster" and v.low > limit:
    had = {way: [statistics.mean(i.duration for i in ran[way] if i.stage == stage) for stage in ("decode", "compute")]
           for way in ran}  # ms, in each arm's last epoch
    again = overlap.bound(*had[False], n=n, beside=had[True])
    text += (f" That beats the bound, which took decoding to cost the {d * 1e3:.0f} ms measured before the runs: in "
             f"the last runs it cost {had[False][0]:.0f} ms alone and {had[True][0]:.0f} ms beside the step, and with "
             f"those the bound is {again:.2f}x" + ("; the interval lies above that too, and these runs cannot say why."
                                                  if v.low > again else "."))
elif not v.decided:
    text += " " + v.advice
say(text + reading.share_of_bound(v, limit))

# %% [markdown]
# ## Further reading
#
# * [CUDA semantics](https://docs.pytorch.org/docs/stable/notes/cuda.html) (PyTorch docs): streams, `wait_stream` and `record_stream`: the three lines of the prefetcher and the races they prevent.
# * [`examples/imagenet/main_amp.py`](https://github.com/NVIDIA/apex/blob/master/examples/imagenet/main_amp.py) (NVIDIA apex): the `data_prefetcher` this lesson's `CudaPrefetcher` descends from.
# * [`ffcv/loader/epoch_iterator.py`](https://github.com/libffcv/ffcv/blob/main/ffcv/loader/epoch_iterator.py) (FFCV): a loader that runs its pipeline and issues its copies from a thread of its own, with a CUDA stream per slot of its ring of `batches_ahead + 2`, so that the training loop may sync as often as it likes and memory stays bounded: the design `CudaPrefetcher` follows.
# * [A guide on good usage of `non_blocking` and `pin_memory()` in PyTorch](https://docs.pytorch.org/tutorials/intermediate/pinmem_nonblock.html) (Vincent Moens, PyTorch tutorials): why the copy must come from pinned memory to overlap, shown with profiler traces.
# * [`torch.profiler`](https://docs.pytorch.org/docs/stable/profiler.html) (PyTorch docs): how to read the trace that proves the overlap.
