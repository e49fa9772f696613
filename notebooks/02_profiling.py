# %% [markdown]
# # 02 · Profiling and benchmarking
#
# **What you will learn:** how to see where a loop's time goes with `torch.profiler`
# (`record_function`, `schedule`, `key_averages`, a chrome trace opened in Perfetto); how to turn
# a trace into numbers (time per stage, GPU idle fraction); and how to time code honestly: the
# classic mistakes first (timing a lazy iterator, no warm-up, no CUDA sync), then
# `torch.utils.benchmark` and the course's own harness.
#
# **Time:** about 25 minutes (2 in quick mode). **Prerequisites:** [01 · Bottlenecks](01_bottlenecks.ipynb).

# %%
import gpufeed

S = gpufeed.setup("02")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. Two instruments
#
# A **profiler** answers *where does the time go?*: it records every operator and every range you
# name, on the CPU and (with CUDA) on the GPU, and shows them as a table or a timeline. It slows
# the program a little and is not a stopwatch. A **benchmark** answers *how long does this take?*
# with one honest number and its spread. You need both: the profiler finds the stage worth
# changing, the benchmark proves the change helped.

# %% [markdown]
# ## 2. The loop to profile
#
# The naive loop of lesson 01, written out with each stage inside `record_function("name")`: a
# named range that shows up in the profiler's table and timeline. The model is lesson 01's small
# CNN (`gpufeed.course.instrument.tiny_model`), which takes `uint8` images and converts them itself.

# %%
import os

# Hides the profiler's C++ error lines (harmless on CPU, e.g. "gpuGetDeviceCount failed"); the
# "profiler_start" / "profiler_stop" trace-point lines on stderr are not logging and still print.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from gpufeed import config
from gpufeed.course.instrument import list_images, tiny_model, train_step
from gpufeed.data.jpeg import decode_pil
from gpufeed.measure.synth import synth_folder

B = config.pick(quick=8, full=32, site=32)
n = B * config.pick(quick=4, full=16, site=4)
folder = synth_folder(config.cache_dir() / f"lesson02-224x224-q90-n{n}", n=n, size=(224, 224), quality=90).path
files, labels = list_images(folder)
step = train_step(tiny_model(max(labels) + 1).to(S.device))


def one_step(b):
    idx = [(b * B + k) % n for k in range(B)]
    with record_function("read"):
        blobs = [files[k].read_bytes() for k in idx]
    with record_function("decode"):
        images = [decode_pil(blob) for blob in blobs]
    with record_function("collate"):
        x, y = torch.stack(images), torch.tensor([labels[k] for k in idx])  # as most loops write it
    with record_function("copy"):
        x, y = x.to(S.device), y.to(S.device)
    with record_function("compute"):
        step(x, y)


# %% [markdown]
# ## 3. Profiling with a schedule
#
# Profiling every step of a long run makes huge traces, and the first steps are not typical
# (lesson 01's warm-up). `schedule` says which steps to record; `prof.step()` marks the end of each:
#
# * `skip_first=1`: ignore the first step altogether;
# * then cycles of `wait=1` step (not recorded), `warmup=1` step (recorded, then thrown away: the
#   profiler's own start-up cost lands there), `active=3` steps (kept);
# * `repeat=2` cycles, then stop. After each cycle's active steps, `on_trace_ready(prof)` runs:
#   here it writes a chrome trace. (Torch warns that each cycle clears the previous one's events:
#   the table below is the last cycle's.)
#
# So 1 + 2 x (1 + 1 + 3) = 11 steps, 6 of them recorded, in 2 traces. With CUDA, the GPU's
# kernels and copies are recorded too.
#
# The schedule counts calls of `prof.step()`: it is the only clock it has. The snippet in
# Zuppichini's talk *How to Efficiently Send Images to GPU* (lesson 00's Sources) passes `schedule(...)` to `profile` but never calls `prof.step()`, so the profiler stays in its
# first state (skipping) for the whole run: it records nothing and `on_trace_ready` never runs.

