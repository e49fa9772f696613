# %% [markdown]
# # 00 · Setup and your machine
#
# **What you will learn:** what this machine offers the course, and its *ceilings*: how fast it
# copies memory, sends bytes to a GPU, decodes JPEGs and reads files. No image pipeline on this
# machine can beat these numbers, so every later lesson is read against them.
#
# **Time:** about 10 minutes (1 minute in quick mode). **Prerequisites:** none.

# %%
import gpufeed

S = gpufeed.setup("00")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. What is here
#
# The environment check lists the libraries, the GPU (if any), the cores, whether Pillow decodes
# JPEG with libjpeg-turbo, and whether pinned memory can be allocated. Rows marked `-` are
# limitations: the course still runs, and cells that need the missing piece say so and show
# instead our measurement from a real GPU where one is committed (`results/<gpu>/`), else figures
# others published about the same thing, each labelled with its hardware and its source. The same
# check runs in a terminal as `python -m gpufeed doctor`.

# %%
from gpufeed.course import doctor

print(doctor.report())

# %% [markdown]
# ## 2. The storage hierarchy
#
# Before a training step can use an image, its bytes climb a ladder: from the network or a disk
# (HDD, SATA SSD, NVMe) into RAM (the page cache), through the CPU (decode), across the bus into
# GPU memory. A pipeline runs at the speed of its slowest rung, and that is not always the lowest
# one: decoding JPEGs on one core (section 5) is often slower than the disk they come from. We
# measure the rungs this machine has, and set beside them what others published for the rungs it
# may lack (a GPU, NVMe, RAID, network storage), each labelled with its hardware and its source,
# never as ours:
#
# | rung | measured below as |
# |---|---|
# | RAM | memcpy GB/s (section 3) |
# | RAM to GPU | host-to-device GB/s, pageable vs pinned (section 4) |
# | CPU decode | JPEG images/s on one core (section 5) |
# | disk vs page cache | file read GB/s, cold vs warm (section 6), beside published NVMe, RAID and network storage |

# %% [markdown]
# ## 3. Memory copy: the ceiling of anything that touches every byte
#
# First by hand: copy a buffer into another with `dst.copy_(src)` and time it with the course's
# harness, which warms up, synchronises CUDA, keeps every sample and reports the median and the
# inter-quartile range (lesson 02 shows why each of these matters).

# %%
import torch

from gpufeed import config
from gpufeed.measure.harness import benchmark

nbytes = config.pick(quick=16 << 20, full=256 << 20)  # 16 MiB or 256 MiB
src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
dst = torch.empty_like(src)
first = benchmark(lambda: dst.copy_(src), name="memcpy", nbytes=nbytes, repeats=10)
print(first)

# %% [markdown]
# The same measurement is `gpufeed.measure.ceilings.memcpy`. Is that number the RAM's? Sweeping
# the size asks where the caches end: a buffer smaller than the CPU's last-level cache (L3, read
# below from the operating system) may be copied from cache rather than from RAM, and a buffer
# several times the L3 cannot be, so the sweep ends at four times the L3. For datasets, the RAM
# rate is the number that matters. A copy of 64 KiB takes microseconds, less than the timer's own
# noise, so `memcpy` repeats small copies within each timed sample until it has copied 64 MiB (the
# harness's `number`; lesson 02 shows why). Look at the plot for a step near the L3 size: whether
# there is one, and how tall, depends on the CPU.

# %%
import matplotlib.pyplot as plt

from gpufeed.measure import ceilings, plotting, storage

from gpufeed.measure.machine import cache_bytes

l3 = cache_bytes(3)  # bytes, or None where the OS does not say
ram_bytes = ceilings.ram_bytes(l3, floor=config.pick(quick=16 << 20, full=256 << 20))  # 4x the L3, at least the floor
sizes = ceilings.sweep_sizes(ram_bytes)  # bytes: 64 KiB, 256 KiB, 1 MiB, ... (x4 each), then ram_bytes
sweep = [ceilings.memcpy(n, repeats=config.pick(quick=5, full=10, site=10)) for n in sizes]
fig, ax = plt.subplots()
ax.plot([n / 2**20 for n in sizes], [m.gb_per_s for m in sweep], "o-", color=plotting.COLORS["copy"])
ax.set_xscale("log")
ax.set_xlabel("buffer size (MiB)")
ax.set_ylabel("copy rate (GB/s)")
ax.set_title("memcpy: caches, then RAM")
if l3:
    ax.axvline(l3 / 2**20, color="gray", linestyle="--", label=f"L3 = {l3 / 2**20:g} MiB")
    ax.legend()
