"""The loaders a practitioner would pick, measured beside the course's: ``gpufeed bench --peers``.

Each peer does the course pipeline's work on the same files: shuffled batches of ``w.batch``, a
random ``crop x crop`` window and a random horizontal flip per image, ``float32 [B, 3, crop, crop]``
normalised with ImageNet's mean and std out, on ``threads`` threads (one per usable core, as the
course's DataLoaders get). Where a peer differs, its adapter says so in a comment.

* ``ffcv_raw`` / ``ffcv_jpeg``: FFCV 1.0.2 reading a ``.beton`` of the memmap's ``resize x resize``
  images stored raw or as JPEG (written once, kept beside the dataset);
* ``spdl``: SPDL's thread pipeline, FFmpeg decoding the JPEGs with scale/crop/flip filters;
* ``torchdata``: ``torchdata.nodes`` with a thread ``ParallelMapper`` over torchvision's decoder.

Every peer runs in its own process (:func:`measure_all`): FFCV's ``Loader`` calls
``torch.set_num_threads`` for its whole process, which would change every other pipeline's numbers.
The processes are timed in turns, one epoch each per round, and each reports its peak PSS.
Peers are imported only inside functions: none is needed to import this module.

Example:
    >>> sorted(PEERS)
    ['ffcv_jpeg', 'ffcv_raw', 'spdl', 'torchdata']
    >>> isinstance(available(), dict)
    True
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from gpufeed.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize
from gpufeed.measure import pipelines
from gpufeed.measure.pipelines import Data, Workload

#: peer -> the module it needs.
PEERS = {"ffcv_raw": "ffcv", "ffcv_jpeg": "ffcv", "spdl": "spdl.pipeline", "torchdata": "torchdata.nodes"}


def available() -> dict[str, bool]:
    """``peer -> installed`` (found without importing it)."""
    def found(mod: str) -> bool:
        try:
            return importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            return False

    return {name: found(mod) for name, mod in PEERS.items()}


def _normalize(images: torch.Tensor) -> torch.Tensor:
    """``uint8 [B, 3, H, W]`` -> normalised ``float32``, as the course pipeline's output."""
    return normalize(images, torch.float32, IMAGENET_MEAN, IMAGENET_STD)


def _jpeg_files(data: Data) -> list[tuple[str, int]]:
    from torchvision.datasets import ImageFolder

    return ImageFolder(str(data.jpeg), loader=lambda p: p).samples


def torchdata_epoch(data: Data, w: Workload, threads: int) -> Callable[[], int]:
    """torchdata.nodes: sampler -> thread ParallelMapper (read, decode, resize, crop, flip) -> Batcher
    -> normalise. Decoding and resizing per epoch: the JPEG pipelines' work (the memmap has it done)."""
    from torch.utils.data import RandomSampler
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, SamplerWrapper

    samples, crop = _jpeg_files(data), pipelines.JpegUint8(w)

    def one(i: int):
        path, target = samples[i]
        return crop(path), target

    def collate(items):
        return _normalize(torch.stack([x for x, _ in items])), torch.tensor([y for _, y in items])

    node = SamplerWrapper(RandomSampler(range(len(samples))))
    node = ParallelMapper(node, one, num_workers=threads, method="thread", in_order=False)
    loader = Loader(Mapper(Batcher(node, w.batch, drop_last=True), collate))
    return lambda: sum(x.shape[0] for x, _ in loader)


