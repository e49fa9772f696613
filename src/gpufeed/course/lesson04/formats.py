"""Image folders in several storage formats, and a Dataset that reads any of them as uint8.

Lesson 04 asks how the *file format* changes a DataLoader's throughput with the same workers:
lossless PNG, JPEG at a high and a medium quality, or raw ``uint8`` arrays (``.npy``, no decode
at all, but 10-20x the bytes of a JPEG). :func:`export_folder` writes the uncompressed originals
of a :mod:`gpufeed.measure.synth` dataset as PNG or ``.npy`` (same layout, same images, same labels as
:func:`gpufeed.measure.synth.synth_folder`'s JPEGs), atomically and reused on the next run.
:class:`ImageFiles` reads a folder of any of these. Taught in ``notebooks/04_jpeg.ipynb``.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> png = export_folder(root / "png", n=4, size=(32, 24), fmt="png", classes=2)
    >>> ds = ImageFiles(png)
    >>> len(ds), ds[0][0].shape, ds[0][0].dtype, ds.labels, ds.classes
    (4, torch.Size([3, 24, 32]), torch.uint8, [0, 0, 1, 1], ['class_00', 'class_01'])
    >>> export_folder(root / "png", n=4, size=(32, 24), fmt="png", classes=2) == png  # reused
    True
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import torch

from gpufeed.data import jpeg, staging
from gpufeed.measure import synth

#: File suffix to format name.
SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".npy": "npy"}
MANIFEST = "gpufeed-export.json"
EXPORT_FORMAT = "gpufeed-export"


def _encode(img, fmt: str) -> bytes:
    """A PIL image as PNG bytes (lossless, zlib level 6 as Pillow defaults) or as a CHW ``.npy``."""
    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, format="PNG")
    elif fmt == "npy":
        # Channels first, as the models want: the loader then does no permute at all.
        np.save(buf, np.ascontiguousarray(np.asarray(img, dtype=np.uint8).transpose(2, 0, 1)))
    else:
        raise ValueError(f"fmt must be 'png' or 'npy' (got {fmt!r}); JPEG folders come from gpufeed.measure.synth.synth_folder")
    return buf.getvalue()


def export_folder(out: str | os.PathLike, n: int, size: tuple[int, int], fmt: str, classes: int | None = None,
                  seed: int = 0) -> Path:
    """Writes the originals of ``synth_folder(..., n, size, classes=classes, seed=seed)`` as ``fmt``.

    Files go to ``out/class_XX/NNNNNN.png`` (or ``.npy``). The folder is built through the shared
    atomic staging (:func:`gpufeed.data.staging.staged`: a hidden folder beside ``out``, the
    manifest written last, one rename), so an interrupted run leaves nothing that looks finished;
    a second call with the same arguments finds the manifest and returns at once.

    Returns:
        The folder.

    Raises:
        ValueError: ``fmt`` is not ``"png"`` or ``"npy"``, or bad ``n``/``size``/``classes``.
        FileExistsError: ``out`` already holds other files.
        gpufeed.measure.synth.SynthError: too little disk space, a full disk, or ``out`` not writable.
    """
    if fmt not in ("png", "npy"):
        raise ValueError(f"fmt must be 'png' or 'npy' (got {fmt!r}); JPEG folders come from gpufeed.measure.synth.synth_folder")
    if classes is None:
        classes = min(10, n)
    spec = synth.SynthSpec(n, size[0], size[1], 100, classes, seed).validate()
    out = Path(out).expanduser().absolute()
    want = {"format": EXPORT_FORMAT, "fmt": fmt, "n": n, "size": list(size), "classes": classes, "seed": seed}
    if _manifest(out) == want:
        return out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already holds other files; delete it or choose another folder")
    staging.prepare_parent(out, synth.SynthError, "out")
    # Raw CHW uint8 per image plus headers; Pillow's PNG of noisy photos is never larger than that.
    staging.check_space(n * (3 * size[0] * size[1] + 4096), staging.free_bytes(out.parent), out.parent,
                        synth.SynthError, "choose a smaller n or size")
    with staging.staged(out, synth.SynthError, "out") as tmp:
        for c in range(spec.classes):
            (tmp / synth.class_name(c)).mkdir()
        for i in range(n):
            path = tmp / synth.relative_path(spec, i).replace(".jpg", "." + fmt)
            path.write_bytes(_encode(synth.render(spec, i), fmt))
        (tmp / MANIFEST).write_text(json.dumps(want) + "\n")  # written last: marks it complete
    return out


def _manifest(folder: Path) -> dict | None:
    return staging.read_manifest(folder, MANIFEST, EXPORT_FORMAT)


def folder_bytes(folder: str | os.PathLike) -> int:
    """Total size of the image files in ``folder`` (what the loader has to read)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.suffix.lower() in SUFFIXES)


