# %% [markdown]
# # 10 · NVIDIA DALI
#
# **What you will learn:** how NVIDIA DALI runs a whole input pipeline (read, decode, augment,
# normalise) in C++ threads and on the GPU, outside Python; how to write one with `pipeline_def`
# and feed a PyTorch training step with `DALIGenericIterator`; how to let DALI only augment batches
# of the memmap dataset through `fn.external_source`; how to run it CPU-only where there is no GPU;
# and what it gives and costs against the torchvision DataLoader on the same cores.
#
# **Time:** about 20 minutes (2 in quick mode). **Prerequisites:** [09 · Augmentations](09_augment.ipynb)
# and [05 · Memory-mapped datasets](05_memmap.ipynb); lesson 04 (JPEG decoding).

# %%
import gpufeed

S = gpufeed.setup("10")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The idea
#
# A DataLoader runs Python per sample, in worker processes, and ships each batch between processes.
# DALI replaces all of it with a **graph of operators** that you describe once in Python and that
# C++ runs: CPU operators in a thread pool (`num_threads`), GPU operators on CUDA streams, and a
# "mixed" JPEG decoder (nvJPEG) that splits each image between the CPU and the GPU. The CPU parses
# the file and, for images under `hybrid_huffman_threshold` pixels (1,000,000 by default), also
# does the Huffman decoding, the serial part of JPEG (larger images go to nvJPEG's hybrid decoder,
# which DALI's docs say still largely uses the CPU); the GPU does the rest (inverse DCT, colour
# conversion). On GPUs that have a hardware JPEG decoder (the A100 was the first), a share of the
# images (`hw_decoder_load`) goes to it instead. Finished batches wait in a prefetch queue. No
# worker processes, no pickling, no Python per sample.
#
# ```
#  files --readers.file--> JPEG bytes --decoders.image("mixed")--> images --random_resized_crop--> --crop_mirror_normalize--> batch
#        CPU threads                      CPU parse + Huffman,        GPU (or CPU)                  GPU (or CPU): flip, float, normalise
#                                         GPU IDCT (or the HW decoder)
# ```
#
# Without a GPU, DALI still runs its CPU operators (`device_id=None`, the CPU-only mode); that is
# how this lesson runs in CI.

# %% [markdown]
# ## 2. Is DALI here?
#
# DALI ships as one wheel per CUDA major version (`nvidia-dali-cuda120`, `nvidia-dali-cuda130`),
# for Linux only. `gpufeed.measure.dali` tells whether it is installed without importing it (importing
# DALI takes seconds), and how to install it for this machine:

# %%
from gpufeed.measure import dali as gdali

HAVE_DALI = gdali.available()
DEVICE_ID = gdali.device_id()  # 0 on a GPU machine, None: CPU-only mode
if HAVE_DALI:
    print(f"DALI: {gdali.version()}; device_id={DEVICE_ID} ({'GPU' if DEVICE_ID is not None else 'CPU-only mode'})")
else:
    print(f"DALI is not installed here. To install it for this machine:\n  {gdali.install_hint()}\n"
          "then restart the kernel. The cells that need DALI say so, and section 7 shows reference results.")

# %% [markdown]
# ## 3. The data, and the baselines: torchvision's DataLoader, untuned and tuned
#
# A folder of JPEGs (cut from real photos, lesson 00) and a memmap dataset built from it (lesson 05).
# Two baselines do the work the DALI pipelines below do (decode, for the folder; a random resized
# crop, a random flip, to float, normalise), one image per `__getitem__` in worker processes, one
# worker per core:
#
# * **untuned**, the usual torchvision pipeline: Pillow decodes (`ImageFolder`), the v2 transforms
#   run on the Pillow image, and each worker hands over `float32`;
# * **tuned**, with lessons 03-07's fixes (as lesson 11's tuned rung): a decoder without Pillow
#   (`gpufeed.measure.dali.tuned_folder`), the crop and flip on `uint8`, a quarter of the bytes
#   handed over, pinned where there is CUDA, converted and normalised after the hand-over.
#
# The memmap row reads the decoded images one at a time with the untuned transforms.

# %%
import torch
import torchvision
from torch.utils.data import DataLoader

from gpufeed import config
from gpufeed.data.arrays import MemmapDataset
from gpufeed.data.augment import cpu_transform, finish
from gpufeed.measure.machine import usable_cores
from gpufeed.data.memmap import build_memmap
from gpufeed.measure.synth import synth_folder

cores = usable_cores()
n_images, batch_size = config.pick(quick=64, full=1024, site=256), config.pick(quick=16, full=64, site=32)
jpeg_size, stored, out_size = config.pick(quick=((160, 120), (160, 120), (64, 64)), full=((640, 480), (320, 240), (224, 224)),
                                          site=((320, 240), (320, 240), (112, 112)))
