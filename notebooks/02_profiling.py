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

B = config.pick(quick=8, full=32)
n = B * config.pick(quick=4, full=16)
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
        x, y = torch.stack(images), torch.tensor([labels[k] for k in idx])
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
# * With CUDA, more columns appear: **Self CUDA** and **CUDA total**, time on the GPU. A CPU total
#   far above the CUDA total of the same row means the GPU waits for the CPU.
#
# The same numbers are there to compute with, per event name:

# %%
from gpufeed.course.prose import say, times
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

blobs = [f.read_bytes() for f in files[:B]]
# Creating a map() takes well under a microsecond, less than one perf_counter pair can resolve, so it
# is timed as anything that short must be: 10,000 creations per sample, 5 samples, the median.
lazy_s = statistics.median(timeit.repeat(lambda: map(decode_pil, blobs), number=10_000, repeat=5)) / 10_000
start = time.perf_counter()
decoded = list(map(decode_pil, blobs))  # list() takes every item out: now they are decoded
eager_s = time.perf_counter() - start
say(f"'Decoding' {B} images lazily: {lazy_s * 1e9:,.0f} ns. Really decoding them: {eager_s * 1e3:.1f} ms, "
    f"**{times(eager_s / lazy_s, more='longer', less='shorter', same='as long', digits=0)}**.")

# %% [markdown]
# ### Mistake 2: no warm-up
#
# The first call of anything pays once for what later calls reuse: memory allocation, a new
# model's first backward pass, kernels chosen for a new shape, and for a DataLoader, starting its
# worker processes. Timing the first call measures the start-up, not the steady state.

# %%
from torch.utils.data import DataLoader, TensorDataset

from gpufeed.measure.harness import benchmark

loader = DataLoader(TensorDataset(torch.arange(64 * B)), batch_size=B, num_workers=2)
start = time.perf_counter()
batches = iter(loader)
next(batches)  # iter() started two workers; the first batch waits for them to start and load it
first_batch_s = time.perf_counter() - start
start = time.perf_counter()
rest = sum(1 for _ in batches)
per_batch_s = (time.perf_counter() - start) / rest
print(f"DataLoader: first batch {first_batch_s * 1e3:.1f} ms, then {per_batch_s * 1e3:.2f} ms per batch "
      f"(the first {times(first_batch_s / per_batch_s, more='longer', less='shorter', same='as long', digits=0)})")

x = torch.stack(decoded).to(S.device)
y = torch.zeros(B, dtype=torch.long, device=S.device)
fresh = train_step(tiny_model(10).to(S.device))
start = time.perf_counter()
fresh(x, y)  # ends with loss.item(), so the GPU's work is included
first_s = time.perf_counter() - start
steady = benchmark(lambda: fresh(x, y), name="train step", warmup=2, repeats=config.pick(5, 20), items=B)
print(f"a new model's first training step: {first_s * 1e3:.1f} ms; steady state: {steady.median * 1e3:.1f} ms "
      f"(the first {times(first_s / steady.median, more='longer', less='shorter', same='as long', digits=1)})")
if first_s < 1.2 * steady.median:
    print("Here the new model's first step was not clearly slower: the profiled loop of section 3 already "
          "paid, once for the whole process, what a first step costs (kernels chosen for these shapes, "
          f"memory from the allocator), and the steady state's spread ({steady.iqr * 1e3:.1f} ms IQR) hides the rest.")

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
    for synced in (False, True):
        start = time.perf_counter()
        for _ in range(10):
            a @ a
        if synced:
            torch.cuda.synchronize()
        sync_ms.append(Measurement("matmul, synced" if synced else "matmul, no sync",
                                   [(time.perf_counter() - start) / 10], params={"n": 4096}))
        torch.cuda.synchronize()
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
    off = synced.median / no_sync.median
    print(f"4096x4096 matmul: {no_sync.median * 1e6:,.0f} us per call without a sync, "
          f"{synced.median * 1e6:,.0f} us with one (on {sync_machine['gpu']}): the timer without a sync read "
          f"{times(off, 'the work took', more='less', less='more', same='about the same', flat=0.1, digits=1)}"
          + (": it timed the queueing, not the work." if off > 1.1 else
             ": here the launches did not return before the work was done; one run cannot say why, so re-run it."))

# %% [markdown]
# ## 8. Doing it right: `torch.utils.benchmark`
#
# `torch.utils.benchmark.Timer` warms up, synchronises CUDA when it is present, chooses how many
# runs to time (`blocked_autorange`), keeps every sample, and pins the number of threads so that
# two results are comparable. `Compare` prints many results as one table: rows are `sub_label`s,
# columns `description`s, grouped by `label`. Here: each decoder this machine has, on a batch of
# JPEGs at two sizes.

# %%
from torch.utils import benchmark as tb

from gpufeed.data import jpeg

sizes = {"224x224": blobs}
big = synth_folder(config.cache_dir() / "lesson02-640x480-q90-n8", n=8, size=(640, 480), quality=90).path
sizes["640x480"] = [p.read_bytes() for p in sorted(big.rglob("*.jpg"))]
timers = []
for dec_name, decode in jpeg.available_decoders().items():
    for size, data in sizes.items():
        timer = tb.Timer("[decode(b) for b in data]", globals={"decode": decode, "data": data},
                         num_threads=1, label="JPEG decode, one thread", sub_label=dec_name,
                         description=f"{len(data)} x {size}")
        timers.append(timer.blocked_autorange(min_run_time=config.pick(0.2, 1.0)))
tb.Compare(timers).print()

# %% [markdown]
# The course's harness (`gpufeed.measure.harness.benchmark`, first used in lesson 00) does the same job and adds
# what the later lessons need: images/s and GB/s, a ratio to a baseline, the machine it ran on,
# and JSON. Its median should agree with `Timer`'s on the same work:

