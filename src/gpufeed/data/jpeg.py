"""JPEG decoding with the decoders a learner is likely to have: Pillow, torchvision, TorchCodec.

All decoders take the file's bytes (already in memory, so that decode time is not disk time) and
return a ``uint8`` tensor ``[3, H, W]`` (channels first, as torchvision models expect). The CPU
decoders' tensors are views of the decoder's own pixels, which are interleaved (``[H, W, 3]`` in
memory, strides ``(1, 3 W, 3)``): no copy is made to change the layout. :func:`collate_images`
stacks such views into a batch without transposing them; ``torch.stack`` transposes every image
to ``[3, H, W]`` in memory as it copies (``notebooks/02_profiling.ipynb``, section 8, times both).

torchvision 0.29+ deprecates its ``torchvision.io`` image decoders in favour of TorchCodec
(``torchcodec.decoders.decode_jpeg``, public since TorchCodec 0.16; earlier releases decode only
video and audio); :func:`decode_jpeg` uses TorchCodec where it has ``decode_jpeg`` and falls back
to torchvision otherwise, so course code keeps working on both. Taught in
``notebooks/00_setup.ipynb`` (decode speed per core) and ``notebooks/04`` (decoders compared).

Example:
    >>> from gpufeed.measure.synth import SynthSpec, render, encode_jpeg
    >>> data = encode_jpeg(render(SynthSpec(n=1, width=64, height=48), 0), quality=90)
    >>> decode_pil(data).shape, decode_pil(data).dtype
    (torch.Size([3, 48, 64]), torch.uint8)
    >>> "pil" in available_decoders() and "torchvision" in available_decoders()
    True
    >>> (decode_torchvision(data).float() - decode_pil(data).float()).abs().mean().item() < 2.0
    True
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import torch


def decode_pil(data: bytes) -> torch.Tensor:
    """Pillow (libjpeg-turbo inside its wheels) to ``uint8 [3, H, W]``."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        a = np.array(im.convert("RGB"))  # [H, W, 3], writable (torch warns on read-only arrays)
    return torch.from_numpy(a).permute(2, 0, 1)  # a view: no copy, just strides (1, 3W, 3)