# %%
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if S.cuda else [])
trace_dir = config.cache_dir() / "lesson02-traces"
trace_dir.mkdir(parents=True, exist_ok=True)
traces = []


def on_trace_ready(prof):
    path = trace_dir / f"naive-loop-step{prof.step_num}.json"
    prof.export_chrome_trace(str(path))
    traces.append(path)


plan = schedule(skip_first=1, wait=1, warmup=1, active=3, repeat=2)
with profile(activities=activities, schedule=plan, on_trace_ready=on_trace_ready, record_shapes=True) as prof:
    for b in range(1 + 2 * (1 + 1 + 3)):
        one_step(b)
        prof.step()
print("traces in the cache folder's lesson02-traces/:", ", ".join(p.name for p in traces))

# %% [markdown]
# ## 4. Reading `key_averages`
#
# `key_averages()` adds up the recorded events per name; `group_by_input_shape=True` splits them
# further by the shapes of their inputs (that is what `record_shapes=True` was for), so the
# same operator on two different sizes gets two lines.

# %%
table = prof.key_averages(group_by_input_shape=True).table(
    sort_by="cpu_time_total", row_limit=12, max_name_column_width=28, max_shapes_column_width=45)
print(table)

# %% [markdown]
# Line by line:
#
# * **Name**: an operator (`aten::conv2d`, the C++ op behind `nn.Conv2d`) or one of our ranges
#   (`decode`). `ProfilerStep*` is the range `prof.step()` draws around each step.
# * **Self CPU** is time spent in that event itself, outside any event recorded inside it; **CPU
#   total** includes those events. The profiler records torch operators, not Python or Pillow, so
#   a range whose work is Python and Pillow (`read`, `decode`) has almost nothing recorded inside
#   it and its self time is nearly its total; a range around torch operators (`compute`) has a
#   small self time. The cell below reads the share for each stage. The `%` columns divide by the
#   whole profiled time.
# * **CPU time avg** is total / **# of Calls**: 3 calls for a range that runs once per step over
#   3 active steps.
# * **Input Shapes**: `[[B, 3, 224, 224], ...]` (B, the batch size) is the batch entering the first
#   convolution.
# * With CUDA, more columns appear: **Self CUDA** and **CUDA total**, time on the GPU. CPU time is
#   the host's clock, waiting included: our `compute` range ends in `loss.item()`, which waits for
#   the GPU to finish the step, so its CPU total holds the GPU's time too. Whether the GPU waits
#   for the CPU is what section 6's idle fraction says, not the two columns.
#
# The same numbers are there to compute with, per event name:

# %%
from gpufeed.course.prose import say
from gpufeed.course.trace import cpu_rows

# With CUDA, a range that launches GPU work has a second, GPU-side row of the same key whose
# cpu_time_total is 0; cpu_rows keeps the CPU rows only, so no stage (or step) reads as 0.
events = cpu_rows(prof.key_averages())
stages = ["read", "decode", "collate", "copy", "compute"]
step_us = events["ProfilerStep*"].cpu_time_total
for name in stages:
    e = events[name]
    print(f"{name:>8}: {e.cpu_time_total / e.count / 1000:8.2f} ms per step, {e.cpu_time_total / step_us:5.1%} "
          f"of the step, self {e.self_cpu_time_total / e.cpu_time_total:4.0%} of its total")
self_share = {name: events[name].self_cpu_time_total / events[name].cpu_time_total for name in stages}
most, least = max(self_share, key=self_share.get), min(self_share, key=self_share.get)
say(f"Self time is {self_share[most]:.0%} of **{most}**'s total (its work is not profiler events) and "
    f"{self_share[least]:.0%} of **{least}**'s (its work is torch operators, each an event of its own).")
