# %% [markdown]
# # 12 · Scaling out
#
# **What you will learn:** how data-parallel training spreads one dataset over many GPUs and
# machines with what PyTorch ships (`torchrun`, `DistributedSampler`, `DistributedDataParallel`);
# how each process gets its own shard of every epoch, and its own augmentation seed; why ranks on
# one machine share one page cache, and what RSS and PSS then say; and what going from 1 to 2
# processes gives here, with the same script that runs on GPUs with nccl.
#
# **Time:** about 25 minutes (2 minutes in quick mode). **Prerequisites:** [05 · Memory-mapped
# datasets](05_memmap.ipynb) (the memmap dataset and the page cache), [06 · Batched
# fetching](06_batched.ipynb) (`FastLoader`, a `BatchSampler` as the sampler).

# %%
import gpufeed

S = gpufeed.setup("12")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The idea: one process per GPU, each its own shard
#
# **Data parallel**: every GPU holds a full copy of the model. Each step, each copy takes a
# different batch, computes its gradients, and before the optimiser step the gradients are
# averaged over all copies (an **all-reduce**), so every copy takes the same step and they stay
# identical. For the input pipeline this means: each process reads its own part (*shard*) of every
# epoch; the shards must not overlap (or a sample counts twice), must together cover the epoch,
# and must change from epoch to epoch the same way on every process.
#
# | | `nn.DataParallel` | `DistributedDataParallel` (DDP) |
# |---|---|---|
# | processes | one, with a thread per GPU (they share one GIL) | one per GPU |
# | loading | one loader for all GPUs; each batch is scattered: cut along dim 0, a CPU batch's pieces copied straight to each GPU | each process its own loader and shard |
# | what travels each step | inputs scattered, outputs gathered, the model copied out again | the gradients (an all-reduce, bucket by bucket, overlapped with the backward pass), and rank 0's buffers (BatchNorm statistics) broadcast before each forward (`broadcast_buffers=True`, the default) |
# | several machines | no | yes |
#
# PyTorch recommends DDP even on one machine. `torchrun` starts the processes and tells each who it
# is: `WORLD_SIZE` (processes in all), `RANK` (this one's number), `LOCAL_RANK` (its number on this
# machine: which GPU it takes), `LOCAL_WORLD_SIZE`, and `MASTER_ADDR`/`MASTER_PORT` (where they
# meet). `torch.distributed.init_process_group("nccl")` reads them; `"gloo"` also runs on CPUs, as here.
#
# **The whole recipe.** Before the course's script, here is what every DDP training script comes
# down to (run as `torchrun --nproc-per-node N train.py`; not run in this cell):
#
# ```python
# import os, torch, torch.distributed as dist
# from torch.nn.parallel import DistributedDataParallel as DDP
# from torch.utils.data import DataLoader, DistributedSampler
#
# local_rank = int(os.environ["LOCAL_RANK"])         # set by torchrun
# torch.cuda.set_device(local_rank)                  # this process's GPU, before anything touches CUDA
# dist.init_process_group("nccl")                    # reads RANK, WORLD_SIZE, MASTER_ADDR/PORT
# model = DDP(build_model().cuda(), device_ids=[local_rank])   # broadcasts rank 0's weights
# sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)  # this rank's shard
# loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8, pin_memory=True)
# optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
# for epoch in range(epochs):
#     sampler.set_epoch(epoch)                       # a new shuffle each epoch, the same on every rank
#     for images, labels in loader:
#         loss = loss_fn(model(images.cuda(non_blocking=True)), labels.cuda(non_blocking=True))
#         optimizer.zero_grad(); loss.backward(); optimizer.step()   # backward all-reduces the gradients
# dist.destroy_process_group()
# ```
#
# The rest of this lesson looks at the data side of it: the shards, the steps per rank, the page
# cache, and what `gpufeed.course.lesson12.distributed` measures with the same pieces.

# %% [markdown]
# ## 2. Shards: who reads what
#
# Two ways to cut an epoch. gpufeed's `FastLoader(..., rank=r, world_size=w, pad=False)` draws the
# epoch's order from `(seed, epoch)` (every rank draws the same one, no communication) and gives each
# rank a contiguous part of it (its default, `pad=True`, first pads the order as below, so that every
# rank yields as many batches). `DistributedSampler` draws `randperm(n)` seeded by `seed + epoch` and
# deals it out like cards: rank r gets positions r, r + w, r + 2w, ... To give every rank the same
# number of samples, it **pads** the order with its own first few samples when `n` is not a
# multiple of `w`. Below, 3 ranks over 10 samples, three epochs each way; a black dot marks a sample
# read twice in that epoch.

