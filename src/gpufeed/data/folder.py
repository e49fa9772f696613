"""A folder of images (ImageFolder layout) as a Dataset, with the course's one resize policy.

``root/<class>/<image>`` holds the images; classes are the sorted sub-folder names, images are
sorted by name within a class. Each item is ``(image, target)``: ``uint8 [3, H, W]`` and an int.
Every image is brought to the same size by :func:`fit`, the *resize policy*: convert to RGB,
resize so that the image covers the target with the short side fitting exactly (Pillow's
antialiased bilinear filter), then crop the centre. :mod:`gpufeed.data.memmap` builds its dataset
with this very dataset, so a memmap and the folder it came from hold the same pixels.

It is the *baseline* of ``notebooks/05_memmap.ipynb``: a DataLoader with workers that open,
decode and resize one JPEG per ``__getitem__``. It lives here, not in a notebook, because
DataLoader workers must be able to pickle it.

Example:
    >>> import tempfile, pathlib
    >>> from gpufeed.measure.synth import synth_folder
    >>> src = synth_folder(pathlib.Path(tempfile.mkdtemp()) / "jpeg", n=4, size=(64, 48),
    ...                    classes=2, progress=False).path
    >>> ds = ImageFolderDataset(src, size=(32, 32))
    >>> len(ds), ds.classes
    (4, ['class_00', 'class_01'])
    >>> image, target = ds[3]
    >>> image.shape, image.dtype, target
    (torch.Size([3, 32, 32]), torch.uint8, 1)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

#: File name endings read as images (lower case); anything else in a class folder is ignored.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".ppm", ".tif", ".tiff")

#: The resize policy in words, recorded in every memmap manifest.
POLICY = ("RGB; resize so the short side fits the target (Pillow bilinear, antialiased), keeping "
          "the aspect ratio; crop the centre")


class FolderError(ValueError):
    """The folder is missing or not in ImageFolder layout; the message says what to do."""


class BadImageError(ValueError):
    """An image file could not be read; the message names the file."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"cannot read image {path}: {reason}; replace or remove the file "
                         "(the memmap build can skip such files with --skip-bad)")
        self.path, self.reason = path, reason

    def __reduce__(self):  # raised in DataLoader workers: must survive pickling with its fields
        return type(self), (self.path, self.reason)


def to_rgb(img):
    """Any PIL image as the RGB picture a person sees, which is what a model should get.

    * EXIF orientation applied (phone photos are stored sideways with a tag saying so);
    * 16-bit images scaled to 8 bits (Pillow's own conversion clips them: almost all white);
    * greyscale, palette and CMYK converted; RGBA and LA lose their alpha channel (the colours
      stored under it are kept, as torchvision's decoders do).

    Example:
        >>> import numpy as np
        >>> from PIL import Image
        >>> deep = Image.fromarray(np.full((2, 2), 32896, dtype=np.uint16))  # mid-grey in 16 bits
        >>> to_rgb(deep).getpixel((0, 0))
        (128, 128, 128)
    """
    from PIL import Image, ImageOps

    img = ImageOps.exif_transpose(img)  # a no-op without an orientation tag
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(img, dtype=np.float64)
        top = 65535.0 if img.mode.startswith("I;16") or a.max(initial=0) > 255 else 255.0
        img = Image.fromarray(np.clip(a * (255.0 / top) + 0.5, 0, 255).astype(np.uint8), "L")
    return img if img.mode == "RGB" else img.convert("RGB")


def fit(img, size: tuple[int, int]):
    """The resize policy: a PIL image of exactly ``size`` (width, height), in RGB.

    The scale is the larger of the two side ratios, so the resized image covers the target and
    only one side is cropped (for a square target: the short side becomes the target side).
    An image that already has the target size is returned untouched (no resampling).

    Example:
        >>> from PIL import Image
        >>> (fit(Image.new("L", (400, 300)), (224, 224)).size,
        ...  fit(Image.new("RGB", (400, 300)), (224, 224)).mode)
        ((224, 224), 'RGB')
    """
    from PIL import Image

    w, h = size
    img = to_rgb(img)
    iw, ih = img.size
    if (iw, ih) == (w, h):
        return img
    scale = max(w / iw, h / ih)
    nw, nh = max(w, round(iw * scale)), max(h, round(ih * scale))
    if (nw, nh) != (iw, ih):
        # Pillow widens the filter when shrinking, so this is antialiased (no aliasing moire).
        img = img.resize((nw, nh), Image.BILINEAR)
    left, top = (nw - w) // 2, (nh - h) // 2
    return img.crop((left, top, left + w, top + h))