slowest = max(stages, key=lambda s: events[s].cpu_time_total)
say(f"The profiler points at **{slowest}**: {events[slowest].cpu_time_total / step_us:.0%} of each profiled step.")
if "aten::cat" in events:  # what torch.stack runs: one copy of the batch's bytes
    say(f"One operator to read twice: **aten::cat**, the copy inside `torch.stack`, spent "
        f"{events['aten::cat'].self_cpu_time_total / events['collate'].count / 1000:.2f} ms of self time per step "
        f"({events['aten::cat'].self_cpu_time_total / step_us:.1%} of the step) stacking {B} decoded images, "
        f"{B * 3 * 224 * 224 / 1e6:.1f} MB. Is that what a copy of so few bytes costs? Section 8 measures it.")

# %% [markdown]
# ## 5. The chrome trace
#
# The exported JSON files (named above) are timelines. To look at one, open
# [ui.perfetto.dev](https://ui.perfetto.dev) and drag the file onto the page (it stays on your
# machine), or open `chrome://tracing` in Chrome and press *Load*. `W`/`S` zoom, `A`/`D` pan; click
# a range to see its duration and, with `record_shapes`, its inputs. On a GPU machine the kernels
# appear on their own rows, one per CUDA stream, under the CPU threads that launched them.
#
# The same trace, drawn with lesson 01's Gantt chart (`gpufeed.course.trace.intervals` turns it into
# intervals; the stage names pick the course colours):

# %%
import matplotlib.pyplot as plt

from gpufeed.course import trace
from gpufeed.course.timeline import gantt

fig, ax = gantt(trace.intervals(traces[-1], names=stages), machine=S.machine,
                title="the last profiled cycle: 3 steps of the naive loop")
plt.show()

# %% [markdown]
# ## 6. From a trace to a number
#
# `gpufeed.course.trace` reads an exported trace and reports the time per named stage and, when CUDA
# kernels are in it, the share of the profiled time in which no kernel ran: the GPU idle fraction.
# That one number says whether the GPU is starved; lessons 07 and 08 drive it down.

# %%
print(trace.report(traces[-1], names=stages))
summary = trace.summary(traces[-1], names=stages)
idle = summary["gpu_idle_fraction"]
if idle is not None:
    print(f"On {S.machine['gpu']} the GPU sat idle {idle:.0%} of the profiled time: "
          + ("the data path starves it." if idle > 0.5 else "it was busy most of the time, so here the data path "
             "keeps up with this model."))

# %%
from gpufeed.measure import results

ref = None if S.cuda else results.reference("lesson02")
if not S.cuda:
    print("No CUDA here, so no kernels in the trace and no GPU idle fraction.")
    if ref is None:
        results.no_reference("lesson02")
    else:
        ref_summary = ref[1]["trace_summary"]
        print(f"On {ref[1]['machine']['gpu']}, the same loop left the GPU idle "
              f"{ref_summary['gpu_idle_fraction']:.0%} of the time; per step:")
        for name, t in ref_summary["stages"].items():
            print(f"{name:>8}: {t['mean_ms']:8.2f} ms ({t['share']:5.1%} of the window)")

# %% [markdown]
# ## 7. Honest timing: the classic mistakes first
#
# ### Mistake 1: timing a lazy iterator
#
# `map` and generators do no work when created: the work happens when you take items out.
# Timing the creation measures nothing. (`iter(dataloader)` is different: with `num_workers > 0`
# it starts the worker processes and has them queue `prefetch_factor x num_workers` batches,
# 2 x 2 = 4 by default here, so creating it costs the start-up and work begins in the background;
# with `num_workers=0` it does no work. Exercise 3 times both.)

# %%
import statistics
import time
import timeit

from gpufeed.course.lesson02 import reading
from gpufeed.measure.verdict import compare

blobs = [f.read_bytes() for f in files[:B]]
lazy, eager = [], []  # seconds, one sample of each per round, taken in turns
for _ in range(5):
    # A map() is made in well under a microsecond, less than one perf_counter pair resolves, so it is
    # timed as anything that short must be: 10,000 creations per sample.
    lazy.append(timeit.timeit(lambda: map(decode_pil, blobs), number=10_000) / 10_000)
    start = time.perf_counter()
    decoded = list(map(decode_pil, blobs))  # list() takes every item out: now they are decoded
    eager.append(time.perf_counter() - start)
