"""Every ordering call in the library is needed, and the tests would notice it gone.

For each ``wait_stream``, ``wait_event``, ``record_stream``, ``synchronize`` and event ``record`` call in
``src/gpufeed/data``, however it is written (a statement of its own, or inside an expression, a
comprehension, a lambda, a conditional expression, a chain of calls), a copy of the package with
that one call replaced by ``(None)`` (what each of them returns) must fail the CUDA-path tests under
the simulator (``tests/test_cuda_paths.py`` and the ``cuda`` tests of the library's own test files,
marker ``simcuda``). A deletion that fails nothing would be a call the library does not need, or a
path no test covers.

Besides deletions, :data:`WRONG_PREFETCHERS` are plausible wrong versions of
``CudaPrefetcher`` that keep every call (issue 47): each must fail the same suite too.
"""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDERING = {"wait_stream", "wait_event", "record_stream", "synchronize", "record"}
SUITE = ["tests/test_cuda_paths.py", "tests/test_prefetch.py", "tests/test_image_loader.py", "tests/test_loader.py"]
#: The tests of SUITE that catch a deleted ordering call soonest, run first, in this order
#: (``tests/mutant_run.py``): each mutant of 2026-11-27 failed one of these, so a run stops after a
#: dozen tests instead of 100 or more. The rest of SUITE runs after them, so a mutant they miss still
#: meets the whole suite: the order changes how soon a mutant fails, never whether.
RUN_FIRST = [
    "tests/test_cuda_paths.py::test_image_loader_batches_read_later_are_the_cpus[simcuda0-",
    "tests/test_cuda_paths.py::test_fast_loader_on_cuda_with_a_pinned_ring_read_later[simcuda0-",
    "tests/test_cuda_paths.py::test_fast_loader_pinned_ring_waits_for_the_consumers_copies[simcuda0-",
    "tests/test_cuda_paths.py::test_cuda_prefetcher_inputs_already_on_the_gpu_are_waited_for_and_kept_alive[simcuda0]",
    "tests/test_prefetch.py::test_cuda_prefetcher_fed_while_a_long_kernel_holds_the_current_stream_gives_the_cpu_values[simcuda0]",
    "tests/test_prefetch.py::test_device_memory_stays_bounded_in_a_loop_that_never_syncs[0]",
]


def calls_in(source: str) -> list[tuple[int, int, int, int, str]]:
    """``(line, column, end line, end column, source)`` of every ordering call in ``source``, as
    the parser places it (columns in UTF-8 bytes), wherever it sits in the code."""
    return sorted((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, ast.get_source_segment(source, node))
                  for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ORDERING)


def deleted(source: str, line: int, col: int, end_line: int, end_col: int) -> str:
    """``source`` with the call at that place replaced by ``(None)``: still valid code, and the
    value each ordering call returns."""
    lines = source.encode().splitlines(keepends=True)
    head, tail = lines[line - 1][:col], lines[end_line - 1][end_col:]
    return b"".join([*lines[:line - 1], head, b"(None)", tail, *lines[end_line:]]).decode()


def ordering_calls() -> list[tuple[str, int, int, int, int, str]]:
    """``(file, line, column, end line, end column, source)`` of every ordering call in
    ``src/gpufeed/data``."""
    return [(path.name, *call) for path in sorted((ROOT / "src" / "gpufeed" / "data").glob("*.py"))
            for call in calls_in(path.read_text())]


def test_every_ordering_call_is_found_and_deleted_however_it_is_written():
    source = """
def f(streams, events, xs, side, current, pick):
    current.wait_stream(side)
    done = [e.record(s) for e, s in zip(events, streams)]
    later = lambda t: t.record_stream(current)
    y = current.wait_event(events[0]) if pick else torch.cuda.synchronize()
    z = (side.wait_stream(
        current), 'é', events[1].record(side))
    return side.record_stream(current).x, later, done, y, z
"""
    found = calls_in(source)
    assert [call[-1].split("(")[0].rsplit(".", 1)[-1] for call in found] == [
        "wait_stream", "record", "record_stream", "wait_event", "synchronize", "wait_stream", "record", "record_stream"]
    for call in found:
        without = deleted(source, *call[:4])
        ast.parse(without)  # still valid code
        left = sorted(c[-1] for c in calls_in(without))
        assert left == sorted(c[-1] for c in found if c is not call), call  # that one call gone, and only it
        assert without.count("(None)") == 1


def test_the_library_has_the_ordering_calls_this_file_checks():
    names = {call[-1].split("(")[0].rsplit(".", 1)[-1] for call in ordering_calls()}
    assert names == ORDERING, "a kind of ordering call appeared or went: update ORDERING"


