# %% [markdown]
# # 03 · Dtypes and transfer order
#
# **What you will learn:** how many bytes a batch puts on the wire as `uint8`, `float16` and
# `float32`; why `x.to(dev).half()` beats `x.half().to(dev)`, and by how much over batch and image
# sizes; whether that survives in a real mixed-precision training loop; and how to move
# normalisation into the model so the whole pipeline can stay `uint8` until the GPU.
#
# **Time:** about 15 minutes (1-2 minutes in quick mode). **Prerequisites:** lesson 00 (pinned
# memory, host-to-device rate) and lesson 02 (honest benchmarking).

# %%
import gpufeed

S = gpufeed.setup()  # S.device, S.quick, S.machine

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
# The talk this course grew from put it as *"uint8 first, convert on the GPU; the bigger the
# image, the bigger the gain"*. We check that claim with numbers.

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
# (`gpufeed.course.simcuda`, lesson 08), which runs on any machine.
#
# Where does `x.to(dev, torch.float16)` convert? In recent PyTorch releases, the CUDA copy kernel
# (`Copy.cu` in ATen) converts on the **CPU** when the host-to-device copy is blocking, and copies
# the `uint8` bytes and converts on the **GPU** when it is `non_blocking` (older releases
# converted on the CPU in both cases). Do not take our word for it: the benchmark below shows
# what your version does.

# %%
from gpufeed.course.simcuda import simulated_cuda

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
# next to a plain `uint8` copy of the same batch.

# %%
batches = config.pick(quick=(4, 8), full=transfer.BATCHES)
repeats, warmup = config.pick(quick=(3, 1), full=(10, 2))
if S.cuda:
    variants, baseline = transfer.order_variants(torch.float16), "x.half().to(dev)"
else:
    variants, baseline = transfer.conversion_variants(), "x.clone() (uint8 copy)"
order_ms = transfer.sweep(variants, S.device, transfer.SIZES, batches, repeats=repeats, warmup=warmup)
fig, axes = transfer.plot_sweep(order_ms, baseline=baseline, machine=S.machine,
                                title="uint8 to float16 and to the device" if S.cuda else "the host's share: converting a uint8 batch")

# %%
last = transfer.at_largest(order_ms)  # name -> measurement at 1280x960 and the largest batch
where = f"a batch of {max(batches)} at {transfer.size_name(big)}"
from gpufeed.course.prose import say

if S.cuda:
    slow, fast = last["x.half().to(dev)"], last["x.to(dev).half()"]
    say(f"For {where}, x.to(dev).half() takes {fast.median * 1e3:.2f} ms, x.half().to(dev) "
        f"{slow.median * 1e3:.2f} ms: sending uint8 is **{slow.median / fast.median:.1f}x** faster. By image size, "
        f"at the largest batch: {transfer.read_trend(transfer.gains_by_size(order_ms, 'x.half().to(dev)', 'x.to(dev).half()'))}")
else:
    copy, half, flt = last["x.clone() (uint8 copy)"], last["x.half()"], last["x.float()"]
    say(f"On this CPU, x.half() on {where} takes {half.median * 1e3:.1f} ms, **{half.median / copy.median:.1f}x** "
        f"a plain uint8 copy ({copy.median * 1e3:.1f} ms): time the host spends before x.half().to(dev) can start "
        "a copy that is then twice as large. "
        f"x.float() takes {flt.median * 1e3:.1f} ms ({flt.median / half.median:.2f}x x.half()) and writes 4 bytes per "
        "value instead of 2: the host's cost and the bytes to send both grow with the dtype.")

# %% [markdown]
# ### The GPU reference
#
# Where there is no GPU, here is the same sweep measured on one when it is committed in `results/`;
# else the host-to-device rates others published, and what the sweep's largest batch costs at them.

# %%
from gpufeed.measure import results

ref = None if S.cuda else results.reference("lesson03")
if S.cuda:
    print("Measured above on this machine's GPU.")
elif ref is None:
    theirs = results.no_reference("lesson03")  # host-to-device rates others published
    big = (transfer.BATCHES[-1], transfer.SIZES[-1])  # the sweep's largest batch and image size
    for f in (f for f in theirs if f.unit == "GB/s" and "pinned" in f.id):
        ms = {dt: transfer.batch_bytes(*big, dt) / (f.figure * 1e9) * 1e3 for dt in transfer.DTYPES}
        say(f"At {f.figure:.2f} GB/s ({f.label()}), a batch of {big[0]} {transfer.size_name(big[1])} images "
            f"crosses the bus in {ms[torch.uint8]:.0f} ms as uint8, {ms[torch.float16]:.0f} ms as float16, "
            f"{ms[torch.float32]:.0f} ms as float32: bytes over bandwidth, before any conversion.")