lazy_s, eager_s = statistics.median(lazy), statistics.median(eager)
say(reading.lazy_reading(compare(eager, lazy, paired=True), B, lazy_s, eager_s))

# %% [markdown]
# ### Mistake 2: no warm-up
#
# The first call of anything pays once for what later calls reuse: memory allocation, a new
# model's first backward pass, kernels chosen for a new shape, and for a DataLoader, starting its
# worker processes. Timing the first call measures the start-up, not the steady state. Each demo
# below starts afresh several times, one sample of each arm per start: a new DataLoader; a new
# model on an image size this process has not run (this notebook has run the model on 224x224
# already, which is why a new model on that size would show little).

# %%
from torch.utils.data import DataLoader, TensorDataset

from gpufeed.course.lesson02.firstcall import first_steps
from gpufeed.measure.harness import benchmark

starts = config.pick(quick=1, full=5, site=5)
first_batch, per_batch = [], []  # seconds, one sample of each per new DataLoader
for _ in range(starts):
    loader = DataLoader(TensorDataset(torch.arange(64 * B)), batch_size=B, num_workers=2)
    start = time.perf_counter()
    batches = iter(loader)
    next(batches)  # iter() started two workers; the first batch waits for them to start and load it
    first_batch.append(time.perf_counter() - start)
    start = time.perf_counter()
    rest = sum(1 for _ in batches)  # the other 63 batches
    per_batch.append((time.perf_counter() - start) / rest)
say(reading.first_reading(compare(first_batch, per_batch, paired=True), "a new DataLoader's first batch",
                          "each batch after it", "starting two worker processes"))

sizes = range(160, 160 + 8 * config.pick(quick=2, full=7, site=7), 8)  # 160x160, 168x168, ...: none run so far
first, steady = first_steps(sizes, batch_size=B, steps=3, device=S.device)
first_s = first.median
say(f"A new model on each of {len(first.samples)} new image sizes: the first training step took "
    f"{first.median * 1e3:.1f} ms, the steps after it {steady.median * 1e3:.1f} ms (medians). " + reading.first_reading(
        compare(first, steady, paired=True), "the first step", "the steps after it",
        "on a new size the operators choose their kernels and the allocator finds memory of new sizes; "
        "a training script's very first step likely pays more (thread pools; on a GPU, the CUDA context)"))

# %% [markdown]
# ### Mistake 3: no CUDA synchronisation
#
# CUDA calls return as soon as the work is *queued*; the GPU does it later. A timer stopped right
# after the call measures the queueing. `torch.cuda.synchronize()` waits for the GPU, so it goes
# inside the timed region. This needs a GPU; without one, the cell shows our reference from one,
# or, where none is committed, a CPU's matmul, where there is nothing to wait for.

# %%
from gpufeed.measure.harness import Measurement

sync_ms = []
if S.cuda:
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(3):
        a @ a  # warm-up
    torch.cuda.synchronize()
    took = {False: [], True: []}  # seconds per matmul, one sample of each per round, in turns
    for _ in range(config.pick(quick=3, full=7, site=7)):
        for synced in (False, True):
            start = time.perf_counter()
            for _ in range(10):
                a @ a
            if synced:
                torch.cuda.synchronize()
            took[synced].append((time.perf_counter() - start) / 10)
            torch.cuda.synchronize()  # the next sample starts with an empty queue
    sync_ms = [Measurement(f"matmul, {'synced' if synced else 'no sync'}", took[synced], params={"n": 4096})
               for synced in (False, True)]
    sync_machine = S.machine
elif ref is not None:
    sync_ms = [m for m in ref[0] if m.name.startswith("matmul")]
    sync_machine = ref[1]["machine"]
    print(f"No CUDA here: showing the reference measured on {sync_machine['gpu']}.")
