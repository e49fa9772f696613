"""CONTRIBUTING.md, the map of the repository, stays true: every file it names exists, every module of
the library, the measure room and the simulator is on it, and the README points at it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAP = (ROOT / "CONTRIBUTING.md").read_text()
#: Backticked paths in the map: ``src/...``, ``tests/...``, ``tools/...``, ``notebooks/...``, ``results/...``.
NAMED = sorted(set(re.findall(r"`((?:src|tests|tools|notebooks|results)/[^`\s]+)`", MAP)))
#: A pattern, not a file: ``lessonNN``, ``NN_topic``, ``<gpu>``, ``test_<module>``.
PATTERN = re.compile(r"NN|<\w+>")


def test_the_map_names_files():
    assert len(NAMED) > 40, NAMED


@pytest.mark.parametrize("named", [n for n in NAMED if not PATTERN.search(n)])
def test_every_file_the_map_names_exists(named):
    assert (ROOT / named).exists(), f"CONTRIBUTING.md names {named}, which is not in the repository"


@pytest.mark.parametrize("room", ["data", "measure", "simcuda"])
def test_every_module_of_the_room_is_on_the_map(room):
    modules = sorted(p for p in (ROOT / "src" / "gpufeed" / room).glob("*.py") if p.name != "__init__.py")
    missing = [p.name for p in modules if f"`src/gpufeed/{room}/{p.name}`" not in MAP]
    assert not missing, f"CONTRIBUTING.md does not say what these hold: {missing}"


def test_the_readme_points_at_the_map_and_nothing_points_outside_the_repository():
    assert (ROOT / "src/gpufeed/course/lesson04/reading.py").exists()  # the map's worked example
    readme = (ROOT / "README.md").read_text()
    assert "CONTRIBUTING.md" in readme and "../shared" not in readme
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tools").rglob("*.py"), *(ROOT / "tests").glob("*.py")]:
        if path.name != "test_contributing.py":
            assert "DESIGN.md" not in path.read_text(), f"{path.relative_to(ROOT)} cites a file outside the repository"