# %%
import matplotlib.pyplot as plt
import numpy as np

from gpufeed.course.lesson12.shards import check_shards, plot_shards, shard
from gpufeed.measure import plotting

n_demo, world_demo, epochs_demo = 10, 3, 3
fig, axes = plot_shards(n_demo, world_demo, epochs_demo, figsize=(9, 2.6))  # FastLoader | DistributedSampler
plt.show()

# %%
for kind in ("fast", "sampler"):
    shards = [shard(n_demo, r, world_demo, 0, kind=kind) for r in range(world_demo)]
    c = check_shards(shards, n_demo)
    print(f"{kind:>7}: shard sizes {[len(s) for s in shards]}, {c['covered']} of {n_demo} samples read, "
          f"{c['duplicates']} read twice")

# %% [markdown]
# Both cover the epoch and reshuffle it every epoch. `FastLoader(pad=False)`'s shards never overlap, but
# their sizes differ by one; `DistributedSampler`'s are equal, at the price of repeating
# `(-n) % w` samples per epoch. For ImageNet-1k on 8 ranks, `DistributedSampler` itself says how
# many:

# %%
from IPython.display import Markdown, display
from torch.utils.data import DistributedSampler

imagenet = 1_281_167  # ImageNet-1k's training images
per_rank = len(DistributedSampler(range(imagenet), num_replicas=8, rank=0))  # no order is drawn: only the length
display(Markdown(f"{imagenet:,} images over 8 ranks: {per_rank:,} per rank, so {per_rank * 8 - imagenet} "
                 f"sample(s) read twice per epoch (`(-n) % w` = {(-imagenet) % 8})."))

# %% [markdown]
# Equal sizes matter for training: DDP all-reduces in every step, so every rank must take the
# same number of steps. A rank that runs out of batches stops calling the all-reduce that the
# others are waiting in; they wait until the collective's timeout (`init_process_group(timeout=)`,
# the script's `--timeout`; torch's default is ten minutes for nccl, thirty for gloo), then fail
# with an error; with gloo, at once if the finished rank exits and closes their connection (nccl
# in general waits out its timeout). With `drop_last=True` both ways give every rank `n // w`
# samples, and so `(n // w) // B` full batches (`B` the batch size): the same number on every rank.

# %%
from gpufeed.course.lesson12.shards import make_loader

for kind in ("fast", "sampler"):
    for drop_last in (False, True):
        steps = [len(make_loader((np.arange(11),), 2, kind, rank=r, world_size=3, drop_last=drop_last))
                 for r in range(3)]
        print(f"{kind:>7}, drop_last={drop_last!s:>5}: steps per rank {steps}"
              + ("   <- a DDP job would stall, then time out" if len(set(steps)) > 1 else "")
              + (f"   = (11 // 3) // 2 = {(11 // 3) // 2}" if drop_last else ""))

# %% [markdown]
# When the shards cannot be equal (a dataset that streams, a filter that drops samples per rank),
# `torch.distributed.algorithms.join.Join` lets the ranks finish at different steps: inside
# `with Join([model]):`, a rank that has run out of batches keeps answering the others'
# all-reduces with zero gradients until all are done. Two CPU processes (gloo) below, rank 0 with
# one step and rank 1 with two, without `Join` and with it (`gpufeed.course.lesson12.distributed.uneven_inputs`;
# its two processes fork from one that has imported torch; the run without `Join` waits out a 3 s timeout):

# %%
from gpufeed.course.lesson12.distributed import uneven_inputs

for use_join, ranks in uneven_inputs((1, 2), joins=(False, True), timeout=3).items():
    for r in ranks:
        print(f"Join={use_join!s:>5}, rank {r['rank']}: {r['steps']} step(s), "
              + (f"failed: {r['error']}" if r["error"] else "finished"))
same = ranks[0]["weight"] == ranks[1]["weight"]
display(Markdown(f"With `Join`, both ranks finished and their copies of the model are "
                 f"{'identical' if same else '**not** identical'} after {ranks[1]['steps']} steps of rank 1."))

