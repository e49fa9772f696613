"""Every ordering call in the library is needed, and the tests would notice it gone.

For each ``wait_stream``, ``wait_event``, ``record_stream``, ``synchronize`` and event ``record`` call in
``src/gpufeed/data``, a copy of the package without that one call must fail the CUDA-path tests
under the simulator (``tests/test_cuda_paths.py`` and the ``cuda`` tests of the library's own
test files, marker ``simcuda``). A deletion that fails nothing would be a call the library does not
need, or a path no test covers.
"""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDERING = {"wait_stream", "wait_event", "record_stream", "synchronize", "record"}
SUITE = ["tests/test_cuda_paths.py", "tests/test_prefetch.py", "tests/test_image_loader.py", "tests/test_loader.py"]


def ordering_calls() -> list[tuple[str, int, str]]:
    """``(file, line, source)`` of every ordering call that is a statement of its own."""
    found = []
    for path in sorted((ROOT / "src" / "gpufeed" / "data").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in ORDERING):
                found.append((path.name, node.lineno, ast.unparse(node)))
    return found


def test_the_library_has_the_ordering_calls_this_file_checks():
    names = {source.split("(")[0].rsplit(".", 1)[-1] for _, _, source in ordering_calls()}
    assert names == ORDERING, "a kind of ordering call appeared or went: update ORDERING"


@pytest.mark.simcuda
@pytest.mark.slow
@pytest.mark.parametrize(("file", "line", "source"), ordering_calls(), ids=lambda v: str(v))
def test_deleting_one_ordering_call_fails_a_cuda_path_test(tmp_path, file, line, source):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "gpufeed", src / "gpufeed", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "gpufeed" / "measure" / "_photos").symlink_to(ROOT / "assets" / "photos")  # where a wheel has them
    target = src / "gpufeed" / "data" / file
    lines = target.read_text().splitlines(keepends=True)
    indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
    assert source.split("(")[0] in lines[line - 1]
    lines[line - 1] = f"{indent}pass  # deleted: {source}\n"
    target.write_text("".join(lines))
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import gpufeed.data; print(gpufeed.data.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(src)), f"the copy was not the one imported: {where}"
    run = subprocess.run([sys.executable, "-m", "pytest", *SUITE, "-m", "simcuda", "-x", "-q", "-p", "no:cacheprovider",
                          "--no-header", "-o", "addopts="], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 1, f"deleting {source} ({file}:{line}) failed no test:\n{run.stdout[-3000:]}"
    assert "FAILED" in run.stdout, run.stdout[-3000:]  # a test failed (not only a fixture's setup)
