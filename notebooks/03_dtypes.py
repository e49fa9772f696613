# %% [markdown]
# # 03 · Dtypes and transfer order
#
# **What you will learn:** how many bytes a batch puts on the wire as `uint8`, `float16` and
# `float32`; whether `x.to(dev).half()` beats `x.half().to(dev)`, and by how much over batch and
# image sizes; whether that survives in a real mixed-precision training loop, with the dtype and
# the pinned memory measured apart; and how to move normalisation into the model so the whole
# pipeline can stay `uint8` until the GPU.
#
# **Time:** about 15 minutes (1-2 minutes in quick mode). **Prerequisites:** lesson 00 (pinned
# memory, host-to-device rate) and lesson 02 (honest benchmarking).

# %%
import gpufeed

S = gpufeed.setup("03")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The idea
#
# A decoded image is `uint8`: one byte per channel value. A model wants floats. The conversion has
# to happen somewhere, and *where* decides how many bytes cross the bus and which processor does
# the arithmetic:
#
# ```
# x.half().to(dev):  loader ─uint8─> CPU converts (a few cores, 2 B/value) ──2x bytes──> GPU
# x.to(dev).half():  loader ─uint8───────────────────────────1x bytes──> GPU converts (thousands of cores)
# ```
#
# In the main process, `x.half()` runs on torch's intra-op thread pool (`torch.get_num_threads()`,
# usually every core) for large tensors; inside a DataLoader worker, torch uses one thread. Either
# way the host converts with a handful of cores, the GPU with thousands.
#
# Zuppichini's talk *How to Efficiently Send Images to GPU* (lesson 00's Sources) put it as
# *"uint8 first, convert on the GPU; the bigger the image, the bigger the gain"*. We check that
# claim with numbers.

# %% [markdown]
# ## 2. Bytes on the wire
#
# One batch is `batch x 3 x height x width` values; `float16` doubles the bytes of `uint8`,
# `float32` quadruples them. For the three image sizes of the course:

# %%
import torch

from gpufeed import config

from gpufeed.course import transfer

print(transfer.wire_table())

# %%
big, top = transfer.SIZES[-1], transfer.BATCHES[-1]
u8, f32 = (transfer.batch_bytes(top, big, d) for d in (torch.uint8, torch.float32))
print(f"A batch of {top} images of {transfer.size_name(big)} is {u8 / 1e6:.0f} MB as uint8 and "
      f"{f32 / 1e6:.0f} MB as float32: converting before the copy sends {f32 / u8:.0f}x the bytes.")

# %% [markdown]
# ## 3. By hand: every order gives the same tensor
#
# Before timing anything, check that the variants agree (lesson 02: *assert, then time*). Every
# `uint8` value 0..255 is exact in `float16`, so the order cannot change a single bit. The pinned
# variants use `non_blocking=True`. From pageable memory the host waits while the bytes are staged,
# so the source may be reused at once; from pinned memory the call returns at once and the copy
# reads the buffer *when it runs*, so `non_blocking` has a hazard in each direction: refilling a
# pinned source before its copy has run, and reading a device-to-host result on the CPU before a
# sync (lesson 07). The next cell shows both on the course's simulator of CUDA's ordering rules
# (`gpufeed.simcuda`, lesson 08), which runs on any machine.
#
# Where does `x.to(dev, torch.float16)` convert? In recent PyTorch releases, the CUDA copy kernel
# (`Copy.cu` in ATen) converts on the **CPU** when the host-to-device copy is blocking, and copies
# the `uint8` bytes and converts on the **GPU** when it is `non_blocking` (older releases
# converted on the CPU in both cases). Do not take our word for it: the benchmark below shows
# what your version does.

# %%
from gpufeed.simcuda import simulated_cuda