# %% [markdown]
# **The `set_epoch` trap.** `DistributedSampler` only knows the epoch you tell it. Forget
# `sampler.set_epoch(epoch)` and every epoch has the same order; the model then sees the batches in
# the same order every epoch, and nothing warns you. (`FastLoader`, and gpufeed's `SamplerLoader`
# that wraps the sampler, move on by themselves each time you iterate.)

# %%
sampler = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=True, seed=0)
forgot = [list(sampler) for _ in range(3)]
told = []
for epoch in range(3):
    sampler.set_epoch(epoch)
    told.append(list(sampler))
print("without set_epoch:", forgot)
print("with set_epoch:   ", told)
print(f"without set_epoch, {len({tuple(o) for o in forgot})} distinct order(s) in 3 epochs; with it, "
      f"{len({tuple(o) for o in told})}.")

# %% [markdown]
# **The same trap in the augmentation.** Random crops and flips come from a generator. Seed it alike
# on every rank (a `torch.manual_seed(0)` at the top of the script, as many have) and every rank
# draws the same crops in the same order: each rank's k-th image gets the same window and flip, so
# N ranks make one augmentation sequence where they should make N. Put the rank in the seed, as
# gpufeed's `ImageLoader` does (`seeded_generator(seed, epoch, rank)`). DataLoader workers inherit
# the trap: torch seeds each worker with `base_seed + worker_id`, and draws `base_seed` from the main
# process's generator, alike on every rank that seeded it alike.

# %%
import torch

from gpufeed.data.orders import seeded_generator
from gpufeed.data.transforms import draw_crops


def crops(generator, n=64):  # n random 32x32 windows of 64x64 images: int64 [n, 3] (top, left, flip)
    corners, flips = draw_crops(n, (64, 64), 32, generator)
    return torch.cat([corners, flips[:, None].long()], dim=1)


for how, gen in (("torch.manual_seed(0) on every rank", lambda rank: torch.Generator().manual_seed(0)),
                 ("seeded by (seed, epoch, rank)", lambda rank: seeded_generator(0, 0, rank, 1))):
    rank0, rank1 = crops(gen(0)), crops(gen(1))
    print(f"{how}: {int((rank0 == rank1).all(dim=1).sum())} of {len(rank0)} crops the same on ranks 0 and 1")

# %% [markdown]
# ## 3. The dataset and the script
#
# The ranks share one memmap dataset (lesson 05), built once. The script,
# `torchrun --nproc-per-node N -m gpufeed.course.lesson12.distributed --data DIR`, is the recipe above: each
# rank maps the dataset, loops over its shard per epoch (with `--train`: a small CNN in DDP) and
# times its epochs, all ranks starting each together. Then an all-reduce sums how often each sample
# was read (above 1 is an overlap, 0 a missed sample) and rank 0 writes every rank's numbers to one
# JSON. The recipe's key lines, as the script has them:

# %%
import inspect

from pathlib import Path

from gpufeed.course.lesson12 import distributed

script = inspect.getsourcefile(distributed)
key_lines = ("init_process_group(", "make_loader(", "DistributedDataParallel(", "set_epoch(", "non_blocking=True")
print(f"{distributed.__name__}, line by line:")
for number, line in enumerate(Path(script).read_text().splitlines(), start=1):
    if any(k in line for k in key_lines) and not line.lstrip().startswith(("#", '"""')):
        print(f"{number:4}: {line}")

# %%
from gpufeed import config
from gpufeed.data.memmap import build_memmap
from gpufeed.measure.synth import synth_folder

n_images = config.pick(quick=256, full=2048)
side = config.pick(quick=64, full=160)
work = config.cache_dir() / "lesson12"
jpegs = synth_folder(work / f"jpeg-{n_images}", n=n_images, size=(side + 16, side + 16), classes=10, progress=False)
mm = build_memmap(jpegs.path, work / f"mm-{n_images}-{side}", size=(side, side), reuse=True, progress=False)
print(f"{mm.n} images of {side}x{side} in a memmap of {mm.nbytes / 2**20:.1f} MiB")

# %% [markdown]
# In a terminal you would type `torchrun ...`. A notebook's kernel may not have `torchrun` on its
# `PATH`, but `python -m torch.distributed.run` is the same program, run with the kernel's own
# Python. `gpufeed.course.lesson12.launch` builds that command with everything on one machine: the processes meet
# at `127.0.0.1` on a free port, and no network is needed.