jpeg_dir = synth_folder(config.cache_dir() / "lesson10" / f"jpeg-{jpeg_size[0]}-{n_images}", n=n_images, size=jpeg_size,
                        workers=cores, progress=False).path
mm_dir = build_memmap(jpeg_dir, config.cache_dir() / "lesson10" / f"mm-{stored[0]}-{n_images}", size=stored,
                      workers=cores, reuse=True, progress=False).path
transform = cpu_transform(out_size)  # RandomResizedCrop, flip, ToImage, ToDtype(scale), Normalize
datasets = {"JPEG folder": torchvision.datasets.ImageFolder(str(jpeg_dir), transform=transform),
            "tuned": gdali.tuned_folder(jpeg_dir, out_size), "memmap": MemmapDataset(mm_dir, transform, batched=False)}
print(f"{n_images} JPEGs of {jpeg_size[0]}x{jpeg_size[1]}, a memmap at {stored[0]}x{stored[1]}; crops of "
      f"{out_size[0]}x{out_size[1]}, batch {batch_size}, {cores} cores, device {S.device}")

# %% [markdown]
# The DataLoaders start their workers from a **fork server**, a clean process that imports torch
# once: DALI runs C++ threads in this process, and forking a process whose threads may hold locks
# can hang the child. So the DataLoaders and DALI can take turns in section 7.

# %%
forkserver = torch.multiprocessing.get_context("forkserver")
forkserver.set_forkserver_preload(["torch", "torchvision"])  # takes effect when the server starts


def workers_loader(ds, n=cores, **kw):  # n workers, kept across epochs, forked from the fork server
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=n, persistent_workers=True,
                      pin_memory=S.cuda, multiprocessing_context=forkserver, **kw)


loaders = {"JPEG folder": workers_loader(datasets["JPEG folder"]), "tuned": workers_loader(datasets["tuned"], prefetch_factor=4),
           "memmap": workers_loader(datasets["memmap"])}


TURN = config.pick(quick=1, full=2, site=3)  # epochs in one turn of section 7's timing (why: there)


def epoch(loader, tuned=False):  # one turn: TURN epochs
    for _ in range(TURN):
        for images, labels in loader:
            images = images.to(S.device, non_blocking=True)
            if tuned:  # uint8 [B, 3, h, w] -> normalised float32, after the hand-over (on the device)
                finish(images)
            labels.to(S.device, non_blocking=True)


for name, loader in loaders.items():
    images, labels = next(iter(loader))  # starts the workers
    print(f"{name}: {images.dtype} {tuple(images.shape)}")

# %% [markdown]
# ## 4. A DALI pipeline
#
# `@pipeline_def` turns a function that wires operators into a pipeline factory; the call takes the
# pipeline's settings (`batch_size`, `num_threads`, `device_id`, `seed`). Random operators draw
# per sample: every image gets its own crop and its own coin flip. `fn.readers.file` labels images
# by sub-folder, like `ImageFolder`.
#
# Here `file_root=` lets DALI list the folder itself: each sub-folder a label in sorted order, and
# every file in them. The course's own helpers (`gpufeed.measure.dali.eval_pipeline` and
# `train_pipeline`) pass `files=` and `labels=` from `gpufeed.data.folder.scan` instead, for two
# reasons: DALI's listing also takes hidden files (macOS's `._x.jpg`) for images and fails on them,
# and with one list both sides read exactly the same files with the same labels in the same
# order, which the comparison of section 5 needs.

# %%
import time

if HAVE_DALI:
    t0 = time.perf_counter()
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    print(f"imported DALI in {time.perf_counter() - t0:.1f} s")

    @pipeline_def
    def folder_pipeline(root, size, on_gpu):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device="mixed" if on_gpu else "cpu", output_type=types.RGB)  # uint8 HWC
        images = fn.random_resized_crop(images, size=size)  # per-sample box; size is (height, width)
        flip = fn.random.coin_flip(probability=0.5)  # per-sample 0 or 1
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mirror=flip,
                                          mean=gdali.MEAN255, std=gdali.STD255)  # float32 CHW, normalised
        return images, labels.gpu() if on_gpu else labels
else:
    print("skipped: DALI is not installed (section 2 says how to install it)")

# %% [markdown]
# The iterator from DALI's PyTorch plugin turns each batch into torch tensors (on the GPU when the
# pipeline ends there). `reader_name` gives it the epoch's length; `LastBatchPolicy.PARTIAL` returns
# the last, short batch as it is; `auto_reset=True` starts the next epoch by itself. Into a
# training step: a small convolutional network, one epoch, the batches straight from DALI.

# %%
from torch import nn

