"""A generator of the images learners' own folders contain and the course's readers must survive.

Each case is written from a real photo of the course (so the good ones hold real content) and
carries what the readers must do with it: ``convert`` (read correctly, e.g. CMYK to RGB, EXIF
orientation applied), ``error`` (a clear error naming the file, or skipped and counted under
``--skip-bad``) or ``ignore`` (not an image: never listed). The README's table of inputs and
behaviours is checked against this list (tests/test_reliability.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from gpufeed.measure.synth import SynthSpec, render


@dataclass(frozen=True)
class Case:
    """One file of the bad-input folder."""

    name: str  # file name inside its class folder
    what: str  # the row of the README table
    expect: str  # "convert", "error" or "ignore"
    size: tuple[int, int] | None = None  # (width, height) a correct reader sees, for "convert"


def photo(w: int = 96, h: int = 64, index: int = 0) -> Image.Image:
    return render(SynthSpec(n=index + 1, width=w, height=h, classes=1), index)


def jpeg_bytes(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90, **kw)
    return buf.getvalue()


CASES = [
    Case("truncated.jpg", "a truncated JPEG (the download stopped halfway)", "error"),
    Case("empty.jpg", "a zero-byte file", "error"),
    Case("notes.jpg", "a text file with a .jpg name", "error"),
    Case("gray.jpg", "a grayscale JPEG", "convert", (96, 64)),
    Case("cmyk.jpg", "a CMYK JPEG (print workflows)", "convert", (96, 64)),
    Case("rgba.png", "an RGBA PNG (transparency)", "convert", (96, 64)),
    Case("deep.png", "a 16-bit PNG", "convert", (96, 64)),
    Case("rotated.jpg", "a JPEG with an EXIF orientation tag (phone photos)", "convert", (64, 96)),
    Case("small.jpg", "a smaller image than the others (mixed sizes)", "convert", (40, 30)),
    Case("wide.png", "a wider image than the others (mixed sizes)", "convert", (200, 50)),
    Case("huge.jpg", "a very large image (8000x6000)", "convert", (8000, 6000)),
    Case("locked.jpg", "a file without read permission", "error"),
    Case(".DS_Store", "macOS folder metadata", "ignore"),
    Case("._cat.jpg", "a macOS AppleDouble file with an image name", "ignore"),
    Case(".hidden.jpg", "a hidden file", "ignore"),
]


def write_case(folder: Path, case: Case) -> Path:
    """Writes one case into ``folder``; returns its path."""
    path = folder / case.name
    good = photo()
    if case.name == "truncated.jpg":
        data = jpeg_bytes(good)
        path.write_bytes(data[: len(data) // 2])
    elif case.name == "empty.jpg":
        path.write_bytes(b"")
    elif case.name == "notes.jpg":
        path.write_text("shopping list: milk, eggs\n")
    elif case.name == "gray.jpg":
        good.convert("L").save(path, quality=90)
    elif case.name == "cmyk.jpg":
        good.convert("CMYK").save(path, quality=90)
    elif case.name == "rgba.png":
        rgba = good.convert("RGBA")
        rgba.putalpha(128)
        rgba.save(path)
    elif case.name == "deep.png":
        a = np.asarray(good.convert("L"), dtype=np.uint16) * 257  # full 16-bit range
        Image.fromarray(a).save(path)  # mode I;16
    elif case.name == "rotated.jpg":
        exif = Image.Exif()
        exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
        good.save(path, quality=90, exif=exif.tobytes())
    elif case.name == "small.jpg":
        photo(40, 30, 1).save(path, quality=90)
    elif case.name == "wide.png":
        photo(200, 50, 2).save(path)
    elif case.name == "huge.jpg":
        good.resize((8000, 6000)).save(path, quality=75)
    elif case.name == "locked.jpg":
        good.save(path, quality=90)
        path.chmod(0)
    elif case.name == ".DS_Store":
        path.write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
    elif case.name in ("._cat.jpg", ".hidden.jpg"):
        path.write_bytes(b"\x00\x05\x16\x07" + bytes(60))
    else:
        raise KeyError(case.name)
    return path


def make_folder(root: Path, cases=CASES, good: int = 4) -> Path:
    """An ImageFolder with ``good`` ordinary JPEGs in ``class_a`` and every case in ``class_b``."""
    (root / "class_a").mkdir(parents=True, exist_ok=True)
    (root / "class_b").mkdir(exist_ok=True)
    for i in range(good):
        photo(96, 64, i).save(root / "class_a" / f"{i:03d}.jpg", quality=90)
    for case in cases:
        write_case(root / "class_b", case)
    return root