else:  # this CPU: an operator returns when its work is done, so there is nothing to synchronise
    c = torch.randn(1024, 1024)
    cpu_mm = benchmark(lambda: c @ c, name="matmul 1024x1024, CPU", warmup=1, repeats=5)
    say(f"No CUDA here, and no GPU reference of ours for this cell. On this CPU a 1024x1024 matmul takes "
        f"{cpu_mm.median * 1e3:,.1f} ms per call, and the call returns only when the product is done: there is "
        "nothing to synchronise. On a GPU the same timer, stopped without a sync, would read the launch, microseconds.")

# %%
if sync_ms:
    no_sync, synced = sync_ms
    print(f"4096x4096 matmul: {no_sync.median * 1e6:,.0f} us per call without a sync, "
          f"{synced.median * 1e6:,.0f} us with one (medians of {len(no_sync.samples)} rounds in turns)")
    say(reading.sync_reading(compare(no_sync, synced, paired=len(no_sync.samples) == len(synced.samples)),
                             sync_machine["gpu"]))

# %% [markdown]
# ## 8. Doing it right: `torch.utils.benchmark`, and a verdict
#
# `torch.utils.benchmark.Timer` warms up, synchronises CUDA when it is present, chooses how many
# runs to time (`blocked_autorange`), keeps every sample, and pins the number of threads so that
# two results are comparable. `Compare` prints many results as one table: rows are `sub_label`s,
# columns `description`s, grouped by `label`. Here: each decoder this machine has, on a batch of
# JPEGs at two sizes.

# %%
from torch.utils import benchmark as tb

from gpufeed.data import jpeg

run_time = config.pick(quick=0.05, full=0.5, site=0.2)  # seconds each Timer and harness sample spends
sizes = {"224x224": blobs}
big = synth_folder(config.cache_dir() / "lesson02-640x480-q90-n8", n=8, size=(640, 480), quality=90).path
sizes["640x480"] = [p.read_bytes() for p in sorted(big.rglob("*.jpg"))]
timers = []
for dec_name, decode in jpeg.available_decoders().items():
    for size, data in sizes.items():
        timer = tb.Timer("[decode(b) for b in data]", globals={"decode": decode, "data": data},
                         num_threads=1, label="JPEG decode, one thread", sub_label=dec_name,
                         description=f"{len(data)} x {size}")
        timers.append(timer.blocked_autorange(min_run_time=run_time))
tb.Compare(timers).print()

# %% [markdown]
# The course's harness (`gpufeed.measure.harness.benchmark`, first used in lesson 00) does the same
# job and adds what the later lessons need: images/s and GB/s, the machine it ran on, and JSON. Do
# the two agree on the same work? Two numbers taken one cell after the other cannot say: the
# machine's load moves between them. It takes the method every comparison in this course uses.
#
# ### The verdict: faster, slower, the same, or "this run cannot tell"
#
# `gpufeed.measure.verdict` does it in three steps:
#
# 1. **Arms in turns**: A, B, A, B, ... so that a burst of other work slows both a little rather
#    than one a lot; each round gives one sample of each (`in_turns(a, b)` does it).
# 2. **The ratio of the medians**, r = B's median time over A's ("A is r times faster than B"),
#    with an **interval**: resample the rounds 2,000 times, take the ratio each time, and keep the
#    middle 90% of those ratios. A wide interval means the samples move a lot.
# 3. **Four verdicts**: *faster* or *slower* when the whole interval lies on one side of 1; *the
#    same within X%* when it holds 1 and stays within 10% of it; *this run cannot tell* when it
#    holds 1 and is wider, or when an arm has fewer than 5 samples. "Cannot tell" is an answer too:
#    it says how wide the interval is, and what would tell (more samples, larger sizes, an idle machine).
#
# Here, Timer and the harness in turns on one batch of decodes, each round one sample of each:

# %%
import warnings

from gpufeed.measure.noise import NoisyMeasurementWarning