# %%
from gpufeed.measure.harness import compare

threads = torch.get_num_threads()
torch.set_num_threads(1)  # as Timer(num_threads=1) did
ours = [benchmark(lambda d=decode: [d(b) for b in sizes["224x224"]], name=name, items=B, repeats=5,
                  min_time=config.pick(0.2, 1.0))  # as long as Timer's min_run_time
        for name, decode in jpeg.available_decoders().items()]
torch.set_num_threads(threads)
print(compare(ours))
theirs = {m.task_spec.sub_label: m for m in timers if m.task_spec.description.endswith("224x224")}
ratios = {m.name: m.median / theirs[m.name].median for m in ours}
for m in ours:
    print(f"{m.name}: harness {m.median * 1e3:.2f} ms, Timer {theirs[m.name].median * 1e3:.2f} ms "
          f"(ratio {ratios[m.name]:.2f})")
if all(0.8 < r < 1.25 for r in ratios.values()):
    print("The two tools agree within 25%: the same work gives the same answer.")
else:
    print("They differ by more than 25%. They ran at different moments, and one run cannot say whether the "
          "machine's load changed between them (see the IQR and the noisy marks): re-run both cells and compare.")

# %% [markdown]
# ## 9. Saved
#
# What this lesson measured goes to this machine's results folder (a GPU run of ours, committed
# with the course, is the reference that learners without a GPU see above).

# %%
lesson = [steady, *ours, *(sync_ms if S.cuda else [])]
saved = results.save_lesson("lesson02", lesson, trace_summary=summary,
                            first_step_s=first_s, first_batch_s=first_batch_s, lazy_s=lazy_s, eager_s=eager_s)

# %% [markdown]
# ## 10. Your own loop: `diagnose`
#
# Everything above, pointed at a loop you bring: `gpufeed.measure.diagnose(loader, step)` runs your
# loader and your training step unchanged and splits the period into waiting inside `next()` and the
# step. It watches a few steps for copies from pageable memory and host syncs (on a GPU it profiles
# them and reads the trace as above), and measures two what-ifs: the loader alone, and the
# step on a batch already on the device. Each finding names the numbers behind it and the lesson
# that fixes it; nothing measured, nothing said. Here lesson 01's naive loading is the loader.

# %%
import itertools

from gpufeed.measure import diagnose


def naive_batches():  # lesson 01's loading, on the main thread: read, decode, stack
    for b in itertools.count():
        idx = [(b * B + k) % n for k in range(B)]
        yield torch.stack([decode_pil(files[k].read_bytes()) for k in idx]), torch.tensor([labels[k] for k in idx])


report = diagnose(naive_batches(), lambda b: step(b[0].to(S.device), b[1].to(S.device)),
                  batches=config.pick(quick=3, full=10), warmup=1)
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
iter_ms, first_ms = {}, {}
for workers in (0, 2):
    loader_w = DataLoader(TensorDataset(torch.arange(64 * B)), batch_size=B, num_workers=workers)
    t0 = time.perf_counter()
    it = iter(loader_w)
    t1 = time.perf_counter()
    next(it)
    t2 = time.perf_counter()
    rest = sum(1 for _ in it)
    steady_s = (time.perf_counter() - t2) / rest
    del it  # shuts the workers down
    print(f"num_workers={workers}: iter() {(t1 - t0) * 1e3:7.2f} ms, first next() {(t2 - t1) * 1e3:7.2f} ms, "
          f"then {steady_s * 1e3:.3f} ms per batch")
    iter_ms[workers], first_ms[workers] = (t1 - t0) * 1e3, (t2 - t1) * 1e3
say(f"iter() took {iter_ms[2]:.1f} ms with 2 workers and {iter_ms[0]:.2f} ms with 0: with workers "
    f"**{times(iter_ms[2] / iter_ms[0], more='longer', less='shorter', same='as long', digits=0)}**. "
    + ("With 0 workers the work is in next() (" + f"{first_ms[0]:.2f} ms): timing only iter() measures nothing (mistake 1). "
       if first_ms[0] > iter_ms[0] else f"With 0 workers even the first next() ({first_ms[0]:.2f} ms) took no longer than iter(). ")
    + (f"With 2 workers most of the start-up landed in iter() ({iter_ms[2]:.1f} ms, which starts the worker processes), "
       f"not in the first next() ({first_ms[2]:.1f} ms): timing only the first batch would miss it, and timing both "
       "together measures the start-up, not the steady state (mistake 2)." if iter_ms[2] > first_ms[2] else
       f"With 2 workers the first next() took {first_ms[2]:.1f} ms, waiting for a worker to start and load: timing "
       "only the first batch measures the start-up, not the steady state (mistake 2)."))

# %% [markdown]
# ## Further reading
#
# * [`torch.profiler`](https://docs.pytorch.org/docs/stable/profiler.html) (PyTorch docs): the API of section 2: `schedule`, `record_function`, `key_averages`, trace export.
# * [PyTorch Profiler recipe](https://docs.pytorch.org/tutorials/recipes/recipes/profiler_recipe.html) (PyTorch tutorials): a walk through the profiler on a model, with the tables this lesson reads.
# * [PyTorch Benchmark recipe](https://docs.pytorch.org/tutorials/recipes/recipes/benchmark.html) (PyTorch tutorials): `torch.utils.benchmark.Timer` and the mistakes it avoids (threads, CUDA sync, warm-up).
# * [CUDA semantics](https://docs.pytorch.org/docs/stable/notes/cuda.html) (PyTorch docs): why a CUDA call returns before the GPU is done, and what synchronises it.
