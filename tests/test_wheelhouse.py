"""The wheelhouse for an offline GPU node (tools/wheelhouse.py): which wheels, checked offline."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import nodevenv  # noqa: E402  (tests/nodevenv.py: a node's python, its wheels and packages)
import wheelhouse  # noqa: E402  (tools/wheelhouse.py)
from nodevenv import wheelhouse_of  # noqa: E402

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


#: The tests that use :func:`node_python` keep to one xdist worker (``--dist loadgroup``): a module
#: fixture is made once per worker.
NODE_PYTHON = pytest.mark.xdist_group("wheelhouse-node-python")


@pytest.fixture(scope="module")
def node_python(tmp_path_factory) -> Path:
    """A Python that is itself a venv with torch, as on a cluster's GPU node (``/opt/torch/.venv``):
    a venv of this Python's base interpreter, given this environment's site-packages by a .pth."""
    return nodevenv.node_python(tmp_path_factory.mktemp("opt") / "torch-venv")


def node_env(python: Path, venv: Path, house: Path, *more: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), str(ROOT / "tools" / "wheelhouse.py"), "node-env", "--venv", str(venv),
                           "--wheelhouse", str(house), *more], capture_output=True, text=True, env=env, timeout=600)


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


# --- every package pip will see, checked against the wheels before anything installs ----------

NODE = {"torch": ("2.11.0+cu130", ["typing-extensions>=4.10", "filelock"], "/opt/torch/.venv/site-packages"),
        "typing-extensions": ("4.12.2", [], "/opt"), "filelock": ("3.16.1", [], "/opt"),
        "psutil": ("5.9.0", [], "/opt"), "pytest": ("7.4.0", ["pluggy<2,>=0.12"], "/opt"),
        "pluggy": ("1.5.0", [], "/opt"), "pytest-benchmark": ("4.0.0", ["pytest>=3.8"], "/opt"),
        "oldtool": ("1.0", ["pytest<7"], "/opt")}


@pytest.mark.parametrize(("wheels", "bad", "notes"), [
    ({"tensordict": ("0.10.0", ["torch>=2.9"])}, [], []),
    ({"tensordict": ("0.10.0", ["torch>=2.12"])},  # the node's torch is too old for a wheel
     ["tensordict 0.10.0 needs torch>=2.12: the node has torch 2.11.0+cu130 (/opt/torch/.venv/site-packages) and "
      "the wheelhouse has none"], []),
    ({"ipython": ("9.8.0", ["psutil>=7; sys_platform != 'emscripten'"])},  # the H100's node-env failure, found first
     ["ipython 9.8.0 needs psutil>=7: the node has psutil 5.9.0 (/opt) and the wheelhouse has none"], []),
    ({"ipython": ("9.8.0", ["psutil>=7"]), "psutil": ("7.0.0", [])}, [], []),  # the wheelhouse brings it
    ({"nbmake": ("1.5", ["nbclient>=0.6"])}, ["nbmake 1.5 needs nbclient>=0.6: neither the node nor the wheelhouse has it"], []),
    ({"typing-extensions": ("4.8.0", [])},  # replaces what torch (what the course runs) needs
     ["the wheelhouse's typing-extensions 4.8.0 replaces the node's 4.12.2, and torch 2.11.0+cu130 needs "
      "typing-extensions>=4.10"], []),
    ({"pytest": ("8.3.5", ["pluggy<2,>=1.5"])}, [],  # replaces what a package the course does not run needs
     ["the wheelhouse's pytest 8.3.5 replaces the node's 7.4.0, and oldtool 1.0 needs pytest<7"]),
    ({"nbmake": ("1.5", ["nbclient>=0.6 ; extra == 'x'", "pytest>=6 ; python_version < '3.0'"])}, [], []),  # not for this node
], ids=["fits", "node-too-old", "node-psutil", "wheel-brings-it", "nobody-has-it", "breaks-torch", "breaks-a-tool",
        "markers-and-extras"])
def test_every_package_pip_will_see_is_checked_against_the_wheels(wheels, bad, notes):
    from packaging.markers import default_environment

    env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3", "extra": ""}
    assert wheelhouse.conflicts(wheels, NODE, ["torch"], env) == (bad, notes)


@pytest.mark.slow
@NODE_PYTHON
def test_node_env_names_a_conflict_of_the_nodes_own_packages_in_one_line_and_returns_why(node_python, tmp_path):
    """A wheel that needs a newer version of a package the node has (not a --have one): stopped
    before pip runs, in one line naming both; with --out (``$OUT`` on the node) the log, run.json
    and summary.txt are there."""
    import yaml

    house = wheelhouse_of(tmp_path / "wheelhouse", have=["pyyaml"], requires=["pyyaml>=999"])
    made = node_env(node_python, tmp_path / "node-venv", house, "--out", str(tmp_path / "out"))
    (line,) = made.stderr.strip().splitlines()
    assert made.returncode == 1 and not (tmp_path / "node-venv").exists()
    assert f"gpufeedtiny 0.1 needs pyyaml>=999: the node has pyyaml {yaml.__version__}" in line
    assert "make wheelhouse" in line
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["node-env.log", "run.json", "summary.txt"]
    assert line in (out / "node-env.log").read_text()
    assert json.loads((out / "run.json").read_text())["steps"][0] == {
        "name": "node-env", "step": "node-env", "status": "failed", "summary": line}
    said = (out / "summary.txt").read_text().split("\n\n")[0]
    assert said.replace("\n", " ") == f"test-gpu: FAILED in node-env: {line}", "the first lines say why, wrapped"
    assert max(map(len, (out / "summary.txt").read_text().splitlines())) <= 100
