"""How random a shuffle is: distinct classes per batch, for lesson 06's grouped shuffle.

A grouped shuffle (:func:`gpufeed.data.orders.grouped_permutation`) is cheap, but a batch then comes
from one or two blocks of neighbouring samples. Where neighbours share a class (a dataset stored
class by class, as an image folder is), a batch holds few classes. :func:`classes_per_batch`
counts them; :func:`plot_grouped` draws the count against the block size, for data stored in class
order and stored shuffled once. ``notebooks/06_batched.ipynb`` and the deck
(``tools/deck_plots.py``) both call them.

Example:
    >>> labels = torch.arange(4).repeat_interleave(3)  # 4 classes x 3 samples, in class order
    >>> classes_per_batch(labels, torch.arange(12), batch=3)  # in order: one class per batch
    1.0
    >>> classes_per_batch(labels, torch.tensor([0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]), batch=4)
    4.0
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gpufeed.data.orders import grouped_permutation, permutation


def classes_per_batch(labels: torch.Tensor, order: torch.Tensor, batch: int) -> float:
    """Mean number of distinct labels per batch when ``labels`` (``[N]``) are read in ``order``
    (``int64 [N]``) in batches of ``batch`` (a short last batch counts as one batch too)."""
    lab = labels[order]
    full = len(lab) // batch * batch
    rows = lab[:full].view(-1, batch).sort(dim=1).values  # [batches, batch]; sorted: a new class = a step
    counts = (1 + (rows.diff(dim=1) != 0).sum(dim=1)).tolist()
    if full < len(lab):
        counts.append(len(set(lab[full:].tolist())))
    return sum(counts) / len(counts)


def plot_grouped(labels: torch.Tensor, batch: int, groups: Sequence[int], *, seed: int = 123, ax=None):
    """Distinct classes per batch against the grouped shuffle's block size, for ``labels`` stored as
    given (class order) and stored shuffled once (with ``seed``); a full shuffle in the legend.
    Returns the figure."""
    import matplotlib.pyplot as plt

    from gpufeed.measure import plotting

    stored = {"stored in class order": labels, "stored shuffled once": labels[permutation(len(labels), seed=seed)]}
    fig, ax = plt.subplots(figsize=(9, 3.4)) if ax is None else (ax.figure, ax)
    for (name, lab), color in zip(stored.items(), (plotting.COLORS["compute"], plotting.COLORS["copy"])):
        full = classes_per_batch(lab, permutation(len(lab)), batch)
        ys = [classes_per_batch(lab, grouped_permutation(len(lab), g), batch) for g in groups]
        ax.plot(groups, ys, "o-", color=color, label=f"{name} (full shuffle: {full:.0f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("group size g of the grouped shuffle (indices)")
    ax.set_ylabel("distinct classes per batch")
    classes = len(labels.unique())
    ax.set_title(f"{classes} classes x {len(labels) // classes} samples, batches of {batch}", loc="left", fontsize=10)
    ax.legend()
    return fig
