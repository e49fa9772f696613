"""Moving nested batches to a device: dicts and other mappings (``UserDict``, Hugging Face's
``BatchEncoding``), lists, tuples and named tuples of tensors, TensorDicts, tensorclasses.

A detection batch is not one tensor: it is ``{"images": uint8 [B, 3, H, W], "targets": [{"boxes":
float32 [n_i, 4], "labels": int64 [n_i], "image_id": int64 []}, ...]}``, one dict per image with
its own number of boxes ``n_i``. ``batch.to(device)`` does not exist for such a thing, so something
has to walk the structure and move every tensor it finds. ``notebooks/07_dataloader.ipynb``
(section 3) compares the ways: a hand-written recursive function (:func:`to_device`),
``torch.utils._pytree.tree_map`` and optree's where installed (written out in the lesson),
and ``TensorDict.to`` (after :func:`as_tensordict`). :mod:`gpufeed.data.prefetch` uses
:func:`to_device`, :func:`tree_map`, :func:`leaves` and :func:`pin` on whatever batches it is given,
and :func:`gpufeed.measure.diagnose` walks a learner's batches with them (:func:`batch_size` too).

A mapping comes back as the kind it was: a ``dict`` as a ``dict``; a ``dict`` subclass
(``OrderedDict``, a ``state_dict`` with its ``_metadata``) or a ``UserDict`` copied and refilled,
so its type and attributes stay; a read-only ``Mapping`` as a ``dict``.

:class:`DetectionDataset` and :func:`detection_collate` make such batches; they live here, not
in a notebook, because DataLoader workers must be able to import them (lesson 07, section 4).

Example:
    >>> batch = detection_collate([DetectionDataset(4, size=16)[i] for i in range(2)])
    >>> sorted(batch), batch["images"].shape, sorted(batch["targets"][0])
    (['images', 'targets'], torch.Size([2, 3, 16, 16]), ['boxes', 'image_id', 'labels'])
    >>> moved = to_device(batch, "cpu")
    >>> equal(moved, batch), len(leaves(batch))  # 1 images tensor + 2 images x 3 target tensors
    (True, 7)
    >>> equal(plain(as_tensordict(batch)), batch)  # the TensorDict form holds the same values
    True
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, MutableMapping

import torch
from torch.utils.data import Dataset


def _tensordict_kind(obj) -> str | None:
    """``"tensorclass"``, ``"lazy"`` (a lazy stack), ``"tensordict"``, or None (not
    tensordict's)."""
    td = sys.modules.get("tensordict")  # not imported: obj cannot be one of its types
    if td is None:
        return None
    if td.is_tensorclass(obj):
        return "tensorclass"
    if isinstance(obj, td.LazyStackedTensorDict):
        return "lazy"
    return "tensordict" if isinstance(obj, td.TensorDictBase) else None


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _mapping(obj: Mapping, items) -> Mapping:
    """A mapping of ``obj``'s kind holding ``items``, ``(key, value)`` pairs (module docstring)."""
    if type(obj) is dict:
        return dict(items)
    if isinstance(obj, MutableMapping):  # a dict subclass, a UserDict: its type and attributes kept
        new = copy.copy(obj)
        for k, v in items:
            new[k] = v
        return new
    return dict(items)


def to_device(obj, device, non_blocking: bool = False):
    """The hand-written recursive mover: every tensor in ``obj`` moved to ``device``.

    Mappings, lists, tuples and named tuples are rebuilt with their moved contents; TensorDicts and
    tensorclasses move themselves (one call for all their leaves); anything else (ints, strings,
    None) is returned as it is. ``device`` keeps its index (``"cuda:1"``).

    Example:
        >>> to_device({"x": torch.ones(2), "meta": [1, "a", (torch.zeros(1),)]}, "cpu")
        {'x': tensor([1., 1.]), 'meta': [1, 'a', (tensor([0.]),)]}
        >>> from collections import UserDict
        >>> to_device(UserDict(ids=torch.zeros(1, dtype=torch.long)), "cpu")
        {'ids': tensor([0])}
    """
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if _tensordict_kind(obj) is not None:
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, Mapping):
        return _mapping(obj, ((k, to_device(v, device, non_blocking)) for k, v in obj.items()))
    if _is_namedtuple(obj):
        return type(obj)(*(to_device(v, device, non_blocking) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device, non_blocking) for v in obj)
    return obj


