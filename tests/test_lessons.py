"""The one list of lessons (gpufeed.measure.lessons) against what it lists: the notebooks on disk,
their titles, the README's lesson table, and what reads it (the builder, the site, the GPU run)."""

import re
import sys
from pathlib import Path

from gpufeed.measure.lessons import LESSONS, lesson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))


def test_every_notebook_is_listed_once_with_its_title():
    on_disk = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert [x.stem for x in LESSONS] == on_disk, "the registry lists every lesson source, in order"
    for x in LESSONS:
        first = (ROOT / x.source).read_text().split("\n# # ", 1)[1].splitlines()[0]
        assert first == f"{x.number} · {x.title}", f"{x.source}: its title is the registry's"
        assert x.stem.startswith(f"{x.number}_") and x.gpu_s[0] < x.gpu_s[1]


def test_the_readme_table_lists_the_lessons_of_the_registry():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## The lessons"):].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d\d) \| \[([^\]]+)\]\(notebooks/(\w+)\.ipynb\) \|", table, re.M)
    assert [(n, stem) for n, _, stem in rows] == [(x.number, x.stem) for x in LESSONS]
    assert [t.lower() for _, t, _ in rows] == [x.title.lower() for x in LESSONS]


def test_the_tools_read_the_registry():
    from gpurun import steps

    import book
    import notebooks

    assert {x.number: x.title for x in LESSONS} == notebooks.LESSONS
    assert [p.stem for p in book.lessons()] == [x.stem for x in LESSONS]
    assert [p.lesson.number for p in steps.producers() if p.lesson] == [x.number for x in LESSONS if x.references]
    assert lesson("11").owner == "lesson11"
