"""gpufeed.course.lesson06.shuffles: distinct classes per batch, checked against a by-hand count."""

import math

import torch

from gpufeed.course.lesson06.shuffles import classes_per_batch, plot_grouped
from gpufeed.data.orders import grouped_permutation, permutation


def by_hand(labels, order, batch):
    lab = labels[order].tolist()
    return sum(len(set(lab[s:s + batch])) for s in range(0, len(lab), batch)) / math.ceil(len(lab) / batch)


def test_matches_a_count_by_hand_with_and_without_a_short_last_batch():
    labels = torch.arange(50).repeat_interleave(7)  # 350 samples in class order
    for order in (permutation(350, seed=1), grouped_permutation(350, 64, seed=2), torch.arange(350)):
        for batch in (10, 32, 350):
            assert classes_per_batch(labels, order, batch) == by_hand(labels, order, batch)


def test_the_plot_has_both_storage_orders():
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_grouped(torch.arange(20).repeat_interleave(10), batch=20, groups=[8, 32])
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert [label.split(" (")[0] for label in labels] == ["stored in class order", "stored shuffled once"]
