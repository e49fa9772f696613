"""Bad input, interrupted work and faults: what a learner's own folder and laptop throw at the course.

The inputs come from tests/badimages.py; the README's "Bad input" table lists each with the
behaviour these tests check.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from badimages import CASES, make_folder, photo
from PIL import Image

from gpufeed import cli
from gpufeed.data import folder, memmap
from gpufeed.data.folder import BadImageError, ImageFolderDataset, load_image, scan, to_rgb
from gpufeed.data.memmap import MemmapError, build_memmap, load_memmap
from gpufeed.measure.synth import synth_folder

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ERRORS = sorted(c.name for c in CASES if c.expect == "error")


@pytest.fixture(scope="module")
def bad_folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("bad") / "images")


@pytest.fixture
def locked_is_unreadable(monkeypatch, bad_folder):
    """Root reads a mode-000 file anyway: play the permission error it would give anyone else."""
    if not IS_ROOT:
        return
    real_open = builtins.open
    locked = str(bad_folder / "class_b" / "locked.jpg")

    def guarded(file, *a, **kw):
        if str(file) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return real_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", guarded)


# --- bad images: the folder dataset -----------------------------------------------------------

def test_the_folder_scan_ignores_hidden_files(bad_folder):
    samples, classes = scan(bad_folder)
    names = {Path(p).name for p, _ in samples}
    assert classes == ["class_a", "class_b"]
    for case in CASES:
        assert (case.name in names) == (case.expect != "ignore"), case.name


@pytest.mark.parametrize("case", [c for c in CASES if c.expect == "convert"], ids=lambda c: c.name)
def test_convertible_images_are_read_as_a_person_sees_them(bad_folder, case):
    path = bad_folder / "class_b" / case.name
    with Image.open(path) as im:
        rgb = to_rgb(im)
    assert rgb.mode == "RGB" and rgb.size == case.size  # EXIF rotation applied: 96x64 became 64x96
    out = load_image(path, (32, 32))
    assert out.shape == (3, 32, 32) and out.dtype == torch.uint8


def test_conversions_keep_the_picture(bad_folder):
    ref = np.asarray(photo(), dtype=np.float32)  # [64, 96, 3], what every convertible case shows
    grey = ref.mean(axis=2)

    def read(name):
        with Image.open(bad_folder / "class_b" / name) as im:
            return np.asarray(to_rgb(im), dtype=np.float32)

    assert np.abs(read("cmyk.jpg") - ref).mean() < 12  # CMYK round trip + JPEG: close, not exact
    assert np.abs(read("rgba.png") - ref).mean() < 1  # alpha dropped, colours kept
    g = read("gray.jpg")
    assert np.array_equal(g[..., 0], g[..., 2]) and np.abs(g[..., 0] - grey).mean() < 8
    deep = read("deep.png")  # 16-bit: scaled to 8 bits, not clipped to white
    assert np.abs(deep[..., 0] - grey).mean() < 8 and deep.mean() < 250
    rotated = read("rotated.jpg")  # orientation 6: the stored image turned 90 degrees clockwise
    assert np.abs(rotated - np.rot90(ref, k=-1)).mean() < 8


@pytest.mark.parametrize("name", ERRORS)
def test_unreadable_images_name_the_file_and_say_what_to_do(bad_folder, locked_is_unreadable, name):
    path = bad_folder / "class_b" / name
    with pytest.raises(BadImageError) as e:
        load_image(path, (32, 32))
    assert e.value.path == str(path) and str(path) in str(e.value)
    assert "replace or remove the file" in str(e.value) and "--skip-bad" in str(e.value)


def test_a_bad_image_in_a_dataloader_worker_reaches_the_learner(bad_folder):
    ds = ImageFolderDataset(bad_folder, (32, 32))
    bad_index = next(i for i, (p, _) in enumerate(ds.samples) if p.endswith("empty.jpg"))
    subset = torch.utils.data.Subset(ds, [0, bad_index])
    loader = torch.utils.data.DataLoader(subset, batch_size=1, num_workers=2)
    with pytest.raises(Exception) as e:
        list(loader)
    text = str(e.value)
    assert "BadImageError" in text and "Original Traceback" in text  # the worker's own traceback
    assert "empty.jpg" in text and "load_image" in text


def test_bad_image_errors_survive_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(BadImageError("/x/y.jpg", "truncated")))
    assert err.path == "/x/y.jpg" and "y.jpg" in str(err)


# --- bad images: the memmap builder -----------------------------------------------------------

def test_memmap_build_stops_at_the_first_bad_file(bad_folder, tmp_path, capsys):
    # In process (``python -m gpufeed`` is ``sys.exit(main())``): a fresh interpreter cost 4 s of imports.
    status = cli.main(["data", "memmap", str(bad_folder), str(tmp_path / "mm"), "--size", "32x32", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: cannot read image ")
    assert "empty.jpg" in err and "--skip-bad" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_memmap_skip_bad_skips_and_reports(bad_folder, locked_is_unreadable, tmp_path):
    result = build_memmap(bad_folder, tmp_path / "mm", (32, 32), skip_bad=True, progress=False)
    skipped = sorted(Path(s["path"]).name for s in result.skipped)
    assert skipped == ERRORS
    data = load_memmap(tmp_path / "mm")
    converts = [c for c in CASES if c.expect == "convert"]
    assert len(data) == 4 + len(converts)  # the good ones, and every convertible one
    assert data.images.shape[1:] == (3, 32, 32)  # mixed sizes, one size in the memmap
    manifest = memmap.read_manifest(tmp_path / "mm")
    assert sorted(Path(s["path"]).name for s in manifest["skipped"]) == ERRORS
    # The rows equal the folder dataset's, in order, bad files left out.
    good = [(p, t) for p, t in scan(bad_folder)[0] if Path(p).name not in ERRORS]
    for row, (path, target) in enumerate(good):
        assert torch.equal(data.images[row], load_image(path, (32, 32))), path
        assert data.targets[row].item() == target


def test_cli_skip_bad_says_how_many_and_which(bad_folder, tmp_path, capsys):
    assert cli.main(["data", "memmap", str(bad_folder), str(tmp_path / "mm"), "--size", "32x32", "--skip-bad",
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    expected = [n for n in ERRORS if not (IS_ROOT and n == "locked.jpg")]  # root can read it
    assert re.search(rf"skipped {len(expected)}\b", out), out
    for name in expected:
        assert name in out


# --- interrupted and failed work --------------------------------------------------------------

def _kill_at(point: str):
    """Patches the build so that the process SIGKILLs itself at ``point``."""
    from gpufeed.data import staging

    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "start":
        staging.check_space = die
    elif point == "fill":
        real, calls = memmap.ImageData.__setitem__, []

        def setitem(self, key, value):
            calls.append(1)
            if len(calls) == 2:  # one batch written, the second under way
                die()
            return real(self, key, value)

        memmap.ImageData.__setitem__ = setitem
    elif point == "sync":
        memmap._sync = die
    elif point == "rename":
        staging.replace_folder = die


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    return synth_folder(tmp_path_factory.mktemp("src") / "jpeg", n=40, size=(48, 40), classes=3, progress=False).path


@pytest.mark.parametrize("point", ["start", "fill", "sync", "rename"])
def test_a_killed_build_leaves_nothing_that_loads_and_the_next_starts_clean(jpegs, tmp_path, point, capsys):
    dst = tmp_path / "mm"
    pid = os.fork()  # a child process that dies by SIGKILL at `point` (fork: no re-import of torch)
    if pid == 0:
        try:
            _kill_at(point)
            build_memmap(jpegs, dst, (32, 32), progress=False, batch_size=8)
        finally:
            os._exit(3)  # only reached if the kill did not happen
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    with pytest.raises(MemmapError):
        load_memmap(dst)
    leftovers = list(tmp_path.glob(".mm.partial-*"))
    assert (len(leftovers) == 1) == (point != "start")
    assert cli.main(["data", "memmap", str(jpegs), str(dst), "--size", "32x32", "--no-progress"]) == 0
    if point != "start":
        err = capsys.readouterr().err
        assert "was interrupted; removed its leftovers" in err and "starting clean" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mm"]
    data = load_memmap(dst)
    assert len(data) == 40 and torch.equal(data.images[39], load_image(sorted(scan(jpegs)[0])[39][0], (32, 32)))


def test_destination_problems_are_one_line_errors(jpegs, tmp_path, monkeypatch, capsys):
    def run(*args):
        status = cli.main(["data", "memmap", str(jpegs), *args, "--size", "32x32", "--no-progress"])
        return status, capsys.readouterr().err

    readonly = run("/proc/gpufeed-test/mm")  # refuses new folders even to root
    monkeypatch.setenv("GPUFEED_FREE_BYTES_LIMIT", "1000")
    small = run(str(tmp_path / "small"))
    monkeypatch.delenv("GPUFEED_FREE_BYTES_LIMIT")
    assert run(str(tmp_path / "mm"))[0] == 0
    exists = run(str(tmp_path / "mm"))
    for (status, err), words in ((readonly, "cannot"), (small, "not enough disk space"), (exists, "pass --overwrite")):
        assert status == 2 and err.startswith("error: ") and words in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "small").exists()
    assert run(str(tmp_path / "mm"), "--overwrite")[0] == 0


# --- nothing from outside ---------------------------------------------------------------------

def test_the_network_is_blocked_in_tests():
    import socket

    with pytest.raises(OSError):
        socket.create_connection(("198.51.100.1", 443), timeout=2)  # TEST-NET-2: never routable
    with pytest.raises(OSError):
        socket.create_connection(("pypi.org", 443), timeout=2)
    if os.environ.get("GPUFEED_OFFLINE") == "1":  # `make test` runs pytest in a network namespace
        r = subprocess.run([sys.executable, "-c", "import socket; socket.create_connection(('pypi.org', 443), timeout=2)"],
                           capture_output=True, text=True)
        assert r.returncode != 0, "a child process could reach the network"


def _python_sources():
    for base in ("src", "tests", "tools", "notebooks"):
        yield from (ROOT / base).rglob("*.py")


def unsafe_loads(text: str) -> list[int]:
    """Lines of ``torch.load(...)`` calls in ``text`` (Python code: prose that names the call is not
    one) that do not pass ``weights_only=True``."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                       for k in node.keywords)
            if not safe:
                lines.append(node.lineno)
    return lines


