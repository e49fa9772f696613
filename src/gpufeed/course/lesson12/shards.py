"""Shards: which samples each rank reads, per epoch, with the fast loader or ``DistributedSampler``.

In data-parallel training every process (*rank*) reads its own part of each epoch: the parts must
not overlap (no sample twice per epoch), must together cover the epoch, and must change every
epoch in the same way on every rank, which a shared seed gives without any communication.
:func:`make_loader` builds a rank's loader, :func:`shard` lists what it reads, :func:`check_shards`
says whether a set of shards is disjoint and complete, :func:`plot_shards` draws who reads what
(lesson 12 and the deck, ``tools/deck_plots.py``). Used by :mod:`gpufeed.course.lesson12.distributed`; taught
in ``notebooks/12_scaling.ipynb``.

The two ways cut an epoch differently (here 10 samples, 3 ranks, no shuffle): the fast loader
gives each rank a contiguous part, ``DistributedSampler`` deals the samples out like cards and
pads with repeats so every rank gets as many (samples 0 and 1 twice):

Example:
    >>> [shard(10, r, 3, kind="fast", shuffle=False).tolist() for r in range(3)]
    [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    >>> [shard(10, r, 3, kind="sampler", shuffle=False).tolist() for r in range(3)]
    [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    >>> [shard(10, r, 3, kind="sampler", shuffle=False, drop_last=True).tolist() for r in range(3)]
    [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
"""

from __future__ import annotations

import hashlib

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from gpufeed.data.gather import BatchTensorDataset
from gpufeed.data.loader import FastLoader

#: The two ways a rank gets its shard: ``fast`` (FastLoader) and ``sampler`` (DistributedSampler).
KINDS = ("fast", "sampler")


class SamplerLoader:
    """A ``DataLoader`` that fetches whole batches: a ``BatchSampler`` over a ``DistributedSampler``
    as its sampler, ``batch_size=None`` (lesson 06). Like :class:`~gpufeed.data.loader.FastLoader`, each
    iteration moves on one epoch; ``set_epoch`` chooses it. (A bare ``DistributedSampler`` does not
    move on by itself: forget ``sampler.set_epoch(e)`` and every epoch has the same order.)"""

    def __init__(self, tensors, batch_size: int, *, rank: int = 0, world_size: int = 1, seed: int = 0,
                 drop_last: bool = False, shuffle: bool = True, pin_memory: bool = False):
        ds = BatchTensorDataset(*tensors)
        self.sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                          drop_last=drop_last)
        batches = BatchSampler(self.sampler, batch_size, drop_last=drop_last)
        self.loader = DataLoader(ds, sampler=batches, batch_size=None, pin_memory=pin_memory)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.sampler.set_epoch(self.epoch)  # the order of epoch e is randperm seeded by seed + e
        self.epoch += 1
        return iter(self.loader)


def make_loader(tensors, batch_size: int, kind: str = "fast", *, rank: int = 0, world_size: int = 1, seed: int = 0,
                drop_last: bool = False, shuffle: bool = True, device=None):
    """This rank's loader over ``tensors`` (fields sharing dim 0); batches are tuples of them.

    Args:
        kind: ``"fast"`` (:class:`~gpufeed.data.loader.FastLoader` with ``pad=False``: contiguous
            parts of the epoch's order, sizes differing by at most one; the library's default pads
            them to one size, as the sampler does) or ``"sampler"`` (:class:`SamplerLoader`:
            every ``world_size``-th sample, padded with repeats to equal sizes).
        drop_last: drop the short last batch and make every rank's shard the same size (the fast
            loader by cutting batches, the sampler by dropping the epoch's tail).
        device: a CUDA device: the batch arrives there (pinned, copied without blocking).
    """
    cuda = device is not None and torch.device(device).type == "cuda"
    if kind == "fast":
        return FastLoader(tuple(tensors), batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, rank=rank,
                          world_size=world_size, device=device if cuda else None, pad=False)
    if kind == "sampler":
        return SamplerLoader(tensors, batch_size, rank=rank, world_size=world_size, seed=seed, drop_last=drop_last,
                             shuffle=shuffle, pin_memory=cuda)
    raise ValueError(f"--loader must be one of {KINDS} (got {kind!r})")


