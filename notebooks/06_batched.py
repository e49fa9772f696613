# %% [markdown]
# # 06 · Batched fetching
#
# **What you will learn:** what one Python call per sample costs; how to fetch a whole batch in
# one call (`__getitems__`, a `BatchSampler` as the sampler, a minimal fast loader); what
# shuffling a large index array costs each epoch, and the trade-off of a grouped shuffle; and, as
# a quiz, which of three loops finishes 1000 epochs first. Folded deep dives go further (the
# kernel behind `index_select`, a ring of buffers, a dataset four times larger than the memory).
#
# **Time:** about 20 minutes (1 minute in quick mode). **Prerequisites:** [05 · Memory-mapped
# datasets](05_memmap.ipynb).

# %%
import gpufeed

S = gpufeed.setup("06")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The cost of one `__getitem__` per sample
#
# A `DataLoader` with `batch_size=B` asks its sampler for B indices, calls `dataset[i]` B times,
# then `collate_fn` stacks the B small results into a batch. Each call runs Python: a function
# call, a tuple, two tiny tensors. When the data is already a tensor in memory (a memmap, lesson 05),
# that overhead *is* the loader. First, a measurement from Nasy's talk "The fast train loops"
# (lesson 00's Sources; the talk does not say on what hardware): 100 calls took 122 us, one
# batched call of the same 100 samples 3.4 us, 36x less. Here, the same two:

# %%
import torch
from torch.utils.data import TensorDataset

from gpufeed import config
from gpufeed.course.lesson06 import reading
from gpufeed.course.prose import say
from gpufeed.measure.verdict import compare, in_turns
from gpufeed.data.gather import BatchTensorDataset
from gpufeed.measure.harness import benchmark, interleave

# One torch thread in this process throughout: the comparisons are per core, a loader's main process
# shares the machine with the training step, and on a busy machine torch's thread pool can spend
# more time waiting for its threads than working (remove this line and compare).
torch.set_num_threads(1)
N, B = 300_000, 300  # samples, batch size
x, y = torch.randn(N, 16), torch.randint(0, 1000, (N,))  # 16 features and a label per sample
per_sample, batched = TensorDataset(x, y), BatchTensorDataset(x, y)
idx = torch.randint(0, N, (100,))
idx_list = idx.tolist()
assert all(torch.equal(batched[idx][0][k], per_sample[i][0]) for k, i in enumerate(idx_list))  # same data
talk = in_turns(lambda: [batched[idx] for _ in range(10)],  # 10 calls a sample: one alone is a few us
                lambda: [[per_sample[i] for i in idx_list] for _ in range(10)],
                names=("1 batched call", "100 __getitem__ calls"), repeats=20)
say(reading.talk(talk.verdict, calls_us=talk.b.median * 1e5, one_us=talk.a.median * 1e5))

# %% [markdown]
# Now whole epochs at batch 300 (over all 300,000 samples; quick mode takes the first 30,000, so
# that every way still pays for a whole epoch's shuffle), four ways, all single-process and
# shuffled:
#
# 1. **per sample**: `DataLoader(TensorDataset, batch_size=300, shuffle=True)`: 300 calls and a
#    collate per batch;
# 2. **`__getitems__`**: if the dataset has `__getitems__(indices)`, the DataLoader calls it once
#    per batch. Ours returns the finished batch, so `collate_fn` must pass it through (`no_collate`);
# 3. **`BatchSampler` as the sampler** with `batch_size=None`: each "index" the DataLoader draws is a
#    list of 300, and it calls `dataset[list]` once; with `batch_size=None` there is no collating;
# 4. **`FastLoader`** (`gpufeed.data.loader`): no DataLoader at all (section 2).

# %%
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from gpufeed.data.gather import no_collate
from gpufeed.data.loader import FastLoader

n_epoch = config.pick(quick=30_000, full=N, site=N)
per_sample, batched = TensorDataset(x[:n_epoch], y[:n_epoch]), BatchTensorDataset(x[:n_epoch], y[:n_epoch])
loaders = {
    "per sample": DataLoader(per_sample, batch_size=B, shuffle=True),
    "__getitems__": DataLoader(batched, batch_size=B, shuffle=True, collate_fn=no_collate),
    "BatchSampler, batch_size=None": DataLoader(batched, sampler=BatchSampler(RandomSampler(batched), B, drop_last=False),
                                                batch_size=None),
    "FastLoader": FastLoader((x[:n_epoch], y[:n_epoch]), B, seed=0),
}
# Correctness first: in the same (unshuffled) order, every way gives the same batches.
same_order = [DataLoader(per_sample, batch_size=B), DataLoader(batched, batch_size=B, collate_fn=no_collate),
              DataLoader(batched, sampler=BatchSampler(SequentialSampler(batched), B, False), batch_size=None),
              FastLoader((x[:n_epoch], y[:n_epoch]), B, shuffle=False)]
for batches in zip(*same_order):
    assert all(torch.equal(b[0], batches[0][0]) and torch.equal(b[1], batches[0][1]) for b in batches)
print("all four give identical batches in the same order")

