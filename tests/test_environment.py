"""pyproject.toml, uv.lock and environment.yml must describe the same environment."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


CONDA_NAMES = {"pytorch": "torch"}  # conda-forge's name for a package -> PyPI's


def names(requirements):
    out = {re.split(r"[<>=!~;\[ ]", r.strip(), maxsplit=1)[0].lower().replace("_", "-") for r in requirements if r.strip()}
    return {CONDA_NAMES.get(n, n) for n in out}


def pyproject_lists():
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest brings tomli
        import tomli as tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    return meta["project"]["dependencies"], extras["dali"], meta["dependency-groups"]["dev"], extras["codec"]


def conda_and_pip():
    conda, pip, in_pip = [], [], False
    text = (ROOT / "environment.yml").read_text()
    for line in text[text.index("dependencies:"):].splitlines():
        if re.match(r"\s*- pip:\s*$", line):
            in_pip = True
            continue
        m = re.match(r"(\s*)- (.+?)\s*(#.*)?$", line)
        if not m:
            continue
        (pip if in_pip and len(m.group(1)) > 2 else conda).append(m.group(2))
    return conda, pip


def test_environment_yml_lists_the_same_packages_as_pyproject():
    deps, dali, dev, _ = pyproject_lists()
    conda, pip = conda_and_pip()
    everything = names(conda) | names(pip)
    wanted = names(deps) | names(dev)
    assert wanted <= everything, f"missing from environment.yml: {sorted(wanted - everything)}"
    extra = everything - wanted - {"python", "pip", "nvidia-dali-cuda130", "-e"}
    assert not extra, f"in environment.yml but not in pyproject.toml: {sorted(extra)}"
    assert "-e ." in pip, "environment.yml's pip section installs the package itself"
    assert names(dali) <= names(pip)


def test_required_packages_are_there():
    deps, dali, dev, codec = pyproject_lists()
    have = names(deps) | names(dev)
    for pkg in ("torch", "torchvision", "tensordict", "matplotlib", "ipywidgets", "jupyterlab", "nbmake",
                "numpy", "pillow", "tqdm"):
        assert pkg in have, pkg
    assert names(dali) == {"nvidia-dali-cuda130"} and names(codec) == {"torchcodec"}


def test_lock_file_matches_pyproject():
    lock = (ROOT / "uv.lock").read_text()
    deps, dali, dev, _ = pyproject_lists()
    for pkg in names(deps) | names(dali) | names(dev):
        assert f'name = "{pkg}"' in lock, f"{pkg} is not in uv.lock: run `uv lock`"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^\s*(step )?make test\b", ci, re.M)  # step: .ci/run's timer
