# %% [markdown]
# # 07 · DataLoader knobs and moving structures
#
# **What you will learn:** what `num_workers`, `prefetch_factor`, `persistent_workers` and
# `pin_memory` do, measured as sweeps on a JPEG folder and on a memmap dataset; what
# `non_blocking=True` really does, and why the GPU-to-CPU direction is unsafe without a sync; how
# to move nested batches (a recursive function, pytrees, optree, `TensorDict`, and
# `torch.load(f, map_location=device)` from a file); and why start methods decide where your
# dataset code must live. Folded "Deeper" sections show internals; the main line reads on
# without them.
#
# **Time:** about 30 minutes (2 in quick mode). **Prerequisites:** [05 · Memory-mapped
# datasets](05_memmap.ipynb), [06 · Batched fetching](06_batched.ipynb).

# %%
import gpufeed

S = gpufeed.setup("07")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The knobs
#
# `DataLoader(dataset, batch_size, ...)` with `num_workers=W > 0` starts W worker processes. Each
# builds whole batches (`__getitem__` per sample, then `collate_fn`) and sends them back to the main
# process through shared memory. The knobs:
#
# | knob | what it does | what it costs |
# |---|---|---|
# | `num_workers` | W processes build batches in parallel | a process each; past the cores they only compete |
# | `prefetch_factor` | each worker keeps this many batches in flight (W x factor in total) | memory |
# | `persistent_workers` | keep the workers alive between epochs | memory held between epochs |
# | `pin_memory` | one thread in the main process copies every batch into pinned (page-locked) memory | a copy of every batch, on one core; needs a GPU |
# | `multiprocessing_context` | how workers start: fork, spawn, forkserver (section 5) | seconds per worker for spawn |
#
# **Threads first.** A worker runs torch with *one* intra-op thread: `_worker_loop` calls
# `torch.set_num_threads(1)`, because W workers each running as many threads as there are cores
# would fight over them. The main process keeps its default. How much does that matter for a
# collate (a `torch.stack` of 64 images of 224x224)?

# %%
import torch

from gpufeed import config
from gpufeed.course.lesson07 import reading
from gpufeed.course.prose import say
from gpufeed.measure.verdict import compare, in_turns
from gpufeed.measure.harness import interleave

default_threads = torch.get_num_threads()
samples = list(torch.randint(0, 256, (64, 3, 224, 224), dtype=torch.uint8))  # what a collate receives


def stack_with(threads):  # 3 collates with this many torch threads
    torch.set_num_threads(threads)
    for _ in range(3):
        torch.stack(samples)


collate = in_turns(lambda: stack_with(default_threads), lambda: stack_with(1), repeats=config.pick(quick=20, full=50, site=60),
                   names=(f"collate, {default_threads} torch threads", "collate, 1 torch thread"), warmup=3)
threads_ms = [collate.b, collate.a] if default_threads > 1 else [collate.b]
torch.set_num_threads(1)  # for the rest of this lesson: see below
say(reading.threads(collate.verdict, default_threads=default_threads, many_ms=collate.a.median / 3 * 1e3,
                    one_ms=collate.b.median / 3 * 1e3))

# %% [markdown]
# On busy cores (other programs, or our own workers) extra threads wait for a core; on an idle
# many-core machine they help. This lesson runs its main process with **one torch thread**, like
# each worker, whatever the cell above found: once workers run, the main process's threads compete
# with them, and with one thread everywhere `num_workers=W` means W cores plus the main process, a
# fair comparison. (A worker that should use more threads sets them in a `worker_init_fn`.)
#
# ## 2. Sweeps: `num_workers`, then the others
#
# Two datasets of the same images: a folder of JPEGs (`gpufeed.data.folder.ImageFolderDataset`: open,
# decode, resize per sample) and the memmap of lesson 05 built from it, served to workers a batch
# at a time by `gpufeed.data.arrays.MemmapDataset` (one `index_select` per batch, lesson 06).

# %%
from gpufeed.data.folder import ImageFolderDataset
from gpufeed.course.lesson07.knobs import worker_counts
from gpufeed.data.arrays import MemmapDataset
from gpufeed.measure.machine import usable_cores
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.measure.synth import synth_folder

cores, side = usable_cores(), 224
n_images, batch_size = config.pick(quick=64, full=2000, site=384), config.pick(quick=16, full=64)
here = config.cache_dir() / "lesson07"
jpeg_dir = synth_folder(here / f"jpeg-{side}-{n_images}", n=n_images, size=(side, side),
                        workers=config.pick(quick=1, full=cores), progress=False).path  # quick: no process pool
mm_dir = build_memmap(jpeg_dir, here / f"mm-{side}-{n_images}", size=(side, side), reuse=True, progress=False).path
datasets = {"JPEG folder": ImageFolderDataset(jpeg_dir, size=(side, side)), "memmap": MemmapDataset(mm_dir)}
counts = worker_counts(cores)
print(f"{n_images} images of {side}x{side}, batch {batch_size}; {cores} cores; num_workers in {counts}")

# %% [markdown]
# `gpufeed.course.lesson07.knobs.sweep` builds one shuffled DataLoader per configuration and times
# them **in turns** (one epoch of each, round after round: a busy spell of the machine slows them
# all), after an untimed epoch each (the workers start there), or in full mode blocks of batches
# within a time budget per configuration, so a sweep of 2,000 JPEGs takes seconds. With CUDA each
# batch is also sent to the GPU, and the `, pinned` rows add `pin_memory=True`. Each cell of the
# heatmap is images/s and its ratio to `num_workers=0`; the dashed line marks the cores.

# %%
import matplotlib.pyplot as plt

from gpufeed.measure import plotting
from gpufeed.course.lesson07.knobs import heatmap, sweep

kw = {"batch_size": batch_size, "repeats": config.pick(quick=3, full=5, site=9), "device": S.device if S.cuda else None,
      "budget_s": config.pick(quick=None, full=0.3)}  # full mode: about 0.3 s of timing per configuration
configs = [{"num_workers": w, "persistent_workers": True, "prefetch_factor": 2} for w in counts]
pinned = [{**c, "pin_memory": True} for c in configs  # with CUDA: at no workers, the cores and past them
          if c["num_workers"] in (0, cores, counts[-1])] if S.cuda else []  # (one pin thread serves them all)
