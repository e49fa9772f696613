# %% [markdown]
# # 05 · Memory-mapped datasets
#
# **What you will learn:** the result first: how much faster a folder of JPEGs feeds batches once it
# is decoded *once* into one `uint8` file and memory-mapped; then why, from the operating system up
# (pages, virtual memory, the page cache, page faults); how to build such a file with
# `numpy.memmap`, tensordict's own API (`TensorDict`, `memmap`, `load_memmap`, a `@tensorclass`)
# and the course's `build_memmap`, the same made safe; and what a cold page cache changes. Two
# optional deep dives show which calls between NumPy and torch copy, and when a written array is
# on the disk.
#
# **Time:** about 30 minutes (1 minute in quick mode). **Prerequisites:** [00 · Setup](00_setup.ipynb)
# (the memcpy ceiling and the page cache), lesson 04 (why JPEG decoding is slow).

# %%
import gpufeed

S = gpufeed.setup("05")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The result first: decode once
#
# A folder of JPEGs pays for decoding in every epoch. Decode every image once, at one size, into
# one `uint8 [N, 3, H, W]` file, map it, and every later epoch is a copy of bytes. Below, both
# sides read a folder of 224x224 JPEGs (the folder's *best* case: it decodes but never resizes),
# with the files in the page cache (*warm*, section 5 drops them). The baseline is the usual
# pipeline: a `DataLoader` with one worker process per core, each opening and decoding one JPEG per
# `__getitem__`. The memmap side is `gpufeed.data.loader.FastLoader` (lesson 06 builds it): a
# shuffled order cut into slices, one gather per batch, on **one** thread, fewer cores than the
# folder's workers get. `build_memmap` makes the file (sections 3 and 4 build one by hand first). Where
# CUDA exists both send every batch to the GPU, pinned, with `non_blocking=True`. The two are timed
# **in turns** (folder, memmap, folder, memmap, ...), so that a busy spell of the machine slows
# both, and the verdict is the ratio of their medians with its interval (lesson 02).

# %%
import torch
from torch.utils.data import DataLoader

from gpufeed import config
from gpufeed.course.lesson05 import reading
from gpufeed.course.prose import say
from gpufeed.measure.verdict import compare
from gpufeed.data.folder import ImageFolderDataset, drop_cached
from gpufeed.data.loader import FastLoader
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.measure.harness import interleave
from gpufeed.measure.machine import cache_bytes, usable_cores
from gpufeed.measure.synth import synth_folder

cores, batch_size, l3 = usable_cores(), 64, cache_bytes(3)  # l3: this CPU's last-level cache, bytes (or None)
n_images = config.pick(quick=128, full=5000, site=512)
repeats = config.pick(quick=3, full=5, site=7)  # samples per arm, taken in turns (5 at least for a verdict)
jpeg_dir = synth_folder(config.cache_dir() / "lesson05" / f"jpeg-224-{n_images}", n=n_images, size=(224, 224),
                        quality=90, workers=cores).path
mm_dir = build_memmap(jpeg_dir, config.cache_dir() / "lesson05" / f"mm-224-{n_images}", size=(224, 224),
                      workers=cores, reuse=True).path
device = S.device if S.cuda else None

# %%
loaders = {"folder": DataLoader(ImageFolderDataset(jpeg_dir, size=(224, 224)), batch_size=batch_size, shuffle=True,
                                num_workers=cores, persistent_workers=True, pin_memory=S.cuda)}
memmap_state = {}


def folder_epoch():
    for images, targets in loaders["folder"]:
        images.to(S.device, non_blocking=True), targets.to(S.device, non_blocking=True)


def memmap_reload(cold=False, sort=False):  # a new mapping of the file (cold: its pages dropped first)
    memmap_state.clear()  # unmaps the previous one
    if cold:
        drop_cached(mm_dir)
    # reuse_buffers=2: a batch is dropped before the next-but-one, so two output buffers take turns
    # instead of fresh memory that page-faults on first touch (section 2, lesson 06).
    memmap_state["loader"] = FastLoader(load_memmap(mm_dir), batch_size, seed=0, device=device, sort_indices=sort,
                                        reuse_buffers=2)


def memmap_epoch():
    for _batch in memmap_state["loader"]:
        pass  # _batch.images: uint8 [64, 3, 224, 224], on the GPU when there is one


epoch_bytes = n_images * 3 * 224 * 224
print(f"{n_images} images, {epoch_bytes / 1e6:.0f} MB per epoch as uint8; {cores} cores; batch {batch_size}")

# %%
from gpufeed.measure import plotting
import matplotlib.pyplot as plt

threads = torch.get_num_threads()
torch.set_num_threads(1)  # the memmap's one thread; the folder's workers run one each anyway
memmap_reload()
warm_ms = interleave({"JPEG folder, warm": folder_epoch, "memmap, warm": memmap_epoch}, repeats=repeats,
                     items=n_images, nbytes=epoch_bytes)
torch.set_num_threads(threads)
folder_warm_m, warm_m = warm_ms
warm_v = compare(warm_m, folder_warm_m, paired=True)  # the memmap (A) against the folder (B)
fig, ax = plotting.bars(warm_ms, baseline="JPEG folder, warm", machine=S.machine,
                        title=f"one warm epoch, {cores} cores, batch {batch_size}, 224x224" + (", to the GPU" if S.cuda else ""))
plt.show()
say(reading.headline(warm_v, memmap=warm_m.items_per_s, folder=folder_warm_m.items_per_s, cores=cores))

