"""Sample orders: which samples an epoch visits, in what order, the same for the same seed.

* :func:`seeded_generator`: a CPU ``torch.Generator`` from a tuple of ints (``seed, epoch, rank``),
  nearby keys giving unrelated streams.
* :func:`permutation`: a full shuffle of ``range(n)`` for ``(seed, epoch)``.
* :func:`grouped_permutation`: a grouped shuffle (blocks of neighbours in a random order, each
  shuffled within itself), cheaper for large ``n``; :func:`grouped_chunks` makes any part of it one
  block at a time, so each rank computes only its own part.
* :func:`segments`: a part of an order read around and around (the padding of a sharded epoch).

:class:`gpufeed.data.loader.FastLoader` draws its epochs from these. Taught in
``notebooks/06_batched.ipynb``; lesson 12 seeds its ranks with :func:`seeded_generator`.

Example:
    >>> torch.equal(permutation(5, seed=0, epoch=1), permutation(5, seed=0, epoch=1))
    True
    >>> sorted(permutation(5, seed=0, epoch=1).tolist())
    [0, 1, 2, 3, 4]
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch


def _seed(*key: int) -> int:
    """A 63-bit seed from a tuple of ints (seed, epoch) via NumPy's SeedSequence, which spreads
    nearby keys far apart: (0, 1) and (1, 0) give unrelated streams."""
    return int(np.random.SeedSequence([k & 0xFFFFFFFF for k in key])
               .generate_state(1, np.uint64)[0] >> 1)


def seeded_generator(*key: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from a tuple of ints, e.g. ``(seed, epoch, rank)``."""
    return torch.Generator().manual_seed(_seed(*key))


def permutation(n: int, seed: int = 0, epoch: int = 0) -> torch.Tensor:
    """A random order of ``range(n)`` (``int64 [n]``), the same for the same ``(seed, epoch)``."""
    return torch.randperm(n, generator=seeded_generator(seed, epoch))


def grouped_permutation(n: int, group: int, seed: int = 0, epoch: int = 0) -> torch.Tensor:
    """A grouped shuffle of ``range(n)``: blocks of ``group`` neighbouring indices in a random
    order, each block shuffled within itself.

    Cheaper than :func:`permutation` for large ``n`` (each block's shuffle fits in the CPU cache,
    and a loader can make the blocks one at a time), and reads stay within one region of the file
    at a time. The price is randomness: a batch holds samples from only a few blocks, so samples
    stored near each other (e.g. the same class, in a folder-ordered dataset) land in the same
    batches. Store the data in a random order once, at build time, before relying on it.

    Example:
        >>> p = grouped_permutation(12, group=4, seed=0)
        >>> sorted(p.tolist()) == list(range(12))  # every index once
        True
        >>> len({i // 4 for i in p[:4].tolist()})  # the first 4 all come from one block
        1
    """
    return torch.cat(list(grouped_chunks(n, group, seed, epoch, 0, n)))


def grouped_chunks(n: int, group: int, seed: int, epoch: int, lo: int,
                   hi: int) -> Iterator[torch.Tensor]:
    """Positions ``lo..hi-1`` of :func:`grouped_permutation`'s order, one block at a time. Each
    block is shuffled by its own generator (seed, epoch, block), so every rank computes only the
    blocks it needs.

    Example:
        >>> part = torch.cat(list(grouped_chunks(12, 4, seed=0, epoch=0, lo=2, hi=9)))
        >>> torch.equal(part, grouped_permutation(12, 4, seed=0, epoch=0)[2:9])
        True
    """
    base = _seed(seed, epoch)
    blocks = torch.randperm(math.ceil(n / group),
                            generator=torch.Generator().manual_seed(base)).tolist()
    gen = torch.Generator()
    pos = 0  # position in the global order where the current block starts
    for b in blocks:
        start, length = b * group, min(group, n - b * group)
        if pos + length > lo and pos < hi:
            # block b's own stream: any rank can make it alone
            gen.manual_seed((base + b + 1) % 2**63)
            order = start + torch.randperm(length, generator=gen)
            yield order[max(0, lo - pos):hi - pos]
        pos += length
        if pos >= hi:
            return


def segments(lo: int, hi: int, n: int) -> Iterator[tuple[int, int]]:
    """Positions ``lo..hi-1`` of an order of ``n`` read around and around: ``[a, b)`` runs within
    ``0..n``.

    Example:
        >>> list(segments(4, 12, 5))
        [(4, 5), (0, 5), (0, 2)]
    """
    while lo < hi:
        a = lo % n
        b = min(n, a + hi - lo)
        yield a, b
        lo += b - a
