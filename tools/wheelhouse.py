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
(and the repository) to the node, then ``make node-env`` there (``make test-gpu`` runs it) checks,
before anything installs, that the node has every ``--have`` package and that every package pip will
see in the venv, the node's own and the wheels', fits the others (:func:`conflicts`: one line naming
the first conflict), makes a venv that sees the node Python's own packages and installs the wheels
with ``pip --no-index``. With ``--out`` (``$OUT`` on the node) its log goes there as it is written,
and ``run.json`` and ``summary.txt`` where it fails.

Usage::

    python tools/wheelhouse.py collect [--python 3.12] [--glibc 2.28] [--have torch,numpy,...]
                                       [--dali] [--out wheelhouse] [--dry-run] [--uv uv]
    python3 tools/wheelhouse.py node-env --venv .venv-node [--wheelhouse wheelhouse] [--out $OUT]  # the node's python

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


def _packaging():
    """``packaging``'s ``requirements``, ``markers`` and ``version`` modules: the package where this
    Python has it, else the copy pip vendors (a node's python often has pip and not packaging)."""
    try:
        from packaging import markers, requirements, version
    except ImportError:
        from pip._vendor.packaging import markers, requirements, version
    return requirements, markers, version


def _metadata_fields(text: str) -> tuple[str, str, list[str]]:
    """``(Name, Version, [Requires-Dist])`` of a METADATA file's headers."""
    head = text.split("\n\n", 1)[0].splitlines()
    field = lambda key: [x.split(":", 1)[1].strip() for x in head if x.startswith(f"{key}:")]  # noqa: E731
    return (field("Name") or [""])[0], (field("Version") or [""])[0], field("Requires-Dist")


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """A wheel's ``(name, version, Requires-Dist lines)``, read from its METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return _metadata_fields(z.read(meta).decode("utf-8", "replace"))


def wheel_requirements(wheel: Path) -> list:
    """The ``Requires-Dist`` lines of a wheel's METADATA (``packaging`` Requirements)."""
    Requirement = _packaging()[0].Requirement
    return [Requirement(line) for line in wheel_metadata(wheel)[2]]