# %% [markdown]
# The rest of the lesson takes that apart: what the OS does when a mapped file is read (section 2),
# how the file is made (3 and 4), and what changes when the file is not in the page cache (5).
#
# ## 2. Pages, virtual memory and the page cache
#
# A process never sees physical RAM. It sees *virtual* addresses, cut into **pages** (4 KiB on
# most machines), and a page table maps each virtual page to a physical one, or to nothing yet.
# Files read from disk are kept in RAM by the kernel in the **page cache**, shared by every
# process. `mmap` (what `numpy.memmap` calls) maps a file's pages into the address space without
# reading anything. The first touch of a page that is not mapped yet is a **page fault**: the kernel
# stops the process, finds the page (a *minor* fault if it is in the page cache, a *major* fault if
# it has to wait for the disk), maps it, and resumes. After that the page is plain memory.

# %%
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from gpufeed.measure import plotting

fig, ax = plt.subplots(figsize=(8, 2.8))
rows = {"virtual pages (your process)": 2.4, "page cache (RAM)": 1.2, "file on disk": 0.0}
cached = {0: 1, 1: 3, 2: 4, 5: 6}  # virtual page -> page-cache slot, for the pages touched so far
for (label, y), color in zip(rows.items(), (plotting.COLORS["compute"], plotting.COLORS["copy"], plotting.COLORS["read"])):
    for i in range(8):
        filled = y == 0.0 or (y == 1.2 and i in cached.values()) or (y == 2.4 and i in cached)
        ax.add_patch(Rectangle((i, y), 0.85, 0.6, color=color, alpha=0.8 if filled else 0.15))
    ax.text(-0.2, y + 0.3, label, ha="right", va="center")
for v, c in cached.items():  # mapped: a plain memory access
    ax.add_patch(FancyArrowPatch((v + 0.42, 2.4), (c + 0.42, 1.8), arrowstyle="->", mutation_scale=10))
ax.add_patch(FancyArrowPatch((3.42, 2.4), (3.42, 0.6), arrowstyle="->", linestyle="--", color="red", mutation_scale=10))
ax.text(3.6, 1.0, "page fault: read from disk\n(major), then map", color="red", fontsize=8)
ax.set_xlim(-4.2, 8.2)
ax.set_ylim(-0.2, 3.2)
ax.axis("off")
ax.set_title("mmap: pages come in on first touch; the page cache keeps them for everyone")
plt.show()


# %% [markdown]
# We can count faults: `resource.getrusage` reports the major and minor faults of this process.
# We map a file, touch one byte per page, and count, in three situations: **cold** (we first ask
# the kernel to drop the file from the page cache with `posix_fadvise(DONTNEED)`, where the OS has
# it), **again** (the same mapping, touched a second time) and **warm** (a new mapping of the file,
# now in the page cache). Five rounds of the three, so that cold and warm are compared in turns.

# %%
import mmap
import resource
import statistics
import time

import numpy as np

from gpufeed.measure import ceilings
from gpufeed.measure.harness import Measurement

pages_file = ceilings.make_file(config.cache_dir() / "lesson05" / "pages.bin", config.pick(quick=32 << 20, full=512 << 20))


def faults(fn):
    """Runs fn(); returns the page faults it caused and its time."""
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    seconds, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return {"major": after.ru_majflt - before.ru_majflt, "minor": after.ru_minflt - before.ru_minflt, "ms": seconds * 1e3}


rounds = {"cold": [], "again": [], "warm": []}
for _ in range(5):
    dropped = drop_cached(pages_file)
    for name in rounds:  # cold and again on one mapping, warm on a new one
        if name != "again":
            m = np.memmap(pages_file, dtype=np.uint8, mode="r")
        rounds[name].append(faults(lambda m=m: int(m[:: mmap.PAGESIZE].sum())))  # one byte per page
    del m
n_pages = pages_file.stat().st_size // mmap.PAGESIZE
rows = {name: {k: statistics.median(r[k] for r in rs) for k in ("major", "minor", "ms")} for name, rs in rounds.items()}
print(f"{n_pages:,} pages of {mmap.PAGESIZE} bytes; cache dropped first: {dropped}; medians of 5 rounds")
for name, r in rows.items():
    print(f"{name:>5}: {r['major']:6,.0f} major, {r['minor']:6,.0f} minor faults, {r['ms']:7.1f} ms")

# %%
cold_v = compare(*(Measurement(k, [r["ms"] for r in rounds[k]]) for k in ("cold", "warm")), paired=True)
say(reading.pages(cold_v, rows, n_pages, dropped))

# %% [markdown]
# ## 3. A memory-mapped array by hand
#
# The idea of a memmap dataset: decode every image once, at one size, into one big `uint8` array
# `[N, 3, H, W]` stored as a raw file. Reading batch `i:j` is then a slice of memory. First by
# hand with `numpy.memmap`, on a small folder of JPEGs (cut from real photos, lesson 00):

# %%
from gpufeed.data.folder import ImageFolderDataset
from gpufeed.measure.synth import synth_folder

demo_src = synth_folder(config.cache_dir() / "lesson05" / "demo-jpeg", n=config.pick(quick=16, full=64),
                        size=(320, 240), classes=4, progress=False).path
folder = ImageFolderDataset(demo_src, size=(64, 64))  # the course's resize policy: short side, centre crop
shape = (len(folder), 3, 64, 64)
raw = config.cache_dir() / "lesson05" / "demo-images.u8"
arr = np.memmap(raw, dtype=np.uint8, mode="w+", shape=shape)  # creates the file, N*3*64*64 bytes
for i in range(len(folder)):
    arr[i] = folder[i][0].numpy()  # decode + resize once, write row i