with simulated_cuda(seed=0, races="record") as sim:  # simulated: CUDA's ordering rules, not its speed
    host = torch.full((4,), 1.0).pin_memory()  # batch 1, in a pinned buffer
    sent = host.to("cuda", non_blocking=True)  # returns at once: the copy is queued
    host.fill_(2.0)  # batch 2 written into the same buffer before that copy ran
    arrived = sent.cpu()  # waits for the GPU: what the copy actually sent
    back = (sent + 10).to("cpu", non_blocking=True)  # device-to-host into pinned memory, queued
    too_early = back.clone()  # read on the CPU before any sync
    torch.cuda.synchronize()
    in_time = back.clone()
    races = len(sim.races)
print(f"host to device, pinned buffer refilled too early: the GPU received {arrived.tolist()}, not [1.0, 1.0, 1.0, 1.0]")
print(f"device to host, read before a sync: {too_early.tolist()}; after torch.cuda.synchronize(): {in_time.tolist()}")
print(f"races the simulator reported: {races}")

# %%
x = transfer.random_batch(4, (640, 480))  # uint8 [4, 3, 480, 640]
expected = x.half()
if not S.cuda:
    print("No CUDA: dev is the CPU, so every variant converts on the CPU and nothing is pinned.")
for v in transfer.order_variants(torch.float16):
    src = x.pin_memory() if (v.pinned and S.cuda) else x
    out = v.fn(src, S.device)
    assert torch.equal(out.cpu(), expected), v.name
    name, where = (v.name, v.where) if S.cuda else (v.name.removeprefix("pinned "), "CPU")
    print(f"{name:45s} converts on the {where:6s} -> {out.dtype}, {out.device}: identical")

# %% [markdown]
# ## 4. The micro-benchmark: time per batch over batch and image sizes
#
# With CUDA, each variant is timed over the course's image sizes and batch sizes 8-64 (the
# harness synchronises the GPU, so the copy and the conversion are inside the timing). Without
# CUDA, `.to("cpu")` does nothing, so both orders are the same code; what a CPU can show is the
# cost the host pays in `x.half().to(dev)` before the copy even starts: the conversion itself,
# next to a plain `uint8` copy of the same batch. The variants of each case are timed in turns
# (a, b, c, a, b, c, ...), so that a burst of other work on the machine slows all of them alike,
# and each comparison below is read sample by sample with its interval (lesson 02).

# %%
batches = config.pick(quick=(4, 8), full=transfer.BATCHES)
repeats = config.pick(quick=3, full=9, site=15)  # rounds of every variant; 5 is the least a verdict reads
if S.cuda:
    variants, baseline = transfer.order_variants(torch.float16), "x.half().to(dev)"
else:
    variants, baseline = transfer.conversion_variants(), "x.clone() (uint8 copy)"
order_ms = transfer.sweep(variants, S.device, transfer.SIZES, batches, repeats=repeats, warmup=1)
fig, axes = transfer.plot_sweep(order_ms, baseline=baseline, machine=S.machine,
                                title="uint8 to float16 and to the device" if S.cuda else "the host's share: converting a uint8 batch")

# %%
from gpufeed.course.lesson03 import reading
from gpufeed.course.prose import say
from gpufeed.measure.verdict import compare

last = transfer.at_largest(order_ms)  # name -> measurement at 1280x960 and the largest batch
where = f"a batch of {max(batches)} at {transfer.size_name(big)}"
if S.cuda:
    say(reading.order_sentence(last["x.half().to(dev)"], last["x.to(dev).half()"], where) + "\n\n"
        + reading.trend_sentence(order_ms, "x.half().to(dev)", "x.to(dev).half()", what="x.to(dev).half()"))
else:
    say(reading.conversion_sentence(last["x.clone() (uint8 copy)"], last["x.half()"], last["x.float()"], where))

# %% [markdown]
# ### The GPU reference
#
# Where there is no GPU, here is the same sweep measured on one when it is committed in `results/`;
# else what the sweep's largest batch costs at a host-to-device rate: our GPU's (the one lessons 00
# and 07 show), or where none is committed, the rates others published. That is arithmetic, bytes
# over bandwidth, not a measurement of the two orders.

# %%
from gpufeed.measure import ceilings, results

ref = None if S.cuda else results.reference("lesson03")
if S.cuda:
    print("Measured above on this machine's GPU.")