rounds = config.pick(quick=3, full=5, site=15)  # for the sweep and the prefetch trial, whose verdicts 9 left undecided
ms = sweep(datasets, configs + pinned, **{**kw, "repeats": rounds})  # all in turns
for m in ms:
    m.params["dataset"] += ", pinned" if m.params.get("pin_memory") else ""  # a row of its own in the heatmap
fig, ax = heatmap(ms, cores=cores, machine=S.machine, title=f"images/s, batch {batch_size}, {side}x{side}")
plt.show()

# %%
runs = {(m.params["dataset"], m.params["num_workers"]): m for m in ms}  # (dataset, workers) -> its measurement
folder, memmap = ({w: runs[name, w].items_per_s for w in counts} for name in datasets)  # images/s by num_workers
most = counts[-1]


def vs(a, b):  # (dataset, workers) against another, in images/s, sample by sample (one sweep: in turns)
    return compare(*([runs[k].items / t for t in runs[k].samples] for k in (a, b)), higher=True, paired=True)


say(reading.workers(vs(("JPEG folder", cores), ("JPEG folder", 0)), vs(("JPEG folder", most), ("JPEG folder", cores)),
                    vs(("memmap", 0), ("JPEG folder", 0)), vs(("memmap", 1), ("memmap", 0)),
                    cores=cores, most=most))
for name in datasets if S.cuda else []:  # the pin-memory thread, where there is a GPU
    say(reading.pinned(name, vs((f"{name}, pinned", cores), (name, cores)), cores))

# %% [markdown]
# **`pin_memory`** (GPU only) copies every batch once more, into pinned memory, so that the copy
# to the GPU is faster and asynchronous. It is *one* thread for all workers: once they deliver
# batches faster than one core copies them, it is the bottleneck.
#
# **`prefetch_factor` and `persistent_workers`.** Prefetching matters when the loop does work of
# its own, and unevenly: while the GPU computes, workers fill the queue, and a full queue carries
# the loop through a stretch of quick steps. A sleep stands in for the GPU step (a CPU waiting on a
# GPU leaves the cores to the workers, as a sleep does): 8 short steps (a quarter of the folder's
# loading time per batch at `num_workers=cores`), then 8 long ones (seven quarters), and so on, for
# at least 8 x workers x factor batches, so that the queue fills and drains many times
# (`knobs.prefetch_trial`, on the JPEG folder, factors 1 and 4 in turns). Then whole epochs with and
# without persistent workers (without, every epoch starts its workers again), on the memmap, whose
# short epochs show the start-up.

# %%
from gpufeed.course.lesson07.knobs import prefetch_trial

pf_batch, lo_hi = config.pick(quick=4, full=batch_size, site=8), (1, 4)
pf_batches = 8 * cores * lo_hi[1]  # 8 x workers x the larger factor
step_s = pf_batch / runs["JPEG folder", cores].items_per_s  # the folder's loading time per batch, at `cores` workers
factors = prefetch_trial(datasets["JPEG folder"], lo_hi, num_workers=cores, batch_size=pf_batch, batches=pf_batches,
                         step_s=step_s, repeats=rounds, device=kw["device"])
persistence = sweep({"memmap": datasets["memmap"]}, [{"num_workers": cores, "persistent_workers": p} for p in (False, True)],
                    **{**kw, "budget_s": None})  # whole epochs, in turns: each one's start is the point
for m in persistence:
    m.name = f"persistent_workers={m.params['persistent_workers']}"
fig, axes = plt.subplots(1, 2, figsize=(10, 2.6))
plotting.bars(factors, ax=axes[0], title=f"JPEG folder, {cores} workers, {pf_batches} uneven steps", machine=S.machine)
plotting.bars(persistence, ax=axes[1], title=f"memmap, {cores} workers, whole epochs", machine=S.machine)
fig.tight_layout()
plt.show()

# %%
say(reading.prefetch(compare(factors[1], factors[0], paired=True), rate=factors[1].items_per_s, factors=lo_hi,
                     bound=pf_batch / step_s, batches=pf_batches, num_workers=cores))
no_keep, keep = persistence
say(reading.persistence(compare(keep, no_keep, paired=True), cores=cores, method=torch.multiprocessing.get_start_method(),
                        without_ms=no_keep.median * 1e3, with_ms=keep.median * 1e3))

# %% [markdown]
# ## 3. What `non_blocking=True` really does
#
# `x.to("cuda", non_blocking=True)` *asks* for an asynchronous copy; what you get depends on the
# memory:
#
# * **from pinned memory** the GPU's copy engine reads the bytes by DMA; the call returns at once and
#   the copy overlaps whatever the CPU does next (and kernels on other streams, lesson 08);
# * **from pageable memory** the driver first copies the bytes into a pinned staging buffer of its
#   own, on the CPU, and the call returns only when that is done: little is gained;
# * **device to host** (`y = x.to("cpu", non_blocking=True)`) returns a CPU tensor *before the bytes
#   have arrived*. Reading it before `torch.cuda.synchronize()` (or an event) gives wrong values.
#   This is the unsafe direction: no error, just garbage.
#
# The cells below time the first two with CUDA. Without it they show our committed reference from
# a GPU (`gpufeed.course.gpucell.measured_or_reference` makes that choice in each GPU cell): lesson
# 07's own where it is committed, else the H100's host-to-device ceilings, beside what NVIDIA
# published, each labelled with its hardware and source.

# %%
import time

from gpufeed.course import transfer
from gpufeed.course.gpucell import measured_or_reference
from gpufeed.measure import ceilings, published, results
from gpufeed.measure.harness import Measurement

x = torch.randint(0, 256, (64, 3, 224, 224), dtype=torch.uint8)  # 9.6 MB: one batch of 224x224 uint8


def copies(repeats=20):  # the four host-to-device copies of x, in turns, each timed until .to() returns and until done
    sources, times = {"pageable": x, "pinned": x.pin_memory()}, {}
    for r in range(repeats + 2):  # the first two rounds are warm-up
        for (memory, src), nb in ((m, nb) for m in sources.items() for nb in (False, True)):
            t0 = time.perf_counter()
            src.to("cuda", non_blocking=nb)
            returned = time.perf_counter() - t0
            torch.cuda.synchronize()
            if r >= 2:
                times.setdefault((memory, nb), []).append((returned, time.perf_counter() - t0))
    return [Measurement(f"{memory}, non_blocking={nb}: {what}", [t[i] for t in ts], nbytes=x.numel())
            for (memory, nb), ts in times.items() for i, what in enumerate(("call returns", "copy done"))]