arr.flush()
del arr
back = np.memmap(raw, dtype=np.uint8, mode="r", shape=shape)  # a raw file: we must know shape and dtype
print(raw.stat().st_size, "bytes on disk;", back[2:4].shape, back.dtype)


# %% [markdown]
# ## 4. tensordict: the same file as a tensor, then a dataset
#
# A raw file has no header: whoever reads it must know the dtype and the shape. tensordict's
# `MemoryMappedTensor` maps the same file as a torch tensor, without a copy:

# %%
import torch
from tensordict import MemoryMappedTensor

t = MemoryMappedTensor.from_filename(raw, dtype=torch.uint8, shape=shape)
print(type(t).__name__, tuple(t.shape), "same pixels as numpy:", np.array_equal(t[2:4].numpy(), back[2:4]))
del back, t

# %% [markdown]
# **tensordict's own API, in five lines.** A `TensorDict` is a dictionary of tensors that share
# their leading dimensions (its *batch size*) and are indexed as one: `td[2:4]` slices every field.
# `td.memmap(path)` writes each field to a raw file, with a `meta.json` that holds the shapes and
# dtypes, and returns the TensorDict mapped from those files; `TensorDict.load_memmap(path)` maps
# them again later, reading nothing. On the lesson's images, decoded into RAM first:

# %%
import shutil

from tensordict import TensorDict

by_hand = config.cache_dir() / "lesson05" / "by-hand"
shutil.rmtree(by_hand, ignore_errors=True)  # a fresh start on every run
decoded = [folder[i] for i in range(len(folder))]  # (uint8 [3, 64, 64], label) per image
td = TensorDict({"images": torch.stack([x for x, _ in decoded]), "targets": torch.tensor([y for _, y in decoded])},
                batch_size=[len(folder)])  # 1. fields that share the first dimension, N
td.memmap(by_hand / "td")  # 2. one raw file per field, and meta.json
td_back = TensorDict.load_memmap(by_hand / "td")  # 3. mapped, not read
print(td_back)
print(sorted(str(p.relative_to(by_hand)) for p in by_hand.rglob("*")))

# %% [markdown]
# A `@tensorclass` is a TensorDict with named fields, like a dataclass. tensordict's ImageNet
# tutorial (Further reading) gives its class a `from_dataset` that builds the memmap from any
# dataset. Here in today's form: `memmap_like` preallocates the files at their final size from a
# template that holds only shapes (expanded zeros: no memory), and batches from a `DataLoader`
# are written into slices of the files, so the dataset never has to fit in RAM.

# %%
from tensordict import tensorclass
from torch.utils.data import DataLoader


@tensorclass
class Images:  # 4. a typed TensorDict
    images: torch.Tensor  # uint8 [N, 3, H, W]
    targets: torch.Tensor  # int64 [N]

    @classmethod
    def from_dataset(cls, dataset, prefix, batch_size=8):  # 5. files first, then filled batch by batch
        n, (image, _) = len(dataset), dataset[0]
        data = cls(images=torch.zeros((), dtype=torch.uint8).expand(n, *image.shape),
                   targets=torch.zeros((), dtype=torch.int64).expand(n), batch_size=[n]).memmap_like(prefix=prefix)
        for start, (images, targets) in zip(range(0, n, batch_size), DataLoader(dataset, batch_size)):
            data[start:start + len(targets)] = cls(images=images, targets=targets, batch_size=[len(targets)])
        return data


Images.from_dataset(folder, by_hand / "tc")
hand = Images.load_memmap(by_hand / "tc")
print(type(hand).__name__, tuple(hand.images.shape), "same tensors as the TensorDict:",
      torch.equal(hand.images, td_back["images"]) and torch.equal(hand.targets, td_back["targets"]))

# %% [markdown]
# **`build_memmap` is the same thing made safe.** The course's dataset,
# `gpufeed.data.memmap.ImageData`, is such a `@tensorclass` with the same two memory-mapped fields,
# `images: uint8 [N, 3, H, W]` and `targets: int64 [N]`, and `build_memmap` fills it as
# `from_dataset` does (`memmap_like`, then slices; decoded by DataLoader workers if you ask). What
# it adds: it checks the disk space first (`N x 3 x H x W` bytes plus 8 per label) and every
# image, naming one it cannot read; it works in a hidden staging folder beside the destination,
# writes a small manifest (count, shapes, source, classes, resize policy) last and renames the
# folder into place, so a killed build leaves no destination and `load_memmap` refuses a folder
# without its manifest; it shows a progress bar; it reuses a dataset already built from the same
# files. In a terminal: `python -m gpufeed data memmap SRC DST --size 224x224 --workers 4`.
# %%
from gpufeed.data.memmap import build_memmap, read_manifest

demo = build_memmap(demo_src, config.cache_dir() / "lesson05" / "demo-mm", size=(64, 64), reuse=True)
t0 = time.perf_counter()
data = load_memmap(demo.path)
print(f"loaded in {(time.perf_counter() - t0) * 1e3:.1f} ms (nothing is read until a batch touches it)")
print(data)
manifest = read_manifest(demo.path)
print({k: manifest[k] for k in ("count", "size", "classes", "policy")})
for p in sorted(demo.path.rglob("*")):
    print(f"  {p.relative_to(demo.path)}{'' if p.is_dir() else f'  ({p.stat().st_size:,} bytes)'}")