# %%
from gpufeed.course.lesson12.launch import torchrun_command

passes = config.pick(quick=10, full=2, site=20)  # epochs per timed sample of loading: an epoch lasts milliseconds
script_args = ["--data", mm.path, "--batch-size", "32", "--epochs", str(config.pick(quick=2, full=5, site=3)), "--train",
               "--load-epochs", "5", "--load-passes", str(passes),
               "--backend", "gloo"]  # the CPU, also on a machine with GPUs (section 6 uses them)
print(" ".join(["python", *torchrun_command(2, ["DATA" if a == mm.path else a for a in script_args])[1:]]))

# %% [markdown]
# ## 4. One page cache for all the ranks on a machine
#
# The page cache belongs to the kernel, not to a process (lesson 05). When eight ranks on one
# machine map the same dataset file, the file sits in RAM once, and a page one rank has read is
# there for the seven others. To see it, we drop the file from the cache, then let two separate
# processes read every page in turn (`python -m gpufeed.course.lesson12.pagecache`, which also asks
# the kernel with `mincore` how much of the file was cached before it started), a few rounds.

# %%
from gpufeed.course.lesson12 import pagecache, reading
from gpufeed.course.prose import say

rounds = pagecache.cold_then_warm(mm.path, rounds=config.pick(quick=1, full=7, site=7))
for which in ("first", "second"):
    p = rounds[which][-1]
    before = "unknown" if p["resident_before"] is None else f"{p['resident_before']:.0%}"
    print(f"{which:>6} process, last round: {before} of the file cached before it started; {p['major']} major and "
          f"{p['minor']} minor page faults; {p['seconds'] * 1e3:.1f} ms to touch {p['pages']} pages")
say(reading.read_cold_warm(rounds))

# %% [markdown]
# Minor faults stay: each process must still map each page into its own address space (the
# kernel maps up to 16 neighbouring cached pages per fault), which costs microseconds, not a disk
# read. And memory: each process's *RSS* counts every page it maps, so the ranks' RSS added up
# counts the file once per rank; *PSS* divides each shared page among the processes that map it.
# Eight processes (four in quick mode) map the file at once below (`pagecache.shared_readers` reads
# `/proc/<pid>/smaps`).

# %%
files = pagecache.memmap_files(mm.path)
say(reading.read_memory(pagecache.shared_readers(files, config.pick(quick=4, full=8, site=8)),
                        sum(f.stat().st_size for f in files)))

# %% [markdown]
# On one machine, then: no rank reads a page from disk that another has already read, and RAM
# holds one copy. Across machines there is no such sharing: each node needs the dataset on its own
# disk (or a shared file system) and caches it in its own RAM.

# %% [markdown]
# ## 5. Per-rank throughput, 1 → 2 processes
#
# Now the script itself, with one process and with two, each with one thread, five runs of each
# in turns (`forked.in_turns`: the ranks are forked from a process that has imported torch, so a
# run starts in milliseconds; section 2's `Join` demo used the same). Each run's median epoch is one
# sample, and the verdict pairs the runs round by round.

# %%
import os

from gpufeed.course.lesson12 import forked

cores = os.cpu_count()
arms = forked.in_turns({"1 process": (1, 1), "2 processes": (2, 1)}, script_args, work,
                       rounds=config.pick(quick=1, full=5, site=5))
say(reading.read_scaling(arms["2 processes"], arms["1 process"], short_because=(
    f"Likely causes of the shortfall, not measured here: {cores} cores shared by both ranks, this kernel and "
    f"everything else running (the load average was {os.getloadavg()[0]:.1f} after the runs), and the gloo "
    "all-reduce of the gradients over loopback in every step.")))

# %%
fig, axes = plt.subplots(2, 1, figsize=(7.5, 4.4))
for ax, phase in zip(axes, ("load", "train")):
    one, two = arms["1 process"], arms["2 processes"]
    shown = {"1 process": one[f"{phase}, all"], "2 processes: rank 0": two[f"{phase}, rank 0"],
             "2 processes: rank 1": two[f"{phase}, rank 1"], "2 processes together": two[f"{phase}, all"]}
    lows, mids, highs = zip(*(m.rate_quartiles() for m in shown.values()))
    ax.barh(range(4), mids, xerr=[np.subtract(mids, lows), np.subtract(highs, mids)], capsize=3,
            color=[plotting.COLORS[c] for c in ("baseline", "read", "read", "copy")])
    ax.set_yticks(range(4), [plotting.ratio_label(k, v / mids[0]) for k, v in zip(shown, mids)])
    ax.invert_yaxis()
    ax.set_title("loading only" if phase == "load" else "loading + a training step (DDP with 2 processes)")
    ax.set_xlabel("images/s (median run, bars: IQR over the runs)")