def shard(n: int, rank: int, world_size: int, epoch: int = 0, *, kind: str = "fast", seed: int = 0,
          batch_size: int = 1, drop_last: bool = False, shuffle: bool = True) -> torch.Tensor:
    """The indices (``int64 [k]``) that ``rank`` reads in ``epoch`` of ``n`` samples, in its order:
    what its :func:`make_loader` yields, batch after batch."""
    loader = make_loader((torch.arange(n),), batch_size, kind, rank=rank, world_size=world_size, seed=seed,
                         drop_last=drop_last, shuffle=shuffle)
    loader.set_epoch(epoch)
    got = [batch[-1] for batch in loader]
    return torch.cat(got) if got else torch.empty(0, dtype=torch.int64)


def digest(indices) -> str:
    """A short fingerprint of an index sequence (order matters): equal digests, equal shards."""
    return hashlib.sha256(torch.as_tensor(indices, dtype=torch.int64).numpy().tobytes()).hexdigest()[:16]


def check_shards(shards, n: int) -> dict:
    """How ``shards`` (one index sequence per rank) cover ``range(n)``: ``{"n", "read",
    "covered", "duplicates", "disjoint", "complete"}``. ``read`` counts every index read,
    ``covered`` the distinct ones, ``duplicates`` the reads beyond the first of a sample.

    Example:
        >>> check_shards([[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]], 10)["duplicates"]
        2
    """
    counts = torch.zeros(n, dtype=torch.int64)
    for s in shards:
        counts += torch.bincount(torch.as_tensor(s, dtype=torch.int64), minlength=n)
    return coverage(counts)


def coverage(counts: torch.Tensor) -> dict:
    """The summary of :func:`check_shards` from how many times each sample was read (``[n]``):
    what :mod:`gpufeed.course.lesson12.distributed` computes after summing every rank's counts with an all-reduce."""
    read, covered = int(counts.sum()), int((counts > 0).sum())
    return {"n": len(counts), "read": read, "covered": covered, "duplicates": read - covered,
            "disjoint": read == covered, "complete": covered == len(counts)}


def plot_shards(n: int, world_size: int, epochs: int, kinds=KINDS, *, batch_size: int = 1, seed: int = 0,
                titles: dict | None = None, figsize=None):
    """Which rank reads which sample, epoch by epoch: one panel per kind of loader.

    Each cell is a sample (x) in an epoch (y), coloured by the rank that reads it; a black dot
    marks a sample read twice in that epoch. With ``batch_size > 1`` each cell is labelled with the
    batch it lands in on its rank (``b0``, ``b1``, ...). Drawn from :func:`shard`, i.e. from the
    loaders themselves. Returns ``(fig, axes)`` (a list, one axis per kind).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from gpufeed.measure.plotting import COLORS

    titles = {"fast": "FastLoader", "sampler": "DistributedSampler", **(titles or {})}
    colors = [COLORS[c] for c in ("copy", "read", "collate", "decode", "compute", "pin")][:world_size]
    fig, axes = plt.subplots(1, len(kinds), figsize=figsize or (4.5 * len(kinds), 0.5 + 0.7 * epochs),
                             sharey=True, squeeze=False)
    axes = list(axes[0])
    for ax, kind in zip(axes, kinds):
        for epoch in range(epochs):
            shards = [shard(n, r, world_size, epoch, kind=kind, seed=seed, batch_size=batch_size)
                      for r in range(world_size)]
            counts = np.bincount(np.concatenate([s.numpy() for s in shards]), minlength=n)
            for r, s in enumerate(shards):
                for pos, i in enumerate(s.tolist()):
                    ax.add_patch(plt.Rectangle((i, epoch), 0.9, 0.8, color=colors[r]))
                    if batch_size > 1:  # the batch this sample lands in on rank r
                        ax.text(i + 0.45, epoch + 0.4, f"b{pos // batch_size}", ha="center", va="center",
                                fontsize=7, color="white")
            dup = np.flatnonzero(counts > 1)
            ax.plot(dup + 0.45, [epoch + 0.4] * len(dup), "ko", ms=5)
        ax.set_xlim(0, n)
        ax.set_ylim(epochs, 0)
        ax.set_xlabel("sample index" + (" (b: the batch it lands in on its rank)" if batch_size > 1 else ""))
        ax.set_title(titles.get(kind, kind))
        ax.grid(False)
    axes[0].set_ylabel("epoch")
    axes[0].set_yticks([e + 0.4 for e in range(epochs)], range(epochs))
    axes[-1].legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors],
                    labels=[f"rank {r}" for r in range(world_size)], loc="upper left", bbox_to_anchor=(1, 1))
    return fig, axes