def tree_map(fn, obj):
    """``fn(tensor)`` applied to every tensor leaf of ``obj``, the structure rebuilt around the
    results.

    TensorDicts and tensorclasses are mapped leaf by leaf with their own ``apply`` (their leaves
    must keep their shape). Use it for dtype conversions; to change device use :func:`to_device`.

    Example:
        >>> tree_map(lambda t: t * 2, (torch.ones(2), {"k": torch.arange(3)}, "label"))
        (tensor([2., 2.]), {'k': tensor([0, 2, 4])}, 'label')
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if _tensordict_kind(obj) is not None:
        return obj.apply(fn)
    if isinstance(obj, Mapping):
        return _mapping(obj, ((k, tree_map(fn, v)) for k, v in obj.items()))
    if _is_namedtuple(obj):
        return type(obj)(*(tree_map(fn, v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map(fn, v) for v in obj)
    return obj


def leaves(obj) -> list[torch.Tensor]:
    """Every tensor in ``obj``, depth first (a TensorDict's too, lazy stacks of unequal shapes
    included).

    Example:
        >>> [t.tolist() for t in leaves({"a": torch.tensor([1]), "b": [torch.tensor([2]), 3]})]
        [[1], [2]]
    """
    kind = _tensordict_kind(obj)
    if isinstance(obj, torch.Tensor):
        return [obj]
    if kind == "tensorclass":
        return leaves(obj._tensordict)
    if kind == "lazy":  # its leaves may differ in shape: walk the stacked tensordicts one by one
        return [t for td in obj.tensordicts for t in leaves(td)]
    if kind == "tensordict" or isinstance(obj, Mapping):
        return [t for v in obj.values() for t in leaves(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in leaves(v)]
    return []


def batch_size(obj) -> int | None:
    """The number of samples in a batch: a TensorDict's or tensorclass's first batch dimension, else
    the first dimension of its first tensor (:func:`leaves`); None when it holds no tensor with one.

    Example:
        >>> batch_size({"images": torch.zeros(4, 3, 8, 8)}), batch_size([1, "a"])
        (4, None)
    """
    if _tensordict_kind(obj) is not None and len(obj.batch_size):
        return int(obj.batch_size[0])
    first = next((t for t in leaves(obj) if t.ndim), None)
    return None if first is None else int(first.shape[0])


def pin(obj):
    """``obj`` with every CPU tensor in page-locked (pinned) memory; pinned ones are kept as they
    are.

    Pinning copies the data once into memory the GPU can read by DMA; needs CUDA.
    """
    kind = _tensordict_kind(obj)
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_cuda or obj.is_pinned() else obj.pin_memory()
    if kind is not None:
        return obj if all(t.is_cuda or t.is_pinned() for t in leaves(obj)) else obj.pin_memory()
    if isinstance(obj, Mapping):
        return _mapping(obj, ((k, pin(v)) for k, v in obj.items()))
    if _is_namedtuple(obj):
        return type(obj)(*(pin(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(pin(v) for v in obj)
    return obj


def as_tensordict(batch: dict):
    """A detection batch as a TensorDict of batch size ``[B]``: the targets become a lazy stack of
    one TensorDict per image (lazy, because their numbers of boxes differ).

    A dataset that produces TensorDicts from the start pays this conversion in its workers, never
    in the training loop; the notebook times ``.to`` on the result, not the conversion.
    """
    from tensordict import LazyStackedTensorDict, TensorDict

    targets = LazyStackedTensorDict.lazy_stack([TensorDict(t, batch_size=[])
                                                for t in batch["targets"]], 0)
    return TensorDict({"images": batch["images"], "targets": targets},
                      batch_size=[len(batch["targets"])])


def plain(obj):
    """``obj`` with TensorDicts, tensorclasses and other mappings turned into dicts (a lazy
    stack: a list of them), so that :func:`equal` can compare any form of a batch with the plain
    one."""
    kind = _tensordict_kind(obj)
    if kind == "tensorclass":
        return plain(obj._tensordict)
    if kind == "lazy":
        return [plain(td) for td in obj.tensordicts]
    if kind == "tensordict" or isinstance(obj, Mapping):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return (type(obj)(plain(v) for v in obj) if not _is_namedtuple(obj)
                else type(obj)(*(plain(v) for v in obj)))
    return obj


def equal(a, b) -> bool:
    """Same structure, same dtypes, same values (tensors compared on the CPU, wherever they live).

    Example:
        >>> (equal({"a": [torch.ones(2)]}, {"a": [torch.ones(2)]}),
        ...  equal([torch.ones(2)], [torch.ones(2).int()]))
        (True, False)
    """
    a, b = plain(a), plain(b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(equal(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return a == b


class DetectionDataset(Dataset):
    """Synthetic detection samples: ``(uint8 [3, size, size], {"boxes", "labels", "image_id"})``.

    Each image gets between 1 and ``max_boxes`` boxes (``float32 [n, 4]``, x1 y1 x2 y2 in pixels)
    and as many labels; everything is derived from the index, so item ``i`` is always the same.

    Args:
        n: number of samples.
        size: image side in pixels.
        max_boxes: the most boxes an image has.
        classes: label values are below this.
    """

    def __init__(self, n: int, size: int = 64, max_boxes: int = 8, classes: int = 80):
        if n < 1 or size < 2 or max_boxes < 1:
            raise ValueError("DetectionDataset: need n >= 1, size >= 2 and max_boxes >= 1 (got "
                             f"{n}, {size}, {max_boxes})")
        self.n, self.size, self.max_boxes, self.classes = n, size, max_boxes, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(f"DetectionDataset: index {i} out of range for {self.n} samples")
        g = torch.Generator().manual_seed(i)
        image = torch.randint(0, 256, (3, self.size, self.size), dtype=torch.uint8, generator=g)
        k = int(torch.randint(1, self.max_boxes + 1, (), generator=g))
        # [k, 2 corners, xy]
        corners = torch.rand(k, 2, 2, generator=g).mul_(self.size).sort(dim=1).values
        boxes = corners.transpose(1, 2).reshape(k, 4)[:, [0, 2, 1, 3]]  # x1 y1 x2 y2
        labels = torch.randint(0, self.classes, (k,), generator=g)
        return image, {"boxes": boxes, "labels": labels, "image_id": torch.tensor(i)}


def detection_collate(samples):
    """Stacks the images, keeps one target dict per image (their box counts differ): the batch
    ``{"images": uint8 [B, 3, H, W], "targets": [dict, ...]}``, as detection models take it."""
    return {"images": torch.stack([img for img, _ in samples]), "targets": [t for _, t in samples]}