plotting.caption(fig, S.machine)
plt.show()

# %%
from gpufeed.course.lesson00 import reading
from gpufeed.course.prose import say

ram = sweep[-1]  # several times the L3: RAM's rate
in_cache = [m for n, m in zip(sizes, sweep) if l3 and 2 * n <= l3]  # source and destination inside the L3
lines, earlier = [reading.ram_sentence(ram, l3)], None
if in_cache:  # the same question twice (a copy in the caches against RAM): the second reads the first
    fastest = max(in_cache, key=lambda m: m.gb_per_s)
    lines.append(reading.cache_sentence(fastest, ram, l3, f"The fastest copy inside the L3 ({fastest.name})"))
    earlier = (reading.cache_verdict(fastest, ram), "the sweep's fastest copy inside the L3")
lines.append(reading.cache_sentence(first, ram, l3, f"The first cell's {nbytes >> 20} MiB copy", earlier, cause=False))
if torch.get_num_threads() > 1:  # torch splits a copy over its threads: time the same copy on one and on all
    one, every = ceilings.memcpy_threads(nbytes, (1, torch.get_num_threads()), repeats=config.pick(3, 10, site=10))
    lines.append(reading.split_copy_sentence(one, every, slow=reading.cache_verdict(first, ram).kind == "slower"))
say("\n\n".join(lines))

# %% [markdown]
# ## 4. Host to device: pageable, pinned, and pin-then-copy
#
# A GPU's copy engine reads *page-locked* (pinned) host memory. From ordinary (pageable) memory,
# the driver first copies into a pinned staging buffer of its own, then across the bus: two
# copies, and the host waits for the first. The call returns once the last bytes are in the
# staging buffer, while their trip across the bus may still be running (CUDA's
# [API synchronization behavior](https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html)).
# From pinned memory there is one copy, and with `non_blocking=True` the host goes on while it
# runs (lesson 08 overlaps it with compute). `non_blocking=True` from pageable memory is safe too:
# the host still waits for the staging copy.
#
# Pinning is not free: page-locking memory, or copying a batch into an already pinned buffer,
# costs time too. So three series: **pageable** (`dst.copy_(x)`), **pinned** (`x` pinned once,
# before the timing; the copy alone) and **pin+copy** (`dst.copy_(x.pin_memory(), non_blocking=True)`,
# all timed: what a loop that pins each batch pays). This cell needs CUDA. Without it, it shows our
# committed measurement from a real GPU (`ceilings.committed`: lesson 00's own file, else the
# ceilings that `python -m gpufeed bench --ceilings` measured on an H100 in full mode), labelled
# with the GPU and the file; the last cell of this section sets it beside what NVIDIA published.

# %%
from gpufeed.course import transfer
from gpufeed.measure import published, results

if S.cuda:
    h2d = ceilings.h2d_series([1 << p for p in range(20, (25 if S.quick else 29), 2)])  # 1 MiB .. 256 MiB
    ours = results.Reference(h2d, S.machine, "measured here")
else:
    ours = ceilings.committed(lambda m: m.name.startswith("H2D"))  # None where nothing is committed
    h2d = []  # nothing measured here
    print(f"No CUDA here: showing the copies of {ours.hardware} from {ours.source}." if ours else
          "No CUDA here, and no GPU measurement of ours is committed (results/<gpu>/lesson00.json or "
          "ceilings.json): the last cell of this section shows what others published instead.")