nb_ms = measured_or_reference("lesson07", copies, lambda ms, doc: [m for m in ms if "non_blocking" in m.name],
                              cuda=S.cuda, shows="how long each copy takes to return and to finish") or []
for m in nb_ms:
    print(f"{m.name:>40}: {m.median * 1e3:7.3f} ms ({m.gb_per_s:6.1f} GB/s)")

# %% [markdown]
# The unsafe direction, shown on purpose: a long matrix product is queued first, then a fill of
# `src`, then the copy back. The CPU reads `y` at once, and once more after a sync.

# %%
def unsafe_reads(trials=5):  # the share of wrong values in y, read before and after a sync
    a, src, before, after = torch.randn(8192, 8192, device="cuda"), torch.empty(1 << 24, device="cuda"), [], []
    for trial in range(trials):
        for _ in range(3):
            a = a @ a / 8192  # keeps the GPU busy for a while (scaled to stay finite)
        src.fill_(trial + 1.0)
        y = src.to("cpu", non_blocking=True)  # returns before the bytes arrive
        before.append((y != trial + 1.0).float().mean().item())  # read on the CPU with no sync: a race
        torch.cuda.synchronize()
        after.append((y != trial + 1.0).float().mean().item())
    return {"wrong_before_sync": before, "wrong_after_sync": after}


unsafe = measured_or_reference("lesson07", unsafe_reads, "unsafe", cuda=S.cuda,
                               shows="the share of wrong values read before a sync, and after it")
if unsafe:
    say(f"Read before a sync, **{max(unsafe['wrong_before_sync']):.0%}** of the values were wrong in the worst of "
        f"{len(unsafe['wrong_before_sync'])} trials; after it, {max(unsafe['wrong_after_sync']):.0%}.")

# %%
if nb_ms:
    t = {m.name: m for m in nb_ms}
    say(reading.copies(compare(t["pinned, non_blocking=True: copy done"], t["pageable, non_blocking=True: copy done"],
                               paired=True), returns_us=t["pinned, non_blocking=True: call returns"].median * 1e6,
                       pinned_ms=t["pinned, non_blocking=True: copy done"].median * 1e3,
                       pageable_returns_ms=t["pageable, non_blocking=True: call returns"].median * 1e3,
                       pageable_ms=t["pageable, non_blocking=True: copy done"].median * 1e3))
else:
    h100 = ceilings.committed(lambda m: m.name.startswith("H2D"))  # the ceilings of a real GPU, if committed
    print("Pageable against pinned instead from our ceilings reference, where there is one, and as NVIDIA published it:")
    if h100 is not None:
        at = ceilings.h2d_at(h100.measurements, max(m.params["nbytes"] for m in h100.measurements))
        say(transfer.h2d_sentence(h100) + " " + reading.pin_caveat(at["pin+copy"].gb_per_s if "pin+copy" in at else None))
    say(transfer.h2d_table([h100] if h100 else [], published.for_lesson("lesson07")))

# %% [markdown]
# ### Deeper (optional): what `pin_memory()` itself costs
#
# Timing a pin is easy to get wrong, because PyTorch keeps pinned blocks for reuse; this dive times
# it both ways. The main line does not need it.

# %% [markdown] tags=["deeper"]
# `pin_memory()` is a copy into page-locked memory, plus an allocation the OS must lock; it pays
# off only if it replaces the driver's own staging copy and lets work overlap. PyTorch's *caching
# host allocator* keeps pinned blocks once they are freed and hands them out again, so in a loop
# only the first call locks pages; the others are a plain memcpy into a cached block. The cells
# below time both (a cached block, and a fresh one with the cache emptied before each call,
# counting the allocator's new blocks to show which was hit) against a plain pageable copy.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
def pins(repeats=10):  # x pinned into a fresh and into a cached block, beside a plain copy, in turns; blocks each made
    stats = getattr(torch.cuda, "host_memory_stats", dict)  # older torch: no host statistics, counts read 0
    kinds = (["fresh"] if hasattr(torch._C, "_host_emptyCache") else []) + ["cached"]
    taken, blocks = {k: [] for k in (*kinds, "clone")}, dict.fromkeys(kinds, 0)
    for r in range(repeats + 1):  # round 0: warm-up
        for kind in kinds:
            if kind == "fresh":  # free the cached pinned blocks (private API): this call must allocate and lock pages
                torch.cuda.synchronize()
                torch._C._host_emptyCache()
            before, t0 = stats().get("num_host_alloc", 0), time.perf_counter()
            y = x.pin_memory()  # "cached" comes second: the block "fresh" just made and freed
            taken[kind].append(time.perf_counter() - t0)
            blocks[kind] += (stats().get("num_host_alloc", 0) - before) if r else 0
            del y  # back to the cache
        t0 = time.perf_counter()
        x.clone()
        taken["clone"].append(time.perf_counter() - t0)
    name = {"fresh": "x.pin_memory(), fresh block", "cached": "x.pin_memory(), cached block", "clone": "x.clone() (pageable copy)"}
    return [Measurement(name[k], v[1:], nbytes=x.numel()) for k, v in taken.items()], {name[k]: n for k, n in blocks.items()}


def pins_in(ms, doc):  # the same, from a reference that holds them
    return ([m for m in ms if "pin_memory()" in m.name or "clone()" in m.name], doc["pin_blocks"]) if doc.get("pin_blocks") else None


pin_ms, pin_blocks = measured_or_reference("lesson07", pins, pins_in, cuda=S.cuda,
                                           shows="each pin's time and the pinned blocks it made") or ([], {})
for m in pin_ms:
    print(f"{m.name:>40}: {m.median * 1e3:7.3f} ms ({m.gb_per_s:6.1f} GB/s)")

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
if pin_ms:
    p = {m.name: m for m in pin_ms}
    kinds = [k for k in ("cached", "fresh") if f"x.pin_memory(), {k} block" in p]
    say(reading.pins({k: compare(p[f"x.pin_memory(), {k} block"], p["x.clone() (pageable copy)"], paired=True) for k in kinds},
                     {k: p[f"x.pin_memory(), {k} block"].median * 1e3 for k in kinds},
                     {k: pin_blocks.get(f"x.pin_memory(), {k} block", "?") for k in kinds}))
