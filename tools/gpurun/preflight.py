"""The first step of ``make test-gpu`` (seconds): what the run needs, checked before anything
starts, so that a node that lacks something is given back at once, with one line saying what; and
where the datasets go (:func:`choose_cache`: the largest free disk) and how much room the plan's
datasets need there (:func:`need_bytes`)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from gpurun import ROOT

#: Modules the steps run: the notebooks' runner and kernel, the tests and their workers.
NEEDED = ("pytest", "nbclient", "ipykernel", "psutil", "xdist")


def driver_version() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=10)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def problems(info: dict, *, standin: bool, cache: Path, need_gib: float, wheelhouse: Path = ROOT / "wheelhouse",
             has=lambda m: importlib.util.find_spec(m) is not None) -> list[str]:
    """What is missing, each as one line that says what to do (empty: ready).

    Example:
        >>> info = {"gpu": None, "commit": None}
        >>> problems(info, standin=False, cache=Path("/"), need_gib=0, wheelhouse=Path("/nowhere"),
        ...          has=lambda m: m != "nbclient")[:2]  # doctest: +NORMALIZE_WHITESPACE
        ['torch sees no CUDA GPU: this runs on a GPU node (GPUFEED_GPU_STANDIN=cpu checks the run on a CPU)',
         'no nbclient in this python: the wheelhouse lacks it (make wheelhouse, then copy wheelhouse/)']
    """
    out = []
    if not standin and not info.get("gpu"):
        out.append("torch sees no CUDA GPU: this runs on a GPU node (GPUFEED_GPU_STANDIN=cpu checks the run on a CPU)")
    out += [f"no {m} in this python: the wheelhouse lacks it (make wheelhouse, then copy wheelhouse/)"
            for m in NEEDED if not has(m)]
    manifest = wheelhouse / "wheelhouse.json"
    if manifest.is_file():
        want, here = json.loads(manifest.read_text()).get("python"), f"{sys.version_info[0]}.{sys.version_info[1]}"
        if want != here:
            out.append(f"the wheelhouse is for Python {want}, this python is {here}: WHEELHOUSE_ARGS=\"--python {here}\" "
                       "to make wheelhouse")
    if not info.get("commit"):
        out.append("no commit: copy .gpufeed-commit with the checkout (make wheelhouse writes it) or set GPUFEED_COMMIT")
    out += disk_problems(cache, need_gib * 2**30)
    return out


def disk_problems(cache: Path, need: float) -> list[str]:
    """One line where the disk of ``cache`` has fewer than ``need`` bytes free (none where it has them).

    Example:
        >>> disk_problems(Path("/"), 0)
        []
        >>> disk_problems(Path("/"), 2**60)[0].split(" GiB free")[1]
        ' at /, the plan needs 1073741824.0 GiB: free some, set GPUFEED_CACHE to a larger disk, or plan less (LESSONS=...)'
    """
    probe = existing(cache)
    free = shutil.disk_usage(probe).free
    if free >= need:
        return []
    return [f"{free / 2**30:.1f} GiB free at {probe}, the plan needs {need / 2**30:.1f} GiB: free some, set "
            "GPUFEED_CACHE to a larger disk, or plan less (LESSONS=...)"]


def existing(path: Path) -> Path:
    """``path`` or its nearest folder above that exists (where its disk is asked)."""
    return next((p for p in (path, *path.parents) if p.exists()), Path("/"))


#: A generated JPEG's bytes per pixel, at most: this machine's cache measured 0.22 (640x480) to 0.48
#: (96x96) at quality 90 and 0.69 at 96x72 (its header weighs more); 1.0 leaves room for quality 95.
JPEG_BYTES_PER_PIXEL = 1.0
#: What the registry does not list (lesson 04's PNG and .npy copies, the ceilings' 256 MiB read
#: file, the results and executed notebooks), and room to spare.
EXTRA_BYTES = 2 * 2**30


def dataset_bytes(d) -> int:
    """Bytes a registry dataset (:class:`gpufeed.measure.lessons.Dataset`) takes on disk, at most:
    its JPEGs (:data:`JPEG_BYTES_PER_PIXEL`, 4 KiB a file for headers and the file system) and its
    memmaps (uint8, 3 channels).

    Example:
        >>> from gpufeed.measure.lessons import Dataset
        >>> dataset_bytes(Dataset("x", "x", 1000, (224, 224), memmaps=(("x/mm", (224, 224)),)))
        204800000
    """
    w, h = d.size
    return int(d.n * (w * h * JPEG_BYTES_PER_PIXEL + 4096) + sum(d.n * mw * mh * 3 for _, (mw, mh) in d.memmaps))


def need_bytes(datasets: list) -> int:
    """Free bytes a run needs for ``datasets`` (each folder once), 1.25 times their size plus
    :data:`EXTRA_BYTES`."""
    unique = {d.folder: d for d in datasets}
    return int(1.25 * sum(map(dataset_bytes, unique.values())) + EXTRA_BYTES)


#: File systems that hold their files in memory: never where the datasets go.
IN_MEMORY = ("tmpfs", "ramfs")


def _fs_type(path: Path, mounts: str) -> str:
    """The file system type of the mount that holds ``path`` (from ``/proc/mounts``'s text)."""
    best, kind = "", ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) > 2 and (str(path) + "/").startswith(parts[1].rstrip("/") + "/") and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return kind


def choose_cache(candidates: list[Path], mounts: str | None = None) -> tuple[Path, list[str]]:
    """The candidate on the disk with the most free bytes, among those that can be written and do
    not hold their files in memory (tmpfs), the first on a tie; and one line per candidate saying
    its free GiB (what ``run.json`` keeps).

    Example:
        >>> import tempfile
        >>> here = Path(tempfile.mkdtemp())
        >>> choose_cache([here / "a", here / "b"], mounts="")[0] == here / "a"  # one disk: the first
        True
        >>> choose_cache([here / "a"], mounts=f"none {here} tmpfs rw 0 0")[1][0].endswith("in memory (tmpfs): not used")
        True
    """
    import os

    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            mounts = ""
    best, best_free, said = candidates[0], -1, []
    for c in candidates:
        probe = existing(c)
        kind = _fs_type(probe.resolve(), mounts)
        if kind in IN_MEMORY:
            said.append(f"{c}: in memory ({kind}): not used")
            continue
        if not os.access(probe, os.W_OK):
            said.append(f"{c}: not writable")
            continue
        free = shutil.disk_usage(probe).free
        said.append(f"{c}: {free / 2**30:.1f} GiB free")
        if free > best_free:
            best, best_free = c, free
    return best, said


def freeze() -> str:
    """``pip freeze`` of this python without pip: every installed distribution and its version."""
    from importlib import metadata

    return "".join(sorted({f"{d.metadata['Name']}=={d.version}\n" for d in metadata.distributions()
                           if d.metadata["Name"]}, key=str.lower))
