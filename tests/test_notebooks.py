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
    assert "google.colab" in setup and f"gpufeed.setup(\"{number}\")" in setup and '"--no-deps"' in setup
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
    setup = "\n".join(f"# %%\n{builder.setup_line('00')}".splitlines())
    src.write_text(f"# %% [markdown]\n# # 00 · T\n#\n# text\n\n{setup}\n\n# %%\nx = 1\n")
    assert builder.read_cells(src) == [("markdown", "# 00 · T\n\ntext"), ("code", builder.setup_line("00")), ("code", "x = 1")]
    code = [c.source for c in builder.build(src).cells if c.cell_type == "code"]
    assert code[0].startswith("# Setup") and code[0].endswith(builder.setup_line("00")), "Colab lines, then the source's setup"
    assert code[1:] == ["x = 1"], "the source's setup cell is not repeated"
    src.write_text("# %%\nx = 1\n")
    with pytest.raises(ValueError, match="first cell must be markdown"):
        builder.build(src)
    src.write_text("# %% [markdown]\n# # 00 · T\n\n# %%\nx = 1\n")
    with pytest.raises(ValueError, match="00_t.py: the second cell must be the setup cell"):
        builder.build(src)


@pytest.mark.parametrize("source", builder.sources(), ids=lambda p: p.name)
def test_each_source_sets_up_before_anything_else(source):
    """The sources are notebooks a learner opens in JupyterLab (notebooks/jupytext.toml): the setup
    call that defines ``S`` is in the source itself, not only in the built .ipynb."""
    cells = builder.read_cells(source)
    assert cells[1] == ("code", builder.setup_line(source.name[:2])), f"{source.name}: the setup cell must follow the title"
    assert not any("gpufeed.setup(" in text for _, text in cells[2:]), f"{source.name}: set up once"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["00_setup.py", "08_prefetch.py"])
def test_a_source_opened_through_jupytext_is_the_notebook_nbmake_runs(name):
    """What a learner does with ``notebooks/NN_name.py`` in JupyterLab: jupytext's contents manager
    opens it as a notebook. Its code cells are the built ``.ipynb``'s, which nbmake runs top to
    bottom in ``make test``, less the Colab lines in front of the setup cell (so it runs as it
    stands, with no cell of the built notebook)."""
    contents = pytest.importorskip("jupyter_server.services.contents.filemanager")
    from jupytext.sync_contentsmanager import build_sync_jupytext_contents_manager_class

    path = ROOT / "notebooks" / name
    manager = build_sync_jupytext_contents_manager_class(contents.FileContentsManager)(root_dir=str(path.parent))
    opened = [c.source for c in manager.get(path.name)["content"].cells if c.cell_type == "code"]
    assert not any("google.colab" in c for c in opened), "the source has no Colab lines"
    built = [source(c) for c in cells(path.with_suffix(".ipynb")) if c["cell_type"] == "code"]
    assert built[0].startswith("# Setup") and built[0].endswith(opened[0]) and opened[0] == builder.setup_line(name[:2])
    assert opened[1:] == built[1:]


SOLUTION = '# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["solution", "hide-cell"]'


