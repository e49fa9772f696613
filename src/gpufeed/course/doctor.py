"""``python -m gpufeed doctor``: what this machine offers the course, and what is missing.

Each check is a row: what was checked, what was found, and whether that is fine, a limitation
(the course still runs, some cells show reference results instead) or a problem. Only a missing
essential library is a problem; a CPU-only machine is a limitation and exits 0. Taught in
``notebooks/00_setup.ipynb``.

Example:
    >>> rows = checks()
    >>> {r.name for r in rows} >= {"torch", "CUDA", "CPU cores", "Pillow libjpeg-turbo", "DALI"}
    True
    >>> all(r.status in ("ok", "limited", "problem") for r in rows)
    True
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from gpufeed import config
from gpufeed.measure.machine import usable_cores, version_of


@dataclass
class Check:
    """One row of the report. ``status``: ``ok``, ``limited`` (works, with less) or ``problem``."""

    name: str
    found: str
    status: str = "ok"
    hint: str = ""


def _import_check(name: str, module: str, dist: str, hint: str) -> Check:
    try:
        __import__(module)
    except Exception as e:  # an ImportError, or a library failing to load its native parts
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Check(name, f"not usable ({first[:90]})", "limited", hint)
    return Check(name, version_of(dist) or "installed")


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def checks() -> list[Check]:
    """Runs every check; never raises for a missing optional piece."""
    rows = [Check("python", sys.version.split()[0])]
    try:
        import torch
    except ImportError as e:
        return [*rows, Check("torch", f"missing ({e})", "problem", "run `make lab` or `uv sync` from the course folder")]
    rows.append(Check("torch", torch.__version__))
    tv = version_of("torchvision")
    rows.append(Check("torchvision", tv or "missing", "ok" if tv else "problem", "" if tv else "`pip install torchvision`"))
    td = version_of("tensordict")
    rows.append(Check("tensordict", td or "missing", "ok" if td else "problem", "" if td else "`pip install tensordict`"))

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        rows.append(Check("CUDA", f"{torch.version.cuda}, {torch.cuda.device_count()} GPU(s)"))
        rows.append(Check("GPU", f"{props.name}, {props.total_memory / 2**30:.0f} GiB"))
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        rows.append(Check("cuDNN", str(cudnn) if cudnn else "not available", "ok" if cudnn else "limited"))
    else:
        built = torch.version.cuda
        rows.append(Check(
            "CUDA", f"no GPU visible (torch built for CUDA {built})" if built else "CPU-only build of torch",
            "limited", "GPU cells show the committed reference results instead",
        ))
    rows.append(Check("CPU cores", f"{usable_cores()} usable (os.cpu_count()={__import__('os').cpu_count()})"))

    from gpufeed.data.jpeg import pillow_uses_turbo

    turbo = pillow_uses_turbo()
    rows.append(Check(
        "Pillow libjpeg-turbo", {True: "yes", False: "no", None: "unknown"}[turbo],
        "ok" if turbo else "limited", "" if turbo else "install Pillow from its wheels (pip) for libjpeg-turbo",
    ))
    rows.append(_import_check("TorchCodec", "torchcodec.decoders", "torchcodec",
                              "optional: `pip install torchcodec` with FFmpeg installed"))
    rows.append(_import_check("DALI", "nvidia.dali", _dali_dist(),
                              "optional, lesson 10: `pip install nvidia-dali-cuda130` (Linux x86_64)"))

    cache = config.cache_dir()
    free = shutil.disk_usage(_existing_parent(cache)).free
    rows.append(Check(
        "free disk (cache)", f"{free / 1e9:.1f} GB in the cache folder (gpufeed.config.cache_dir())",
        "ok" if free > 5e9 else "limited",
        "" if free > 5e9 else "set GPUFEED_CACHE to a folder on a disk with more room",
    ))
    rows.append(_pinned_check(torch))
    rows.append(Check("mode", "quick (GPUFEED_QUICK=1)" if config.quick_mode() else "full"))
    return rows


def _dali_dist() -> str:
    from importlib import metadata

    names = [d.metadata["Name"] for d in metadata.distributions() if (d.metadata["Name"] or "").startswith("nvidia-dali")]
    return names[0] if names else "nvidia-dali"


def _pinned_check(torch) -> Check:
    """Page-locked (pinned) host memory is what makes host-to-device copies fast and asynchronous."""
    try:
        t = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
        ok = t.is_pinned()
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[0].split(". ")[0].rstrip(".")  # its first sentence, whole
        return Check("pinned memory", f"not available ({reason})", "limited", "needs a GPU")
    return Check("pinned memory", "1 MiB pinned" if ok else "pin_memory() returned pageable memory", "ok" if ok else "limited")


def report(rows: list[Check] | None = None) -> str:
    """The checks as an aligned text table."""
    rows = checks() if rows is None else rows
    mark = {"ok": "ok", "limited": " -", "problem": "!!"}
    width = max(len(r.name) for r in rows)
    lines = []
    for r in rows:
        line = f"{mark[r.status]} {r.name.ljust(width)}  {r.found}"
        lines.append(line + (f"\n   {' ' * width}  -> {r.hint}" if r.hint and r.status != "ok" else ""))
    return "\n".join(lines)


def main() -> int:
    """Prints the report; exit status 1 only when an essential library is missing."""
    rows = checks()
    print(report(rows))
    problems = [r for r in rows if r.status == "problem"]
    if problems:
        print(f"\n{len(problems)} problem(s): the course cannot run until they are fixed.")
        return 1
    limited = sum(r.status == "limited" for r in rows)
    print(f"\nready{'' if not limited else f' ({limited} limitation(s): the course runs, some cells show reference results)'}.")
    return 0
