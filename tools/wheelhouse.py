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
``pip download --no-deps --only-binary=:all:``. ``wheelhouse.json`` beside the wheels records the
node's Python and the ``--have`` list, and ``.gpufeed-commit`` in the checkout the commit (the
node's copy has no ``.git``; :func:`gpufeed.measure.machine.git_commit` reads it). Copy the folder
(and the repository) to the node, then ``make node-env`` there (``make test-gpu`` runs it) makes a
venv that sees the node Python's own packages, checks that it has every ``--have`` package at a
version the wheels accept, and installs the wheels with ``pip --no-index``.

Usage::

    python tools/wheelhouse.py collect [--python 3.12] [--glibc 2.28] [--have torch,numpy,...]
                                       [--dali] [--out wheelhouse] [--dry-run] [--uv uv]
    python3 tools/wheelhouse.py node-env --venv .venv-node [--wheelhouse wheelhouse]  # with the node's python

Only the collect step needs the network; the tests check the selection offline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "gpufeed"

#: What the reference GPU node has installed (with all their dependencies): not collected.
HAVE = ("torch", "torchvision", "numpy", "pillow", "matplotlib")
#: Of the dev group, what the node needs: run the tests (on every core: pytest-xdist) and notebooks
#: (no JupyterLab, browser, lint).
TOOLS = ("pytest", "pytest-xdist", "nbmake", "jupytext", "pyyaml")
#: Versions that differ from uv.lock on the node, within pyproject's range: imageio-ffmpeg 0.8's
#: wheel bundles a 65 MiB ffmpeg, 0.6.0's 28 MiB (lesson 04 only calls `ffmpeg -q:v`, which both have).
PINS = ("imageio-ffmpeg==0.6.0",)


def canonicalize_name(name: str) -> str:
    """PEP 503's normal form of a distribution name (as ``packaging.utils`` does; here so that
    ``node-env``'s first checks need nothing a node may lack).

    >>> canonicalize_name("PyYAML"), canonicalize_name("typing_extensions")
    ('pyyaml', 'typing-extensions')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


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
    from packaging.requirements import Requirement

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
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest brings tomli
        import tomli as tomllib

    from packaging.requirements import Requirement

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


def write_commit() -> None:
    """``.gpufeed-commit`` in the checkout (:func:`gpufeed.measure.machine.write_commit_file`), where
    this runs in the course's environment with git; a line saying why not elsewhere."""
    try:
        from gpufeed.measure.machine import write_commit_file

        print(f"{write_commit_file(ROOT)}: the commit a copy of this checkout without .git reports")
    except (ImportError, OSError, subprocess.SubprocessError) as e:
        print(f"no .gpufeed-commit written ({e}): a copy without .git will not know its commit", file=sys.stderr)


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.whl")) / 2**20


#: The file beside the wheels that says for which node they were collected.
MANIFEST = "wheelhouse.json"
#: The .pth file in the node venv that adds the node Python's own site folders (its torch).
NODE_PTH = "gpufeed-node-site.pth"


class NodeEnvError(Exception):
    """What stops ``make node-env``: one line saying what is wrong and what to change."""


def node_site_dirs() -> list[str]:
    """The site folders this Python imports its packages from (its own venv's, and its base's
    where that venv sees them): where a node keeps torch. Read from ``sys.path``, so a Python that is
    itself a venv (``/opt/torch/.venv``, a conda or module-loaded env) names its own, not its base's."""
    import site

    dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    dirs += [p for p in site.getsitepackages() if Path(p).is_dir()]
    if site.ENABLE_USER_SITE and Path(site.getusersitepackages()).is_dir():
        dirs.append(site.getusersitepackages())
    return list(dict.fromkeys(str(Path(p).resolve()) for p in dirs))