def test_the_unsafe_load_check_sees_calls_not_prose():
    assert unsafe_loads("import torch\nx = torch.load(f, map_location='cpu')\n") == [2]
    assert unsafe_loads("# `torch.load(f)` in prose\ny = torch.load(f, weights_only=True)\n") == []
    assert unsafe_loads("z = torch.load(f, weights_only=False)\n") == [1]


def test_no_unsafe_loading_or_shells():
    for path in _python_sources():
        if path.name == "test_reliability.py":
            continue
        text = path.read_text()
        assert unsafe_loads(text) == [], f"{path}: torch.load without weights_only=True on lines {unsafe_loads(text)}"
        assert "shell=True" not in text, f"{path}: a subprocess with a shell"
        assert not re.search(r"\bos\.(system|popen)\(", text), f"{path}: os.system/os.popen runs a shell"


#: Paths this process opened for writing, created, renamed or removed while :func:`writes` records;
#: an audit hook cannot be removed once added, so one hook for the session, recording only then.
_WRITES: list[str] | None = None
_HOOKED: list = []
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.mkdir": 0, "os.rename": 1, "os.remove": 0, "os.rmdir": 0, "os.symlink": 1, "os.link": 1,
                "os.truncate": 0, "shutil.rmtree": 0, "shutil.copyfile": 1}  # event -> where its target path is


