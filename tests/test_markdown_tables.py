"""Every markdown table renders: README.md, the notebooks' markdown cells and the slide deck.

GitHub (GFM) renders a table only when the header row and the delimiter row have the same number
of cells; otherwise the lines show as text full of pipes. Rows with more cells than the header lose
the extra ones, so every row must have the header's count too. A pipe inside a cell is written
``\\|`` (GFM splits on it even inside `code`); tables inside code blocks are not tables.
"""

import re
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import notebooks as builder  # noqa: E402  (tools/notebooks.py)

#: A GFM delimiter row: cells of dashes with optional colons.
DELIMITER = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
MD = MarkdownIt("commonmark").enable("table")


def cells(row: str) -> list[str]:
    """The cells of one table row: split on pipes not escaped with a backslash."""
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return re.split(r"(?<!\\)\|", row)


def code_lines(text: str) -> set[int]:
    """0-based numbers of the lines inside fenced or indented code blocks."""
    lines = set()
    for token in MD.parse(text):
        if token.type in ("fence", "code_block") and token.map:
            lines.update(range(*token.map))
    return lines


def table_problems(text: str) -> list[str]:
    """One message per table-like block that does not render as a table with equal cell counts."""
    parsed = {t.map[0] for t in MD.parse(text) if t.type == "table_open" and t.map}
    skip, lines, problems = code_lines(text), text.splitlines(), []
    i = 0
    while i < len(lines):
        if i in skip or not lines[i].lstrip().startswith("|"):
            i += 1
            continue
        start = i
        while i < len(lines) and i not in skip and lines[i].lstrip().startswith("|"):
            i += 1
        block = lines[start:i]
        where = f"line {start + 1} ({block[0].strip()[:60]!r})"
        if len(block) < 2 or not DELIMITER.match(block[1].strip()):
            problems.append(f"{where}: pipe lines without a delimiter row (|---|) under the header")
            continue
        counts = [len(cells(row)) for row in block]
        if len(set(counts)) != 1:
            problems.append(f"{where}: cells per row {counts} (header {counts[0]}, delimiter {counts[1]})")
        elif start not in parsed:
            problems.append(f"{where}: not parsed as a table (a blank line before it?)")
    return problems


def documents() -> list[tuple[str, str]]:
    """(name, markdown) for the README, each notebook's markdown cells and the deck."""
    docs = [("README.md", (ROOT / "README.md").read_text())]
    for source in builder.sources():
        for n, (kind, text) in enumerate(builder.read_cells(source)):
            if kind == "markdown" and "|" in text:
                docs.append((f"{source.name} markdown cell {n}", text))
    docs.append(("slides/slides.md", (ROOT / "slides" / "slides.md").read_text()))
    return docs


@pytest.mark.parametrize(("name", "text"), documents(), ids=[name for name, _ in documents()])
def test_every_table_renders(name, text):
    assert not table_problems(text), f"{name}: " + "; ".join(table_problems(text))


def test_there_are_tables_to_check():
    assert sum(text.count("\n|---") + text.count("\n| ---") for _, text in documents()) >= 3


def test_the_checker_finds_what_github_would_not_render():
    good = "text\n\n| a | b |\n|---|:-:|\n| 1 | `x \\| y` |\n"
    assert table_problems(good) == []
    assert "cells per row [3, 4, 3]" in table_problems("| a | b | c |\n|---|---|---|---|\n| 1 | 2 | 3 |\n")[0]
    assert "cells per row [2, 2, 3]" in table_problems("| a | b |\n|---|---|\n| `x | y` | 2 |\n")[0]
    assert "without a delimiter" in table_problems("| a | b |\n| 1 | 2 |\n")[0]
    assert table_problems("```\n| a | b |\n|---|\n```\n\n    | a |\n    |---|---|\n") == []  # code, not tables