def spdl_epoch(data: Data, w: Workload, threads: int) -> Callable[[], int]:
    """SPDL: FFmpeg decodes each JPEG with a scale, crop and (half the time) hflip filter, in SPDL's
    thread pipeline; batches stacked and normalised. Differs: FFmpeg's bicubic scale, not antialiased
    bilinear, and it scales to ``resize`` on the short side as a filter string."""
    import random

    import spdl.io
    from spdl.pipeline import PipelineBuilder

    samples = _jpeg_files(data)
    (jw, jh), r, c = w.jpeg_size, w.resize, w.crop
    sw, sh = (r * jw // jh, r) if jw >= jh else (r, r * jh // jw)

    def one(item):
        path, target = item
        x, y = random.randint(0, sw - c), random.randint(0, sh - c)
        flt = f"scale={sw}:{sh},crop={c}:{c}:{x}:{y}" + (",hflip" if random.random() < 0.5 else "") + ",format=rgb24"
        return spdl.io.to_torch(spdl.io.load_image(path, filter_desc=flt)), target  # uint8 [c, c, 3]

    def collate(items):
        return _normalize(torch.stack([x for x, _ in items]).permute(0, 3, 1, 2)), torch.tensor([y for _, y in items])

    def epoch() -> int:
        order = torch.randperm(len(samples)).tolist()
        pipe = (PipelineBuilder().add_source([samples[i] for i in order]).pipe(one, concurrency=threads)
                .aggregate(w.batch, drop_last=True).pipe(collate).add_sink(3).build(num_threads=threads))
        with pipe.auto_stop():
            return sum(x.shape[0] for x, _ in pipe)

    return epoch


def write_beton(data: Data, w: Workload, jpeg: bool) -> Path:
    """The FFCV file of the memmap's images (``resize x resize``, raw pixels or JPEG at the dataset's
    quality), written once beside the memmap (to a temporary name first: a killed run leaves none)."""
    import numpy as np
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    from gpufeed.data.memmap import load_memmap

    path = data.memmap.parent / f"{data.memmap.name}-{'jpg' if jpeg else 'raw'}.beton"
    if path.is_file():
        return path
    mm = load_memmap(data.memmap)

    class Rows:
        def __len__(self):
            return len(mm.targets)

        def __getitem__(self, i):  # FFCV wants HWC uint8 NumPy images
            return np.ascontiguousarray(mm.images[i].permute(1, 2, 0).numpy()), int(mm.targets[i])

    tmp = path.with_name(path.name + ".partial")
    fields = {"image": RGBImageField(write_mode="jpg" if jpeg else "raw", jpeg_quality=w.quality), "label": IntField()}
    DatasetWriter(str(tmp), fields, num_workers=1).from_indexed_dataset(Rows())
    tmp.replace(path)
    return path


def ffcv_epoch(data: Data, w: Workload, threads: int, jpeg: bool) -> Callable[[], int]:
    """FFCV's Loader on :func:`write_beton`'s file. Differs: FFCV has no plain random crop, so a
    ``RandomResizedCrop`` of exactly ``crop x crop`` (scale (crop/resize)^2, ratio 1) stands for
    one; its resize to the same size is a copy."""
    import numpy as np
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import (
        NormalizeImage,
        RandomHorizontalFlip,
        Squeeze,
        ToTensor,
        ToTorchImage,
    )

    area = (w.crop / w.resize) ** 2
    image = [RandomResizedCropRGBImageDecoder((w.crop, w.crop), scale=(area, area), ratio=(1.0, 1.0)),
             RandomHorizontalFlip(), NormalizeImage(np.array(IMAGENET_MEAN) * 255, np.array(IMAGENET_STD) * 255,
                                                    np.float32), ToTensor(), ToTorchImage()]
    loader = Loader(str(write_beton(data, w, jpeg)), batch_size=w.batch, num_workers=threads,
                    order=OrderOption.RANDOM, drop_last=True,
                    pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]})
    return lambda: sum(x.shape[0] for x, _ in loader)


def make_epoch(name: str, data: Data, w: Workload, threads: int) -> Callable[[], int]:
    """``epoch()`` of peer ``name``: one pass over the dataset, returning the images it made."""
    if name == "torchdata":
        return torchdata_epoch(data, w, threads)
    if name == "spdl":
        return spdl_epoch(data, w, threads)
    if name in ("ffcv_raw", "ffcv_jpeg"):
        return ffcv_epoch(data, w, threads, jpeg=name == "ffcv_jpeg")
    raise ValueError(f"unknown peer {name!r}; pick one of {sorted(PEERS)}")