#: Wrong versions of ``src/gpufeed/data/prefetch.py`` that delete no ordering call, as
#: ``{name: ([(text, replacement), ...], tests that catch it, run first)}``: each text occurs once.
WRONG_PREFETCHERS = {
    # the event a pass's side stream waits for, recorded once when the prefetcher is made, not at
    # each iter(): the loop's work between the two goes unordered (every test used to make a new
    # prefetcher per pass, which hid it)
    "inputs_made recorded in __init__": ([
        ("        inputs_made = torch.cuda.Event()\n"
         "        inputs_made.record(torch.cuda.current_stream(self.device))\n"
         "        self.stream.wait_event(inputs_made)\n",
         "        self.stream.wait_event(self._inputs_made)\n"),
        ("        self._last_close: torch.cuda.Event | None = None  # the last pass's last release\n",
         "        self._last_close: torch.cuda.Event | None = None  # the last pass's last release\n"
         "        self._inputs_made = torch.cuda.Event()\n"
         "        self._inputs_made.record(torch.cuda.current_stream(self.device))\n"),
    ], ["tests/test_cuda_paths.py::test_cuda_prefetcher_loader_kernels_read_what_your_loop_wrote_before_iter[simcuda0]"]),
    # a pass's first batch no longer waits for the last pass's release
    "the cross-pass after event deleted": ([
        ("_Ring(self.depth + 2, self._last_close)", "_Ring(self.depth + 2, None)"),
    ], ["tests/test_prefetch.py::test_device_memory_stays_bounded_across_many_short_passes_of_a_loop_that_never_syncs[0]"]),
    "a ring one slot larger": ([
        ("_Ring(self.depth + 2, self._last_close)", "_Ring(self.depth + 3, self._last_close)"),
    ], ["tests/test_prefetch.py::test_the_thread_makes_batch_k_once_your_stream_is_done_with_batch_k_minus_depth_minus_2[1]"]),
    # the consumer's thread waits for the batch on the host (no sync-debug mode reports a poll)
    "a consumer spinning on done.query()": ([
        ("        current.wait_event(done)\n", "        while not done.query():\n            pass\n"),
    ], ["tests/test_prefetch.py::test_the_loop_never_waits_on_the_host_the_producer_thread_does[0]"]),
}


def mutant_copy(tmp_path: Path) -> Path:
    """A copy of the package under ``tmp_path / "src"`` for one mutant."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "gpufeed", src / "gpufeed", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "gpufeed" / "measure" / "_photos").symlink_to(ROOT / "assets" / "photos")  # where a wheel has them
    return src


@pytest.fixture(scope="module")
def mutant_server():
    """``tests/mutant_server.py``: one process per test worker that runs each mutant's suite in a
    forked child. Yields a function ``(src, log) -> pytest's exit code``."""
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "mutant_server.py")], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    args = [*SUITE, "-m", "simcuda", "-x", "-q", "-p", "no:cacheprovider", "-p", "mutant_run", "--no-header",
            "-o", "addopts=", "--rootdir", str(ROOT)]

    def run(src: Path, log: Path, first: list[str] = RUN_FIRST) -> int:
        # only the plugins named in args: the installed ones (nbmake, xdist...) are not needed here,
        # and nbmake's import alone cost each run 3 s (jsonschema compiles its format grammars)
        env = {"GPUFEED_MUTANT_SRC": str(src), "GPUFEED_RUN_FIRST": "\n".join(first),
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        server.stdin.write(json.dumps({"src": str(src), "env": env, "args": args, "log": str(log)}) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        assert answer, f"the mutant server died (exit {server.poll()})"
        return json.loads(answer)["exit"]

    yield run
    server.stdin.close()
    server.wait(timeout=60)


@pytest.mark.simcuda
@pytest.mark.slow
@pytest.mark.parametrize(("file", "line", "col", "end_line", "end_col", "source"), ordering_calls(),
                         ids=lambda v: str(v))
def test_deleting_one_ordering_call_fails_a_cuda_path_test(tmp_path, mutant_server, file, line, col, end_line, end_col,
                                                           source):
    src = mutant_copy(tmp_path)
    target = src / "gpufeed" / "data" / file
    text = target.read_text()
    assert (line, col, end_line, end_col, source) in calls_in(text)
    target.write_text(deleted(text, line, col, end_line, end_col))
    exit_code = mutant_server(src, tmp_path / "run.log")
    out = (tmp_path / "run.log").read_text()
    assert exit_code == 1, f"deleting {source} ({file}:{line}) failed no test (exit {exit_code}):\n{out[-4000:]}"
    assert "FAILED" in out, out[-3000:]  # a test failed (not only a fixture's setup)


@pytest.mark.simcuda
@pytest.mark.slow
@pytest.mark.parametrize("name", list(WRONG_PREFETCHERS))
def test_each_wrong_prefetcher_fails_a_cuda_path_test(tmp_path, mutant_server, name):
    edits, first = WRONG_PREFETCHERS[name]
    src = mutant_copy(tmp_path)
    target = src / "gpufeed" / "data" / "prefetch.py"
    text = target.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{name}: the text to change is not in prefetch.py once: {old!r}"
        text = text.replace(old, new)
    ast.parse(text)
    target.write_text(text)
    exit_code = mutant_server(src, tmp_path / "run.log", first)
    out = (tmp_path / "run.log").read_text()
    assert exit_code == 1, f"the wrong prefetcher ({name}) failed no test (exit {exit_code}):\n{out[-4000:]}"
    assert f"FAILED {first[0]}" in out, out[-3000:]  # the test written for it, not another one
