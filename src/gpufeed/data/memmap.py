"""The memmap dataset: a folder of images decoded once into one ``uint8`` array on disk.

:class:`ImageData` is a tensordict ``@tensorclass`` holding ``images: uint8 [N, 3, H, W]`` and
``targets: int64 [N]``, both memory-mapped files. :func:`build_memmap` writes it from an image
folder (ImageFolder layout) through :class:`gpufeed.data.folder.ImageFolderDataset`, so every image
gets the one resize policy (:func:`gpufeed.data.folder.fit`); :func:`load_memmap` maps it back in
a time that does not grow with its size (nothing is read until a batch touches it). A batch is
then a slice or a gather of rows: no file to open, nothing to decode. Taught in
``notebooks/05_memmap.ipynb``; ``python -m gpufeed data memmap SRC DST`` is the command line.

On disk, ``DST/`` holds ``gpufeed-memmap.json`` (the manifest: count, shapes, dtypes, source,
classes, policy, format version) and ``data/`` (tensordict's memmap: ``meta.json`` and one raw
file per field). The build is atomic (:mod:`gpufeed.data.staging`): a killed build leaves no
``DST``, and :func:`load_memmap` refuses a folder without a valid manifest. The format's names
and its manifest reader live in :mod:`gpufeed.data.manifest`; the NumPy-only opener
(:func:`gpufeed.data.arrays.open_arrays`) and the dataset for DataLoader workers
(:class:`gpufeed.data.arrays.MemmapDataset`) in :mod:`gpufeed.data.arrays`, which starts without
tensordict.

Example:
    >>> import tempfile, pathlib
    >>> from gpufeed.measure.synth import synth_folder
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> src = synth_folder(tmp / "jpeg", n=6, size=(64, 48), classes=2, progress=False).path
    >>> r = build_memmap(src, tmp / "mm", size=(32, 32), progress=False)
    >>> data = load_memmap(tmp / "mm")
    >>> data.images.shape, data.images.dtype, data.targets.tolist()
    (torch.Size([6, 3, 32, 32]), torch.uint8, [0, 0, 0, 1, 1, 1])
    >>> data[2:4].images.shape  # a batch is a slice: one memcpy from the page cache, no decoding
    torch.Size([2, 3, 32, 32])
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tensordict import MemoryMappedTensor, tensorclass

from gpufeed.data import staging
from gpufeed.data.folder import POLICY, BadImageError, FolderError, ImageFolderDataset
from gpufeed.data.manifest import (  # noqa: F401  (the format's names, used here and re-exported)
    DATA,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MemmapError,
    data_files,
    read_manifest,
)
from gpufeed.data.progress_bar import show_progress
from gpufeed.data.staging import free_bytes  # tests point memmap.free_bytes at a tiny limit

MIN_SIDE, MAX_SIDE = 8, 16384


@tensorclass
class ImageData:
    """A batch of images and labels; the whole dataset when memory-mapped.

    Attributes:
        images: ``uint8 [N, 3, H, W]``: RGB, channels first, as torch models take them (convert
            to float on the device, lesson 03).
        targets: ``int64 [N]``: class indices, into the manifest's ``classes``.
    """

    images: torch.Tensor
    targets: torch.Tensor


@dataclass
class BuildResult:
    """What :func:`build_memmap` did: where, how many images, which were skipped, how long."""

    path: Path
    n: int
    size: tuple[int, int]
    nbytes: int
    seconds: float
    reused: bool = False
    skipped: list[dict] = field(default_factory=list)


def dataset_bytes(n: int, size: tuple[int, int]) -> int:
    """Bytes the dataset takes on disk: ``n x 3 x H x W`` (uint8 images) + ``8 n`` (int64
    targets)."""
    w, h = size
    return n * 3 * h * w + 8 * n


def _source_digest(samples: list[tuple[str, int]], root: Path) -> str:
    """A fingerprint of the source: relative paths, labels and file sizes (no reading)."""
    h = hashlib.sha256()
    for path, target in samples:
        h.update((f"{Path(path).relative_to(root).as_posix()}\t{target}\t"
                  f"{os.path.getsize(path)}\n").encode())
    return h.hexdigest()[:16]


class _Tolerant(torch.utils.data.Dataset):
    """The folder dataset, with unreadable images returned as ``(None, path, reason)`` instead of
    raised, so that one bad file neither kills a DataLoader worker nor loses the batch."""

    def __init__(self, ds: ImageFolderDataset, order: list[int] | None = None):
        self.ds, self.order = ds, order  # row i of the memmap <- image order[i] of the folder

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i):
        try:
            return self.ds[i if self.order is None else self.order[i]]
        except BadImageError as e:
            return None, e.path, e.reason


def _collate(items) -> tuple[torch.Tensor | None, torch.Tensor, list[dict]]:
    """``(images [b, 3, H, W] or None, targets [b], bad)``: the good items stacked, the bad
    listed."""
    good = [it for it in items if it[0] is not None]
    bad = [{"path": it[1], "error": it[2]} for it in items if it[0] is None]
    images = torch.stack([img for img, _ in good]) if good else None
    return images, torch.tensor([t for _, t in good], dtype=torch.int64), bad


def _check_destination(dst: Path, src: Path, overwrite: bool) -> dict | None:
    """The manifest already in ``dst`` (None if ``dst`` is new or empty); raises if ``dst`` is
    unusable: a file, inside the source, or holding anything but a memmap dataset."""
    if dst.exists() and not dst.is_dir():
        raise MemmapError(f"DST {dst} is a file; give a folder path (the folder will be created)")
    if dst == src or src in dst.parents:
        raise MemmapError(f"DST {dst} is inside SRC {src}; choose a folder outside the image "
                          "folder")
    if not dst.exists() or not any(dst.iterdir()):
        return None
    manifest = read_manifest(dst)
    if manifest is None:
        raise MemmapError(f"DST {dst} already holds files that gpufeed did not write; choose a new "
                          "folder")
    return manifest


def build_memmap(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    size: tuple[int, int] = (224, 224),
    *,
    workers: int = 1,
    skip_bad: bool = False,
    overwrite: bool = False,
    reuse: bool = False,
    progress: bool = True,
    batch_size: int = 64,
    order_seed: int | None = None,
) -> BuildResult:
    """Decodes every image of ``src`` once into a memory-mapped :class:`ImageData` at ``dst``.

    Every image is stored at ``size`` exactly (one fixed shape, so a row is found by a
    multiplication and a batch is one gather). The policy (:data:`gpufeed.data.folder.POLICY`)
    scales the short side to fit and **crops the centre**: of a 4:3 photo built square, a quarter
    of the width is gone (an eighth on each side), of a 16:9 one 44%, before any augmentation;
    a later RandomResizedCrop draws its boxes from what is left. The course chose the fixed shape
    for the one-gather batch (FFCV's ``max_resolution`` keeps the aspect ratio by storing each
    image at its own size, at the price of an offsets table and a resize of every sample when
    it is loaded). To keep more of the picture, build with the aspect ratio of most of your
    images: ``size=(299, 224)`` keeps 4:3 landscape photos whole.

    Args:
        src: an image folder, ``src/<class>/<image>``.
        dst: the destination folder; created with its parents; must be new or empty, or hold a
            memmap dataset (then see ``overwrite`` and ``reuse``).
        size: (width, height) every image is brought to by :func:`gpufeed.data.folder.fit`.
        workers: processes that decode (DataLoader workers); 1 decodes in this process.
        skip_bad: skip unreadable images (listed in the result and the manifest) instead of
            stopping.
        overwrite: replace a memmap dataset already at ``dst``.
        reuse: if ``dst`` already holds this very dataset (same source files and size), return at
            once with ``reused=True`` (what the notebooks do on a second run).
        progress: show a progress bar where someone watches (:func:`show_progress`).
        batch_size: images decoded and written per step.
        order_seed: None (the default): rows in the folder's order (class by class). An int:
            rows in a random order seeded by it (the targets go with their images), so that
            neighbouring rows are not the same class: what makes a grouped shuffle
            (``ImageLoader(..., group_size=g)``, FFCV's ``QUASI_RANDOM``) give mixed batches.

    Raises:
        MemmapError: bad arguments, an unusable source or destination, too little disk space, or
            an unreadable image (without ``skip_bad``); nothing is left behind.
    """
    w, h = int(size[0]), int(size[1])
    if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
        raise MemmapError(f"--size must be between {MIN_SIDE} and {MAX_SIDE} pixels a side (got "
                          f"{w}x{h}); try 224x224")
    src, dst = Path(src).expanduser().absolute(), Path(dst).expanduser().absolute()
    t0 = time.perf_counter()
    try:
        folder = ImageFolderDataset(src, (w, h))
    except FolderError as e:
        raise MemmapError(f"SRC: {e}") from None
    digest = _source_digest(folder.samples, src)
    # Ranks of one job building the same DST take turns: the first builds, the others then find
    # it built (reuse=True) instead of each decoding everything (README, "Under torchrun"). Where
    # nothing can be written (a dataset reused from read-only storage) there is nothing to lock.
    lock = contextlib.nullcontext()
    if not dst.parent.exists() or os.access(dst.parent, os.W_OK | os.X_OK):
        staging.prepare_parent(dst, MemmapError, "DST")
        lock = staging.locked(dst)
    with lock:
        existing = _check_destination(dst, src, overwrite)
        if existing is not None:
            same = (existing.get("source_digest") == digest and existing.get("size") == [w, h]
                    and existing.get("order_seed") == order_seed)
            if reuse and same:
                return BuildResult(dst, existing["count"], (w, h), existing["bytes"],
                                   time.perf_counter() - t0, reused=True,
                                   skipped=existing.get("skipped", []))
            if not overwrite:
                raise MemmapError(f"DST {dst} already holds a memmap dataset "
                                  f"({existing.get('count')} images from "
                                  f"{existing.get('source')}); pass --overwrite to replace it, or "
                                  "choose a new folder")
        n = len(folder)
        need = dataset_bytes(n, (w, h))
        staging.prepare_parent(dst, MemmapError, "DST")
        staging.check_space(need + (1 << 20), free_bytes(dst.parent), dst.parent, MemmapError,
                            "choose a smaller --size or another DST")
        with staging.staged(dst, MemmapError, "DST") as tmp:
            order = None if order_seed is None else _shuffled(len(folder), order_seed)
            data, skipped = _fill(folder, tmp / DATA, workers, skip_bad, progress, batch_size,
                                  order)
            manifest = {
                "format": FORMAT, "version": FORMAT_VERSION, "count": len(data),
                "images": {"shape": list(data.images.shape), "dtype": "uint8"},
                "targets": {"shape": list(data.targets.shape), "dtype": "int64"},
                "size": [w, h], "policy": POLICY, "source": str(src), "source_digest": digest,
                "classes": folder.classes, "skipped": skipped,
                "bytes": dataset_bytes(len(data), (w, h)), "tensordict": _tensordict_version(),
                "order_seed": order_seed,
            }
            del data  # unmap before the rename
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")  # written last
        return BuildResult(dst, manifest["count"], (w, h), manifest["bytes"],
                           time.perf_counter() - t0, skipped=skipped)


def _shuffled(n: int, seed: int) -> list[int]:
    """The folder's images in the random order ``seed`` gives (row i <- image ``[i]``)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


def _fill(folder: ImageFolderDataset, prefix: Path, workers: int, skip_bad: bool, progress: bool,
          batch_size: int, order: list[int] | None = None) -> tuple[ImageData, list[dict]]:
    """Preallocates the memmap at ``prefix``, fills it by slices in folder order, and returns it
    (shrunk to the good images when some were skipped) with the list of skipped files."""
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    n, (w, h) = len(folder), folder.size
    # Preallocate: memmap_like makes files of the final size from a template that only carries
    # shapes and dtypes (expanded zeros: no memory), filled below one slice at a time.
    template = ImageData(images=torch.zeros((), dtype=torch.uint8).expand(n, 3, h, w),
                         targets=torch.zeros((), dtype=torch.int64).expand(n), batch_size=[n])
    data = template.memmap_like(prefix=prefix)
    _reserve(prefix)
    loader = DataLoader(_Tolerant(folder, order), batch_size=batch_size,
                        num_workers=workers if workers > 1 else 0, collate_fn=_collate)
    skipped: list[dict] = []
    k = 0  # images written so far: bad ones leave no hole
    with tqdm(total=n, unit="img", desc=f"memmap {w}x{h}",
              disable=not show_progress(progress)) as bar:
        for images, targets, bad in loader:
            if bad and not skip_bad:
                raise MemmapError(f"cannot read image {bad[0]['path']}: {bad[0]['error']}; fix or "
                                  "remove it, or pass --skip-bad to leave unreadable images out")
            skipped += bad
            if images is not None:
                b = len(targets)
                data[k:k + b] = ImageData(images=images, targets=targets, batch_size=[b])
                k += b
            bar.update(len(targets) + len(bad))
    if k == 0:
        raise MemmapError(f"SRC {folder.root}: none of its {n} images could be read")
    if k < n:  # the good rows are rows 0..k-1: cut the files there, in place (a compacted second
        # copy would need disk space that check_space never budgeted: SIGBUS on a full disk)
        del data
        _cut(prefix, n, k)
        data = ImageData.load_memmap(prefix)
        if len(data) != k:
            raise MemmapError(f"could not shorten {prefix} to its {k} good images: tensordict "
                              f"{_tensordict_version()} stores shapes in a way this gpufeed does "
                              "not know")
    _sync(prefix)
    return data, skipped


def _cut(prefix: Path, n: int, k: int) -> None:
    """Shortens the (unmapped) memmap at ``prefix`` from ``n`` rows to its first ``k``: every raw
    file truncated to ``k`` rows, and the first dimension of the shapes tensordict keeps in its
    ``meta.json`` files set to ``k``. No byte is copied."""
    for f in prefix.rglob("*.memmap"):
        os.truncate(f, f.stat().st_size // n * k)
    for meta in prefix.rglob("meta.json"):
        doc = json.loads(meta.read_text())
        # the batch and each field
        for entry in (doc, *(v for v in doc.values() if isinstance(v, dict))):
            shape = entry.get("shape")
            if isinstance(shape, list) and shape and shape[0] == n:
                shape[0] = k
        meta.write_text(json.dumps(doc))


def _reserve(prefix: Path) -> None:
    """Allocates the disk blocks of the (sparse) memmap files now. Writing through a mapping onto a
    full disk kills the process with SIGBUS; reserving first turns that into a clean ENOSPC here."""
    if not hasattr(os, "posix_fallocate"):
        return
    for f in prefix.rglob("*.memmap"):
        fd = os.open(f, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size:
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as e:
                    # EOPNOTSUPP / EINVAL: the file system cannot; go on
                    if e.errno not in (95, 22):
                        raise
        finally:
            os.close(fd)


def _sync(prefix: Path) -> None:
    """Flushes the written pages to the disk before the manifest is written (a power cut after the
    rename must not leave a manifest in front of zeros)."""
    for f in prefix.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _tensordict_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("tensordict")
    except metadata.PackageNotFoundError:
        return None


# tensordict maps a folder's files copy-on-write on request since 0.15 (``load_memmap``'s and
# ``from_filename``'s ``mode``; 0.14's ``load_memmap`` took a ``mode`` for archives only). Before, a
# file this process may write (any file, for root) was mapped shared: :func:`_copy_on_write` then.
_TD_HAS_MODE = "mode" in inspect.signature(MemoryMappedTensor.from_filename).parameters


def _copy_on_write(t: MemoryMappedTensor) -> None:
    """Points ``t`` at a private mapping (``MAP_PRIVATE``) of its own file, in place: a write into
    it stays in this process; the file, and the page cache that other mappings share, keep their
    bytes. ``t`` keeps everything else (its file name: it still pickles as the file)."""
    storage = torch.UntypedStorage.from_file(str(t.filename), shared=False,
                                             nbytes=t.untyped_storage().nbytes())
    with torch.no_grad():
        t.set_(storage, t.storage_offset(), t.shape, t.stride())


def load_memmap(path: str | os.PathLike, *, writable: bool = False) -> ImageData:
    """Maps a dataset written by :func:`build_memmap`: an :class:`ImageData` of memory-mapped
    tensors.

    Nothing is read yet: pages come from the disk (or the page cache) when a batch touches them.
    Loading never changes the files: each one's size is checked against the manifest before it is
    mapped (:func:`gpufeed.data.manifest.data_files`), and the mapping is copy-on-write.

    Args:
        path: the dataset folder.
        writable: map the files shared, so that writes into the tensors reach the files; False
            (the default): copy-on-write, a write stays in this process's memory, whichever
            tensordict maps the files (with one older than 0.15, a dataset pickled into another
            process is mapped there as that tensordict maps it: shared where the file is
            writable; DataLoader workers take :class:`gpufeed.data.arrays.MemmapDataset`).

    Raises:
        MemmapError: ``path`` is missing, incomplete (an interrupted build), foreign, of another
            format version, or does not match its manifest (a truncated file is named, and left
            as it is).
    """
    path = Path(path).expanduser().absolute()
    rebuild = f"build it with `python -m gpufeed data memmap SRC {path}`"
    if not path.is_dir():
        partial = sorted(path.parent.glob(f".{path.name}.partial-*"))
        if partial:
            raise MemmapError(f"{path} does not exist; {partial[0].name} beside it is an "
                              f"incomplete build (interrupted, or still running): {rebuild} again")
        raise MemmapError(f"{path} does not exist; {rebuild}")
    raw = (path / MANIFEST).is_file()
    manifest = read_manifest(path)
    if manifest is None:
        what = f"its {MANIFEST} is unreadable or not gpufeed's" if raw else f"it has no {MANIFEST}"
        raise MemmapError(f"{path} is not a complete gpufeed memmap dataset ({what}): an "
                          f"incomplete build or a foreign folder; {rebuild}")
    read_manifest(path, check_version=True)  # another format version: raises, saying to rebuild
    overwrite = (f"rebuild it with `python -m gpufeed data memmap {manifest.get('source', 'SRC')} "
                 f"{path} --overwrite`")
    # a file of the wrong size: raises, naming it, before anything maps it
    data_files(path, manifest)
    mode = {"mode": "r+" if writable else "r"} if _TD_HAS_MODE else {}
    try:
        data = ImageData.load_memmap(path / DATA, **mode)
    except Exception as e:  # tensordict's own errors vary by version: say what to do in one line
        why = " ".join(f"{type(e).__name__}: {e}".split())  # one line, whatever tensordict wrote
        raise MemmapError(f"{path} is damaged or was written by another gpufeed/tensordict "
                          f"({why}); {overwrite}") from e
    if not writable and not _TD_HAS_MODE:  # an older tensordict mapped the files shared
        _copy_on_write(data.images), _copy_on_write(data.targets)
    shape = [list(data.images.shape), list(data.targets.shape)]
    if (shape != [manifest["images"]["shape"], manifest["targets"]["shape"]]
            or data.images.dtype != torch.uint8):
        raise MemmapError(f"{path} is damaged: it holds images {shape[0]} but its manifest says "
                          f"{manifest['images']['shape']}; {overwrite}")
    return data
