"""The first step of ``make test-gpu`` (seconds): what the run needs, checked before anything
starts, so that a node that lacks something is given back at once, with one line saying what."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from gpurun import ROOT

#: Modules the steps run: the notebooks' kernel and runners, the tests' workers.
NEEDED = ("pytest", "nbmake", "nbclient", "ipykernel", "psutil", "xdist")


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
        ...          has=lambda m: m != "nbmake")[:2]  # doctest: +NORMALIZE_WHITESPACE
        ['torch sees no CUDA GPU: this runs on a GPU node (GPUFEED_GPU_STANDIN=cpu checks the run on a CPU)',
         'no nbmake in this python: the wheelhouse lacks it (make wheelhouse, then copy wheelhouse/)']
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
    probe = next((p for p in (cache, *cache.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(probe).free / 2**30
    if free < need_gib:
        out.append(f"{free:.1f} GiB free at {probe}, the run needs {need_gib:.0f}: free some or set GPUFEED_CACHE")
    return out


def freeze() -> str:
    """``pip freeze`` of this python without pip: every installed distribution and its version."""
    from importlib import metadata

    return "".join(sorted({f"{d.metadata['Name']}=={d.version}\n" for d in metadata.distributions()
                           if d.metadata["Name"]}, key=str.lower))
