"""The wheels an offline GPU node lacks, collected on a machine with internet (``make wheelhouse``).

A cluster's GPU node typically has Python, torch, torchvision, numpy, Pillow and matplotlib
installed, no internet, and none of tensordict, Jupyter, nbmake, ipywidgets or DALI. This tool
asks ``uv export`` for the versions ``uv.lock`` pins (so the node gets the versions CI tested):
once for what the node needs to run the tests and the notebooks (the package's dependencies and
the test tools, with what the node has and the dev tools it does not need pruned: ``--prune``
drops a package and what only it pulls in), once for what the node has (with everything else
pruned). The wheels are the first list less the second, since a package torch pulls in is there
with torch even where tensordict needs it too. uv exports universal requirements (markers for
every platform); this tool evaluates the markers for the node's Python and platform, which
``uv export`` cannot be asked to do, and downloads exactly those wheels with
``pip download --no-deps --only-binary=:all:``. Copy the folder (and the repository) to the node,
then ``make test-gpu`` there installs it with ``pip --no-index``.

Usage::

    python tools/wheelhouse.py collect [--python 3.12] [--glibc 2.28] [--have torch,numpy,...]
                                       [--dali] [--out wheelhouse] [--dry-run] [--uv uv]
    python tools/wheelhouse.py check   # on the node: print torch, CUDA and the GPU; exit 1 without CUDA

Only the collect step needs the network; the tests check the selection offline.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "gpufeed"

#: What the reference GPU node has installed (with all their dependencies): not collected.
HAVE = ("torch", "torchvision", "numpy", "pillow", "matplotlib")
#: Of the dev group, what the node needs: run the tests and notebooks (no JupyterLab, browser, lint).
TOOLS = ("pytest", "nbmake", "jupytext", "pyyaml")
#: Versions that differ from uv.lock on the node, within pyproject's range: imageio-ffmpeg 0.8's
#: wheel bundles a 65 MiB ffmpeg, 0.6.0's 28 MiB (lesson 04 only calls `ffmpeg -q:v`, which both have).
PINS = ("imageio-ffmpeg==0.6.0",)


def marker_environment(python: str = "3.12", machine: str = "x86_64") -> dict[str, str]:
    """The PEP 508 marker values of a Linux node running CPython ``python`` (e.g. ``"3.12"``).

    >>> marker_environment("3.12")["python_full_version"], marker_environment()["sys_platform"]
    ('3.12.0', 'linux')
    """
    if not re.fullmatch(r"3\.\d+", python):
        raise ValueError(f"--python {python!r}: give a CPython version as MAJOR.MINOR, e.g. 3.12")
    return {
        "python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython",
        "implementation_version": f"{python}.0", "platform_python_implementation": "CPython",
        "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix", "platform_machine": machine,
        "platform_release": "", "platform_version": "", "extra": "",
    }


def find_uv() -> str:
    """``$UV``, else ``uv`` on the PATH, else the private copy ``make`` installs in ``.uv/``."""
    uv = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".uv" / "bin" / "uv")
    if not Path(uv).is_file() and not shutil.which(uv):
        raise FileNotFoundError(f"no uv at {uv}: run `make env` (it installs uv into .uv/) or pass --uv")
    return uv


def uv_export(uv: str, *, prune=(), groups=(), extras=(), dev: bool = False, project: Path = ROOT) -> str:
    """``uv export`` of ``project``'s lock as requirements (``name==version ; marker`` lines), without
    the project itself, the dev group unless ``dev`` (and no other default group: the node builds no
    site), and the ``prune`` packages with what only they need."""
    cmd = [*shlex.split(uv), "export", "--frozen", "--no-hashes", "--no-header", "--no-annotate",
           "--no-emit-project", "--format", "requirements.txt", "--project", str(project)]
    cmd += ["--no-default-groups"] + (["--group", "dev"] if dev else [])
    cmd += [a for g in groups for a in ("--group", g)] + [a for e in extras for a in ("--extra", e)]
    cmd += [a for n in prune for a in ("--prune", n)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def pinned(requirements: str, env: dict[str, str]) -> dict[str, str]:
    """``{name: version}`` of the ``name==version ; marker`` lines whose marker holds in ``env``.

    >>> pinned("tqdm==4.70.1\\nipython==8.39.0 ; python_full_version < '3.11'\\n", marker_environment("3.12"))
    {'tqdm': '4.70.1'}
    """
    out = {}
    for line in requirements.splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            (spec,) = req.specifier
            out[canonicalize_name(req.name)] = spec.version
    return out


def select(env: dict[str, str], have=HAVE, tools=TOOLS, dali: bool = False, pins=PINS, *, uv: str | None = None,
           project: Path = ROOT) -> dict[str, str]:
    """``{name: version}`` of the wheels a node needs that has ``have`` (and their dependencies).

    The package's dependencies, the ``dali`` extra only when asked, and the dev-group ``tools``;
    the project itself is not a wheel (the node runs it from the checkout). ``pins`` (``name==version``)
    replace the locked version of a package that is selected.
    """
    uv = uv or find_uv()
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    names = lambda reqs: {canonicalize_name(Requirement(r).name) for r in reqs}  # noqa: E731
    have, dev = {canonicalize_name(n) for n in have}, names(pyproject["dependency-groups"]["dev"])
    unknown = {canonicalize_name(t) for t in tools} - dev
    if unknown:
        raise ValueError(f"--tools: {sorted(unknown)} not in the dev group of pyproject.toml")
    skip_tools = dev - {canonicalize_name(t) for t in tools}
    need = pinned(uv_export(uv, prune=sorted(have | skip_tools), groups=["dev"], extras=["dali"] if dali else [],
                            dev=True, project=project), env)
    others = names(pyproject["project"]["dependencies"]) - have
    node = pinned(uv_export(uv, prune=sorted(others), project=project), env) if have else {}
    wheels = {name: version for name, version in sorted(need.items()) if name not in node}
    for pin in pins:
        name, _, version = pin.partition("==")
        if not version:
            raise ValueError(f"--pins {pin!r}: write NAME==VERSION")
        if canonicalize_name(name) in wheels:
            wheels[canonicalize_name(name)] = version
    return wheels


def platforms(glibc: str = "2.28", machine: str = "x86_64") -> list[str]:
    """pip ``--platform`` tags a Linux node with this glibc accepts, newest first.

    >>> platforms("2.17")[:2], platforms("2.17")[-2:]
    (['manylinux_2_17_x86_64', 'manylinux_2_16_x86_64'], ['manylinux2010_x86_64', 'manylinux1_x86_64'])
    """
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 4, -1)]
    return tags + [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]


def download_command(pip: str, requirements: Path, out: Path, python: str, glibc: str) -> list[str]:
    plat = [arg for tag in platforms(glibc) for arg in ("--platform", tag)]
    return [*shlex.split(pip), "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
            "--implementation", "cp", *plat, "--dest", str(out), "-r", str(requirements)]


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.whl")) / 2**20


def check() -> int:
    """Prints torch, CUDA and the GPU; 1 (with a line saying why) when torch sees no CUDA GPU."""
    import torch

    print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA build {torch.version.cuda})")
    if not torch.cuda.is_available():
        print("test-gpu: torch sees no CUDA GPU; this command only runs on a GPU node "
              "(run `python -m gpufeed doctor` to see why, or `make test` on a CPU)", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    print(f"GPU 0 of {torch.cuda.device_count()}: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
          f"compute capability {props.major}.{props.minor}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="print torch/CUDA/GPU; exit 1 without CUDA")
    c = sub.add_parser("collect", help="download the wheels a GPU node lacks")
    c.add_argument("--python", default="3.12", help="the node's Python, MAJOR.MINOR (default 3.12)")
    c.add_argument("--glibc", default="2.28", help="the node's glibc (`ldd --version`); default 2.28")
    c.add_argument("--have", default=",".join(HAVE), help="comma-separated packages the node has")
    c.add_argument("--tools", default=",".join(TOOLS), help="comma-separated dev tools to bring")
    c.add_argument("--pins", default=",".join(PINS), help="comma-separated NAME==VERSION replacing uv.lock's")
    c.add_argument("--dali", action="store_true", help="add NVIDIA DALI (a ~190 MB wheel)")
    c.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    c.add_argument("--pip", default=f"{shlex.quote(sys.executable)} -m pip", help="the pip to download with")
    c.add_argument("--dry-run", action="store_true", help="print the requirements, download nothing")
    c.add_argument("--uv", default=None, help="the uv that exports uv.lock (default: $UV, uv on PATH, .uv/bin/uv)")
    args = parser.parse_args(argv[1:])
    if args.command == "check":
        return check()
    split = lambda s: [x for x in s.replace(" ", ",").split(",") if x]  # noqa: E731
    wheels = select(marker_environment(args.python), split(args.have), split(args.tools), args.dali,
                    split(args.pins), uv=args.uv)
    text = "".join(f"{name}=={version}\n" for name, version in wheels.items())
    if args.dry_run:
        print(text, end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    requirements = args.out / "requirements.txt"
    requirements.write_text(text)
    subprocess.run(download_command(args.pip, requirements, args.out, args.python, args.glibc), check=True)
    print(f"{args.out}: {len(wheels)} wheels, {size_mib(args.out):.1f} MiB for Python {args.python} "
          f"on manylinux (glibc {args.glibc}) {marker_environment()['platform_machine']}; "
          f"left out as on the node: {', '.join(split(args.have))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