def collate_images(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stacks decoded images into one ``uint8 [B, 3, H, W]`` batch, copying each image once without
    transposing it.

    The decoders here return views of interleaved pixels (``[H, W, 3]`` in memory). ``torch.stack``
    makes a batch contiguous in ``[B, 3, H, W]`` order, so it transposes every pixel as it copies: a
    strided copy several times slower than a plain one. This stacks the pixels as they lie, into a
    batch in ``torch.channels_last`` memory format: the same shape and values as ``torch.stack``,
    NHWC in memory, which convolutions take as they are (and on a GPU with Tensor Cores, prefer).
    The copy runs on the calling thread: torch would split a batch this size over its intra-op
    threads, and on a busy machine wait for the slowest (8 images of 224x224 on 2 busy cores: a
    mean of 1.3 ms with torch's two threads, 0.2 ms on one). Images that are not such views
    (contiguous ``[3, H, W]`` tensors, say, or on a GPU) go to ``torch.stack``.

    Args:
        images: ``uint8 [3, H, W]`` tensors of one shape, e.g. from :func:`decode_pil`.

    Returns:
        ``[B, 3, H, W]``, equal to ``torch.stack(images)``; channels-last when every image was a
        view of interleaved pixels. Taught in ``notebooks/01_bottlenecks.ipynb`` (the naive loop's
        collate) and ``notebooks/02_profiling.ipynb`` (section 8 times it against ``torch.stack``).

    Example:
        >>> from gpufeed.measure.synth import SynthSpec, render, encode_jpeg
        >>> spec = SynthSpec(n=2, width=32, height=24)
        >>> views = [decode_pil(encode_jpeg(render(spec, i), 90)) for i in range(2)]
        >>> batch, naive = collate_images(views), torch.stack(views)
        >>> tuple(batch.shape), torch.equal(batch, naive)
        ((2, 3, 24, 32), True)
        >>> batch.is_contiguous(memory_format=torch.channels_last), naive.is_contiguous()
        (True, True)
    """
    if not images:
        raise ValueError("collate_images needs at least one image")
    if all(t.dim() == 3 and t.shape[0] > 1 and t.device.type == "cpu"
           and t.permute(1, 2, 0).is_contiguous() for t in images):
        # one plain copy of each image's pixels into [B, H, W, C], seen as [B, C, H, W]; numpy
        # copies on this thread, where torch would split it over its threads and wait for the last
        hwc = np.stack([t.permute(1, 2, 0).numpy() for t in images])
        return torch.from_numpy(hwc).permute(0, 3, 1, 2)
    return torch.stack(list(images))


def _tv_decode():
    from torchvision.io import decode_jpeg

    return decode_jpeg


def decode_torchvision(data: bytes, device: str = "cpu") -> torch.Tensor:
    """``torchvision.io.decode_jpeg`` (libjpeg-turbo on CPU, nvJPEG with ``device="cuda"``)."""
    with warnings.catch_warnings():
        # 0.29+ points to TorchCodec
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        return _tv_decode()(torch.frombuffer(bytearray(data), dtype=torch.uint8), device=device)


@lru_cache(maxsize=1)
def _torchcodec_decode() -> Callable | None:
    """TorchCodec's JPEG decoder, or None when TorchCodec is missing or older than 0.16 (no
    ``decode_jpeg``)."""
    try:
        from torchcodec.decoders import decode_jpeg
    except Exception:  # ImportError, or a RuntimeError when FFmpeg's libraries are absent
        return None
    return decode_jpeg


def decode_torchcodec(data: bytes, device: str = "cpu") -> torch.Tensor:
    """TorchCodec's ``decode_jpeg``; raises ImportError with a hint when it is not installed."""
    fn = _torchcodec_decode()
    if fn is None:
        raise ImportError("TorchCodec is not usable here: `pip install torchcodec` (it needs "
                          "FFmpeg's libraries)")
    return fn(torch.frombuffer(bytearray(data), dtype=torch.uint8), device=device)


def decode_jpeg(data: bytes, device: str = "cpu") -> torch.Tensor:
    """The current recommended decoder: TorchCodec where it works, torchvision.io otherwise."""
    if _torchcodec_decode() is not None:
        return decode_torchcodec(data, device)
    return decode_torchvision(data, device)


def decode_batch(datas: list[bytes], device: str = "cpu") -> list[torch.Tensor]:
    """Decodes many JPEGs in one call of ``torchvision.io.decode_jpeg(list, device=...)``.

    On CUDA the list goes to nvJPEG's batched decoder, which decodes the whole batch with few
    kernel launches instead of one call per image. On the CPU it equals a loop. Returns
    ``uint8 [3, H, W]`` tensors on ``device``.

    Raises:
        RuntimeError: ``device`` is CUDA and this machine has none.

    Example:
        >>> from gpufeed.measure.synth import SynthSpec, render, encode_jpeg
        >>> datas = [encode_jpeg(render(SynthSpec(n=2, width=32, height=24), i), 90)
        ...          for i in range(2)]
        >>> [tuple(t.shape) for t in decode_batch(datas)]
        [(3, 24, 32), (3, 24, 32)]
    """
    if not datas:
        raise ValueError("decode_batch needs at least one JPEG")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("decode_batch(device='cuda') needs a CUDA GPU; use device='cpu' here")
    from torchvision.io import ImageReadMode

    # inputs stay on the CPU
    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    with warnings.catch_warnings():
        # 0.29+ points to TorchCodec
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        return _tv_decode()(tensors, mode=ImageReadMode.RGB, device=device)


def available_decoders() -> dict[str, Callable[[bytes], torch.Tensor]]:
    """Name to CPU decode function, for every decoder that works on this machine."""
    found = {"pil": decode_pil}
    try:
        _tv_decode()
        found["torchvision"] = decode_torchvision
    except ImportError:
        pass
    if _torchcodec_decode() is not None:
        found["torchcodec"] = decode_torchcodec
    return found


def pillow_uses_turbo() -> bool | None:
    """Whether Pillow was built with libjpeg-turbo (the fast libjpeg); None if Pillow cannot say."""
    from PIL import features

    try:
        return bool(features.check_feature("libjpeg_turbo"))
    except (ValueError, KeyError):  # Pillow < 9 does not know the feature
        return None


def decode_replicated_chroma(data: bytes) -> torch.Tensor:
    """A 4:2:0 JPEG decoded as libjpeg-turbo does with fancy upsampling off: ``uint8 [3, H, W]``.

    Pillow (libjpeg-turbo) interpolates the half-resolution colour planes ("fancy upsampling", a
    triangle filter: 3/4 of the nearer chroma sample, 1/4 of the farther, in each direction).
    Without it each chroma sample is repeated over its 2x2 pixels. nvJPEG does that too unless
    its handle is created with ``NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION`` (DALI turns it on,
    NVIDIA/DALI#4662; torchvision's ``decode_jpeg(device="cuda")`` passes
    ``NVJPEG_FLAGS_DEFAULT``), so this is what the GPU's image is expected to be. Built from
    libjpeg-turbo's own planes: luma at full size, the chroma planes at their native half size
    (a 1/2-scale decode gives them with no upsampling, ``Image.draft``), repeated, then libjpeg's
    fixed-point YCbCr to RGB (``jdcolor.c``, 16 fraction bits). It matches libjpeg-turbo's
    ``do_fancy_upsampling = FALSE`` bit for bit (checked with simplejpeg's ``fastupsample=True``
    on four sizes, 17x33 to 640x480).

    Raises:
        ValueError: the JPEG is not 4:2:0 (Pillow's default): other layouts are not modelled.

    Example:
        >>> from gpufeed.measure.synth import SynthSpec, encode_jpeg, render
        >>> data = encode_jpeg(render(SynthSpec(n=1, width=32, height=24), 0), 90)
        >>> nearest, fancy = decode_replicated_chroma(data), decode_pil(data)
        >>> difference = (nearest.float() - fancy.float()).abs().mean().item()
        >>> nearest.shape == fancy.shape and 0 < difference < 5
        True
    """
    from PIL import Image, JpegImagePlugin

    def planes(size):  # int64 [H, W, 3]: Y, Cb, Cr as libjpeg-turbo decodes them, not converted
        im = Image.open(io.BytesIO(data))
        if JpegImagePlugin.get_sampling(im) != 2:
            raise ValueError("decode_replicated_chroma models 4:2:0 JPEGs only (Pillow's default "
                             "subsampling); this one is not")
        im.draft("YCbCr", size)
        return np.asarray(im).astype(np.int64)

    y = planes(None)[..., 0]
    h, w = y.shape
    chroma = planes((w // 2, h // 2))[..., 1:]  # native half-size planes (1/2-scale decode)
    cb, cr = np.moveaxis(chroma.repeat(2, 0).repeat(2, 1)[:h, :w] - 128, -1, 0)
    fix = lambda v: int(v * (1 << 16) + 0.5)  # noqa: E731  libjpeg's FIX(), SCALEBITS = 16
    half = 1 << 15
    rgb = [y + ((fix(1.40200) * cr + half) >> 16),
           y + ((-fix(0.34414) * cb - fix(0.71414) * cr + half) >> 16),
           y + ((fix(1.77200) * cb + half) >> 16)]
    return torch.from_numpy(np.clip(np.stack(rgb), 0, 255).astype(np.uint8))
