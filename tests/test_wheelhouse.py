"""The wheelhouse for an offline GPU node (tools/wheelhouse.py): which wheels, checked offline."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import wheelhouse  # noqa: E402  (tools/wheelhouse.py)

ENV = wheelhouse.marker_environment("3.12")


def lock() -> dict:
    return wheelhouse.tomllib.loads((ROOT / "uv.lock").read_text())


def fake_lock() -> dict:
    """A small lock: the project needs torch and tensordict (which needs torch and cloudpickle)."""
    pkg = lambda name, version, *deps, **kw: {"name": name, "version": version, "dependencies": list(deps), **kw}  # noqa: E731
    return {"package": [
        pkg("gpufeed", "0.1.0", {"name": "torch"}, {"name": "tensordict"},
            {"name": "old-only", "marker": "python_full_version < '3.11'"},
            **{"optional-dependencies": {"dali": [{"name": "nvidia-dali-cuda130", "marker": "sys_platform == 'linux'"}]},
               "dev-dependencies": {"dev": [{"name": "pytest"}, {"name": "ruff"}]}}),
        pkg("torch", "2.11.0", {"name": "filelock"}, {"name": "nvidia-cublas", "marker": "platform_machine == 'x86_64'"}),
        pkg("tensordict", "0.10.0", {"name": "torch"}, {"name": "cloudpickle"}, {"name": "filelock"}),
        pkg("filelock", "3.0"), pkg("nvidia-cublas", "13.0"), pkg("cloudpickle", "3.1"), pkg("old-only", "1.0"),
        pkg("nvidia-dali-cuda130", "2.0"), pkg("ruff", "0.6"),
        pkg("pytest", "8.0", {"name": "pluggy", "version": "1.5", "marker": "python_full_version < '3.12'"},
            {"name": "pluggy", "version": "1.6", "marker": "python_full_version >= '3.12'"}),
        pkg("pluggy", "1.5", **{"resolution-markers": ["python_full_version < '3.12'"]}),
        pkg("pluggy", "1.6", **{"resolution-markers": ["python_full_version >= '3.12'"]}),
    ]}


def test_what_the_node_has_is_left_out_with_everything_it_pulls_in():
    wheels = wheelhouse.select(fake_lock(), ENV, have=["torch"], tools=["pytest"], pins=[])
    # torch's own dependencies (filelock, the CUDA libraries) are on the node with torch, even
    # where tensordict needs them too; markers are read for Python 3.12 on Linux x86_64.
    assert wheels == {"tensordict": "0.10.0", "cloudpickle": "3.1", "pytest": "8.0", "pluggy": "1.6"}
    old = wheelhouse.select(fake_lock(), wheelhouse.marker_environment("3.10"), have=["torch"], tools=[], pins=[])
    assert old == {"tensordict": "0.10.0", "cloudpickle": "3.1", "old-only": "1.0"}


def test_the_lists_can_change_and_dali_comes_only_when_asked():
    everything = wheelhouse.select(fake_lock(), ENV, have=[], tools=["pytest", "ruff"], dali=True, pins=[])
    assert {"torch", "filelock", "nvidia-cublas", "ruff", "nvidia-dali-cuda130"} <= set(everything)
    assert "nvidia-dali-cuda130" not in wheelhouse.select(fake_lock(), ENV, have=[], tools=[], pins=[])
    pinned = wheelhouse.select(fake_lock(), ENV, have=["torch"], tools=[], pins=["cloudpickle==3.0", "absent==1"])
    assert pinned["cloudpickle"] == "3.0" and "absent" not in pinned
    with pytest.raises(ValueError, match="not in the dev group"):
        wheelhouse.select(fake_lock(), ENV, tools=["black"])
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        wheelhouse.marker_environment("3")


def test_the_real_lock_leaves_torch_out_and_brings_what_the_node_lacks():
    wheels = wheelhouse.select(lock(), ENV)
    node_has = {"torch", "torchvision", "numpy", "pillow", "matplotlib", "triton", "sympy", "filelock"}
    assert not node_has & set(wheels) and not any(n.startswith("nvidia-") for n in wheels)
    assert {"tensordict", "ipywidgets", "tqdm", "imageio-ffmpeg", "nbmake", "pytest", "ipykernel", "jupytext"} <= set(wheels)
    assert not {"gpufeed", "jupyterlab", "playwright", "ruff"} & set(wheels)
    assert "nvidia-dali-cuda130" in wheelhouse.select(lock(), ENV, dali=True)


def test_the_download_is_binary_only_for_the_nodes_python_and_platform():
    cmd = wheelhouse.download_command("python -m pip", Path("r.txt"), Path("out"), "3.12", "2.28")
    assert cmd[:4] == ["python", "-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    plats = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert plats[0] == "manylinux_2_28_x86_64" and "manylinux2014_x86_64" in plats
    assert "manylinux_2_29_x86_64" not in plats


def test_make_test_gpu_runs_offline_from_the_wheelhouse():
    makefile = (ROOT / "Makefile").read_text()
    assert "--system-site-packages" in makefile and "--no-index --find-links $(WHEELHOUSE)" in makefile
    assert "tools/wheelhouse.py collect" in makefile and "LESSONS ?= all" in makefile