def _audit(event: str, args: tuple) -> None:
    if _WRITES is None:
        return
    if event == "open":
        path, mode, flags = args
        writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)
        target = path if writing else None
    else:
        target = args[_PATH_EVENTS[event]] if event in _PATH_EVENTS else None
    if isinstance(target, (str, bytes, os.PathLike)):
        _WRITES.append(os.path.abspath(os.fsdecode(target)))


@contextlib.contextmanager
def writes():
    """Records every path this process writes while inside (PEP 578 audit events: ``open`` for
    writing, ``os.mkdir``, ``os.rename``...): writes anywhere on the machine, not only where a
    test looks afterwards. Child processes are not seen; the folder scan after the run covers them."""
    global _WRITES
    if _audit not in _HOOKED:  # added on first use, so a session that never records pays nothing
        sys.addaudithook(_audit)
        _HOOKED.append(_audit)
    _WRITES = []
    try:
        yield _WRITES
    finally:
        _WRITES = None


def test_the_write_audit_sees_writes_and_not_reads(tmp_path):
    (tmp_path / "old").write_text("1")
    with writes() as written:
        (tmp_path / "x").write_text("1")
        os.mkdir(tmp_path / "d")
        (tmp_path / "old").read_text()
        os.replace(tmp_path / "x", tmp_path / "d" / "y")
    assert written == [str(tmp_path / "x"), str(tmp_path / "d"), str(tmp_path / "d" / "y")]