else:
    ref_ms, ref_doc = ref
    ref_order = [m for m in ref_ms if "variant" in m.params]
    fig, axes = transfer.plot_sweep(ref_order, baseline="x.half().to(dev)", machine=ref_doc["machine"],
                                    title="reference: uint8 to float16 and to the device")
    top_ref = transfer.at_largest(ref_order)
    slow, fast = top_ref["x.half().to(dev)"], top_ref["x.to(dev).half()"]
    say(f"On {ref_doc['machine']['gpu']}, {fast.params['size']} batch {fast.params['batch']}: sending uint8 "
        f"and converting on the GPU is **{slow.median / fast.median:.1f}x** faster than converting on the host. "
        "The talk's *the bigger the image, the bigger the gain*, read over the sizes at the largest batch: "
        + transfer.read_trend(transfer.gains_by_size(ref_order, "x.half().to(dev)", "x.to(dev).half()")))

# %% [markdown]
# ## 5. In a training loop
#
# A micro-benchmark can exaggerate: in training, the copy overlaps with nothing else only if the
# loop is naive, and the model's compute may dwarf it. So we time whole epochs of a torchvision
# ResNet-18 (random weights: nothing is downloaded) in mixed precision: `torch.autocast` with
# `float16` and a `GradScaler` on CUDA, `bfloat16` autocast on a CPU. Batches are prepared in
# advance (pinned where CUDA exists) and sent either as `uint8` (converted on the device by the
# model's first layer, section 6) or converted on the host first (`float16` or `float32`).
#
# This compares the two loops as they are usually written, not like for like: the `uint8` batch
# is pinned and copied `non_blocking` (what a DataLoader with `pin_memory=True` hands over), while
# `x.half()` makes a fresh pageable tensor whose copy is synchronous. So on a GPU the float wires
# pay for 2-4x the bytes *and* for a pageable copy; lesson 00 measures pinned vs pageable alone.
#
# First, is mixed precision even a good idea on this machine? GPUs have Tensor Cores for it; many
# CPUs have no native `bfloat16` arithmetic, and then autocast is *slower*.

# %%
from gpufeed.course import training

# On a big GPU a tiny probe only measures kernel launches (the GPU finishes each kernel before the
# CPU launches the next), which autocast does not speed up; full mode on CUDA probes a real batch.
tiny, tb = config.pick(quick=((32, 32), 2), full=((224, 224), 64) if S.cuda else ((128, 128), 8))
probe = {amp: training.train_epoch(tb, tiny, "uint8", S.device, epoch_images=tb, amp=amp, name=f"probe, amp={amp}",
                                   repeats=config.pick(quick=1, full=3 if S.cuda else 1)) for amp in (False, True)}
speedup = probe[False].median / probe[True].median
kind = "float16 + GradScaler" if S.cuda else "bfloat16"
say(f"{kind} autocast: {probe[True].median * 1e3:.0f} ms per step vs {probe[False].median * 1e3:.0f} ms in float32: "
    + (f"**{speedup:.2f}x faster**" if speedup > 1 else f"**{1 / speedup:.1f}x slower**")
    + f" on this machine (batch {tb} at {transfer.size_name(tiny)}"
    + ("; a probe this small is launch-bound on a GPU, so autocast cannot show its gain)." if S.cuda and tiny[0] < 128
       else ")."))
use_amp = S.cuda or speedup > 1
if not use_amp:
    print("Mixed precision is slower on this CPU, so the sweep below runs in float32. (CPUs without native bfloat16 "
          "instructions, such as AVX512-BF16 or AMX, pay for converting back and forth.)")

# %%
if S.cuda:
    sizes, tbatches = config.pick(quick=([(384, 384)], (8, 16)), full=(transfer.SIZES, transfer.BATCHES))
else:
    sizes, tbatches = config.pick(quick=([(32, 32)], (2, 4)), full=([(128, 128), (224, 224)], (8, 16)))
wires = config.pick(quick=("uint8", "float16"), full=training.WIRES)
epoch_images = config.pick(quick=4, full=256 if S.cuda else 16)
# Will a case fit in this GPU's free memory (torch.cuda.mem_get_info)? By the course's fixed estimate
# (training.TRAIN_BYTES_PER_PIXEL, with a margin) 1280x960 at batch 64 needs ~48 GB; Colab's T4 has
# 15 GB. On a GPU, training.calibrate measures the bytes per input pixel with max_memory_allocated
# instead. Cases that do not fit are skipped, and said so.
per_pixel = training.calibrate(S.device) if S.cuda else training.TRAIN_BYTES_PER_PIXEL
if S.cuda:
    print(f"measured on this GPU: {per_pixel:.0f} bytes of device memory per input pixel per image "
          f"(the fixed estimate is {training.TRAIN_BYTES_PER_PIXEL})")
