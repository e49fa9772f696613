"""Colab: the badges and the generated setup cell (tools/notebooks.py).

tests/test_notebooks.py checks that each notebook has a badge and a setup cell. Here the setup
cell is *run*, with fake ``google.colab``, ``subprocess``, ``torch`` and ``gpufeed`` modules: on
Colab it must install only what Colab lacks, never replace Colab's torch, and pick the DALI wheel
for Colab's CUDA in the DALI lesson; anywhere else it must only import gpufeed and call setup().
"""

import io
import json
import re
import sys
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_environment import names, pyproject_lists  # tests/test_environment.py

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "tools"))
import notebooks as builder  # noqa: E402  (tools/notebooks.py)

#: What Colab's image already holds, of what gpufeed needs (so the setup need not install it).
COLAB_HAS = {"torch", "torchvision", "numpy", "pillow", "matplotlib", "ipywidgets", "tqdm", "setuptools"}
#: Colab's own builds, which an install must never replace (a CUDA mismatch, gigabytes, a restart).
NEVER = {"torch", "torchvision", "torchaudio"}
#: What may be installed with its dependencies (under the constraint that keeps Colab's torch).
WITH_DEPS = {"tensordict", "imageio-ffmpeg", "psutil", "tabulate", "nvidia-dali-cuda120", "nvidia-dali-cuda130"}
#: pip options the setup may use; anything else (-U, --force-reinstall, -i, -r, ...) fails the test.
FLAGS, FLAGS_WITH_VALUE = {"-q", "--quiet", "--no-deps"}, {"-c", "--constraint"}
COLAB_TORCH = "2.11.0+cu128"  # what the fake torch says it is: Colab's GPU runtime (README, "Which torch")


def setup_cell(path: Path) -> str:
    return "".join(json.loads(path.read_text())["cells"][1]["source"])


def run_setup(source: str, monkeypatch, colab: bool, cuda: str | None = "12.6") -> dict:
    """Executes a setup cell with fake modules; returns the pip calls, files written and events."""
    events, files = [], {}

    def run(args, **kwargs):
        events.append(("run", list(args), kwargs))
        return types.SimpleNamespace(returncode=0)

    class File(io.StringIO):
        def __init__(self, path, mode="r", *args, **kwargs):
            super().__init__()
            assert "w" in mode, f"the setup cell reads {path}"
            self.path = path

        def close(self):
            files[self.path] = self.getvalue()
            super().close()

    fake_subprocess = types.ModuleType("subprocess")
    fake_subprocess.run = run
    fake_torch = types.ModuleType("torch")
    fake_torch.__version__ = COLAB_TORCH
    fake_torch.version = types.SimpleNamespace(cuda=cuda)
    fake_gpufeed = types.ModuleType("gpufeed")
    fake_gpufeed.setup = lambda lesson=None: events.append(("setup",)) or "session"
    ns = {"__name__": "__main__", "open": File}
    with monkeypatch.context() as m:
        for name, module in {"subprocess": fake_subprocess, "torch": fake_torch, "gpufeed": fake_gpufeed}.items():
            m.setitem(sys.modules, name, module)
        if colab:
            m.setitem(sys.modules, "google", types.ModuleType("google"))
            m.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
        else:
            m.delitem(sys.modules, "google.colab", raising=False)
        exec(compile(source, "setup cell", "exec"), ns)
    return {"events": events, "files": files, "ns": ns}


def pip_installs(events) -> list[tuple[set[str], dict[str, Requirement], str | None]]:
    """Each pip call as (flags, requirements by name, constraints file); fails on anything unknown."""
    out = []
    for event in events:
        if event[0] != "run":
            continue
        _, args, kwargs = event
        assert args[:4] == [sys.executable, "-m", "pip", "install"], f"not a pip install of this Python: {args}"
        assert kwargs.get("check") is True, f"a failed install must stop the cell: {args}"
        flags, reqs, constraints, rest = set(), {}, None, iter(args[4:])
        for arg in rest:
            if arg in FLAGS_WITH_VALUE:
                constraints = next(rest)
            elif arg.startswith("-"):
                assert arg in FLAGS, f"pip option {arg} is not allowed in the Colab setup ({args})"
                flags.add(arg)
            else:
                req = Requirement(arg)
                reqs[canonicalize_name(req.name)] = req
        out.append((flags, reqs, constraints))
    return out


def uses_dali(path: Path) -> bool:
    # Code lines only: the prose may name DALI's modules (lesson 07 mentions its proxy).
    code = "\n".join(line for line in path.with_suffix(".py").read_text().splitlines() if not line.lstrip().startswith("#"))
    return re.search(r"from gpufeed.measure import dali\b|import gpufeed\.measure\.dali|from gpufeed\.measure\.dali|nvidia\.dali", code) is not None