fig.tight_layout()
plotting.caption(fig, S.machine, note="gloo, one thread per process")
plt.show()

# %% [markdown]
# The same script under torchrun, as you would start it, after we drop the dataset from the page
# cache again: who pays for the reads, epoch by epoch, and whether the shards were disjoint.

# %%
from gpufeed.course.lesson12.launch import launch
from gpufeed.data.folder import drop_cached

dropped = drop_cached(files)
two_ms, two = launch(2, script_args, work / "run-2.json", threads=1)
ok = all(e["disjoint"] and e["complete"] for e in two["shards"]["load"])
print(f"Shards disjoint and covering the dataset in every epoch: {ok} (checked by the all-reduce of read counts).")
say(reading.read_faults(two, dropped))

# %% [markdown]
# ## 6. The same script on GPUs, with nccl
#
# Nothing changes but the count: `torchrun --nproc-per-node $(nvidia-smi -L | wc -l) -m
# gpufeed.course.lesson12.distributed ...`. Each rank then has its own compute, and the all-reduce
# runs over whatever links the GPUs (NVLink where the machine has it, else PCIe; `nvidia-smi topo
# -m` shows which). Each rank takes GPU `LOCAL_RANK`, the backend is nccl, `FastLoader`
# copies each pinned batch to the rank's GPU without blocking, and the model (ResNet-18 here) trains
# in bfloat16. Without CUDA the cell shows our committed GPU reference, else NVIDIA's published
# ResNet-50 throughput on one and eight A100s (their recipe, not this script). With one GPU it runs
# one rank: one GPU's feed, not scaling. The batch per rank is 128, or less where a rank has fewer
# samples (`gpufeed.course.lesson12.distributed.batch_per_rank`).

# %%
from gpufeed.measure import published, results