cases = [(size, b) for size in sizes for b in tbatches]
skipped = [(size, b) for size, b in cases if not training.fits(b, size, S.device, per_pixel=per_pixel)]
train_ms = [training.train_epoch(b, size, wire, S.device, epoch_images, amp=use_amp,
                                 repeats=config.pick(quick=1, full=3 if S.cuda else 2))
            for size, b in cases if (size, b) not in skipped for wire in wires]
if skipped:
    print("skipped, too big for this GPU's free memory: "
          + ", ".join(f"{transfer.size_name(size)} batch {b}" for size, b in skipped))
fig, axes = transfer.plot_sweep(train_ms, baseline="float16 on the wire", machine=S.machine, ylabel="time per epoch (s)",
                                scale=1.0, title=f"ResNet-18, {epoch_images} images per epoch")

# %%
top_train = transfer.at_largest(train_ms, key="wire")
gain = top_train["float16"].median / top_train["uint8"].median
u8 = top_train["uint8"]
say(f"{u8.params['size']}, batch {u8.params['batch']}: an epoch takes {u8.median:.2f} s with "
    f"uint8 on the wire and {top_train['float16'].median:.2f} s converting to float16 on the host (**{gain:.2f}x**)."
    + ("" if S.cuda else " Without a GPU both paths convert on the same CPU and nothing crosses a bus, so any "
       "difference here is noise and the cost of one extra conversion; the reference below shows a GPU."))

# %%
if not S.cuda and ref is not None:
    ref_train = [m for m in ref[0] if m.name.endswith("on the wire")]
    fig, axes = transfer.plot_sweep(ref_train, baseline="float16 on the wire", machine=ref[1]["machine"],
                                    ylabel="time per epoch (s)", scale=1.0, title="reference: ResNet-18 epochs")
    pair = transfer.at_largest(ref_train, key="wire")
    print(f"On {ref[1]['machine']['gpu']}, {pair['uint8'].params['size']} batch {pair['uint8'].params['batch']}: uint8 "
          f"on the wire makes an epoch {pair['float16'].median / pair['uint8'].median:.2f}x faster than float16 from the host.")
elif not S.cuda:
    print("No CUDA here, and no GPU measurement of ours for the training loop is committed "
          "(results/<gpu>/lesson03.json); no figure published elsewhere times this loop.")

# %% [markdown]
# ## 6. Normalisation inside the model
#
# If the model's first layer does `(x / 255 - mean) / std`, the loader never has to produce
# floats: it hands over `uint8`, the bytes cross the bus, and the GPU normalises. An exported
# model then carries its own preprocessing, so a serving system cannot forget it. `Normalize` in
# `gpufeed.course.training` is ten lines; we prove it matches normalising on the host.
#
# Watch the scale. The talk's snippet applies torchvision's `T.Normalize(mean, std)` with
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
# The measurements go to this machine's results folder; on a GPU run with
# `GPUFEED_RESULTS=results` they become the reference that CPU-only learners see above.

# %%
saved = results.save_lesson("lesson03", [*order_ms, *train_ms, *probe.values()], amp=use_amp,
                            epoch_images=epoch_images)
print(f"saved to {saved}")

# %% [markdown]
# ## Key takeaways
#
# * Send `uint8` and convert on the device: `float16` doubles and `float32` quadruples the bytes
#   on the wire, and the host's conversion runs on the CPU's few cores before the copy can start.
# * `x.to(dev, dtype)` is not a shortcut for `x.to(dev).to(dtype)`: a blocking copy converts on
#   the CPU first. Send `uint8` explicitly, then convert.
# * Put `Normalize` in the model (`nn.Sequential(Normalize(...), model)`): the pipeline stays
#   `uint8` up to the GPU, and exports carry their preprocessing.
# * Mixed precision pays on GPUs; on a CPU without native `bfloat16` it can be slower. Measure.
#
# ## Exercises
#
# 1. How many MB does a batch of 32 images of 640x480 put on the wire as `float16`? Work it out,
#    then check with the cell below.
# 2. Add `torch.bfloat16` to the micro-benchmark (`transfer.order_variants(torch.bfloat16)`): does
#    the order matter as much as for `float16`?
# 3. In section 5, send `float32` instead of `float16` from the host (`wires=("uint8", "float32")`).
#    By how much does the gap grow with the image size?
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
# host or on the GPU. So on a GPU, time both orders for both dtypes and compare the two gains;
# on a CPU there is no wire, and what can be measured is the host's conversion to each dtype.
bf_size, bf_batch = transfer.SIZES[-1], max(batches)
small = transfer.random_batch(2, (64, 48))
assert torch.equal(small.bfloat16().float(), small.float())  # exact, so the order cannot change the result
if S.cuda:
    gains = {}
    for d in (torch.float16, torch.bfloat16):
        slow, fast = transfer.sweep(transfer.order_variants(d)[:2], S.device, [bf_size], [bf_batch], repeats, warmup)
        gains[d] = slow.median / fast.median
        print(f"{slow.name}: {slow.median * 1e3:.2f} ms, {fast.name}: {fast.median * 1e3:.2f} ms ({gains[d]:.2f}x)")
    say(f"Sending uint8 and converting on the GPU gains **{gains[torch.bfloat16]:.2f}x** for bfloat16 and "
        f"{gains[torch.float16]:.2f}x for float16 ({transfer.size_name(bf_size)}, batch {bf_batch}).")
