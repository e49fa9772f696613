# %% [markdown]
# # 09 · Augmentations: CPU, GPU or both
#
# **What you will learn:** the usual augmentation pipeline (random crop, flip, to float, normalise,
# one image at a time in CPU workers) against augmenting whole `uint8` batches on the device; the
# trap that a random transform applied to a batch draws *one* set of parameters for all of it, and
# how to get per-sample randomness in a few batched calls, checked against torchvision image by
# image; and why to keep `uint8` until the last step and fuse that step with `torch.compile`.
#
# **Time:** about 20 minutes (1-2 in quick mode). **Prerequisites:** [05 · Memory-mapped datasets](05_memmap.ipynb)
# and [06 · Batched fetching](06_batched.ipynb); lesson 03 (why `uint8` goes over the bus).

# %%
import gpufeed

S = gpufeed.setup("09")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. Per sample on the CPU, or per batch on the device
#
# Training augmentations are random: each image gets its own crop, flip and colour change. The
# usual pipeline does it in the DataLoader's workers, one image per `__getitem__`:
#
# ```
#  worker (CPU core), per image:  uint8 image -> RandomResizedCrop -> flip -> to float -> Normalize
#  main process:                  collate -> float32 batch (4 bytes a value) -> GPU
# ```
#
# The alternative fetches a `uint8` batch in one call (lesson 06), moves it whole (1 byte a value)
# and augments the batch where the model runs:
#
# ```
#  main process:  gather uint8 batch -> device -> per-sample crop + resize, flip, normalise (a few batched calls)
# ```
#
# Both start from the memmap dataset of lesson 05, so neither decodes JPEGs here: we time the
# augmentation alone. The images are stored at the size they will be cropped from.

# %%
import torch

from gpufeed import config
from gpufeed.measure.machine import usable_cores
from gpufeed.data.memmap import build_memmap, load_memmap
from gpufeed.measure.synth import synth_folder

cores, batch_size = usable_cores(), 64
n_images = config.pick(quick=128, full=2048, site=512)
stored, out_size = config.pick(quick=((96, 96), (64, 64)), full=((256, 256), (224, 224)), site=((128, 128), (112, 112)))
jpeg_dir = synth_folder(config.cache_dir() / "lesson09" / f"jpeg-{stored[0]}-{n_images}", n=n_images, size=stored,
                        workers=cores, progress=False).path
mm_dir = build_memmap(jpeg_dir, config.cache_dir() / "lesson09" / f"mm-{stored[0]}-{n_images}", size=stored,
                      workers=cores, reuse=True, progress=False).path
data = load_memmap(mm_dir)
print(f"{n_images} images, uint8 {tuple(data.images.shape[1:])} each; augmented to {out_size[0]}x{out_size[1]}; "
      f"{cores} cores; batch {batch_size}; device {S.device}")

# %% [markdown]
# **The usual pipeline**, with torchvision's v2 transforms on `uint8` tensors (`ToDtype` with
# `scale=True` does what `ToTensor` did for PIL images). It lives in `gpufeed.data.augment`, since
# DataLoader workers must pickle it, and `gpufeed.data.arrays.MemmapDataset` serves the memmap one image at a time:

# %%
from torch.utils.data import DataLoader

from gpufeed.data.arrays import MemmapDataset
from gpufeed.data.augment import cpu_transform

per_sample = cpu_transform(out_size)
print(per_sample)


def workers_loader(transform, b=batch_size):  # one worker per core, kept alive across epochs
    return DataLoader(MemmapDataset(mm_dir, transform, batched=False), batch_size=b, shuffle=True,
                      num_workers=cores, persistent_workers=True, pin_memory=S.cuda)


loaders = {"usual": workers_loader(per_sample)}


def workers_epoch(loader):
    for images, targets in loader:  # float32 [64, 3, h, w], already normalised
        images.to(S.device, non_blocking=True), targets.to(S.device, non_blocking=True)


# %% [markdown]
# **Per batch on the device**: `gpufeed.data.augment.draw_params` draws every sample's parameters at once
# (a seeded `torch.Generator`, so a run can be repeated and checked), and `augment` applies them
# to the `uint8` batch: crop + resize + flip in two batched matrix products, then normalise
# (section 2 opens it up). The loader is lesson 06's `FastLoader`, which moves each batch whole.