if HAVE_DALI:
    pipe = folder_pipeline(str(jpeg_dir), list(out_size), S.cuda, batch_size=batch_size, num_threads=cores,
                           device_id=DEVICE_ID, seed=0)
    pipe.build()
    dali_loader = DALIGenericIterator(pipe, ["images", "labels"], reader_name="reader",
                                      last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, len(datasets["JPEG folder"].classes))).to(S.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step, batch in enumerate(dali_loader):  # one epoch
        images, labels = gdali.unpack(batch)  # float32 [B, 3, h, w] and int64 [B], on the device
        if step == 0:
            print(f"images: {images.dtype} {tuple(images.shape)} on {images.device}; labels: {labels.tolist()}")
        loss = nn.functional.cross_entropy(model(images), labels.to(S.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"{len(losses)} training steps ({len(dali_loader)} batches an epoch), loss {losses[0]:.3f} -> {losses[-1]:.3f}")
else:
    print("skipped: DALI is not installed")

# %% [markdown]
# ## 5. Correct before fast: the deterministic part
#
# Random crops cannot be compared with torchvision's, but the rest can: read in order, decode,
# resize to a fixed size, normalise (`gpufeed.measure.dali.eval_pipeline`) against `torchvision.io`'s
# decoder, `v2.functional.resize` with antialiasing, and `normalize` (`gpufeed.measure.dali.torchvision_eval`).
# On the CPU both decode with libjpeg-turbo. Inside a one-pixel frame they agree within half a grey
# level (DALI rounds the resized image to `uint8`); on the frame, the two antialiasing filters
# treat the border differently, so there we bound only the mean.

# %%
from gpufeed.data.folder import scan

if HAVE_DALI:
    # eval_pipeline and torchvision_eval take (width, height), as PIL gives an image's size; unlike
    # random_resized_crop above, whose size is (height, width), as in torchvision's RandomResizedCrop.
    check_size = (out_size[1], out_size[1] * 3 // 4)  # (width, height): a 4:3 shrink of the 4:3 JPEGs
    check = DALIGenericIterator(gdali.eval_pipeline(jpeg_dir, check_size, batch_size=batch_size, num_threads=cores,
                                                    device_id=DEVICE_ID), ["images", "labels"], reader_name="reader")
    got, got_labels = gdali.unpack(next(iter(check)))
    files = scan(jpeg_dir)[0][:len(got)]  # DALI's reader lists the files in the same order
    errors = [gdali.grey_level_error(g.cpu(), gdali.torchvision_eval(path, check_size)) for g, (path, _) in zip(got, files)]
    assert got_labels.tolist() == [label for _, label in files]
    worst_in, worst_mean = max(e["interior_max"] for e in errors), max(e["mean"] for e in errors)
    print(f"{len(errors)} images: inside the frame at most {worst_in:.2f} grey levels apart, {worst_mean:.3f} on "
          f"average over each image (tolerances {gdali.INTERIOR_TOLERANCE:.2f} and {gdali.MEAN_TOLERANCE:.2f}); "
          f"on the frame at most {max(e['max'] for e in errors):.1f}")
    if DEVICE_ID is None:
        assert worst_in <= gdali.INTERIOR_TOLERANCE and worst_mean <= gdali.MEAN_TOLERANCE
    else:  # nvJPEG's IDCT and chroma upsampling round differently from libjpeg-turbo's: wider bounds
        print(f"(decoded by nvJPEG on the GPU: tolerances {gdali.GPU_INTERIOR_TOLERANCE:.0f} and "
              f"{gdali.GPU_MEAN_TOLERANCE} grey levels)")
        assert worst_in <= gdali.GPU_INTERIOR_TOLERANCE and worst_mean <= gdali.GPU_MEAN_TOLERANCE
else:
    print("skipped: DALI is not installed")

# %% [markdown]
# ## 6. `fn.external_source`: DALI only augments
#
# When the images are already decoded (the memmap of lesson 05), DALI need not read or decode.
# `fn.external_source` takes batches from Python: `gpufeed.measure.dali.MemmapSource` serves the memmap
# through lesson 06's `FastLoader` (shuffled, seeded, one gather per batch), each `iter()` a new
# epoch; `cycle="raise"` ends DALI's epoch where the source's ends. The stored images are
# `uint8 [3, H, W]`, so the layout is `"CHW"`; DALI's crop and resize take it as it is.

# %%
if HAVE_DALI:
    @pipeline_def
    def memmap_pipeline(source, size, on_gpu):
        images, labels = fn.external_source(source=source, num_outputs=2, batch=True, cycle="raise",
                                            layout=["CHW", ""], dtype=[types.UINT8, types.INT64])
        if on_gpu:
            images, labels = images.gpu(), labels.gpu()  # one copy of the uint8 batch; the rest on the GPU
        images = fn.random_resized_crop(images, size=size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=gdali.MEAN255,
                                          std=gdali.STD255, mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    source = gdali.MemmapSource(mm_dir, batch_size, seed=0)
    mm_pipe = memmap_pipeline(source, list(out_size), S.cuda, batch_size=batch_size, num_threads=cores,
                              device_id=DEVICE_ID, seed=0)
    mm_pipe.build()
    mm_loader = DALIGenericIterator(mm_pipe, ["images", "labels"], auto_reset=True)  # until the source stops
    batches = [gdali.unpack(b) for b in mm_loader]  # one epoch
    expected = torch.cat([source.targets[idx] for idx in source.loader.indices(0)])
    assert torch.equal(torch.cat([labels.cpu() for _, labels in batches]), expected), "labels in the source's order"
    print(f"one epoch: {len(expected)} samples in {len(batches)} batches of {batches[0][0].dtype} "
          f"{tuple(batches[0][0].shape[1:])}, labels in FastLoader's order")
else:
    print("skipped: DALI is not installed")

# %% [markdown]
# ## 7. Throughput on the same cores
#
# DALI gets `num_threads = cores`, as many threads as the DataLoaders have workers. Same images,
# batch size and work, each batch moved to the device. The arms take turns (lesson 02) of a few
# epochs each: DALI's prefetch queue starts the next epoch as soon as one ends, also during
# another arm's turn, and over several epochs that head start is small. This process keeps one
# torch thread, as in lessons 05 and 06: it only hands batches on (and converts the tuned ones),
# and torch's parallel kernels would fight the workers and DALI's threads for the cores.

# %%
from functools import partial

import matplotlib.pyplot as plt

from gpufeed.course.lesson10 import reading
from gpufeed.course.prose import say
from gpufeed.measure import plotting
from gpufeed.measure.harness import interleave


def dali_epoch(loader):  # one turn: TURN epochs, as for the DataLoaders
    for _ in range(TURN):
        for batch in loader:
            images, labels = gdali.unpack(batch)
            images.to(S.device, non_blocking=True), labels.to(S.device, non_blocking=True)  # no-op where there


names = {"JPEG folder": f"torchvision, JPEG folder, {cores} workers", "tuned": f"tuned DataLoader, JPEG folder, {cores} workers",
         "memmap": f"torchvision, memmap, {cores} workers", "DALI": f"DALI, JPEG folder, {cores} threads",
         "DALI memmap": f"DALI external_source, memmap, {cores} threads"}
arms = {names[k]: partial(epoch, ld, tuned=k == "tuned") for k, ld in loaders.items()}
if HAVE_DALI:
    arms |= {names["DALI"]: partial(dali_epoch, dali_loader), names["DALI memmap"]: partial(dali_epoch, mm_loader)}
threads = torch.get_num_threads()
torch.set_num_threads(1)  # this process only hands batches on; the workers and DALI's threads do the rest
ms = interleave(arms, items=TURN * n_images, repeats=config.pick(quick=3, full=5, site=9), warmup=1)
torch.set_num_threads(threads)
loaders.clear()  # stops the DataLoaders' workers
by = {k: next((m for m in ms if m.name == name), None) for k, name in names.items()}
fig, ax = plotting.bars(ms, machine=S.machine, title=f"one epoch: decode (folder) + random crop {out_size[0]}x{out_size[1]} "
                        f"+ flip + normalise, batch {batch_size}")
plt.show()
say(reading.throughput(by["JPEG folder"], by["tuned"], by["memmap"], by["DALI"], by["DALI memmap"], cores=cores,
                       cuda=S.cuda, smaller_memmap=stored != jpeg_size))

# %% [markdown]
# Where DALI is missing, here are the numbers of a machine that has it:

# %%
if not HAVE_DALI:
    ref = gdali.reference_with_dali("lesson10")
    if ref is None:
        print("No reference with DALI is committed yet: install DALI (section 2) and run this notebook to see its numbers.")
    else:
        fig, ax = plotting.bars(ref[0], machine=ref[1]["machine"], title=f"reference, {ref[1]['dali']}")
        plt.show()
else:
    print(f"DALI is installed here: measured above ({gdali.version()}).")

# %% [markdown]
# ## 8. The trade-offs
#
# * **CPU threads.** `num_threads` is only DALI's pool for CPU operators; its executor, the prefetch
#   queue and (on a GPU) nvJPEG add threads of their own, and the training loop needs a core too.
#   Give DALI the cores the DataLoader's workers would have had, not more.
# * **Memory pools.** DALI takes GPU memory and pinned host memory from pools of its own and keeps
#   them at their peak. Torch's `memory_allocated()` does not see them, and torch's caching
#   allocator competes with them for the same GPU: `nvidia.dali.backend.ReleaseUnusedMemory()` gives
#   back what is unused, `PreallocateDeviceMemory(bytes, device_id)` reserves that much in DALI's
#   pool up front, so that later allocations need not ask the driver (it reserves; it does not cap
#   what the pool may grow to), and the prefetch queue (`prefetch_queue_depth`, 2 by default)
#   holds that many finished batches.
# * **Going back to the CPU.** Under the classic executor (`exec_dynamic=False`) data in a
#   pipeline flows CPU to GPU only: no CPU operator may take data that is on the GPU. DALI 2's
#   default executor (`exec_dynamic=True`) allows `.cpu()`, but each such step is a device-to-host
#   copy and a wait inside the pipeline. A step DALI has no operator for runs in Python
#   (`fn.python_function`), under the GIL.
# * **The rest.** A large wheel per CUDA major version, Linux only, and a graph that is harder to
#   debug than Python. Two experimental ways in: since DALI 1.47, a proxy that lets a DataLoader's
#   workers hand samples to a pipeline in the main process
#   (`nvidia.dali.plugin.pytorch.experimental.proxy`), and in DALI 2 an imperative mode without a
#   graph (`nvidia.dali.experimental.dynamic`). This lesson teaches the stable API: `pipeline_def`
#   and `DALIGenericIterator`.

# %%
if HAVE_DALI:
    before = gdali.os_threads()
    extra = folder_pipeline(str(jpeg_dir), list(out_size), S.cuda, batch_size=batch_size, num_threads=cores,
                            device_id=DEVICE_ID, seed=1)
    extra.build()
    print(f"building one more pipeline with num_threads={cores} started {gdali.os_threads() - before} OS threads")
    del extra
    if S.cuda:
        free, total = torch.cuda.mem_get_info()
        outside = (total - free) - torch.cuda.memory_reserved()
        print(f"GPU memory in use outside torch's allocator (DALI's pools and the CUDA contexts): {outside / 1e6:,.0f} MB")
else:
    print("skipped: DALI is not installed")

# %% [markdown]
# **Several GPUs: `shard_id` and `num_shards`.** With DDP (lesson 12) each process builds its own
# pipeline with `device_id=local_rank`, and the reader gives it its part of the files:
# `fn.readers.file(..., shard_id=rank, num_shards=world_size, random_shuffle=True)`, with
# `pad_last_batch` and the iterator's `last_batch_policy` to choose (below). Two shards of the JPEG folder, read in order,
# each sample's label replaced by its index to show who read what (CPU-only mode; on GPUs only
# `device_id` changes):

# %%
if HAVE_DALI:
    paths = [str(p) for p, _ in scan(jpeg_dir)[0]]

    @pipeline_def
    def indices_pipeline(shard_id, num_shards, pad):
        _, index = fn.readers.file(files=paths, labels=list(range(len(paths))), shard_id=shard_id,
                                   num_shards=num_shards, random_shuffle=False, pad_last_batch=pad, name="reader")
        return index

    def shard_epochs(pad, policy, shard_batch, epochs=1):
        """Per shard, per epoch, the indices in each batch the iterator yields."""
        out = []
        for shard_id in range(2):
            p = indices_pipeline(shard_id, 2, pad, batch_size=shard_batch, num_threads=1, device_id=None)
            p.build()
            it = DALIGenericIterator(p, ["index"], reader_name="reader", last_batch_policy=policy, auto_reset=True)
            out.append([[b[0]["index"].reshape(-1).tolist() for b in it] for _ in range(epochs)])
        return out

    read = [sorted(i for b in epochs[0] for i in b) for epochs in shard_epochs(False, LastBatchPolicy.PARTIAL, batch_size)]
    overlap = set(read[0]) & set(read[1])
    print(f"shard 0 reads {len(read[0])} files ({read[0][0]}..{read[0][-1]}), shard 1 reads {len(read[1])} "
          f"({read[1][0]}..{read[1][-1]}); {len(overlap)} read by both, {len(paths) - len(set(read[0]) | set(read[1]))} by neither")

# %% [markdown]
# When the shards are not the same size, look at the last step of each rank: does every rank run
# the same number of steps, is each batch full, and does a rank read samples of the other's shard?
# Below, an odd number of files and a batch the size of the smaller shard, for `pad_last_batch`
# off and on, with the iterator's `last_batch_policy` `PARTIAL` (drop the padding), `FILL` and
# `DROP` (drop the last, short batch; we also read its next epoch).

# %%
if HAVE_DALI:
    paths = paths[:len(paths) - 1 if len(paths) % 2 == 0 else len(paths)]  # an odd count: the shards differ by one
    own = [set(range(len(paths) * i // 2, len(paths) * (i + 1) // 2)) for i in range(2)]  # each shard's files
    small, findings = len(paths) // 2, {}  # the smaller shard fits in one batch, the larger one does not
    for pad in (False, True):
        for policy in (LastBatchPolicy.PARTIAL, LastBatchPolicy.FILL, LastBatchPolicy.DROP):
            shards = shard_epochs(pad, policy, small, epochs=2 if policy == LastBatchPolicy.DROP else 1)
            findings[(pad, policy.name)] = f = reading.shard_findings(shards, own, len(paths))
            print(f"pad_last_batch={pad!s:5}, {policy.name:7}: batch sizes per rank {[[len(b) for b in r[0]] for r in shards]}; "
                  f"samples of the other rank's shard read: {f['foreign']}; reads in all: {sum(len(b) for r in shards for b in r[0])}"
                  + (f"; next epoch: {[[sorted(set(b))[:3] for b in r[1]] for r in shards]} (first indices)" if len(shards[0]) > 1 else ""))
    say(f"{len(paths)} files in 2 shards, batches of {small}, on DALI {gdali.version()}:\n\n" + reading.shard_reading(findings))
else:
    print("skipped: DALI is not installed")

# %% [markdown]
# **From the blog post's DALI to this lesson's.** The blog post "Fast data augmentation in Pytorch
# using Nvidia DALI" (named in lesson 00's Sources), like other posts of its time, uses DALI's first
# API: a `Pipeline` subclass whose `__init__` creates `ops.*` objects and whose
# `define_graph()` wires them. It maps one to one onto the functional API taught here:
#
# | blog post (legacy `ops` API) | this lesson (`fn` API) |
# |---|---|
# | `class P(Pipeline)` with `__init__` and `define_graph()` | a function decorated with `@pipeline_def` |
# | `ops.FileReader(file_root=...)` | `fn.readers.file(file_root=...)` or `files=`/`labels=` |
# | `ops.nvJPEGDecoder(device="mixed")` (removed in DALI 0.16, 2019), then `ops.ImageDecoder` | `fn.decoders.image(jpegs, device="mixed")` |
# | `ops.ExternalSource()` fed by `iter_setup()` calling `self.feed_input(node, batch)` every iteration | `fn.external_source(source=...)`: DALI pulls from your iterable or callable (section 6); `iter_setup` is deprecated |
# | `ops.CropMirrorNormalize(output_dtype=types.FLOAT, image_type=types.RGB, ...)` | `fn.crop_mirror_normalize(dtype=types.FLOAT, ...)` |
# | `ops.CoinFlip()` | `fn.random.coin_flip()` |
# | `DALIGenericIterator(pipe, ..., size=n)` | `reader_name="reader"`: the iterator asks the reader for the epoch's size |

# %%
if HAVE_DALI:
    from nvidia.dali import ops

    print(f"in {gdali.version()}: ops.nvJPEGDecoder exists: {hasattr(ops, 'nvJPEGDecoder')}; "
          f"ops.ImageDecoder (deprecated): {hasattr(ops, 'ImageDecoder')}; fn.decoders.image: {hasattr(fn.decoders, 'image')}")
else:
    print("skipped: DALI is not installed")

# %% [markdown]
# ## 9. On a GPU
#
# With CUDA (and DALI), the cells above decoded with nvJPEG and augmented on the GPU. Without a GPU,
# here is our committed reference from a machine that has one (its pipelines ran what was
# installed there), or, where none is committed, what torchvision's batched nvJPEG decode was
# published to reach on an A100-class GPU: the GPU decoding that DALI's mixed decoder also does.
# Their numbers are theirs; how we read them is said as ours.

# %%
from gpufeed.measure import published, results

results.save_lesson("lesson10", ms, dali=gdali.version(), n_images=n_images, batch_size=batch_size, cores=cores,
                    jpeg_size=list(jpeg_size), stored=list(stored), out_size=list(out_size))
if S.cuda:
    print(f"Measured above on {S.machine.get('gpu')}" + ("." if HAVE_DALI else ", without DALI."))
elif (ref := results.reference("lesson10")) is not None:
    print(f"No CUDA here: showing the reference measured on {ref[1]['machine'].get('gpu')}.")
    fig, ax = plotting.bars(ref[0], machine=ref[1]["machine"], title="reference")
    plt.show()
else:
    print("No CUDA here, and no GPU run of ours is committed for this lesson yet (run this notebook on a GPU to "
          "make one). Published elsewhere, not measured here:")
    say(reading.published_reading(published.for_lesson("lesson10")))

# %% [markdown]
# ## Key takeaways
#
# * DALI runs the input pipeline as a graph in C++: CPU operators in a thread pool, GPU operators
#   and nvJPEG on the GPU, with a prefetch queue; no Python, no worker processes per sample.
# * `@pipeline_def` + `fn.readers.file` + `fn.decoders.image` + `fn.random_resized_crop` +
#   `fn.crop_mirror_normalize`, fed to PyTorch by `DALIGenericIterator`; random operators draw per
#   sample. `fn.external_source` lets DALI only augment data you already have decoded (a memmap).
# * `device_id=None` runs the CPU operators only, on machines without a GPU.
# * Check the deterministic part against torchvision before comparing speeds; measure with the same
#   cores, in turns, and against a tuned DataLoader too, not only the untuned one; count its threads
#   and its memory, which live outside torch's view.
# * With several ranks, read what each rank reads before choosing `pad_last_batch` and the
#   iterator's `last_batch_policy` (section 8's table and its recommendation).
#
# ## Exercises
#
# 1. Add per-sample colour jitter to `folder_pipeline` with `fn.brightness_contrast` and random
#    arguments (`brightness=fn.random.uniform(range=[0.6, 1.4])`, the same for `contrast`), before
#    `crop_mirror_normalize`. Check your pipeline with the cell below.
# 2. Measure DALI and the DataLoader with 1 thread and 1 worker, then with all cores. Which one
#    scales better, and why?
# 3. On a GPU: decode on the CPU (`device="cpu"`) and move the images with `.gpu()` before the crop.
#    How does the throughput change, and which resource is now the bottleneck (lesson 01)?
#
# A worked solution to each exercise follows the self-check, folded: try first, then unfold it.

# %%
# Self-check for exercise 1: define my_pipeline(root, size, on_gpu) with @pipeline_def, then run this cell.
my_pipeline = None
if my_pipeline is not None and HAVE_DALI:
    mine = my_pipeline(str(jpeg_dir), list(out_size), S.cuda, batch_size=8, num_threads=cores, device_id=DEVICE_ID, seed=3)
    mine.build()
    jittered, _ = gdali.unpack(next(iter(DALIGenericIterator(mine, ["images", "labels"], reader_name="reader"))))
    means = jittered.float().mean(dim=(1, 2, 3))
    ok = jittered.shape == (8, 3, out_size[1], out_size[0]) and len(set(means.round(decimals=5).tolist())) == 8
    print("right!" if ok else "not yet: the output must stay float [8, 3, h, w], with a different jitter per image")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 1: per-sample colour jitter in DALI.
# Why it is per sample: an argument given as a DALI node (`fn.random.uniform(...)`) is a tensor
# with one value per sample, drawn afresh every batch; a Python number would be one value for all.
# So, unlike the batch call of a torchvision transform (lesson 09's trap), every image gets its own
# brightness and contrast. Where: after the crop, so it touches only the pixels that are kept, and
# before `crop_mirror_normalize`, on `uint8` HWC images, whose range [0, 255] the result is clamped
# to; after normalising, the same factors would scale values around zero instead.
if HAVE_DALI:
    @pipeline_def
    def my_pipeline(root, size, on_gpu):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device="mixed" if on_gpu else "cpu", output_type=types.RGB)  # uint8 HWC
        images = fn.random_resized_crop(images, size=size)
        images = fn.brightness_contrast(images, brightness=fn.random.uniform(range=[0.6, 1.4]),
                                        contrast=fn.random.uniform(range=[0.6, 1.4]))  # one draw per sample
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mirror=fn.random.coin_flip(probability=0.5),
                                          mean=gdali.MEAN255, std=gdali.STD255)
        return images, labels.gpu() if on_gpu else labels

    mine = my_pipeline(str(jpeg_dir), list(out_size), S.cuda, batch_size=8, num_threads=cores,
                       device_id=DEVICE_ID, seed=3)
    mine.build()
    jittered, _ = gdali.unpack(next(iter(DALIGenericIterator(mine, ["images", "labels"], reader_name="reader"))))
    means = jittered.float().mean(dim=(1, 2, 3))  # one number per image: its brightness, normalised
    assert jittered.shape == (8, 3, out_size[1], out_size[0]) and len(set(means.round(decimals=5).tolist())) == 8
    print(f"{tuple(jittered.shape)} float32, as before; the 8 images' mean values (normalised) range from "
          f"{means.min():.2f} to {means.max():.2f}, all different: the self-check above says right! for this pipeline.")
else:
    print("DALI is not installed here (section 2 says how); the pipeline above is the answer.")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 2: 1 worker or thread against all cores.
# Why they scale differently: each DataLoader worker is a process that decodes whole batches and
# copies each to this process; DALI's `num_threads` are threads of one pipeline, with no copy between
# processes. The four arms take turns (the DataLoaders' workers come from section 3's fork server),
# so each gain is read round by round and the two gains against each other. Ideal: x cores.
def dali_loader_with(n):  # section 4's pipeline with n threads
    pipe = folder_pipeline(str(jpeg_dir), list(out_size), S.cuda, batch_size=batch_size, num_threads=n,
                           device_id=DEVICE_ID, seed=0)
    pipe.build()
    return DALIGenericIterator(pipe, ["images", "labels"], reader_name="reader",
                               last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)


if HAVE_DALI:
    scaling = {f"DataLoader, {n} workers": partial(epoch, workers_loader(datasets["JPEG folder"], n)) for n in (1, cores)}
    scaling |= {f"DALI, {n} threads": partial(dali_epoch, dali_loader_with(n)) for n in (1, cores)}
    torch.set_num_threads(1)  # as in section 7: this process only hands the batches on
    dl1, dln, dali1, dalin = interleave(scaling, items=TURN * n_images, repeats=config.pick(quick=3, full=5, site=5),
                                        warmup=1)
    torch.set_num_threads(threads)
    del scaling  # stops the workers
    say(reading.scaling(dl1, dln, dali1, dalin, cores=cores,
                        section7=reading.throughput_verdicts(by["JPEG folder"], by["tuned"], by["memmap"],
                                                             by["DALI"])[reading.DALI_UNTUNED],
                        earlier={"DataLoader": by["JPEG folder"], "DALI": by["DALI"]}).replace("\n", "  \n"))
else:
    print("DALI is not installed here (section 2 says how).")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 3: decode on the CPU, then move to the GPU.
# Why: with `device="mixed"` the GPU does the inverse DCT and colour conversion; the CPU parses the
# file and, under 1 MP (every image here), also Huffman-decodes it (section 1). With `device="cpu"`
# all of the decoding is on the CPU threads, and `.gpu()` copies the decoded image, several times
# the JPEG's bytes. Measure the CPU's decode alone, a pipeline that only reads and decodes, in turns
# with the others: if the CPU-decode pipeline runs as fast, the CPU sets the pace (lesson 01).
if HAVE_DALI:
    @pipeline_def
    def cpu_decode_pipeline(root, size, on_gpu, decode_only=False):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)  # uint8 HWC on the CPU
        if decode_only:
            return images, labels
        if on_gpu:
            images, labels = images.gpu(), labels.gpu()  # the decoded image crosses the bus
        images = fn.random_resized_crop(images, size=size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=gdali.MEAN255,
                                          std=gdali.STD255, mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    def built(decode_only=False):  # an iterator over it, with section 4's settings and num_threads=cores
        pipe = cpu_decode_pipeline(str(jpeg_dir), list(out_size), S.cuda, decode_only, batch_size=batch_size,
                                   num_threads=cores, device_id=DEVICE_ID, seed=0)
        pipe.build()
        return DALIGenericIterator(pipe, ["images", "labels"], reader_name="reader",
                                   last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)

    # Without a GPU, section 7's pipeline decodes on the CPU already: it is the pipeline asked for.
    arms = {"read + decode on the CPU": partial(dali_epoch, built(True))}
    if S.cuda:
        arms["decode on the CPU, then the rest"] = partial(dali_epoch, built())
    arms["section 7's pipeline"] = partial(dali_epoch, dali_loader)
    torch.set_num_threads(1)  # as in section 7
    decode = interleave(arms, items=TURN * n_images, repeats=config.pick(quick=3, full=5, site=7), warmup=1)
    torch.set_num_threads(threads)
    say(reading.decode_ceiling(decode[0], decode[-1], decode[1] if S.cuda else None, cores=cores, cuda=S.cuda))
else:
    print("DALI is not installed here (section 2 says how).")

# %% [markdown]
# ## Further reading
#
# * [DALI documentation](https://docs.nvidia.com/deeplearning/dali/user-guide/docs/index.html) (NVIDIA): pipelines, operators and the `mixed` decoder.
# * [PyTorch Plugin API reference](https://docs.nvidia.com/deeplearning/dali/user-guide/docs/plugins/pytorch_plugin_api.html) (DALI docs): `DALIGenericIterator`, `reader_name` and the last-batch policies used in section 4.
# * [ResNet50 v1.5 For PyTorch](https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Classification/ConvNets/resnet50v1.5/README.md) (NVIDIA DeepLearningExamples): NVIDIA's ResNet-50 recipe with a DALI data backend (`--data-backends dali-cpu` or `dali-gpu`).
# * [GPU jpeg decoder: add batch support and hardware decoding](https://github.com/pytorch/vision/pull/8496) (a torchvision pull request): the same GPU decoding without DALI, in torchvision, with timings on an A100-class GPU.
# * [Leveraging the Hardware JPEG Decoder and NVIDIA nvJPEG Library on NVIDIA A100 GPUs](https://developer.nvidia.com/blog/leveraging-hardware-jpeg-decoder-and-nvjpeg-on-a100/) (NVIDIA Technical Blog): how decoding is split between the CPU (Huffman) and the GPU, and what the A100's hardware JPEG decoder takes over.
