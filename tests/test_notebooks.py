"""Checks on the notebooks themselves (nbmake runs them; these check their shape)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "tools"))
import notebooks as builder  # noqa: E402  (tools/notebooks.py)


def cells(path):
    return json.loads(path.read_text())["cells"]


def source(cell):
    return "".join(cell["source"])


def test_there_are_notebooks_numbered_in_order():
    numbers = [p.name[:2] for p in NOTEBOOKS]
    assert numbers and numbers[0] == "00" and len(set(numbers)) == len(numbers)
    assert set(numbers) <= set(builder.LESSONS), "every notebook is a lesson of the outline (tools/notebooks.py)"
    for p in NOTEBOOKS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", p.name), p.name


def test_notebooks_are_in_sync_with_their_sources():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "notebooks.py"), "check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path):
    for c in cells(path):
        if c["cell_type"] == "code":
            assert c["outputs"] == [] and c["execution_count"] is None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_title_badge_and_setup_cell(path):
    first, second = cells(path)[:2]
    number = path.name[:2]
    assert source(first).startswith(f"# {number} · ")
    badge = f"https://colab.research.google.com/github/{builder.repo_url().removeprefix('https://github.com/')}/blob/main/notebooks/{path.name})"
    assert badge in source(first), "the Colab badge must point at this notebook's own path"
    for word in ("What you will learn", "Time:", "Prerequisites:"):
        assert word in source(first)
    assert second["cell_type"] == "code"
    setup = source(second)
    assert "google.colab" in setup and "gpufeed.setup()" in setup and '"--no-deps"' in setup
    assert re.search(r'pip install[^\n]*\btorch\b', setup) is None  # never replace Colab's torch


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_links_resolve_and_the_next_lesson_is_linked(path):
    text = "\n".join(source(c) for c in cells(path) if c["cell_type"] == "markdown")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://", "#")):
            continue
        assert (path.parent / target.split("#")[0]).exists(), f"{path.name} links to missing {target}"
    later = [p for p in NOTEBOOKS if p.name > path.name]
    if later:
        assert f"]({later[0].name})" in source(cells(path)[-1]), "the last cell links the next lesson"
    assert "Key takeaways" in text and "Exercises" in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cells_are_short(path):
    for c in cells(path):
        if c["cell_type"] == "code" and c is not cells(path)[1]:
            assert len(c["source"]) <= 40, f"{path.name}: a {len(c['source'])}-line cell; split it"


def test_the_builder_reads_sources_with_jupytext(tmp_path):
    src = tmp_path / "00_t.py"
    src.write_text("# %% [markdown]\n# # 00 · T\n#\n# text\n\n# %%\nx = 1\n\n# %%\ny = 2\n")
    assert builder.read_cells(src) == [("markdown", "# 00 · T\n\ntext"), ("code", "x = 1"), ("code", "y = 2")]
    src.write_text("# %%\nx = 1\n")
    with pytest.raises(ValueError, match="first cell must be markdown"):
        builder.build(src)


def test_jupyterlab_opens_a_source_as_a_notebook_and_saves_it_unchanged(tmp_path):
    """What `make lab` does with notebooks/NN_topic.py: jupytext's contents manager (its server
    extension is installed with the environment) opens it as a notebook; saving it after a run
    (outputs, kernel metadata, execution times) writes back the same text, the folded solutions'
    tags and folding included, and no paired .ipynb."""
    contents = pytest.importorskip("jupyter_server.services.contents.filemanager")
    from jupytext.sync_contentsmanager import build_sync_jupytext_contents_manager_class

    source = builder.sources()[0]
    shutil.copy(ROOT / "notebooks" / "jupytext.toml", tmp_path)
    shutil.copy(source, tmp_path)
    manager = build_sync_jupytext_contents_manager_class(contents.FileContentsManager)(root_dir=str(tmp_path))
    model = manager.get(source.name)
    assert model["type"] == "notebook"
    notebook = model["content"]
    assert [(c.cell_type, c.source) for c in notebook.cells] == builder.read_cells(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    code = next(c for c in notebook.cells if c.cell_type == "code")
    code.outputs, code.execution_count = [{"output_type": "stream", "name": "stdout", "text": "1\n"}], 1
    code.metadata["execution"] = {"iopub.status.idle": "2025-01-01T00:00:00Z"}  # JupyterLab's timing
    manager.save({"type": "notebook", "content": notebook}, source.name)
    assert (tmp_path / source.name).read_text() == source.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["jupytext.toml", source.name])


def test_the_builder_keeps_a_solutions_folding(tmp_path):
    src = tmp_path / "00_t.py"
    header = '# %% tags=["solution", "hide-cell"] jupyter={"source_hidden": true, "outputs_hidden": true}'
    src.write_text(f"# %% [markdown]\n# # 00 · T\n\n# %%\nx = 1\n\n{header}\ny = 2\n")
    plain, solution = builder.build(src).cells[2:4]
    assert plain.metadata == {}
    assert solution.metadata == {"tags": ["solution", "hide-cell"],
                                 "jupyter": {"source_hidden": True, "outputs_hidden": True}}


def exercises(path):
    """The numbers of the exercises listed under a lesson's "## Exercises" heading (up to the next
    heading), the index of that cell, and its text."""
    for i, c in enumerate(cells(path)):
        if c["cell_type"] == "markdown" and "## Exercises" in source(c):
            text = re.split(r"^#", source(c).split("## Exercises", 1)[1], flags=re.M)[0]
            return [int(n) for n in re.findall(r"^(\d+)\. ", text, re.M)], i, text
    raise AssertionError(f"{path.name} has no '## Exercises' heading")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_a_folded_solution(path):
    """Every exercise has one worked solution after the exercises: a code cell tagged "solution" and
    "hide-cell" (Jupyter Book folds it) with jupyter.source_hidden (JupyterLab folds it), opening with
    "# Solution to exercise N: title" and comment lines of why, printing what it found (nbmake runs
    it). The exercises tell the learner that the solutions follow, folded."""
    numbers, at, text = exercises(path)
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 2, f"{path.name}: exercises {numbers}"
    assert re.search(r"solution", text, re.I), f"{path.name}: the exercises should say a worked solution follows"
    solved = []
    for c in cells(path)[at + 1:]:
        if "solution" not in c.get("metadata", {}).get("tags", []):
            continue
        src = source(c)
        head = re.match(r"# Solution to exercise (\d+): \S", src)
        assert c["cell_type"] == "code" and head, f"{path.name}: a solution cell starts '# Solution to exercise N: title'"
        assert "hide-cell" in c["metadata"]["tags"], f"{path.name}: solution {head[1]} is not tagged hide-cell"
        assert c["metadata"].get("jupyter", {}).get("source_hidden") is True, f"{path.name}: solution {head[1]} is not folded"
        why = re.match(r"((?:#[^\n]*\n)+)", src)[1].count("\n")
        assert why >= 3, f"{path.name}: solution {head[1]} says why in a few comment lines before its code"
        assert re.search(r"\b(print|say)\(", src), f"{path.name}: solution {head[1]} prints what it found"
        solved.append(int(head[1]))
    assert solved == numbers, f"{path.name}: exercises {numbers}, worked solutions {solved}"
