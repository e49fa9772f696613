"""Tensors saved on one device, loaded on another: ``torch.load(f, map_location=...)`` (lesson 07).

(Every ``torch.load`` here passes ``weights_only=True``: a file of tensors needs no pickled code.)

``torch.save`` writes each storage's bytes with the device it was on (its *location*, such as
``"cuda:0"``), and ``torch.load`` puts each one back there unless ``map_location`` says otherwise:
without a GPU, a GPU machine's file loads only with it. :func:`save_as_on` writes a file as a
machine with a given device would, on any machine: where the device exists, by moving the tensors
there first; where it does not (no GPU here), by recording that location for each storage, which
is all that differs in the file (a tagger registered once with
``torch.serialization.register_package``, active only inside the call). :func:`load_ways` times
``torch.load`` with ``map_location=device`` against a plain ``torch.load`` and then moving the
nest.

Example:
    >>> import tempfile
    >>> path = save_as_on({"x": torch.arange(3)}, Path(tempfile.mkdtemp()) / "f.pt", "cuda:0")
    >>> torch.load(path, map_location="cpu", weights_only=True)["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from pathlib import Path

import torch

from gpufeed.data.movers import equal, leaves, to_device
from gpufeed.measure.harness import Measurement, interleave

_recording: list[str] = []  # the location save_as_on is writing, while it runs
_registered: list[bool] = []


def _tag(storage) -> str | None:
    """torch.save's location for a CPU storage while :func:`save_as_on` records another; else None
    (torch then asks its own taggers: "cpu", "cuda:0", ...)."""
    return _recording[-1] if _recording and storage.device.type == "cpu" else None


def _no_restore(storage, location):
    """Loading is left to torch's own deserializers (None: not ours)."""
    return None


def save_as_on(obj, path: str | Path, device) -> Path:
    """Writes ``obj`` (tensors, or a nest of them) with ``torch.save`` as a machine would whose
    tensors are on ``device`` (``"cpu"`` or ``"cuda:N"``); returns the path.

    Where ``device`` exists the tensors are moved there and saved; where it does not, each storage
    is saved with ``device`` as its location, so the file is what a machine with it writes.

    Raises:
        ValueError: ``device`` is neither the CPU nor a CUDA device.
    """
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"save_as_on({str(device)!r}): only 'cpu' and 'cuda:N' devices are written")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    here = device.type == "cpu" or (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count())
    if here:
        torch.save(to_device(obj, device), path)
        return path
    if not _registered:  # before the CPU's own tagger (priority 10); it answers only while recording
        torch.serialization.register_package(0, _tag, _no_restore)
        _registered.append(True)
    _recording.append(f"cuda:{device.index or 0}")
    try:
        torch.save(obj, path)
    finally:
        _recording.pop()
    return path


def load_ways(path: str | Path, device, repeats: int = 5) -> tuple[list[Measurement], bool]:
    """``torch.load`` with ``map_location=device`` against a plain ``torch.load`` then
    :func:`gpufeed.data.movers.to_device`, timed in turns, in seconds per load of the whole file.

    Both are first checked to give the same tensors. Returns the two Measurements (in that order)
    and whether moving returned the very tensors it was given (True where the file's tensors are
    on ``device`` already, as a CPU file is on the CPU: then the move is no copy at all).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "f.pt"
        >>> torch.save({"x": torch.zeros(4, 3)}, path)
        >>> (by_map, then_move), same = load_ways(path, "cpu", repeats=2)
        >>> by_map.name, then_move.name, same, by_map.nbytes == path.stat().st_size
        ("torch.load(f, weights_only=True, map_location='cpu')", 'torch.load(f, weights_only=True), then .to(device)', True, True)
    """
    device = torch.device(device)

    def by_map():
        return torch.load(path, map_location=device, weights_only=True)

    def then_move():
        return to_device(torch.load(path, weights_only=True), device)

    if not equal(by_map(), then_move()):
        raise AssertionError(f"{path}: map_location and load-then-move gave different tensors")
    loaded = torch.load(path, weights_only=True)
    same = all(a is b for a, b in zip(leaves(to_device(loaded, device)), leaves(loaded)))
    names = {f"torch.load(f, weights_only=True, map_location={str(device)!r})": by_map,
             "torch.load(f, weights_only=True), then .to(device)": then_move}
    ms = interleave(names, repeats=repeats, warmup=1, desc="torch.load: map_location vs load, then move")
    for m in ms:
        m.nbytes = Path(path).stat().st_size
        m.params.update(device=str(device), file_bytes=m.nbytes)
    return ms, same