# %%
batch = data[:8]  # a slice of the tensorclass: both fields at once
fig, axes = plt.subplots(1, 8, figsize=(8, 1.4))
for ax, img, label in zip(axes, batch.images, batch.targets):
    ax.imshow(img.permute(1, 2, 0).numpy())
    ax.set_title(manifest["classes"][label], fontsize=7)
    ax.axis("off")
plt.show()
print("the same tensors as from_dataset's:", torch.equal(data.images, hand.images) and torch.equal(data.targets, hand.targets))
print("identical to decoding the folder with the same policy:", all(torch.equal(data.images[i], folder[i][0]) for i in range(len(folder))))
del data, batch

# %% [markdown]
# ### Deeper (optional): what an interrupted build leaves
#
# Why the manifest and the atomic rename matter, shown; the lesson goes on without it.

# %% [markdown] tags=["deeper"]
# Both ways: `from_dataset` over a dataset whose image 10 cannot be read (as a truncated download
# would), then `build_memmap` over a copy of the folder with one truncated JPEG.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from gpufeed.data.memmap import MemmapError


class Unreadable(torch.utils.data.Dataset):
    """The folder, except that image 10 raises, as an unreadable file does."""

    def __len__(self):
        return len(folder)

    def __getitem__(self, i):
        if i == 10:
            raise OSError(f"image {i}: truncated file")
        return folder[i]


try:
    Images.from_dataset(Unreadable(), by_hand / "broken")
except OSError as e:
    print("from_dataset stopped:", e)
half = Images.load_memmap(by_hand / "broken")  # maps without a word
black = int(half.images.flatten(1).amax(1).eq(0).sum())  # images never written: all zeros
print(f"Images.load_memmap: {len(half)} images, {black} of them all black")
bad_src = by_hand / "bad-jpeg"
shutil.copytree(demo_src, bad_src)
victim = sorted(bad_src.rglob("*.jpg"))[10]
victim.write_bytes(victim.read_bytes()[:300])  # truncated
refused = []
for what, call in (("build_memmap", lambda: build_memmap(bad_src, by_hand / "mm", size=(64, 64), progress=False)),
                   ("load_memmap of from_dataset's folder", lambda: load_memmap(by_hand / "broken"))):
    try:
        call()
    except MemmapError as e:
        refused.append(what)
        print(f"{what}: {str(e).replace(str(by_hand), '…')}")  # the message, without this machine's folders
print("build_memmap left a destination:", (by_hand / "mm").exists())

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
say(f"`from_dataset` stopped at image 10, and its folder still loads: {len(half)} images, **{black} of them "
    "all black** (the rows it never wrote are zeros), which would train without a word. "
    + ("`build_memmap` refused the truncated JPEG, named it, and left no destination; "
       if "build_memmap" in refused and not (by_hand / "mm").exists() else "")
    + ("gpufeed's `load_memmap` refuses `from_dataset`'s folder: it has no manifest, so nothing says it is "
       "complete." if "load_memmap of from_dataset's folder" in refused else ""))


# %% [markdown]
# ## 5. A cold page cache: the disk
#
# Section 1 read both datasets from the page cache. A first epoch, or a dataset larger than the
# memory, reads from the disk instead. For a cold memmap we must also *unmap* it before dropping
# its pages: the kernel keeps pages that a process has mapped. So each cold epoch maps the dataset
# anew, and so does the warm one here, so that the two differ only in where the pages come from.
# We also try `sort_indices=True`, which sorts the indices *within* each batch (same samples, so the
# same gradient) so that a cold read moves forward through the file. Four arms, in turns.

# %%
torch.set_num_threads(1)
cold_ms = interleave({"JPEG folder, cold": folder_epoch, "memmap, cold": memmap_epoch,
                      "memmap, cold, sorted": memmap_epoch, "memmap, warm, mapped anew": memmap_epoch},
                     setup={"JPEG folder, cold": lambda: drop_cached(jpeg_dir),
                            "memmap, cold": lambda: memmap_reload(cold=True),
                            "memmap, cold, sorted": lambda: memmap_reload(cold=True, sort=True),
                            "memmap, warm, mapped anew": memmap_reload},
                     repeats=repeats, items=n_images, nbytes=epoch_bytes)
torch.set_num_threads(threads)
loaders.clear()  # stops the folder's worker processes
folder_cold_m, cold_m, sorted_m, anew_m = cold_ms
fig, ax = plotting.bars([folder_warm_m, warm_m, *cold_ms], baseline="JPEG folder, warm", machine=S.machine,
                        title=f"one epoch, {cores} cores, batch {batch_size}, 224x224, warm (section 1) and cold")
plt.show()
cold_vs_folder, cold_vs_cache, sorted_vs_not = (compare(a, b, paired=True) for a, b in
                                                ((cold_m, folder_cold_m), (cold_m, anew_m), (sorted_m, cold_m)))
jpeg_bytes = sum(p.stat().st_size for p in jpeg_dir.rglob("*.jpg"))
say(reading.cold(cold_vs_folder, cold_vs_cache, sorted_vs_not, epoch_bytes=epoch_bytes, jpeg_bytes=jpeg_bytes,
                 can_drop=dropped))

# %% [markdown]
# How close does the warm memmap come to what the memory allows? `ceilings.loader_bounds` times, in
# turns, the loader's raw fetch (shuffled batches gathered by `FastLoader` into two reused buffers)
# and a copy of the same images in file order into the same buffers, on the same single thread:
# no gather of these rows into those buffers can beat that copy. Whether either rate is RAM's
# depends on the epoch's size against the CPU's last-level cache, which the cell reads.

# %%
from gpufeed.measure import results