threads = torch.get_num_threads()
torch.set_num_threads(1)  # as Timer(num_threads=1) does
decode_batch = lambda: [decode_pil(b) for b in blobs]  # noqa: E731  the work both tools time
by_timer, by_harness = [], []
with warnings.catch_warnings():  # no [noisy] mark per round: the verdict below reads the rounds' spread
    warnings.simplefilter("ignore", NoisyMeasurementWarning)
    for _ in range(rounds := config.pick(quick=2, full=48, site=48)):
        by_timer.append(tb.Timer("decode_batch()", globals={"decode_batch": decode_batch}, num_threads=1)
                        .blocked_autorange(min_run_time=run_time).median)
        by_harness.append(benchmark(decode_batch, name="pil", items=B, repeats=3, min_time=run_time).median)
torch.set_num_threads(threads)
ours = Measurement("harness, pil", by_harness, items=B, params={"size": "224x224"})
print(f"{len(blobs)} x 224x224 with Pillow, medians of {rounds} rounds: Timer {statistics.median(by_timer) * 1e3:.2f} ms, "
      f"harness {ours.median * 1e3:.2f} ms")
say(reading.tools_agree(compare(ours, by_timer, paired=True), rounds))

# %% [markdown]
# A second live example: section 4's question. The decoders hand back views of interleaved pixels
# (strides below); `torch.stack` writes each image as `[3, H, W]`, `jpeg.collate_images` copies
# the pixels as they lie (channels-last memory). First check they agree, then time them in turns,
# and beside that an A/A test (one function against itself) and the same runs cut to 3 rounds. In
# the table, *ratio* is r: above 1, A was faster.

# %%
from gpufeed.measure.verdict import in_turns

views = [decode_pil(b) for b in blobs]
assert torch.equal(torch.stack(views), jpeg.collate_images(views))  # the same batch, before any timing
print("strides of one image:", views[0].stride(), " torch.stack:", torch.stack(views).stride(),
      " collate_images:", jpeg.collate_images(views).stride())
repeats = config.pick(quick=3, full=100, site=100)
stack = in_turns(lambda: torch.stack(views), lambda: jpeg.collate_images(views),
                 names=("torch.stack", "collate_images"), repeats=repeats, warmup=3)
same = in_turns(lambda: jpeg.collate_images(views), lambda: jpeg.collate_images(views),
                names=("collate_images", "collate_images again"), repeats=repeats, warmup=3)
print(reading.verdict_table({
    "torch.stack against collate_images": stack.verdict,
    "collate_images against torch.stack": compare(stack.b, stack.a, paired=True),
    "collate_images against itself": same.verdict,
    "the first 3 rounds only": compare(stack.a.samples[:3], stack.b.samples[:3], paired=True),
}))
say(reading.collate_reading(stack.verdict, len(views), sum(v.nbytes for v in views) / 1e6) + " "
    + reading.aa_reading(same.verdict))

# %% [markdown]
# ## 9. Saved
#
# What this lesson measured goes to this machine's results folder (a GPU run of ours, committed
# with the course, is the reference that learners without a GPU see above).

# %%
lesson = [first, steady, ours, stack.a, stack.b, *(sync_ms if S.cuda else [])]
saved = results.save_lesson("lesson02", lesson, trace_summary=summary, first_step_s=first_s,
                            first_batch_s=statistics.median(first_batch), lazy_s=lazy_s, eager_s=eager_s)

# %% [markdown]
# ## 10. Your own loop, measured as it runs: `watch`
#
# Everything above, pointed at a loop you bring, without rewriting it: wrap the loader in
# `gpufeed.measure.watch(loader)` and loop over the wrapper as you would over the loader. Around each
# `next()` it takes the host's time and, on a GPU, two CUDA events: how long the *device* sat idle
# waiting for that batch. (A step that queues its GPU work and returns, as a step without `.item()`
# does, leaves the host waiting in `next()` while the GPU still works; only the device's clock tells
# that apart from waiting for data.) It counts the host syncs and names the line that made each.
# `feed.report()` reads the loop as it ran. `feed.what_ifs(step)` is a second step, taken when you
# ask: it watches a few steps for copies and syncs by kind (profiled on a GPU, as above) and measures
# the loader alone and the step on a batch already on the device; each finding names the numbers
# behind it and the lesson that fixes it. Here lesson 01's naive loading is the loader.