# %%
if ours:
    series = {src: [m for m in ours.measurements if ceilings.h2d_source(m) == src] for src in ceilings.H2D_SOURCES}
    largest = {src: ms[-1] for src, ms in series.items() if ms}  # each series' largest copy
    colors = {"pageable": plotting.COLORS["baseline"], "pinned": plotting.COLORS["copy"], "pin+copy": "tab:purple"}
    if len(series["pinned"]) > 1:  # a series of sizes: rate against size
        fig, ax = plt.subplots()
        for src, ms in series.items():
            if ms:
                ax.plot([m.params["nbytes"] / 2**20 for m in ms], [m.gb_per_s for m in ms], "o-", color=colors[src],
                        label=plotting.ratio_label(src, ms[-1].gb_per_s / largest["pageable"].gb_per_s))
        ax.set_xscale("log")
        ax.set_xlabel("copy size (MiB)")
        ax.set_ylabel("host to device (GB/s)")
        ax.legend(title="largest size, vs pageable")
        plotting.caption(fig, ours.machine)
    else:  # one size (the committed ceilings): a bar each, ratios to pageable
        fig, ax = plotting.bars(list(largest.values()), rate="bytes", machine=ours.machine,
                                title=f"host to device on {ours.hardware} ({ours.source.split(',')[0]})")
    plt.show()

# %%
if ours:
    say(transfer.h2d_sentence(ours))

# %% [markdown]
# NVIDIA's post *How to Optimize Data Transfers in CUDA C/C++* (2012) timed the same two copies,
# 16 MiB from pageable and from pinned memory, on a laptop and on a desktop of its day. Their
# machines are not yours, so their GB/s say little about your bus; the ratio, what pinning buys,
# is the point. Each row below names its hardware, its source and its copy size: yours where CUDA
# is here, else our committed reference (the copy nearest 16 MiB it holds), then NVIDIA's.

# %%
theirs = published.for_lesson("lesson00")
say(transfer.h2d_table([ours] if ours else [], theirs))
if ours:
    say(reading.pinning_then_and_now(ours, theirs))

# %% [markdown]
# ## 5. JPEG decode: images per second on one core
#
# A DataLoader worker decodes on one core, so a JPEG-folder loader's best case is about this rate
# times the number of workers. The course generates its images from real photos (see
# `assets/photos/LICENSES.md`); the bytes are read into memory first, so that we time the decoder
# and not the disk.

# %%
from gpufeed.data import jpeg
from gpufeed.measure.synth import synth_folder

n_images = config.pick(quick=16, full=256)  # the sentences below compare nothing: no site size
decode_ms = []
for w, h in ((224, 224), (640, 480)):
    folder = synth_folder(config.cache_dir() / f"lesson00-{w}x{h}-q90-n{n_images}", n=n_images, size=(w, h), quality=90).path
    jpegs = [p.read_bytes() for p in sorted(folder.rglob("*.jpg"))]
    for name, decode in jpeg.available_decoders().items():
        decode_ms.append(ceilings.decode_rate(jpegs, decode, name=f"{name} {w}x{h}", repeats=config.pick(3, 7, site=7)))
print(f"Pillow uses libjpeg-turbo: {jpeg.pillow_uses_turbo()}")
for m in decode_ms:
    print(m)

# %% [markdown]
# Ratios only compare decoders on the same images: a 640x480 image has 6x the pixels of a
# 224x224 one, so each size gets its own chart, with ratios to the first decoder at that size.

# %%
sizes_wh = ((224, 224), (640, 480))
fig, axes = plt.subplots(len(sizes_wh), 1, figsize=(7, 1 + 0.9 * len(decode_ms)))
for ax, (w, h) in zip(axes, sizes_wh):
    plotting.bars([m for m in decode_ms if m.name.endswith(f"{w}x{h}")], ax=ax, machine=S.machine,
                  title=f"JPEG decode of {w}x{h} on one core (ratios vs the first at this size)")
fig.tight_layout()
plt.show()
cores = S.machine["cores"]
lines = []
for w, h in sizes_wh:
    best = max((m for m in decode_ms if m.name.endswith(f"{w}x{h}")), key=lambda m: m.items_per_s)
    lines.append(f"- {w}x{h}: the fastest decoder here ({best.name.split()[0]}) does "
                 f"**{best.items_per_s:,.0f} images/s** per core; all {cores} cores together at most about "
                 f"{best.items_per_s * cores:,.0f} images/s.")
say("\n".join(lines))