def load_image(path: str | os.PathLike, size: tuple[int, int]) -> torch.Tensor:
    """Opens, decodes and :func:`fit` s one image file: ``uint8 [3, H, W]``.

    Raises:
        BadImageError: the file is not a readable image (the message names it).
    """
    from PIL import Image

    try:
        with Image.open(path) as img:
            img = fit(img, size)  # decodes here
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as e:
        raise BadImageError(str(path), str(e) or type(e).__name__) from None
    hwc = torch.from_numpy(np.array(img))  # [H, W, 3], a writable copy of Pillow's buffer
    return hwc.permute(2, 0, 1).contiguous()  # [3, H, W]: the layout torch models take


def scan(root: str | os.PathLike) -> tuple[list[tuple[str, int]], list[str]]:
    """``(samples, classes)`` of an ImageFolder tree: ``samples`` is ``[(path, class index), ...]``.

    Hidden entries (names starting with ``.``) and files at the top level are ignored.

    Raises:
        FolderError: ``root`` is missing, has no class folders, or holds no images.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FolderError(f"{root} is not a folder; give the root of an image folder "
                          "(root/<class>/<image>.jpg)")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise FolderError(f"{root} has no class folders; the layout must be "
                          f"{root}/<class>/<image>.jpg")
    samples = []
    for c, name in enumerate(classes):
        for entry in sorted(os.scandir(root / name), key=lambda e: e.name):
            if (entry.is_file() and not entry.name.startswith(".")
                    and entry.name.lower().endswith(IMAGE_EXTENSIONS)):
                samples.append((entry.path, c))
    if not samples:
        raise FolderError(f"{root} holds no images ({', '.join(IMAGE_EXTENSIONS)}) in its class "
                          "folders")
    return samples, classes


class ImageFolderDataset(Dataset):
    """Map-style dataset over an ImageFolder tree; item ``i`` is ``(uint8 [3, H, W], int)``.

    Args:
        root: the folder, ``root/<class>/<image>``.
        size: (width, height) every image is brought to by :func:`fit`.
    """

    def __init__(self, root: str | os.PathLike, size: tuple[int, int] = (224, 224)):
        self.root = Path(root).expanduser()
        self.size = (int(size[0]), int(size[1]))
        self.samples, self.classes = scan(self.root)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, target = self.samples[i]
        return load_image(path, self.size), target

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.samples]


def drop_cached(paths) -> bool:
    """Asks the OS to forget the cached pages of every file in ``paths`` (a folder: every file in
    it).

    The next read then comes from the disk, which is how lesson 05 measures a *cold* cache.
    Pages that a process has memory-mapped stay cached: drop a memmap dataset before loading it.
    Returns False where the OS has no ``posix_fadvise`` (macOS, Windows).
    """
    if isinstance(paths, (str, os.PathLike)) and Path(paths).is_dir():
        paths = [p for p in Path(paths).rglob("*") if p.is_file()]
    elif isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return all([drop_page_cache(p) for p in paths])


def drop_page_cache(path: str | Path) -> bool:
    """Asks the OS to forget ``path``'s cached pages, so the next read comes from the disk.

    Uses ``posix_fadvise(POSIX_FADV_DONTNEED)``, which needs no root. Returns False where the OS
    has no such call (macOS, Windows). Some file systems (network, overlay, virtual machine
    shares) may keep the data cached anyway: compare cold and warm times to see what happened.
    """
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd) if os.access(path, os.W_OK) else None  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True
