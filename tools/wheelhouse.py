"""The wheels an offline GPU node lacks, collected on a machine with internet (``make wheelhouse``).

A cluster's GPU node typically has Python, torch, torchvision, numpy, Pillow and matplotlib
installed, no internet, and none of tensordict, Jupyter, nbmake, ipywidgets or DALI. This tool
reads ``uv.lock`` (so the node gets the versions CI tested), walks the dependencies the node needs
to run the tests and the notebooks (the package's dependencies and the test tools), leaves out
what the node already has *and everything that pulls in* (torch's own dependencies are there with
torch), evaluates the lock's markers for the node's Python and platform, and downloads exactly
those wheels with ``pip download --no-deps --only-binary=:all:``. Copy the folder (and the
repository) to the node, then ``make test-gpu`` there installs it with ``pip --no-index``.

Usage::

    python tools/wheelhouse.py collect [--python 3.12] [--glibc 2.28] [--have torch,numpy,...]
                                       [--dali] [--out wheelhouse] [--dry-run]
    python tools/wheelhouse.py check   # on the node: print torch, CUDA and the GPU; exit 1 without CUDA

Only the collect step needs the network; the tests check the selection offline.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

from packaging.markers import Marker
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


def _applies(dep: dict, env: dict[str, str]) -> bool:
    return "marker" not in dep or Marker(dep["marker"]).evaluate(env)


def _entries(lock: dict) -> dict[str, list[dict]]:
    by_name: dict[str, list[dict]] = {}
    for package in lock["package"]:
        by_name.setdefault(canonicalize_name(package["name"]), []).append(package)
    return by_name


def _resolve(by_name: dict[str, list[dict]], dep: dict, env: dict[str, str]) -> dict:
    """The lock entry a dependency reference means (several versions may be locked, by marker)."""
    candidates = by_name.get(canonicalize_name(dep["name"]), [])
    if "version" in dep:
        candidates = [p for p in candidates if p["version"] == dep["version"]]
    elif len(candidates) > 1:  # a bare name: the version locked for this Python
        candidates = [p for p in candidates if any(Marker(m).evaluate(env) for m in p.get("resolution-markers", []))]
    if len(candidates) != 1:
        raise ValueError(f"uv.lock: {dep['name']} {dep.get('version', '')} is locked {len(candidates)} times: run `uv lock`")
    return candidates[0]


def _children(package: dict, dep: dict, env: dict[str, str]) -> list[dict]:
    deps = list(package.get("dependencies", []))
    for extra in dep.get("extra", []):
        deps += package.get("optional-dependencies", {}).get(extra, [])
    return [d for d in deps if _applies(d, env)]


def closure(lock: dict, roots: list[dict], env: dict[str, str], stop: set[str] = frozenset()) -> dict[str, str]:
    """``{name: version}`` of ``roots`` and all they depend on, not entering the names in ``stop``."""
    by_name, found, todo = _entries(lock), {}, [d for d in roots if _applies(d, env)]
    while todo:
        dep = todo.pop()
        name = canonicalize_name(dep["name"])
        if name in stop:
            continue
        package = _resolve(by_name, dep, env)
        key = (name, tuple(dep.get("extra", [])))
        if found.get(key) == package["version"]:
            continue
        found[key] = package["version"]
        todo += _children(package, dep, env)
    return {name: version for (name, _), version in sorted(found.items())}


def select(lock: dict, env: dict[str, str], have=HAVE, tools=TOOLS, dali: bool = False, pins=PINS) -> dict[str, str]:
    """``{name: version}`` of the wheels a node needs that has ``have`` (and their dependencies).

    The package's dependencies, the ``dali`` extra only when asked, and the dev-group ``tools``;
    the project itself is not a wheel (the node runs it from the checkout). ``pins`` (``name==version``)
    replace the locked version of a package that is selected.
    """
    project = next(p for p in lock["package"] if p["name"] == PROJECT)
    have = {canonicalize_name(n) for n in have}
    roots = list(project.get("dependencies", []))
    if dali:
        roots += project.get("optional-dependencies", {}).get("dali", [])
    dev = {canonicalize_name(d["name"]): d for d in project.get("dev-dependencies", {}).get("dev", [])}
    unknown = {canonicalize_name(t) for t in tools} - set(dev)
    if unknown:
        raise ValueError(f"--tools: {sorted(unknown)} not in the dev group of pyproject.toml")
    roots += [dev[canonicalize_name(t)] for t in tools]
    node = closure(lock, [{"name": n} for n in have if n in _entries(lock)], env)
    need = closure(lock, roots, env, stop=have)
    wheels = {name: version for name, version in need.items() if name not in node and name != PROJECT}
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
    args = parser.parse_args(argv[1:])
    if args.command == "check":
        return check()
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    split = lambda s: [x for x in s.replace(" ", ",").split(",") if x]  # noqa: E731
    wheels = select(lock, marker_environment(args.python), split(args.have), split(args.tools), args.dali,
                    split(args.pins))
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
