"""Which JPEG library each decoder runs, where the time of a decode goes, and decoding smaller.

Pillow's wheels and torchvision's both ship libjpeg-turbo (:func:`libraries` reads which version
each one loaded), so a gap between ``decode_pil`` and ``decode_torchvision`` is not the decoder's:
:func:`decoder_arms` times Pillow's decode alone, then with the copy out of Pillow's own buffer
(``np.asarray``), then as the course's :func:`gpufeed.data.jpeg.decode_pil` does it (with the extra
copy of ``convert("RGB")``), beside torchvision, all in turns (:func:`decode_in_turns`), so the
verdict method can say which step the gap is in. :func:`decode_draft` decodes at a half, a quarter
or an eighth of the size (libjpeg's DCT scaling, Pillow's ``draft()``), against a full decode then a
resize (:func:`decode_then_resize`). Taught in ``notebooks/04_jpeg.ipynb``.

Example:
    >>> from gpufeed.measure.synth import SynthSpec, encode_jpeg, render
    >>> data = encode_jpeg(render(SynthSpec(n=1, width=128, height=96), 0), 90)
    >>> decode_draft(data, (32, 24)).shape, decode_then_resize(data, (32, 24)).shape
    (torch.Size([3, 24, 32]), torch.Size([3, 24, 32]))
    >>> {"pil", "torchvision", DECODE_ONLY, WITH_ASARRAY} <= set(decoder_arms([data]))  # and torchcodec, if installed
    True
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from gpufeed.data import jpeg
from gpufeed.measure.harness import Measurement, interleave

_TURBO = re.compile(rb"libjpeg-turbo version ([0-9][0-9.]*)")
#: The arms of :func:`decoder_arms`, from the least work to the course's decode.
DECODE_ONLY, WITH_ASARRAY = "Pillow: decode only", "Pillow: decode + asarray"


def _loaded_libjpegs() -> list[Path]:
    """The libjpeg files this process has mapped (Linux's ``/proc/self/maps``); [] elsewhere."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    found = {line.split()[-1] for line in lines if re.search(r"/libjpeg[^/]*\.(so|dylib)", line)}
    return sorted(Path(p) for p in found if Path(p).is_file())


def library_of(path: Path) -> str:
    """What a libjpeg file is: ``"libjpeg-turbo 3.1.3"`` where it carries libjpeg-turbo's version
    string, else ``"libjpeg (not libjpeg-turbo)"``."""
    found = _TURBO.search(path.read_bytes())
    return f"libjpeg-turbo {found.group(1).decode()}" if found else "libjpeg (not libjpeg-turbo)"


def torchvision_library() -> str | None:
    """The JPEG library torchvision's CPU decoder loaded: the libjpeg it mapped from its own folder
    (its wheels ship one in ``torchvision.libs``), else one shipped beside it; None where none is found.

    Example:
        >>> lib = torchvision_library()
        >>> lib is None or lib.startswith("libjpeg")
        True
    """
    import torchvision

    jpeg.decode_torchvision(_tiny_jpeg())  # loads the image extension and its libjpeg
    home = Path(torchvision.__file__).parent
    mine = [p for p in _loaded_libjpegs() if str(p).startswith(str(home))]  # torchvision/, torchvision.libs/
    if not mine:  # not mapped where we can see (macOS, Windows): the copy shipped beside the package
        mine = sorted(p for d in (home.parent / "torchvision.libs", home / ".dylibs", home)
                      for p in d.glob("libjpeg*") if p.is_file())
    return library_of(mine[0]) if mine else None


def libraries() -> dict[str, str | None]:
    """Which JPEG library Pillow and torchvision each decode with (None where it cannot be read).

    Pillow says so itself (``PIL.features``); torchvision is read from the library it loaded
    (:func:`torchvision_library`).
    """
    from PIL import features

    pillow = (f"libjpeg-turbo {features.version_feature('libjpeg_turbo')}" if features.check_feature("libjpeg_turbo")
              else f"libjpeg {features.version('jpg')} (not libjpeg-turbo)" if features.version("jpg") else None)
    return {"Pillow": pillow, "torchvision": torchvision_library()}


def _tiny_jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (120, 30, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def pillow_decode_only(data: bytes):
    """Pillow's decode and nothing else: the pixels land in Pillow's own buffer (4 bytes per pixel
    for RGB), not in an array; returns the image."""
    from PIL import Image

    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def pillow_asarray(data: bytes) -> np.ndarray:
    """Pillow's decode, then one copy out of its buffer into a ``uint8 [H, W, 3]`` array."""
    return np.asarray(pillow_decode_only(data))


def decoder_arms(jpegs: Sequence[bytes]) -> dict[str, Callable[[], object]]:
    """Callables that decode every one of ``jpegs``: each decoder installed
    (:func:`gpufeed.data.jpeg.available_decoders`: ``pil``, the course's ``decode_pil``, which adds
    ``convert("RGB")``, a copy of its own; ``torchvision``; ``torchcodec`` where installed), and the
    steps of the gap between Pillow and torchvision: Pillow's decode alone, then with the copy out
    (``np.asarray``)."""
    steps = {DECODE_ONLY: lambda: [pillow_decode_only(b) for b in jpegs],
             WITH_ASARRAY: lambda: [pillow_asarray(b) for b in jpegs]}
    return steps | {name: (lambda d=decode: [d(b) for b in jpegs]) for name, decode in jpeg.available_decoders().items()}


def decode_in_turns(jpegs: Sequence[bytes], arms: dict[str, Callable[[], object]], size: str, repeats: int = 5,
                    threads: int = 1, device: str = "cpu") -> list[Measurement]:
    """Times ``arms`` (each decodes all of ``jpegs``) in turns on ``threads`` torch threads (one: the
    rate of one core, as a DataLoader worker gets it). Names are ``"<arm> <size>"``; ``params``
    hold ``size``, ``decoder`` (the arm), ``device`` (where the arms decode) and ``threads``;
    ``items`` is the number of images.

    Example:
        >>> from gpufeed.measure.synth import SynthSpec, encode_jpeg, render
        >>> data = [encode_jpeg(render(SynthSpec(n=1, width=32, height=32), 0), 90)]
        >>> ms = decode_in_turns(data, decoder_arms(data), "32x32", repeats=2)
        >>> [m.name for m in ms][-1], ms[-1].params["decoder"], torch.get_num_threads() > 0
        ('torchvision 32x32', 'torchvision', True)
    """
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return interleave({f"{name} {size}": fn for name, fn in arms.items()}, repeats=repeats, warmup=1,
                          items=len(jpegs), desc=f"{len(arms)} decoders in turns, {size}",
                          params={f"{name} {size}": {"size": size, "decoder": name, "device": device, "threads": threads}
                                  for name in arms})
    finally:
        torch.set_num_threads(old)


def decode_draft(data: bytes, size: tuple[int, int]) -> torch.Tensor:
    """A JPEG decoded straight to ``size`` (width, height) or near it: Pillow's ``draft()`` asks
    libjpeg to scale by 1/2, 1/4 or 1/8 *while decoding* (it skips the detail it would throw away),
    to the smallest scale still at least ``size``; a resize makes up the rest. ``uint8 [3, H, W]``."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.draft("RGB", size)
        if im.size != tuple(size):
            im = im.resize(size, Image.BILINEAR)
        a = np.asarray(im)
    return torch.from_numpy(a.copy()).permute(2, 0, 1)


def decode_then_resize(data: bytes, size: tuple[int, int]) -> torch.Tensor:
    """A JPEG decoded whole, then resized to ``size`` (bilinear, Pillow): what a pipeline that
    decodes first and shrinks later pays. ``uint8 [3, H, W]``."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        a = np.asarray(im.convert("RGB").resize(size, Image.BILINEAR))
    return torch.from_numpy(a.copy()).permute(2, 0, 1)


def draft_arms(jpegs: Sequence[bytes], size: tuple[int, int]) -> dict[str, Callable[[], object]]:
    """Two ways to get ``jpegs`` at ``size``: straight from the decoder (:func:`decode_draft`) and a full
    decode then a resize (:func:`decode_then_resize`), each a callable over all of them."""
    return {"draft": lambda: [decode_draft(b, size) for b in jpegs],
            "full + resize": lambda: [decode_then_resize(b, size) for b in jpegs]}


def mean_difference(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> float:
    """Mean absolute difference in grey levels of pairs of uint8 images (on any device), averaged
    over the pairs.

    Example:
        >>> a = torch.zeros(3, 2, 2, dtype=torch.uint8)
        >>> mean_difference([a, a], [a + 2, a + 4])
        3.0
    """
    return sum(float((x.cpu().float() - y.cpu().float()).abs().mean()) for x, y in zip(xs, ys)) / len(xs)


def draft_difference(jpegs: Sequence[bytes], size: tuple[int, int]) -> float:
    """:func:`mean_difference` of :func:`decode_draft` and :func:`decode_then_resize` of the same JPEGs."""
    return mean_difference([decode_draft(b, size) for b in jpegs], [decode_then_resize(b, size) for b in jpegs])