def test_a_folded_solution_keeps_its_folding_in_the_notebook_and_through_jupyterlab(tmp_path):
    """A worked solution's header folds it in JupyterLab (``jupyter``) and on the site (``tags``):
    the builder carries both into the .ipynb, and JupyterLab saves the header back as written."""
    contents = pytest.importorskip("jupyter_server.services.contents.filemanager")
    from jupytext.sync_contentsmanager import build_sync_jupytext_contents_manager_class

    src = tmp_path / "00_t.py"
    src.write_text(f"# %% [markdown]\n# # 00 · T\n\n# %%\n{builder.setup_line('00')}\n\n# %%\nx = 1\n\n{SOLUTION}\n# Solution\ny = 2\n")
    built = builder.build(src).cells
    assert [c.metadata for c in built[2:4]] == [
        {}, {"tags": ["solution", "hide-cell"], "jupyter": {"outputs_hidden": True, "source_hidden": True}}]
    shutil.copy(ROOT / "notebooks" / "jupytext.toml", tmp_path)
    manager = build_sync_jupytext_contents_manager_class(contents.FileContentsManager)(root_dir=str(tmp_path))
    before = src.read_text()
    manager.save(manager.get(src.name), src.name)
    assert src.read_text() == before


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
    code.metadata.update(scrolled=True, execution={"iopub.status.idle": "2026-01-01T00:00:00Z"})  # a run's
    manager.save({"type": "notebook", "content": notebook}, source.name)
    assert (tmp_path / source.name).read_text() == source.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["jupytext.toml", source.name])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_lesson_ends_with_further_reading(path):
    """Three to five primary sources, each a link and one line of why, right before the footer."""
    reading = source(cells(path)[-2])
    assert reading.startswith("## Further reading"), f"{path.name}: Further reading comes last, before the footer"
    items = [line for line in reading.splitlines() if line.startswith("* ")]
    assert 3 <= len(items) <= 5, f"{path.name}: {len(items)} sources; give three to five"
    for item in items:
        assert re.match(r"\* \[[^\]]+\]\(https://[^)\s]+\) \([^)]+\): \S", item), f"{path.name}: {item[:80]}"


def test_lesson_00_names_the_sources_of_the_course():
    """The documents the course grew from are named, with their authors, and not linked: none is
    public at an address we can check."""
    text = "\n".join(source(c) for c in cells(NOTEBOOKS[0]) if c["cell_type"] == "markdown")
    assert "## Sources" in text and "results/published.json" in text
    sources = text.split("## Sources", 1)[1].split("\n## ", 1)[0]
    for quoted in ("3.5 MB to 207 KB", "122 us", "3.4 us"):  # what the lessons quote from the talk
        assert quoted in sources
    for named in ('"How to Efficiently Send Images to GPU"', "Francesco Saverio Zuppichini", "Slidev",
                  '"The fast train loops"', "Nasy", "Typst", '"Fast data augmentation in Pytorch using Nvidia DALI"',
                  "timeline notes"):
        assert named in sources, f"lesson 00's Sources should name {named}"
    assert not re.search(r"\]\(https?://|<https?://", sources), "the Sources are named without links"


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


def deep_dive_problems(notebook_cells: list[dict]) -> list[str]:
    """What breaks the deep-dive convention (issue 31, pacing) in a notebook's cells, as messages.

    A deep dive opens with a visible markdown cell ``### Deeper (optional): <topic>`` (not tagged
    "deeper"); the cells right after it carry the tag "deeper", and its code cells are folded as the
    solutions are: "hide-cell" for the site, ``jupyter.source_hidden`` and ``outputs_hidden`` for
    JupyterLab. The site folds the whole run under the heading (tools/book.py)."""
    problems = []
    heading = re.compile(re.escape(builder.DEEPER_HEADING) + r"\S")
    for i, c in enumerate(notebook_cells):
        meta, text = c.get("metadata", {}), source(c)
        tags = meta.get("tags", [])
        deeper = "deeper" in tags
        where = f"cell {i} ({text.strip().splitlines()[0][:50] if text.strip() else 'empty'})"
        if heading.match(text) and c["cell_type"] == "markdown":
            if deeper:
                problems.append(f"{where}: the deep dive's heading is tagged 'deeper': it must stay visible")
            following = notebook_cells[i + 1] if i + 1 < len(notebook_cells) else {}
            if "deeper" not in following.get("metadata", {}).get("tags", []):
                problems.append(f"{where}: a deep-dive heading with no cell tagged 'deeper' after it")
        if not deeper:
            continue
        before = notebook_cells[i - 1] if i else {}
        opens = before.get("cell_type") == "markdown" and heading.match(source(before))
        if "deeper" not in before.get("metadata", {}).get("tags", []) and not opens:
            problems.append(f"{where}: a deep dive must start with a visible markdown cell "
                            f"'{builder.DEEPER_HEADING}<topic>'")
        if c["cell_type"] == "code":
            folded = meta.get("jupyter", {})
            if "hide-cell" not in tags:
                problems.append(f"{where}: a deep dive's code cell needs the tag 'hide-cell' (the site folds it)")
            if folded.get("source_hidden") is not True or folded.get("outputs_hidden") is not True:
                problems.append(f"{where}: a deep dive's code cell needs jupyter={{\"source_hidden\": true, "
                                "\"outputs_hidden\": true}} (JupyterLab folds it)")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_deep_dives_are_folded_under_a_visible_heading(path):
    assert not deep_dive_problems(cells(path)), f"{path.name}:\n" + "\n".join(deep_dive_problems(cells(path)))


