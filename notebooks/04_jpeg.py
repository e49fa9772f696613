# %% [markdown]
# # 04 · JPEG quality and decoding
#
# **What you will learn:** what JPEG's quality setting trades (file size against error, measured
# as PSNR and SSIM, and against decode time); whether your Pillow decodes with libjpeg-turbo; how
# Pillow, torchvision and TorchCodec compare per core, where the time between them goes, what
# decoding straight to a smaller size saves, and what a GPU's batched decoder adds; whether you
# can *see* the difference at a quality that saves most of the bytes; and what the
# storage format does to a DataLoader's throughput.
#
# **Time:** about 15 minutes (1-2 minutes in quick mode). **Prerequisites:** lesson 00 (decode
# rate per core), lesson 03 (`uint8` until the GPU).

# %%
import gpufeed

S = gpufeed.setup("04")  # S.device, S.mode, S.machine; shows this lesson's evidence box

# %% [markdown]
# ## 1. The idea
#
# A JPEG encoder converts RGB to YCbCr, halves the colour resolution in both directions ("4:2:0"
# chroma subsampling; Pillow does this at *every* quality, 95 and 100 included, unless you pass
# `subsampling=0` for "4:4:4"), cuts each channel into 8x8 blocks, takes their discrete cosine transform
# and divides the 64 coefficients by a *quantisation table*, rounding to integers. The quality
# setting scales that table: low quality divides by large numbers, so most coefficients round to
# zero and cost almost no bits. The decoder undoes it: entropy decoding (work grows with the
# number of non-zero coefficients), dequantisation, inverse DCT and colour conversion (work fixed
# per pixel). So a lower quality means fewer bytes to store and read, a larger error, and maybe
# a faster decode (less entropy decoding, the same per-pixel work). How much of each is what we
# measure.

# %% [markdown]
# ## 2. Measuring the error: PSNR and SSIM
#
# * **PSNR** = `10 log10(255² / MSE)` in dB: the mean squared error on a log scale. 40 dB and
#   above is usually invisible; below 30 dB artefacts show.
# * **SSIM** (Wang et al., 2004) compares local means, contrasts and correlations in an 11x11
#   Gaussian window (sigma 1.5). 1 means identical. `gpufeed.course.lesson04.quality.ssim` computes it **per RGB
#   channel and averages**; `luma=True` compares the brightness channel only.
#
# Both are plain torch (see `src/gpufeed/course/lesson04/quality.py`); the tests check them against closed forms
# and a window-by-window numpy version. A check you can do by hand: Gaussian noise of standard
# deviation 5 grey levels has an MSE of about 25, so PSNR = 10 log10(255² / 25) = 34.2 dB.

# %%
import math

import torch

from gpufeed import config

from gpufeed.data import jpeg

from gpufeed.course.lesson04 import quality
from gpufeed.measure.synth import SynthSpec, encode_jpeg, render

img = render(SynthSpec(n=1, width=384, height=384), 0)  # the uncompressed original (PIL)
x = quality.to_tensor(img)  # uint8 [3, 384, 384]
noisy = (x.float() + 5 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).round().clamp(0, 255).to(torch.uint8)
print(f"identical:    PSNR {quality.psnr(x, x)} dB, SSIM {quality.ssim(x, x):.4f}")
print(f"noise, sd 5:  PSNR {quality.psnr(x, noisy):.2f} dB (formula: {10 * math.log10(255**2 / 25):.2f}), SSIM {quality.ssim(x, noisy):.4f}")
q50 = jpeg.decode_pil(encode_jpeg(img, 50))  # uint8 [3, 384, 384] after a round trip through JPEG
print(f"JPEG q50:     PSNR {quality.psnr(x, q50):.2f} dB, SSIM {quality.ssim(x, q50):.4f}")