def test_generated_files_stay_in_the_chosen_folders(tmp_path, monkeypatch):
    """The commands write only into the folders they are given: nothing in the working directory
    or the home folder (matplotlib's own font cache aside). ``bench`` at the tiny size runs the same
    writers (dataset, memmap, results, plots) as ``--quick`` in seconds instead of minutes."""
    home, cache, out, cwd = (tmp_path / d for d in ("home", "cache", "out", "cwd"))
    for d in (home, cwd):
        d.mkdir()
    for name, value in (("HOME", home), ("GPUFEED_CACHE", cache), ("XDG_CACHE_HOME", home / ".cache"),
                        ("GPUFEED_RESULTS", out / "results")):
        monkeypatch.setenv(name, str(value))
    monkeypatch.chdir(cwd)
    with writes() as written:
        for cmd in (["data", "synth", "--n", "8", "--size", "64x48", "--out", str(out / "jpeg"), "--no-progress"],
                    ["data", "memmap", str(out / "jpeg"), str(out / "mm"), "--size", "32x32", "--no-progress"],
                    ["bench", "--quick", "--size", "tiny", "--repeats", "1", "--device", "cpu"]):
            assert cli.main(cmd) == 0, cmd
    theirs = home / ".cache" / "matplotlib"  # matplotlib's own font cache, not ours
    assert list(cwd.iterdir()) == []
    assert all(p in (home / ".cache", theirs) or theirs in p.parents for p in home.rglob("*"))
    for path in tmp_path.rglob("*"):
        assert any(path == a or a in path.parents for a in (cache, out, home, cwd)), path
    inside = lambda w, roots: any(Path(w) == a or a in Path(w).parents for a in roots)  # noqa: E731
    stray = sorted({w for w in written if not inside(w, (cache, out, theirs)) and w not in (str(home / ".cache"), os.devnull)})
    assert written and not stray, f"written outside the chosen folders: {stray}"
    assert (out / "results").is_dir() and (cache / "bench").is_dir()


# --- the README documents every case ------------------------------------------------------------

def test_readme_lists_every_bad_input_with_its_behaviour():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Bad input"):]
    for case in CASES:
        row = next((line for line in section.splitlines() if line.startswith(f"| {case.what} |")), None)
        assert row is not None, f"README's bad-input table has no row for: {case.what}"
        word = {"convert": "converted", "error": "error", "ignore": "ignored"}[case.expect]
        assert word in row.lower(), row


def test_manifest_records_what_was_skipped(bad_folder, tmp_path):
    build_memmap(bad_folder, tmp_path / "mm", (16, 16), skip_bad=True, progress=False)
    manifest = json.loads((tmp_path / "mm" / memmap.MANIFEST).read_text())
    assert all({"path", "error"} <= set(s) for s in manifest["skipped"])
    assert folder.POLICY in manifest["policy"]


# --- bad images: the DALI reader -----------------------------------------------------------------

@pytest.mark.skipif(not __import__("gpufeed.measure.dali").measure.dali.available(), reason="NVIDIA DALI is not installed")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_dali_reader_converts_or_names_the_file(tmp_path, case):
    from badimages import write_case

    from gpufeed.measure import dali

    if case.name == "locked.jpg" and IS_ROOT:
        pytest.skip("root reads a mode-000 file; DALI's reader cannot be made to fail here")
    (tmp_path / "c").mkdir()
    for i in range(2):
        photo(96, 64, i).save(tmp_path / "c" / f"{i:03d}.jpg", quality=90)
    write_case(tmp_path / "c", case)
    expected = 2 + (case.expect != "ignore")
    pipe = dali.eval_pipeline(tmp_path, (32, 32), batch_size=expected)
    if case.expect == "error":
        with pytest.raises(RuntimeError) as e:
            pipe.run()
        if case.name != "notes.jpg":  # DALI names the file, except for a non-image (README says so)
            assert case.name in str(e.value)
        return
    images, labels = pipe.run()
    assert len(labels) == expected and images.as_array().shape == (expected, 3, 32, 32)