else:
    host = [transfer.Variant(f"x.{n}()", lambda x, dev, d=d: x.to(d)) for n, d in (("half", torch.float16), ("bfloat16", torch.bfloat16))]
    half, bf = transfer.sweep(host, S.device, [bf_size], [bf_batch], repeats, warmup)
    say(f"No GPU here, so no wire: on the host, x.bfloat16() takes {bf.median * 1e3:.1f} ms and x.half() "
        f"{half.median * 1e3:.1f} ms ({transfer.size_name(bf_size)}, batch {bf_batch}), **{bf.median / half.median:.2f}x**. "
        "With a GPU both send 2 bytes per value, so the order saves the same bytes; this cell then times both orders.")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: float32 instead of float16 from the host, over image sizes
# Why: float32 sends 4 bytes per value, twice float16 and four times uint8, and the host writes all
# of them before the copy starts. Both costs grow in proportion to the pixels; whether the gap
# widens with the size depends on how fast the GPU's step grows with them, which is what to
# measure. Read it as a trend over sizes at one batch (gains_by_size), not as one ratio. On a CPU nothing crosses a bus: the gap is
# only the host's conversion, which the model's own float32 work dwarfs.
sizes3 = config.pick(quick=[(32, 32), (64, 64)], full=sizes)
batch3 = config.pick(quick=2, full=max(tbatches))
sizes3 = [size for size in sizes3 if training.fits(batch3, size, S.device)]  # as section 5: what this GPU holds
runs3 = [training.train_epoch(batch3, size, wire, S.device, epoch_images=batch3, amp=use_amp,
                              repeats=config.pick(quick=1, full=3)) for size in sizes3 for wire in ("uint8", "float32")]
gap = transfer.gains_by_size(runs3, "float32", "uint8", key="wire")
print("float32 from the host vs uint8: " + transfer.read_trend(gap))
if not S.cuda:
    say(f"Without a GPU, float32 from the host takes {min(gap.values()):.2f}x to {max(gap.values()):.2f}x the time "
        "of uint8. No bytes cross a bus here: the only extra work is one conversion, small next to a ResNet-18 "
        "step, so these ratios are mostly this machine's noise (rerun the cell and they move). The gap that grows "
        "with the image size is a GPU's.")
if ref is not None and any(m.params.get("wire") == "float32" for m in ref[0]):
    print(f"On {ref[1]['machine']['gpu']} (committed reference): float32 vs uint8: "
          + transfer.read_trend(transfer.gains_by_size(ref_train, "float32", "uint8", key="wire")))
elif not S.cuda:
    print("No GPU reference with float32 on the wire is committed: on a GPU this cell times the sizes of section 5.")

# %% [markdown]
# ## Further reading
#
# * [`aten/src/ATen/native/cuda/Copy.cu`](https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/Copy.cu) (PyTorch source): where `.to(device, dtype)` converts: on the CPU for a blocking copy, on the GPU with `non_blocking=True` (its `copy_kernel_cuda`).
# * [A guide on good usage of `non_blocking` and `pin_memory()` in PyTorch](https://docs.pytorch.org/tutorials/intermediate/pinmem_nonblock.html) (Vincent Moens, PyTorch tutorials): pinned memory and `non_blocking` in both directions, and when `pin_memory()` costs more than it saves.
# * [How to Optimize Data Transfers in CUDA C/C++](https://developer.nvidia.com/blog/how-optimize-data-transfers-cuda-cc/) (NVIDIA Technical Blog): bytes over bandwidth: why a `uint8` batch crosses the bus in a quarter of a `float32` one's time.
# * [CUDA semantics](https://docs.pytorch.org/docs/stable/notes/cuda.html) (PyTorch docs): asynchronous execution and streams: why a `non_blocking` copy returns before it is done.