# %% [markdown]
# ## 3. The quality sweep
#
# Each generated image (the original, before any JPEG) is encoded at qualities from 10 to 100 with
# Pillow; we record the mean file size, PSNR and SSIM against the original, and the time to decode
# one image with `gpufeed.data.jpeg.decode_jpeg` (TorchCodec where installed, else torchvision).
# The decodes of all the qualities are timed in turns (q10, q30, ..., then again), so that two
# qualities compare round by round. At the largest size a second series keeps full colour
# resolution (`subsampling="4:4:4"`), to show what Pillow's default 4:2:0 costs at the top.
#
# Mind the pictures: the course's images are crops of seven photos 300 to 1411 pixels wide,
# enlarged to the size asked (`assets/photos`). An enlarged crop is smoother than a camera's
# photo of the same size, so its JPEG is smaller at the same quality: read the sizes below as
# this dataset's, not a camera's.

# %%
from gpufeed.course import transfer

sizes = config.pick(quick=[(384, 384)], full=list(transfer.SIZES))
n_images = config.pick(quick=2, full=6)
qualities = config.pick(quick=[10, 30, 50, 75, 90, 100], full=[10, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90, 95, 100])
rounds = config.pick(quick=3, full=7, site=9)  # decodes in turns; 5 is the least a verdict reads
sweep = []
for w, h in sizes:
    spec = SynthSpec(n=n_images, width=w, height=h)
    originals = [render(spec, i) for i in range(n_images)]
    sweep += quality.quality_sweep(originals, qualities, decode=jpeg.decode_jpeg, repeats=rounds)
sweep += quality.quality_sweep(originals, qualities, decode=jpeg.decode_jpeg, repeats=rounds,
                               subsampling="4:4:4")  # the largest size (the last loop's originals), full colour
print(f"{'size':9s} {'chroma':6s} {'q':>3s} {'KB':>7s} {'bits/px':>7s} {'PSNR dB':>7s} {'SSIM':>6s} {'decode ms':>9s}")
for r in sweep:
    print(f"{r.size:9s} {r.subsampling:6s} {r.quality:3d} {r.bytes / 1e3:7.1f} {r.bits_per_pixel:7.2f} {r.psnr:7.2f} "
          f"{r.ssim:6.4f} {r.decode_ms:9.2f}")

# %%
import matplotlib.pyplot as plt

from gpufeed.measure import plotting

fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
panels = [("bytes", 1e-3, "file size (KB)"), ("psnr", 1, "PSNR (dB)"), ("ssim", 1, "SSIM"), ("decode_ms", 1, "decode (ms per image)")]
for ax, (field, scale, label) in zip(axes.flat, panels):
    for (w, h), color in zip(sizes, ("decode", "copy", "compute")):
        for sub, style in (("4:2:0", "o-"), ("4:4:4", "s--")):
            rows = [r for r in sweep if r.size == f"{w}x{h}" and r.subsampling == sub]
            if rows:
                ax.plot([r.quality for r in rows], [getattr(r, field) * scale for r in rows], style, ms=3,
                        color=plotting.COLORS[color], label=f"{w}x{h} {sub}")
    ax.set_ylabel(label)
axes[0, 0].set_yscale("log")
axes[0, 0].legend()
for ax in axes[1]:
    ax.set_xlabel("JPEG quality (Pillow)")
fig.tight_layout()
plotting.caption(fig, S.machine)
plt.show()

# %%
from gpufeed.course.lesson04 import reading
from gpufeed.course.prose import say
from gpufeed.measure.wording import times


def row(size, q, sub="4:2:0"):
    return next(r for r in sweep if r.size == size and r.quality == q and r.subsampling == sub)


largest = transfer.size_name(sizes[-1])
size_words = reading.SIZE_WORDS  # times(..., **size_words): "2.5x smaller", "3.1x larger"
say(reading.quality_sentence(row(largest, 90), row(largest, 50), row(largest, 100), row(largest, 100, "4:4:4")))

# %% [markdown]
# ## 4. Which decoder? Is Pillow using libjpeg-turbo?
#
# libjpeg-turbo is the SIMD-accelerated libjpeg; Pillow's wheels and torchvision ship it, but a
# Pillow built from source may link plain libjpeg, which the libjpeg-turbo project measured at a
# fraction of its speed ([libjpeg-turbo.org/About/Performance](https://libjpeg-turbo.org/About/Performance));
# the cell below reads which library each of the two loaded. torchvision 0.29+ deprecates
# `torchvision.io.decode_jpeg` in favour of TorchCodec (`pip install torchcodec`, which needs
# FFmpeg's libraries); `gpufeed.data.jpeg` uses whichever is installed. We time each decoder on
# one thread, in turns: images/s per core, the rate one DataLoader worker can reach. If both run
# libjpeg-turbo, a gap between them is not the decoder's, so two more arms time the steps of the
# course's `decode_pil`: Pillow's decode alone (into its own buffer), then with the copy out into
# an array (`np.asarray`); `decode_pil` adds `convert("RGB")`, a copy of its own.

