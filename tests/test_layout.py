"""The package's four rooms, and which way imports go between them.

``gpufeed.data`` (the library a learner takes home) imports neither ``gpufeed.measure`` nor
``gpufeed.course`` nor a plotting library; ``gpufeed.measure`` never imports ``gpufeed.course``;
``gpufeed.simcuda`` (the CUDA-ordering simulator) imports nothing else of ``gpufeed``, and no test
of the library runs it from ``gpufeed.course``.
Checked on the source (every import statement, at any depth) and in a fresh interpreter (what
importing the library actually loads).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "gpufeed"
#: room -> the roots its modules must never import
FORBIDDEN = {
    "data": ("gpufeed.measure", "gpufeed.course", "gpufeed.config", "gpufeed.cli", "matplotlib", "ipywidgets"),
    "measure": ("gpufeed.course", "gpufeed.cli"),
    "simcuda": ("gpufeed.data", "gpufeed.measure", "gpufeed.course", "gpufeed.config", "gpufeed.cli", "matplotlib",
                "ipywidgets"),
}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in ``path`` names (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = ".".join(("gpufeed", *path.relative_to(PKG).parent.parts)) if path.is_relative_to(PKG) else ""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def violations(room: str) -> list[str]:
    bad = []
    for path in sorted((PKG / room).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[room]):
                bad.append(f"{path.relative_to(PKG)} imports {name}")
    return bad


def test_simcuda_imports_nothing_else_of_gpufeed():
    """Every sibling of simcuda is forbidden to it: a new room added beside it is too."""
    others = {f"gpufeed.{p.stem}" for p in PKG.iterdir() if p.stem not in ("simcuda", "__init__", "__main__", "__pycache__")}
    assert others <= set(FORBIDDEN["simcuda"]), sorted(others - set(FORBIDDEN["simcuda"]))


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_imports_go_one_way(room):
    assert violations(room) == []


def test_the_check_finds_a_forbidden_import(tmp_path, monkeypatch):
    fake = tmp_path / "gpufeed"
    (fake / "data").mkdir(parents=True)
    (fake / "data" / "bad.py").write_text("def f():\n    from gpufeed.course import ladder\n    import matplotlib.pyplot\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    assert violations("data") == ["data/bad.py imports gpufeed.course", "data/bad.py imports gpufeed.course.ladder",
                                  "data/bad.py imports matplotlib.pyplot"]


def test_every_module_lives_in_a_room():
    loose = sorted(p.name for p in PKG.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py", "config.py"]
    rooms = __import__("gpufeed")._MODULES
    assert rooms == {"data", "measure", "simcuda", "course", "cli", "config"}
    for room in ("data", "measure", "course"):
        listed = __import__(f"gpufeed.{room}", fromlist=["_MODULES"])._MODULES
        packages = {p.parent.name for p in (PKG / room).glob("*/__init__.py")}
        assert listed == {p.stem for p in (PKG / room).glob("*.py")} - {"__init__"} | packages, f"gpufeed.{room}._MODULES"


def test_importing_the_whole_library_loads_no_other_room():
    code = ("import importlib, pkgutil, sys, gpufeed.data as d\n"
            "for m in pkgutil.iter_modules(d.__path__):\n"
            "    importlib.import_module('gpufeed.data.' + m.name)\n"
            "bad = sorted(n for n in sys.modules if n.startswith(('gpufeed.measure', 'gpufeed.course', 'matplotlib')))\n"
            "print(bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_no_test_of_the_library_imports_the_course():
    """The library's tests (``test_<module>.py`` of a ``gpufeed.data`` module, and its CUDA paths)
    run the library under ``gpufeed.simcuda``, never through the lessons' plumbing."""
    tests = Path(__file__).resolve().parent
    library = [tests / f"test_{p.stem}.py" for p in (PKG / "data").glob("*.py")] + [tests / "test_cuda_paths.py",
                                                                                   tests / "conftest.py"]
    bad = [f"{path.name} imports {name}" for path in sorted(p for p in library if p.is_file())
           for name in sorted(imported_modules(path)) if name.startswith("gpufeed.course")]
    assert bad == []


