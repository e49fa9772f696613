"""The wheelhouse for an offline GPU node (tools/wheelhouse.py): which wheels, checked offline."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import wheelhouse  # noqa: E402  (tools/wheelhouse.py)

ENV = wheelhouse.marker_environment("3.12")


def select(**kw) -> dict[str, str]:
    return wheelhouse.select(kw.pop("env", ENV), **kw)


def test_markers_are_read_for_the_nodes_python_and_platform():
    exported = ("tqdm==4.70.1\nipython==8.39.0 ; python_full_version < '3.11'\n"
                "ipython==9.18.1 ; python_full_version >= '3.11'\nappnope==1.0.0 ; sys_platform == 'darwin'\n")
    assert wheelhouse.pinned(exported, ENV) == {"tqdm": "4.70.1", "ipython": "9.18.1"}
    assert wheelhouse.pinned(exported, wheelhouse.marker_environment("3.10"))["ipython"] == "8.39.0"


def test_what_the_node_has_is_left_out_with_everything_it_pulls_in():
    wheels = select(have=["torch"], tools=["pytest"], pins=[])
    # torch's own dependencies (filelock, sympy, the CUDA libraries) are on the node with torch,
    # even where another package needs them too; what torch does not bring is collected.
    assert not {"torch", "filelock", "sympy", "triton", "typing-extensions"} & set(wheels)
    assert not any(n.startswith("nvidia-") for n in wheels)
    assert {"tensordict", "numpy", "torchvision", "pytest", "pluggy"} <= set(wheels)
    assert "nbmake" not in wheels and "jupyterlab" not in wheels  # only the tools asked for
    old = select(env=wheelhouse.marker_environment("3.10"), have=["torch"], tools=["pytest"], pins=[])
    assert "tomli" in old and "tomli" not in wheels  # markers read for Python 3.10


def test_the_lists_can_change_and_dali_comes_only_when_asked():
    everything = select(have=[], tools=["pytest", "ruff"], dali=True, pins=[])
    assert {"torch", "filelock", "nvidia-cublas", "ruff", "nvidia-dali-cuda130"} <= set(everything)
    assert "nvidia-dali-cuda130" not in select(have=[], tools=[], pins=[])
    pinned = select(have=["torch"], tools=[], pins=["tqdm==4.66.0", "absent==1"])
    assert pinned["tqdm"] == "4.66.0" and "absent" not in pinned
    with pytest.raises(ValueError, match="not in the dev group"):
        select(tools=["black"])
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        wheelhouse.marker_environment("3")


def test_the_real_lock_leaves_torch_out_and_brings_what_the_node_lacks():
    wheels = select()
    node_has = {"torch", "torchvision", "numpy", "pillow", "matplotlib", "triton", "sympy", "filelock"}
    assert not node_has & set(wheels) and not any(n.startswith("nvidia-") for n in wheels)
    assert {"tensordict", "ipywidgets", "tqdm", "imageio-ffmpeg", "nbmake", "pytest", "ipykernel", "jupytext"} <= set(wheels)
    assert {"pytest-xdist", "execnet"} <= set(wheels), "the cuda tests run on every core of the node"
    assert not {"gpufeed", "jupyterlab", "playwright", "ruff"} & set(wheels)
    assert "nvidia-dali-cuda130" in select(dali=True)


def test_the_download_is_binary_only_for_the_nodes_python_and_platform():
    cmd = wheelhouse.download_command("python -m pip", Path("r.txt"), Path("out"), "3.12", "2.28")
    assert cmd[:4] == ["python", "-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    plats = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert plats[0] == "manylinux_2_28_x86_64" and "manylinux2014_x86_64" in plats
    assert "manylinux_2_29_x86_64" not in plats


def test_make_test_gpu_runs_offline_from_the_wheelhouse():
    makefile = (ROOT / "Makefile").read_text()
    assert "tools/wheelhouse.py node-env --venv $(NODE_VENV) --wheelhouse $(WHEELHOUSE)" in makefile
    assert "tools/wheelhouse.py collect" in makefile and "tools/gpurun run" in makefile
    assert "| tee $(NODE_VENV).log" in makefile and "GPURUN_NODE_ENV_LOG=$(NODE_VENV).log" in makefile, (
        "the node-env log goes into the run's archive")


def tiny_wheel(folder: Path, name: str, requires: list[str]) -> Path:
    """A pure-Python wheel ``name-0.1`` whose module ``name`` sets ``OK = True``, made by hand (offline)."""
    info = f"{name}-0.1.dist-info"
    files = {f"{name}/__init__.py": "OK = True\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: 0.1\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(text.encode())}\n" for path, text in files.items()) + f"{info}/RECORD,,\n"
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(path, text)
    return wheel


def wheelhouse_of(folder: Path, have: list[str], requires: list[str]) -> Path:
    folder.mkdir()
    tiny_wheel(folder, "gpufeedtiny", requires)
    (folder / "requirements.txt").write_text("gpufeedtiny==0.1\n")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    (folder / wheelhouse.MANIFEST).write_text(json.dumps({"python": python, "have": have}))
    return folder


#: The tests that use :func:`node_python` keep to one xdist worker (``--dist loadgroup``): a module
#: fixture is made once per worker.
NODE_PYTHON = pytest.mark.xdist_group("wheelhouse-node-python")


@pytest.fixture(scope="module")
def node_python(tmp_path_factory) -> Path:
    """A Python that is itself a venv with torch, as on a cluster's GPU node (``/opt/torch/.venv``):
    a venv of this Python's base interpreter, given this environment's site-packages by a .pth."""
    node = tmp_path_factory.mktemp("opt") / "torch-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(node)], check=True)
    purelib = subprocess.run([str(node / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "node-torch.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    python = node / "bin" / "python"
    probe = "import importlib.util, sys; print(sys.prefix != sys.base_prefix, importlib.util.find_spec('torch').origin)"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.startswith("True")
    return python


def node_env(python: Path, venv: Path, house: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), str(ROOT / "tools" / "wheelhouse.py"), "node-env", "--venv", str(venv),
                           "--wheelhouse", str(house)], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
@NODE_PYTHON
def test_node_env_from_a_python_that_is_a_venv_sees_its_torch(node_python, tmp_path):
    house = wheelhouse_of(tmp_path / "wheelhouse", have=["torch", "numpy", "pyyaml"], requires=["numpy>=1"])
    made = node_env(node_python, tmp_path / "node-venv", house)
    assert made.returncode == 0, made.stderr
    venv_python = tmp_path / "node-venv" / "bin" / "python"
    # torch is found, not imported (3 s): node-env has just imported it in this venv (and fails where it cannot)
    probe = ("import importlib.util, gpufeed, gpufeedtiny, yaml; "
             "print(gpufeedtiny.OK, gpufeed.__file__, importlib.util.find_spec('torch').origin)")
    out = subprocess.run([str(venv_python), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    ok, package, torch = out.stdout.split()
    assert ok == "True" and package.startswith(str(ROOT / "src"))
    assert torch.startswith(sysconfig.get_path("purelib")), "the node's own torch"
    # the wheel went into the new venv, not the node's own environment
    assert list((tmp_path / "node-venv").rglob("gpufeedtiny/__init__.py"))


@pytest.mark.slow
@NODE_PYTHON
@pytest.mark.parametrize(("have", "requires", "says"), [
    (["pyyaml", "nosuchpkg"], [], "has no nosuchpkg"),  # not torch: importing it would take 3 s of each
    (["pyyaml", "numpy"], ["numpy>=999"], "needs numpy>=999"),
])
def test_node_env_stops_in_one_line_naming_the_package_and_the_flag(node_python, tmp_path, have, requires, says):
    house = wheelhouse_of(tmp_path / "wheelhouse", have=have, requires=requires)
    made = node_env(node_python, tmp_path / "node-venv", house)
    assert made.returncode == 1 and not (tmp_path / "node-venv").exists()
    (line,) = made.stderr.strip().splitlines()
    assert says in line and "WHEELHOUSE_ARGS (--have ...)" in line and "make wheelhouse" in line


def test_node_env_refuses_wheels_for_another_python(tmp_path):
    house = wheelhouse_of(tmp_path / "wheelhouse", have=[], requires=[])
    (house / wheelhouse.MANIFEST).write_text(json.dumps({"python": "3.99", "have": []}))
    with pytest.raises(wheelhouse.NodeEnvError, match=r"for Python 3\.99.*--python"):
        wheelhouse.check_node(house)