# %% [markdown]
# ## 6. Reading files: cold vs warm page cache
#
# The first read of a file comes from the disk; the operating system keeps what it read in RAM
# (the *page cache*), so the second read comes from memory. To measure a cold read without
# rebooting, we ask the OS to drop this file's pages with `posix_fadvise(DONTNEED)` before each
# read. Some file systems (network shares, container overlays, virtual machine disks) keep the
# data anyway, so the cell also asks the OS how many bytes each read fetched from storage (Linux
# counts them) and says whether the "cold" read reached the disk. Both reads are one thread's
# `read()` into a buffer of ours: a copy, so the page-cache rate is a copy's rate, not the RAM's.

# %%
read_bytes = config.pick(quick=32 << 20, full=1 << 30)  # 32 MiB or 1 GiB
path = ceilings.make_file(config.cache_dir() / f"lesson00-read-{read_bytes >> 20}MiB.bin", read_bytes)
reads = config.pick(quick=3, full=5, site=5)  # 5 per arm: the least a verdict reads
cold = storage.file_read(path, cold=True, repeats=reads)
warm = storage.file_read(path, cold=False, repeats=reads)
fig, ax = plotting.bars([cold, warm], rate="bytes", machine=S.machine, title="reading one file")
plt.show()
on_disk = storage.reached_disk(cold, warm)  # fetched from storage (where the OS counts), else 1.5x slower
say(reading.read_sentence(cold, warm, on_disk))

# %% [markdown]
# ### The storage ladder: this machine beside NVMe, RAID and network storage
#
# "Fast storage" in the sources of this course means RAM (the page cache), NVMe SSDs, and several
# of them striped together (RAID-0); a dataset on network storage comes slower. This machine reads
# from its own disk through its page cache, so the ladder below sets those two reads beside the
# H100 node's, from our committed ceilings, and beside read rates others published, each with its
# hardware and its source (`results/published.json`). Theirs are not measured here: a vendor's or
# a blog's number on its own hardware, many threads or a RAID-0 read straight into GPU memory, a
# network service's documented limit. Ours are one thread's `read()`. Read them as orders of
# magnitude, not as a race.

# %%
import textwrap

node = ceilings.committed(lambda m: m.name.startswith("read "), names=["ceilings"])  # the H100 node's reads
fast_storage = [f for f in published.for_lesson("lesson00") if not f.id.startswith("h2d-")]  # NVMe, RAID, network
honest_cold = cold if on_disk else None  # a "cold" read the file system served from RAM is not the disk
ladder = storage.storage_ladder(honest_cold, warm, fast_storage, node)
rows = ["| read from | GB/s | as published | whose number |", "|---|---|---|---|"]
rows += [f"| {r.what} | {r.gb_per_s:.2f} | {r.published or '-'} | {r.source} |" for r in ladder]
say("\n".join(rows))
fig, ax = plt.subplots(figsize=(7, 0.6 + 0.62 * len(ladder)))
whose = {"measured here": plotting.COLORS["copy"]}  # dark blue: here; light blue: our reference node; gray: theirs
ax.barh([textwrap.fill(r.what, 36) for r in ladder], [r.gb_per_s for r in ladder],
        color=[whose.get(r.source, plotting.COLORS["decode"]) if r.ours else "lightgray" for r in ladder])
ax.set_xscale("log")
ax.xaxis.set_major_formatter("{x:g}")
ax.invert_yaxis()
ax.set_xlabel("read GB/s (log scale); gray: published by others, not measured here")
ax.set_title("the storage ladder")
plotting.caption(fig, S.machine, note="dark blue: measured here; light blue: our reference node")
plt.show()

# %%
if honest_cold:  # storage against storage: each published rung beside this machine's disk
    say("Each published rung against this machine's disk (theirs measured on their hardware, with their "
        "threads; ours here, one thread: orders of magnitude, not a race):\n\n"
        + reading.rung_lines(fast_storage, honest_cold))
else:
    say("The cold read here did not reach the disk (see above), so no published rung is set against it.")

# %% [markdown]
# ## 7. This machine's ceilings, saved
#
# The measurements go to this machine's results folder (`gpufeed.config.results_dir()`), with
# the machine's description, so that later lessons and `python -m gpufeed bench` can compare.