# %%
from gpufeed.data.augment import augment, augment_one, draw_params
from gpufeed.data.loader import FastLoader

def fast_loader(b=batch_size):  # lesson 06's FastLoader: one gather per batch, moved whole
    return FastLoader(data, b, seed=0, device=S.device if S.cuda else None)


device_loader, gen, stored_hw = fast_loader(), torch.Generator().manual_seed(0), tuple(data.images.shape[2:])


def batched_epoch(loader):
    for batch in loader:  # uint8 [64, 3, H, W], on the device
        p = draw_params(len(batch.images), stored_hw, out_size, generator=gen).to(S.device)
        augment(batch.images, p)  # float32 [64, 3, h, w], normalised


def loop_epoch(loader):  # per-sample randomness the naive way: a Python loop over the batch, on the device
    for batch in loader:
        p = draw_params(len(batch.images), stored_hw, out_size, generator=gen)
        torch.stack([augment_one(img, p.sample(i)) for i, img in enumerate(batch.images)])


# %% [markdown]
# The workers get all the cores. The in-process versions run on **one** torch thread, like lessons
# 05 and 06, so that each compares with one worker's core; on a CPU the batched version is timed on
# all of torch's threads too, where it may use every core the workers had. The versions take turns,
# one epoch each (lesson 02), so that a burst of other work on the machine slows each a little
# rather than one a lot; each ratio below comes with its interval (the one verdict method).

# %%
from gpufeed.measure.harness import interleave


def on_threads(n, epoch):  # an arm that runs epoch() on n torch threads, then puts the count back
    def arm():
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            epoch()
        finally:
            torch.set_num_threads(before)
    return arm


threads, where = torch.get_num_threads(), "GPU" if S.cuda else "CPU, 1 thread"
arms = {f"per sample, {cores} CPU workers": lambda: workers_epoch(loaders["usual"]),
        f"per-sample loop, {where}": on_threads(1, lambda: loop_epoch(device_loader)),
        f"batched, {where}": on_threads(1, lambda: batched_epoch(device_loader))}
if not S.cuda and threads > 1:  # the batched version on every core, as the workers had
    arms[f"batched, CPU, {threads} threads"] = lambda: batched_epoch(device_loader)
ms = interleave(arms, items=n_images, repeats=config.pick(quick=3, full=5, site=15), warmup=1)
loaders.clear()  # stops the worker processes
for m in ms:
    print(m)

# %%
import matplotlib.pyplot as plt

from gpufeed.course.lesson09 import reading
from gpufeed.course.prose import say
from gpufeed.measure import plotting, results

fig, ax = plotting.bars(ms, baseline=ms[0].name, machine=S.machine,
                        title=f"augmenting one epoch: crop {out_size[0]}x{out_size[1]} + flip + normalise, batch {batch_size}")
plt.show()
batched_m = ms[2]  # section 3 reads its time per batch
say(" ".join([reading.section1(*ms, cores=cores, cuda=S.cuda, threads=threads),
              "" if S.cuda else reading.reference_headline(results.reference("lesson09"))]).strip())

# %% [markdown]
# ## 2. The trap: one random draw for the whole batch
#
# A torchvision transform draws its random parameters once **per call**. Called on one image, that
# is per image. Called on a batch `[N, 3, H, W]`, it is one draw for all `N`: every image flipped,
# or none; every image cropped at the same place. Five calls of `RandomHorizontalFlip` on 8 images:

# %%
from torchvision.transforms import v2

x = data.images[torch.linspace(0, n_images - 1, 8).long()]  # uint8 [8, 3, H, W], spread over the classes
torch.manual_seed(0)
for call in range(5):
    out = v2.RandomHorizontalFlip(p=0.5)(x)
    flipped = sum(torch.equal(o, i.flip(-1)) for o, i in zip(out, x))
    print(f"call {call}: {flipped} of 8 images flipped")