elif ref is None:
    ours = ceilings.committed(lambda m: m.name.startswith("H2D") and ceilings.h2d_source(m) == "pinned")
    if ours:  # our GPU's pinned copy rate, as lessons 00 and 07 show it
        top_copy = max(ours.measurements, key=lambda m: m.params["nbytes"])
        print(f"No CUDA here, and no sweep of ours is committed: reading the pinned copy rate of {ours.hardware} instead.")
        rates = [(top_copy.gb_per_s, f"pinned, {ours.hardware}, {ours.source}")]
    else:
        rates = [(f.figure, f.label()) for f in results.no_reference("lesson03") if f.unit == "GB/s" and "pinned" in f.id]
    big = (transfer.BATCHES[-1], transfer.SIZES[-1])  # the sweep's largest batch and image size
    for gb_s, whose in rates:
        ms = {dt: transfer.batch_bytes(*big, dt) / (gb_s * 1e9) * 1e3 for dt in transfer.DTYPES}
        say(f"At {gb_s:.2f} GB/s ({whose}), a batch of {big[0]} {transfer.size_name(big[1])} images "
            f"crosses the bus in {ms[torch.uint8]:.0f} ms as uint8, {ms[torch.float16]:.0f} ms as float16, "
            f"{ms[torch.float32]:.0f} ms as float32: bytes over bandwidth, before any conversion. Whether sending "
            "uint8 and converting on the GPU wins, and by how much, is not yet measured on a GPU by this course.")
else:
    ref_ms, ref_doc = ref
    ref_order = [m for m in ref_ms if "variant" in m.params]
    fig, axes = transfer.plot_sweep(ref_order, baseline="x.half().to(dev)", machine=ref_doc["machine"],
                                    title="reference: uint8 to float16 and to the device")
    top_ref = transfer.at_largest(ref_order)
    say(f"On {ref_doc['machine']['gpu']}: " + reading.order_sentence(
        top_ref["x.half().to(dev)"], top_ref["x.to(dev).half()"], f"{top_ref['x.half().to(dev)'].params['size']}") + "\n\n"
        + reading.trend_sentence(ref_order, "x.half().to(dev)", "x.to(dev).half()", what="x.to(dev).half()"))

# %% [markdown]
# ## 5. In a training loop
#
# A micro-benchmark can exaggerate: in training, the copy overlaps with nothing else only if the
# loop is naive, and the model's compute may dwarf it. So on a GPU we time epochs of a torchvision
# ResNet-18 (random weights: nothing is downloaded) with `torch.autocast` in `float16` and a
# `GradScaler`. Batches are prepared in advance and sent either as `uint8` (converted on the device
# by the model's first layer, section 6) or converted on the host first, into a buffer prepared per
# batch (`float16` or `float32`). On a CPU this section is not timed: nothing crosses a bus, so
# the dtype's effect there is the one conversion section 4 already measured.
#
# As usually written, the two loops differ in two ways at once: a DataLoader with
# `pin_memory=True` hands over a *pinned* `uint8` batch, copied `non_blocking`, while `x.half()`
# makes a fresh *pageable* tensor whose copy holds the host. So we measure all four cells: `uint8`
# or `float16`, each from pinned and from pageable memory, timed in turns. Across a row only the
# dtype changes, down a column only the pinning. Unlike the usual `x.half()`, the `float16` cells
# convert into a buffer prepared per batch, so no fresh allocation is timed: the host's
# conversion at its cheapest.
#
# First, is mixed precision a gain on this GPU? It is timed against float32 in turns, after a
# warm-up, on a real batch: a new model's first steps measure start-up, not arithmetic.

# %%
from gpufeed.course import training
from gpufeed.measure import plotting