# %%
everything = [ram, *h2d, *decode_ms, cold, warm]  # h2d: measured here, or empty
results.save_lesson("lesson00", everything)
say(reading.rates_table([ram, cold, warm, *h2d[-3:]]))  # rates: the rows move different byte counts

# %% [markdown]
# ## Key takeaways
#
# * Every pipeline has ceilings: RAM copy rate, host-to-device rate, decode rate per core, disk
#   rate. Measure them first; they tell you which optimisation can possibly pay off.
# * On a GPU, a copy from pinned memory is faster and can be asynchronous. Pinning a batch first
#   is a copy in RAM of its own: section 4 shows whether pin-then-copy still beats pageable on the
#   GPU measured; it costs the loop least when it runs off the critical path (lesson 07).
# * JPEG decode is usually the lowest ceiling of a folder of images: images/s per core times the
#   number of cores. Lessons 04-06 show how to lift it (smaller JPEGs, or decode once and memmap).
# * Storage is a ladder: the page cache, then the disk, which may be one NVMe SSD, several in
#   RAID-0 (read in parallel, they can outrun one thread reading the page cache), or network
#   storage. Section 6 sets this machine's reads beside published ones: know which rung your
#   dataset is read from, cold, in the first epoch.
#
# ## Exercises
#
# 1. Re-run the memcpy cell after `torch.set_num_threads(1)`. How much of the copy rate came from
#    using several cores?
# 2. Using the numbers above, which is lower on this machine: the decode ceiling of all cores for
#    640x480 JPEGs, or the memcpy ceiling expressed in 640x480 uint8 images/s? By how much? Check
#    your answer with the cell below.
# 3. Point `ceilings.make_file` at a folder on another disk (a USB stick, a network share) and
#    compare cold and warm reads there.
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 2: fill in your estimate (a ratio, memcpy images/s / decode images/s).
my_estimate = None
best640 = max((m for m in decode_ms if m.name.endswith("640x480")), key=lambda m: m.items_per_s)
sentence, answer = reading.lower_ceiling(ram, best640, S.machine["cores"], (640, 480))
if my_estimate is not None:
    print("close enough!" if abs(my_estimate / answer - 1) < 0.25 else
          "not quite: memcpy GB/s x 1e9 / (3 x 640 x 480 bytes), over the decode images/s of one core x the cores")


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: how much of the copy rate comes from several cores
# Why: torch splits a large `copy_` across its intra-op threads, one chunk per core. One core alone
# cannot keep every memory channel busy (it has only so many cache-line misses in flight), so the
# rate with all threads over the rate with one says what the other cores add. `ceilings.memcpy`
# takes `threads=`: it calls `torch.set_num_threads` for the timing and restores it afterwards, so
# the rest of the lesson keeps all its threads. The two are timed in turns (one thread, all, one,
# all, ...), so that a burst of other work slows both rather than one (lesson 02).
threads = torch.get_num_threads()
one_core, all_cores = ceilings.memcpy_threads(ram_bytes, (1, threads), repeats=config.pick(quick=3, full=9, site=11))
print(one_core, all_cores, sep="\n")  # a [noisy] mark: other work shared the cores; rerun
say(reading.threads_sentence(one_core, all_cores))

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: the decode ceiling against the memcpy ceiling, for 640x480 images
# Why: compare ceilings in one unit, images/s. A 640x480 RGB uint8 image is 3 x 640 x 480 = 921,600
# bytes, so memcpy's GB/s x 1e9 / 921,600 is how many images/s any step that touches every byte
# could move. Decoding runs on one core per image, so its ceiling is the fastest decoder's images/s
# on one core times the number of cores. Their ratio is the estimate the self-check asks for; far
# above 1 means that decoding, not memory, caps a folder of JPEGs (what lessons 04 and 05 attack).
# Both rates are compared sample by sample with the verdict method, as every comparison here is.
memcpy_images = ram.gb_per_s * 1e9 / (3 * 640 * 480)
decode_images = best640.items_per_s * S.machine["cores"]
my_estimate = memcpy_images / decode_images
say(sentence)

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: cold and warm reads on another disk
# Why: the cold read asks the kernel to drop the file's pages (posix_fadvise DONTNEED) before each
# read. Whether that shows the disk depends on the file system: a local disk obeys, tmpfs lives in
# RAM, network and overlay file systems may keep their own cache. So name the file system beside the
# numbers. A temporary folder on the other disk is removed afterwards: nothing is left behind.
import tempfile
from pathlib import Path

