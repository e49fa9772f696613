"""The real photos that every generated dataset is cut from (``assets/photos/``, with licences).

Real photos rather than noise, because JPEG size, decode time and compression error all depend on
image content: noise compresses badly and flat colour too well. Their sources and licences
(public domain or CC0) are listed in ``assets/photos/LICENSES.md``.

Example:
    >>> names = [p.name for p in photo_paths()]
    >>> "astronaut.png" in names and len(names) >= 5
    True
    >>> load_photo(photo_paths()[0]).mode
    'RGB'
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from gpufeed import config

SUFFIXES = (".jpg", ".jpeg", ".png")


def photos_dir() -> Path:
    """The folder of photos: inside the installed wheel, or ``assets/photos`` of the checkout."""
    packaged = Path(__file__).with_name("_photos")  # where the wheel puts them (pyproject.toml)
    if packaged.is_dir():
        return packaged
    root = config.repo_root()
    if root is not None and (root / "assets" / "photos").is_dir():
        return root / "assets" / "photos"
    raise FileNotFoundError(
        "gpufeed's photos are missing: reinstall gpufeed, or run from a checkout of the course"
    )


def photo_paths() -> list[Path]:
    """The photos, sorted by name so that a seed always means the same choice of photo."""
    return sorted(p for p in photos_dir().iterdir() if p.suffix.lower() in SUFFIXES)


@lru_cache(maxsize=16)
def load_photo(path: Path):
    """One photo as an RGB PIL image (cached: the generator cuts hundreds of crops from each)."""
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")
