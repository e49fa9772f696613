"""What machine a measurement ran on: CPU, cores, memory, GPU, library versions, commit.

Every saved result carries this record, and every plot names the machine in its caption, because
a number without its hardware teaches nothing. Taught in ``notebooks/00_setup.ipynb``.

Example:
    >>> info = machine_info()
    >>> sorted(k for k in ("cpu", "cores", "gpu", "torch") if k in info)
    ['cores', 'cpu', 'gpu', 'torch']
    >>> slug({"gpu": "NVIDIA H200", "cpu": "AMD EPYC 9654"})
    'h200'
    >>> slug({"gpu": None, "cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"})
    'cpu-xeon-platinum-8481c'
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from gpufeed import config


def _cpu_name() -> str:
    # /proc/cpuinfo by hand: psutil has counts and frequencies but no CPU model name.
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """CPU cores this process may run on (the affinity mask, which containers often narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def cache_bytes(level: int = 3, root: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """The size in bytes of CPU 0's data or unified cache at ``level`` (3: the last-level cache).

    Read from Linux's sysfs (``index*/level``, ``type``, ``size`` such as ``32768K``); elsewhere from
    ``sysconf`` where the C library has it; None when neither says. Lessons 00 and 06 size their
    "RAM" buffers from it: a buffer smaller than the L3 is timed in cache, not in RAM.

    Example:
        >>> size = cache_bytes(3)
        >>> size is None or size >= 1 << 16
        True
    """
    # sysfs by hand: psutil does not report cache sizes.
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for index in sorted(Path(root).glob("index*")):
        try:
            if int((index / "level").read_text()) == level and (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip()
                return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        except (OSError, ValueError):
            continue
    try:
        size = os.sysconf(f"SC_LEVEL{level}_CACHE_SIZE")  # glibc; 0 or -1 when unknown
        return size if size > 0 else None
    except (ValueError, OSError, AttributeError):
        return None


#: File systems that store their files on a block device of this machine: an ``os.fsync`` there
#: writes to a disk. Lesson 05 names a write-back rate "the disk's" only on one of these; tmpfs
#: keeps files in RAM, and overlay, network and FUSE file systems pass writes to what lies below.
DISK_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "jfs", "reiserfs",
                               "apfs", "hfs", "ntfs", "vfat", "exfat"})


def file_system(path: str | Path) -> str:
    """The type of the file system holding ``path`` (``"ext4"``, ``"tmpfs"``, ``"overlay"``, ...), from
    the mount point nearest above it; ``"unknown"`` where the OS lists none.

    Example:
        >>> isinstance(file_system("."), str)
        True
    """
    import psutil

    path = Path(path).resolve()
    mounts = [m for m in psutil.disk_partitions(all=True) if Path(m.mountpoint) in (path, *path.parents)]
    return max(mounts, key=lambda m: len(m.mountpoint)).fstype if mounts else "unknown"


def _memory_gib() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 2**30, 1)


def version_of(dist: str) -> str | None:
    """The installed version of a distribution, or None; never imports it (imports can be slow)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


#: Where a checkout without ``.git`` (copied to an offline GPU node) keeps its commit: written by
#: :func:`write_commit_file` (``make wheelhouse``) on the machine that has the repository.
COMMIT_FILE = ".gpufeed-commit"
#: Or the commit given by whoever runs the code (a CI job that knows it), read before the file.
ENV_COMMIT = "GPUFEED_COMMIT"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10,
                          check=True).stdout  # no shell, fixed arguments


def git_commit() -> str | None:
    """The commit of the course checkout, with ``+dirty`` when it has uncommitted changes.

    From git where the checkout has ``.git`` and git answers; else (no ``.git``, no git, or a git
    that refuses: a ``.git`` copied with the checkout to a node, owned by another user or pointing
    to a worktree that is not there) from ``$GPUFEED_COMMIT``; else from the ``.gpufeed-commit``
    file that ``make wheelhouse`` writes beside the code, with ``+modified`` when a file it lists
    changed since. None when none of these says.
    """
    root = config.repo_root()
    if root is not None and (root / ".git").exists():
        try:
            commit, dirty = _head(root)
            return commit + ("+dirty" if dirty else "")
        except (OSError, subprocess.SubprocessError):
            pass  # git cannot answer here: the environment or the file may
    if os.environ.get(ENV_COMMIT):
        return os.environ[ENV_COMMIT].strip()
    return _commit_from_file(root)


def _head(root: Path) -> tuple[str, bool]:
    """The checkout's commit (12 hex digits) and whether a tracked file has changed since."""
    commit = _git(root, "rev-parse", "--short=12", "HEAD").strip()
    return commit, bool(_git(root, "status", "--porcelain", "--untracked-files=no").strip())