else:
    h100 = ceilings.committed(lambda m: m.name.startswith("H2D"))
    if h100 is None:
        print("No reference of ours holds a pin: timing pin_memory() needs a GPU.")
    else:
        at = ceilings.h2d_at(h100.measurements, 1 << 30)  # the largest copy of each source
        say(reading.pin_by_difference(compare(at["pin+copy"], at["pinned"]), hardware=h100.hardware, source=h100.source,
                                      nbytes=at["pinned"].params["nbytes"], both_ms=at["pin+copy"].median * 1e3,
                                      copy_ms=at["pinned"].median * 1e3))

# %% [markdown]
# ## 4. Moving nested structures
#
# A detection batch is a dict holding a stacked image tensor and a *list* of per-image dicts, each
# with its own number of boxes: `batch.to(device)` does not exist for it. `gpufeed.data.movers` makes
# such batches (`DetectionDataset`, `detection_collate`, both in `src/` so workers can import them).

# %%
from gpufeed.data.movers import DetectionDataset, detection_collate

ds = DetectionDataset(batch_size, size=side)
batch = detection_collate([ds[i] for i in range(batch_size)])
print({k: type(v).__name__ for k, v in batch.items()}, tuple(batch["images"].shape))
print("first target:", {k: tuple(v.shape) for k, v in batch["targets"][0].items()})

# %% [markdown]
# By hand: a function that calls itself on what it finds.