# %%
import gpufeed.measure


class NaiveBatches:  # lesson 01's loading on the main thread (read, decode, stack); one pass: an epoch
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        for b in range(self.batches):
            idx = [(b * B + k) % n for k in range(B)]
            yield torch.stack([decode_pil(files[k].read_bytes()) for k in idx]), torch.tensor([labels[k] for k in idx])


with gpufeed.measure.watch(NaiveBatches(config.pick(quick=6, full=20, site=12))) as feed:
    for x, y in feed:  # the loop as it is
        step(x.to(S.device), y.to(S.device))
print(feed.report().table())
report = feed.what_ifs(lambda b: step(b[0].to(S.device), b[1].to(S.device)),
                       batches=config.pick(quick=5, full=10, site=10))
print(report.table())
say(report.sentences())

# %% [markdown]
# ## Key takeaways
#
# * Name your stages with `record_function` and profile a few steps chosen by `schedule`, after a
#   warm-up; read `key_averages` (self vs total) and open the trace in Perfetto.
# * One number from a trace, the GPU idle fraction, says whether the GPU is starved.
# * Time honestly: consume lazy iterators inside the timed region, warm up first, synchronise
#   CUDA inside the timer, keep every sample and look at the spread. `torch.utils.benchmark` and
#   `gpufeed.measure.harness.benchmark` do all of it.
# * Compare two things in turns and read the ratio of their medians with its interval: faster,
#   slower, the same within X%, or "this run cannot tell", which is an answer too.
#
# ## Exercises
#
# 1. With `schedule(skip_first=2, wait=1, warmup=1, active=2, repeat=3)` and 20 calls of
#    `prof.step()`, how many times does `on_trace_ready` run, and when? Give, for each time, how
#    many `prof.step()` calls had been made when it ran (1 for the first call; that is
#    `prof.step_num` inside `on_trace_ready`). Work it out, then check with the cell below.
# 2. Move `prof.step()` out of the loop (call it once after the loop). What happens to the trace
#    and why?
# 3. Time `iter(loader)` alone, then `next(iter(loader))`, for `num_workers=0` and `2`. Which of
#    the three mistakes does each number show? Why is `iter(loader)` nearly free with 0 workers
#    but not with 2 (section 7)?
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 1: fill in your answer, a list such as [3, 7]: for each run of
# on_trace_ready, how many prof.step() calls had been made (prof.step_num) when it ran.
my_answer = None
ready_at = []
with profile(activities=[ProfilerActivity.CPU], on_trace_ready=lambda p: ready_at.append(p.step_num),
             schedule=schedule(skip_first=2, wait=1, warmup=1, active=2, repeat=3)) as p:
    for _ in range(20):
        p.step()
if my_answer is not None:
    print("right!" if list(my_answer) == ready_at else "not quite: count skip_first, then cycles of wait + warmup + active")


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: when on_trace_ready runs
# Why: the schedule's only clock is the count of prof.step() calls. The first skip_first calls are
# ignored; then each cycle takes wait + warmup + active calls, and on_trace_ready runs at the call
# that ends the cycle's last active step. So cycle k (0, 1, 2, ...) ends after
# skip_first + (k + 1) x (wait + warmup + active) calls, for `repeat` cycles, as long as the loop
# makes that many calls. Here: 2 + 4, 2 + 8, 2 + 12; the other 6 calls after that record nothing.
skip_first, wait, warmup, active, repeat, calls = 2, 1, 1, 2, 3, 20
cycle = wait + warmup + active
my_answer = [skip_first + (k + 1) * cycle for k in range(repeat) if skip_first + (k + 1) * cycle <= calls]
print("self-check:", "right!" if list(my_answer) == ready_at else "not quite")
say(f"on_trace_ready runs **{len(my_answer)} times**, after calls {my_answer} of prof.step(); each time the "
    f"trace holds that cycle's {active} active steps, and the last {calls - my_answer[-1]} calls are not recorded.")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: prof.step() once, after the loop