def test_the_address_is_one_github_repository():
    url = builder.repo_url()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url) and not url.endswith(".git"), (
        f"[project.urls] Homepage must be https://github.com/<owner>/<repo>, not {url}")
    assert "github.com/" not in builder.ROOT.joinpath("tools", "notebooks.py").read_text().replace(
        'removeprefix("https://github.com/")', ""), "tools/notebooks.py must not hard-code an address"


def test_badges_and_installs_follow_the_address(monkeypatch):
    """Change the address in one place and every badge and install follows (e.g. a fork)."""
    old = builder.repo_url()
    monkeypatch.setattr(builder, "repo_url", lambda: "https://github.com/someone/fork")
    for src in builder.sources():
        text = json.dumps(builder.build(src))
        assert old not in text.replace("github.com/someone/fork", ""), f"{src.name} keeps {old}"
        badge = f"https://colab.research.google.com/github/someone/fork/blob/main/notebooks/{src.stem}.ipynb"
        assert text.count("colab.research.google.com/github/") == 1 and badge in text
        assert "gpufeed @ git+https://github.com/someone/fork@main" in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_on_colab_the_setup_installs_what_colab_lacks_and_keeps_its_torch(path, monkeypatch):
    got = run_setup(setup_cell(path), monkeypatch, colab=True)
    installs = pip_installs(got["events"])
    assert installs and got["events"][-1] == ("setup",), "installs first, then gpufeed.setup()"
    installed = set()
    for flags, reqs, constraints in installs:
        assert not set(reqs) & NEVER, f"the setup would replace Colab's {set(reqs) & NEVER}"
        if "--no-deps" not in flags:
            assert set(reqs) <= WITH_DEPS, f"{set(reqs) - WITH_DEPS} installed with its dependencies"
            assert constraints and f"torch=={COLAB_TORCH}" in got["files"].get(constraints, "").split(), (
                "an install with dependencies needs a constraint that pins Colab's torch")
        installed |= set(reqs)
    gpufeed = next(reqs["gpufeed"] for flags, reqs, _ in installs if "gpufeed" in reqs)
    assert gpufeed.url == f"git+{builder.repo_url()}@main", "the package comes from the repository's main branch"
    assert "--no-deps" in next(flags for flags, reqs, _ in installs if "gpufeed" in reqs)
    missing = names(pyproject_lists()[0]) - COLAB_HAS - installed
    assert not missing, f"gpufeed needs {missing}, which Colab lacks: install it in tools/notebooks.py"
    dali = {n for n in installed if n.startswith("nvidia-dali")}
    assert dali == ({"nvidia-dali-cuda120"} if uses_dali(path) else set()), "DALI only where a lesson uses it"
    assert installed - dali == {"gpufeed", "tensordict", "imageio-ffmpeg", "psutil", "tabulate"}


@pytest.mark.parametrize(("cuda", "wheel"), [("12.6", "nvidia-dali-cuda120"), ("13.0", "nvidia-dali-cuda130"),
                                             (None, "nvidia-dali-cuda120")])  # None: a CPU runtime
def test_the_dali_wheel_matches_colabs_cuda(cuda, wheel, monkeypatch):
    dali_lessons = [p for p in NOTEBOOKS if uses_dali(p)]
    assert dali_lessons, "lesson 10 uses DALI"
    for path in dali_lessons:
        installs = pip_installs(run_setup(setup_cell(path), monkeypatch, colab=True, cuda=cuda)["events"])
        assert {n for _, reqs, _ in installs for n in reqs if n.startswith("nvidia-dali")} == {wheel}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outside_colab_the_setup_only_imports_gpufeed(path, monkeypatch):
    got = run_setup(setup_cell(path), monkeypatch, colab=False)
    assert got["events"] == [("setup",)] and got["files"] == {}, "outside Colab: no installs, no files"
    assert got["ns"]["S"] == "session"
    assert {k for k in got["ns"] if not k.startswith("__")} == {"open", "sys", "gpufeed", "S"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_setup_cell_folds_on_the_site_and_stays_visible_in_colab_and_jupyterlab(path):
    """The site folds the setup cell (tag hide-cell, MyST-NB), so that a page opens on the lesson;
    Colab and JupyterLab, where it must be run first, show it: no ``jupyter.source_hidden`` (JupyterLab)
    and no ``cellView: form`` (Colab's own folding)."""
    meta = json.loads(path.read_text())["cells"][1]["metadata"]
    assert set(builder.SETUP_TAGS) <= set(meta.get("tags", [])), f"{path.name}: the site would open on the setup"
    assert not meta.get("jupyter", {}).get("source_hidden") and not meta.get("jupyter", {}).get("outputs_hidden")
    assert "cellView" not in meta.get("colab", {}) and "cellView" not in meta