torch.set_num_threads(1)
stream, fetch = ceilings.loader_bounds(load_memmap(mm_dir).images, batch_size, repeats=config.pick(quick=5, full=9, site=9),
                                       min_bytes=config.pick(quick=32, full=256, site=256) << 20)
torch.set_num_threads(threads)
fetch_v = compare(fetch, stream, paired=True)  # the fetch (A) against the copy in file order (B)
say(reading.ceiling(fetch_v, epoch_bytes=epoch_bytes, l3=l3))
saved = results.save_lesson("lesson05", [*warm_ms, *cold_ms, stream, fetch], n_images=n_images, batch_size=batch_size,
                            cores=cores, memmap_vs_folder_warm=warm_v.ratio, warm_verdict=vars(warm_v),
                            memmap_vs_folder_cold=cold_vs_folder.ratio, fraction_of_stream=fetch_v.ratio)

# %% [markdown]
# How close a warm gather gets to that copy depends on how the loader copies, which is lesson
# 06's subject. `python -m gpufeed bench` reports the same fraction on every core.

# %% [markdown]
# ### On a GPU
#
# With CUDA the cells above already send every batch to the GPU (pinned, `non_blocking`). Without
# it, here is our committed reference from a machine that has one, or, where none is committed,
# what FFCV's authors published for raw-pixel and JPEG datasets read from RAM and from network
# storage, on a GPU server with many cores.

# %%
from gpufeed.measure import published
from gpufeed.measure.verdict import Verdict

if S.cuda:
    print(f"Measured above on {S.machine.get('gpu')}, batches moved to the GPU whole.")
else:
    ref = results.gpu_reference("lesson05")  # says where the numbers come from
    if ref is None:
        say(reading.published_formats({f.id: f.figure for f in published.for_lesson("lesson05")}))
    else:
        ref_ms = [m for m in ref[0] if m.name.startswith(("JPEG folder", "memmap"))]
        fig, ax = plotting.bars(ref_ms, baseline="JPEG folder, warm", machine=ref[1]["machine"], title="reference")
        plt.show()
        if ref[1].get("warm_verdict"):
            print(f"On {ref[1]['machine'].get('gpu')}, warm, the memmap "
                  f"{Verdict(**ref[1]['warm_verdict']).ran('the JPEG folder')}.")

# %% [markdown]
# ### Deeper (optional): what copies between NumPy and torch
#
# `torch.from_numpy(np.memmap(...))` is still a mapping, while `torch.tensor` of a memmap reads the
# whole file into RAM. Which calls copy and which share, measured; the lesson goes on without it.

# %% [markdown] tags=["deeper"]
# `torch.tensor(a)` and `np.array(t)` copy; `torch.from_numpy(a)` and `t.numpy()` return the same
# memory seen by the other library. The cell checks each one by writing through its result and
# reading the source, counts the page faults of one call of each (section 2's `faults`), and times
# the ones that copy in turns: `out.copy_(...)` is the same copy into a tensor that exists already,
# memory touched before; and NumPy asks the kernel for *huge pages* (2 MiB) for a large array, so
# `np.array(t)` runs once more with that advice off, in 4 KiB pages as torch's memory comes: the
# same copy with more faults, to see what the faults themselves cost.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
import warnings

big_mib = config.pick(quick=32, full=256)
a_big = np.ones(big_mib << 18, dtype=np.float32)  # float32 [big_mib * 2^18]: big_mib MiB
t_big, out = torch.ones(len(a_big)), torch.empty(len(a_big))
ways = {  # name: (the call, its input): NumPy to torch, torch to NumPy, and a copy into `out`
    "torch.tensor(a)": (torch.tensor, a_big), "torch.from_numpy(a)": (torch.from_numpy, a_big),
    "np.array(t)": (np.array, t_big), "t.numpy()": (torch.Tensor.numpy, t_big),
    "out.copy_(torch.from_numpy(a))": (lambda a: out.copy_(torch.from_numpy(a)), a_big),
}
# NumPy asks the kernel for huge pages (madvise) for large arrays; its private switch, where it has one
advise = getattr((getattr(np, "_core", None) or np.core).multiarray, "_set_madvise_hugepage", None)


def small_pages(t):  # np.array(t) with NumPy's huge-page advice off: 4 KiB pages, as torch's memory gets
    was = advise(False)
    try:
        return np.array(t)
    finally:
        advise(was)


if advise is not None:
    ways["np.array(t), 4 KiB pages"] = (small_pages, t_big)


def shares(call, source):
    """Writes through call(source)'s result, then reads the source: True if both are one memory."""
    before = source[0].item()
    call(source)[0] = before + 1
    shared = source[0].item() == before + 1
    source[0] = before
    return shared


# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
with warnings.catch_warnings():  # NumPy 2 asks torch's Tensor.__array__ for a `copy` keyword it
    warnings.simplefilter("ignore", DeprecationWarning)  # lacks, warns, and copies anyway
    shared = {name: shares(call, source) for name, (call, source) in ways.items()}
    paged = {name: faults(lambda call=call, source=source: call(source))["minor"] for name, (call, source) in ways.items()}
    copy_ms = interleave({name: lambda call=call, source=source: call(source) for name, (call, source) in ways.items()
                          if not shared[name]}, repeats=config.pick(quick=5, full=10), nbytes=a_big.nbytes)