# %%
from gpufeed.course.lesson04 import decoders
from gpufeed.measure.synth import synth_folder

libs = decoders.libraries()  # {"Pillow": "libjpeg-turbo 3.2.0", "torchvision": ...}, read from what each loaded
print(f"Pillow decodes with {libs['Pillow']}, torchvision with {libs['torchvision']}")
if "torchcodec" not in jpeg.available_decoders():
    print("TorchCodec is not installed: `pip install torchcodec` (with FFmpeg's libraries) adds it to this comparison.")
decode_sizes = config.pick(quick=[(384, 384)], full=list(transfer.SIZES), site=[(384, 384), (1280, 960)])
n_decode = config.pick(16, 64)
decode_rounds = config.pick(quick=3, full=9, site=15)  # the steps of a decode differ by a tenth: many rounds
decode_ms = []
for w, h in decode_sizes:
    folder = synth_folder(config.cache_dir() / f"lesson04-{w}x{h}-q90-n{n_decode}", n=n_decode, size=(w, h),
                          quality=90, progress=False).path
    jpegs = [p.read_bytes() for p in sorted(folder.rglob("*.jpg"))]  # in memory: the decoder is timed, not the disk
    decode_ms += decoders.decode_in_turns(jpegs, decoders.decoder_arms(jpegs), f"{w}x{h}", repeats=decode_rounds)
largest_decoded = transfer.size_name(decode_sizes[-1])  # `jpegs` holds this size's files

# %%
def bars_by_size(ms, machine, title):
    """One bar chart per image size: ratios only compare decoders on the same images."""
    here = [sz for sz in dict.fromkeys(m.params["size"] for m in ms)]
    fig, axes = plt.subplots(len(here), 1, figsize=(7, 0.8 + 0.5 * len(ms)), squeeze=False)
    for ax, sz in zip(axes[:, 0], here):
        plotting.bars([m for m in ms if m.params["size"] == sz], ax=ax, machine=machine,
                      title=f"{title}, {sz} (ratios vs the first at this size)")
    fig.tight_layout()
    plt.show()


bars_by_size([m for m in decode_ms if m.params["decoder"] not in reading.STAGES], S.machine,
             "JPEG q90 decode on one core")
say(reading.decoder_lines(decode_ms, S.machine["cores"], sizes_measured_in_full=len(decode_sizes) == len(transfer.SIZES))
    + "\n\n" + reading.gap_sentence(decode_ms, libs, largest_decoded))

# %% [markdown]
# ### Decode fewer pixels: `draft()`
#
# A loader that shrinks its images (to 224x224, say) usually decodes every pixel, then throws
# most of them away. libjpeg can scale *while* decoding, by 1/2, 1/4 or 1/8: the inverse DCT then
# computes fewer pixels. Pillow exposes it as `Image.draft()`, and
# `gpufeed.course.lesson04.decoders.decode_draft` uses it. Here it decodes section 4's largest
# images to a quarter of their size, in turns with a full decode followed by a resize:

