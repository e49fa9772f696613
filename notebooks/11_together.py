# %% [markdown]
# # 11 · Putting it together
#
# **What you will learn:** what the course's techniques give together: the naive training loop and
# the course's loop, written out and timed side by side on the same ResNet-18; a *ladder* that adds
# one technique per rung and measures what each one gives (or costs) on this machine; *loader
# efficiency*, the one number that says whether the model waits for data; and after how many
# epochs the one-off decode into a memmap has paid for itself.
#
# **Time:** about 30 minutes (1-2 in quick mode). **Prerequisites:** lessons 03 to 10; this one
# reuses their pieces, the last of them from [10 · NVIDIA DALI](10_dali.ipynb).

# %%
import gpufeed

S = gpufeed.setup("11")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. What we have so far
#
# | lesson | technique | what it saves |
# |---|---|---|
# | 03 | `uint8` on the wire; convert and normalise on the device | 4x fewer bytes to collate, pin and copy; the conversion is a short kernel on the device (it still shares the GPU with the step) |
# | 04 | a fast JPEG decoder (libjpeg-turbo through torchvision or TorchCodec) | decode time per image |
# | 05 | decode once into a memmap | decoding and resizing every image again in every epoch |
# | 06 | batched fetching (`FastLoader`) | Python per sample: one gather per batch |
# | 07 | DataLoader workers, pinned memory, persistent workers | per-sample work in parallel; asynchronous copies |
# | 08 | prefetching (a thread; a CUDA side stream) | waiting: the next batch is made while this one trains |
# | 09 | batched augmentation on the device | per-sample crops and flips in Python; `float32` on the bus |
# | 10 | DALI | the whole pipeline in C++ threads (and on the GPU): no Python per sample |
#
# Section 4 climbs a ladder in this order, one technique per rung. First the two ends of it.

# %% [markdown]
# ## 2. One dataset, one model, one augmentation
#
# Every pipeline here reads the same generated folder of JPEGs (or the memmap decoded from it),
# applies the same augmentation (resize the short side, a random square crop, a random flip,
# normalise) and yields the same `float32` batches on the device. The model is a torchvision
# ResNet-18 with random weights and an SGD step (`gpufeed.measure.suite.make_model`; on CUDA in
# channels-last with bfloat16 autocast). Quick mode uses tiny images: read nothing into its numbers.
# The site's run takes 640x480 JPEGs (a common photo size) with small crops, so that on one CPU core
# the model's step and the decode of its batch take about as long: the balance a fast GPU and a naive
# loader strike. Without a GPU the model trains on the loader's cores: section 7 shows what others
# measured on GPUs.

# %%
import torch

from gpufeed import config

from gpufeed.measure import pipelines
from gpufeed.measure.machine import usable_cores
from gpufeed.measure.suite import make_model

cores = usable_cores()
QUICK = pipelines.Workload(n=32, jpeg_size=(96, 72), resize=40, crop=16, batch=16)
SITE = pipelines.Workload(n=128, jpeg_size=(640, 480), resize=64, crop=32, batch=32)  # decode ~ a step, per core
FULL = (pipelines.Workload(n=2048, jpeg_size=(640, 480), resize=256, crop=224, batch=128) if S.cuda
        else pipelines.Workload(n=128, jpeg_size=(640, 480), resize=192, crop=160, batch=16))  # minutes on a CPU
w = config.pick(quick=QUICK, full=FULL, site=SITE)
data = pipelines.prepare(w, config.cache_dir() / "lesson11", workers=1 if S.quick else cores)
model, step = make_model(w, S.device)
print(f"{w.n} JPEGs of {w.jpeg_size[0]}x{w.jpeg_size[1]}; a memmap of {w.resize}x{w.resize} squares; "
      f"crops of {w.crop}x{w.crop} in batches of {w.batch}; {cores} cores; device {S.device}")

# %% [markdown]
# The memmap is a one-off cost, paid before the first epoch. We time a fresh build now (section 8
# weighs it against what it saves), before anything in this process starts threads of its own: the
# build forks DataLoader workers, and a fork while another thread holds a lock can hang the child.
# Then, on the CPU, torch keeps one thread while we measure: every pipeline brings its own
# parallelism (workers, DALI's threads, the prefetch thread), and the other cores are the loader's.

# %%
import shutil

from gpufeed.data.memmap import build_memmap

scratch = config.cache_dir() / "lesson11" / "build-timing"
build_s = build_memmap(data.jpeg, scratch, size=(w.resize, w.resize), workers=cores, overwrite=True,
                       progress=False).seconds  # decode + resize + write, every image once
shutil.rmtree(scratch)
print(f"building the memmap of {w.n} images with {cores} workers took {build_s:.2f} s")
threads = torch.get_num_threads()
if not S.cuda:
    torch.set_num_threads(1)  # the model on one thread; the other cores are the loader's