for name in ways:
    m = next((m for m in copy_ms if m.name == name), None)
    print(f"{name:>31}: {'shares' if shared[name] else 'copies'}, {paged[name]:6,} page faults"
          + ("" if m is None else f", {m.median * 1e3:7.2f} ms for {big_mib} MiB ({m.gb_per_s:5.2f} GB/s)"))

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
by_copy = {m.name: m for m in copy_ms}
fresh, reused, np_copy = (by_copy[n] for n in ("torch.tensor(a)", "out.copy_(torch.from_numpy(a))", "np.array(t)"))
small = by_copy.get("np.array(t), 4 KiB pages")  # None where this NumPy has no huge-page switch
say(f"{' and '.join(f'`{n}`' for n in ways if shared[n])} shared the source's memory: no byte moved, and a write "
    f"through one was seen by the other. {' and '.join(f'`{n}`' for n in list(ways)[:4] if not shared[n])} copied: "
    f"`torch.tensor(a)` took {fresh.median * 1e3:.1f} ms, `np.array(t)` {np_copy.median * 1e3:.1f} ms. "
    + reading.copies(compare(reused, fresh, paired=True), fresh_faults=paged["torch.tensor(a)"],
                     reused_faults=paged["out.copy_(torch.from_numpy(a))"], other_fresh="np.array(t)",
                     other_faults=paged["np.array(t)"], nbytes=a_big.nbytes, l3=l3,
                     other_vs_reused=compare(reused, np_copy, paired=True),
                     small_faults=small and paged["np.array(t), 4 KiB pages"],
                     huge_vs_small=small and compare(np_copy, small, paired=True)))

# %% [markdown]
# ### Deeper (optional): when written bytes reach the disk
#
# A write call returning does not put the bytes on the disk. Where they are after `write`,
# `flush`, `os.fsync` and `close`, and what three ways of writing an array cost; the lesson goes on
# without it.

# %% [markdown] tags=["deeper"]
# Three calls write the same bytes: `np.save(f, a)` (a short header, then the array: `np.load`
# knows its shape and dtype), `a.tofile(f)` (the raw bytes, as our memmap files) and
# `f.write(a.tobytes())` (a copy of the array as a `bytes` object, then written). The timeline
# notes this course grew from (see lesson 00's Sources) call `np.save` slow, `tofile` fast and
# `write(tobytes)` very fast but not on disk until the file is closed or flushed. Python's file
# object keeps a buffer until `flush()` (or `close()`); the kernel keeps written pages in the page
# cache, marked *dirty*, and writes them to the disk later, unless `os.fsync(fd)` asks for it now.
# First one write, step by step: the file's size as the OS sees it, and the machine's dirty page
# cache, for 1,000 bytes and for the array.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
import io
import os
from pathlib import Path

from gpufeed.measure.machine import DISK_FILE_SYSTEMS, file_system

writes_dir = config.cache_dir() / "lesson05" / "writes"
writes_dir.mkdir(parents=True, exist_ok=True)
target = writes_dir / "array.bin"
a_write = np.random.default_rng(0).integers(0, 256, config.pick(quick=32, full=300) << 20, dtype=np.uint8)
fs = file_system(writes_dir)  # "ext4", "tmpfs", "overlay", ...: whether a disk is below decides what fsync does


def dirty_bytes():
    """The machine's page cache waiting to reach the disk (Dirty + Writeback), or None (not Linux)."""
    try:  # psutil does not report Dirty and Writeback: the kernel's own table
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return sum(int(info[k].split()[0]) << 10 for k in ("Dirty", "Writeback"))
    except (OSError, KeyError, ValueError):
        return None


def fresh_file():
    """No old copy of the file, and nothing of anyone's left dirty: every write starts alike."""
    target.unlink(missing_ok=True)
    getattr(os, "sync", lambda: None)()  # Unix: write every dirty page back, now


def steps(array):
    """One f.write(array.tobytes()), then flush, fsync, close: [(step, ms, bytes the OS has, dirty delta)]."""
    fresh_file()
    rows, d0, f = [], dirty_bytes(), open(target, "wb")  # noqa: SIM115  (close() is a step)
    for step, call in (("f.write(a.tobytes())", lambda: f.write(array.tobytes())), ("f.flush()", f.flush),
                       ("os.fsync(f.fileno())", lambda: os.fsync(f.fileno())), ("f.close()", f.close)):
        t0 = time.perf_counter()
        call()
        ms_taken, d1 = (time.perf_counter() - t0) * 1e3, dirty_bytes()
        rows.append((step, ms_taken, target.stat().st_size, None if d0 is None or d1 is None else d1 - d0))
    return rows



# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
watched = {n: steps(a_write[:n]) for n in (1000, a_write.nbytes)}
print(f"the cache folder is on {fs}; io.DEFAULT_BUFFER_SIZE = {io.DEFAULT_BUFFER_SIZE:,} bytes")
for n, rows in watched.items():
    print(f"{n:,} bytes:")
    for step, ms_taken, size, dirty in rows:
        print(f"  {step:<22} {ms_taken:9.2f} ms   the OS has {size:>13,} bytes"
              + ("" if dirty is None else f"   dirty page cache {dirty / 2**20:+8.1f} MiB"))

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
small, large = watched[1000], watched[a_write.nbytes]
grew, fell = large[0][3], (None if large[2][3] is None else large[0][3] - large[2][3])
ours = grew is not None and grew >= a_write.nbytes / 2 and fell >= a_write.nbytes / 2  # the count moved with our write
say(f"1,000 bytes: after `f.write` the OS had **{small[0][2]:,}** of them"
    + (" (they sat in Python's buffer), " if small[0][2] < 1000 else ", ")
    + f"after `flush()` {small[1][2]:,}. {a_write.nbytes / 2**20:.0f} MiB: after `f.write` the OS had "
    f"{large[0][2] / 2**20:,.0f} MiB"
    + (" at once: a write larger than Python's buffer goes straight to the kernel, so `flush()` has nothing "
       "left to send. " if large[0][2] == a_write.nbytes else ". ")
    + (f"This folder is on {fs}, which keeps files in RAM: there is no disk below it, and `os.fsync` took "
       f"{large[2][1]:,.1f} ms with nothing to write." if fs in ("tmpfs", "ramfs") else
       f"They were not on the disk yet: the machine's dirty page cache grew by {grew / 2**20:,.0f} MiB, and "
       f"`os.fsync` took **{large[2][1]:,.0f} ms** to write it back (dirty fell by {fell / 2**20:,.0f} MiB), "
       f"while `close()` took {large[3][1]:.2f} ms: closing does not sync. Until the sync, a crash of the machine "
       "(not of Python: the kernel has the bytes) can lose them." if ours else
       f"`os.fsync` took **{large[2][1]:,.0f} ms** and `close()` {large[3][1]:.2f} ms: closing does not sync. "
       + ("" if grew is None else f"The machine's dirty count moved by {grew / 2**20:+,.0f} MiB on the write: it "
          f"counts every program's writes, and {fs} may keep its own, so here it does not show this file's pages.")))


# %% [markdown] tags=["deeper"]
# Now the three calls timed in turns, each with and without `flush()` + `os.fsync()` before the
# file is closed (the fsync timed on its own too), every write into a new file with nothing left
# dirty before it (`os.sync()`, untimed). `tobytes()` is timed alone as well: the copy inside the third.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
WRITES = {"np.save(f, a)": lambda f: np.save(f, a_write), "a.tofile(f)": lambda f: a_write.tofile(f),
          "f.write(a.tobytes())": lambda f: f.write(a_write.tobytes())}
fsync_s = {name: [] for name in WRITES}  # seconds os.fsync took, per synced write


def write(name, sync):
    with open(target, "wb") as f:
        WRITES[name](f)
        if sync:
            f.flush()  # Python's buffer to the kernel
            t0 = time.perf_counter()
            os.fsync(f.fileno())  # the kernel's dirty pages to the disk
            fsync_s[name].append(time.perf_counter() - t0)


arms = {name + (" + fsync" if sync else ""): lambda name=name, sync=sync: write(name, sync)
        for name in WRITES for sync in (False, True)}
write_ms = interleave({**arms, "a.tobytes() alone": a_write.tobytes}, setup={name: fresh_file for name in arms},
                      repeats=config.pick(quick=3, full=5, site=9), nbytes=a_write.nbytes)
target.unlink()
for m in write_ms:
    print(m)

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
fig, ax = plotting.bars(write_ms, rate="bytes", baseline="a.tofile(f)", machine=S.machine,
                        title=f"writing {a_write.nbytes / 2**20:.0f} MiB to a new file")
plt.show()
w = {m.name: m for m in write_ms}
say(reading.writes(compare(w["np.save(f, a)"], w["a.tofile(f)"], paired=True),
                   compare(w["f.write(a.tobytes())"], w["a.tofile(f)"], paired=True),
                   tobytes_ms=w["a.tobytes() alone"].median * 1e3, fs=fs, on_disk=fs in DISK_FILE_SYSTEMS,
                   fsync_ms={name: statistics.median(v) * 1e3 for name, v in fsync_s.items()}, nbytes=a_write.nbytes))

# %% [markdown]
# ## Key takeaways
#
# * `mmap` maps a file without reading it; pages come in on first touch (a page fault) and stay in
#   the page cache, shared by every process that maps the file (DataLoader workers, or the ranks of
#   lesson 12).
# * `torch.from_numpy(a)` and `t.numpy()` share memory (free, and a write shows on both sides);
#   `torch.tensor(a)` and `np.array(t)` copy, into fresh memory that page-faults on first touch.
# * A write call returning does not put the bytes on the disk: small writes wait in Python's buffer
#   until `flush()`, and every write waits in the page cache until `os.fsync()` (or the kernel's
#   own write-back); `close()` does not sync. Time writes with the fsync, or you time the page cache.
# * Decode once: a folder of JPEGs pays for decoding on every epoch; a `uint8 [N, 3, H, W]` memmap
#   pays once, then a batch is a memory copy, and its limit is a copy's speed: RAM's, once the
#   dataset is several times the CPU's last-level cache (section 5 reads this CPU's).
# * `TensorDict`, `.memmap()`, `load_memmap()` and a `@tensorclass` are the whole format in a few
#   lines; a dataset on disk also needs a manifest (shape, dtype, source, classes, version) and an
#   atomic build, or an interrupted run leaves files that load as black images.
# * Cold vs warm matters: a memmap that does not fit in RAM reads from the disk every epoch; keep
#   it on fast storage, or make it smaller (lower resolution, fewer images).
#
# ## Exercises
#
# 1. ImageNet's training set has 1,281,167 images. How many GB is its memmap at 224x224, and does it
#    fit in this machine's RAM? Check with the cell below.
# 2. Build a memmap of the 224x224 JPEGs above at 112x112 (`build_memmap(jpeg_dir, ..., size=(112, 112))`)
#    and measure its warm throughput in images/s. Is it 4 times higher? Why, or why not?
# 3. Re-run section 1 with `batch_size = 256`. Which side changes more, and why?
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 1: your answer in GB (10^9 bytes) of uint8 images.
my_gb = None
answer_gb = 1_281_167 * 3 * 224 * 224 / 1e9
if my_gb is not None:
    print("right!" if abs(my_gb / answer_gb - 1) < 0.05 else "not quite: N x 3 x H x W bytes, in 10^9")
    print(f"This machine has {S.machine.get('memory_gib')} GiB of RAM.")


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: ImageNet as a 224x224 memmap
# Why: a memmap stores every pixel as one uint8, with no compression, so its size is simply
# N x 3 x H x W bytes (plus 8 bytes per int64 label, which is small). To compare it with RAM,
# mind the units: the machine record gives GiB (2^30 bytes), the answer is in GB (10^9 bytes).
# Whether it fits decides cold vs warm: a memmap larger than RAM is read from the disk every epoch.
my_gb = 1_281_167 * 3 * 224 * 224 / 1e9
print("self-check:", "right!" if abs(my_gb / answer_gb - 1) < 0.05 else "not quite")
labels_gb = 1_281_167 * 8 / 1e9
ram_gb = S.machine.get("memory_gib") and S.machine["memory_gib"] * 2**30 / 1e9  # None where unknown
say(f"ImageNet at 224x224 is **{my_gb:.1f} GB** of pixels (+{labels_gb:.2f} GB of labels); " + (
    "this machine's RAM is unknown: compare with what `free -g` says." if not ram_gb else
    f"this machine has {ram_gb:.0f} GB of RAM: " + (
        "it fits, so after the first epoch every epoch is warm." if my_gb + labels_gb < 0.8 * ram_gb else
        "it does not fit (with room left for everything else), so every epoch reads from the disk: the cold rate "
        "is the one that counts, or store it smaller (exercise 2).")))


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: the same images at 112x112
# Why: a warm memmap epoch only copies bytes, and 112x112 has a quarter of 224x224's bytes, so
# the copy itself is 4x shorter. But each batch also pays fixed costs that do not shrink with the
# image: Python, the shuffled indices, the loop. So expect *less* than 4x, closer to 4x the larger
# the images. Measure both now, in turns, warm, on one thread as in section 1, on the host.
small_dir = build_memmap(jpeg_dir, config.cache_dir() / "lesson05" / f"mm-112-{n_images}", size=(112, 112),
                         workers=cores, reuse=True, progress=False).path