# %%
def move(obj, device, non_blocking=False):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return {k: move(v, device, non_blocking) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(move(v, device, non_blocking) for v in obj)
    return obj  # ints, strings, None: as they are

# %% [markdown]
# (A named tuple breaks that last `type(obj)(...)`: it wants separate arguments;
# `gpufeed.data.movers.to_device` handles it, and TensorDicts.) Torch has a tree walker of its own,
# `torch.utils._pytree` (private, but it is what `torch.compile` and FSDP use); optree is a C++
# one; and tensordict's `TensorDict` holds the whole batch as one object whose `.to()` moves
# every leaf. Per-image targets of different sizes become a *lazy stack*, one TensorDict per image.
# `consolidate()` packs all the leaves into one buffer first, so that `.to()` is a single copy.

# %%
import importlib.util

from torch.utils import _pytree

from gpufeed.data.movers import as_tensordict, equal, leaves, pin, to_device


def on(x):
    return x.to(S.device, non_blocking=S.cuda) if isinstance(x, torch.Tensor) else x


ways = {"hand-written recursive": lambda: move(batch, S.device, S.cuda),
        "torch.utils._pytree.tree_map": lambda: _pytree.tree_map(on, batch)}
if importlib.util.find_spec("optree") is not None:  # optional: pip install optree
    import optree

    ways["optree.tree_map"] = lambda: optree.tree_map(on, batch, none_is_leaf=True)
td = as_tensordict(batch)  # a dataset would yield this directly: not timed
packed = td.consolidate()  # one buffer holding every leaf
ways["TensorDict.to"] = lambda: td.to(S.device, non_blocking=S.cuda)
ways["TensorDict, consolidated"] = lambda: packed.to(S.device, non_blocking=S.cuda)
if S.cuda:  # pinned sources: the copies can be asynchronous
    pinned_batch, pinned_packed = pin(batch), td.consolidate(pin_memory=True)
    ways["hand-written, pinned"] = lambda: move(pinned_batch, S.device, True)
    ways["TensorDict, consolidated, pinned"] = lambda: pinned_packed.to(S.device, non_blocking=True)
for name, way in ways.items():
    assert equal(way(), batch), name  # correctness first: same structure, same values
print(f"all {len(ways)} ways give the same {len(leaves(batch))} tensors in the same structure, on {S.device}")

# %%
movers_ms = interleave({name: lambda way=way: [way() for _ in range(5)] for name, way in ways.items()},  # in turns
                       items=5, repeats=config.pick(quick=10, full=30, site=30), warmup=2)  # 5 batches a sample
fig, ax = plotting.bars(movers_ms, baseline="hand-written recursive", unit="batches/s", machine=S.machine,
                        title=f"moving a detection batch ({len(leaves(batch))} tensors) to {S.device}")
plt.show()
mv = {m.name: m for m in movers_ms}
say(reading.movers({n: compare(m, mv["hand-written recursive"], paired=True) for n, m in mv.items() if n != "hand-written recursive"},
                   "hand-written recursive", {n: m.median / 5 * 1e6 for n, m in mv.items()}, S.cuda))

# %% [markdown]
# **Or let the model's wrapper move it.** `DistributedDataParallel(model, device_ids=[local_rank])`
# moves a nested input of `forward` whole to its GPU, but a CPU tensor, which is what a loader
# hands over, with a plain `.to(device)`: the host waits for that copy, pinned or not, and nothing
# overlaps it. `nn.DataParallel` cuts every tensor of the nest along dim 0, one piece per GPU:
# right for the stacked images, wrong for a list of per-image targets. The fix, which lesson 12's
# script uses: let the loader pin the batch (`pin_memory=True`), and move it yourself with
# `non_blocking=True` *before* calling the model. The copy is queued on the current stream and the
# host goes on; the forward pass is queued behind it; DDP finds every tensor already on its GPU
# and moves nothing (`gpufeed.course.lesson07.collate.ddp_move` calls DDP's own function on the batch):

# %%
from gpufeed.course.lesson07.collate import ddp_move

on_device = to_device(pin(batch) if S.cuda else batch, S.device, non_blocking=S.cuda)  # queued, not waited for
passed = ddp_move(on_device, S.device)  # what DDP's forward does to it
same = all(a is b for a, b in zip(leaves(passed), leaves(on_device)))
print(f"moved before the model: DDP handed the model the very same {len(leaves(passed))} tensors: {same}")

# %% [markdown]
# ### Deeper (optional): what DDP and DataParallel do to a nested batch
#
# DDP's move read from torch's own source, and DataParallel's scatter run on the CPU on the
# detection batch; the main line does not need them.

# %% [markdown] tags=["deeper"]
# * `DistributedDataParallel(model, device_ids=[local_rank])` calls `_to_kwargs` on the inputs,
#   which moves every tensor of the nest to that one GPU and keeps the nest whole: each rank already
#   has its own batch. *How* it moves a tensor depends on where the tensor is (`_recursive_to` in
#   `torch/distributed/utils.py`, printed below): one on another GPU is copied on a side stream,
#   but a **CPU tensor gets a plain `.to(device)`**. Without `device_ids` (a CPU module, or one
#   spread over several GPUs) it moves nothing.
# * `nn.DataParallel(model)` *scatters*: every tensor in the nest, wherever it sits, is cut along
#   dim 0 into one piece per GPU, each piece copied from the CPU straight to its GPU on a side
#   stream, and lists, tuples and dicts are rebuilt around the pieces. With no GPU, `DataParallel`
#   just calls the model.
#
# `gpufeed.course.lesson07.collate.dataparallel_split` runs torch's own `scatter` on the CPU, with only its
# per-tensor CUDA copy replaced by the same `torch.chunk` split.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from torch import nn

from gpufeed.course.lesson07.collate import dataparallel_split

print(f"nn.DataParallel here uses GPUs {nn.DataParallel(nn.Identity()).device_ids} "
      f"({'it scatters over them' if S.cuda else 'none: forward just calls the model'})")
moved = ddp_move(batch, S.device)
assert equal(moved, batch)
print(f"DDP-style move to {S.device}: the same nest, {len(leaves(moved))} tensors, nothing split")

# %% [markdown] tags=["deeper"]
# Here is what DDP does with each tensor, read from the torch installed here: the lines of
# `_recursive_to` that handle a CPU tensor.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
import inspect

import torch.distributed.utils as dist_utils

lines, first = inspect.getsourcelines(dist_utils._recursive_to)
cpu_branch = [i for i, line in enumerate(lines) if 'device.type == "cpu"' in line]
if cpu_branch:  # the branch that gives CPU tensors a plain .to(), in torch releases that have it
    i = cpu_branch[0]
    print(f"torch/distributed/utils.py, line {first + i}:")
    print("".join(lines[max(0, i - 6):i + 2]))
else:
    print("This torch's _recursive_to has no separate CPU branch; read it whole:")
    print("".join(lines))

# %% [markdown] tags=["deeper"]
# And DataParallel's scatter of the detection batch, first as it is, then without its 0-d
# `image_id` tensors:

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
try:
    dataparallel_split(batch, 2)
except RuntimeError as e:
    print(f"DataParallel's scatter of the batch as it is fails: {e} (the 0-d `image_id` tensors)")
no_ids = {"images": batch["images"], "targets": [{k: v for k, v in t.items() if k != "image_id"} for t in batch["targets"]]}
parts = dataparallel_split(no_ids, 2)
fewest = min(t["boxes"].shape[0] for t in no_ids["targets"])
text = (f"Without the ids, DataParallel's scatter over 2 GPUs makes {len(parts)} part(s), with "
        f"{[p['images'].shape[0] for p in parts]} images and {[len(p['targets']) for p in parts]} targets: every part "
        f"gets every image's targets, each cut along its boxes (image 0's {no_ids['targets'][0]['boxes'].shape[0]} boxes "
        f"arrive as {[p['targets'][0]['boxes'].shape[0] for p in parts]}).")
if len(parts) < 2:
    text += (f" Worse, the smallest target has {fewest} box, which cannot be cut in two, and scatter zips the pieces: "
             "the shortest wins, so the whole batch went to one GPU.")
say(text + " Nested per-sample targets need DDP, or a split of your own.")

# %% [markdown]
# ### From a file straight to the device: `torch.load(f, map_location=device)`
#
# `torch.save` writes, beside each tensor's bytes, the device it was on (`"cpu"`, `"cuda:0"`), and
# `torch.load` puts it back there. `map_location` says otherwise: a device, a mapping
# (`{"cuda:0": "cpu"}`) or a function. Nasy's talk "The fast train loops" (lesson 00's Sources)
# shows it in its IO section, with JAX's counterpart, `jax.device_put(x, device)`. It does two
# jobs: a file saved on a GPU machine loads where there is no GPU only with it, and it loads
# straight onto the device you compute on. First the file of a GPU machine
# (`gpufeed.course.lesson07.devicefiles.save_as_on` writes one whose tensors record `cuda:0`):

# %%
from gpufeed.course.lesson07.devicefiles import load_ways, save_as_on

shard = load_memmap(mm_dir)  # the lesson's images, as one dataset shard would be saved
tensors = {"images": shard.images.clone(), "targets": shard.targets.clone()}  # [N, 3, 224, 224] uint8, [N]
gpu_file = save_as_on({"images": tensors["images"][:2], "targets": tensors["targets"][:2]}, here / "on-cuda.pt", "cuda:0")
try:
    print("torch.load(f):", {k: str(v.device) for k, v in torch.load(gpu_file, weights_only=True).items()})
except RuntimeError as e:  # no GPU here: the error's first line says why
    print(f"torch.load(f) fails: {str(e).strip().splitlines()[0]}")
print("torch.load(f, map_location='cpu'):", {k: str(v.device) for k, v in torch.load(gpu_file, map_location="cpu", weights_only=True).items()})

# %% [markdown]
# Then the cost, on a file of the lesson's images (its size is printed below), read from the page
# cache: `torch.load(f, map_location=device)` against `torch.load(f)` then
# `.to(device)` over the nest, timed in turns (`gpufeed.course.lesson07.devicefiles.load_ways`, which first
# checks that both give the same tensors).

# %%
shard_file = here / f"shard-{n_images}.pt"
torch.save(tensors, shard_file)
load_ms, same_tensors = load_ways(shard_file, S.device, repeats=config.pick(quick=15, full=5))
for m in load_ms:
    print(m)
by_map, then_move = load_ms
say(reading.loading(compare(by_map, then_move, paired=True), mib=shard_file.stat().st_size / 2**20, device=str(S.device),
                    map_ms=by_map.median * 1e3, move_ms=then_move.median * 1e3, cuda=S.cuda, same=same_tensors))

# %% [markdown]
# ### Deeper (optional): moving a loaded nest, simulated
#
# Without a GPU, the CUDA-ordering simulator counts the host's waits of the last step; the main
# line does not need it.

# %% [markdown] tags=["deeper"]
# The simulator (`gpufeed.simcuda`, lesson 08: it models CUDA's order of events, not its
# speed) shows the host waits of moving a loaded nest, and what pinning changes.
# `torch.load(map_location="cuda")` itself cannot run under it (the simulator models tensors, not
# the storages torch.load restores); it makes the same blocking copies, one per storage.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
if S.cuda:
    print("A GPU is here: the timings above are the real copies; the simulator is for machines without one.")
else:
    from gpufeed.simcuda import simulated_cuda
    from gpufeed.data.movers import to_device

    loaded = torch.load(gpu_file, map_location="cpu", weights_only=True)  # pageable CPU tensors, as torch.load makes them
    with simulated_cuda(seed=0) as sim:
        to_device(loaded, "cuda")  # load, then move
        plain_waits = len(sim.syncs)
        to_device(pin(loaded), "cuda", non_blocking=True)  # load, pin, then move without waiting
        pinned_waits = len(sim.syncs) - plain_waits
    say(f"Under the simulator, moving the {len(leaves(loaded))} loaded tensors with `.to('cuda')` made the host wait "
        f"**{plain_waits}** time(s); pinned first and moved with `non_blocking=True`, **{pinned_waits}**.")

# %% [markdown]
# ## 5. Start methods, CUDA, and why datasets live in `src/`
#
# A worker is a new process, started one of three ways (`multiprocessing_context=` on the DataLoader):
#
# * **fork** (the Linux default up to Python 3.13): a copy of the parent, memory and all. Fast, and
#   the dataset needs no pickling. But a forked child cannot use CUDA if the parent has already
#   initialised it, and forking a process that runs threads can deadlock.
# * **spawn** (the default on macOS and Windows): a fresh interpreter that imports torch and
#   *unpickles* the dataset and collate function, which pickle stores as module and name.
# * **forkserver** (the Linux default from **Python 3.14**): a server process forks clean children
#   on request; the dataset is pickled as with spawn.
#
# So under spawn and forkserver a worker must be able to *import* your dataset class. A class
# defined in a notebook lives in the kernel's `__main__`, which a fresh process does not have:

# %%
import pickle

from torch.utils.data import Dataset

from gpufeed.course.lesson07.knobs import CudaProbe, first_batch


class NotebookDetection(Dataset):  # defined here, in __main__: a spawned worker cannot find it
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return DetectionDataset(4, size=16)[i]


print("pickled as:", pickle.dumps(NotebookDetection())[:60])
trials = []
if S.cuda and S.quick:  # a spawned worker imports torch and CUDA's libraries: seconds each, too long for quick mode
    print("Quick mode on a GPU skips the spawn trials (seconds each); full mode (GPUFEED_QUICK=0) runs them.")
else:
    trials = bad, good, forked = [first_batch(NotebookDetection(), "spawn", collate_fn=detection_collate),
                                  first_batch(DetectionDataset(4, size=16), "spawn", collate_fn=detection_collate),
                                  first_batch(NotebookDetection(), "fork", collate_fn=detection_collate)]
for r, what in zip(trials, ("notebook class, spawn", "gpufeed class, spawn", "notebook class, fork")):
    print(f"{what:>22}: {'a batch' if r.ok else 'failed'} after {r.seconds:.1f} s"
          + ("" if r.ok else f"\n{'':>24}in this process: {r.error}\n{'':>24}in the worker:   {r.worker_error}"))
if trials:
    print(f"Under spawn the worker imports torch, then fails to find NotebookDetection in its own __main__ "
          f"({bad.worker_error.split(':')[0] or 'see above'}). The same class from gpufeed works; starting that one "
          f"spawned worker took {good.seconds:.1f} s, forking one {forked.seconds:.2f} s (one start of each).")
print(f"Start method here: {torch.multiprocessing.get_start_method()}. On Python 3.14 it is forkserver on Linux, "
      "so a notebook-defined dataset fails there even without multiprocessing_context.")

# %% [markdown]
# **CUDA and fork.** With a GPU, the cell below initialises CUDA in this process and asks a *forked*
# worker to touch the GPU: the CUDA runtime cannot be used again in a forked child. Spawned workers
# can, but the usual advice stands: keep workers on the CPU and move batches in the main process.

# %%
def fork_after_cuda():  # CUDA initialised here, then a forked worker asked to touch the GPU: its error, if any
    torch.zeros(1, device="cuda")
    return first_batch(CudaProbe(), "fork").error


cuda_fork_error = measured_or_reference("lesson07", fork_after_cuda, "cuda_fork_error", cuda=S.cuda,
                                        shows="the error of a forked worker that touches CUDA")
if S.cuda or cuda_fork_error:
    print(f"a forked worker touching CUDA: {cuda_fork_error or 'it worked'}")

# %% [markdown]
# ### Deeper (optional): copying to the GPU in the workers, `Collate("cuda")`
#
# One of the talks in lesson 00's Sources copies each batch to the GPU inside the workers; this
# dive measures what that costs, and what goes wrong when those workers exit. The main line does
# not need it.

# %% [markdown] tags=["deeper"]
# The talk's collate function stacks the samples into a tensorclass batch, pins it and calls
# `.to("cuda")`, with `multiprocessing_context="spawn"` and `persistent_workers=True` ("otherwise
# old processes may not release CUDA tensors"). Each piece has its reason: a forked child cannot
# use CUDA (above); a CUDA tensor made in a worker reaches the main process through CUDA IPC, and
# PyTorch's docs ask the process that made it to stay alive while it is in use; and the collate
# function must be importable, so it lives in `gpufeed.course.lesson07.collate.DeviceCollate`
# (`tensorclass=True` makes the talk's batch, an `ImageData` with `images` and `targets`). What it
# costs: every worker opens a CUDA context of its own, in exchange for taking the pin copy off the
# main process's single pin thread, and the batches the workers prefetch wait *on the GPU*.
# `gpufeed.course.lesson07.collate.worker_cuda_cost` builds both DataLoaders on the JPEG folder (same spawn
# workers, persistent; at most 4 workers and 8 batches an epoch) and measures the time to the first
# batch, the time per epoch, and the GPU memory in use while the workers live
# (`torch.cuda.mem_get_info`, which sees every process).

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from torch.utils.data import Subset

from gpufeed.course.lesson07.collate import DeviceCollate, worker_cuda_cost

talk_collate = DeviceCollate("cuda", tensorclass=True)
print("collate_fn:", talk_collate, "pickled as", pickle.dumps(talk_collate)[:48])
print("its batch, made here on the CPU:", DeviceCollate("cpu", tensorclass=True)([datasets["JPEG folder"][i] for i in range(2)]))
workers_here, prefetch = min(cores, config.pick(quick=2, full=4)), 2  # prefetch_factor: the DataLoader's default
few = Subset(datasets["JPEG folder"], range(min(n_images, 8 * batch_size)))  # 8 batches: each start-up shows
held = workers_here * prefetch * batch_size * 3 * side * side  # bytes: uint8 batches waiting on the GPU
say(f"With the copy in the workers, up to prefetch_factor x num_workers = {prefetch} x {workers_here} = "
    f"{prefetch * workers_here} batches wait on the GPU before the loop asks for them: {held / 2**20:.0f} MiB for "
    f"batches of {batch_size} uint8 {side}x{side} images, beside the model (with the copy in the main process "
    "they wait in host memory).")
worker_collate = measured_or_reference(
    "lesson07", lambda: worker_cuda_cost(few, batch_size=batch_size, num_workers=workers_here, epochs=5),
    "worker_collate", cuda=S.cuda, full_only=True, shows="for both DataLoaders the seconds to the first batch, the seconds per epoch "
    "and the MiB of GPU memory per worker")
if worker_collate:
    main, inside = worker_collate["main process"], worker_collate["in the workers"]
    epochs_v = compare(inside["epoch_s"], main["epoch_s"])  # one DataLoader's epochs, then the other's: not paired
    say(f"Copying in the workers: first batch after {inside['first_batch_s']:.1f} s (main process: "
        f"{main['first_batch_s']:.1f} s), epochs {epochs_v.words('with the copy in the main process')}, and "
        f"{inside['gpu_mib_per_worker']:.0f} MiB of GPU memory per worker against {main['gpu_mib_per_worker']:.0f} "
        "(the CUDA contexts).")

# %% [markdown] tags=["deeper"]
# **Without `persistent_workers`.** A DataLoader that does not keep its workers ends them when an
# epoch's iterator is exhausted, and starts new ones for the next epoch. With the copy in the
# workers, that means a CUDA context per worker started again every epoch, and workers that exit
# while the main process still holds a batch they made: PyTorch's own C++ then prints
# *"Producer process has been terminated before all shared CUDA tensors released"* (on the
# terminal that started Jupyter, not in the notebook). `without_persistent_workers` runs two such
# epochs, keeps each epoch's last batch, captures what the workers print, and checks the kept
# batches afterwards.
#
# DALI 1.47 added a third way, the *DALI proxy* (`nvidia.dali.plugin.pytorch.experimental.proxy`):
# the DataLoader's workers keep the dataset's Python logic and hand each sample to a DALI pipeline
# that runs in the main process, so the GPU work happens in one process with one CUDA context
# (lesson 10).

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from gpufeed.course.lesson07.collate import without_persistent_workers

no_persist = measured_or_reference(
    "lesson07", lambda: without_persistent_workers(few, batch_size=batch_size, num_workers=workers_here),
    "without_persistent_workers", cuda=S.cuda, full_only=True, shows="the first-batch time of each epoch, how many times the exiting "
    "workers printed the producer warning, and whether the batches kept across their exit still hold their values")
if no_persist:
    say("Without persistent workers, each epoch's first batch came after "
        + ", ".join(f"{t:.1f} s" for t in no_persist["first_batch_s"])
        + f" (new workers, new CUDA contexts, every epoch). The exiting workers printed the producer warning "
        f"**{no_persist['producer_warnings']}** time(s); the batches kept across their exit "
        + ("still held their values." if no_persist["held_batches_intact"] else "**no longer held their values**.")
        + (f" Their last lines:\n\n```\n{no_persist['stderr_tail']}\n```" if no_persist["stderr_tail"] else ""))

# %%
on_gpu = {"unsafe": unsafe, "cuda_fork_error": cuda_fork_error, "pin_blocks": pin_blocks, "worker_collate": worker_collate,
          "without_persistent_workers": no_persist} if S.cuda else {}  # measured here, never a reference's
saved = results.save_lesson("lesson07", [*threads_ms, *ms, *factors, *persistence,
                                         *(nb_ms + pin_ms if S.cuda else []), *load_ms, *movers_ms],
                            cores=cores, batch_size=batch_size, side=side, start_methods=[vars(r) for r in trials], **on_gpu)

# %% [markdown]
# ## Key takeaways
#
# * `num_workers` helps datasets whose samples cost CPU (decoding), at most up to the number of
#   free cores; for a memmap, a batch is a copy, and a worker adds a hand-over (a copy into shared
#   memory, messages between processes) that section 2 weighed against the gather on this machine.
#   Measure, don't guess.
# * Workers run one torch thread each; on a busy machine the main process should too.
# * `persistent_workers=True` saves the worker start-up of every epoch; `prefetch_factor` helps when
#   loading is uneven; `pin_memory` adds a copy on one thread and pays off only with a GPU.
# * `non_blocking=True` is asynchronous only from pinned memory (from pageable memory it is safe, but
#   waits for the driver's staging copy); device-to-host without a sync returns a tensor whose
#   values have not arrived yet. Time `pin_memory()` knowing whether the host cache served it.
# * DDP (`device_ids=[i]`) moves a nested input whole, but a CPU tensor with a plain, blocking
#   `.to()`: pin the batch and move it yourself, `non_blocking`, before the model. DataParallel
#   cuts every tensor in it along dim 0, per-image targets included. Copying in the workers
#   (`Collate("cuda")`, a deep dive) costs a CUDA context per worker: measure it before you adopt it.
# * Move nested batches with one walker (pytree, optree, or your own). A consolidated TensorDict
#   packs every leaf into one buffer, so that on a GPU `.to()` is one copy instead of one per
#   tensor; section 4 timed only the walk here (on the CPU nothing is copied), so whether that pays
#   on your GPU is for the cell to measure there.
# * `torch.load(f, map_location=device)` loads a GPU machine's file where there is no GPU, and
#   loads straight onto your device holding one tensor at a time in host memory. Its copies, like
#   load-then-move's, are from pageable memory and blocking; whether it is faster on your GPU, the
#   cell in section 4 measures there. JAX's counterpart is `jax.device_put`.
# * Datasets and collate functions live in an importable module: under spawn and forkserver
#   (Python 3.14's default) a notebook class cannot be found by the worker.
#
# ## Exercises
#
# 1. Give the main process back its default threads (`torch.set_num_threads(default_threads)`) and
#    rerun the `num_workers` sweep. Which row changes, and why that one?
# 2. Add a `worker_init_fn` (in a module of your own, not in the notebook) that calls
#    `torch.set_num_threads(2)` in each worker. Does the folder get faster at `num_workers=1`?
# 3. Predict: at what `num_workers` does the JPEG folder reach the memmap's `num_workers=0` rate on
#    this machine, if the rate per worker stays as measured? Check with the cell below.
#
# A worked solution to each exercise follows the self-check, folded: try first, then unfold it.

# %%
# Self-check for exercise 3: your answer, a number of workers (an int).
my_workers = None
per_worker = folder[1]  # images/s with one worker
needed = memmap[0] / per_worker
if my_workers is not None:
    print(f"{needed:.0f} workers ({'right!' if abs(my_workers - needed) <= max(1, 0.1 * needed) else 'not quite'}); "
          f"this machine has {cores} cores.")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 1: the main process's threads.
# Why: a worker always runs one torch thread (`_worker_loop` sets it), whatever the main process
# has. So the main process's threads matter where it does the loading itself, `num_workers=0`,
# and only for torch's own work: the memmap's gather, the folder's per-sample layout copy and the
# collate's `torch.stack` (Pillow's decode is one thread whatever torch says). With workers, its
# threads can at most compete with the workers for cores. Machines change from minute to minute,
# so time both thread counts now, in turns, at num_workers=0 and =cores.
from gpufeed.course.lesson07.knobs import loader


def with_threads(dl, threads):  # one epoch of dl with this many torch threads in the main process
    def epoch():
        torch.set_num_threads(threads)
        for _batch in dl:
            pass
    return epoch


rows = {(name, w): loader(ds, batch_size, num_workers=w, persistent_workers=True) for name, ds in datasets.items()
        for w in (0, cores)}
arms = {f"{name}, {w} workers, {t} thread(s)": with_threads(dl, t) for (name, w), dl in rows.items()
        for t in (default_threads, 1)}
try:
    by_threads = interleave(arms, repeats=kw["repeats"], items=n_images)  # every row, both thread counts, in turns
finally:
    torch.set_num_threads(1)  # what the rest of the lesson assumes
    del rows, arms  # stops the workers
pairs = dict(zip(((name, w) for name in datasets for w in (0, cores)), zip(by_threads[::2], by_threads[1::2])))
for (name, w), (many, one) in pairs.items():
    print(f"{name}, num_workers={w}: {one.items_per_s:,.0f} images/s with 1 thread, {many.items_per_s:,.0f} with "
          f"{default_threads}")
say(reading.main_threads({k: compare(many, one, paired=True) for k, (many, one) in pairs.items()}, default_threads))


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 2: two torch threads in each worker.
# Why a module: under spawn or forkserver a worker unpickles `worker_init_fn` by module and name
# (section 5), so it lives in a file a fresh interpreter can import. We write one into the lesson's
# cache folder and put that on `sys.path` (the fork server below inherits it); in your project it is a
# module of your package. Why not fork here: a forked worker that raises its threads can hang for
# ever. torch's CPU threads are an OpenMP team, and GNU OpenMP's team does not survive a fork once
# the parent has used one (exercise 1 just did): the first parallel copy in the worker waits at a
# barrier for threads that were never copied. One more reason `_worker_loop` sets one thread.
# So the workers start from a fork server (section 5; lesson 10 does the same): a clean process
# that imports torch once (the preload) and has never run an OpenMP team, each worker a fork of
# it. Spawn works too, at the price of importing torch again in every worker.
# What to expect: a folder sample is a Pillow decode and resize, one thread whatever torch says;
# only the collate's `torch.stack` and a layout copy are torch's. So expect little.
import sys

(here / "my_workers.py").write_text(
    "import torch\n\n\ndef two_threads(worker_id):\n    torch.set_num_threads(2)  # this worker only\n")
if str(here) not in sys.path:
    sys.path.insert(0, str(here))
from my_workers import two_threads  # noqa: E402

forkserver = torch.multiprocessing.get_context("forkserver")
forkserver.set_forkserver_preload(["torch", "gpufeed.data.folder"])  # takes effect when the server starts
one = {"num_workers": 1, "persistent_workers": True, "multiprocessing_context": forkserver}
plain, init = sweep({"JPEG folder": datasets["JPEG folder"]}, [one, {**one, "worker_init_fn": two_threads}], **kw)  # in turns
say(reading.two_threads(compare(init, plain, paired=True), cores=cores, one_rate=plain.items_per_s,
                        two_rate=init.items_per_s))


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 3: how many workers the folder needs to match the memmap.
# Why: if each worker decodes at the rate one worker reached (`folder[1]` images/s) and the rates
# add up, W workers give W x folder[1]; the memmap gives memmap[0] with no worker at all. So
# W = memmap[0] / folder[1], rounded up. Then compare W with the cores: workers past the cores
# add no decoding, so a W above them is out of reach on this machine, whatever num_workers says.
import math

my_workers = math.ceil(memmap[0] / folder[1])
assert abs(my_workers - needed) <= max(1, 0.1 * needed), "the self-check above would say 'not quite'"
best = max(folder, key=folder.get)
reach = (f"within this machine's {cores} cores" if my_workers <= cores
         else f"more than this machine's {cores} cores: the folder cannot catch up here")
print(f"One worker decodes {folder[1]:,.0f} images/s and the memmap serves {memmap[0]:,.0f} with none, so the "
      f"folder needs {my_workers} workers, {reach}. The best the sweep measured for the folder was "
      f"{folder[best]:,.0f} images/s at num_workers={best}, {folder[best] / memmap[0]:.0%} of the memmap's rate.")

# %% [markdown]
# ## Further reading
#
# * [`torch.utils.data`](https://docs.pytorch.org/docs/stable/data.html) (PyTorch docs): every DataLoader knob this lesson sweeps, and the start methods.
# * [A guide on good usage of `non_blocking` and `pin_memory()` in PyTorch](https://docs.pytorch.org/tutorials/intermediate/pinmem_nonblock.html) (Vincent Moens, PyTorch tutorials): the two directions of `non_blocking`, and when pinning each batch costs more than it saves.
# * [Performance Tuning Guide](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html) (Szymon Migacz, PyTorch tutorials): where `num_workers`, `pin_memory` and `persistent_workers` come from, and what they are for.
# * [How to Optimize Data Transfers in CUDA C/C++](https://developer.nvidia.com/blog/how-optimize-data-transfers-cuda-cc/) (NVIDIA Technical Blog): pageable against pinned, measured by NVIDIA: the figures this lesson shows without a GPU.
# * [`torch.load`](https://docs.pytorch.org/docs/stable/generated/torch.load.html) (PyTorch docs): `map_location` as a device, a mapping or a function, and `mmap=True`.
