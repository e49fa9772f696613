"""What comes back from a GPU node: the files of ``$OUT``, each written as soon as it exists.

The device tool returns only the top-level files of ``$OUT``, each at most 16 MiB; a run cut off by
the slot's end returns what ``$OUT`` held then. So ``$OUT`` holds at most :data:`NAMES` (8 files):
the archive of the run folder, kept under :data:`ARCHIVE_CAP` (what does not fit is left out, the
least useful first, and ``run.json`` and ``summary.txt`` name it), and beside it, so that nothing
needs unpacking to read the verdict, ``run.json``, the one-screen ``summary.txt``, the node-env log
and the junit files. ``make node-env`` writes its log there before the run starts, and ``run.json``
and ``summary.txt`` where it fails (:func:`failed_early`), so a run that dies there still returns why.

Standard library only: ``tools/wheelhouse.py node-env`` runs it with the node's own python, before
anything is installed.

Example:
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> failed_early(out, "node-env", "node-env: the wheels are for Python 3.12, this is 3.11", ["..."])
    >>> sorted(p.name for p in out.iterdir())
    ['run.json', 'summary.txt']
    >>> print((out / "summary.txt").read_text().splitlines()[0])
    test-gpu: FAILED in node-env: node-env: the wheels are for Python 3.12, this is 3.11
"""

from __future__ import annotations

import json
import os
import tarfile
import textwrap
import time
import zlib
from pathlib import Path

ARCHIVE = "gpu-run.tar.gz"
#: Every file ``$OUT`` may hold (the device tool returns at most 8).
NAMES = (ARCHIVE, "run.json", "summary.txt", "node-env.log", "cuda.xml", "csan.xml", "quick.xml", "references.xml")
#: The archive's size at most (the tool returns files up to 16 MiB; this leaves room for a bad estimate).
ARCHIVE_CAP = 12 * 2**20
#: A log copied to ``$OUT`` keeps its last this many bytes (the end says why it stopped).
TEXT_CAP = 4 * 2**20
#: One screen.
SCREEN_LINES, SCREEN_COLUMNS = 24, 100


def put(out: Path | None, name: str, data: str | bytes) -> None:
    """Writes ``out/name`` whole or not at all (a temporary file renamed): a slot that ends while
    it writes leaves the previous version. Nothing where ``out`` is None."""
    if out is None:
        return
    if name not in NAMES:
        raise ValueError(f"{name}: $OUT holds only {', '.join(NAMES)}")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.tmp"
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.replace(out / name)


def put_file(out: Path | None, name: str, src: Path, cap: int = TEXT_CAP) -> None:
    """Copies ``src`` to ``out/name``; over ``cap`` bytes, its last ``cap`` bytes under a line that says so."""
    if out is None or not src.is_file():
        return
    size = src.stat().st_size
    if size <= cap:
        put(out, name, src.read_bytes())
        return
    with open(src, "rb") as f:
        f.seek(size - cap)
        tail = f.read()
    put(out, name, f"[the first {size - cap} of {size} bytes left out]\n".encode() + tail)


def failed_early(out: Path | None, step: str, line: str, log_tail: list[str]) -> None:
    """``run.json`` and ``summary.txt`` for a run that stopped in ``step`` before the run proper
    (``make node-env``): the line that says why, and the end of its log."""
    if out is None:
        return
    doc = {"format": "gpufeed-gpu-run", "version": 3, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "failed_in": step, "steps": [{"name": step, "step": step, "status": "failed", "summary": line}]}
    put(out, "run.json", json.dumps(doc, indent=1) + "\n")
    head = textwrap.wrap(f"test-gpu: FAILED in {step}: {line}", SCREEN_COLUMNS, break_on_hyphens=False)[:8]
    tail = [x[:SCREEN_COLUMNS] for x in log_tail if x.strip() and x.strip() != line.strip()]
    put(out, "summary.txt", "\n".join([*head, "", *tail[-(SCREEN_LINES - len(head) - 1):]]) + "\n")


#: The archive's contents by value, most useful first: what is left out is taken from the end.
RANKS = (
    lambda p: p.name in ("run.json", "references.json") or p.parts[0] in ("junit",) or p.suffix in (".txt",),
    lambda p: p.parts[0] == "logs" and p.suffix == ".json",
    lambda p: p.parts[0] == "results" and len(p.parts) > 2,  # the references made
    lambda p: p.parts[0] == "logs",
    lambda p: p.parts[0] == "executed" and p.parts[1] != "quick",  # the references' notebooks
    lambda p: p.parts[0].startswith("results-"),
    lambda p: True,  # executed/quick/: the quick notebooks with their figures
)


def rank(rel: Path) -> int:
    """Where a file of the run folder (a path relative to it) stands in :data:`RANKS`.

    Example:
        >>> [rank(Path(p)) for p in ("results/h200/run.json", "results/h200/lesson08.json",
        ...                          "logs/cuda.log", "executed/quick/08_prefetch.ipynb")]
        [0, 2, 3, 6]
    """
    return next(i for i, keep in enumerate(RANKS) if keep(rel))


class Packer:
    """Packs a run folder into a ``.tar.gz`` under a size cap, leaving out the least useful files
    first (by :data:`RANKS`, the largest first within a rank). What a file adds is estimated by
    compressing it alone (kept while its size and time are the same), with a margin for headers."""

    def __init__(self, cap: int = ARCHIVE_CAP, margin: int = 256 * 2**10):
        self.cap, self.margin = cap, margin
        self._sizes: dict[Path, tuple[tuple[int, float], int]] = {}

    def packed_size(self, path: Path) -> int:
        st = path.stat()
        key = (st.st_size, st.st_mtime)
        if path not in self._sizes or self._sizes[path][0] != key:
            self._sizes[path] = (key, len(zlib.compress(path.read_bytes(), 3)) + 1024)  # + its tar header, padding
        return self._sizes[path][1]

    def select(self, folder: Path) -> tuple[list[Path], list[tuple[str, int]]]:
        """``(files to pack, [(left out, bytes)])`` of ``folder``, relative paths."""
        files = [p.relative_to(folder) for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")]
        files.sort(key=lambda r: (rank(r), (folder / r).stat().st_size))
        kept, left, total = [], [], self.margin
        for rel in files:
            size = self.packed_size(folder / rel)
            if total + size <= self.cap:
                kept.append(rel)
                total += size
            else:
                left.append((str(rel), (folder / rel).stat().st_size))
        return kept, left

    def pack(self, folder: Path, archive: Path, files: list[Path]) -> int:
        """Writes ``archive`` (``folder``'s name as its top folder) with ``files``; returns its bytes.
        Over the cap after all (an estimate was wrong), the last files are dropped until it fits."""
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive.with_name(f".{archive.name}.tmp")
        files = list(files)
        while True:
            with tarfile.open(tmp, "w:gz", compresslevel=3) as tar:
                for rel in files:
                    tar.add(folder / rel, arcname=f"{folder.name}/{rel}")
            size = tmp.stat().st_size
            if size <= self.cap or len(files) <= 1:
                break
            files.pop()
        os.replace(tmp, archive)
        return size