def memmap_warm(path, batch):
    """A warm FastLoader epoch over the memmap at ``path``, as a function (host only)."""
    loader = FastLoader(load_memmap(path), batch, seed=0, reuse_buffers=2)
    return lambda: [None for _ in loader]


ex_repeats = config.pick(quick=5, full=9, site=11)  # rounds in turns for the exercises (at least 5)
torch.set_num_threads(1)
big_mm, small_mm = interleave({"memmap 224, warm": memmap_warm(mm_dir, batch_size),
                               "memmap 112, warm": memmap_warm(small_dir, batch_size)}, repeats=ex_repeats,
                              items=n_images, nbytes={"memmap 224, warm": epoch_bytes, "memmap 112, warm": epoch_bytes // 4})
torch.set_num_threads(threads)
print(big_mm, small_mm, sep="\n")
say(reading.smaller_images(compare(small_mm, big_mm, paired=True), small_gb_s=small_mm.gb_per_s, big_gb_s=big_mm.gb_per_s))

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: batch_size = 256 on both sides
# Why: the folder's cost is per image (open, decode), so its images/s barely depends on the batch
# size, except that a DataLoader gives each batch to *one* worker: with few batches per epoch, some
# workers idle. The memmap's per-image cost is a small copy and its fixed cost is per batch, so a
# 4x larger batch divides that fixed cost by 4; but its two output buffers grow 4x too, and once
# they outgrow the CPU's last-level cache every write goes to RAM (lesson 06 measures it). Which
# effect wins is for this machine to say. Warm only, on the host, each side's two batch sizes in turns.
from functools import partial

def folder_warm(batch):
    dl = DataLoader(ImageFolderDataset(jpeg_dir, size=(224, 224)), batch_size=batch, shuffle=True,
                    num_workers=cores, persistent_workers=True)
    return lambda: [None for _ in dl]


torch.set_num_threads(1)
sides = {side: interleave({f"{side}, batch {b}": (folder_warm if side == "folder" else partial(memmap_warm, mm_dir))(b)
                           for b in (batch_size, 256)}, repeats=ex_repeats, items=n_images)
         for side in ("folder", "memmap")}
torch.set_num_threads(threads)
for m in (m for pair in sides.values() for m in pair):
    print(f"{m.name:>17}: {m.items_per_s:8,.0f} images/s")
say(reading.larger_batch(*(compare(big, small, paired=True) for small, big in sides.values()), batch=batch_size, big=256,
                         n_images=n_images, cores=cores, l3=l3))

# %% [markdown]
# ## Further reading
#
# * [Concepts overview](https://docs.kernel.org/admin-guide/mm/concepts.html) (Linux kernel admin guide, memory management): virtual memory, page tables and the page cache, in the kernel's own words.
# * [mmap(2)](https://man7.org/linux/man-pages/man2/mmap.2.html) (Linux man-pages): what mapping a file does, and what it does not do (read anything).
# * [Batched data loading with tensorclasses](https://docs.pytorch.org/tensordict/stable/tutorials/tensorclass_imagenet.html) (tensordict tutorials): the `@tensorclass` + `MemoryMappedTensor` dataset this lesson builds, on ImageNet.
# * [ImageNet Benchmarks](https://github.com/libffcv/ffcv/blob/main/docs/benchmarks.rst) (FFCV documentation): a raw-pixel and a JPEG dataset read from RAM by FFCV: the figures shown here without a GPU.