# %%
def epoch(loader):
    for _batch in loader:
        pass


ms = interleave({name: lambda ld=ld: epoch(ld) for name, ld in loaders.items()}, items=n_epoch,
                repeats=config.pick(quick=3, full=5, site=5))  # in turns: per sample, __getitems__, ...
for m in ms:
    print(m)

# %%
import matplotlib.pyplot as plt

from gpufeed.measure import plotting, results

fig, ax = plotting.bars(ms, baseline="per sample", unit="samples/s", machine=S.machine,
                        title=f"one epoch of {n_epoch:,} in-memory samples, batch {B}")
plt.show()
by = {m.name: m for m in ms}
say(reading.epochs({name: compare(m, by["per sample"], paired=True) for name, m in by.items() if name != "per sample"},
                   {name: m.items_per_s for name, m in by.items()}))

# %% [markdown]
# ## 2. A minimal fast loader
#
# Strip the DataLoader away and what is left is three lines: draw a permutation of the indices,
# cut it into slices of `B`, fetch each slice with one `index_select` per field. Seeding the
# permutation with `(seed, epoch)` gives a new order each epoch and the same orders on every run
# (and on every process, which lesson 12 needs). By hand:

# %%
from gpufeed.data.orders import permutation


def simple_loader(x, y, batch_size, seed, epoch):
    order = permutation(len(x), seed, epoch)  # int64 [N], a new order per (seed, epoch)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        yield torch.index_select(x, 0, idx), torch.index_select(y, 0, idx)


fast = FastLoader((x, y), B, seed=0)
for epoch_number in range(2):
    for (xa, ya), (xb, yb) in zip(simple_loader(x, y, B, seed=0, epoch=epoch_number), fast):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
print("the hand-written loader and gpufeed.data.loader.FastLoader give the same batches, epoch after epoch")

# %% [markdown]
# `FastLoader` adds what a training loop needs: `drop_last`, `set_epoch(e)` (or it moves on by
# itself each time you iterate), `rank`/`world_size` for a shard per process, padded so every rank yields as many batches (lesson 12),
# `device="cuda"` (gather into pinned memory, copy the batch whole with `non_blocking=True`), and
# it takes tensors, tuples or dicts of them, NumPy arrays (`np.memmap` too) and the memmap
# dataset of lesson 05. Three ranks over 10 samples, two epochs:

# %%
for e in range(2):
    shards = []
    for rank in range(3):
        loader = FastLoader(torch.arange(10), batch_size=2, seed=0, rank=rank, world_size=3)
        loader.set_epoch(e)
        shards.append(torch.cat(list(loader)).tolist())
    print(f"epoch {e}: " + "  ".join(f"rank {r}: {s}" for r, s in enumerate(shards)))

# %%
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.measure.synth import synth_folder

src = synth_folder(config.cache_dir() / "lesson06" / "jpeg", n=32, size=(96, 96), classes=4, progress=False).path
images = load_memmap(build_memmap(src, config.cache_dir() / "lesson06" / "mm", size=(64, 64), reuse=True, progress=False).path)
batch = next(iter(FastLoader(images, batch_size=8, seed=0)))
print(type(batch).__name__, tuple(batch.images.shape), batch.images.dtype, batch.targets.tolist())

# %% [markdown]
# **Why `index_select`, and reusable buffers.** On rows as large as images, `t[idx]` (torch's
# general advanced indexing) copies element by element, while `torch.index_select` copies whole
# rows. And a fresh batch may be fresh memory: the OS hands it over page by page, each first touch
# a page fault (lesson 05), unless the allocator hands back memory a freed batch left behind.
# `FastLoader(..., reuse_buffers=2)` gathers into two preallocated buffers in turn; the catch is
# that a batch is overwritten two batches later, so use it (or copy it) first. The three, in turns,
# with the page faults of a call of each counted (`resource.getrusage`, as in lesson 05):

# %%
import resource

from gpufeed.measure.machine import cache_bytes


def minor_faults(fn):  # page faults of one call of fn (lesson 05's count)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


pixels = torch.randint(0, 256, (config.pick(quick=512, full=4096), 3, 224, 224), dtype=torch.uint8)  # a warm memmap
rows, buffer = torch.randperm(len(pixels))[:64], torch.empty(64, 3, 224, 224, dtype=torch.uint8)
assert torch.equal(pixels[rows], torch.index_select(pixels, 0, rows))
ways = {"t[idx]": lambda: pixels[rows], "index_select": lambda: torch.index_select(pixels, 0, rows),
        "index_select into a buffer": lambda: torch.index_select(pixels, 0, rows, out=buffer)}
gathers = interleave(ways, nbytes=buffer.numel(), repeats=config.pick(quick=20, full=40, site=40))
paged = {name: sorted(minor_faults(fn) for _ in range(5))[2] for name, fn in ways.items()}  # the median of 5 calls
deeper = []  # what the optional deep dives below measure, saved with the rest (section 4)
fig, ax = plotting.bars(gathers, rate="bytes", machine=S.machine, title="gathering 64 images of 224x224 (uint8)")
plt.show()
g = {m.name: m for m in gathers}
say(reading.gathers(compare(g["index_select"], g["t[idx]"], paired=True),
                    compare(g["index_select into a buffer"], g["index_select"], paired=True),
                    fresh_faults=paged["index_select"], buffer_faults=paged["index_select into a buffer"],
                    gb_s=g["index_select into a buffer"].gb_per_s, source_bytes=pixels.numel(), l3=cache_bytes(3)))
