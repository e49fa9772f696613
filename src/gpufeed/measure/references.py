"""``results/<gpu>/references.json``: what each committed reference measured. For every producer
(a lesson whose GPU figures are references, the bench, the ceilings): its files, the commit, a hash
of its source (the lesson's ``notebooks/NN_name.py``; the bench's and the ceilings' module), a hash
of the ``gpufeed`` package, the seconds it took and when. A reference is *stale* when either hash
differs from the working tree, or when there is none: ``make test-gpu`` makes stale ones first
(``tools/gpurun/``), and each lesson's evidence box says whether our GPU reference ran today's
code (:mod:`gpufeed.measure.evidence`). Torch-free: the tools read it to plan."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from gpufeed import config

#: The checkout (None where the package is installed from a wheel: then nothing is fresh).
ROOT = config.repo_root() or Path.cwd()

FORMAT = "gpufeed-references"
FILE = "references.json"
PACKAGE = "src/gpufeed"

Reader = Callable[[str], bytes]  # a path relative to the checkout -> its bytes


def tree_files(root: Path | None = None) -> tuple[list[str], Reader]:
    """The package's ``.py`` files in the working tree (:data:`ROOT` by default), and a reader of any file."""
    root = ROOT if root is None else root
    paths = sorted(str(p.relative_to(root)) for p in (root / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)
    return paths, lambda path: (root / path).read_bytes()


def commit_files(commit: str, root: Path | None = None) -> tuple[list[str], Reader]:
    """The same at ``commit`` (``git ls-tree``/``git show``): hashes as the references measured them."""
    root = ROOT if root is None else root
    git = lambda *a: subprocess.run(["git", *a], cwd=root, check=True, capture_output=True).stdout  # noqa: E731
    paths = [p for p in git("ls-tree", "-r", "--name-only", commit, PACKAGE).decode().splitlines() if p.endswith(".py")]
    return sorted(paths), lambda path: git("show", f"{commit}:{path}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def package_hash(paths: list[str], read: Reader) -> str:
    """One hash of every module of the package, names and bytes.

    Example:
        >>> files = {"src/gpufeed/a.py": b"A = 1\\n"}
        >>> package_hash(list(files), files.__getitem__) == package_hash(list(files), files.__getitem__)
        True
    """
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.encode() + b"\0" + read(path) + b"\0")
    return h.hexdigest()[:16]


def load(folder: Path) -> dict:
    """``folder/references.json``'s producers (empty where there is none)."""
    path = folder / FILE
    return json.loads(path.read_text())["references"] if path.is_file() else {}


def save(folder: Path, references: dict, gpu: str | None) -> Path:
    path = folder / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "version": 1, "gpu": gpu, "references": dict(sorted(references.items()))}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def record(source: str, files: list[str], commit: str | None, seconds: float | None, when: str,
           tree: tuple[list[str], Reader] | None = None) -> dict:
    """One producer's entry, with the hashes of ``tree`` (the working tree by default)."""
    paths, read = tree or tree_files()
    return {"files": sorted(files), "commit": commit, "source": source, "source_sha256": sha(read(source)),
            "package_sha256": package_hash(paths, read), "seconds": seconds, "when": when}


def staleness(entry: dict | None, source: str, tree: tuple[list[str], Reader] | None = None) -> tuple[bool, str]:
    """``(stale, why)`` of a producer's reference against the working tree.

    Example:
        >>> files = {"src/gpufeed/a.py": b"A = 1\\n", "notebooks/08_x.py": b"x = 1\\n"}
        >>> tree = (["src/gpufeed/a.py"], files.__getitem__)
        >>> ref = record("notebooks/08_x.py", ["lesson08.json"], "abc", 50.0, "2026-11-26", tree)
        >>> staleness(ref, "notebooks/08_x.py", tree)
        (False, 'fresh: made at abc, nothing changed since')
        >>> files["notebooks/08_x.py"] = b"x = 2\\n"
        >>> staleness(ref, "notebooks/08_x.py", tree)
        (True, 'stale: notebooks/08_x.py changed since abc')
        >>> staleness(None, "notebooks/08_x.py", tree)
        (True, 'stale: no reference')
    """
    if not entry:
        return True, "stale: no reference"
    paths, read = tree or tree_files()
    made = (entry.get("commit") or "an unknown commit")[:12]
    if not (ROOT / source).exists() and tree is None:
        return True, f"stale: {source} is gone"
    if sha(read(source)) != entry.get("source_sha256"):
        return True, f"stale: {source} changed since {made}"
    if package_hash(paths, read) != entry.get("package_sha256"):
        return True, f"stale: the package changed since {made}"
    return False, f"fresh: made at {made}, nothing changed since"