# %% [markdown]
# Per-sample randomness on the device takes two steps: **draw** each sample's parameters (crop box,
# flip, colour factors), then **apply** them to the whole batch at once:
#
# * **crop + resize in one call**: resizing is linear, so each sample's crop-and-resize along one
#   axis is a matrix: output pixel `j` takes a weighted sum of the input pixels in its crop (the
#   weights of torch's antialiased bilinear resize, zero outside the crop). Two batched matrix
#   products (rows, then columns) resize every sample's own box;
# * **flip by mask**: `torch.where(mask, x.flip(-1), x)`; or for free, by reversing the rows of the
#   column matrix of the samples to flip;
# * **colour jitter by per-sample factors**: torchvision's formulas, with a factor tensor
#   `[N, 1, 1, 1]` that broadcasts instead of one number.
#
# The first two are the heart of the lesson, in `gpufeed.data.augment` (`resample_weights`,
# `crop_resize`; the deep dive below prints them). Eight samples' parameters, and the column
# matrices of the first two:

# %%
from gpufeed.data.augment import resample_weights

p = draw_params(8, stored_hw, out_size, brightness=0.4, contrast=0.4, saturation=0.4,
                generator=torch.Generator().manual_seed(1))
print("crop boxes (top, left, height, width):", p.boxes[:4].tolist(), "...")
print("flips:", p.flip.tolist())
print("brightness:", [round(v, 2) for v in p.brightness.tolist()])
wx = resample_weights(p.boxes[:2, 1], p.boxes[:2, 3], stored_hw[1], out_size[1])  # [2, w, W]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.6))
for ax, w, box in zip(axes, wx, p.boxes[:2].tolist()):
    ax.imshow(w, aspect="auto", cmap="viridis")
    ax.grid(False)
    ax.set_title(f"columns {box[1]}..{box[1] + box[3] - 1} -> {out_size[1]}", fontsize=9)
    ax.set_xlabel("input column")
    ax.set_ylabel("output column")
plt.show()

# %% [markdown]
# ### Deeper (optional): the code of `resample_weights` and `crop_resize`
#
# About 60 lines of `gpufeed.data.augment`, printed from the installed package; the lesson goes on
# without them.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
import inspect

from IPython.display import Markdown, display

from gpufeed.data import augment as augment_module

display(Markdown("```python\n" + inspect.getsource(augment_module.resample_weights)
                 + "\n\n" + inspect.getsource(augment_module.crop_resize) + "```"))

# %% [markdown]
# The same 8 images three ways: as stored, through the v2 pipeline called once on the batch, and
# through `gpufeed.data.augment` with per-sample parameters:

# %%
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD


def to_display(images):  # normalised float [N, 3, h, w] -> [N, h, w, 3] in [0, 1]
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (images.cpu() * std + mean).clamp(0, 1).permute(0, 2, 3, 1)


rows = {"stored": x.permute(0, 2, 3, 1),
        "v2, batch": to_display(cpu_transform(out_size, brightness=0.4, contrast=0.4, saturation=0.4)(x)),
        "per sample": to_display(augment(x.to(S.device), p.to(S.device)))}
fig, axes = plt.subplots(3, 8, figsize=(9, 3.8))
for r, (label, images) in enumerate(rows.items()):
    for c in range(8):
        axes[r, c].imshow(images[c])
        axes[r, c].set_xticks([]), axes[r, c].set_yticks([]), axes[r, c].grid(False)
    axes[r, 0].set_ylabel(label, fontsize=8)
plt.show()

# %% [markdown]
# **Correct before fast**: each output of the batched version must equal torchvision's
# `v2.functional` ops applied to that one image with the same parameters (`augment_one`: float
# `resized_crop` with antialiasing, `horizontal_flip`, `adjust_brightness`, `adjust_contrast`,
# `adjust_saturation`, `normalize`). The sums are the same, taken in another order in float32, so we
# allow `TOLERANCE` (normalised units; 1e-4 is under a hundredth of a grey level).

# %%
from gpufeed.data.augment import TOLERANCE

on_device = augment(x.to(S.device), p.to(S.device)).cpu()
reference = torch.stack([augment_one(x[i], p.sample(i)) for i in range(len(x))])  # one image at a time, on the CPU
worst = (on_device - reference).abs().max().item()
assert worst <= TOLERANCE, worst
print(f"batched on {S.device} vs per-sample torchvision: largest difference {worst:.1e} "
      f"(tolerance {TOLERANCE:.0e}), over {on_device.numel():,} values")

