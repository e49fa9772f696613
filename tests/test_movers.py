import collections

import pytest
import torch

from gpufeed.data.memmap import ImageData
from gpufeed.data.movers import (
    DetectionDataset,
    as_tensordict,
    detection_collate,
    equal,
    leaves,
    pin,
    plain,
    to_device,
    tree_map,
)

Pair = collections.namedtuple("Pair", "x y")


def detection_batch(n=4, size=16):
    ds = DetectionDataset(n, size=size, max_boxes=5)
    return detection_collate([ds[i] for i in range(n)])


def optree_or_skip():
    return pytest.importorskip("optree", reason="optree is not installed (optional)")


def pytree_to(obj, device, non_blocking=False):  # lesson 07's torch.utils._pytree way, written out as there
    from torch.utils import _pytree

    return _pytree.tree_map(lambda x: x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x, obj)


def optree_to(obj, device, non_blocking=False):  # lesson 07's optree way
    import optree

    return optree.tree_map(lambda x: x.to(device, non_blocking=non_blocking) if isinstance(x, torch.Tensor) else x,
                           obj, none_is_leaf=True)


MOVERS = {"recursive": to_device, "pytree": pytree_to, "optree": optree_to}


@pytest.mark.parametrize("name", MOVERS)
def test_every_mover_keeps_structure_and_values(name):
    if name == "optree":
        optree_or_skip()
    batch = {**detection_batch(), "pair": Pair(torch.ones(2), 3), "meta": ("a", None, 1.5)}
    moved = MOVERS[name](batch, "cpu", non_blocking=False)
    assert equal(moved, batch)
    assert isinstance(moved["pair"], Pair) and moved["meta"] == ("a", None, 1.5)
    assert [t.shape for t in leaves(moved)] == [t.shape for t in leaves(batch)]


def test_tensordict_form_moves_and_holds_the_same_values():
    batch = detection_batch()
    td = as_tensordict(batch)
    assert td.batch_size == torch.Size([4])
    assert equal(plain(td.to("cpu")), batch) and equal(plain(td.consolidate().to("cpu")), batch)
    assert len(leaves(td)) == len(leaves(batch)) == 1 + 3 * 4


def test_leaves_of_a_tensorclass_and_tree_map_on_it():
    data = ImageData(images=torch.zeros(2, 3, 4, 4, dtype=torch.uint8), targets=torch.arange(2), batch_size=[2])
    assert [t.dtype for t in leaves(data)] == [torch.uint8, torch.int64]
    out = tree_map(lambda t: t.float() if t.dtype == torch.uint8 else t, data)
    assert type(out) is ImageData and out.images.dtype == torch.float32 and out.targets.dtype == torch.int64


def test_equal_sees_differences_in_values_dtypes_and_structure():
    batch = detection_batch()
    other = detection_batch()
    assert equal(batch, other)
    other["targets"][2]["labels"] = other["targets"][2]["labels"] + 1
    assert not equal(batch, other)
    assert not equal({"a": torch.ones(1)}, {"a": torch.ones(1, dtype=torch.float64)})
    assert not equal({"a": torch.ones(1)}, {"b": torch.ones(1)})
    assert not equal([torch.ones(1)], (torch.ones(1),))
    assert not equal([torch.ones(1)], [torch.ones(1), torch.ones(1)])


def test_detection_dataset_is_deterministic_and_its_boxes_are_valid():
    ds = DetectionDataset(10, size=32, max_boxes=6, classes=5)
    for i in range(10):
        image, target = ds[i]
        again = ds[i]
        assert equal((image, target), again)
        boxes = target["boxes"]
        assert image.shape == (3, 32, 32) and image.dtype == torch.uint8
        assert 1 <= len(boxes) <= 6 and boxes.shape[1] == 4 and len(target["labels"]) == len(boxes)
        assert (boxes[:, 0] <= boxes[:, 2]).all() and (boxes[:, 1] <= boxes[:, 3]).all()
        assert boxes.min() >= 0 and boxes.max() <= 32 and target["labels"].max() < 5
        assert int(target["image_id"]) == i
    assert len({len(ds[i][1]["boxes"]) for i in range(10)}) > 1  # box counts differ
    with pytest.raises(IndexError):
        ds[10]
    with pytest.raises(ValueError, match="DetectionDataset"):
        DetectionDataset(0)


def test_pin_and_move_to_the_gpu_and_back(on_cuda):
    batch = detection_batch()
    pinned = pin(batch)
    assert all(t.is_pinned() for t in leaves(pinned)) and equal(pinned, batch)
    for mover in (to_device, pytree_to):
        moved = mover(pinned, "cuda", non_blocking=True)
        torch.cuda.synchronize()
        assert all(t.is_cuda for t in leaves(moved)) and equal(moved, batch)
    moved = as_tensordict(batch).consolidate(pin_memory=True).to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert equal(plain(moved), batch)


class Encoding(collections.UserDict):
    """Hugging Face's BatchEncoding is a UserDict with attributes of its own."""

    def __init__(self, data=None, n_sequences=1):
        super().__init__(data)
        self.n_sequences = n_sequences


def test_mappings_of_every_kind_are_walked_and_come_back_as_they_were():
    from types import MappingProxyType

    enc = Encoding({"input_ids": torch.ones(2, 5, dtype=torch.long), "mask": [torch.ones(2, 5)]}, n_sequences=2)
    ordered = collections.OrderedDict(w=torch.ones(2))
    ordered._metadata = {"": {"version": 2}}  # a module's state_dict carries its version here
    batch = {"enc": enc, "state": ordered, "ro": MappingProxyType({"x": torch.zeros(1)}), "pair": Pair(torch.ones(1), 2)}
    for walked in (to_device(batch, "cpu"), tree_map(lambda t: t + 1, batch)):
        assert type(walked["enc"]) is Encoding and walked["enc"].n_sequences == 2 and walked["enc"] is not enc
        assert type(walked["state"]) is collections.OrderedDict and walked["state"]._metadata == ordered._metadata
        assert type(walked["ro"]) is dict and type(walked["pair"]) is Pair  # a read-only mapping becomes a dict
    assert len(leaves(batch)) == 5 and equal(plain(to_device(batch, "cpu")), plain(batch))
    assert enc["input_ids"].sum() == 10  # tree_map left the original alone


def test_batch_size_reads_a_tensordict_or_the_first_tensor():
    from gpufeed.data.movers import batch_size

    images = ImageData(images=torch.zeros(3, 3, 4, 4, dtype=torch.uint8), targets=torch.zeros(3), batch_size=[3])
    assert batch_size(images) == 3 and batch_size(Encoding({"ids": torch.zeros(5, 2)})) == 5
    assert batch_size({"scalar": torch.tensor(1.0), "x": torch.zeros(7)}) == 7 and batch_size(("a", 1)) is None