del pixels

# %% [markdown]
# ### Deeper (optional): `index_select`'s grain size
#
# Why `FastLoader` cuts each image into pieces before one `index_select` on several threads
# (`take_rows`), measured on one thread and on every core; the lesson goes on without it.

# %% [markdown] tags=["deeper"]
# **Whole images per thread.** With more than one core, `index_select` should split the batch
# between them. Its CPU kernel (`index_select_out_cpu_` in PyTorch's `TensorAdvancedIndexing.cpp`)
# does so only when a row holds fewer than 32,768 elements (`at::internal::GRAIN_SIZE`). An image
# row is larger (3x224x224 = 150,528), so the kernel copies the batch one image at a time and
# splits each image's copy across the threads, which must meet after every image. Viewed as 6 equal
# pieces of 25,088 elements (a view: nothing is copied), the same gather takes the kernel's other
# path: the threads share out the pieces, and each copies a run of whole images with `memcpy`.
# Same bytes, same order; `gpufeed.data.gather.take_rows` holds this, and `FastLoader` uses it.
# Below, both on one thread (as this lesson's other cells) and on every core.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
def gather_in_pieces(pixels, rows, out, k=6):
    """torch.index_select(pixels, 0, rows, out=out), each row cut into k pieces below GRAIN_SIZE."""
    piece = pixels[0].numel() // k  # 150,528 / 6 = 25,088 elements
    pieces = (rows[:, None] * k + torch.arange(k)).view(-1)  # image i -> pieces i*k .. i*k+k-1
    torch.index_select(pixels.view(-1, piece), 0, pieces, out=out.view(-1, piece))
    return out  # [B, 3, 224, 224]: the pieces were written in place, image after image


def piece_speeds(n_images, threads, batch=64):
    pixels = torch.randint(0, 256, (n_images, 3, 224, 224), dtype=torch.uint8)
    rows, buffer = torch.randperm(n_images)[:batch], torch.empty(batch, 3, 224, 224, dtype=torch.uint8)
    assert torch.equal(gather_in_pieces(pixels, rows, buffer), torch.index_select(pixels, 0, rows))  # same values
    names = [f"{way}, {threads} thread(s)" for way in ("one image at a time", "whole images per thread")]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:  # in turns
        return interleave({names[0]: lambda: torch.index_select(pixels, 0, rows, out=buffer),
                           names[1]: lambda: gather_in_pieces(pixels, rows, buffer)}, nbytes=buffer.numel(),
                          repeats=config.pick(quick=20, full=30, site=90), params={n: {"threads": threads} for n in names})
    finally:
        torch.set_num_threads(before)


from gpufeed.measure.machine import usable_cores

pieces = [m for t in sorted({1, usable_cores()}) for m in piece_speeds(config.pick(quick=512, full=4096), t)]
deeper += pieces  # saved with the lesson's results (section 4)
for one, whole in zip(pieces[::2], pieces[1::2]):
    print(f"{one.params['threads']} thread(s): one image at a time {one.gb_per_s:.1f} GB/s, whole images per thread "
          f"{whole.gb_per_s:.1f} GB/s")

# %% [markdown] tags=["deeper"]
# What to look for: on one thread the two paths differ only in how each image is copied (for a row
# above the threshold, `TensorIterator`'s general copy loop, set up anew for every image; for the
# pieces, `memcpy`), which is small next to copying 150 KB, so expect them close. With more
# threads, the pieces also save the threads' meeting after every image.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
say(reading.pieces({one.params["threads"]: compare(whole, one, paired=True) for one, whole in zip(pieces[::2], pieces[1::2])}))

# %% [markdown]
# ### Deeper (optional): a ring of buffers the size of the cache
#
# How many buffers `reuse_buffers` should keep, measured against this CPU's last-level cache; the
# lesson goes on without it.

# %% [markdown] tags=["deeper"]
# **A ring the size of the cache.** How many buffers should `reuse_buffers` keep? As few as the
# consumer needs: two when a batch is used while the next is gathered (lesson 08). Every batch is
# written into the next buffer of the ring, and a ring larger than the CPU's last-level cache (L3)
# has left the cache by the time it comes round again, so each write goes all the way to RAM. To
# show that, the small ring must fit in the cache: the cell reads this CPU's L3 size from the
# operating system and picks a batch whose ring of 2 fills half of it, then compares a ring of 2
# with a ring four times the L3. (With a fixed batch of 64 images, 9.6 MB, a ring of 2 is 19 MB:
# both rings miss an 8 MiB L3 and the comparison shows nothing.)

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from gpufeed.measure.machine import cache_bytes