from gpufeed.measure.verdict import compare
from gpufeed.measure.machine import file_system

other_disk = None  # your folder on another disk, e.g. "/media/usb"; None: this machine's temporary folder

with tempfile.TemporaryDirectory(dir=other_disk) as folder:
    there = ceilings.make_file(Path(folder) / "read-test.bin", read_bytes)
    cold2, warm2 = (storage.file_read(there, cold=c, repeats=reads) for c in (True, False))
    fs_there, fs_here = file_system(there), file_system(path)
rows = [("the cache folder", fs_here, cold, warm),
        (f"a temporary folder{' in ' + other_disk if other_disk else ''} (removed since)", fs_there, cold2, warm2)]
for where, fs, c, w in rows:
    print(f"{where} on {fs}: cold {c.gb_per_s:.2f} GB/s, warm {w.gb_per_s:.2f} GB/s, warm {compare(w, c).words('cold')}")
kept = [f"{where} ({fs})" for where, fs, c, w in rows if not storage.reached_disk(c, w)]
say(f"The 'cold' reads of {' and '.join(kept)} did not reach a disk: that file system kept the data in RAM "
    "(tmpfs, or a cache of its own), so its 'cold' number is not a disk's." if kept else
    "Both file systems dropped the pages when asked: each cold number is its disk's own rate.")

# %% [markdown]
# ## Sources
#
# This course grew from four documents that are not published with it, and that we could not
# find in public at an address to link, so they are named here without one:
#
# * **"How to Efficiently Send Images to GPU"**, a talk by Francesco Saverio Zuppichini (a Slidev
#   deck): its profiler snippets in lesson 02; *"uint8 first, convert on the GPU; the bigger the
#   image, the bigger the gain"* in lesson 03; a frame going from 3.5 MB to 207 KB at
#   `ffmpeg -q:v 3` in lesson 04.
# * **"The fast train loops"**, a talk by Nasy (Typst slides): 100 `__getitem__` calls at about
#   122 us against one batched call at about 3.4 us (lesson 06); the DataLoader's options, moving
#   structures to devices, and `torch.load(f, map_location=device)` (with `jax.device_put` as its
#   JAX counterpart), in lesson 07.
# * **"Fast data augmentation in Pytorch using Nvidia DALI"**, a blog post written with DALI's
#   first, `ops` API (lesson 10).
# * **Unpublished timeline notes on reading images faster**: the storage ladder of lesson 00, the
#   pipeline timelines of lesson 01, the three ways to write an array of lesson 05, and lesson 11.
#
# Each lesson names the one it quotes, and measures the claim again on your machine rather than
# take its number. Everything else the course relies on is public and named where it is used:
# each lesson ends with its Further reading, and the figures others published that the lessons
# show (the CUDA-only cells without a GPU, the storage ladder above) are kept, each with its
# source, in `results/published.json`.

# %% [markdown]
# ## Further reading
#
# * [How to Optimize Data Transfers in CUDA C/C++](https://developer.nvidia.com/blog/how-optimize-data-transfers-cuda-cc/) (NVIDIA Technical Blog): the pageable-versus-pinned measurement of section 4, with the driver's staging copy drawn; its figures are the ones shown when no GPU is here.
# * [CUDA C++ Best Practices Guide](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html) (NVIDIA): NVIDIA's own rules for host-device transfers: fewer, larger, pinned, overlapped.
# * [Concepts overview](https://docs.kernel.org/admin-guide/mm/concepts.html) (Linux kernel admin guide, memory management): pages, the page cache and reclaim, the kernel's side of section 6's cold and warm reads.
# * [PyTorch Benchmark recipe](https://docs.pytorch.org/tutorials/recipes/recipes/benchmark.html) (PyTorch tutorials): why a timing warms up, synchronises and keeps every sample, as the course's harness does.