gpu_ms = []
if S.cuda:
    import torch

    from gpufeed.course.lesson12.distributed import batch_per_rank

    gpus = torch.cuda.device_count()
    gpu_args = ["--data", mm.path, "--batch-size", str(batch_per_rank(mm.n, gpus, 128)), "--epochs", str(config.pick(quick=3, full=5)),
                "--train", "--model", "resnet18"]
    gpu_ms, gpu_doc = launch(gpus, gpu_args, work / "run-gpu.json", threads=max(1, cores // gpus))
    for m in gpu_ms:
        m.name = f"nccl: {m.name}"  # beside the gloo runs in the saved file
else:
    ref = results.gpu_reference("lesson12")  # says where the numbers come from
    if ref is not None:
        for m in (m for m in ref[0] if m.params.get("backend") == "nccl" and m.params.get("rank") == "all"):
            print(f"  {m.name}: {m.items_per_s:,.0f} images/s ({m.params['world_size']} GPU(s), {m.params['model']})")
    else:  # the scaling read from the published figures themselves
        theirs = {f.id: f for f in published.for_lesson("lesson12")}
        one, eight = theirs.get("dle-rn50-train-1xa100-amp"), theirs.get("dle-rn50-train-8xa100-amp")
        if one and eight:
            print(f"Their 8 GPUs trained {eight.figure / one.figure:.2f}x the images/s of one ({eight.figure / one.figure / 8:.0%} "
                  f"of linear scaling), {eight.label()}.")

# %%
turns = [m for arm in arms.values() for m in arm.values()]
results.save_lesson("lesson12", [*turns, *two_ms, *gpu_ms], n_images=mm.n, side=side, cores=cores,
                    arms=list(arms), load_average=os.getloadavg()[0])
for m in gpu_ms:
    print(f"{m.name} on {gpus} GPU(s): {m.items_per_s:,.0f} images/s")

# %% [markdown]
# ### Deeper (optional): several machines
#
# Not run here, but the same script, on every node.

# %% [markdown] tags=["deeper"]
# Start torchrun on every node with the same rendezvous, and it
# assigns global ranks across them. With the c10d rendezvous, any one node's address serves as the
# meeting point, and `--rdzv-id` names the job:
#
# ```bash
# # on each of the 2 nodes, 8 GPUs each: 16 ranks
# torchrun --nnodes 2 --nproc-per-node 8 \
#     --rdzv-backend c10d --rdzv-endpoint node0.cluster:29400 --rdzv-id job42 \
#     -m gpufeed.course.lesson12.distributed --data /local/nvme/mm --out run.json --train --model resnet18
# ```
#
# * `RANK` now runs from 0 to 15, `LOCAL_RANK` from 0 to 7 on each node. Each rank still reads
#   1/16 of every epoch, and over the epochs every part of the dataset, so each node should keep a
#   copy on fast local storage (its page cache then holds it in RAM once per node).
# * nccl picks the fastest link (NVLink inside a node, InfiniBand or RoCE between nodes);
#   `NCCL_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME` choose the network interface when a node has
#   several. On one machine the script tells gloo to use loopback.
# * `--nnodes 1:4` makes the job elastic (it starts with 1 to 4 nodes) and `--max-restarts 3` restarts
#   the workers after a failure: save checkpoints, and on restart `set_epoch` to where you were.

# %% [markdown]
# ## Key takeaways
#
# * One process per GPU (DDP), not one process driving all GPUs (DataParallel): each process has
#   its own loader, and what travels is the gradients (overlapped with the backward pass) and the
#   buffers, such as BatchNorm statistics, broadcast from rank 0.
# * Each rank reads its own shard: covering the epoch, reshuffled per epoch from a seed shared by
#   all ranks, disjoint unless padded. `DistributedSampler` pads with repeats for equal sizes and needs
#   `set_epoch`; `FastLoader` pads the same way by default, and with `pad=False` never repeats; then
#   train with `drop_last` so every rank takes as many steps, or with `Join` where they cannot.
# * The shuffle's seed is shared by the ranks; the augmentation's must not be: put the rank in it.
# * On one machine all ranks share one page cache: one copy of a memmap in RAM, read from disk once.
#   To know what the ranks hold, add up their PSS, not their RSS.
# * Scaling needs resources per rank. On a small CPU-only machine the ranks share the cores (section
#   5 measured what that leaves of 2x); on GPUs each rank brings its own compute, and the loader must
#   keep up with N of them (per-rank images/s times N).
#
# ## Exercises
#
# 1. Run the two-process cell with `--loader sampler` added to `script_args` and a dataset of 255
#    images. How many samples are read twice per epoch? Check with the cell below.
# 2. Give each of the two processes two threads (`launch(2, ..., threads=2)`): four threads on this
#    machine's cores. What happens to the per-rank images/s, and why?
# 3. Remove `sampler.set_epoch(epoch)` from section 2's loop and measure with `check_shards` how many
#    samples each rank sees in epochs 0 and 1 taken together. What fraction of the dataset is that?
#
# A worked solution to each exercise follows the self-check, folded: try first, then unfold it.

# %%
# Self-check for exercise 1: your answer (an int) for 255 images over 2 ranks with DistributedSampler.
my_repeats = None
if my_repeats is not None:
    truth = check_shards([shard(255, r, 2, kind="sampler") for r in range(2)], 255)["duplicates"]
    print("right" if my_repeats == truth else f"not quite: count the padding DistributedSampler adds ({truth})")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 1: DistributedSampler's padding, 255 images over 2 ranks.
# Why: DistributedSampler gives every rank ceil(n / w) samples, so that all take the same number of
# steps: ceil(255 / 2) = 128 each, 256 reads for 255 images. It fills the gap by repeating the first
# (-n) % w samples of the epoch's order: 1 sample read twice per epoch. `--loader fast` repeats
# nothing and gives the ranks 128 and 127. The script builds each rank's loader with the same
# `make_loader` that `shard` uses here, so its all-reduce of the read counts finds the same number
# (a two-process run of it takes tens of seconds on a busy machine; section 5 shows how).
import math

my_repeats = math.ceil(255 / 2) * 2 - 255
per_rank = len(DistributedSampler(range(255), num_replicas=2, rank=0))  # the sampler's own length
counted = {kind: check_shards([shard(255, r, 2, kind=kind) for r in range(2)], 255) for kind in ("sampler", "fast")}
assert my_repeats == counted["sampler"]["duplicates"], "the self-check above would say 'not quite'"
print(f"DistributedSampler: {per_rank} samples per rank, {2 * per_rank} reads of 255 images, so {my_repeats} read "
      f"twice per epoch (check_shards counts {counted['sampler']['duplicates']}); FastLoader: "
      f"{counted['fast']['duplicates']} read twice, every image read ({counted['fast']['covered']} of 255).")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 2: two threads in each of two processes.
# Why it can hurt: torch's threads are an OpenMP team, and each parallel operation ends when its
# slowest thread is done. Two processes with two threads each make four threads for this machine's
# cores, which also run this kernel and whatever else is running. A thread that waits for a core
# holds up its whole team at every operation, so each rank's step waits, and DDP's all-reduce then
# makes the other rank wait for it too. Both phases run parallel operations: the gather of each
# batch is one, and a training step is many. Run the same script with one and with two threads per
# process, in turns as section 5 did (`forked.in_turns`), with fewer epochs so that a slow case
# stays short (the rates are per epoch, so they compare).
short = ["--data", mm.path, "--batch-size", "32", "--epochs", "1", "--load-epochs", "2", "--load-passes", str(passes),
         "--train", "--backend", "gloo"]
threads_arms = forked.in_turns({"1 thread each": (2, 1), "2 threads each": (2, 2)}, short, work,
                               rounds=config.pick(quick=1, full=5, site=5))
for arm, ms in threads_arms.items():
    for phase in ("load", "train"):
        per_rank = [ms[f"{phase}, rank {r}"].items_per_s for r in range(2)]
        print(f"{arm:>15}, {phase:>5}: images/s per rank " + ", ".join(f"{x:,.0f}" for x in per_rank))
say(reading.read_threads(threads_arms["2 threads each"], threads_arms["1 thread each"], cores))


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 3: forgetting `set_epoch`.
# Why: DistributedSampler draws its order from seed + epoch, and the epoch is only what you tell
# it. Without `set_epoch`, epoch 1 repeats epoch 0: each rank reads the very same shard again, so
# over two epochs it sees n / w distinct samples, 1 / w of the dataset, where a fresh shuffle
# would have shown it about 1 - (1 - 1 / w)^2 of it (75% for 2 ranks: a sample missed in epoch 0
# has an even chance of landing in this rank's half in epoch 1). Count it with `check_shards` on
# section 2's 10 samples over 2 ranks, then on 10,000 so that the fractions are not luck.
fraction = {}
for n in (10, 10_000):
    for told_epoch in (False, True):
        seen = []
        for rank in range(2):
            sampler = DistributedSampler(range(n), num_replicas=2, rank=rank, shuffle=True, seed=0)
            epochs = []
            for epoch in range(2):
                if told_epoch:
                    sampler.set_epoch(epoch)
                epochs.append(list(sampler))
            seen.append(check_shards(epochs, n)["covered"])  # distinct samples this rank saw in epochs 0 and 1
        fraction[n, told_epoch] = sum(seen) / (2 * n)
        print(f"n = {n:>6}, {'with' if told_epoch else 'without'} set_epoch: each rank saw {seen} distinct samples in "
              f"epochs 0 and 1, {fraction[n, told_epoch]:.0%} of the dataset on average")
print(f"Without set_epoch a rank sees {fraction[10_000, False]:.0%} of the dataset, the same part in every epoch; the "
      "model still sees every sample each epoch (the other rank reads the rest), but in the same batches and the same "
      f"order every time. With it, a rank sees {fraction[10_000, True]:.0%} after two epochs, and each epoch is a new "
      "shuffle.")

# %% [markdown]
# ## Further reading
#
# * [Getting Started with Distributed Data Parallel](https://docs.pytorch.org/tutorials/intermediate/ddp_tutorial.html) (Shen Li, PyTorch tutorials): one process per GPU, `DistributedSampler` and `set_epoch`: the script of this lesson.
# * [`DistributedDataParallel`](https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html) (PyTorch docs): what DDP does with inputs and gradients, and its requirements.
# * [`torch.utils.data`](https://docs.pytorch.org/docs/stable/data.html) (PyTorch docs): `DistributedSampler`: padding, `drop_last` and shuffling per epoch.
# * [ResNet50 v1.5 For PyTorch](https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Classification/ConvNets/resnet50v1.5/README.md) (NVIDIA DeepLearningExamples): NVIDIA's scaling from 1 to 8 A100s for ResNet-50 (6.72x), measured with their recipe.