print(f"torch threads while measuring: {torch.get_num_threads()} (restored to {threads} at the end)")

# %% [markdown]
# ## 3. The two loops
#
# **The naive loop**, as most training scripts begin: torchvision's `ImageFolder`, Pillow decoding,
# per-sample transforms that end in `float32`, a `DataLoader` with its defaults, `.to(device)`.

# %%
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision import transforms as T

from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD

naive_transform = T.Compose([T.Resize(w.resize), T.RandomCrop(w.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                             T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])  # per image, on the CPU, float32 out
naive_loader = DataLoader(datasets.ImageFolder(str(data.jpeg), transform=naive_transform), batch_size=w.batch,
                          shuffle=True, drop_last=True)


def naive_epoch():
    for images, targets in naive_loader:  # float32 [B, 3, crop, crop]: 4 bytes a value on the wire
        yield images.to(S.device), targets.to(S.device)


def train_epoch(batches):
    """The training loop, the same for every pipeline: one step per batch."""
    seen = 0
    for images, targets in batches:
        step(images, targets)  # forward, loss, backward, SGD step
        seen += len(images)
    return seen


# %% [markdown]
# **The course's loop.** Decoded and resized once into a memmap (lesson 05); a batch is one gather
# (lesson 06), made on a thread while the model computes (lesson 08); on CUDA it is gathered into
# pinned memory and copied whole and asynchronously, in `uint8` (lessons 03, 07); then it is
# cropped, flipped and normalised where the model runs, each image its own crop and flip, in one
# batched step (lesson 09). The training loop is the same `train_epoch`.

# %%
from gpufeed.data.loader import FastLoader
from gpufeed.data.orders import seeded_generator
from gpufeed.data.memmap import load_memmap
from gpufeed.data.prefetch import ThreadPrefetcher
from gpufeed.data.device_augment import DeviceAugment

# The pieces, by hand, to see them. In your own training use the library's front door, which is this
# composition made safe (on CUDA: copy and augmentation on a side stream; see README, "Use it in your
# own training"): gpufeed.data.ImageLoader(data.memmap, w.batch, crop=w.crop, device=S.device, drop_last=True)

memmap = load_memmap(data.memmap)  # uint8 [N, 3, resize, resize] + int64 [N]: mapped, not read
fast = FastLoader(memmap, w.batch, seed=0, drop_last=True,
                  device=S.device if S.cuda else None,  # CUDA: gather into pinned memory, copy asynchronously
                  reuse_buffers=0 if S.cuda else 4)  # CPU: 4 reused buffers (a batch is overwritten 4 later)
# per-sample crop + flip, then float and normalise: batched; its generator seeded as ImageLoader seeds
# epoch 0 of rank 0 (seed, epoch, rank, 1), so that the check below can compare the two batch for batch
augment = DeviceAugment(w.crop, generator=seeded_generator(0, 0, 0, 1))


def course_epoch():
    with ThreadPrefetcher(fast, depth=2) as batches:  # depth 2 < 4 buffers: no batch is overwritten in use
        for b in batches:
            yield augment(b.images), b.targets


# %% [markdown]
# Before timing two implementations, check that they compute what they should: each loop gives
# the very batches of its twin in `gpufeed.measure.pipelines`, which the tests check image by image against
# Pillow's decoding of every file.

# %%
def first_batch(epoch):
    batches = epoch()
    images, targets = next(batches)
    images, targets = images.clone(), targets.clone()  # the CPU path reuses its buffers
    batches.close()  # stops the prefetch thread, if any
    return images, targets


torch.manual_seed(0)  # the sampler's order and the transforms' coin flips
mine = first_batch(naive_epoch)
torch.manual_seed(0)
theirs = first_batch(lambda: pipelines.naive(data, w, S.device))
assert all(torch.equal(a, b) for a, b in zip(mine, theirs)), "the naive loop differs from pipelines.naive"
mine = first_batch(course_epoch)
theirs = first_batch(lambda: iter(pipelines.Course(data, w, S.device, seed=0)))
assert all(torch.equal(a, b) for a, b in zip(mine, theirs)), "the course's loop differs from pipelines.Course"
print(f"both loops give their twins' batches: images {tuple(mine[0].shape)} {mine[0].dtype} on {mine[0].device}")

# %% [markdown]
# ## 4. The ladder
#
# Each rung adds one technique to the rung above it and is timed as a loader alone: whole epochs,
# batches made and left on the device, no model. `gpufeed.course.lesson11.ladder` builds the rungs from the pieces
# of `gpufeed.measure.pipelines` (the DataLoader rungs' datasets and transforms live there, since workers
# must pickle them). DALI, where installed, is a side rung: another road to the same batches.

# %%
from gpufeed.measure import dali as gdali
from gpufeed.course.lesson11 import ladder

HAVE_DALI = gdali.available()
rungs = ladder.rungs(data, w, S.device, workers=cores, dali=HAVE_DALI)
for key in rungs:
    print(f"{ladder.RUNGS[key].label:24} lesson {ladder.RUNGS[key].lesson}")

# %% [markdown]
# Timed in turns (naive, workers, ..., naive, workers, ...), so that a burst of other work on a
# busy machine slows every rung a little rather than one rung a lot, five passes each (three in
# quick mode): each step is a verdict on the rung against the one above, with an interval, or
# "this run cannot tell".
# Every pass is a whole epoch, except for the naive rung, which decodes every JPEG on one core: its
# passes are the epoch's first batches, as many as fit in `NAIVE_S` seconds (a shuffled epoch's
# first batches are like any others). `ladder.Busy` counts the cores each rung keeps busy. DALI's
# threads go on working ahead once an epoch's last batch is handed over, so its epoch ends only when
# they stop (`gpufeed.measure.suite.dali_source`): the rung timed next does not pay for that work.

# %%
from gpufeed.measure import harness as bench

NAIVE_S = 0.5  # seconds a pass of the naive rung may take (at least one batch)
per_epoch = w.n // w.batch * w.batch  # images in one pass (the last, short batch is dropped)
naive_batches = ladder.batches_within(rungs["naive"], NAIVE_S, total=w.n // w.batch)
rungs["naive"] = ladder.first_batches(rungs["naive"], naive_batches)


def items(cases):  # images per pass: the naive loop's first batches, every other case a whole epoch
    return {k: naive_batches * w.batch if k.startswith("naive") else per_epoch for k in cases}


kw = {"repeats": config.pick(quick=3, full=5, site=5), "warmup": 1}  # timed passes after one untimed: a verdict needs 5
busy = ladder.Busy()
loader_ms = bench.interleave({k: (lambda k=k, e=e: busy.run(k, e)) for k, e in rungs.items()}, items=items(rungs),
                             params={k: {"section": "ladder", "rung": k} for k in rungs}, desc="the ladder", **kw)
timed = {m.name: m for m in loader_ms}
print(f"the naive rung: {naive_batches} of the epoch's {w.n // w.batch} batches per pass")
for m in loader_ms:
    print(f"{m}; {busy.cores()[m.name]:.1f} cores busy")

# %%
import matplotlib.pyplot as plt

from gpufeed.course.prose import say

steps = ladder.rows({m.name: m.items_per_s for m in loader_ms})
fig, ax = ladder.plot(steps, S.machine, title=f"the ladder: {w.crop}px crops, batches of {w.batch}, on {S.device}")
plt.show()
say(ladder.read(loader_ms, cores, busy.cores()))  # each step a verdict against the rung above

# %% [markdown]
# ## 5. The two loops, training, side by side
#
# Now with the model: the naive loop, the tuned JPEG DataLoader (rung 3), the course's loop, DALI
# where installed, and the ceiling: the same training step on batches that are already on the
# device (`pipelines.resident`). One more arm isolates prefetching: the naive loop with a thread
# that makes its next batch while the model computes (`ThreadPrefetcher`), and nothing else changed.
# On the CPU, in full mode, we also time the ceiling with all cores, to see what the cores we left
# to the loader cost the model.

# %%
import itertools

from gpufeed.course.lesson11 import reading


def naive_prefetched():  # the naive loop's first batches, each made on a thread while the model trains
    with ThreadPrefetcher(itertools.islice(naive_epoch(), naive_batches), depth=2) as made:
        yield from made


ready = pipelines.resident(w, S.device, batches=w.n // w.batch)  # as many batches as an epoch, on the device
cases = {"naive": ladder.first_batches(naive_epoch, naive_batches), "naive + prefetch": naive_prefetched,
         "tuned": rungs["uint8"], "course": course_epoch, "resident": lambda: iter(ready),
         **({"dali": rungs["dali"]} if HAVE_DALI else {})}
runs = {k: (lambda e=e: train_epoch(e())) for k, e in cases.items()}
ALL_CORES = f"resident, {cores} threads"
if not S.cuda and S.mode == "full":  # on a shared 2-core site machine, 2 torch threads read other work, not the model:
    # site runs took 1.18 s and 5.83 s a pass (IQR 2.2 and 3.0 s) where one thread took 0.63 and 0.79 s
    def all_cores():
        torch.set_num_threads(cores)
        try:
            return train_epoch(iter(ready))
        finally:
            torch.set_num_threads(1)

    runs[ALL_CORES] = all_cores
train_ms = bench.interleave(runs, items=items(runs), params={k: {"section": "train", "pipeline": k} for k in runs},
                            desc="training", **{**kw, "repeats": config.pick(quick=2, full=5, site=5)})
trained = {m.name: m for m in train_ms}
rates = {k: m.items_per_s for k, m in trained.items()}  # median images/s
for m in train_ms:
    print(m)
loops_v = reading.against(trained["course"], trained["naive"])  # in turns; section 10 reads it again
say(reading.read_training(loops_v, reading.against(trained["naive + prefetch"], trained["naive"]),
                          ladder.step_verdicts(loader_ms)["prefetch"], rates))

# %% [markdown]
# ## 6. Loader efficiency
#
# **Loader efficiency** = training throughput with the real loader / training throughput with the
# data already on the device. At 1.0 the model never waits for data.
#
# * **On a GPU** the reading and the copies run on the CPU and the copy engines while the GPU
#   computes; the course's crop, flip and normalise are GPU kernels that take turns with the
#   model's, so a good pipeline gets close to 1.0, not to it. The course aims at 0.95
#   (`efficiency.TARGET`, for `gpufeed bench`'s heavier GPU workload); the cell below says whether
#   a GPU run of ours has measured it.
# * **On a CPU-only machine** the loader and the model share the cores: a core the loader uses is
#   one the model does not get.
#
# The rates bound it (`efficiency.bounds`): `1 / (1 + model rate / loader rate)` if nothing overlaps,
# with the loader's rate timed alone in section 4. A loop without workers or a thread, such as the
# naive one, makes each batch and then trains on it: it cannot beat that bound, so a run in which
# it does has numbers that cannot all be right, and the reading says so.

# %%
from gpufeed.course.lesson11 import efficiency

LOADER_OF = {"naive": "naive", "naive + prefetch": "naive", "tuned": "uint8", "course": "course", "dali": "dali"}
checks = [reading.check(k, trained[k], trained["resident"], timed.get(rung), overlaps=k != "naive")
          for k, rung in LOADER_OF.items() if k in trained]  # section 4 timed each pipeline's loader alone
eff = efficiency.efficiency({k: m.items_per_s for k, m in trained.items() if k != ALL_CORES})
fig, ax = efficiency.plot(eff, S.machine, title=f"loader efficiency, ResNet-18 on {S.device} "
                          f"(in brackets: training speed-up over naive)")
plt.show()
say("Loader efficiency, with its interval, and against its rate if nothing overlapped:\n\n"
    + reading.read_efficiency(checks))
say(reading.read_target(reading.against(trained["course"], trained["resident"], scale=efficiency.TARGET),
                        efficiency.TARGET) if S.cuda else efficiency.target_status())
if ALL_CORES in trained:
    say(reading.read_all_cores(reading.against(trained[ALL_CORES], trained["resident"]), cores,
                               reading.against(trained["course"], trained[ALL_CORES])))

# %% [markdown]
# ## 7. On a GPU
#
# With CUDA, everything above ran on the GPU. Without it, here are the ladder and the efficiency
# committed from a machine with a GPU, else what others published: the images/s a GPU trains
# ResNet-50 at (the rate a loader must feed) and how fast FFCV's loader reads ImageNet from RAM.

# %%
if S.cuda:
    print(f"Measured above on {S.machine.get('gpu')}.")
else:
    from gpufeed.measure import results

    ref = results.gpu_reference("lesson11")  # says where the numbers come from
    if ref is not None:
        doc = ref[1]
        ladder.plot(doc["ladder"], doc["machine"], title="reference: the ladder")
        efficiency.plot(doc["efficiency"], doc["machine"], title="reference: loader efficiency")
        plt.show()
        say(ladder.read([m for m in ref[0] if m.params.get("section") == "ladder"], doc["cores"], doc.get("busy")))

# %% [markdown]
# Then `python -m gpufeed bench` where its results are committed: every pipeline, loader alone and
# training, in one run, from a GPU machine and from a CPU-only one. In the loader rows, `cores` is
# CPU seconds over wall seconds (on 2 cores, 2.00 is every core busy): a loader at the number of
# cores is bound by the CPU. `course_uint8` is the front door with `dtype=torch.uint8`, the crops
# without the float tail: what the CPU is left with when a GPU normalises (lesson 03). In the
# training rows, `of ceiling` is the loader efficiency; below each table they are read as section 6
# reads this page's, each a verdict against that run's `resident` row.

# %%
from gpufeed.measure import suite as pipeline_bench


def show_bench(found, kind):
    if not found:
        print(f"No `gpufeed bench` results from a {kind} machine are committed yet (results/<machine>/results.json).")
        return
    path, doc = found[0]
    print(f"{path.parent.name}: {pipeline_bench.summary(doc)}")
    efficiency.plot(efficiency.efficiency(efficiency.from_bench(doc)), doc["machine"],
                    title=f"gpufeed bench, {doc['workload']['crop']}px batches of {doc['workload']['batch']}")
    plt.show()
    say(reading.read_bench_training(doc))  # its training rows, each a verdict against its resident run


for kind, runs_found in (("GPU", efficiency.committed_bench(gpu=True)), ("CPU-only", efficiency.committed_bench(gpu=False))):
    for found in runs_found or [None]:  # each size committed (quick, full)
        show_bench([found] if found else [], kind)

# %% [markdown]
# ### Deeper (optional): inside `ImageLoader` on a CPU
#
# Why the `course` rows above keep more cores busy than a gather and an augmentation on two threads.

# %% [markdown] tags=["deeper"]
# The front door, `ImageLoader`, gives the same batches as section 3's course loop (`pipelines.Course`
# is built on it) but does three things differently on a CPU, each for a reason lessons 05 and 06
# measured:
#
# * **No gathered copy.** It crops each sample straight out of the memmap, a group of
#   `GROUP` samples at a time (the number is printed below) into a small uint8 scratch, writes them
#   once, as float, into the batch (`gpufeed.data.cpu_crops.crop_flip_normalize`), then scales
#   them while the group's float crops are still in the cache: one read of the stored bytes instead
#   of a gather, a copy and two more passes over the whole float batch (sizes below).
# * **Every core.** A small pool of threads shares the work (torch releases the GIL inside its
#   ops), one task per group, instead of one thread gathering while another augments. The next
#   batches' tasks wait in the pool's queue behind the current one's, so no thread waits for the
#   others at the end of a batch: a thread that is done takes the next group, even of the next
#   batch. The Python between the ops still holds the GIL, which is why the samples go a group at a
#   time (a few ops per group instead of a few per sample): `gpufeed bench`'s cores column shows how
#   many cores the loader really keeps busy.
# * **Buffers kept across epochs.** Fresh memory costs a page fault per 4 KiB the first time it is
#   written, every epoch; with `reuse_buffers` the output buffers (and the loader's own) are handed
#   from one epoch to the next. Without it (the safe default) a batch's memory is reused only
#   once nothing holds it any more (`gpufeed.data.image_loader.FreeBuffers` asks torch how many
#   tensors share it), so a batch you keep is never overwritten and one you drop costs no new
#   page faults.
#
# `python -m gpufeed bench` measures it on your machine against its ceilings and, with `--peers`,
# against FFCV, SPDL and torchdata.


# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
from gpufeed.data.cpu_crops import GROUP

group_kb = GROUP * 3 * w.crop * w.crop * 4 / 1e3  # float32 crops of one task, kB
batch_kb = w.batch * 3 * w.crop * w.crop * 4 / 1e3  # the float32 batch, kB
say(f"Here, with {w.crop}x{w.crop} crops in batches of {w.batch}: a task takes `GROUP` = {GROUP} samples, whose float "
    f"crops ({group_kb:,.0f} kB) are scaled while in cache, instead of more passes over the {batch_kb:,.0f} kB float batch.")


# %% [markdown]
# ## 8. The one-off cost
#
# The memmap is built once; every epoch after that skips the decode. It pays for itself after
# *build time / time saved per epoch* epochs. Both grow with the number of images, so the
# break-even does not depend on the dataset's size, only on the machine and the pipeline.

# %%
import math

payback = {}  # the course's pipeline against each, in turns (sections 4 and 5), with the build's seconds
for name, before, after in (("the naive training loop", trained["naive"], trained["course"]),
                            ("the tuned JPEG DataLoader, training", trained["tuned"], trained["course"]),
                            ("the tuned JPEG DataLoader, loader alone", timed["uint8"], timed["course"])):
    payback[name] = reading.read_payback(name, build_s, w.n / before.items_per_s, reading.against(after, before))
say("\n".join(f"- {line}" for line in payback.values()))
print("The loader-alone line is what a model that waits on its data (a fast GPU) would save; where the loader's "
      "work hides behind the model's, training saves less.")

# %% [markdown]
# ## 9. The model's side: `torch.compile`, and TensorRT
#
# The techniques so far feed the model faster; apart from lesson 03's bfloat16 autocast, they leave
# the model's own work as it was. A model compiler changes that: the same forward pass in fewer,
# fused kernels tuned for one device. **TensorRT**, NVIDIA's inference compiler, builds an *engine*
# for one GPU (layers fused, the fastest kernel for each layer and shape picked by timing them
# there, float16 or int8 where allowed); Torch-TensorRT builds it from a PyTorch module
# ([saving it](https://docs.pytorch.org/TensorRT/user_guide/saving_models.html) as TorchScript;
# [`trtexec`](https://docs.nvidia.com/deeplearning/tensorrt/10.16.1/performance/benchmarking.html)
# builds one from an ONNX file). It serves inference of a trained model.
#
# It fits **after** the loader: the faster the model, the more images per second the loader must
# make. Below, eager against `torch.compile` (TorchInductor) for the forward pass on batches
# already on the device, TensorRT where `torch_tensorrt` is installed (CUDA only), and how much
# faster the model may get before the loader holds it back. A first compile takes tens of seconds,
# so only full mode runs it.

# %%
from gpufeed.course.lesson11 import engines

forward = engines.inference(model, S.device)  # a copy in eval mode: `model` itself is left to train
example = ready[0][0]  # one batch already on the device, float32 [B, 3, crop, crop]
if S.mode != "full":
    compiled_fwd, compile_note = None, f"skipped in {S.mode} mode (a first compile takes tens of seconds); full mode measures it"
else:
    compiled_fwd, compile_note = engines.compiled_inference(forward, example, S.device)
trt, trt_note = engines.try_tensorrt(forward, example, S.device)  # None and why, where it cannot run
print(f"torch.compile: {compile_note}\nTensorRT: {trt_note}")

# %%
from gpufeed.measure import results

engines_run = {"eager": forward, "torch.compile": compiled_fwd, "TensorRT": trt}
fwd_ms = bench.interleave({k: (lambda f=f: f(example)) for k, f in engines_run.items() if f is not None},
                          items=w.batch, repeats=config.pick(quick=5, full=10), warmup=2,
                          params={k: {"section": "model side"} for k in engines_run}, desc="the model's side")
model_side = {"forward": {m.name: reading.rates(m) for m in fwd_ms}, "loader": reading.rates(timed["course"]),
              "train": reading.rates(trained["resident"]), "note": compile_note}  # images/s, sample by sample
say(engines.read_model_side(**model_side))
lesson_ref = results.reference("lesson11")  # the GPU reference, where committed
if not S.cuda and lesson_ref is not None and "model_side" in lesson_ref[1]:
    say(f"On {lesson_ref[1]['machine'].get('gpu')}: " + engines.read_model_side(**lesson_ref[1]["model_side"]))
saved = results.save_lesson("lesson11", loader_ms + train_ms + fwd_ms, workload=w.to_dict(), cores=cores,
                            threads=torch.get_num_threads(), ladder=steps, busy=busy.cores(), efficiency=eff,
                            build_seconds=build_s, dali=gdali.version() if HAVE_DALI else None, model_side=model_side,
                            tensorrt=trt_note)

# %% [markdown]
# ## 10. Diagnosing the two loops, as they run
#
# Lesson 02's diagnosis has an in-place mode, `gpufeed.measure.watch(loader)`: wrap the loader, loop
# over the wrapper as you would over the loader, and the report reads the loop as it ran (how long
# it waited for each batch). Then `feed.what_ifs(step)` asks this lesson's questions of it: what the
# loader makes alone, what the step makes on a batch already on the device, and what to change (for
# a `DataLoader`, a setting it suggests is first re-timed on a copy, and suggested only if the copy
# measured faster). Here it watches the naive loop (the `DataLoader` above, copied in the step) and
# the course's loop (its twin in `gpufeed.measure.pipelines`), each as it is, with torch on one
# thread as in section 5.

# %%
from gpufeed.measure import watch

n_diag, probe = config.pick(quick=(5, 1), full=(10, 3))  # batches of each what-if; steps watched for copies and syncs
loops = {"naive": (naive_loader, lambda b: step(b[0].to(S.device), b[1].to(S.device))),
         "course": (pipelines.Course(data, w, S.device, seed=0), lambda b: step(*b))}
reports = {}
for name, (loader, train) in loops.items():
    with watch(loader) as feed:
        for _ in range(-(-(n_diag + 1) // len(loader))):  # whole epochs, enough for n_diag batches after the first
            for batch in feed:  # the loop as it is
                train(batch)
    # fixes: seconds to re-time a suggested setting; site: 16, so that each timed call takes several batches
    # (at 10 s, one batch a call after the workers' made-ahead ones: a site run read 2.19x, 1.19x to 1551.61x)
    reports[name] = feed.what_ifs(train, batches=n_diag, probe=probe, fixes=config.pick(quick=0, full=10, site=16))
for name, r in reports.items():
    print(f"{name}: {r.rate:,.0f} images/s, waits {r.wait_fraction:.0%}, {r.bound} bound; findings: "
          f"{', '.join(f.key for f in r.findings)}")
say(reading.read_watched(reports["naive"], reports["course"], loops_v))  # read against section 5's verdict
torch.set_num_threads(threads)  # torch gets its threads back

# %% [markdown]
# ## Key takeaways
#
# * Measure the whole loop, not a piece: the same model, data and augmentation, timed in turns.
# * The ladder shows where the time went on *this* machine, each step a verdict against the rung
#   above. A technique that wins on a GPU can lose on 2 CPU cores, and the order matters: a
#   prefetch thread has nothing to hide in a loader timed alone; section 5 times it where the
#   model computes.
# * Loader efficiency, training throughput over training on data already on the device, is the
#   number to watch, with its interval and its bound: a loop that cannot overlap cannot beat
#   `1 / (1 + model rate / loader rate)`. The course aims at 0.95 on a GPU (section 6 says whether a
#   GPU run has measured it); on a CPU-only machine the loader and the model share the cores.
# * Decoding once is a one-off cost; divide it by the time saved per epoch to know when it pays.
# * A model compiler (`torch.compile`; TensorRT for inference on NVIDIA GPUs) speeds up the model,
#   not the feeding: the loader must then make as many more images per second as the model gained.
#   The loader's rate alone over the model's is the headroom; past it, the loader is the bottleneck.
#
# ## Exercises
#
# 1. Compute, by hand from `rates`, `w` and `build_s`, after how many epochs the memmap pays for
#    itself against the naive loop; check it with the cell below.
# 2. Swap two rungs: build a ladder where prefetching comes before batched fetching. A rung is a
#    function that starts an epoch, and `gpufeed.data.prefetch.prefetch` needs the iterable itself,
#    so build the per-sample memmap DataLoader (`pipelines.tuned_loader(data, w, S.device, cores,
#    dataset=ladder.memmap_samples(data, w))`) and make the rung
#    `lambda: iter(prefetch(loader, S.device, torch.float32, IMAGENET_MEAN, IMAGENET_STD))` (the
#    same conversion and normalisation as the `memmap` rung). Does prefetching gain more there? Why?
# 3. Make the model heavier (`torchvision.models.resnet50`) or lighter and measure the efficiency
#    again. Which pipelines keep the model fed now, and what does that say about the loader's budget?
#
# A worked solution to each exercise follows the self-check, folded: try first, then unfold it.

# %%
# Self-check for exercise 1: replace None with your number of epochs.
my_epochs = None
if my_epochs is not None:
    want = efficiency.break_even(build_s, w.n / rates["naive"], w.n / rates["course"])
    ok = math.isclose(my_epochs, want, rel_tol=0.01) or (math.isinf(want) and math.isinf(my_epochs))
    print("right!" if ok else "not yet: epochs = build time / (naive epoch time - course epoch time)")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 1: when the memmap pays for itself against the naive loop.
# Why: the build is paid once, before the first epoch; after it, each epoch of training costs the
# course's epoch time instead of the naive one. An epoch of n images at r images/s takes n / r
# seconds, so each epoch saves n / r_naive - n / r_course seconds, and the build is paid back after
# build time / saving epochs. If the course's loop saves nothing here, it is never paid back. Both
# the build and the saving grow with n, so the answer does not depend on the dataset's size.
naive_s, course_s = w.n / rates["naive"], w.n / rates["course"]  # seconds per epoch
saving = naive_s - course_s
my_epochs = build_s / saving if saving > 0 else math.inf
want = efficiency.break_even(build_s, naive_s, course_s)  # what the self-check compares with
assert math.isclose(my_epochs, want, rel_tol=0.01) or (math.isinf(want) and math.isinf(my_epochs))
print(f"By the medians, an epoch takes {naive_s:.2f} s naive and {course_s:.2f} s with the course's loop, so "
      f"my_epochs = {my_epochs:.1f}. Whether this run can tell is the verdict of section 8, which reads the same "
      f"two runs: {payback['the naive training loop']}")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 2: prefetching before batched fetching.
# Why it may gain less there: a DataLoader with workers already works ahead: each of its worker
# processes keeps `prefetch_factor` batches in flight while this process takes the finished ones.
# A prefetch thread on top only moves the last step (to float, normalise) off the main thread and
# adds a hand-off. After batched fetching, the FastLoader gathers and crops in *this* process, one
# batch at a time, so a thread that makes the next batch meanwhile is the first parallelism there.
# Timed as section 4 times the ladder: the loader alone, in turns, with the same `kw` and threads.
# The course's order, batched fetching without and with prefetching, is section 4's own pair of
# rungs, timed in turns there; only the new pair is timed here, its two loaders in turns.
from gpufeed.data.prefetch import prefetch

torch.set_num_threads(torch.get_num_threads() if S.cuda else 1)  # as while section 4 measured
per_sample = pipelines.tuned_loader(data, w, S.device, cores, dataset=ladder.memmap_samples(data, w))
swapped = {"memmap": rungs["memmap"],
           "memmap + prefetch": lambda dl=per_sample: iter(prefetch(dl, S.device, torch.float32, IMAGENET_MEAN, IMAGENET_STD))}
swap_ms = bench.interleave({k: (lambda e=e: ladder.epoch_pass(e)) for k, e in swapped.items()}, items=per_epoch, **kw)
swap = {m.name: m for m in swap_ms}
early = reading.against(swap["memmap + prefetch"], swap["memmap"])  # in turns, here
late = ladder.step_verdicts(loader_ms)["prefetch"]  # batched -> + prefetching, in turns in section 4
say(reading.read_order({"before batched fetching": early, "after batched fetching (the course's order)": late},
                       "prefetching, timed alone")
    + f" Epochs here last {w.n / timed['batched'].items_per_s * 1e3:.0f} ms (batched) and "
    f"{w.n / swap['memmap'].items_per_s * 1e3:.0f} ms (per-sample DataLoader); one likely cause of a loss, not measured "
    "here: the thread's own costs (its start each epoch, hand-offs that wait for Python's GIL). Section 5 timed "
    "prefetching where a model step gives it something to hide.")
torch.set_num_threads(threads)
del per_sample, swapped  # stops its workers


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 3: a heavier model, ResNet-50.
# Why it changes the efficiency: a pipeline keeps up when it makes a batch in less time than the
# model's step takes; that step is the loader's *budget*. A heavier model has a longer step, so the
# same loader fits more easily and the efficiency rises towards 1.0; a lighter one shrinks the
# budget, and pipelines that kept up fall behind. On a GPU the loader works during
# the step; on a CPU-only machine it runs beside the step on the other cores, with the same budget.
# Measure as section 5 does, in turns, with the model swapped (same crops, same batches), on the
# first batches of each pipeline (the naive rung's count; one in quick mode): ResNet-50 on a CPU is slow.
import dataclasses

torch.set_num_threads(torch.get_num_threads() if S.cuda else 1)  # as while section 5 measured
heavy = dataclasses.replace(w, model="resnet50")
_, heavy_step = make_model(heavy, S.device)
section5_step, step = step, heavy_step  # section 5's `train_epoch` calls the global `step`
first = config.pick(quick=1, full=naive_batches, site=naive_batches)  # batches a pass
cut = {k: ladder.first_batches(e, first) for k, e in  # the first batches of each
       {"naive": naive_epoch, "course": course_epoch, "resident": lambda: iter(ready)}.items()}
try:
    heavy_ms = bench.interleave({k: (lambda e=e: train_epoch(e())) for k, e in cut.items()},
                                items=first * w.batch, **{**kw, "repeats": config.pick(quick=1, full=5, site=5)})
finally:
    step = section5_step
heavy_by = {m.name: m for m in heavy_ms}
for name, ms in (("ResNet-18", trained), ("ResNet-50", heavy_by)):
    print(f"{name}: a step takes {w.batch / ms['resident'].items_per_s * 1e3:.0f} ms (the loader's budget per batch)")
    say(reading.read_efficiency([reading.check(k, ms[k], ms["resident"], timed[k], overlaps=k != "naive")
                                 for k in ("naive", "course")]))
longer = reading.against(trained["resident"], heavy_by["resident"], paired=False)  # two runs: not in turns
say("ResNet-50's step " + longer.ran("ResNet-18's", "is", more="longer", less="shorter", same="as long")
    + ": the longer the step, the more time the loader has per batch, and the lighter the model, the faster the "
    "loader must be.")
torch.set_num_threads(threads)

# %% [markdown]
# ## Further reading
#
# * [ResNet50 v1.5 For PyTorch](https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Classification/ConvNets/resnet50v1.5/README.md) (NVIDIA DeepLearningExamples): training throughput of ResNet-50 on one and eight A100s: the bar a loader must feed.
# * [FFCV: Accelerating Training by Removing Data Bottlenecks](https://arxiv.org/abs/2306.12517) (Leclerc, Ilyas, Engstrom, Park, Salman, Madry; CVPR 2023): the end-to-end view: data loading as the limit of training speed, measured on ImageNet.
# * [ImageNet Benchmarks](https://github.com/libffcv/ffcv/blob/main/docs/benchmarks.rst) (FFCV documentation): loading rates of one loader from RAM and from network disks, next to the training it feeds.
# * [Performance Tuning Guide](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html) (Szymon Migacz, PyTorch tutorials): the rest of the training step once the data keeps up.
# * [Torch-TensorRT: saving models](https://docs.pytorch.org/TensorRT/user_guide/saving_models.html) (PyTorch and NVIDIA): compiling a module to a TensorRT engine and saving it as TorchScript or an ExportedProgram, section 9's next step.