def _blob_sha(path: Path) -> str:
    """git's name for a file's content (``git hash-object``), computed without git."""
    import hashlib

    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_commit_file(root: str | Path | None = None) -> Path:
    """Writes ``.gpufeed-commit`` into the checkout: the commit (``+dirty`` if so) and the git name
    of every tracked file's content, so that a copy without ``.git`` knows its commit and whether
    a file changed since. Needs git and the repository; returns the file's path."""
    import json

    root = Path(root) if root is not None else config.repo_root()
    if root is None or not (root / ".git").exists():
        raise FileNotFoundError(f"{root}: not a git checkout, so no commit to record")
    commit, dirty = _head(root)
    files = {}
    for line in _git(root, "ls-files", "-s", "-z").split("\0"):  # "mode sha stage\tpath"
        if line:
            meta, name = line.split("\t", 1)
            if (root / name).is_file():
                files[name] = _blob_sha(root / name) if dirty else meta.split()[1]
    path = root / COMMIT_FILE
    path.write_text(json.dumps({"commit": commit + ("+dirty" if dirty else ""), "files": files}) + "\n")
    return path


@lru_cache(maxsize=4)
def _commit_from_file(root: Path | None) -> str | None:
    import json

    if root is None or not (root / COMMIT_FILE).is_file():
        return None
    try:
        doc = json.loads((root / COMMIT_FILE).read_text())
        changed = any(not (root / name).is_file() or _blob_sha(root / name) != sha
                      for name, sha in doc["files"].items())
        return doc["commit"] + ("+modified" if changed else "")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _real_cuda() -> dict:
    """``torch.cuda``'s ``is_available``, ``_lazy_init`` and ``device_count``: its own ones, also inside
    ``gpufeed.simcuda.simulated_cuda()``, whose simulated device is no GPU of this machine (nothing
    measured or saved under it may claim one)."""
    import torch

    real = {name: getattr(torch.cuda, name) for name in ("is_available", "_lazy_init", "device_count")}
    # Looked up, not imported: the simulator can be in place only if someone imported it, and the
    # machine record need not load it (nor depend on it) otherwise.
    simcuda = sys.modules.get("gpufeed.simcuda")
    if simcuda is not None and (sim := simcuda.active()) is not None:
        real.update(sim.outside)
    return real


@lru_cache(maxsize=1)
def _static_info() -> dict:
    import torch

    cuda = _real_cuda()
    has_gpu = cuda["is_available"]()
    info = {
        "cpu": _cpu_name(),
        "cores": usable_cores(),
        "memory_gib": _memory_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": version_of("torchvision"),
        "numpy": version_of("numpy"),
        "pillow": version_of("pillow"),
        "cuda": torch.version.cuda if has_gpu else None,
        "gpu": None,
        "gpu_memory_gib": None,
        "gpu_count": 0,
    }
    if has_gpu:
        cuda["_lazy_init"]()
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["gpu_count"] = cuda["device_count"]()
    return info


def machine_info() -> dict:
    """A JSON-ready record of this machine, the library versions, the commit and the mode.

    ``measure_s``: the time cap per measured case where one was in force
    (:func:`gpufeed.config.measure_cap`), else None: a capped result took fewer samples.
    """
    return {**_static_info(), "commit": git_commit(), "quick": config.quick_mode(), "measure_s": config.measure_cap(),
            "argv0": sys.argv[0]}


def describe(info: dict) -> str:
    """One line for a plot caption: the GPU if any, the CPU and its cores, torch's version.

    Example:
        >>> describe({"gpu": None, "cpu": "AMD EPYC 7B13", "cores": 2, "torch": "2.11.0"})
        'AMD EPYC 7B13 (2 cores), no GPU, torch 2.11.0'
    """
    gpu = info.get("gpu") or "no GPU"
    return f"{info.get('cpu', '?')} ({info.get('cores', '?')} cores), {gpu}, torch {info.get('torch', '?')}"


def slug(info: dict) -> str:
    """A short folder name for a machine's results, e.g. ``results/h200/``.

    The GPU names the folder when there is one (the GPU is what the course is about); otherwise
    the CPU model does, prefixed with ``cpu-``.
    """
    if info.get("gpu"):
        name = re.sub(r"^(nvidia|amd|intel)\s+", "", info["gpu"].strip(), flags=re.I)
        name = re.sub(r"\b(geforce|tesla)\b", "", name, flags=re.I)
        return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"
    cpu = re.sub(r"\((r|tm)\)|\bcpu\b|@.*$|\b(intel|amd)\b|\bprocessor\b", "", info.get("cpu", ""), flags=re.I)
    cpu = re.sub(r"\b\d+-core\b", "", cpu, flags=re.I)
    return "cpu-" + (re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") or "unknown")