NOTEBOOKS = PKG.parents[1] / "notebooks"


def taught_in(path: Path) -> list[str]:
    """The lessons (``"08"``) that a module's docstring says teach it: every ``notebooks/NN_...``
    in its sentence that starts with "Taught in"."""
    doc = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
    at = doc.find("Taught in")
    sentence = re.split(r"\.(?:\s|$)", doc[at:], maxsplit=1)[0] if at >= 0 else ""
    return re.findall(r"notebooks/(\d\d)", sentence)


def lesson_imports() -> dict[str, set[str]]:
    """Lesson number -> every module its notebook's source imports (``from x import y``: x and x.y)."""
    return {p.name[:2]: imported_modules(p) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))}


def stale_taught_in() -> list[str]:
    """Course modules whose "Taught in" line names a lesson that does not import them (nor, for a
    module in a lesson's folder, anything of that folder), and lesson folders that name none."""
    lessons, bad = lesson_imports(), []
    for path in sorted((PKG / "course").rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        folder = path.parent if path.parent.name.startswith("lesson") else None
        named = taught_in(path) or (taught_in(folder / "__init__.py") if folder else [])
        if folder and folder.name.removeprefix("lesson") not in named:
            bad.append(f"{module}: in {folder.name}/ but taught in {named or 'no lesson'}")
        scope = ".".join(rel.parts[:3]) if folder else module  # a lesson's folder, or the module itself
        for lesson in named:
            if not any(n == scope or n.startswith(scope + ".") for n in lessons.get(lesson, ())):
                bad.append(f"{module}: taught in lesson {lesson}, which does not import it")
    return bad


def test_every_taught_in_line_names_a_lesson_that_imports_the_module():
    assert stale_taught_in() == []


def test_the_taught_in_check_finds_a_stale_line(tmp_path, monkeypatch):
    fake = tmp_path / "src" / "gpufeed"
    (fake / "course" / "lesson05").mkdir(parents=True)
    (fake / "course" / "lesson05" / "__init__.py").write_text('"""Taught in ``notebooks/05_memmap.ipynb``."""\n')
    (fake / "course" / "lesson05" / "helper.py").write_text('"""A helper."""\n')
    (fake / "course" / "shared.py").write_text('"""Taught in ``notebooks/03_dtypes.ipynb``; also 05."""\n')
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "05_memmap.py").write_text("from gpufeed.course.lesson05 import helper\n")
    (tmp_path / "notebooks" / "03_dtypes.py").write_text("import torch\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    monkeypatch.setattr(sys.modules[__name__], "NOTEBOOKS", tmp_path / "notebooks")
    assert stale_taught_in() == ["gpufeed.course.shared: taught in lesson 03, which does not import it"]
    (tmp_path / "notebooks" / "05_memmap.py").write_text("import gpufeed\n")
    assert stale_taught_in() == ["gpufeed.course.lesson05: taught in lesson 05, which does not import it",
                                 "gpufeed.course.lesson05.helper: taught in lesson 05, which does not import it",
                                 "gpufeed.course.shared: taught in lesson 03, which does not import it"]


def import_circles() -> list[list[str]]:
    """Groups of gpufeed modules that import each other, directly or around a circle, at any depth
    of the file (a function-level import counts: it is the same dependency, paid later)."""
    mods = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    graph = {m: {n for n in imported_modules(p) if n in mods and not (m + ".").startswith(n + ".")
                 and not n.startswith(m + ".")} for m, p in mods.items()}  # a package and its own modules: no edge
    reach = {m: set() for m in graph}
    for m in graph:  # modules reachable from m (a few hundred edges: a plain search is enough)
        todo = list(graph[m])
        while todo:
            n = todo.pop()
            if n not in reach[m]:
                reach[m].add(n)
                todo += graph[n]
    circles = {frozenset([m, *(n for n in reach[m] if m in reach[n])]) for m in graph if m in reach[m]}
    return sorted(sorted(c) for c in circles)


def test_no_module_imports_one_that_imports_it_back():
    assert import_circles() == []