# %% [markdown]
# ## 3. Keep `uint8` until the last step, and fuse that step
#
# A `uint8` batch is a quarter of the `float32` one: a quarter of the bytes to collate, pass
# between processes, pin, send to the GPU and keep queued. The usual pipeline converts in the
# workers (`ToDtype`, `Normalize`), so everything after it moves `float32`. Doing **both** keeps
# the random per-sample steps in the CPU workers on `uint8` (`cpu_transform(..., to_float=False)`)
# and converts and normalises the whole batch at the last step, on the device
# (`gpufeed.data.augment.finish`). Same random draws, same result:

# %%
from gpufeed.data.augment import crop_resize, finish

image = data.images[0].clone()
torch.manual_seed(5)
usual = cpu_transform(out_size)(image)
torch.manual_seed(5)
late = cpu_transform(out_size, to_float=False)(image)  # uint8 [3, h, w]
assert torch.allclose(finish(late[None])[0], usual, atol=1e-6)
values = batch_size * 3 * out_size[0] * out_size[1]
print(f"one batch leaves the workers as {values * 4 / 1e6:.1f} MB of float32, or {values / 1e6:.1f} MB of uint8; same values")
loaders.update(usual=workers_loader(per_sample), both=workers_loader(cpu_transform(out_size, to_float=False)))


def both_epoch(loader):
    for images, targets in loader:  # uint8 [64, 3, h, w]
        finish(images.to(S.device, non_blocking=True)), targets.to(S.device, non_blocking=True)


usual_again, both = interleave({f"per sample, {cores} CPU workers": lambda: workers_epoch(loaders["usual"]),
                                f"uint8 from {cores} CPU workers, finish on {S.device.type}":
                                    lambda: both_epoch(loaders["both"])},
                               items=n_images, repeats=config.pick(quick=3, full=5, site=25), warmup=1)
loaders.clear()
say(reading.late_convert(usual_again, both, cuda=S.cuda))

# %% [markdown]
# That last step is a chain of cheap **pointwise** steps: to float, divide by 255, brightness,
# contrast, saturation, normalise. In eager mode each one reads and writes the whole batch in
# `float32`; `torch.compile` generates code for this machine (Triton kernels on a GPU, C++ on a
# CPU, which needs a compiler) that can fuse them into far fewer passes. An eager tail that builds
# its constants on every call (`torch.tensor(mean, device="cuda")`) also makes a blocking copy, a
# sync, per batch; the library's `normalize` builds them once per device, so this one should make
# none. The profiler counts both below rather than assume. The first compile takes tens of
# seconds on a CPU, so quick mode skips it there; a failure is reported, not raised. Section 1's
# own tail (to float and normalise, no jitter) takes the same turns, so that the reading can work
# out the tail's share of a whole batch.

# %%
import time

jitter = {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4}
pb = draw_params(batch_size, stored_hw, out_size, **jitter, generator=torch.Generator().manual_seed(2)).to(S.device)
crops = crop_resize(data.images[:batch_size].to(S.device), pb.boxes, pb.size, flip=pb.flip, out_dtype=torch.uint8)
factors = (pb.brightness, pb.contrast, pb.saturation)
compiled, compile_note = None, ""
if S.quick and not S.cuda:
    compile_note = "skipped: quick mode on a CPU, where the first compile takes tens of seconds; full mode measures it"
else:
    try:
        t0 = time.perf_counter()
        compiled = torch.compile(finish, dynamic=False)
        got = compiled(crops, *factors)  # compiles here, on the first call
        assert torch.allclose(got, finish(crops, *factors), atol=TOLERANCE)
        compile_note = f"compiled in {time.perf_counter() - t0:.0f} s; same output as eager"
    except Exception as e:  # no compiler, an unsupported backend, ...: report and go on
        compiled, compile_note = None, f"torch.compile failed here ({type(e).__name__}: {str(e)[:160]})"
print(compile_note)

# %%
tail_arms = {"tail, eager": lambda: finish(crops, *factors), "tail, eager, no jitter": lambda: finish(crops)}
if compiled is not None:
    tail_arms["tail, torch.compile"] = lambda: compiled(crops, *factors)