def installed() -> dict[str, tuple[str, list[str], str]]:
    """Every distribution this Python sees, as pip in the node venv will (its site folders are on
    the venv's path): ``{name: (version, Requires-Dist lines, where)}``, the first on ``sys.path``
    where one is installed twice, as imports and pip take it."""
    from importlib import metadata

    out: dict[str, tuple[str, list[str], str]] = {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and name not in out:
            where = str(getattr(dist, "_path", "") or "")
            out[name] = (dist.version, list(dist.requires or []), str(Path(where).parent) if where else "")
    return out


def conflicts(wheels: dict[str, tuple[str, list[str]]], node: dict[str, tuple[str, list[str], str]],
              have: list[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """What pip will meet in the node venv, before anything installs: ``(conflicts, notes)``, one
    line each. The venv will see every wheel (``{name: (version, requires)}``) and, where no wheel
    shadows it, every package of the node (``{name: (version, requires, where)}``).

    A conflict: a wheel that needs a package neither the wheelhouse nor the node has at a version it
    accepts (pip, offline, would stop there), or a wheel that replaces a package that the ``have``
    packages (what the course runs on: torch, ...) or what they need do not accept. A note: a wheel
    that replaces a package another of the node's packages does not accept (a package the course
    does not run: the venv may break it, the run does not).

    Example:
        >>> env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
        ...        "platform_machine": "x86_64", "extra": ""}
        >>> node = {"torch": ("2.11.0", ["typing-extensions>=4.10"], "/opt"),
        ...         "typing-extensions": ("4.12.2", [], "/opt"), "psutil": ("5.9.0", [], "/opt")}
        >>> wheels = {"ipykernel": ("7.1.0", ["psutil>=5.7"]), "tensordict": ("0.10.0", ["torch>=2.9"])}
        >>> conflicts(wheels, node, ["torch"], env)
        ([], [])
        >>> wheels["ipython"] = ("9.8.0", ["psutil>=7; sys_platform != 'emscripten'"])
        >>> print(conflicts(wheels, node, ["torch"], env)[0][0])
        ipython 9.8.0 needs psutil>=7: the node has psutil 5.9.0 (/opt) and the wheelhouse has none
        >>> wheels["typing-extensions"] = ("4.8.0", [])
        >>> print(conflicts(wheels, node, ["torch"], env)[0][1])
        the wheelhouse's typing-extensions 4.8.0 replaces the node's 4.12.2, and torch 2.11.0 needs typing-extensions>=4.10
    """
    reqs, _, version = _packaging()
    seen = {n: (v, r, "the wheelhouse") for n, (v, r) in wheels.items()}
    seen.update({n: x for n, x in node.items() if n not in wheels})

    def needs(requires: list[str]):
        for line in requires:
            try:
                r = reqs.Requirement(line)
                if r.marker is None or r.marker.evaluate(env):
                    yield r
            except Exception:  # noqa: BLE001 - an unparsable line of someone else's metadata
                continue

    def accepts(r, v: str) -> bool:
        try:
            return r.specifier.contains(version.Version(v), prereleases=True)
        except Exception:  # noqa: BLE001 - a version PEP 440 cannot read: pip cannot tell either
            return True

    course = set()  # the have packages and what they need, as the node has them
    todo = [canonicalize_name(h) for h in have]
    while todo:
        n = todo.pop()
        if n in course or n not in node:
            continue
        course.add(n)
        todo += [canonicalize_name(r.name) for r in needs(node[n][1])]
    bad, notes = [], []
    for name, (v, requires) in sorted(wheels.items()):
        for r in needs(requires):
            dep = canonicalize_name(r.name)
            if dep not in seen:
                bad.append(f"{name} {v} needs {r.name}{r.specifier}: neither the node nor the wheelhouse has it")
            elif not accepts(r, seen[dep][0]):
                where = f"the node has {r.name} {seen[dep][0]} ({seen[dep][2]})" if dep not in wheels else \
                    f"the wheelhouse has {r.name} {seen[dep][0]}"
                bad.append(f"{name} {v} needs {r.name}{r.specifier}: {where}" +
                           (" and the wheelhouse has none" if dep not in wheels else ""))
    for name, (v, requires, _) in sorted(node.items()):
        if name in wheels:
            continue
        for r in needs(requires):
            dep = canonicalize_name(r.name)
            if dep in wheels and dep in node and not accepts(r, wheels[dep][0]):
                line = (f"the wheelhouse's {dep} {wheels[dep][0]} replaces the node's {node[dep][0]}, "
                        f"and {name} {v} needs {r.name}{r.specifier}")
                (bad if name in course else notes).append(line)
    return bad, notes


def check_node(wheelhouse: Path, log=print) -> dict:
    """What ``node-env`` checks before it installs anything, in this (the node's) Python: the
    wheels were collected for its version, it has every ``--have`` package (and it imports), and
    every package pip will see in the venv, the node's and the wheels', fits the others
    (:func:`conflicts`; the notes go to ``log``). Returns the manifest; raises
    :class:`NodeEnvError`, one line naming the first conflict."""
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
        markers = _packaging()[1]
    except ImportError:
        log("node-env: neither packaging nor pip here, so the node's packages are not checked against the wheels")
        return manifest
    wheels = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version, requires = wheel_metadata(wheel)
        wheels[canonicalize_name(name)] = (version, requires)
    node = installed()
    bad, notes = conflicts(wheels, node, manifest["have"], {**markers.default_environment(), "extra": ""})
    for line in notes:
        log(f"node-env: note: {line} (not a package the course runs)")
    if bad:
        more = f" (and {len(bad) - 1} more: {'; '.join(bad[1:3])}{'; ...' if len(bad) > 3 else ''})" if len(bad) > 1 else ""
        raise NodeEnvError(f"node-env: {bad[0]}{more}: {change}")
    log(f"node-env: {len(node)} packages of {sys.executable} and {len(wheels)} wheels checked: no conflict")
    return manifest


class Log:
    """``make node-env``'s output: each line to stdout and, where ``out`` is given (``$OUT`` on a
    GPU node), appended to ``out/node-env.log`` at once, so that a run that dies here returns it."""

    def __init__(self, out: Path | None):
        self.lines: list[str] = []
        self.file = None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            self.file = open(out / "node-env.log", "w")  # noqa: SIM115 - open while node-env runs

    def __call__(self, line: str, err: bool = False) -> None:
        line = line.rstrip("\n")
        self.lines.append(line)
        print(line, file=sys.stderr if err else sys.stdout, flush=True)
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()


def node_env(venv: Path, wheelhouse: Path, checkout: Path = ROOT, log=print) -> None:
    """Makes ``venv`` on this (the node's) Python: it sees this Python's own packages (a ``.pth``
    that adds :func:`node_site_dirs`, since ``--system-site-packages`` would give the *base*
    interpreter's where this Python is itself a venv), gets the wheelhouse with ``pip --no-index``
    and the checkout's ``src/`` on its path. Checks first (:func:`check_node`); pip's output goes to ``log``."""
    manifest = check_node(wheelhouse, log)
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
    cmd = [*pip, "install", "--quiet", "--no-index", "--find-links", str(wheelhouse), "-r", str(wheelhouse / "requirements.txt")]
    log(f"$ {shlex.join(cmd)}")
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        said = []
        for line in proc.stdout:
            log(line)
            said += [line] if line.strip() else []
    if proc.returncode:
        errors = [x for x in said if x.startswith("ERROR")] or said or [f"exit status {proc.returncode}"]
        raise NodeEnvError(f"node-env: pip install from {wheelhouse} failed: {errors[0].strip()}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    n = sub.add_parser("node-env", help="on the node, with its python: a venv that sees its packages, "
                                        "with the wheelhouse installed")
    n.add_argument("--venv", type=Path, required=True)
    n.add_argument("--wheelhouse", type=Path, default=ROOT / "wheelhouse")
    n.add_argument("--out", type=Path, default=None,
                   help="a folder that gets node-env.log as it is written, and run.json and summary.txt if it fails ($OUT)")
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
        log = Log(args.out)
        try:
            node_env(args.venv.absolute(), args.wheelhouse.absolute(), log=log)
        except (NodeEnvError, OSError, subprocess.SubprocessError) as e:
            line = str(e) if isinstance(e, NodeEnvError) else f"node-env: {type(e).__name__}: {e}"
            log(line, err=True)
            sys.path.insert(0, str(Path(__file__).parent))  # tools/: gpurun.outbox (standard library only)
            from gpurun import outbox

            outbox.failed_early(args.out, "node-env", line, log.lines[-20:])
            return 1
        log(f"node-env: {args.venv} sees {sys.executable}'s packages; the wheelhouse is installed")
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
