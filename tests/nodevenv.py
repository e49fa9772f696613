"""A GPU node's python, made here for the tests of ``make node-env`` and ``make test-gpu``
(tests/test_wheelhouse.py, tests/test_gpurun.py): offline, from what is on disk.

On a cluster's GPU node ``python3`` is often itself a venv (``/opt/torch/.venv``) with torch and
many packages of its own, pytest plugins among them. :func:`node_python` makes one: a venv of this
interpreter's base python (no pip), whose site folder reaches, through a ``.pth``, the folders
given (their packages are the node's) and this environment's site-packages (torch: the node's too).
:func:`tiny_wheel`, :func:`dist_folder` and :func:`wheelhouse_of` make the wheels and installed
distributions the tests give it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import wheelhouse  # noqa: E402  (tools/wheelhouse.py)


def node_python(folder: Path, sites: list[Path] = ()) -> Path:
    """A python that is itself a venv (``folder``), seeing ``sites`` first, then this environment's
    site-packages (where torch is), each through a ``.pth`` as a node's own folders are."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    dirs = [*map(str, sites), sysconfig.get_path("purelib")]
    (Path(purelib) / "node-site.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
    probe = "import importlib.util, sys; print(sys.prefix != sys.base_prefix, importlib.util.find_spec('torch').origin)"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.startswith("True")
    return python


def _record(files: dict[str, str], info: str) -> str:
    return "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
                   f"{len(text.encode())}\n" for path, text in files.items()) + f"{info}/RECORD,,\n"


def _metadata(name: str, version: str, requires: list[str]) -> str:
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires))


def tiny_wheel(folder: Path, name: str, requires: list[str], version: str = "0.1") -> Path:
    """A pure-Python wheel ``name-version`` whose module ``name`` sets ``OK = True``, made by hand (offline)."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "OK = True\n", f"{info}/METADATA": _metadata(name, version, requires),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in {**files, f"{info}/RECORD": _record(files, info)}.items():
            z.writestr(path, text)
    return wheel


def dist_folder(site: Path, name: str, code: str, version: str = "1.0", requires: list[str] = (),
                entry_points: str = "") -> None:
    """An installed distribution in ``site`` (as pip leaves one): module ``name`` with ``code`` and
    its ``.dist-info`` (``entry_points``: the text of its ``entry_points.txt``, e.g. a pytest plugin's)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{name}.py").write_text(code)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(_metadata(name, version, list(requires)))
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)
    (info / "RECORD").write_text("")


def wheelhouse_of(folder: Path, have: list[str], requires: list[str]) -> Path:
    """A wheelhouse of one tiny wheel needing ``requires``, for a node that has ``have``."""
    folder.mkdir()
    tiny_wheel(folder, "gpufeedtiny", requires)
    (folder / "requirements.txt").write_text("gpufeedtiny==0.1\n")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (folder / wheelhouse.MANIFEST).write_text(json.dumps({"python": python, "have": have}))
    return folder