DEEP_DIVE = f'''# %% [markdown]
# {builder.DEEPER_HEADING}how the grain size is chosen
#
# Skip this on a first reading.

# %% [markdown] tags=["deeper"]
# Why the grain matters.

{SOLUTION.replace('"solution", ', '"deeper", ')}
grain = 32768
print(grain)

# %% [markdown]
# Back to the main line.

# %%
z = 3
'''


def test_a_deep_dive_keeps_its_tags_in_the_notebook_and_the_check_finds_each_slip(tmp_path):
    """The builder carries a deep dive's tags and folding into the .ipynb (a small tagged example:
    the lessons' own deep dives are checked above), and the check names each way to break it."""
    src = tmp_path / "00_t.py"
    src.write_text(f"# %% [markdown]\n# # 00 · T\n\n# %%\n{builder.setup_line('00')}\n\n{DEEP_DIVE}")
    built = [dict(c) for c in builder.build(src).cells]
    heading, text, code, back = built[2:6]
    assert source(heading).startswith("### Deeper (optional): how") and "tags" not in heading["metadata"]
    assert text["metadata"] == {"tags": ["deeper"]}
    assert code["metadata"] == {"tags": ["deeper", "hide-cell"],
                                "jupyter": {"outputs_hidden": True, "source_hidden": True}}
    assert "tags" not in back["metadata"]
    assert deep_dive_problems(built) == []

    def broken(edit) -> list[str]:
        copy = json.loads(json.dumps(built))
        edit(copy)
        return deep_dive_problems(copy)

    assert any("needs the tag 'hide-cell'" in p for p in broken(lambda c: c[4]["metadata"]["tags"].remove("hide-cell")))
    assert any("source_hidden" in p for p in broken(lambda c: c[4]["metadata"].pop("jupyter")))
    assert any("heading is tagged 'deeper'" in p for p in broken(lambda c: c[2]["metadata"].update(tags=["deeper"])))
    assert any("must start with a visible markdown cell" in p for p in broken(lambda c: c.pop(2)))
    assert any("no cell tagged 'deeper' after it" in p
               for p in broken(lambda c: [c[3]["metadata"].clear(), c[4]["metadata"].clear()]))


@pytest.mark.parametrize("source", builder.sources(), ids=lambda p: p.stem)
def test_each_lessons_main_line_is_read_in_half_an_hour(source):
    """Before '## Exercises' and outside folded deep dives (tag ``deeper``): at most 1,800 words of
    prose, 20 code cells and 260 lines of code (CONTRIBUTING.md; ``python tools/notebooks.py size``)."""
    size = builder.main_line_size(source.read_text())
    over = {k: f"{size[k]} > {limit}" for k, limit in builder.MAIN_LINE_LIMITS.items() if size[k] > limit}
    assert not over, f"{source.name}: the main line is over its limits: {over}; fold a deep dive or cut"


def test_the_main_line_count_stops_at_exercises_and_skips_deep_dives():
    text = ("# %% [markdown]\n# One two three\n# %%\na = 1\n\n# only a comment\nb = 2\n"
            '# %% [markdown] tags=["deeper"]\n# many words that a deep dive holds\n'
            '# %% tags=["deeper", "hide-cell"]\nc = 3\n# %%\n\n'  # an empty cell is no code cell
            "# %% [markdown]\n# ## Exercises\n# %%\nd = 4\n")
    assert builder.main_line_size(text) == {"words": 3, "code cells": 1, "code lines": 2}


def test_the_main_line_counts_docstring_example_runs():
    import doctest

    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(builder.main_line_size, "main_line_size", globs=vars(builder).copy()):
        runner.run(test)
    assert runner.summarize(verbose=False) == doctest.TestResults(0, 1)