# Why: the schedule moves on only when prof.step() is called. With the call after the loop, every
# step of the loop runs in the schedule's first state, skip_first (not recorded), and the single
# call only moves it to `wait`, which records nothing either. So the profiler never starts
# recording: on_trace_ready never runs, no trace is written, and there is nothing to average.
# Run the lesson's loop and schedule that way and look:
moved_traces = []
with profile(activities=activities, schedule=plan, on_trace_ready=moved_traces.append) as moved:
    for b in range(3):  # any number of steps: without prof.step() inside, the schedule never sees them
        one_step(b)
    moved.step()
try:
    recorded = f"{len(moved.key_averages())} event names"
except AssertionError as e:  # torch: "Profiler must be initialized before getting key averages"
    recorded = f"nothing ({e})"
say(f"With prof.step() after the loop: {len(moved_traces)} traces (vs {len(traces)} in section 3), "
    f"and key_averages() has {recorded}. The profiler counted {moved.step_num} step.")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: iter(loader) and next(iter(loader)) with 0 and 2 workers
# Why: with 0 workers, iter() only makes an object; the loading happens in next(), in this process.
# So timing iter() alone is mistake 1 (timing a lazy thing). With 2 workers, iter() starts two
# processes and hands each its first batches to load (prefetch_factor x workers), so it costs the
# start-up, and the first next() waits for a worker to start and load: mistake 2 (that first
# batch is warm-up, not the steady state). No number here shows mistake 3: nothing runs on a GPU.
loader_took = {}  # (what, workers) -> seconds, one sample per new loader, 0 and 2 workers in turns
for _ in range(config.pick(quick=1, full=5, site=5)):
    for workers in (0, 2):
        loader_w = DataLoader(TensorDataset(torch.arange(64 * B)), batch_size=B, num_workers=workers)
        t0 = time.perf_counter()
        it = iter(loader_w)
        t1 = time.perf_counter()
        next(it)
        t2 = time.perf_counter()
        del it  # shuts the workers down
        for what, seconds in (("iter", t1 - t0), ("next", t2 - t1)):
            loader_took.setdefault((what, workers), []).append(seconds)
ms = {f"{what}{w}": statistics.median(v) * 1e3 for (what, w), v in loader_took.items()}
for w in (0, 2):
    print(f"num_workers={w}: iter() {ms[f'iter{w}']:7.2f} ms, first next() {ms[f'next{w}']:7.2f} ms (medians)")
say(reading.iter_reading(*(compare(loader_took[a], loader_took[b], paired=True) for a, b in (
    (("iter", 2), ("iter", 0)), (("next", 0), ("iter", 0)), (("iter", 2), ("next", 2)))), ms))

# %% [markdown]
# ## Further reading
#
# * [`torch.profiler`](https://docs.pytorch.org/docs/stable/profiler.html) (PyTorch docs): the API of section 2: `schedule`, `record_function`, `key_averages`, trace export.
# * [PyTorch Profiler recipe](https://docs.pytorch.org/tutorials/recipes/recipes/profiler_recipe.html) (PyTorch tutorials): a walk through the profiler on a model, with the tables this lesson reads.
# * [PyTorch Benchmark recipe](https://docs.pytorch.org/tutorials/recipes/recipes/benchmark.html) (PyTorch tutorials): `torch.utils.benchmark.Timer` and the mistakes it avoids (threads, CUDA sync, warm-up).
# * [CUDA semantics](https://docs.pytorch.org/docs/stable/notes/cuda.html) (PyTorch docs): why a CUDA call returns before the GPU is done, and what synchronises it.