IMAGE_BYTES = 3 * 224 * 224  # one uint8 image
l3 = cache_bytes(3)  # bytes, or None where the OS does not say
l3_known = l3 is not None
l3 = l3 or 32 << 20  # assume 32 MiB when unknown, and say so below
ring_batch = max(1, l3 // 4 // IMAGE_BYTES)  # images per batch: a ring of 2 fills half the L3
big_ring = max(3, -(-4 * l3 // (ring_batch * IMAGE_BYTES)))  # buffers: a ring of at least 4x the L3


def ring_speeds(n_images, batch, rings):
    pixels = torch.randint(0, 256, (n_images, 3, 224, 224), dtype=torch.uint8)
    loaders = {f"ring of {k}": FastLoader(pixels, batch, seed=0, drop_last=True, reuse_buffers=k) for k in rings}
    images = len(next(iter(loaders.values()))) * batch  # per epoch
    return interleave({name: lambda ld=ld: [None for _ in ld] for name, ld in loaders.items()}, items=images,
                      nbytes=images * pixels[0].numel(), repeats=config.pick(quick=5, full=7, site=25),
                      params={f"ring of {k}": {"batch": batch, "ring": k, "l3_bytes": l3} for k in rings})


# at least 4 batches an epoch, however large the L3 (hundreds of MiB on some server CPUs)
rings = ring_speeds(max(config.pick(quick=512, full=4096), 4 * ring_batch), ring_batch, (2, big_ring))
small, large = rings
deeper += rings  # saved with the lesson's results (section 4)
say(reading.ring(compare(small, large, paired=True), l3=l3, l3_known=l3_known, batch=ring_batch, big_ring=big_ring,
                  image_bytes=IMAGE_BYTES, small_rate=small.items_per_s, large_rate=large.items_per_s))

# %% [markdown]
# ### Deeper (optional): what the shuffle costs
#
# A shuffled gather against a copy of the same rows in file order, each into a ring of two
# buffers and into one; the lesson goes on without it.

# %% [markdown] tags=["deeper"]
# **The order or the footprint?** A shuffled batch reads 64 rows from 64 places of the file; a
# copy in file order reads one run. `gpufeed.measure.ceilings.loader_bounds` times both, in turns,
# on the same rows and into the same ring of buffers (what `gpufeed bench` prints as the raw
# fetch's fraction of the streaming copy). The cell runs it with a ring of two (a batch in use
# while the next is gathered) and with one buffer: one 9.6 MB batch may stay in an L3 large
# enough (the deep dive above reads this CPU's), and then its writes need not reach RAM.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from gpufeed.measure.ceilings import loader_bounds

shuffle_pixels = torch.randint(0, 256, (config.pick(quick=512, full=4096), 3, 224, 224), dtype=torch.uint8)
by_ring = {k: loader_bounds(shuffle_pixels, 64, repeats=config.pick(quick=3, full=7, site=15), buffers=k,
                            min_bytes=config.pick(quick=64, full=256, site=128) << 20) for k in (2, 1)}
deeper += [m for pair in by_ring.values() for m in pair]  # saved with the lesson's results (section 4)
(stream2, fetch2), (stream1, fetch1) = by_ring[2], by_ring[1]
say(reading.order_or_footprint(compare(fetch2, stream2, paired=True), compare(fetch1, stream1, paired=True),
                               stream_two=stream2.items_per_s, stream_one=stream1.items_per_s))


# %% [markdown]
# ## 3. Shuffling a large index array each epoch
#
# `torch.randperm(n)` writes `n` int64 values in random places of an array of `8n` bytes: the
# larger the array, the more of those writes miss the CPU's caches. A **grouped shuffle** shuffles
# the order of blocks of `g` neighbouring indices, then each block within itself: every block's
# shuffle fits in the cache, and a loader can make the blocks one at a time as it goes
# (`FastLoader(..., group_size=g)`). Both, in turns, at each size, and their cost per index:

# %%
import math

from gpufeed.data.orders import grouped_permutation

sizes = config.pick(quick=[10**5, 10**6, 3 * 10**6], full=[10**5, 10**6, 10**7, 10**8], site=[10**5, 10**6, 10**7])
group = 4096
pairs = [interleave({f"randperm {n:.0e}": lambda n=n: permutation(n), f"grouped {n:.0e}": lambda n=n: grouped_permutation(n, group)},
                    repeats=config.pick(quick=3, full=5, site=15), items=n) for n in sizes]
full, grouped = [p[0] for p in pairs], [p[1] for p in pairs]
fig, ax = plt.subplots()
ax.loglog(sizes, [m.median * 1e3 for m in full], "o-", color=plotting.COLORS["baseline"], label="torch.randperm")
ax.loglog(sizes, [m.median * 1e3 for m in grouped], "o-", color=plotting.COLORS["copy"],
          label=plotting.ratio_label(f"grouped, g={group}", full[-1].median / grouped[-1].median))
ax.set_xlabel("indices to shuffle")
ax.set_ylabel("time per epoch (ms)")
ax.legend(title="largest size, vs randperm")
plotting.caption(fig, S.machine)
plt.show()
at_n = benchmark(lambda: permutation(N), name=f"randperm {N:,}", repeats=5)
epoch_s = by["FastLoader"].median * N / n_epoch  # section 1's fastest epoch, scaled to N samples
ns = {name: (ms[0].median / sizes[0] * 1e9, ms[-1].median / sizes[-1] * 1e9) for name, ms in (("randperm", full), ("grouped", grouped))}
say(reading.shuffle_cost(compare(grouped[-1], full[-1], paired=True), n=sizes[-1], full_ms=full[-1].median * 1e3,
                         grouped_ms=grouped[-1].median * 1e3, ns=ns, at_n=N, at_n_ms=at_n.median * 1e3,
                         epoch_ms=epoch_s * 1e3,
                         by_size={n: compare(g, f, paired=True) for n, g, f in zip(sizes, grouped, full)}))

# %% [markdown]
# The price of the grouped shuffle is randomness. A batch of 300 now comes from one or two blocks
# of 4096 neighbours. If neighbours are alike, say a dataset stored class by class as an image
# folder is, a batch holds only a few classes, and training suffers. We count the distinct classes
# per batch, for 1000 classes of 300 samples each stored in class order, and once more after
# storing the samples in a random order (which is what to do at build time).

# %%
labels = torch.arange(1000).repeat_interleave(300)  # class order, like an image folder
stored_shuffled = labels[permutation(len(labels), seed=123)]  # shuffled once, at build time

from gpufeed.course.lesson06.shuffles import classes_per_batch, plot_grouped  # distinct labels per batch

for name, lab in (("class order", labels), ("stored shuffled", stored_shuffled)):
    full_c = classes_per_batch(lab, permutation(len(lab)), B)
    grouped_c = classes_per_batch(lab, grouped_permutation(len(lab), group), B)
    print(f"{name:>15}: {full_c:5.1f} classes per batch with a full shuffle, {grouped_c:5.1f} with a grouped one")

in_order = classes_per_batch(labels, grouped_permutation(len(labels), group), B)
stored_full = classes_per_batch(stored_shuffled, permutation(len(labels)), B)
stored_grouped = classes_per_batch(stored_shuffled, grouped_permutation(len(labels), group), B)
say(f"With data in class order, a grouped shuffle puts about **{in_order:.0f}** classes in a batch of {B}. Stored "
    f"shuffled once, it puts {stored_grouped:.0f} (a full shuffle: {stored_full:.0f}), so the batches mix classes "
    + ("about as well. " if stored_grouped >= 0.95 * stored_full else "less well. ")
    + f"It is still not as random as a full shuffle: the blocks of {group:,} are the same every epoch (only their "
    "order and the order inside them change), so a sample only ever shares a batch with the samples of its own "
    "block, epoch after epoch (and, in a batch that straddles two blocks, with the block that comes next in that "
    "epoch's random order of blocks: not its neighbour in the file, and a different one each epoch).")

# %% [markdown]
# The same count for other block sizes (`gpufeed.course.lesson06.shuffles.plot_grouped`, which draws the
# deck's slide too): larger blocks mix more classes into a batch from class-ordered data.

# %%
fig = plot_grouped(labels, batch=B, groups=[256, 1024, 4096, 16384, 65536])

# %% [markdown]
# **Sorting the indices within a batch** (`FastLoader(..., sort_indices=True)`) keeps each batch's
# samples, so the mean loss and its gradient do not change, and a cold read moves forward through
# the file instead of jumping back and forth. The catch: the batch is no longer in random order, so
# code that cuts it into parts (gradient-accumulation micro-batches, `DataParallel`'s split across
# GPUs) gets parts ordered by index: by class, in a folder-ordered dataset. One batch of the
# class-ordered labels, as drawn and sorted, cut in 4 parts:

# %%
drawn, ordered = (next(iter(FastLoader(torch.arange(len(labels)), B, seed=0, sort_indices=sort))) for sort in (False, True))
assert torch.equal(drawn.sort().values, ordered)  # the same samples
for name, idx in (("as drawn", drawn), ("sorted", ordered)):
    parts = labels[idx].view(4, -1)  # 4 micro-batches of 75
    backward = int((idx.diff() < 0).sum())  # reads that jump back in the file
    print(f"{name:>8}: {backward:3d} of {B - 1} steps go back in the file; the 4 parts hold classes "
          + ", ".join(f"{lo}-{hi}" for lo, hi in zip(parts.min(1).values.tolist(), parts.max(1).values.tolist())))

# %% [markdown]
# ## 4. Quiz: which loop finishes first?
#
# 1000 epochs over 300,000 samples (one number each), shuffled, in batches of 300. Three ways:
#
# * **pure Python**: the samples in a list, `random.shuffle` an index list, slice it, and build
#   each batch with a list comprehension;
# * **DataLoader with workers**: a `TensorDataset`, `shuffle=True`, one worker per core;
# * **NumPy**: `rng.permutation(n)`, slice it, fancy-index the array.
#
# Which one finishes first? Make your guess below, then run the measurement.

# %%
import ipywidgets as widgets
from IPython.display import display

guess = widgets.Dropdown(options=[("choose...", "-"), ("pure Python", "pure Python"),
                                  ("DataLoader with workers", "DataLoader with workers"), ("NumPy", "NumPy")],
                         value="-", description="Fastest:")
feedback = widgets.Output()


def on_guess(change):
    with feedback:
        feedback.clear_output()
        print(f"You said: {change['new']}. Now run the cells below and compare.")


guess.observe(on_guess, names="value")
display(widgets.VBox([guess, feedback]))

# %%
import itertools
import random

import numpy as np

from gpufeed.measure.machine import usable_cores

values = np.random.default_rng(0).standard_normal(N).astype(np.float32)  # one number per sample
as_list = values.tolist()
rng = np.random.default_rng(0)


def python_epoch():
    order = list(range(N))
    random.shuffle(order)
    for s in range(0, N, B):
        batch = [as_list[i] for i in order[s:s + B]]  # noqa: F841


def numpy_epoch():
    order = rng.permutation(N)
    for s in range(0, N, B):
        batch = values[order[s:s + B]]  # noqa: F841


cores = usable_cores()
workers_loader = DataLoader(TensorDataset(torch.from_numpy(values)), batch_size=B, shuffle=True,
                            num_workers=cores, persistent_workers=True)
quiz_state = {"stream": (b for _ in itertools.count() for b in workers_loader)}  # epoch after epoch
dl_batches = config.pick(quick=30, full=N // B)

# %%
take = lambda: list(itertools.islice(quiz_state["stream"], dl_batches))  # noqa: E731  dl_batches batches
take()  # untimed: the workers start here
quiz = interleave({"pure Python": python_epoch, "DataLoader with workers": take, "NumPy": numpy_epoch}, warmup=0,
                  items={"pure Python": N, "DataLoader with workers": dl_batches * B, "NumPy": N},
                  repeats=config.pick(quick=1, full=10, site=5))  # in turns
quiz_state.clear()
del workers_loader  # stops the workers
epochs_1000 = {m.name: 1000 * N / m.items_per_s for m in quiz}  # seconds for 1000 epochs, from the measured rate
for m in quiz:
    print(f"{m.name:>24}: {m.items_per_s:12,.0f} samples/s -> 1000 epochs in {epochs_1000[m.name] / 60:8.1f} min")
order = sorted(epochs_1000, key=epochs_1000.get)
q = {m.name: m for m in quiz}
rates = {m.name: [m.items / t for t in m.samples] for m in quiz}  # samples/s, call by call: the calls differ in size
say(reading.quiz({name: compare(rates[name], rates[order[-1]], paired=True, higher=True) for name in order[:-1]},
                 order[-1]) + f" Your answer: {guess.value if guess.value != '-' else '(none given)'}.")
if dl_batches * B < N:
    print(f"(The DataLoader was timed over {dl_batches} batches a sample, not a whole epoch, and its 1000 epochs scaled "
          "up from that rate; full mode times whole epochs.)")

# %%
fig, ax = plotting.bars(quiz, baseline=order[-1], unit="samples/s", machine=S.machine,
                        title=f"the quiz: epochs of {N:,} samples at batch {B} ({cores} workers)")
ax.set_xscale("log")
plt.show()
results.save_lesson("lesson06", [*ms, *gathers, *deeper, *full, *grouped, *quiz], batch_size=B, n=N,
                    batched_vs_per_sample=by["FastLoader"].items_per_s / by["per sample"].items_per_s)
say(reading.workers(cores=cores, dl_rate=q["DataLoader with workers"].items_per_s))

# %% [markdown]
# ### Deeper (optional): a dataset larger than the memory
#
# What each order costs when the memmap is four times the memory allowed, read cold in a process
# held to that limit; the lesson's takeaways follow without it.

# %% [markdown] tags=["deeper"]
# When the memmap is larger than the memory the process may use, the page cache cannot hold it,
# and every read that misses waits for the disk. A full shuffle jumps all over the file: the pages
# one batch brings in are evicted before their neighbours are asked for. The grouped shuffle
# (section 3; FFCV calls it `QUASI_RANDOM`; `ImageLoader(..., group_size=g)`) reads one block of
# neighbouring rows at a time, and a block fits in memory. We write a memmap dataset **four
# times** the limit and read it in a fresh process held to that limit, starting with none of it
# cached (`gpufeed.course.lesson06.outofcore`: a memory cgroup where one can be made, else an LRU of the
# file's blocks evicted with `posix_fadvise`). First with a stand-in reader that is NumPy alone
# (one fancy index per batch, as `FastLoader` gathers), three ways: a full shuffle; a full
# shuffle with `madvise(MADV_RANDOM)`, which tells the kernel not to read ahead; the grouped
# shuffle. Then `gpufeed.data.ImageLoader` itself, on one thread, in the same two orders. We count
# images/s and the bytes the process read from the disk (psutil's `io_counters().read_bytes`).

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
import shutil

import numpy as np

from gpufeed.course.lesson06 import outofcore

limit = config.pick(quick=32, full=256) << 20  # bytes the reader may use: its own memory and its page cache
shape = config.pick(quick=(3, 128, 128), full=(3, 224, 224))  # one stored image, uint8
row = int(np.prod(shape))
ooc_dir = config.cache_dir() / "lesson06" / "larger-than-memory"  # on a disk (a /tmp may be RAM: tmpfs)
shutil.rmtree(ooc_dir, ignore_errors=True)
pixels = np.random.default_rng(0).integers(0, 256, (64, *shape), dtype=np.uint8)  # the bytes do not matter
dataset = outofcore.write_dataset(ooc_dir / "mm", pixels, rows=4 * limit // row)  # 4x the limit
first = config.pick(quick=64, full=2048)  # images read in each order (the start of an epoch)
group_rows = limit // 8 // row  # a block of the grouped shuffle: an eighth of the limit
ooc = outofcore.compare(dataset, batch=32, group=group_rows, limit=limit, first=first)
method, ahead = ooc["grouped"]["method"], outofcore.read_ahead_kb(dataset)
shutil.rmtree(ooc_dir)
for name, r in ooc.items():
    print(f"{name:>27}: {r['images_per_s']:8,.0f} images/s, {r['read_bytes'] / 2**20:8,.1f} MiB read from disk "
          f"({r['read_bytes'] / (r['images'] * row):5.1f}x the bytes of the images used)")
print(f"file {4 * limit // row * row / 2**20:.0f} MiB, limit {limit / 2**20:.0f} MiB ({method}), "
      f"read_ahead_kb {ahead}, {first} images of {shape} in batches of 32, blocks of {group_rows}")

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
names = list(ooc)
colors = [plotting.COLORS["baseline"], plotting.COLORS["compute"], plotting.COLORS["copy"],
          plotting.COLORS["baseline"], plotting.COLORS["copy"]]
base = ooc["full shuffle"]["images_per_s"]
axes[0].barh(names, [ooc[n]["images_per_s"] for n in names], color=colors)
axes[0].set_xlabel("images/s")
axes[0].invert_yaxis()
for i, n in enumerate(names):
    axes[0].annotate(f" {ooc[n]['images_per_s'] / base:.1f}x", (ooc[n]["images_per_s"], i), va="center")
axes[1].barh(names, [ooc[n]["read_bytes"] / 2**20 for n in names], color=colors)
axes[1].set_xlabel("MiB read from disk")
axes[1].set_xscale("log")
axes[1].invert_yaxis()
axes[1].set_yticks([])
fig.suptitle(f"{first} images from a file 4x the memory allowed ({limit >> 20} MiB, {method}); "
             "images/s vs the stand-in's full shuffle", x=0.02, ha="left")
plotting.caption(fig, S.machine)
plt.show()

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
used = first * row / 2**20
held = (f"a memory cgroup ({method}) held the reader to {limit >> 20} MiB" if method != "fadvise" else
        f"no memory cgroup could be made here, so the reader evicted its own pages past {limit >> 20} MiB "
        "(posix_fadvise)")
if ooc["full shuffle"]["read_bytes"] == 0:
    say("Nothing was read from a disk: the course's cache folder is kept in memory by its file system (tmpfs), so no "
        "limit applies to it; point `GPUFEED_CACHE` at a folder on a disk (see the README) and re-run this section.")
say(reading.out_of_core(ooc, held=held, first=first, used_mib=used, ahead_kb=ahead, group_rows=group_rows,
                        own_memory=method != "fadvise", quick=S.mode != "full"))

# %% [markdown]
# ## Key takeaways
#
# * One `__getitem__` per sample costs microseconds of Python each; for data already in memory
#   that is the whole cost of loading. Fetch a batch in one call: `__getitems__`, a `BatchSampler`
#   as the sampler with `batch_size=None`, or no DataLoader at all.
# * A fast loader is a seeded permutation per epoch, sliced, and one `index_select` per field;
#   reuse its output buffers where the batch is consumed at once, in a ring no larger than needed.
# * (Deep dive) Read the kernel you lean on: `index_select` shares out whole images among threads
#   only when a row is below 32,768 elements; cutting each image into pieces (`take_rows`) gets
#   that path.
# * Shuffling millions of indices is not free (section 3 timed it on this machine); a grouped
#   shuffle reads nearby data together, but it is only as random as the order the data is stored
#   in, and its blocks stay the same every epoch: samples meet the same neighbours in every epoch.
#   Store the data shuffled once, at build time.
# * (Deep dive) A dataset larger than the memory wants blocks: the grouped shuffle keeps its reads
#   inside a block that fits; a full shuffle over a plain mapping pays the kernel's read-ahead on
#   every miss (the last deep dive counts the bytes on this machine).
# * Workers do not remove per-sample overhead; at best they divide it by the number of workers
#   (each pays it for its own samples), and they add their own: a collate and an inter-process
#   transfer per batch.
#
# ## Exercises
#
# 1. Time `per sample` and `FastLoader` at batch sizes 32 and 1024. Which one's samples/s depends
#    on the batch size, and why?
# 2. In section 3, with the data in class order, which group size gives on average at least 100
#    classes per batch of 300? Check with the cell below.
# 3. Add a fourth loop to the quiz: `FastLoader` over `torch.from_numpy(values)`. Where does it land?
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 2: your group size (an int), checked on the class-ordered labels.
my_group = None
if my_group is not None:
    found = classes_per_batch(labels, grouped_permutation(len(labels), my_group), B)
    print(f"{found:.0f} classes per batch: " + ("yes, at least 100" if found >= 100 else "not yet: try larger blocks"))


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: batch sizes 32 and 1024
# Why: split each loader's cost into a part per sample and a part per batch. The DataLoader over a
# TensorDataset pays per sample (a __getitem__ call, then collate stacks one small tensor per
# sample), so its samples/s should hardly move with the batch size. FastLoader pays per batch (a
# slice of the permutation, one index_select per field, Python around them) and almost nothing per
# sample, so 32x more samples per batch divides its fixed cost by 32: its samples/s should climb.
from functools import partial

n_ex = config.pick(quick=10_240, full=n_epoch, site=30_720)  # quick: 320 batches of 32, 10 of 1024
makers = {"per sample": lambda b: DataLoader(TensorDataset(x[:n_ex], y[:n_ex]), batch_size=b, shuffle=True),
          "FastLoader": lambda b: FastLoader((x[:n_ex], y[:n_ex]), b, seed=0)}
runs = {name: interleave({f"{name}, batch {b}": partial(epoch, make(b)) for b in (32, 1024)}, items=n_ex,
                         repeats=config.pick(quick=3, full=5, site=9))  # each loader's two batch sizes in turns
        for name, make in makers.items()}
for pair in runs.values():
    print(*pair, sep="\n")
say(reading.batch_sizes(*(compare(big, small, paired=True) for small, big in runs.values())))

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: the group size for 100 classes per batch
# Why: in class order, a block of g neighbours holds g / 300 classes, and a batch of 300 is drawn
# from one block (or two, at an edge). Drawing 300 samples from C equally common classes misses a
# class with probability about (1 - 1/C)^300, so a batch holds about C x (1 - (1 - 1/C)^300)
# classes. Find the smallest C that gives 100, turn it into g = 300 C, then measure around it.
def expected_classes(c):
    return c * (1 - (1 - 1 / c) ** B)


c = next(c for c in itertools.count(100) if expected_classes(c) >= 100)
predicted_g = 300 * c
print(f"predicted: C = {c} classes per block, g = {predicted_g:,} ({expected_classes(c):.1f} classes per batch)")
my_group = predicted_g
while classes_per_batch(labels, grouped_permutation(len(labels), my_group), B) < 100:
    my_group = int(my_group * 1.05)  # edges and chance: step up until the measurement agrees
found = classes_per_batch(labels, grouped_permutation(len(labels), my_group), B)
print(f"self-check: {found:.0f} classes per batch: " + ("yes, at least 100" if found >= 100 else "not yet"))
say(f"A group of **{my_group:,}** indices ({my_group / 300:.0f} classes per block) gives {found:.0f} classes per "
    f"batch; the formula predicted {predicted_g:,}: blocks {my_group / group:.0f}x the {group:,} of section 3. Stored "
    f"shuffled once, section 3's blocks of {group:,} already put {stored_grouped:.0f} classes in a batch.")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: FastLoader in the quiz
# Why: FastLoader does what the NumPy loop does, a permutation per epoch and one gather per batch
# in C, plus some Python per batch (slicing the permutation, building the output). So it should
# land near NumPy, far ahead of the per-sample ways, and a little behind NumPy if its Python per
# batch shows. Time NumPy again beside it, so that both run under the same conditions.
values_t = torch.from_numpy(values)  # shares NumPy's memory: no copy
fast_quiz = FastLoader(values_t, B, seed=0)
assert len(next(iter(fast_quiz))) == B
fast_m, numpy_m = interleave({"FastLoader": lambda: epoch(fast_quiz), "NumPy": numpy_epoch}, items=N,
                             repeats=config.pick(quick=5, full=100, site=10))  # in turns
for m in (fast_m, numpy_m):
    print(f"{m.name:>10}: {m.items_per_s:12,.0f} samples/s -> 1000 epochs in {1000 * N / m.items_per_s / 60:6.1f} min")
say(reading.fast_vs_numpy(compare(fast_m, numpy_m, paired=True)))

# %% [markdown]
# ## Further reading
#
# * [`torch.utils.data`](https://docs.pytorch.org/docs/stable/data.html) (PyTorch docs): `__getitems__`, `BatchSampler` and `batch_size=None`: the batched fetch of this lesson in the DataLoader's terms.
# * [Batched data loading with tensorclasses](https://docs.pytorch.org/tensordict/stable/tutorials/tensorclass_imagenet.html) (tensordict tutorials): loading a memory-mapped dataset a batch at a time instead of an image at a time.
# * [FFCV: Accelerating Training by Removing Data Bottlenecks](https://arxiv.org/abs/2306.12517) (Leclerc, Ilyas, Engstrom, Park, Salman, Madry; CVPR 2023): quasi-random sampling for datasets larger than RAM: an order random enough for training that keeps reads close together, the idea behind the grouped shuffle.