def decode_file(data: bytes, fmt: str) -> torch.Tensor:
    """Bytes of one file to ``uint8 [3, H, W]``: JPEG via :func:`gpufeed.data.jpeg.decode_jpeg`,
    PNG via Pillow, ``.npy`` via ``np.load`` (a parse of the header, then the bytes as they are)."""
    if fmt == "jpeg":
        return jpeg.decode_jpeg(data)
    if fmt == "png":
        return jpeg.decode_pil(data)
    if fmt == "npy":
        return torch.from_numpy(np.load(io.BytesIO(data)))
    raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(set(SUFFIXES.values()))}")


class ImageFiles(torch.utils.data.Dataset):
    """An ImageFolder-layout folder of PNG, JPEG or ``.npy`` files, as ``(uint8 [3, H, W], label)``.

    Labels are the index of the class folder in sorted order. A plain class (no lambdas, no open
    files), so DataLoader workers can pickle it under any start method.

    Args:
        root: the folder, holding ``class_name/file`` entries.
        fmt: ``"png"``, ``"jpeg"`` or ``"npy"``; None takes the format of the files found (the
            folder must then hold only one).
    """

    def __init__(self, root: str | os.PathLike, fmt: str | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"ImageFiles: {self.root} is not a folder; generate one with "
                                    "gpufeed.measure.synth.synth_folder or gpufeed.course.lesson04.formats.export_folder")
        files = sorted(p for p in self.root.glob("*/*") if p.suffix.lower() in SUFFIXES)
        found = {SUFFIXES[p.suffix.lower()] for p in files}
        if fmt is None:
            if len(found) != 1:
                raise ValueError(f"ImageFiles: {self.root} holds {sorted(found) or 'no images'}; "
                                 "pass fmt= to choose one, or point at a folder with class_name/image files")
            fmt = found.pop()
        self.fmt = fmt
        self.files = [p for p in files if SUFFIXES[p.suffix.lower()] == fmt]
        if not self.files:
            raise ValueError(f"ImageFiles: no {fmt} files in {self.root}/<class>/")
        self.classes = sorted({p.parent.name for p in self.files})
        index = {c: i for i, c in enumerate(self.classes)}
        self.labels = [index[p.parent.name] for p in self.files]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return decode_file(self.files[i].read_bytes(), self.fmt), self.labels[i]


def loaders_in_turns(datasets: dict[str, torch.utils.data.Dataset], batch_size: int, workers: int,
                     repeats: int = 5) -> list:
    """Images/s of a full pass of one DataLoader per dataset, the passes taken **in turns** (a, b, c,
    a, b, c, ...), so that the verdict method compares any two formats round by round.

    Each loader keeps its workers between passes (``persistent_workers``), and one untimed pass each
    first starts them and warms the page cache, so what is timed is reading and decoding, not process
    start-up or the disk. Returns one :class:`gpufeed.measure.harness.Measurement` of seconds per
    pass per dataset, named by its key, in the order given; the workers end with the call.

    Example:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> ds = {f: ImageFiles(export_folder(root / f, n=4, size=(16, 16), fmt=f, classes=2)) for f in ("png", "npy")}
        >>> png, npy = loaders_in_turns(ds, batch_size=2, workers=0, repeats=2)
        >>> png.name, npy.items, len(png.samples), png.params["workers"]
        ('png', 4, 2, 0)
    """
    from gpufeed.measure.harness import interleave

    loaders = {name: torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers,
                                                 persistent_workers=workers > 0, shuffle=False)
               for name, ds in datasets.items()}

    def one_pass(loader):
        def run():
            for _ in loader:
                pass
        return run

    try:
        return interleave({name: one_pass(loader) for name, loader in loaders.items()}, repeats=repeats, warmup=1,
                          items={name: len(ds) for name, ds in datasets.items()},
                          params={name: {"batch_size": batch_size, "workers": workers} for name in datasets},
                          desc=f"{len(datasets)} DataLoaders in turns")
    finally:
        loaders.clear()  # their iterators, and with them the persistent workers, go