def _have_versions(names: list[str]) -> dict[str, str | None]:
    """``{name: version}`` of the distributions this Python has (None: not installed, or it does
    not import: a package is there only if its top-level module imports)."""
    import importlib
    from importlib import metadata

    modules: dict[str, list[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules.setdefault(canonicalize_name(dist), []).append(module)
    out: dict[str, str | None] = {}
    for name in names:
        try:
            version = metadata.version(name)
            for module in sorted(m for m in modules.get(canonicalize_name(name), []) if not m.startswith("_"))[:1]:
                importlib.import_module(module)
        except Exception:  # noqa: BLE001 - not installed, or broken: either way the node lacks it
            version = None
        out[canonicalize_name(name)] = version
    return out


def wheel_requirements(wheel: Path) -> list:
    """The ``Requires-Dist`` lines of a wheel's METADATA (``packaging`` Requirements)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    return [Requirement(line.split(":", 1)[1].strip()) for line in text.split("\n\n", 1)[0].splitlines()
            if line.startswith("Requires-Dist:")]


def check_node(wheelhouse: Path) -> dict:
    """What ``node-env`` checks before it installs anything, in this (the node's) Python: the
    wheels were collected for its version, it has every ``--have`` package, and each at a version
    that every wheel accepts. Returns the manifest; raises :class:`NodeEnvError` (one line)."""
    change = "change WHEELHOUSE_ARGS (--have ...) and run `make wheelhouse` again on a machine with internet"
    path = wheelhouse / MANIFEST
    if not path.is_file():
        raise NodeEnvError(f"node-env: {path} is missing: the wheelhouse predates it; run `make wheelhouse` again")
    manifest = json.loads(path.read_text())
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if manifest["python"] != here:
        raise NodeEnvError(f"node-env: the wheels are for Python {manifest['python']}, this node's python "
                           f"({sys.executable}) is {here}: pass WHEELHOUSE_ARGS=\"--python {here} ...\" to `make wheelhouse`")
    versions = _have_versions(manifest["have"])
    missing = [n for n, v in versions.items() if v is None]
    if missing:
        raise NodeEnvError(f"node-env: {sys.executable} has no {', '.join(missing)} (or it does not import), "
                           f"but the wheelhouse left it out (--have): take it out of --have, i.e. {change}")
    try:
        from packaging.markers import default_environment
    except ImportError:
        print("node-env: no `packaging` here, so the --have versions are not checked against the wheels",
              file=sys.stderr)
        return manifest
    env = {**default_environment(), "extra": ""}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        for req in wheel_requirements(wheel):
            name = canonicalize_name(req.name)
            if name in versions and (req.marker is None or req.marker.evaluate(env)) \
                    and not req.specifier.contains(versions[name], prereleases=True):
                raise NodeEnvError(f"node-env: {wheel.name} needs {req.name}{req.specifier}, {sys.executable} has "
                                   f"{req.name} {versions[name]}: take {req.name} out of --have, i.e. {change}")
    return manifest


def node_env(venv: Path, wheelhouse: Path, checkout: Path = ROOT) -> None:
    """Makes ``venv`` on this (the node's) Python: it sees this Python's own packages (a ``.pth``
    that adds :func:`node_site_dirs`, since ``--system-site-packages`` would give the *base*
    interpreter's where this Python is itself a venv), gets the wheelhouse with ``pip --no-index``
    and the checkout's ``src/`` on its path. Checks first (:func:`check_node`)."""
    manifest = check_node(wheelhouse)
    sites = node_site_dirs()
    if not (venv / "bin" / "python").exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode:  # a Python without ensurepip: a venv without pip, filled by this Python's pip
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    # `import` lines of a .pth run at start-up: addsitedir also reads the .pth files of those folders.
    (purelib / NODE_PTH).write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in sites))
    (purelib / "gpufeed-checkout.pth").write_text(f"{checkout / 'src'}\n")
    imports = ", ".join(sorted(manifest["have"]))
    seen = subprocess.run([str(python), "-c", f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                           f"import wheelhouse as w; v = w._have_versions({sorted(manifest['have'])!r}); "
                           "print(' '.join(n for n, x in v.items() if x is None))"],
                          capture_output=True, text=True)
    if seen.returncode or seen.stdout.strip():
        raise NodeEnvError(f"node-env: the venv {venv} does not see {seen.stdout.strip() or imports} of "
                           f"{sys.executable} ({seen.stderr.strip().splitlines()[-1:] or 'no error'})")
    has_pip = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode == 0
    pip = [str(python), "-m", "pip"] if has_pip else [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run([*pip, "install", "--quiet", "--no-index", "--find-links", str(wheelhouse),
                    "-r", str(wheelhouse / "requirements.txt")], check=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    n = sub.add_parser("node-env", help="on the node, with its python: a venv that sees its packages, "
                                        "with the wheelhouse installed")
    n.add_argument("--venv", type=Path, required=True)
    n.add_argument("--wheelhouse", type=Path, default=ROOT / "wheelhouse")
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
    if args.command == "node-env":
        try:
            node_env(args.venv.absolute(), args.wheelhouse.absolute())
        except NodeEnvError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"node-env: {args.venv} sees {sys.executable}'s packages; the wheelhouse is installed")
        return 0
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
    (args.out / MANIFEST).write_text(json.dumps({"python": args.python, "glibc": args.glibc, "have": split(args.have),
                                                 "tools": split(args.tools), "dali": args.dali}, indent=1) + "\n")
    write_commit()
    print(f"{args.out}: {len(wheels)} wheels, {size_mib(args.out):.1f} MiB for Python {args.python} "
          f"on manylinux (glibc {args.glibc}) {marker_environment()['platform_machine']}; "
          f"left out as on the node: {', '.join(split(args.have))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