tail = interleave({k: on_threads(1, f) for k, f in tail_arms.items()},  # one thread, as in section 1
                  items=batch_size, repeats=config.pick(quick=10, full=30, site=30))
eager, plain, compiled_m = tail + [None] * (3 - len(tail))
fig, ax = plotting.bars(tail, machine=S.machine,
                        title=f"uint8 crops to normalised float32 with jitter, batch {batch_size}, {S.device}")
plt.show()

# %% [markdown]
# How many kernels (with CUDA) or operators (on a CPU) does one call of each tail run, and, on a
# GPU, how many times does the host wait for the device? The profiler counts them. Profiling has
# waits of its own (our `synchronize` at the end, and the profiler's when it stops), so we profile
# an empty call the same way and count only what each tail adds to it:

# %%
from torch.profiler import ProfilerActivity, profile

WAITS = "host waits (cudaDeviceSynchronize, cudaStreamSynchronize, cudaMemcpy)"


def launches(fn):
    """What one call of fn runs, from the profiler: kernels and host waits with CUDA, aten operators on a CPU."""
    fn()  # warm: allocations, lazy initialisation
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if S.cuda else [])) as prof:
        fn()
        if S.cuda:
            torch.cuda.synchronize()
    events = prof.events()
    if S.cuda:  # device-side events: kernels and copies; host-side waits: the syncs and blocking copies
        return {"GPU kernels and copies": sum(e.device_type == torch.autograd.DeviceType.CUDA for e in events),
                WAITS: sum("Synchronize" in e.name or e.name == "cudaMemcpy" for e in events)}
    return {"aten operator calls (nested ones included)": sum(e.name.startswith("aten::") for e in events)}


# %%
idle = launches(lambda: None)  # what profiling itself counts: our sync and the profiler's own
counts = {"eager": launches(lambda: finish(crops, *factors))}
if compiled is not None:
    counts["torch.compile"] = launches(lambda: compiled(crops, *factors))
counts = {name: {k: v - idle[k] for k, v in c.items()} for name, c in counts.items()}
per_batch_s = batched_m.median * batch_size / n_images  # section 1's batched version, per batch of 64
say(reading.tail_reading(eager, compiled_m, counts, per_batch_s=per_batch_s, cuda=S.cuda, waits=WAITS, plain=plain,
                         note=compile_note))

# %% [markdown]
# ## 4. On a GPU
#
# With CUDA, the cells above already ran the batched versions on the GPU. Without it, here is our
# committed reference from a machine that has one, where one is committed; the cell says so where
# none is, and where no figure published elsewhere measures the same thing.

# %%
results.save_lesson("lesson09", [*ms, both, *tail], n_images=n_images, batch_size=batch_size, cores=cores,
                    stored=list(stored_hw), out_size=list(out_size), compile_note=compile_note, counts=counts,
                    in_turns=True)  # each cell's arms timed in turns: a reference reads them as pairs
if S.cuda:
    print(f"Measured above on {S.machine.get('gpu')}.")
else:
    ref = results.gpu_reference("lesson09")  # says where the numbers come from
    if ref is not None:
        ref_ms, doc = ref
        epochs = [m for m in ref_ms if not m.name.startswith("tail")]  # names carry the core count
        fig, ax = plotting.bars(epochs, machine=doc["machine"], title="reference: one epoch")
        plt.show()
        say(reading.reference_reading(ref_ms, doc))