# bytes of device memory per input pixel a training step peaks at: measured on a GPU, else the course's
# estimate (a deep dive below); cases that would not fit this GPU's free memory are run smaller or skipped
per_pixel = training.calibrate(S.device) if S.cuda else training.TRAIN_BYTES_PER_PIXEL
timing = dict(device=S.device, repeats=config.pick(quick=3, full=7), warmup=1)  # epochs of 2 batches, in turns
probe = []
if S.cuda:
    tb = config.pick(quick=16, full=64)
    probe = training.train_in_turns({f"amp={a}": dict(batch=tb, size=(224, 224), wire="uint8", amp=a)
                                     for a in (False, True)}, epoch_images=2 * tb, **timing)
    text, use_amp = reading.amp_sentence(*probe, "float16 + GradScaler", f"batch {tb} at 224x224")
    say(text)
else:
    use_amp = False
    say(reading.NO_GPU_LOOP)

# %%
grid_ms = []
if S.cuda:
    size, batch = config.pick(quick=((384, 384), 16), full=((640, 480), 32))
    if not training.fits(batch, size, S.device, per_pixel=per_pixel):
        batch = max(1, batch // 4)
        print(f"the grid runs at batch {batch}: a larger one does not fit in this GPU's free memory")
    cells = {f"{w} on the wire, {'pinned' if p else 'pageable'}": dict(batch=batch, size=size, wire=w, pinned=p, amp=use_amp)
             for p in (True, False) for w in ("uint8", "float16")}
    grid_ms = training.train_in_turns(cells, epoch_images=2 * batch, **timing)
    fig, ax = plotting.bars(grid_ms, baseline=grid_ms[-1].name, machine=S.machine,
                            title=f"ResNet-18 steps, {transfer.size_name(size)} batch {batch} (ratios vs the last)")
    say(reading.grid_sentences(grid_ms))

# %% [markdown]
# ### Over image sizes
#
# Zuppichini's *the bigger the image, the bigger the gain*, in training: each wire at one batch size
# over the image sizes, all from pinned memory where CUDA is, so only the dtype changes. The gain at
# the largest size is then compared with the gain at the smallest, round by round.

# %%
trend_ms, sizes = [], []
if S.cuda:
    sizes, tbatch = config.pick(quick=([(384, 384), (640, 480)], 8), full=(transfer.SIZES, 16))
    wires = config.pick(quick=("uint8", "float16"), full=training.WIRES)
    sizes = [s for s in sizes if training.fits(tbatch, s, S.device, per_pixel=per_pixel)]  # the others: too big
    for size in sizes:  # at each size, the wires in turns
        trend_ms += training.train_in_turns({f"{w} on the wire": dict(batch=tbatch, size=size, wire=w, amp=use_amp)
                                             for w in wires}, epoch_images=2 * tbatch, **timing)
    fig, ax = transfer.plot_by_size(trend_ms, key="wire", machine=S.machine, title=f"ResNet-18, batch {tbatch}")
    say("uint8 on the wire against float16 from the host. "
        + reading.trend_sentence(trend_ms, "float16", "uint8", key="wire", what="uint8"))

# %%
if not S.cuda and ref is not None and any("pinned" in m.params for m in ref[0]):
    ref_grid = [m for m in ref[0] if "pinned" in m.params and m.name.endswith(("pinned", "pageable"))]
    ref_trend = [m for m in ref[0] if "pinned" in m.params and m.name.endswith("on the wire")]
    fig, ax = plotting.bars(ref_grid, baseline=ref_grid[-1].name, machine=ref[1]["machine"],
                            title="reference: ResNet-18 steps (ratios vs the last)")
    say(f"On {ref[1]['machine']['gpu']}, {ref_grid[0].params['size']} batch {ref_grid[0].params['batch']}:\n\n"
        + reading.grid_sentences(ref_grid) + "\n\n"
        + reading.trend_sentence(ref_trend, "float16", "uint8", key="wire", what="uint8"))
elif not S.cuda:
    print("No GPU measurement of ours for the training loop is committed (results/<gpu>/lesson03.json), and we "
          "found no published figure that times this loop: on a GPU, it is not yet measured.")

# %% [markdown]
# ### Deeper (optional): how much memory a training step needs
#
# How the course decides which cases fit in this GPU's memory; the lesson goes on without it.

# %% [markdown] tags=["deeper"]
# A training step's peak grows with the pixels of the batch. On a GPU, `training.calibrate`
# measures it: the peak (`max_memory_allocated`) of a step at batch 4 minus one at batch 2, over
# the two extra images' pixels. Without a GPU the course uses a fixed estimate, built on what the
# cell measures on any machine: the bytes per pixel a step *saves for its backward pass*, the floor
# of that peak.

# %% tags=["deeper", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
saved_pp = training.saved_bytes_per_pixel(S.device)  # float16/bfloat16 autocast, as a GPU step runs
if S.cuda:
    say(f"Measured on this GPU: a training step's peak grows by **{per_pixel:,.0f} bytes per input pixel** per "
        f"image, {per_pixel / saved_pp:.1f}x the {saved_pp:.0f} bytes it saves for backward (the rest: gradients "
        "in flight and cuDNN's workspaces).")
else:
    say(f"A step saves **{saved_pp:.0f} bytes per input pixel** for backward (under autocast, as on a GPU). The course's "
        f"fixed estimate, {per_pixel} bytes, is that with a margin of {per_pixel / saved_pp:.1f}x for the rest of "
        "the peak: gradients in flight, the allocator's rounding, cuDNN's workspaces.")
big_case = (64, (1280, 960))
need = training.train_bytes(*big_case, per_pixel=per_pixel)
say(f"By {per_pixel:,.0f} bytes per pixel, a step on {big_case[0]} images of {transfer.size_name(big_case[1])} "
    f"needs ~{need / 1e9:.0f} GB of device memory; Colab's T4 has 15 GB.")

# %% [markdown]
# ## 6. Normalisation inside the model
#
# If the model's first layer does `(x / 255 - mean) / std`, the loader never has to produce
# floats: it hands over `uint8`, the bytes cross the bus, and the GPU normalises. An exported
# model then carries its own preprocessing, so a serving system cannot forget it. `Normalize` in
# `gpufeed.course.training` is ten lines; we prove it matches normalising on the host.
#
# Watch the scale. The snippet in Zuppichini's talk applies torchvision's `T.Normalize(mean, std)` with
# ImageNet's statistics (0.485, 0.229, ...) to images still in 0..255: that is a bug, not a
# shortcut. Those statistics are for values in [0, 1], so the inputs are on a scale 255x too large,
# and the mean is subtracted at the wrong scale: a white pixel becomes (255 - 0.485) / 0.229 ≈
# 1,111 instead of (1 - 0.485) / 0.229 ≈ 2.25, about 494x too large (a black pixel, -2.12, happens
# to come out right). Divide by 255 first (`ToDtype(float32, scale=True)`), or do as `Normalize`
# here does, `(x / 255 - mean) / std`.

# %%
from torch import nn
from torchvision.models import resnet18

from gpufeed.course.training import Normalize
from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize  # the library's one normalise

torch.manual_seed(0)
net = resnet18(weights=None, num_classes=10).eval()
model = nn.Sequential(Normalize(IMAGENET_MEAN, IMAGENET_STD), net).eval()
xb = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
with torch.no_grad():
    inside = model(xb)  # uint8 in
    outside = net(normalize(xb, torch.float32, IMAGENET_MEAN, IMAGENET_STD))  # float32 in
torch.testing.assert_close(inside, outside)
print(f"Normalize inside the model matches normalising on the host: max difference "
      f"{(inside - outside).abs().max().item():.1e} over logits of size {(outside.abs().max().item()):.2f}.")

# %% [markdown]
# Exporting it with `torch.onnx` keeps the normalisation in the graph. This needs the `onnx` and
# `onnxscript` packages (`pip install onnx onnxscript`); without them the cell says so.

# %%
import importlib.util
import tempfile
from pathlib import Path

if importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxscript") is None:
    print("onnx/onnxscript are not installed, so the export is skipped: `pip install onnx onnxscript` to try it.")
else:
    import onnx

    path = Path(tempfile.mkdtemp()) / "resnet18_uint8.onnx"
    try:
        torch.onnx.export(model, (xb,), str(path), dynamo=True)
        graph = onnx.load(str(path)).graph
        print(f"exported {path.stat().st_size / 1e6:.1f} MB; input {graph.input[0].name} is "
              f"{onnx.TensorProto.DataType.Name(graph.input[0].type.tensor_type.elem_type)}; "
              f"first ops: {[n.op_type for n in graph.node[:4]]}")
    except Exception as e:  # exporter versions differ; the lesson does not depend on it
        print(f"the ONNX export failed on this torch/onnx combination: {type(e).__name__}: {str(e)[:200]}")

# %% [markdown]
# ## 7. Saved
#
# The measurements go to this machine's results folder; a GPU run of ours, committed with the
# course, is the reference that CPU-only learners see above.

# %%
saved = results.save_lesson("lesson03", [*order_ms, *grid_ms, *trend_ms, *probe], amp=use_amp,
                            steps_per_epoch=2, per_pixel=per_pixel, saved_per_pixel=saved_pp)

# %% [markdown]
# ## Key takeaways
#
# * Send `uint8` and convert on the device: `float16` doubles and `float32` quadruples the bytes
#   on the wire, and the host's conversion runs on the CPU's few cores before the copy can start.
# * `x.to(dev, dtype)` is not a shortcut for `x.to(dev).to(dtype)`: a blocking copy converts on
#   the CPU first. Send `uint8` explicitly, then convert.
# * Put `Normalize` in the model (`nn.Sequential(Normalize(...), model)`): the pipeline stays
#   `uint8` up to the GPU, and exports carry their preprocessing.
# * Whether mixed precision pays is measured, not assumed: section 5 times it against float32, in
#   turns and after a warm-up, before the loops use it.
#
# ## Exercises
#
# 1. How many MB does a batch of 32 images of 640x480 put on the wire as `float16`? Work it out,
#    then check with the cell below.
# 2. Add `torch.bfloat16` to the micro-benchmark (`transfer.order_variants(torch.bfloat16)`): does
#    the order matter as much as for `float16`?
# 3. In section 5's loop over image sizes, send `float32` instead of `float16` from the host
#    (`wires=("uint8", "float32")`). Does uint8's lead grow with the image size? (Without a GPU,
#    read section 4's `x.float()` against `x.half()` instead: the host's share.)
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 1: your answer in MB (10^6 bytes).
my_mb = None
answer = transfer.batch_bytes(32, (640, 480), torch.float16) / 1e6
if my_mb is not None:
    print("right!" if abs(my_mb - answer) < 0.5 else "not quite: batch x 3 channels x height x width x 2 bytes")


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: a batch of 32 images of 640x480 as float16
# Why: count values, then bytes. Each image has 3 channels of 480 rows of 640 values, and float16
# stores each value in 2 bytes: 32 x 3 x 480 x 640 x 2 = 58,982,400 bytes, about 59 MB. The same
# batch is 29.5 MB as uint8 (1 byte) and 118 MB as float32 (4 bytes): the dtype you send decides
# the bytes on the wire, before any question of speed.
my_mb = 32 * 3 * 480 * 640 * 2 / 1e6
print("self-check:", "right!" if abs(my_mb - answer) < 0.5 else "not quite")
say(f"**{my_mb:.1f} MB** as float16; {my_mb / 2:.1f} MB as uint8, {my_mb * 2:.1f} MB as float32.")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: the order with bfloat16
# Why: bfloat16 also stores a value in 2 bytes, so converting on the host sends exactly as many bytes
# as float16 does: the order saves the same half of the wire. (uint8 values are exact in bfloat16
# too: 8 significant bits, 7 stored and 1 implied, hold every integer to 256.) What can differ is the conversion's own cost, on the
# host or on the GPU. So on a GPU, time both orders for both dtypes in turns and compare the two
# gains round by round; on a CPU there is no wire, and what can be measured is the host's conversion
# to each dtype, beside the plain copy, which also re-asks section 4's question (x.half() against
# the copy): the sentence says whether the two answers agree.
bf_size, bf_batch = transfer.SIZES[-1], max(batches)
small = transfer.random_batch(2, (64, 48))
assert torch.equal(small.bfloat16().float(), small.float())  # exact, so the order cannot change the result
case = f"{transfer.size_name(bf_size)}, batch {bf_batch}"
if S.cuda:
    ms2 = transfer.sweep([*transfer.order_variants(torch.float16)[:2], *transfer.order_variants(torch.bfloat16)[:2]],
                         S.device, [bf_size], [bf_batch], repeats=repeats, warmup=1)
    say(reading.order_gain_sentence({"float16": (ms2[0], ms2[1]), "bfloat16": (ms2[2], ms2[3])}, case))
else:
    copy_v, half_v = transfer.conversion_variants()[:2]
    copy2, half2, bf = transfer.sweep([copy_v, half_v, transfer.Variant("x.bfloat16()", lambda x, dev: x.bfloat16())],
                                      S.device, [bf_size], [bf_batch], repeats=repeats, warmup=1)
    earlier = compare(last["x.half()"], last["x.clone() (uint8 copy)"], paired=True)  # section 4's answer
    say(reading.bfloat16_sentence(copy2, half2, bf, earlier, case))

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: float32 instead of float16 from the host, over image sizes
# Why: float32 sends 4 bytes per value, twice float16 and four times uint8, and the host writes all
# of them before the copy starts. Both costs grow in proportion to the pixels; whether uint8's lead
# widens with the size depends on how fast the GPU's step grows with them, which is what to
# measure. Read it as a trend over sizes at one batch, the gain at the largest size against the
# gain at the smallest, not as one ratio; the two wires of each size are timed in turns. On a CPU
# nothing crosses a bus: what is left is the host's conversion, which section 4 timed for x.float()
# and x.half() at every size, in turns: this cell reads those.
if S.cuda:
    runs3 = [m for m in trend_ms if m.params["wire"] in ("uint8", "float32")]
    if not any(m.params["wire"] == "float32" for m in runs3):  # full mode ran float32 in section 5
        runs3 = [m for size in sizes for m in training.train_in_turns(
            {f"{w} on the wire": dict(batch=tbatch, size=size, wire=w, amp=use_amp) for w in ("uint8", "float32")},
            epoch_images=2 * tbatch, **timing)]
    say("uint8 on the wire against float32 from the host. "
        + reading.trend_sentence(runs3, "float32", "uint8", key="wire", what="uint8"))
else:
    say(reading.float_by_size(order_ms))
ref_f32 = [m for m in ref[0] if m.params.get("wire") in ("uint8", "float32") and m.name.endswith("on the wire")
           and "pinned" in m.params] if ref is not None else []
if any(m.params["wire"] == "float32" for m in ref_f32):
    say(f"On {ref[1]['machine']['gpu']} (committed reference), uint8 against float32. "
        + reading.trend_sentence(ref_f32, "float32", "uint8", key="wire", what="uint8"))
elif not S.cuda:
    print("No GPU reference with float32 on the wire is committed: on a GPU this cell times section 5's sizes.")

# %% [markdown]
# ## Further reading
#
# * [`aten/src/ATen/native/cuda/Copy.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/Copy.cu) (PyTorch source): where `.to(device, dtype)` converts: on the CPU for a blocking copy, on the GPU with `non_blocking=True` (its `copy_kernel_cuda`).
# * [A guide on good usage of `non_blocking` and `pin_memory()` in PyTorch](https://docs.pytorch.org/tutorials/intermediate/pinmem_nonblock.html) (Vincent Moens, PyTorch tutorials): pinned memory and `non_blocking` in both directions, and when `pin_memory()` costs more than it saves.
# * [How to Optimize Data Transfers in CUDA C/C++](https://developer.nvidia.com/blog/how-optimize-data-transfers-cuda-cc/) (NVIDIA Technical Blog): bytes over bandwidth: why a `uint8` batch crosses the bus in a quarter of a `float32` one's time.
# * [CUDA semantics](https://docs.pytorch.org/docs/stable/notes/cuda.html) (PyTorch docs): asynchronous execution and streams: why a `non_blocking` copy returns before it is done.