def serve(name: str, spec: dict) -> None:
    """A peer's process: builds it, then one epoch per ``epoch`` line on stdin, one JSON line out
    (seconds, images, peak PSS in bytes, CPU seconds of the process and its workers); ``quit`` ends it."""
    from gpufeed.measure.cpu import CoresBusy
    from gpufeed.measure.memory import PeakPss

    data = Data(Path(spec["jpeg"]), Path(spec["memmap"]), 0.0, 0.0)
    epoch = make_epoch(name, data, Workload(**{**spec["workload"], "jpeg_size": tuple(spec["workload"]["jpeg_size"])}),
                       spec["threads"])
    print(json.dumps({"ready": True}), flush=True)
    most = None  # bytes: the largest PSS seen so far, over every epoch
    for line in sys.stdin:
        if line.strip() != "epoch":
            break
        # Sampled only while an epoch runs: an idle peer waiting for its turn costs nothing to the
        # one being timed (each reading walks this process's page tables).
        with PeakPss() as peak, CoresBusy() as busy:
            n = epoch()
        most = peak.peak if most is None else max(most, peak.peak or 0)
        print(json.dumps({"s": busy.wall_s, "images": n, "pss": most, "cpu_s": busy.cpu_s}), flush=True)


def measure_all(data: Data, w: Workload, threads: int, repeats: int, names=None,
                log: Callable[[str], None] = print):
    """One process per installed peer, an epoch each in turns (a warm-up round first): Measurements
    named ``"<peer> loader"`` with ``params`` ``pipeline``, ``mode``, ``peak_pss`` (bytes) and
    ``cores_busy`` (over every round, the warm-up included, as the in-process loaders are counted)."""
    from gpufeed.measure import progress
    from gpufeed.measure.harness import Measurement

    log = progress.around(log)
    names = [n for n, ok in available().items() if ok] if names is None else list(names)
    skipped = sorted(set(PEERS) - set(names))
    if skipped:
        log(f"  peers not installed (make peers-deps): {', '.join(skipped)}")
    spec = json.dumps({"jpeg": str(data.jpeg), "memmap": str(data.memmap), "workload": w.to_dict(), "threads": threads})
    procs, out, cpu = {}, {}, {}
    try:
        for n in names:
            p = subprocess.Popen([sys.executable, "-m", "gpufeed.measure.peers", n, spec], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, bufsize=1)
            if not p.stdout.readline():  # it died while building: its stderr says why
                log(f"  peer {n} failed to start (exit {p.wait()}); left out")
                continue
            procs[n], out[n], cpu[n] = p, [], [0.0, 0.0]  # CPU seconds, wall seconds
        shown = progress.bar(total=(repeats + 1) * len(procs), unit="epoch", desc=f"peers: {', '.join(procs)}")
        for r in range(repeats + 1):
            for n, p in procs.items():
                shown.set_postfix_str(f"{n}, {'warm-up' if r == 0 else f'{r}/{repeats}'}")
                p.stdin.write("epoch\n")
                p.stdin.flush()
                got = json.loads(p.stdout.readline())
                cpu[n][0], cpu[n][1] = cpu[n][0] + got["cpu_s"], cpu[n][1] + got["s"]
                if r:  # round 0 is the warm-up
                    out[n].append(got)
                shown.update()
        shown.close()
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(timeout=60)
    ms = []
    for n, runs in out.items():
        m = Measurement(f"{n} loader", [g["s"] for g in runs], items=runs[0]["images"],
                        params={"pipeline": n, "mode": "loader", "threads": threads, "peak_pss": runs[-1]["pss"],
                                "cores_busy": cpu[n][0] / cpu[n][1]})
        log(f"  {m}")
        ms.append(m)
    return ms


if __name__ == "__main__":
    serve(sys.argv[1], json.loads(sys.argv[2]))