# %% [markdown]
# ## Key takeaways
#
# * A random transform called on a batch draws once for the whole batch. Per-sample randomness on a
#   device means: draw the parameters per sample first, then apply them with batched operations.
# * Crop + resize is linear: per-sample resampling matrices do every sample's own box in two batched
#   matrix products, and fold a flip in for free. Check the batched version against the per-image
#   torchvision ops with the same parameters before timing it.
# * On a GPU, batched augmentation frees the CPU workers and ran many times faster than them in our
#   reference (sections 1 and 4). On a CPU it depends on the machine, and section 1 measured this
#   one, in turns: workers split per-sample work over the cores but hand over float32 batches; the
#   batched version's dense matrices do more arithmetic than a per-image resize. Both at once:
#   random steps in the workers on `uint8`, conversion and normalisation on the device.
# * The front door does both for you: `ImageLoader(path, batch, crop=224, scale=(0.08, 1.0))` draws
#   RandomResizedCrop's boxes per sample on the CPU, then resamples them with these matrices on a
#   GPU and with one `interpolate` per image on a CPU (`gpufeed.data.resized`; its tests check both
#   against torchvision's `resized_crop` on the same boxes).
# * Keep `uint8` until the last step: a quarter of the bytes through every queue and copy. The
#   pointwise tail is what `torch.compile` can fuse, where it works and where the passes over
#   memory, not the arithmetic, are the cost; what that saves of a whole batch is the tail's share
#   of it, which section 3 works out from the timings.
#
# ## Exercises
#
# 1. Add a vertical flip with probability 0.5, folded into the row matrix the way `crop_resize` folds
#    the horizontal flip into the column matrix. Check it against `v2.functional.vertical_flip` with
#    the cell below.
# 2. Time section 1 at batch size 256. Which version gains, and why?
# 3. On a GPU, set `torch.set_float32_matmul_precision("high")` (TF32 matrix products) and re-run the
#    check of section 2. How large is the difference now, and does it matter for training?
#
# A worked solution to each exercise follows the self-check, folded: try first, then unfold it.

# %%
# Self-check for exercise 1: write my_vflip_resize(x, boxes, size, vflip) -> float [N, 3, h, w].
my_vflip_resize = None
if my_vflip_resize is not None:
    from torchvision.transforms.v2 import functional as F

    vflip = torch.rand(8, generator=torch.Generator().manual_seed(3)) < 0.5
    mine = my_vflip_resize(x, p.boxes, p.size, vflip)
    ok = all(torch.allclose(mine[i], F.vertical_flip(r) if vflip[i] else r, atol=1e-3)
             for i, r in enumerate(crop_resize(x, p.boxes, p.size)))
    print("right!" if ok else "not yet: reverse the rows of the row matrix (wy) of the flipped samples")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 1: a vertical flip folded into the row matrix.
# Why it is free: `crop_resize` computes output row i as a weighted sum of input rows, with the
# weights in row i of the row matrix `wy` [N, h, H]. A vertical flip makes output row i what row
# h - 1 - i was: reverse the rows of `wy` for the flipped samples, and the same two matrix
# products make the flipped crops, with no extra pass over the images. The horizontal flip is the
# same move on the column matrix `wx` (`crop_resize(..., flip=)`). A flip by `torch.where(mask,
# out.flip(-2), out)` would also be right, at the cost of one more read and write of the batch.


def my_vflip_resize(x, boxes, size, vflip):
    """Per-sample crop + resize of x [N, C, H, W] to size (h, w); flips the samples where vflip [N]."""
    wy = resample_weights(boxes[:, 0], boxes[:, 2], x.shape[2], size[0])  # [N, h, H]
    wx = resample_weights(boxes[:, 1], boxes[:, 3], x.shape[3], size[1])  # [N, w, W]
    wy = torch.where(vflip[:, None, None], wy.flip(1), wy)  # output row i <- row h - 1 - i
    n, c, height, width = x.shape
    rows = torch.bmm(x.float().reshape(n, c * height, width), wx.transpose(1, 2))  # [N, C H, w]
    return torch.matmul(wy.unsqueeze(1), rows.view(n, c, height, -1))  # [N, C, h, w]


vflip = torch.rand(8, generator=torch.Generator().manual_seed(3)) < 0.5  # the self-check's draw
mine = my_vflip_resize(x, p.boxes, p.size, vflip)
plain = crop_resize(x, p.boxes, p.size)
want = torch.where(vflip[:, None, None, None], plain.flip(-2), plain)  # the flip as a separate pass
print(f"{int(vflip.sum())} of 8 samples flipped; largest difference from crop_resize + vertical_flip: "
      f"{(mine - want).abs().max().item():.1e} grey levels (the self-check allows 1e-3).")


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 2: section 1 at batch size 256.
# Why each might change: the per-sample loop does the same work per image at any batch size. The
# batched version has a cost per *batch* (drawing parameters, building the resampling matrices,
# Python) besides its cost per image (the matrix products, as dense as before), and a larger batch
# spreads the first over more images. The workers build whole batches, so fewer, larger batches
# mean fewer hand-overs, but also fewer batches to share among workers: an epoch of n images has
# n / 256 of them. Time both sizes in turns (the machine's load changes), with section 1's own
# epoch functions and loaders; quick mode has fewer than 256 images.
big, pairs = min(256, n_images), {}
versions = {"workers": (lambda b: workers_loader(per_sample, b), workers_epoch, threads),  # as in section 1
            "loop": (fast_loader, loop_epoch, 1), "batched": (fast_loader, batched_epoch, 1)}