# %%
w, h = decode_sizes[-1]
quarter = (w // 4, h // 4)
draft_ms = decoders.decode_in_turns(jpegs, decoders.draft_arms(jpegs, quarter), f"{w}x{h} to {w // 4}x{h // 4}",
                                    repeats=rounds)
say(reading.draft_sentence(*draft_ms, "a quarter", decoders.draft_difference(jpegs[:8], quarter)))

# %% [markdown]
# ### Batched decoding on the GPU
#
# nvJPEG decodes on the GPU; `torchvision.io.decode_jpeg(list_of_tensors, device="cuda")` hands it
# the whole batch at once (`gpufeed.data.jpeg.decode_batch`), which amortises the launches. The decoded
# images are then already on the GPU, as `uint8`. The same images are decoded by the CPU decoders
# of section 4 (on one core), so each size's chart compares nvJPEG with them. This needs CUDA;
# without it, our committed reference is shown if there is one, else the times torchvision's pull
# request for batched decoding published for an A100-class GPU and one CPU thread.

# %%
from gpufeed.measure import results

gpu_ms = []
if S.cuda:
    for w, h in decode_sizes:  # section 4's files, each size's two GPU arms in turns
        files = [p.read_bytes() for p in sorted((config.cache_dir() / f"lesson04-{w}x{h}-q90-n{n_decode}").rglob("*.jpg"))]
        gpu_ms += decoders.decode_in_turns(files, {
            "nvjpeg one by one": lambda f=files: [jpeg.decode_torchvision(b, "cuda") for b in f],
            "nvjpeg batched": lambda f=files: jpeg.decode_batch(f, "cuda")}, f"{w}x{h}", repeats=rounds, device="cuda")
    gpu_machine = S.machine
else:
    ref = results.reference("lesson04")
    gpu_ms = [m for m in ref[0] if m.params.get("device") == "cuda"] if ref else []
    gpu_machine = ref[1]["machine"] if ref else None
    if gpu_ms:
        print(f"No CUDA here: showing the reference measured on {gpu_machine['gpu']}.")
    else:  # theirs instead: times for 1000 images, as published; images/s and ratios read from them
        theirs = {f.id: f for f in results.no_reference("lesson04")}
        rate = {k: 1000 / (f.figure * 1e-6) for k, f in theirs.items() if f.unit == "us per 1000 images"}
        cpu, one, batched = (rate.get(k) for k in ("decode-cpu-unfused-tv-a100-host", "decode-cuda-unfused-tv-a100",
                                                   "decode-cuda-batched-tv-a100"))
        if cpu and one and batched:
            say(f"In that table, one CPU thread decodes {cpu:,.0f} images/s, nvJPEG one call per image {one:,.0f} "
                f"and one batched call {batched:,.0f} images/s: **{times(batched / cpu, digits=0, than='the CPU thread')}** "
                f"and {times(batched / one, digits=1, than='the calls one by one')} (published by "
                f"{theirs['decode-cuda-batched-tv-a100'].publisher}, "
                "not measured here).")
# %%
# The CPU decoders at the same sizes, measured on the same machine as the nvJPEG numbers.
cpu_same = decode_ms if S.cuda else ([m for m in ref[0] if m.params.get("device") == "cpu" and "decoder" in m.params]
                                      if gpu_ms else [])
if gpu_ms:
    both = [m for sz in dict.fromkeys(m.params["size"] for m in gpu_ms)
            for m in [*(c for c in cpu_same if c.params["size"] == sz), *(g for g in gpu_ms if g.params["size"] == sz)]]
    bars_by_size([m for m in both if m.params["decoder"] not in reading.STAGES], gpu_machine,
                 "JPEG q90 decode, CPU (one core) and nvJPEG")
    say(f"On {gpu_machine['gpu']}:\n" + reading.nvjpeg_lines(gpu_ms, cpu_same, gpu_machine.get("cores") or 1))

# %% [markdown]
# ### The same JPEG, not the same pixels
#
# nvJPEG's image is not bit for bit Pillow's. Both undo the same DCT, but they bring the
# half-size colour planes of a 4:2:0 JPEG to full size differently: libjpeg-turbo (Pillow, and
# torchvision on the CPU) interpolates them ("fancy upsampling"), while nvJPEG, as torchvision
# calls it, repeats each colour sample over its 2x2 pixels (DALI asks nvJPEG to interpolate).
# `quality.decode_replicated_chroma` decodes a JPEG the second way on the CPU, so the difference
# can be measured anywhere; with CUDA, nvJPEG's own images are compared too. A model trained on
# images decoded one way and served images decoded the other sees this difference.

# %%
mean_diff = decoders.mean_difference  # grey levels, averaged over pairs of decoded images
sample = jpegs[:8]  # the largest size's q90 JPEGs from section 4
pil_images = [jpeg.decode_pil(b) for b in sample]
replicated = [quality.decode_replicated_chroma(b) for b in sample]
upsampling = mean_diff(replicated, pil_images)
text = (f"On {len(sample)} q90 JPEGs of {largest_decoded}, repeating the colour samples instead of interpolating them "
        f"changes the decoded image by **{upsampling:.2f} grey levels** on average.")
if S.cuda:
    gpu_images = jpeg.decode_batch(sample, "cuda")
    to_pil, to_replicated = mean_diff(gpu_images, pil_images), mean_diff(gpu_images, replicated)
    text += (f" nvJPEG's images differ from Pillow's by {to_pil:.2f} and from the replicated decode by "
             f"{to_replicated:.2f}: on this GPU nvJPEG " + ("repeats" if to_replicated < to_pil else "interpolates")
             + " the colour samples.")
say(text)

# %% [markdown]
# ## 5. Can you spot the difference?
#
# Zuppichini's talk *How to Efficiently Send Images to GPU* (lesson 00's Sources) showed a frame
# going from **3.5 MB to 207 KB** with `ffmpeg -q:v 3`, and asked the audience to spot the
# difference. Here is the same test on a
# 1280x960 image: the original, a JPEG at the quality below (change it and re-run), a zoomed
# crop of both where they differ most, and a map of the difference.

# %%
import io

q_show = 40
original = render(SynthSpec(n=1, width=1280, height=960, seed=3), 0)
data = encode_jpeg(original, q_show)
a, b = quality.to_tensor(original), jpeg.decode_pil(data)  # uint8 [3, 960, 1280] each
png = io.BytesIO()
original.save(png, format="PNG")
raw = a.numel()  # uint8 bytes: 3 x 960 x 1280
print(f"raw uint8 {raw / 2**20:.2f} MiB, lossless PNG {png.tell() / 2**20:.2f} MiB, JPEG q{q_show} {len(data) / 2**10:.0f} KiB: "
      f"{times(raw / len(data), **size_words, digits=0, than='raw')}, "
      f"{times(png.tell() / len(data), **size_words, digits=0, than='PNG')} "
      f"(PSNR {quality.psnr(a, b):.1f} dB, SSIM {quality.ssim(a, b):.3f}).")

# %%
diff = (a.int() - b.int()).abs().float().mean(0)  # [H, W], mean absolute error over R, G, B
# Zoom where the JPEG differs most: the 128x128 window (on a 32-pixel grid) with the largest mean error.
err = torch.nn.functional.avg_pool2d(diff[None, None], 128, stride=32)[0, 0]
row0, col0 = divmod(int(err.argmax()), err.shape[1])
ys, xs = slice(32 * row0, 32 * row0 + 128), slice(32 * col0, 32 * col0 + 128)
fig, axes = plt.subplots(2, 3, figsize=(11, 6.5))
views = [(a.permute(1, 2, 0), "original"), (b.permute(1, 2, 0), f"JPEG q{q_show}, {len(data) / 2**10:.0f} KiB"), (diff, "|difference|")]
for col, (im, title) in enumerate(views):
    for r, crop in enumerate([(slice(None), slice(None)), (ys, xs)]):
        ax = axes[r, col]
        shown = ax.imshow(im[crop], cmap="magma" if col == 2 else None, vmin=0, vmax=16 if col == 2 else None,
                          interpolation="nearest")
        ax.set_title(title + (" (zoom)" if r else ""), fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
axes[0, 0].add_patch(plt.Rectangle((xs.start, ys.start), 128, 128, fill=False, color="white", lw=1))
fig.colorbar(shown, ax=axes[:, 2], label="absolute error (grey levels)", shrink=0.8)
plotting.caption(fig, S.machine)
plt.show()
print(f"Mean error {diff.mean():.2f} grey levels; {(diff > 8).float().mean():.1%} of pixels are off by more than 8.")

# %% [markdown]
# ### `ffmpeg -q:v` in Pillow's terms
#
# FFmpeg's MJPEG encoder takes `-q:v` from 2 (best) to 31 (worst), a different scale from
# Pillow's 1-100. We encode the same image at several `-q:v` values and find the Pillow quality
# that gives the same file size. The ffmpeg binary comes with the course's environment (the
# `imageio-ffmpeg` package ships one), so this runs everywhere, quick mode included. From an RGB
# image ffmpeg keeps full colour resolution (4:4:4), so the match is made with Pillow at 4:4:4 too.

# %%
ffmpeg_map = []
if quality.ffmpeg_exe() is None:
    print("No ffmpeg here (imageio-ffmpeg is missing): `pip install imageio-ffmpeg`, then re-run this cell.")
else:
    encoded = {qv: quality.ffmpeg_jpeg(original, qv) for qv in (2, 3, 5, 8, 12, 20, 31)}
    for qv, file in encoded.items():
        q = quality.matching_quality(original, len(file), subsampling="4:4:4")
        ffmpeg_map.append({"qv": qv, "bytes": len(file), "pillow_quality": q})
        print(f"-q:v {qv:2d}: {len(file) / 2**10:6.0f} KiB, like Pillow quality {q} at 4:4:4")
    q3 = next(r for r in ffmpeg_map if r["qv"] == 3)
    q3_img = jpeg.decode_pil(encoded[3])
    say(f"`-q:v 3` takes the raw {raw / 2**20:.1f} MiB frame to **{q3['bytes'] / 2**10:.0f} KiB** "
        f"({times(raw / q3['bytes'], **size_words, digits=0)}; PSNR {quality.psnr(a, q3_img):.1f} dB, SSIM {quality.ssim(a, q3_img):.3f}). "
        f"Zuppichini's frame went from a 3.5 MB file to 207 KB ({3.5e6 / 207e3:.0f}x); the talk does not say what "
        "that file held (raw pixels, PNG, a camera's JPEG), and the ratio depends on the picture and on the start, "
        "so read the two ratios only as orders of magnitude.")

# %% [markdown]
# ## 6. The format and the DataLoader
#
# Same images, same labels, same DataLoader and workers, four ways to store them: lossless PNG,
# JPEG at quality 95 and at quality 75, and raw `uint8` arrays (`.npy`, no decoding at all, but
# the most bytes). The folders are built once in the cache (`gpufeed.course.lesson04.formats`) and
# reused. The four loaders take their passes in turns, each after one untimed pass that starts its
# workers and brings every file into the page cache.

# %%
from gpufeed.course.lesson04 import formats as folders
from gpufeed.measure.machine import usable_cores

ds_size, ds_n = config.pick(quick=((384, 384), 32), full=((640, 480), 256), site=((384, 384), 64))
workers = config.pick(quick=2, full=min(8, usable_cores()))
tag = f"{ds_size[0]}x{ds_size[1]}-n{ds_n}"
paths = {
    "png": folders.export_folder(config.cache_dir() / f"lesson04-{tag}-png", ds_n, ds_size, "png"),
    "jpeg q95": synth_folder(config.cache_dir() / f"lesson04-{tag}-q95", ds_n, ds_size, quality=95, progress=False).path,
    "jpeg q75": synth_folder(config.cache_dir() / f"lesson04-{tag}-q75", ds_n, ds_size, quality=75, progress=False).path,
    "npy (raw uint8)": folders.export_folder(config.cache_dir() / f"lesson04-{tag}-npy", ds_n, ds_size, "npy"),
}
for name, path in paths.items():
    print(f"{name:16s} {folders.folder_bytes(path) / 1e6:7.1f} MB  ({folders.folder_bytes(path) / ds_n / 1e3:.0f} KB per image)")

# %%
loader_ms = folders.loaders_in_turns({name: folders.ImageFiles(path) for name, path in paths.items()}, batch_size=16,
                                     workers=workers, repeats=config.pick(quick=3, full=5, site=7))
for m in loader_ms:
    m.params.update(format=m.name, size=tag, disk_bytes=folders.folder_bytes(paths[m.name]))
fig, ax = plotting.bars(loader_ms, machine=S.machine, title=f"DataLoader, {workers} workers, {tag} (ratios vs PNG)")
plt.show()
say(reading.loader_sentence(loader_ms, workers) + " From a disk or a network share, the formats with more bytes per "
    "image would read slower: not measured here (lesson 05 reads a cold page cache).")

# %% [markdown]
# ## 7. Saved

# %%
saved = results.save_lesson("lesson04", [*decode_ms, *draft_ms, *(gpu_ms if S.cuda else []), *loader_ms],
                            quality_sweep=[r.as_dict() for r in sweep], ffmpeg_map=ffmpeg_map)

# %% [markdown]
# ## Key takeaways
#
# * Quality is a dial between bytes and error: the top of the scale (95-100) costs many bytes for
#   little PSNR; in the middle, files shrink several-fold while SSIM stays high.
# * Whether a lower quality also decodes faster, and by how much, is a measurement (section 3, in
#   turns); the per-pixel work stays whatever the quality, so decoding fewer pixels is the other
#   lever: `draft()` decodes straight to a half, a quarter or an eighth of the size.
# * Check that Pillow uses libjpeg-turbo, and pick the decoder by measuring it on your images:
#   section 4 says which one was fastest here. Pillow and torchvision ship the same library, so
#   time the steps around it (the copies out of Pillow) before blaming the decoder. On a GPU,
#   compare nvJPEG's batched decode with the CPU decoders at the same size (and the cores you
#   would give them) before moving decode.
# * Pillow subsamples colour (4:2:0) at every quality unless told `subsampling=0`: at the top of
#   the scale that, not the quality, bounds the error.
# * Raw `uint8` skips decoding but multiplies the bytes; that pays only when the bytes are cheap
#   to read (page cache, memory map: lesson 05).
#
# ## Exercises
#
# 1. Change `q_show` in section 5 until you can no longer spot the difference in the zoomed crop.
#    What quality is it, and how many times smaller than raw is the file there?
# 2. Re-run the quality sweep with `luma=True` in `quality.quality_sweep`: is SSIM on brightness
#    alone higher or lower than per channel? Why might that be (hint: 4:2:0)?
# 3. Predict from section 3's table: which quality halves the file size of quality 90 at the
#    largest size? Check with the cell below.
#
# Each exercise has a worked solution after the self-check, folded: try it first, then open the cell.

# %%
# Self-check for exercise 3: your predicted quality (one of the sweep's qualities).
my_quality = None
target = row(largest, 90).bytes / 2
closest = min((r for r in sweep if r.size == largest and r.subsampling == "4:2:0"), key=lambda r: abs(r.bytes - target))
if my_quality is not None:
    print("right!" if my_quality == closest.quality else f"not quite: look for about {target / 1e3:.0f} KB in the table")


# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 1: the quality where the zoomed crop looks the same
# Why: "I cannot see it" is your eye's call, but a number gets you there fast. Look where the JPEG
# is worst (the 128x128 window of largest error, as section 5 does) and raise the quality until
# that window's SSIM *on brightness* reaches 0.99. Brightness, because the eye resolves brightness
# detail far better than colour detail (the reason JPEG subsamples colour at all); 0.99 is our
# stand-in for "no visible difference", a choice to check by eye on the crops drawn below.
def worst_window(q):
    dec = jpeg.decode_pil(encode_jpeg(original, q))
    err = torch.nn.functional.avg_pool2d((a.int() - dec.int()).abs().float().mean(0)[None, None], 128, stride=32)[0, 0]
    r, c = divmod(int(err.argmax()), err.shape[1])
    crop = (slice(None), slice(32 * r, 32 * r + 128), slice(32 * c, 32 * c + 128))
    return quality.ssim(a[crop], dec[crop], luma=True), a[crop], dec[crop]


for q in (40, 50, 60, 70, 80, 90, 95, 100):
    crop_ssim, crop_a, crop_b = worst_window(q)
    print(f"q{q:3d}: SSIM on luma of the worst 128x128 window {crop_ssim:.4f}")
    if crop_ssim >= 0.99:
        break
fig, axes = plt.subplots(1, 2, figsize=(6, 3))
for ax, im, title in ((axes[0], crop_a, "original"), (axes[1], crop_b, f"JPEG q{q}")):
    ax.imshow(im.permute(1, 2, 0), interpolation="nearest")
    ax.set_title(title + " (worst window)", fontsize=9)
    ax.axis("off")
plt.show()
kib = len(encode_jpeg(original, q)) / 2**10
say(f"At **quality {q}** the worst window's SSIM on brightness is {crop_ssim:.3f}"
    + ("" if crop_ssim >= 0.99 else " (never 0.99 here: look at the crops and choose by eye)")
    + f"; the file is {kib:.0f} KiB, **{times(raw / 2**10 / kib, **size_words, digits=0, than='raw')}**.")

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 2: SSIM on brightness alone
# Why: 4:2:0 keeps the brightness plane (luma, Y) at full resolution and halves both colour planes
# (Cb, Cr) in each direction. An R, G or B channel mixes Y with Cb and Cr, so the per-channel SSIM
# also sees the colour detail that subsampling threw away; luma alone sees only the quantisation.
# So SSIM on luma should be higher; and at high quality, where quantisation is mild, the lost
# colour resolution should be most of what error is left. Decode times are not needed: one pass.
luma_sweep = quality.quality_sweep(originals, qualities, repeats=1, luma=True)
for r in luma_sweep:
    print(f"q{r.quality:3d}: SSIM per channel {row(largest, r.quality).ssim:.4f}, on luma {r.ssim:.4f}")
higher = sum(r.ssim > row(largest, r.quality).ssim for r in luma_sweep)
top_q = luma_sweep[-1]
kept = (1 - top_q.ssim) / (1 - row(largest, top_q.quality).ssim)  # luma's error over the per-channel one
say(f"SSIM on luma is higher than per channel at **{higher} of {len(luma_sweep)}** qualities ({largest}, 4:2:0)"
    + (": the colour planes' halved resolution is error that brightness alone does not carry. "
       if 2 * higher > len(luma_sweep) else ": on these images brightness carries most of the error, not colour. ")
    + f"At quality {top_q.quality}, luma's error (1 - SSIM) is {kept:.0%} of the per-channel one"
    + (": the rest is the subsampled colour." if kept < 1 else "."))

# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}
# Solution to exercise 3: the quality that halves the file of quality 90
# Why: file size does not fall in proportion to quality. Near the top, each step of quality
# changes the quantisation table a lot and the size falls fast; lower down, most coefficients are
# already zero and the size falls slowly. So read the table: take half of q90's bytes and find
# the sweep's quality nearest to it; between two rows, interpolate log(bytes) for a finer guess.
target_kb = row(largest, 90).bytes / 2e3
table = sorted((r.quality, r.bytes / 1e3) for r in sweep if r.size == largest and r.subsampling == "4:2:0")
my_quality = min(table, key=lambda t: abs(t[1] - target_kb))[0]
print("self-check:", "right!" if my_quality == closest.quality else "not quite")
(q0, kb0), (q1, kb1) = next((lo, hi) for lo, hi in zip(table, table[1:]) if lo[1] <= target_kb <= hi[1])
q_exact = q0 + (q1 - q0) * math.log(target_kb / kb0) / math.log(kb1 / kb0)
say(f"Half of quality 90's {2 * target_kb:.0f} KB is {target_kb:.0f} KB: of the sweep's qualities, **{my_quality}** is "
    f"closest; between q{q0} ({kb0:.0f} KB) and q{q1} ({kb1:.0f} KB), about q{q_exact:.0f} would hit it.")

# %% [markdown]
# ## Further reading
#
# * [GPU jpeg decoder: add batch support and hardware decoding](https://github.com/pytorch/vision/pull/8496) (a torchvision pull request by deekay42): batched nvJPEG decoding in torchvision, with its author's timings against the CPU (the figures this lesson shows without a GPU).
# * [nvJPEG Libraries](https://developer.nvidia.com/nvjpeg) (NVIDIA): what the GPU decoder does (hybrid CPU and GPU decoding, batched decoding), and the hardware JPEG decoding of A100 GPUs.
# * [ImageNet Benchmarks](https://github.com/libffcv/ffcv/blob/main/docs/benchmarks.rst) (FFCV documentation): how JPEG quality and image size change an ImageNet's size on disk, and its loading rate.
# * [FFCV: Accelerating Training by Removing Data Bottlenecks](https://arxiv.org/abs/2306.12517) (Leclerc, Ilyas, Engstrom, Park, Salman, Madry; CVPR 2023): why storing some images raw and some as JPEG trades disk for decode time.
