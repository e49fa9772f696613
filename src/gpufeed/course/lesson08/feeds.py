"""The arms of lesson 08's fair test: the model, the loader that feeds it and the three feeds.

``notebooks/08_prefetch.ipynb``, section 5 (:mod:`gpufeed.course.lesson08.overlap` times them).
The feeds start from a loader that does its host work per batch, as
:class:`gpufeed.data.loader.FastLoader` does (:func:`feeding_loader`), epoch after epoch
(:class:`Epochs`): the copy on the default stream (:func:`copied`), on CUDA a side stream in the
loop (apex's ``data_prefetcher``), and the library's prefetcher (:func:`sources` makes each once).

Example:
    >>> sum(p.numel() for p in convnet(4).parameters())  # conv 3->4, conv 4->4, linear 4->10
    310
    >>> prefetched_name("cpu")
    'ThreadPrefetcher'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from gpufeed.course.instrument import train_step
from gpufeed.course.lesson08.hazards import hand_prefetch
from gpufeed.data.loader import FastLoader
from gpufeed.data.movers import leaves, to_device
from gpufeed.data.prefetch import prefetch, prepare

#: The variant without a prefetcher.
PLAIN = "copy on the default stream"

#: apex's prefetcher: the side stream, its host work in the loop.
IN_LOOP = "side stream in the loop"


def convnet(width: int, num_classes: int = 10) -> nn.Module:
    """The section's model, on normalised float images ``[B, 3, H, W]``: the wider, the slower."""
    return nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1), nn.ReLU(),  # [B, w, H/2, W/2]
                         nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))


def model_steps(device, num_classes: int = 10) -> Callable[[int, bool], Callable]:
    """``make_step(width, sync)`` for :func:`plan`: a fresh :func:`convnet` on ``device`` and its
    SGD step (:func:`gpufeed.course.instrument.train_step`), reading its loss every step if ``sync``."""
    return lambda width, sync: train_step(convnet(width, num_classes).to(device), sync=sync)


def prefetched_name(device) -> str:
    """The prefetcher :func:`gpufeed.data.prefetch.prefetch` picks for ``device``."""
    return "CudaPrefetcher" if torch.device(device).type == "cuda" else "ThreadPrefetcher"


def synchronizer(device) -> Callable[[], None]:
    """A function that waits for everything queued on ``device`` (nothing to wait for on a CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def nbytes(batch) -> int:
    """Bytes in the tensors of a batch of any structure."""
    return sum(t.numel() * t.element_size() for t in leaves(batch))


def feeding_loader(images: torch.Tensor, labels: torch.Tensor, batch_size: int, device) -> FastLoader:
    """The arms' loader: ``images`` (``uint8 [N, 3, H, W]``) and ``labels`` (``[N]``) in memory,
    shuffled, each batch's rows gathered per batch and, for a GPU, into pinned memory (what a
    ``DataLoader(pin_memory=True)`` hands over, made by :class:`~gpufeed.data.loader.FastLoader`)."""
    return FastLoader((images, labels), batch_size, shuffle=True, seed=0, drop_last=True,
                      pin_memory=torch.device(device).type == "cuda")


class Epochs:
    """``loader``'s epochs one after another, without end: each ``iter()`` is a new pass that asks
    the loader for a new epoch whenever one ends (a list of batches is cycled)."""

    def __init__(self, loader: Iterable):
        self.loader = loader

    def __iter__(self):
        while True:
            yield from self.loader


def copied(loader: Iterable, device, dtype=None, mean=None, std=None):
    """The plain loop's feed: ``loader``'s batches (:class:`Epochs`), each copied to ``device`` on the
    current stream (``non_blocking``: from pinned memory the host does not wait) and converted
    there; the loader's own host work runs in the loop."""
    for batch in Epochs(loader):
        yield prepare(to_device(batch, device, non_blocking=True), dtype, mean, std)


def sources(loader: Iterable, device, dtype=None, mean=None, std=None,
            depth: int = 1) -> dict[str, Callable[[], Iterable]]:
    """The arms (:data:`PLAIN`, :data:`IN_LOOP` on CUDA, the prefetcher), each a function that
    starts a new pass of an endless feed of converted batches from ``loader`` (a
    :func:`feeding_loader`, or a list of batches). Each arm is made once here, with its one side
    stream, and every pass reuses it."""
    device = torch.device(device)

    def convert(batch):
        return prepare(batch, dtype, mean, std)

    feeds = {PLAIN: lambda: copied(loader, device, dtype, mean, std)}
    if device.type == "cuda":
        side = torch.cuda.Stream(device)  # the in-loop prefetcher's one side stream, every run
        feeds[IN_LOOP] = lambda: hand_prefetch(Epochs(loader), device, convert=convert, stream=side)
    prefetcher = prefetch(Epochs(loader), device, dtype, mean, std, depth=depth)
    feeds[prefetched_name(device)] = lambda: iter(prefetcher)  # one prefetcher, a pass a run
    return feeds