for name, (make, epoch, n) in versions.items():  # each version at both sizes, in turns
    at = {b: make(b) for b in (batch_size, big)}
    pairs[name] = interleave({f"{name}, batch {b}": on_threads(n, lambda ld=ld, ep=epoch: ep(ld)) for b, ld in at.items()},
                             items=n_images, repeats=config.pick(quick=3, full=5, site=7), warmup=1)
    del at  # stops the workers
print(reading.batch_size_reading(pairs, small=batch_size, big=big, batches=-(-n_images // big), cores=cores,
                                 all_images=big < 256, earlier=dict(zip(versions, ms))))  # section 1's, at batch 64


# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]
# Solution to exercise 3: TF32 matrix products.
# Why it can differ: with precision "high", CUDA runs float32 matrix products on tensor cores in
# TF32: each operand is rounded to 10 bits of mantissa (float32 keeps 23), the products summed in
# float32. Our crop + resize is two matrix products, so its weights and pixels keep about three
# significant decimal digits instead of seven; torchvision's per-image reference uses no matrix product.
# Why it does not matter: compare the difference with one grey level, the smallest step of the
# uint8 input, 1 / (255 x std) in normalised units, and with the jitter the augmentation adds on
# purpose. Without a GPU we emulate TF32: a TorchFunctionMode rounds the float32 operands of every
# matrix product to 10 mantissa bits (to nearest) and lets float32 do the rest, as tensor cores do.
from torch.overrides import TorchFunctionMode


def to_tf32(t):  # round float32 to TF32's 10-bit mantissa, to nearest: drop 13 of the 23 bits
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


class TF32Products(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.bmm, torch.matmul, torch.Tensor.__matmul__):
            args = [to_tf32(a) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args]
        return func(*args, **(kwargs or {}))


if S.cuda:
    torch.set_float32_matmul_precision("high")
    tf32 = augment(x.to(S.device), p.to(S.device)).cpu()
    torch.set_float32_matmul_precision("highest")
    has_tf32 = torch.cuda.get_device_capability()[0] >= 8  # Ampere and later
    how = f"on {torch.cuda.get_device_name()} ({'TF32' if has_tf32 else 'before Ampere: no TF32, no change expected'})"
else:
    with TF32Products():
        tf32 = augment(x, p)
    how = "emulated on the CPU (no GPU here)"
worst32 = (tf32 - reference).abs().max().item()
grey = 1 / (255 * max(IMAGENET_STD))  # the smallest step between two grey levels, normalised
moved = (p.brightness - 1).abs().max().item()  # this draw's largest brightness change, on purpose
print(f"TF32 products, {how}: largest difference {worst32:.1e} (float32: {worst:.1e}; the check allows "
      f"{TOLERANCE:.0e}), {worst32 / grey:.2f} of a grey level ({grey:.3f} normalised). "
      + ("The check's tolerance would fail it; " if worst32 > TOLERANCE else "Within the check's tolerance; ")
      + f"training would not notice: the brightness jitter of these samples moves pixels by up to {moved:.0%}.")

# %% [markdown]
# ## Further reading
#
# * [Transforming and augmenting images](https://docs.pytorch.org/vision/stable/transforms.html) (torchvision docs): torchvision's transforms v2 on tensors and batches, the CPU side of this lesson.
# * [DALI documentation](https://docs.nvidia.com/deeplearning/dali/user-guide/docs/index.html) (NVIDIA): augmenting on the GPU inside a data pipeline, the other way to move this work off the CPU.
# * [Performance Tuning Guide](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html) (Szymon Migacz, PyTorch tutorials): fusing pointwise operations and avoiding syncs, the two gains `torch.compile` gives here.
