"""The wheelhouse for an offline GPU node (tools/wheelhouse.py): which wheels, checked offline."""

import sys
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
    assert "--system-site-packages" in makefile and "--no-index --find-links $(WHEELHOUSE)" in makefile
    assert "tools/wheelhouse.py collect" in makefile and "LESSONS ?= all" in makefile
